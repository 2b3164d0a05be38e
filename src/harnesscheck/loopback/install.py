"""`harnesscheck install-clis`: real CLIs, installed with npm into the cache dir the
loopback level finds by itself (harnesscheck.core.paths.cli_cache_dir()), each release in its
own directory `<cache>/<cli>@<version>/` so several live side by side.

By default: the pinned versions (`ProviderSpec.pinned_version` of every harness backend
that names an npm package) and the second columns the registry keeps verified beside them
(`registry.SECOND_COLUMNS`). `--backend B --version X|latest` installs one more release
(`latest` is asked of npm). `--check` says, per CLI, whether the pin is behind npm's
`latest` and whether this Node satisfies each release's `engines` (exit 1 when behind).
Idempotent: a release whose binary prints its version is not installed again. npm runs
with no install scripts, no audit, no funding notice and exact versions, at log level
`warn` (its engine warnings stay visible); then only the pinned packages' own postinstall
runs, explicitly (one puts its native binary in place). A CLI that would fetch packages of
its own at each session start (a plugin package into its config dir) gets them pre-installed
beside it (`runtime_deps`: its backend's `KitProfile.npm_runtime_deps`), so sessions never
reach a registry. A backend whose runtime is a Python package (`KitProfile.pip_runtime`) is
installed with pip (`install_pip_runtime`). What is installed for one backend is read from its
profile through the registry: this module names no CLI or agent (tests/test_layers.py).

A cache from before the side-by-side layout (`<cache>/node_modules/`) is still found for
the version it holds.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PinnedCli:
    backend: str
    cli_name: str
    package: str
    version: str

    @property
    def spec(self) -> str:
        return f"{self.package}@{self.version}"


def pinned_clis() -> list[PinnedCli]:
    """Every registered harness backend with an npm package and a pinned version, then every
    shipped ACP profile (`acp-<name>`) whose npm pin is not one of those already (an ACP agent
    that is a harness backend's CLI runs that pin; an ACP adapter is a package of its own)."""
    from harnesscheck.backends.acp.profile import PROFILE_DIR
    from harnesscheck.backends.registry import acp_spec, known_specs

    out = []
    specs = list(known_specs().values())
    specs += [acp_spec(f"acp-{stem}") for stem in sorted(path.stem for path in PROFILE_DIR.glob("*.toml"))]
    seen: set[tuple[str, str]] = set()
    for spec in specs:
        if spec.cli_package and spec.pinned_version and spec.cli_name and (spec.cli_package, spec.pinned_version) not in seen:
            seen.add((spec.cli_package, spec.pinned_version))
            out.append(PinnedCli(spec.id, spec.cli_name, spec.cli_package, spec.pinned_version))
    return out


@functools.cache
def manifest_versioned() -> frozenset[str]:
    """The CLIs (by cli_name) whose bin has no `--version` (an ACP profile's
    `install.prints_version = false`): their version is the installed package manifest's.
    Read once per process: the shipped profiles are the installed package's own files, and
    every loopback availability probe asks (parsing them each time was most of a collection)."""
    from harnesscheck.backends.acp.profile import PROFILE_DIR, load_profile

    names = set()
    for path in PROFILE_DIR.glob("*.toml"):
        profile = load_profile(path)
        if profile.install.bin and not profile.install.prints_version:
            names.add(Path(profile.install.bin).name)
    return frozenset(names)


def wanted_clis(backend: str | None = None, version: str | None = None) -> list[PinnedCli]:
    """What to install: the pins and second columns, or `version` of `backend`."""
    from harnesscheck.backends.registry import SECOND_COLUMNS, base_id

    pins = pinned_clis()
    if backend is not None and not any(c.backend == base_id(backend) for c in pins):
        pins = [*pins, *_shared_pin(base_id(backend), pins)]
    if version is None:
        chosen = [c for c in pins if backend is None or c.backend == base_id(backend)]
        extra = [PinnedCli(c.backend, c.cli_name, c.package, v) for c in chosen for v in SECOND_COLUMNS.get(c.backend, ())]
        return list(dict.fromkeys(chosen + extra))  # a second column equal to the pin is one release
    return [PinnedCli(c.backend, c.cli_name, c.package, version) for c in pins if c.backend == base_id(backend or "")]


def _shared_pin(backend: str, pins: list[PinnedCli]) -> list[PinnedCli]:
    """An ACP agent that runs a harness backend's pinned CLI (its profile's npm pin is that
    CLI's) has no pin of its own in pinned_clis(): it installs that pin, under its own id."""
    from harnesscheck.backends.registry import acp_spec
    from harnesscheck.core.contracts import ConfigError

    if not backend.startswith("acp-"):
        return []
    try:
        spec = acp_spec(backend)
    except ConfigError:  # an unknown agent has nothing to install
        return []
    return [PinnedCli(backend, c.cli_name, c.package, c.version) for c in pins if (c.package, c.version) == (spec.cli_package, spec.pinned_version)]


def profile_pinned_release(backend: str, version: str) -> str | None:
    """Why `--version` cannot serve an ACP agent, or None. A shipped ACP profile's command names
    its release's path (`{clis}/<cli>@<pin>/...`), so another release installed under its id
    would never run: refused, naming the way that does run one (a profile of your own)."""
    from harnesscheck.backends.registry import acp_spec, base_id
    from harnesscheck.core.contracts import ConfigError

    if not base_id(backend).startswith("acp-"):
        return None
    try:
        spec = acp_spec(base_id(backend))
    except ConfigError:
        return None
    if spec.pinned_version is None or spec.pinned_version == version:
        return None
    return (
        f"install-clis: {backend} runs the release its profile names ({spec.cli_package}@{spec.pinned_version}); "
        f"another release installed for it would never run\n"
        f"  fix: install it for its CLI (--backend <cli> --version {version}, where one is registered) or with npm, "
        f"then copy the profile, point its command at that release and select it with --backend acp:<file>.toml"
    )


def version_dir(dest: Path, cli_name: str, version: str) -> Path:
    """Where one release lives in the cache: `<dest>/<cli>@<version>`."""
    return Path(dest) / f"{cli_name}@{version}"


def release_prefix(dest: Path, c: PinnedCli) -> Path | None:
    """The npm prefix holding `c` at its version: its own directory, else a legacy cache
    root (`<dest>/node_modules/`) that holds that version; None when neither does."""
    for prefix in (version_dir(dest, c.cli_name, c.version), Path(dest)):
        if installed_version(prefix, c.package) == c.version and binary_path(prefix, c.cli_name).exists():
            return prefix
    return None


def installed_releases(dest: Path, cli_name: str, package: str) -> list[str]:
    """Every version of `package` in the cache (side-by-side dirs and a legacy root)."""
    found = {installed_version(Path(dest), package)}
    for sub in Path(dest).glob(f"{cli_name}@*"):
        found.add(installed_version(sub, package))
    from harnesscheck.backends.registry import parse_version

    return sorted((v for v in found if v), key=lambda v: parse_version(v) or (0, 0, 0))


def installed_version(dest: Path, package: str) -> str | None:
    """The version of `package` under dest/node_modules, or None."""
    manifest = Path(dest) / "node_modules" / package / "package.json"
    try:
        return str(json.loads(manifest.read_text(encoding="utf-8")).get("version") or "") or None
    except (OSError, ValueError):
        return None


def binary_path(dest: Path, cli_name: str) -> Path:
    return Path(dest) / "node_modules" / ".bin" / cli_name


def runs_at_version(dest: Path, c: PinnedCli) -> bool:
    """`<bin> --version` prints the pinned version (a placeholder binary left by a skipped
    postinstall prints nothing and exits 1)."""
    from harnesscheck.backends.registry import parse_version, probe_version

    path = binary_path(dest, c.cli_name)
    if not path.exists():
        return False
    if c.cli_name in manifest_versioned():
        return installed_version(dest, c.package) == c.version
    printed = probe_version(path)
    return printed is not None and parse_version(printed) == parse_version(c.version)


def missing(dest: Path, clis: list[PinnedCli]) -> list[PinnedCli]:
    """The releases not present (at their version, with a working binary and the runtime
    packages it would otherwise download per session) in dest."""
    out = []
    for c in clis:
        prefix = release_prefix(dest, c)
        if prefix is None or not runs_at_version(prefix, c) or not runtime_deps_ready(prefix, c):
            out.append(c)
    return out


def runtime_deps(cli_name: str):
    """The package `cli_name` would install of its own at each session start, from the registry,
    into its config dir (`KitProfile.npm_runtime_deps` of the backend that runs that CLI), or
    None: what to pre-install beside the CLI, so a session never reaches a registry."""
    from harnesscheck.backends.registry import kit_profile_of_cli

    return kit_profile_of_cli(cli_name).npm_runtime_deps


def runtime_deps_ready(prefix: Path, c: PinnedCli) -> bool:
    """True when `c` needs no runtime package, or its pre-fill is complete (installed, locked)."""
    deps = runtime_deps(c.cli_name)
    return deps is None or deps.ready(Path(prefix) / deps.dirname, c.version)


def install_runtime_deps(npm: str, prefix: Path, c: PinnedCli) -> int:
    """Pre-install the package `c` would fetch at each session start (a plugin package into its
    config dir) into `<prefix>/<dir>/`, with a package-lock.json (a CLI may reinstall a config
    dir whose lock lacks a dependency). Install scripts stay off."""
    deps = runtime_deps(c.cli_name)
    if deps is None:
        return 0
    target = Path(prefix) / deps.dirname
    target.mkdir(parents=True, exist_ok=True)
    (target / "package.json").write_text(json.dumps({"dependencies": {deps.package: c.version}}) + "\n", encoding="utf-8")
    argv = [npm, "install", "--no-audit", "--no-fund", "--save-exact", "--ignore-scripts", "--loglevel=warn"]
    proc = subprocess.run(argv, stdin=subprocess.DEVNULL, env=_npm_env(), cwd=str(target))
    return 0 if proc.returncode == 0 and runtime_deps_ready(prefix, c) else 3


def run_postinstall(dest: Path, c: PinnedCli, node: str) -> int:
    """Run the pinned package's own postinstall (one places its CLI's native binary).

    npm runs with --ignore-scripts, so no dependency's script ever runs; only the script of
    a package we pinned, explicitly, with node, in that package's directory. It runs with a
    HOME, temp dir and XDG dirs of its own, removed after: one runs its CLI's `--version`,
    which makes the CLI's config, data (where its login is kept), cache and temp dirs in
    whatever HOME and temp dir it is given; the user's are never those."""
    pkg_dir = Path(dest) / "node_modules" / c.package
    try:
        scripts = json.loads((pkg_dir / "package.json").read_text(encoding="utf-8")).get("scripts") or {}
    except (OSError, ValueError):
        return 0
    script = str(scripts.get("postinstall") or "")
    if not script:
        return 0
    parts = script.split()
    if len(parts) == 2 and parts[1].startswith("./"):
        parts[1] = parts[1][2:]  # `node ./postinstall.mjs`: the same file in the package dir
    if len(parts) != 2 or parts[0] != "node" or "/" in parts[1] or not (pkg_dir / parts[1]).is_file():
        print(f"install-clis: {c.package}: unexpected postinstall {script!r}; not run", file=sys.stderr)
        return 3
    import tempfile

    with tempfile.TemporaryDirectory(prefix="harnesscheck-postinstall-") as scratch:
        env = {**_npm_env(), "HOME": scratch, "TMPDIR": scratch, "TMP": scratch, "TEMP": scratch}
        env.update({var: str(Path(scratch) / var.lower()) for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME")})
        proc = subprocess.run([node, parts[1]], cwd=str(pkg_dir), stdin=subprocess.DEVNULL, env=env)
    return 0 if proc.returncode == 0 else 3


def npm_argv(npm: str, dest: Path, clis: list[PinnedCli]) -> list[str]:
    return [
        npm,
        "install",
        "--prefix",
        str(dest),
        "--no-audit",
        "--no-fund",
        "--save-exact",
        "--ignore-scripts",
        "--no-package-lock",
        "--loglevel=warn",  # npm's EBADENGINE warning (a release asking a newer Node) stays visible
        *[c.spec for c in clis],
    ]


def _npm_env() -> dict[str, str]:
    """This environment without any vendor's credential or provider variables (the env policy's
    deny prefixes, contain/envpolicy.py): npm and pip need none of them."""
    from harnesscheck.contain.envpolicy import DEFAULT_DENY_PREFIXES

    return {k: v for k, v in os.environ.items() if not k.startswith(DEFAULT_DENY_PREFIXES)}


def npm_view(package: str, field: str) -> object | None:
    """`npm view <package> <field> --json`, parsed; None when npm is missing or fails."""
    npm = shutil.which("npm")
    if npm is None:
        return None
    try:
        proc = subprocess.run([npm, "view", package, field, "--json"], stdin=subprocess.DEVNULL, capture_output=True, timeout=120, env=_npm_env())
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    try:
        return json.loads(proc.stdout.decode("utf-8", "replace") or "null")
    except ValueError:
        return None


def node_version() -> str | None:
    node = shutil.which("node")
    if node is None:
        return None
    try:
        proc = subprocess.run([node, "--version"], stdin=subprocess.DEVNULL, capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.decode().strip().lstrip("v") or None


def engine_satisfied(engines: str | None, node: str | None) -> bool | None:
    """Whether `node` meets an `engines.node` range of the plain `>=X[.Y.Z]` form npm
    packages here use; None when it cannot be told (no Node, another range form)."""
    import re

    from harnesscheck.backends.registry import parse_version

    m = re.fullmatch(r"\s*>=\s*(\d+)(?:\.(\d+))?(?:\.(\d+))?\s*", engines or "")
    have = parse_version(node or "")
    if m is None or have is None:
        return None
    need = tuple(int(g or 0) for g in m.groups())
    return have >= need


def check_command(out=None) -> int:
    """`install-clis --check`: per pinned CLI, the pin against npm's `latest`, and this
    Node against each release's `engines.node`. Exit 0 current, 1 a pin is behind, 3 npm
    could not be asked."""
    from harnesscheck.backends.registry import parse_version

    out = out or sys.stdout
    node = node_version()
    worst = 0
    for c in pinned_clis():
        latest = npm_view(c.package, "dist-tags.latest")
        if not isinstance(latest, str):
            print(f"{c.cli_name}: could not ask npm for {c.package}'s latest release", file=out)
            worst = max(worst, 3)
            continue
        behind = (parse_version(latest) or (0, 0, 0)) > (parse_version(c.version) or (0, 0, 0))
        state = f"behind: npm latest is {latest}" if behind else "current"
        print(f"{c.cli_name} {c.version} pinned, npm latest {latest}: {state}", file=out)
        if behind:
            worst = max(worst, 1)
        for version in dict.fromkeys([c.version, latest]):
            engines = npm_view(f"{c.package}@{version}", "engines.node")
            ok = engine_satisfied(engines if isinstance(engines, str) else None, node)
            if ok is False:
                print(
                    f"  {c.package}@{version} asks Node {engines} in engines; this Node is {node} (the native binary does not run on Node; see README)",
                    file=out,
                )
    return worst


def pip_runtimes() -> dict:
    """Backends whose runtime is a Python package (`KitProfile.pip_runtime`), installed with this
    interpreter's pip into `<cache>/<dirname>@<version>/` (`pip install --target`, exact
    versions, no dependencies: theirs are harnesscheck's): backend id -> its PipRuntime."""
    from harnesscheck.backends.registry import kit_profile, known_specs

    return {spec.id: kit_profile(spec).pip_runtime for spec in known_specs().values() if kit_profile(spec).pip_runtime is not None}


def pip_runtime_dir(dest: Path, backend: str, version: str) -> Path:
    return Path(dest) / f"{pip_runtimes()[backend].dirname}@{version}"


def install_pip_runtime(dest: Path, backend: str, *, out=None, version: str | None = None) -> int:
    """`pip install --target <dest>/<name>@<version> --no-deps PKG==<version>...` unless the
    runtime is there already (the transport's own check: the SDK, its runtime executable and
    their version). 0 when present afterwards, 3 when pip failed."""
    from harnesscheck.backends.registry import get_spec

    out = out or sys.stdout
    spec = get_spec(backend)
    if version == "latest":
        print(f"install-clis: {backend}: name a release (--version X); its runtime is pinned exactly", file=sys.stderr)
        return 2
    version = version or spec.pinned_version or ""
    target = pip_runtime_dir(dest, backend, version)
    from importlib import import_module

    module = import_module(spec.factory.partition(":")[0])
    if module.installed_sdk_version(target) == version:
        print(f"{backend} {version}: present in {target}", file=out)
        record_digest(target, out, only_if_missing=True)
        return 0
    packages = [f"{p}=={version}" for p in pip_runtimes()[backend].packages]
    print(f"install-clis: {' '.join(packages)} -> {target}", file=out)
    argv = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-deps",
        "--no-compile",
        "--pre",
        "--upgrade",
        "--target",
        str(target),
        *packages,
    ]
    proc = subprocess.run(argv, stdin=subprocess.DEVNULL, env=_npm_env())
    if proc.returncode != 0 or module.installed_sdk_version(target) != version:
        print(f"install-clis: pip exited {proc.returncode} for {backend} {version}\n  fix: check access to the package index", file=sys.stderr)
        return 3
    launcher = getattr(module, "ensure_launcher", None)
    if launcher is not None:
        launcher(target)  # one program running the transport's driver on it (HARNESS_BACKEND_CLI, loopback)
    import compileall

    compileall.compile_dir(str(target), quiet=1)  # this interpreter's bytecode now, recorded with the rest
    record_digest(target, out)
    print(f"{backend} {version}: installed in {target}", file=out)
    return 0


def _package_of(dest: Path, c: PinnedCli) -> Path:
    prefix = release_prefix(dest, c) or version_dir(dest, c.cli_name, c.version)
    return prefix if prefix != Path(dest) else Path(dest) / "node_modules"


def record_digest(pkg: Path, out=None, *, only_if_missing: bool = False) -> None:
    """Record the install's digest (climanifest.record): find_cli refuses a CLI whose files
    changed since. `only_if_missing`: a release found present keeps the digest it has."""
    from harnesscheck.backends import climanifest

    pkg = Path(pkg)
    if only_if_missing and climanifest.manifest_path(Path(os.path.realpath(pkg))).exists():
        return
    written = climanifest.record(pkg)
    print(f"install-clis: digest of {pkg.name} recorded in {written}", file=out or sys.stdout)


def ensure_bubblewrap(out=None) -> bool:
    """bubblewrap for the sessions' sandbox (doc/SPEC-sandbox.md), as .ci/run installs it: with
    apt-get where we are root, else a message with the fix. Never fails the install: without
    it sessions run with the process guard alone and say so. Once bwrap is there, the trial a
    session's sandbox needs (sandbox.status(): user and PID namespaces allowed) is run, and a
    machine that refuses it is told so with the fix. True when sessions can be sandboxed."""
    from harnesscheck.contain import sandbox

    out = out or sys.stdout
    if not sys.platform.startswith("linux"):
        return False
    if sandbox._find_bwrap() is not None:
        return _sandbox_usable(out)
    apt = shutil.which("apt-get")
    if apt is not None and hasattr(os, "geteuid") and os.geteuid() == 0:
        print("install-clis: installing bubblewrap (the sessions' sandbox)", file=out)
        env = {"PATH": sandbox.SYSTEM_PATH, "DEBIAN_FRONTEND": "noninteractive"}
        ok = subprocess.run([apt, "update", "-qq"], stdin=subprocess.DEVNULL, env=env, check=False).returncode == 0
        ok = (
            ok
            and subprocess.run(
                [apt, "install", "-y", "-qq", "bubblewrap"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=env, check=False
            ).returncode
            == 0
        )
        sandbox.reset()
        if ok and sandbox._find_bwrap() is not None:
            return _sandbox_usable(out)
    print(f"install-clis: bubblewrap is not installed: sessions will run with the process guard alone\n  fix: {sandbox.INSTALL_FIX}", file=out)
    return False


def _sandbox_usable(out) -> bool:
    from harnesscheck.contain import sandbox

    state = sandbox.status()
    if not state.available:
        print(
            f"install-clis: bubblewrap is installed but cannot sandbox a session here ({state.reason}): sessions "
            f"will run with the process guard alone\n  fix: {sandbox.INSTALL_FIX}",
            file=out,
        )
    return state.available


def install(dest: Path | None = None, *, out=None, backend: str | None = None, version: str | None = None) -> int:
    """Install what is missing; 0 when every wanted release is present afterwards."""
    from harnesscheck.core.paths import cli_cache_dir

    out = out or sys.stdout
    dest = Path(dest).expanduser().absolute() if dest is not None else cli_cache_dir()
    if backend is None:
        ensure_bubblewrap(out)
    if backend in pip_runtimes():
        return install_pip_runtime(dest, backend, out=out, version=version)
    if backend is None:
        for name in pip_runtimes():
            code = install_pip_runtime(dest, name, out=out)
            if code != 0:
                return code
    if version is not None and backend is not None and (pinned := profile_pinned_release(backend, version)) is not None:
        print(pinned, file=sys.stderr)  # before "latest" is asked of the registry
        return 2
    if version == "latest":
        if backend is None:
            print("install-clis: --version needs --backend (whose release?)", file=sys.stderr)
            return 2
        wanted = wanted_clis(backend)
        latest = npm_view(wanted[0].package, "dist-tags.latest") if wanted else None
        if not isinstance(latest, str):
            print("install-clis: could not ask npm for the latest release\n  fix: check access to the npm registry", file=sys.stderr)
            return 3
        version = latest
    if version is not None and backend is None:
        print("install-clis: --version needs --backend (whose release?)", file=sys.stderr)
        return 2
    clis = wanted_clis(backend, version)
    if not clis:
        print(f"install-clis: {backend} has no npm CLI", file=sys.stderr)
        return 2
    todo = missing(dest, clis)
    if not todo:
        for c in clis:
            print(f"{c.cli_name} {c.version}: present in {binary_path(release_prefix(dest, c) or dest, c.cli_name)}", file=out)
            record_digest(_package_of(dest, c), out, only_if_missing=True)
        return 0
    npm = shutil.which("npm")
    if npm is None:
        print("install-clis: npm not found on PATH\n  fix: install Node.js 20+ (it ships npm)", file=sys.stderr)
        return 3
    node = shutil.which("node") or "node"
    for c in todo:
        prefix = version_dir(dest, c.cli_name, c.version)
        prefix.mkdir(parents=True, exist_ok=True)
        # a package.json keeps npm from walking up into a parent project
        manifest = prefix / "package.json"
        if not manifest.exists():
            manifest.write_text('{"name": "harnesscheck-clis", "private": true}\n', encoding="utf-8")
        print(f"install-clis: {c.spec} -> {prefix}", file=out)
        proc = subprocess.run(npm_argv(npm, prefix, [c]), stdin=subprocess.DEVNULL, env=_npm_env(), cwd=str(prefix))
        if proc.returncode != 0:
            print(f"install-clis: npm exited {proc.returncode}\n  fix: check network access to the npm registry", file=sys.stderr)
            return 3
        if run_postinstall(prefix, c, node) != 0:
            print(f"install-clis: the postinstall of {c.spec} failed", file=sys.stderr)
            return 3
        if install_runtime_deps(npm, prefix, c) != 0:
            print(f"install-clis: the runtime packages of {c.spec} ({runtime_deps(c.cli_name).package}) failed to install", file=sys.stderr)
            return 3
    still = missing(dest, clis)
    if still:
        names = ", ".join(c.spec for c in still)
        print(f"install-clis: still missing after npm: {names}", file=sys.stderr)
        return 3
    for c in clis:
        record_digest(_package_of(dest, c), out, only_if_missing=c not in todo)
        print(f"{c.cli_name} {c.version}: installed in {binary_path(release_prefix(dest, c) or dest, c.cli_name)}", file=out)
    return 0


def install_command(dest: Path | None, *, backend: str | None = None, version: str | None = None, check: bool = False) -> int:
    """Entry point of `harnesscheck install-clis [--dest DIR] [--backend B --version X|latest] [--check]`."""
    if check:
        return check_command()
    return install(dest, backend=backend, version=version)
