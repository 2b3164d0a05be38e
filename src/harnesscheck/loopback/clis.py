"""Finding the real CLI the loopback level runs (no PATH edits needed).

The loopback level runs a release said out loud, never whatever is on PATH:
- the spec's version (`claude-code`: the pin; `claude-code==2.1.332`: that release) from
  `harnesscheck install-clis`'s cache (`<cache>/<cli>@<version>/`, or a legacy cache
  root holding that version);
- or a binary named by path: `HARNESS_BACKEND_CLI` (`verify --cli`) together with
  `HARNESS_BACKEND` naming the backend it is for. It is honoured, or refused with the
  reason (HARNESS_BACKEND unset, not a file, no version printed, a version outside the
  supported range or not the one a `==VERSION` column names); never ignored.
The matrix cell names the version that ran.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harnesscheck.core.contracts import ProviderSpec


@dataclass(frozen=True)
class PinnedBinary:
    backend: str
    path: Path
    version: str
    #: where the binary came from: "cache" (install-clis) or "HARNESS_BACKEND_CLI"
    source: str = "cache"


@cache
def _probe(path: str, timeout_s: float) -> str | None:
    from harnesscheck.backends.registry import probe_version

    return probe_version(Path(path), timeout_s)


def _override(spec: ProviderSpec, environ) -> tuple[PinnedBinary | None, str] | None:
    """The HARNESS_BACKEND_CLI binary for this backend: (binary, "") honoured, (None, why)
    refused, or None when no override concerns this backend."""
    from harnesscheck.backends.registry import (
        base_id,
        parse_version,
        version_probe_timeout_s,
        version_range,
        version_supported,
    )

    raw = (environ.get("HARNESS_BACKEND_CLI") or "").strip()
    if not raw:
        return None
    selected = (environ.get("HARNESS_BACKEND") or "").strip()
    if not selected:
        return None, (
            f"HARNESS_BACKEND_CLI={raw} is set but HARNESS_BACKEND does not say which backend it is for: "
            f"refused (set HARNESS_BACKEND={base_id(spec.id)}, or unset HARNESS_BACKEND_CLI)"
        )
    if base_id(selected) != base_id(spec.id):
        return None  # an override for another backend
    path = Path(raw).expanduser()
    if not path.is_file() or not os.access(path, os.X_OK):
        return None, f"HARNESS_BACKEND_CLI={raw} is not an executable file: refused"
    printed = _probe(str(path.absolute()), version_probe_timeout_s(spec))
    version = parse_version(printed or "")
    if version is None:
        return None, f"HARNESS_BACKEND_CLI={raw} printed no version ({printed!r}): refused"
    found = ".".join(map(str, version))
    if not version_supported(spec, found):
        return None, f"HARNESS_BACKEND_CLI={raw} is {spec.cli_name} {found}, outside the supported {version_range(spec)}: refused"
    if "==" in spec.id and found != spec.pinned_version:
        return None, f"HARNESS_BACKEND_CLI={raw} is {found}, the column {spec.id} names {spec.pinned_version}: refused"
    return PinnedBinary(spec.id, path.absolute(), found, "HARNESS_BACKEND_CLI"), ""


def require_pinned_cli(backend: str | ProviderSpec, environ=None) -> tuple[PinnedBinary | None, str]:
    """(binary, "") when the CLI release of `backend` (a registered id, `ID==VERSION`, or
    a spec: a backend from `module:factory` or another package names its CLI in its spec)
    is installed and runs, or HARNESS_BACKEND_CLI names it; else (None, exact reason with
    the fix)."""
    from harnesscheck.backends.registry import get_spec, parse_version, version_probe_timeout_s
    from harnesscheck.core.paths import cli_cache_dir
    from harnesscheck.loopback.install import PinnedCli, binary_path, installed_releases, release_prefix

    spec = get_spec(backend) if isinstance(backend, str) else backend
    backend_id = spec.id
    from harnesscheck.loopback.install import pip_runtimes

    if spec.id in pip_runtimes() and spec.pinned_version:
        return _pip_runtime(spec, os.environ if environ is None else environ)
    if not (spec.cli_name and spec.cli_package and spec.pinned_version):
        return None, f"{backend_id} has no pinned npm CLI: the loopback level does not apply"
    overridden = _override(spec, os.environ if environ is None else environ)
    if overridden is not None:
        return overridden
    dest = cli_cache_dir()
    want = PinnedCli(backend_id, spec.cli_name, spec.cli_package, spec.pinned_version)
    prefix = release_prefix(dest, want)
    if prefix is None:
        have = installed_releases(dest, spec.cli_name, spec.cli_package)
        also = f"; the cache holds {', '.join(have)}" if have else ""
        how = (
            "`harnesscheck install-clis`"
            if "==" not in backend_id
            else f"`harnesscheck install-clis --backend {backend_id.partition('==')[0]} --version {spec.pinned_version}`"
        )
        return None, f"{spec.cli_package}@{spec.pinned_version} is not installed in {dest}{also} (run {how})"
    path = binary_path(prefix, spec.cli_name)
    from harnesscheck.loopback.install import manifest_versioned

    if spec.cli_name in manifest_versioned():  # no --version: release_prefix checked the package manifest
        return PinnedBinary(backend_id, path, spec.pinned_version), ""
    printed = _probe(str(path), version_probe_timeout_s(spec))
    if printed is None or parse_version(printed) != parse_version(spec.pinned_version):
        return None, f"{path} --version printed {printed!r}, expected {spec.pinned_version}"
    return PinnedBinary(backend_id, path, spec.pinned_version), ""


def _pip_runtime(spec: ProviderSpec, environ) -> tuple[PinnedBinary | None, str]:
    """A backend whose runtime install-clis puts in the cache with pip (loopback/install.py
    pip_runtimes(), e.g. deepseek's SDK dir `<cache>/deepseek@<pin>/`): that directory at the pin,
    or the directory HARNESS_BACKEND_CLI names for this backend (any supported version)."""
    import importlib

    from harnesscheck.backends.registry import base_id, version_range, version_supported
    from harnesscheck.core.paths import cli_cache_dir
    from harnesscheck.loopback.install import pip_runtime_dir

    installed = importlib.import_module(spec.factory.partition(":")[0]).installed_sdk_version
    raw = (environ.get("HARNESS_BACKEND_CLI") or "").strip()
    if raw and base_id((environ.get("HARNESS_BACKEND") or "").strip()) == spec.id:
        path = Path(raw).expanduser().absolute()
        found = installed(path) if path.is_dir() else None
        if found is None:
            return None, f"HARNESS_BACKEND_CLI={raw} is not a {spec.id} SDK directory (pip --target): refused"
        if not version_supported(spec, found):
            return None, f"HARNESS_BACKEND_CLI={raw} holds {found}, outside the supported {version_range(spec)}: refused"
        return PinnedBinary(spec.id, path, found, "HARNESS_BACKEND_CLI"), ""
    path = pip_runtime_dir(cli_cache_dir(), spec.id, spec.pinned_version or "")
    found = installed(path)
    if found != spec.pinned_version:
        return None, (
            f"{spec.id} {spec.pinned_version} is not installed in {path}"
            + (f" (it holds {found})" if found else "")
            + f" (run `harnesscheck install-clis --backend {spec.id}`)"
        )
    return PinnedBinary(spec.id, path, found), ""
