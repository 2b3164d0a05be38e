"""The CLI cache's integrity: what `install-clis` put there is what a session runs.

Requirement (issue 30): a CLI of one session (same uid, under the process guard alone) could
plant an executable in `$HARNESSCHECK_CACHE/clis/...`, and `registry.find_cli` would run it
as the next session's CLI. So:

- `record(package_dir)`: at install, a manifest of every regular file of the package dir
  (relative path, size, sha256) and of every symlink (its target), with each file's ctime,
  written outside the package dir: `<clis>/.manifests/<entry>.json` (0600). The sandbox binds
  only the package dir, read-only, so a sandboxed CLI can reach neither.
- `verify(cli_path)`: for a CLI inside the cache, its package dir must match its manifest:
  the same set of entries; a file whose size and ctime are unchanged is taken as is (ctime
  cannot be set from user space; a write or a chmod moves it), any other is hashed again and
  compared. No manifest, or any difference: `CliInstallChanged`, naming the fix (reinstall).
  A CLI outside the cache (PATH, HARNESS_BACKEND_CLI elsewhere) is not ours to judge.
  Nothing is remembered between calls: the harness transports verify again at every session
  (a stat walk: ~3,700 entries for opencode, milliseconds), so a CLI planted after the first
  session of a long-lived host is still refused at the next.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

from harnesscheck.core.contracts import ErrorClass, HarnessError

MANIFESTS = ".manifests"
#: Files the host writes beside an install for itself (deepseek's `harnesscheck-dsh-driver`
#: launcher, rewritten for each host interpreter): not part of what was installed.
HOST_PREFIX = "harnesscheck-"


class CliInstallChanged(HarnessError):
    """A cached CLI's files differ from what install-clis recorded (or nothing was recorded)."""

    error_class = ErrorClass.cli_unsupported
    exit_code = 3

    def __init__(self, entry: str, why: str):
        self.entry, self.why = entry, why
        super().__init__(
            f"the cached CLI {entry} is not what install-clis installed: {why}",
            f"reinstall it: remove the cache entry {entry} and run `harnesscheck install-clis` (it records the install's digest)",
        )


def _cache() -> str:
    from harnesscheck.core.paths import cli_cache_dir

    return os.path.realpath(str(cli_cache_dir()))


def package_dir(cli_path: os.PathLike[str] | str) -> Path | None:
    """The cache entry (`<clis>/<name>@<version>`) holding `cli_path`, or None outside the cache."""
    cache = _cache()
    for path in (os.path.abspath(os.fspath(cli_path)), os.path.realpath(os.fspath(cli_path))):
        if path.startswith(cache + os.sep):
            first = os.path.relpath(path, cache).split(os.sep)[0]
            if first and first != MANIFESTS:
                return Path(cache) / first
    return None


def manifest_path(pkg: Path) -> Path:
    return pkg.parent / MANIFESTS / f"{pkg.name}.json"


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _walk(pkg: Path):
    """(relative path, lstat) of every entry beneath pkg, symlinks not followed."""
    base = os.fspath(pkg)
    for dirpath, dirnames, filenames in os.walk(base):
        for name in dirnames + filenames:
            if dirpath == base and name.startswith(HOST_PREFIX):
                continue
            path = os.path.join(dirpath, name)
            try:
                yield os.path.relpath(path, base), path, os.lstat(path)
            except OSError:
                continue


def record(pkg: os.PathLike[str] | str) -> Path:
    """Write the manifest of the package dir `pkg` (see module doc); returns its path."""
    pkg = Path(os.path.realpath(os.fspath(pkg)))
    files: dict[str, dict] = {}
    links: dict[str, str] = {}
    for rel, path, st in _walk(pkg):
        if stat.S_ISLNK(st.st_mode):
            links[rel] = os.readlink(path)
        elif stat.S_ISREG(st.st_mode):
            files[rel] = {"size": st.st_size, "sha256": _sha256(path), "ctime_ns": st.st_ctime_ns, "mode": stat.S_IMODE(st.st_mode)}
    out = manifest_path(pkg)
    out.parent.mkdir(mode=0o700, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump({"package": pkg.name, "files": files, "links": links}, fh)
    os.replace(tmp, out)
    return out


def verify(cli_path: os.PathLike[str] | str) -> None:
    """Raise CliInstallChanged when the cached CLI at cli_path differs from its manifest."""
    pkg = package_dir(cli_path)
    if pkg is None:
        return
    manifest = manifest_path(pkg)
    if not manifest.exists():
        raise CliInstallChanged(pkg.name, "no digest was recorded for it")
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
        files, links = dict(data["files"]), dict(data["links"])
    except (OSError, ValueError, KeyError, TypeError):
        raise CliInstallChanged(pkg.name, "its recorded digest cannot be read") from None
    seen_files: set[str] = set()
    seen_links: set[str] = set()
    for rel, path, st in _walk(pkg):
        if stat.S_ISLNK(st.st_mode):
            if links.get(rel) != os.readlink(path):
                raise CliInstallChanged(pkg.name, f"{rel} is a symlink it did not install")
            seen_links.add(rel)
        elif stat.S_ISREG(st.st_mode):
            want = files.get(rel)
            if want is None:
                raise CliInstallChanged(pkg.name, f"{rel} was added since")
            if st.st_size != want["size"]:
                raise CliInstallChanged(pkg.name, f"{rel} changed size")
            if st.st_ctime_ns != want["ctime_ns"] and _sha256(path) != want["sha256"]:
                raise CliInstallChanged(pkg.name, f"{rel} changed content")
            seen_files.add(rel)
    missing = (set(files) - seen_files) | (set(links) - seen_links)
    if missing:
        raise CliInstallChanged(pkg.name, f"{sorted(missing)[0]} was removed since")
