"""Finding the pinned real CLIs the loopback level runs (no PATH edits needed).

The loopback level runs exactly the pinned version from `harnesscheck install-clis`'s
cache dir, never whatever is on PATH: the matrix cell names that version.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harnesscheck.contracts import ProviderSpec


@dataclass(frozen=True)
class PinnedBinary:
    backend: str
    path: Path
    version: str


@cache
def _probe(path: str) -> str | None:
    from harnesscheck.registry import probe_version

    return probe_version(Path(path))


def require_pinned_cli(backend: str | ProviderSpec) -> tuple[PinnedBinary | None, str]:
    """(binary, "") when the pinned CLI of `backend` (a registered id, or a spec: a backend
    from `module:factory` or another package names its CLI in its spec) is installed and
    runs; else (None, exact reason with the fix)."""
    from harnesscheck.loopback.install import binary_path, installed_version
    from harnesscheck.paths import cli_cache_dir
    from harnesscheck.registry import get_spec, parse_version

    spec = get_spec(backend) if isinstance(backend, str) else backend
    backend_id = spec.id
    if not (spec.cli_name and spec.cli_package and spec.pinned_version):
        return None, f"{backend_id} has no pinned npm CLI: the loopback level does not apply"
    dest = cli_cache_dir()
    path = binary_path(dest, spec.cli_name)
    have = installed_version(dest, spec.cli_package)
    if have is None or not path.exists():
        return None, (
            f"{spec.cli_package}@{spec.pinned_version} is not installed in {dest} "
            f"(run `harnesscheck install-clis`)"
        )
    if have != spec.pinned_version:
        return None, (
            f"{spec.cli_package} {have} installed in {dest}, pinned {spec.pinned_version} "
            f"(run `harnesscheck install-clis`)"
        )
    printed = _probe(str(path))
    if printed is None or parse_version(printed) != parse_version(spec.pinned_version):
        return None, f"{path} --version printed {printed!r}, expected {spec.pinned_version}"
    return PinnedBinary(backend_id, path, spec.pinned_version), ""
