"""`harnesscheck install-clis`: the pinned real CLIs, installed with npm into the cache
dir the loopback level finds by itself (harnesscheck.paths.cli_cache_dir()).

The pinned versions come from the registry specs (`ProviderSpec.pinned_version` of every
harness backend that names an npm package). Idempotent: when every pinned package is
already present at its pinned version (its binary prints that version), nothing runs.
npm runs with no install scripts, no audit, no funding notice and exact versions; then
only the pinned packages' own postinstall runs, explicitly (claude-code's puts its
native binary in place).
"""

from __future__ import annotations

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
    """Every registered harness backend with an npm package and a pinned version."""
    from harnesscheck.registry import known_specs

    out = []
    for spec in known_specs().values():
        if spec.cli_package and spec.pinned_version and spec.cli_name:
            out.append(PinnedCli(spec.id, spec.cli_name, spec.cli_package, spec.pinned_version))
    return out


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
    from harnesscheck.registry import parse_version, probe_version

    path = binary_path(dest, c.cli_name)
    if not path.exists():
        return False
    printed = probe_version(path)
    return printed is not None and parse_version(printed) == parse_version(c.version)


def missing(dest: Path, clis: list[PinnedCli]) -> list[PinnedCli]:
    """The pinned CLIs not present (at their pinned version, with a working binary) in dest."""
    return [c for c in clis if installed_version(dest, c.package) != c.version or not runs_at_version(dest, c)]


def run_postinstall(dest: Path, c: PinnedCli, node: str) -> int:
    """Run the pinned package's own postinstall (claude-code's places its native binary).

    npm runs with --ignore-scripts, so no dependency's script ever runs; only the script of
    a package we pinned, explicitly, with node, in that package's directory."""
    pkg_dir = Path(dest) / "node_modules" / c.package
    try:
        scripts = json.loads((pkg_dir / "package.json").read_text(encoding="utf-8")).get("scripts") or {}
    except (OSError, ValueError):
        return 0
    script = str(scripts.get("postinstall") or "")
    if not script:
        return 0
    parts = script.split()
    if len(parts) != 2 or parts[0] != "node" or "/" in parts[1] or not (pkg_dir / parts[1]).is_file():
        print(f"install-clis: {c.package}: unexpected postinstall {script!r}; not run", file=sys.stderr)
        return 3
    proc = subprocess.run([node, parts[1]], cwd=str(pkg_dir), stdin=subprocess.DEVNULL)
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
        "--loglevel=error",
        *[c.spec for c in clis],
    ]


def install(dest: Path | None = None, *, out=None) -> int:
    """Install what is missing; 0 when every pinned CLI is present afterwards."""
    from harnesscheck.paths import cli_cache_dir

    out = out or sys.stdout
    dest = Path(dest).expanduser().absolute() if dest is not None else cli_cache_dir()
    clis = pinned_clis()
    todo = missing(dest, clis)
    if not todo:
        for c in clis:
            print(f"{c.cli_name} {c.version}: present in {binary_path(dest, c.cli_name)}", file=out)
        return 0
    npm = shutil.which("npm")
    if npm is None:
        print("install-clis: npm not found on PATH\n  fix: install Node.js 20+ (it ships npm)", file=sys.stderr)
        return 3
    dest.mkdir(parents=True, exist_ok=True)
    # a package.json keeps npm from walking up into a parent project
    manifest = dest / "package.json"
    if not manifest.exists():
        manifest.write_text('{"name": "harnesscheck-clis", "private": true}\n', encoding="utf-8")
    argv = npm_argv(npm, dest, todo)
    print("install-clis: " + " ".join(c.spec for c in todo) + f" -> {dest}", file=out)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_", "CODEX_"))}
    proc = subprocess.run(argv, stdin=subprocess.DEVNULL, env=env, cwd=str(dest))
    if proc.returncode != 0:
        print(f"install-clis: npm exited {proc.returncode}\n  fix: check network access to the npm registry", file=sys.stderr)
        return 3
    node = shutil.which("node") or "node"
    for c in todo:
        if run_postinstall(dest, c, node) != 0:
            print(f"install-clis: the postinstall of {c.spec} failed", file=sys.stderr)
            return 3
    still = missing(dest, clis)
    if still:
        names = ", ".join(c.spec for c in still)
        print(f"install-clis: still missing after npm: {names}", file=sys.stderr)
        return 3
    for c in clis:
        print(f"{c.cli_name} {c.version}: installed in {binary_path(dest, c.cli_name)}", file=out)
    return 0


def install_command(dest: Path | None) -> int:
    """Entry point of `harnesscheck install-clis [--dest DIR]`."""
    return install(dest)
