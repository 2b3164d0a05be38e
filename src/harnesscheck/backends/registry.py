"""The backend registry: built-in specs, entry-point backends, and resolve_provider(settings).

Selection is explicit: no auto-detection, no fallback to another backend or to an API key.
Every error names the fix (doc/SPEC-registry.md).

Each built-in spec lives in its backend's folder (`backends/<backend>/spec.py`); this module
collects them in BUILTIN_SPECS by an explicit list, in the matrix's column order.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from harnesscheck.backends.acp import spec as acp_fake_spec
from harnesscheck.backends.acp.spec import acp_spec
from harnesscheck.backends.api import spec as api_spec
from harnesscheck.backends.claude_code import spec as claude_code_spec
from harnesscheck.backends.claude_code_reasoning import spec as claude_code_reasoning_spec
from harnesscheck.backends.codex import spec as codex_spec
from harnesscheck.backends.copilot import spec as copilot_spec
from harnesscheck.backends.cursor import spec as cursor_spec
from harnesscheck.backends.deepseek import spec as deepseek_spec
from harnesscheck.backends.fake import spec as fake_spec
from harnesscheck.backends.gemini import spec as gemini_spec
from harnesscheck.backends.llm import API_MODES
from harnesscheck.backends.opencode import spec as opencode_spec
from harnesscheck.backends.zcode import spec as zcode_spec
from harnesscheck.core.config import Settings
from harnesscheck.core.contracts import (
    Capability as C,
)
from harnesscheck.core.contracts import (
    CliNotFound,
    CliVersionUnsupported,
    ConfigError,
    ProviderSpec,
    SelectionMissing,
    Transport,
    UnknownBackend,
)

ENTRY_POINT_GROUP = "harnesscheck.backends"

#: The built-in backends, in the order of the matrix's columns (doc/backends.*, the catalog and
#: reports follow it). Each spec lives in its backend's folder (`backends/<backend>/spec.py`).
BUILTIN_SPECS: dict[str, ProviderSpec] = {
    spec.id: spec
    for spec in (
        api_spec.SPEC,
        copilot_spec.SPEC,
        claude_code_spec.SPEC,
        claude_code_reasoning_spec.SPEC,
        codex_spec.SPEC,
        cursor_spec.SPEC,
        deepseek_spec.SPEC,
        gemini_spec.SPEC,
        opencode_spec.SPEC,
        zcode_spec.SPEC,
        acp_fake_spec.SPEC,
        fake_spec.SPEC,
    )
}


@cache
def _entry_point_specs() -> dict[str, ProviderSpec]:
    from importlib.metadata import entry_points

    found: dict[str, ProviderSpec] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        obj = ep.load()
        spec = obj() if callable(obj) and not isinstance(obj, ProviderSpec) else obj
        if not isinstance(spec, ProviderSpec):
            raise ConfigError(
                f"entry point {ep.name!r} in {ENTRY_POINT_GROUP} did not give a ProviderSpec",
                "make it a ProviderSpec or a function returning one",
            )
        if spec.id in BUILTIN_SPECS:
            raise ConfigError(f"entry point backend {spec.id!r} shadows a built-in", "rename it")
        found[spec.id] = spec
    return found


def known_specs() -> dict[str, ProviderSpec]:
    """Built-in specs plus those registered in the harnesscheck.backends entry-point group."""
    return {**BUILTIN_SPECS, **_entry_point_specs()}


def _resolve(reference: str):
    """The object a 'module:attr' reference names (None when it does not import)."""
    module, _, attr = reference.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        return None


@cache
def _profile_at(reference: str):
    from harnesscheck.backends._kit_profile import KitProfile

    profile = _resolve(reference)
    if not isinstance(profile, KitProfile):
        raise ConfigError(f"kit profile {reference!r} is not a KitProfile", "point ProviderSpec.kit_profile at a harnesscheck.backends._kit_profile.KitProfile")
    return profile


@cache
def _profiled_transports() -> dict[type, str]:
    """Each built-in transport class that has a kit profile -> that profile's reference."""
    out: dict[type, str] = {}
    for spec in BUILTIN_SPECS.values():
        factory = _resolve(spec.factory) if spec.kit_profile else None
        if isinstance(factory, type):
            out.setdefault(factory, spec.kit_profile)
    return out


def kit_profile(spec: ProviderSpec):
    """What the conformance kit knows of `spec`'s CLI (backends/_kit_profile.py): the profile its
    spec names; else, for a backend that runs the CLI of a built-in one (the same cli_name, e.g. a
    third party's binding of the same CLI) or is built on a built-in's transport class (nearest
    base first), that built-in's; else the empty profile. No backend is known by its name here."""
    from harnesscheck.backends._kit_profile import NO_PROFILE

    if spec.kit_profile:
        return _profile_at(spec.kit_profile)
    if spec.cli_name:
        same_cli = next((s.kit_profile for s in BUILTIN_SPECS.values() if s.kit_profile and s.cli_name == spec.cli_name), None)
        if same_cli:
            return _profile_at(same_cli)
    factory = _resolve(spec.factory)
    if isinstance(factory, type):
        transports = _profiled_transports()
        for base in factory.__mro__:
            if base in transports:
                return _profile_at(transports[base])
    return NO_PROFILE


def kit_profile_of_cli(cli_name: str):
    """The kit profile of the first registered backend that runs CLI `cli_name` and names its
    profile (built-ins first; the empty profile if none does): for the tools that know a CLI by
    its name only (the fixture recorder, install-clis)."""
    from harnesscheck.backends._kit_profile import NO_PROFILE

    spec = next((s for s in known_specs().values() if s.kit_profile and s.cli_name == cli_name), None)
    return kit_profile(spec) if spec is not None else NO_PROFILE


def kit_profiles() -> list:
    """Every registered backend's kit profile (built-in and entry-point backends), once each, in
    registry order: what the kit reads for all CLIs at once (the hostile host's stores, the
    config-file forms it reads MCP servers from)."""
    refs = dict.fromkeys(s.kit_profile for s in known_specs().values() if s.kit_profile)
    return [_profile_at(ref) for ref in refs]


def get_spec(backend_id: str) -> ProviderSpec:
    """The spec for a registered id, for `ID==VERSION` (the same backend, its loopback level
    running that CLI release: `version_variant`), for `ID/MODE` (an api backend in one
    api_mode: `mode_variant`), or for a 'module:factory' reference; else UnknownBackend."""
    specs = known_specs()
    if backend_id in specs:
        return specs[backend_id]
    if VARIANT_SEP in backend_id:
        base_id, _, version = backend_id.partition(VARIANT_SEP)
        return version_variant(get_spec(base_id), version)
    if MODE_SEP in backend_id and ":" not in backend_id:
        base_id, _, mode = backend_id.partition(MODE_SEP)
        return mode_variant(get_spec(base_id), mode)
    if backend_id.startswith(ACP_PREFIX) or _shipped_acp_profile(backend_id):
        return acp_spec(backend_id)
    if ":" in backend_id:
        return spec_from_reference(backend_id)
    raise UnknownBackend(backend_id, list(specs))


#: `acp:<command line>` / `acp:<file>.toml`: any ACP agent, driven by the ACP backend (doc/SPEC-acp.md).
ACP_PREFIX = "acp:"


def _shipped_acp_profile(backend_id: str) -> bool:
    """`acp-<name>` naming a profile shipped in backends/acp/profiles/ (not a built-in column)."""
    if not backend_id.startswith("acp-") or "/" in backend_id or "." in backend_id:
        return False
    from harnesscheck.backends.acp.profile import PROFILE_DIR

    return (PROFILE_DIR / f"{backend_id[4:]}.toml").is_file()


#: A third-party backend's id: letters, digits, '.', '_', '-' (it names report columns, file
#: names and rerun commands: no space, quote or shell character).
SPEC_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def spec_from_reference(reference: str) -> ProviderSpec:
    """The ProviderSpec a 'module:attr' reference names (a ProviderSpec, or a function
    returning one), checked up front: every way it can be wrong is a ConfigError (a usage
    error, exit 2) naming the module or attribute and the fix, never a traceback, and a
    factory that does not import is caught here, once, not in every cell."""
    module, _, attr = reference.partition(":")
    example = f"e.g. `def spec() -> ProviderSpec` in {(module or 'mybackend').replace('.', '/')}.py and --backend {module or 'mybackend'}:spec"
    if not module or not attr:
        raise ConfigError(f"backend {reference!r}: a reference is 'module:attr'", example)
    try:
        loaded = importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - any import failure is the user's module's
        raise ConfigError(
            f"backend {reference!r}: importing module {module!r} failed: {type(exc).__name__}: {exc}",
            f"make `python -c 'import {module}'` work in this environment (install its dependencies, or run from the directory that holds it)",
        ) from None
    if not hasattr(loaded, attr):
        names = sorted(n for n, v in vars(loaded).items() if not n.startswith("_") and callable(v) and getattr(v, "__module__", None) == module)[:8]
        raise ConfigError(f"backend {reference!r}: module {module!r} has no attribute {attr!r}" + (f" (it has: {', '.join(names)})" if names else ""), example)
    obj = getattr(loaded, attr)
    try:
        spec = obj() if callable(obj) and not isinstance(obj, ProviderSpec) else obj
    except Exception as exc:  # noqa: BLE001 - the user's spec function failed
        raise ConfigError(
            f"backend {reference!r}: calling {module}.{attr}() failed: {type(exc).__name__}: {exc}",
            f"{module}.{attr} must return a harnesscheck.core.contracts.ProviderSpec",
        ) from None
    if not isinstance(spec, ProviderSpec):
        raise ConfigError(
            f"backend {reference!r}: {module}.{attr} gives a {type(spec).__name__}, not a ProviderSpec",
            f"{module}.{attr} must be (or return) a harnesscheck.core.contracts.ProviderSpec; {example}",
        )
    if not SPEC_ID_RE.match(spec.id):
        raise ConfigError(
            f"backend {reference!r}: its ProviderSpec id {spec.id!r} is not an id (letters, digits, '.', '_', '-')",
            "use an id like 'my-backend' (letters, digits, '.', '_', '-'; it names report columns)",
        )
    factory_module, _, factory_attr = spec.factory.partition(":")
    try:
        factory = getattr(importlib.import_module(factory_module), factory_attr) if factory_attr else None
    except Exception as exc:  # noqa: BLE001 - the user's factory module
        raise ConfigError(
            f"backend {reference!r}: its factory {spec.factory!r} does not import: {type(exc).__name__}: {exc}",
            "set ProviderSpec.factory to an importable 'module:Class' (the Transport class)",
        ) from None
    if not callable(factory):
        raise ConfigError(
            f"backend {reference!r}: its factory {spec.factory!r} names nothing callable",
            "set ProviderSpec.factory to 'module:Class', the class whose instances run sessions",
        )
    return spec


def resolve_provider(settings: Settings | None = None) -> Transport:
    """Build the transport HARNESS_BACKEND names. Raises a typed error naming the fix."""
    settings = settings or Settings.from_env()
    if not settings.backend:
        raise SelectionMissing(list(known_specs()))
    settings = resolve_model_name(settings)
    spec = get_spec(settings.backend)
    return build_transport(spec, settings)


def resolve_model_name(settings: Settings) -> Settings:
    """`provider/model` (`anthropic/claude-sonnet-5-5`, `openai/gpt-5`, `copilot/gpt-5`) as the
    backend: the provider's backend and wire, and the model (harnesscheck.core.models.resolve_name).
    A different model named beside it (HARNESS_BACKEND_MODEL) is a ConfigError, never a guess."""
    from harnesscheck.core.models import resolve_name

    if settings.backend in known_specs():
        return settings
    named = resolve_name(settings.backend or "")
    if named is None:
        return settings
    backend, model = named
    if settings.model and settings.model != model:
        raise ConfigError(
            f"{settings.backend} names the model {model!r} but HARNESS_BACKEND_MODEL is {settings.model!r}",
            f"name one model: --backend {settings.backend} alone, or --backend {backend} --model {settings.model}",
        )
    return settings.model_copy(update={"backend": backend, "model": model})


def build_transport(spec: ProviderSpec, settings: Settings) -> Transport:
    module, _, attr = spec.factory.partition(":")
    factory = getattr(importlib.import_module(module), attr)
    return factory(spec, settings)


def run_session(request, settings: Settings | None = None, **kwargs):
    """One session through the selected backend (library entry point)."""
    return resolve_provider(settings).run_session(request, **kwargs)


# ---------------------------------------------------------------------------------------
# CLI discovery and the version policy

#: `claude-code==2.1.332`: a backend at a named CLI release (its own matrix column).
VARIANT_SEP = "=="

#: Releases verified beside the pin: each is a second matrix column (`ID==VERSION`) that
#: `install-clis` installs and the loopback level runs by default. claude's pin is 2.1.332,
#: npm's latest (2026-12-02), and the fixtures are its recordings; 2.1.197, the previous
#: pin, stays verified beside it while hosts still run it (doc/SPEC-loopback.md, Versions).
SECOND_COLUMNS: dict[str, tuple[str, ...]] = {"claude-code": ("2.1.197",)}


def version_variant(spec: ProviderSpec, version: str) -> ProviderSpec:
    """`spec` whose loopback level runs CLI `version` (id `ID==VERSION`). The version must
    parse and lie in the supported range: a release outside it is refused, never run."""
    if not (spec.cli_name and spec.cli_package):
        raise ConfigError(f"{spec.id} has no npm CLI: `{spec.id}{VARIANT_SEP}{version}` names no release", f"use --backend {spec.id}")
    if not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise ConfigError(f"{spec.id}{VARIANT_SEP}{version}: {version!r} is not a release number (X.Y.Z)", f"e.g. {spec.id}{VARIANT_SEP}{spec.pinned_version}")
    if not version_supported(spec, version):
        raise CliVersionUnsupported(spec.id, version, version_range(spec))
    if version == spec.pinned_version:
        return spec
    return spec.model_copy(update={"id": f"{spec.id}{VARIANT_SEP}{version}", "label": f"{spec.label} {version}", "pinned_version": version})


#: `api/chat_completions`: an api backend in one wire protocol (api_mode), its own matrix column.
#: (`==` names a CLI release, `:` a module:factory; `/` reads "backend, in mode".)
MODE_SEP = "/"

#: Backends with one column per wire protocol: id -> its api_modes, the default one first.
MODE_COLUMNS: dict[str, tuple[str, ...]] = {"api": API_MODES}

MODE_LABELS: dict[str, str] = {
    "anthropic_messages": "Anthropic Messages",
    "chat_completions": "OpenAI Chat Completions",
    "responses": "OpenAI Responses",
}

#: What a mode adds to its backend's declared capabilities (a capability true of one wire only).
MODE_CAPABILITIES: dict[str, frozenset] = {"anthropic_messages": frozenset({C.prompt_caching})}

#: Why a mode does not declare a capability another mode does (the skip's message says it).
MODE_DECLINES: dict[tuple[str, str], str] = {
    (mode, C.prompt_caching.value): "the OpenAI wires have no cache breakpoint: their servers cache prompt "
    "prefixes by themselves (the cached tokens are judged by usage.cache-and-reasoning-tokens-reported)"
    for mode in ("chat_completions", "responses")
}


def mode_variant(spec: ProviderSpec, mode: str) -> ProviderSpec:
    """`spec` speaking one api_mode (id `ID/MODE`): its transport uses that mode whatever
    HARNESS_API_MODE says (a different one is a ConfigError), and it declares that mode's
    capabilities (MODE_CAPABILITIES)."""
    modes = MODE_COLUMNS.get(spec.id)
    if not modes:
        raise ConfigError(f"{spec.id} has no api modes: `{spec.id}{MODE_SEP}{mode}` names none", f"use --backend {spec.id}")
    if mode not in modes:
        raise ConfigError(
            f"{spec.id}{MODE_SEP}{mode}: {mode!r} is not an api_mode of {spec.id}", "use one of " + ", ".join(f"{spec.id}{MODE_SEP}{m}" for m in modes)
        )
    return spec.model_copy(
        update={
            "id": f"{spec.id}{MODE_SEP}{mode}",
            "label": f"API: {MODE_LABELS.get(mode, mode)}",
            "api_mode": mode,
            "capabilities": spec.capabilities | MODE_CAPABILITIES.get(mode, frozenset()),
        }
    )


def column_ids(backend_id: str) -> list[str]:
    """The matrix columns a backend id stands for in the kit: `api` is its three mode columns
    (`api/anthropic_messages`, `api/chat_completions`, `api/responses`); any other id itself."""
    modes = MODE_COLUMNS.get(backend_id)
    if modes and backend_id in known_specs():
        return [f"{backend_id}{MODE_SEP}{mode}" for mode in modes]
    return [backend_id]


def declined_because(spec: ProviderSpec, capability: str) -> str | None:
    """Why `spec` does not declare `capability`, where its mode says (MODE_DECLINES)."""
    return MODE_DECLINES.get((spec.api_mode or "", capability))


def base_id(backend_id: str) -> str:
    """`claude-code==2.1.332` -> `claude-code` (other ids unchanged)."""
    return backend_id.partition(VARIANT_SEP)[0]


def is_version_variant(spec: ProviderSpec) -> bool:
    return VARIANT_SEP in spec.id


def verified_releases(backend_id: str, matrix: Path | None = None) -> list[str]:
    """The CLI releases of `backend_id` the shipped matrix (doc/backends.json) verified: the
    version its loopback level ran, in every column of that backend (`ID`, `ID==VERSION`).
    The offline level runs fakes and verifies no release. Newest first."""
    import json

    if matrix is None:
        from harnesscheck.core.paths import data_root

        try:
            matrix = data_root() / "doc" / "backends.json"
        except FileNotFoundError:
            return []
    try:
        backends = json.loads(Path(matrix).read_text(encoding="utf-8")).get("backends") or {}
    except (OSError, ValueError):
        return []
    found = set()
    for column, info in backends.items():
        if base_id(column) == base_id(backend_id):
            version = parse_version(str((info.get("cli_version") or {}).get("loopback") or ""))
            if version is not None:
                found.add(version)
    return [".".join(map(str, v)) for v in sorted(found, reverse=True)]


def nearest_release(version: str, releases: list[str]) -> str | None:
    """The release in `releases` nearest `version` (by major, minor, patch distance)."""
    v = parse_version(version)
    if v is None or not releases:
        return None
    return min(releases, key=lambda r: tuple(abs(a - b) for a, b in zip(parse_version(r) or (0, 0, 0), v)))


#: The shipped ACP profiles that are matrix columns (backends/acp/profiles/): the four real
#: agents (pinned, installed by install-clis), claude-agent-acp with its built-ins on (where its
#: acp.* defects show), and harnesscheck's own agent (`acp serve`), the correct one.
ACP_COLUMNS: tuple[str, ...] = (
    "acp-claude-agent-acp",
    "acp-claude-agent-acp-builtins",
    "acp-codex-acp",
    "acp-gemini",
    "acp-opencode",
    "acp-harnesscheck",
)


def default_backend_ids() -> list[str]:
    """Every registered backend (an api backend as its mode columns, `column_ids`), each second
    column (`ID==VERSION`, SECOND_COLUMNS), then the shipped ACP profiles' columns (ACP_COLUMNS)."""
    specs = known_specs()
    extra = [
        f"{b}{VARIANT_SEP}{v}" for b, versions in SECOND_COLUMNS.items() if b in specs for v in versions if v != specs[b].pinned_version
    ]  # a second column equal to the pin is the base column
    acp = [c for c in ACP_COLUMNS if c not in specs and _shipped_acp_profile(c)]
    return [column for b in specs for column in column_ids(b)] + extra + acp


@dataclass(frozen=True)
class CliInfo:
    path: Path
    version: str | None


#: The first version-like token of a `--version` line: `2.1.197 (Claude Code)`,
#: `codex-cli 0.171.0`, `0.172.0-alpha.1`, cursor's `2026.08.11-e8db854`.
_VERSION_RE = re.compile(r"(?<![\w.])v?(\d+(?:\.\d+)+)((?:[-.+]?[0-9A-Za-z]+)*)")


def parse_version(text: str) -> tuple[int, int, int] | None:
    """The (major, minor, patch) of the version a CLI printed (`parse_cli_version`'s first three
    release numbers), or None: for release arithmetic (nearest verified release, pins)."""
    v = parse_cli_version(text)
    if v is None:
        return None
    release = (tuple(v.release) + (0, 0, 0))[:3]
    return (int(release[0]), int(release[1]), int(release[2]))


def parse_cli_version(text: str):
    """The version a CLI printed, as a `packaging.version.Version`, or None.

    PEP 440 spellings are taken as they are (`0.172.0-alpha.1` is the pre-release 0.172.0a1).
    A suffix PEP 440 cannot read, such as the build hash of cursor's `2026.08.11-e8db854`,
    becomes the local label (`2026.8.11+e8db854`): versions then order by the date alone, a
    range ignores the hash (`>=2026.8.11` holds, `<2026.8.11` does not), and two builds of
    one day compare equal in every range. Why packaging: ranges and pre-releases the way pip
    reads them, instead of a hand-written tuple compare that dropped every suffix."""
    from packaging.version import InvalidVersion, Version

    m = _VERSION_RE.search(text or "")
    if not m:
        return None
    base, rest = m[1], m[2]
    try:
        return Version(base + rest)
    except InvalidVersion:
        label = ".".join(p for p in re.split(r"[^0-9A-Za-z]+", rest) if p)
        try:
            return Version(f"{base}+{label}") if label else Version(base)
        except InvalidVersion:
            return Version(base)


def supported_versions(spec: ProviderSpec):
    """`[min_version, max_version)` as a `packaging.specifiers.SpecifierSet`."""
    from packaging.specifiers import SpecifierSet

    return SpecifierSet(version_range(spec) if (spec.min_version or spec.max_version) else "")


def version_range(spec: ProviderSpec) -> str:
    parts = []
    if spec.min_version:
        parts.append(f">={spec.min_version}")
    if spec.max_version:
        parts.append(f"<{spec.max_version}")
    return ",".join(parts) or "any"


def version_supported(spec: ProviderSpec, found: str) -> bool:
    """Whether the version a CLI printed is inside the spec's range; a pre-release inside the
    range counts (`<3.0.0` still excludes 3.0.0's own pre-releases, as PEP 440 says)."""
    v = parse_cli_version(found)
    if v is None:
        return False
    return supported_versions(spec).contains(v, prereleases=True)


def cli_candidates(spec: ProviderSpec, settings: Settings) -> list[Path]:
    """Where the binary is looked for, in order: explicit setting, PATH, the pinned cache."""
    from harnesscheck.core.paths import cli_cache_dir

    assert spec.cli_name
    if settings.cli is not None:
        return [settings.cli]
    out: list[Path] = []
    on_path = shutil.which(spec.cli_name)
    out.append(Path(on_path) if on_path else Path(f"$PATH/{spec.cli_name}"))
    if spec.pinned_version:
        out.append(cli_cache_dir() / f"{spec.cli_name}@{spec.pinned_version}" / "node_modules" / ".bin" / spec.cli_name)
    out.append(cli_cache_dir() / "node_modules" / ".bin" / spec.cli_name)
    return out


#: The least bound of one `<cli> --version` probe (a CLI that answers at all answers well within it).
VERSION_PROBE_S = 20.0


def version_probe_timeout_s(spec: ProviderSpec | None) -> float:
    """The bound of one `<cli> --version` probe of `spec`'s CLI: its start-up allowance
    (`ProviderSpec.cold_start_s`), never below VERSION_PROBE_S. opencode's Bun binary took
    8.7 s for `--version` alone at load 16, and its start-up allowance is 30 s: a fixed 20 s
    failed a correct CLI on a loaded machine. Always finite: a hung binary still ends."""
    return max(VERSION_PROBE_S, spec.cold_start_s if spec is not None else 0.0)


def probe_version(path: Path, timeout_s: float = VERSION_PROBE_S) -> str | None:
    """`<cli> --version` in a minimal environment; the first line, or None. Probed once per
    binary (path, size, mtime) per process: a 245 MB CLI is not started again per session.
    Across processes (a `harnesscheck run` each) the answer is kept in the cache dir
    (`_probe_cache`), keyed by the binary's path, size, mtime, ctime and inode.
    Why the last probe of a binary got no answer is kept for the error (`probe_failure`)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = (str(path), st.st_size, st.st_mtime_ns)
    with _VERSION_LOCK:  # concurrent sessions share one probe instead of racing three
        if key not in _VERSION_CACHE:
            file_key = f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0{st.st_ino}"
            known = _probe_cache().get(file_key)
            if isinstance(known, str) and known:
                _VERSION_CACHE[key] = known
                return known
            version, why = _probe_version(path, timeout_s)
            if version is None:
                version, why_again = _probe_version(path, timeout_s)
                why = why if why == why_again else f"{why}; then {why_again}"
            if version is None:
                _PROBE_FAILURES[str(path)] = why
                return None  # a failed probe is not remembered: the next call tries again
            _VERSION_CACHE[key] = version
            if not _temporary(path):
                _remember_probe(file_key, version)
        return _VERSION_CACHE[key]


def _temporary(path: Path) -> bool:
    """A binary under the temp dir (a fake CLI, an exec wrapper of one run): never probed again
    once its folder is gone, so it is kept in this process only; written to the probe file it
    only pushed the installed CLIs' answers out (one entry per temporary path)."""
    try:
        real = os.path.realpath(path)
        tmp = os.path.realpath(tempfile.gettempdir())
    except OSError:
        return False
    return real.startswith(tmp.rstrip("/") + "/") or real.startswith("/tmp/")


#: The file of version answers, in harnesscheck's cache dir; at most this many entries.
PROBE_CACHE_NAME = "version-probes.json"
PROBE_CACHE_MAX = 64


def _probe_cache_path() -> Path:
    from harnesscheck.core.paths import cli_cache_dir

    return cli_cache_dir().parent / PROBE_CACHE_NAME


def _probe_cache() -> dict:
    """{binary key: version line}; empty when missing or unreadable (then probed: only a speed-up)."""
    try:
        data = json.loads(_probe_cache_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _remember_probe(file_key: str, version: str) -> None:
    """Add one answer (atomically: concurrent hosts each see a whole file; the newest kept).
    A version line is no secret; nothing else is written. Failing to write is ignored."""
    path = _probe_cache_path()
    data = {k: v for k, v in _probe_cache().items() if k != file_key}
    data[file_key] = version
    data = dict(list(data.items())[-PROBE_CACHE_MAX:])
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(f".{PROBE_CACHE_NAME}.{os.getpid()}.{threading.get_ident()}")
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass


def remember_version(path: Path, version: str) -> None:
    """A binary whose answer the caller already has: the kit's exec wrapper around a probed
    CLI (one new wrapper per loopback cell; probing it started the 245 MB CLI again, ~10%
    of a cell). Kept in this process only, keyed as a probe is (a changed file is probed)."""
    st = os.stat(path)
    with _VERSION_LOCK:
        _VERSION_CACHE[(str(path), st.st_size, st.st_mtime_ns)] = version


def probe_failure(path: Path) -> str | None:
    """Why the last version probe of `path` got no answer (exit status, stderr tail), or None."""
    return _PROBE_FAILURES.get(str(path))


_VERSION_CACHE: dict[tuple[str, int, int], str] = {}
_PROBE_FAILURES: dict[str, str] = {}
_VERSION_LOCK = threading.Lock()


#: Vendor switches in every probe's environment, each read by its own CLI only: gemini
#: otherwise starts node a second time with a larger heap before it answers (2.4-3.6 s instead
#: of 4.0-5.9 s under load here), as its sessions never do (backends/gemini/__init__.py).
PROBE_ENV = {"GEMINI_CLI_NO_RELAUNCH": "true"}


def _probe_version(path: Path, timeout_s: float) -> tuple[str | None, str]:
    """(first line of stdout, "") or (None, why there was no answer)."""
    # A private, empty HOME and temp dir: `opencode --version` creates ~/.cache/opencode/bin
    # and $TMPDIR/opencode (/tmp/opencode without one), and no probe may write into the user's
    # home or leave anything in the system temp dir (both removed with whatever the CLI put there).
    home = tempfile.mkdtemp(prefix="harnesscheck-probe-")
    tmp = os.path.join(home, "tmp")
    os.mkdir(tmp, 0o700)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "TMPDIR": tmp, "TMP": tmp, "TEMP": tmp, **PROBE_ENV}
    try:
        return _run_probe(path, timeout_s, env)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _run_probe(path: Path, timeout_s: float, env: dict[str, str]) -> tuple[str | None, str]:
    from harnesscheck.contain.process import when_not_busy

    try:
        proc = when_not_busy(
            subprocess.run,
            [str(path), "--version"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout_s,
            env=env,
            start_new_session=True,
        )
    except subprocess.TimeoutExpired:
        return None, f"no answer within {timeout_s:g} s"
    except OSError as exc:
        return None, f"could not start: {exc.strerror or exc}"
    out = proc.stdout.decode("utf-8", "replace").strip().splitlines()
    if out:
        return out[0].strip(), ""
    from harnesscheck.contain.envpolicy import redact

    tail = " ".join(proc.stderr.decode("utf-8", "replace").split())[-200:]
    return None, f"exit status {proc.returncode}, empty stdout" + (f", stderr: {redact(tail)}" if tail else "")


def find_cli(spec: ProviderSpec, settings: Settings, *, check_version: bool = True) -> CliInfo:
    """Locate the backend's binary and check its version against the supported range."""
    tried: list[str] = []
    for cand in cli_candidates(spec, settings):
        # A path that exists but cannot be run says why (HARNESS_BACKEND_CLI at a directory
        # read "not found" before).
        why = " (a directory, not the binary)" if cand.is_dir() else (" (not executable)" if cand.is_file() and not os.access(cand, os.X_OK) else "")
        tried.append(f"{cand}{why}")
        if cand.is_file() and os.access(cand, os.X_OK):
            if cand.suffix.lower() in (".cmd", ".bat"):
                continue  # never run Windows batch shims (CVE-2024-24576 class)
            from harnesscheck.backends.climanifest import verify

            verify(cand)  # a cached CLI is what install-clis installed, before it is ever run
            version = probe_version(cand, version_probe_timeout_s(spec))
            if check_version and (spec.min_version or spec.max_version):
                if version is None or not version_supported(spec, version):
                    found = version or f"unknown ({probe_failure(cand) or 'no answer'})"
                    raise CliVersionUnsupported(spec.id, found, version_range(spec))
            return CliInfo(path=cand, version=version)
    raise CliNotFound(spec.id, spec.cli_name or "?", tried, spec.cli_package)
