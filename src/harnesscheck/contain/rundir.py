"""Run dirs: where one session's files live, private to the host (doc/SPEC-rundir.md).

A run dir holds the session's audit trail (bridge trace, session trace, event log, report)
and what the CLI loads (its MCP config, system prompt, config homes). Whoever can write it
can rewrite the trail or plant a config the CLI loads, so:

- `prepare_run_dir(path, forbidden=...)`: without a path, a fresh `mkdtemp` (0700, random
  name); with one, the path with `..` and symlinks resolved first, then refused when it lies
  inside (or is) a forbidden root (the worktree, the scope root), refused when an existing
  ancestor is writable by another user (unless sticky, like /tmp) or owned by one, created
  0700 when missing, and when present it must be a directory owned by this uid that no
  other user can write (its mode is then tightened to 0700).
- Every file the host writes there is created fresh beneath its parent directory's fd:
  whatever entry had that name is unlinked (never followed), then `O_CREAT|O_EXCL|
  O_NOFOLLOW`, mode 0600 (`create_private`, `write_private`). Files replaced atomically go
  through a temp file with a random name (`mkstemp`), never a predictable one
  (`replace_private`).
"""

from __future__ import annotations

import errno
import json
import mmap
import os
import secrets as _secrets
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from harnesscheck.core.contracts import ConfigError

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_DIR_FLAGS = os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC


class RunDirError(ConfigError):
    """A run dir that cannot be private to the host: raised before the session starts."""


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def check_outside(real: str, forbidden: Iterable[os.PathLike[str] | str]) -> None:
    """Refuse a (resolved) run dir that is, or lies inside, a forbidden root (resolved too)."""
    for root in forbidden:
        root_real = os.path.realpath(os.fspath(root))
        if _inside(real, root_real):
            raise RunDirError(
                f"the run dir {real} is inside the worktree {root_real} (after resolving '..' and symlinks): "
                "the model could rewrite its own audit trail and plant files the CLI loads",
                "choose a run dir outside the worktree, e.g. leave it unset for a fresh private temp dir",
            )


def _check_ancestors(real: str) -> None:
    """Every existing ancestor is owned by root or this uid, and not writable by others
    unless sticky (/tmp): nobody else can rename or replace the run dir under the host."""
    uid = os.getuid() if hasattr(os, "getuid") else None
    if uid is None:
        return
    parent = os.path.dirname(real)
    while True:
        try:
            st = os.stat(parent)
        except FileNotFoundError:
            st = None
        if st is not None:
            if st.st_uid not in (0, uid):
                raise RunDirError(
                    f"the run dir's ancestor {parent} belongs to another user (uid {st.st_uid})",
                    "choose a run dir under a directory you own",
                )
            if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
                raise RunDirError(
                    f"the run dir's ancestor {parent} is writable by other users and not sticky",
                    "choose a run dir under a directory only you can write (or a sticky one like /tmp)",
                )
        up = os.path.dirname(parent)
        if up == parent:
            return
        parent = up


def verify_private_dir(path: str) -> None:
    """`path` (no symlink) is a directory owned by this uid that no other user can write;
    its mode is tightened to 0700 (a run dir holds tokens' config homes)."""
    try:
        fd = os.open(path, _DIR_FLAGS)
    except OSError as err:
        raise RunDirError(
            f"the run dir {path} is not a directory that can be opened without following a symlink ({os.strerror(err.errno or 0)})",
            "remove it or choose another run dir",
        ) from None
    try:
        st = os.fstat(fd)
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            raise RunDirError(
                f"the run dir {path} belongs to another user (uid {st.st_uid})",
                "choose a run dir of your own (unset: a fresh private temp dir)",
            )
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise RunDirError(
                f"the run dir {path} is writable by other users (mode {stat.S_IMODE(st.st_mode):o})",
                "remove it, or `chmod 700` it if nobody else wrote into it",
            )
        if stat.S_IMODE(st.st_mode) != 0o700:
            os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def prepare_run_dir(path: os.PathLike[str] | str | None, *, forbidden: Iterable[os.PathLike[str] | str] = (), prefix: str = "harnesscheck-") -> Path:
    """The run dir a session may use, as its resolved path; raises RunDirError naming the fix."""
    if path is None:
        return Path(tempfile.mkdtemp(prefix=prefix))  # 0700, random name, created exclusively
    real = os.path.realpath(os.path.abspath(os.path.expanduser(os.fspath(path))))
    check_outside(real, forbidden)
    _check_ancestors(real)
    os.makedirs(os.path.dirname(real), mode=0o700, exist_ok=True)
    try:
        os.mkdir(real, 0o700)
    except FileExistsError:
        pass
    verify_private_dir(real)
    return Path(real)


def _open_parent(path: Path) -> tuple[int, str]:
    parent = os.open(os.fspath(path.parent), _DIR_FLAGS)
    return parent, path.name


def create_private(path: os.PathLike[str] | str, *, append: bool = False) -> int:
    """A new, empty file at `path`, opened for writing (an fd): created beneath its parent's
    fd with O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600, after unlinking any entry of that name
    (a planted symlink is removed, never followed). A directory there raises."""
    parent, name = _open_parent(Path(path))
    try:
        try:
            os.unlink(name, dir_fd=parent)
        except FileNotFoundError:
            pass
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC | (os.O_APPEND if append else 0)
        return os.open(name, flags, 0o600, dir_fd=parent)
    finally:
        os.close(parent)


def place_private(root: os.PathLike[str] | str, rel: str, *, data: bytes | None = None, link_to: str | None = None) -> None:
    """Put a private file (`data`, mode 0600) or a symlink (`link_to`) at `root/rel`, walking
    from root's fd one name at a time and never following a link: a missing folder is made
    (0700); an entry that is not a real folder where one is needed (a link or a file a CLI left
    in its HOME) is removed and made a folder; whatever is at the leaf is removed first (a
    folder as a tree, beneath its fd). What a CLI planted in the state it keeps between
    sessions of one run dir never sends the host's write elsewhere. `rel` beneath root only."""
    parts = Path(rel).parts
    if not parts or Path(rel).is_absolute() or ".." in parts or (data is None) == (link_to is None):
        raise ValueError(f"place_private: {rel!r} is not a path beneath the root, or not one of data/link_to")
    fd = os.open(os.fspath(root), _DIR_FLAGS)
    try:
        for name in parts[:-1]:
            try:
                below = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                os.mkdir(name, 0o700, dir_fd=fd)
                below = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                os.unlink(name, dir_fd=fd)  # a link or a file where a folder belongs: removed, never followed
                os.mkdir(name, 0o700, dir_fd=fd)
                below = os.open(name, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = below
        leaf = parts[-1]
        try:
            os.unlink(leaf, dir_fd=fd)
        except FileNotFoundError:
            pass
        except IsADirectoryError:
            shutil.rmtree(leaf, dir_fd=fd)
        if link_to is not None:
            os.symlink(link_to, leaf, dir_fd=fd)
            return
        out = os.open(leaf, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC, 0o600, dir_fd=fd)
        try:
            _write_all(out, data)
        finally:
            os.close(out)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_private(path: os.PathLike[str] | str, text: str | bytes) -> Path:
    """Write `text` into a fresh private file at `path` (see `create_private`)."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    fd = create_private(path)
    try:
        _write_all(fd, data)
    finally:
        os.close(fd)
    return Path(path)


def replace_private(path: os.PathLike[str] | str, text: str | bytes) -> Path:
    """Atomically replace `path` by `text` (mode 0600): written to a temp file with a random
    name in the same directory (mkstemp: O_EXCL, never a predictable name), then renamed."""
    target = Path(path)
    data = text.encode("utf-8") if isinstance(text, str) else text
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=os.fspath(target.parent))
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return target


def _needles(values: Iterable[str]) -> list[bytes]:
    """Each secret as it can appear in a JSONL file: raw UTF-8 and JSON-escaped (ASCII-only
    and UTF-8 escapings), longest first."""
    out: set[bytes] = set()
    for value in values:
        if len(value) < 8:
            continue
        for form in (value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]):
            try:
                out.add(form.encode("utf-8"))
            except UnicodeEncodeError:
                continue
    return sorted(out, key=len, reverse=True)


def redact_files(run_dir: os.PathLike[str] | str, names: Iterable[str], values: Iterable[str]) -> list[str]:
    """After the session: rewrite each named file of the run dir that holds a secret value
    verbatim, with every occurrence replaced by [REDACTED] (the bridge child redacts only with
    its scrubbed env; the host knows the real secrets). Opened beneath the run dir's fd with
    O_NOFOLLOW; searched with mmap (no copy when nothing is found, the common case);
    rewritten line by line (split on b"\\n" only) into a random-named temp file, then renamed
    over. Returns the names rewritten."""
    needles = _needles(values)
    if not needles:
        return []
    changed: list[str] = []
    dir_fd = os.open(os.fspath(run_dir), _DIR_FLAGS)
    try:
        for name in names:
            try:
                fd = os.open(name, os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC | getattr(os, "O_NONBLOCK", 0), dir_fd=dir_fd)
            except OSError:
                continue  # absent (or not a plain file): nothing of ours to redact
            with os.fdopen(fd, "rb") as fh:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
                    continue
                with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as mm:
                    if not any(mm.find(n) >= 0 for n in needles):
                        continue
                tmp = f".{name}.{_secrets.token_hex(8)}.tmp"
                out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC, 0o600, dir_fd=dir_fd)
                try:
                    with os.fdopen(out, "wb") as dst:
                        for line in fh:
                            for needle in needles:
                                if needle in line:
                                    line = line.replace(needle, b"[REDACTED]")
                            dst.write(line)
                    os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
                except BaseException:
                    try:
                        os.unlink(tmp, dir_fd=dir_fd)
                    except OSError:
                        pass
                    raise
                changed.append(name)
    finally:
        os.close(dir_fd)
    return changed


#: Where the CLI's per-run config homes and private HOME live in a run dir (envpolicy.config_home).
CONFIG_HOMES = "config-homes"

#: Everything in a run dir a CLI writes its own state into: the per-run config homes
#: (claude, codex), the private HOME at `<run>/home` (opencode, zcode, deepseek, cursor, codex's
#: user HOME: with its XDG dirs beneath it) and the scratch cwd. A transport adds its own
#: (`HarnessTransport.cli_state_dirs`, deepseek's `dsh-home`).
CLI_STATE_DIRS: tuple[str, ...] = (CONFIG_HOMES, "home", "cwd")


def _state_roots(run_dir: os.PathLike[str] | str, dirs) -> list[str]:
    """The state dirs that are real directories of the run dir (a symlink is never walked)."""
    out = []
    for name in dirs:
        path = os.path.join(os.fspath(run_dir), name)
        if os.path.isdir(path) and not os.path.islink(path):
            out.append(path)
    return out


def config_home_entries(run_dir: os.PathLike[str] | str, dirs: tuple[str, ...] = CLI_STATE_DIRS) -> set[str]:
    """Every entry (file, dir, symlink) beneath the run dir's CLI state dirs (`dirs`), as paths
    relative to the run dir: taken just before the CLI starts, it is what the host put there
    (configs, login links, a plugin pre-fill)."""
    base = os.fspath(run_dir)
    found: set[str] = set()
    for root in _state_roots(run_dir, dirs):
        found.add(os.path.relpath(root, base))
        for dirpath, dirnames, filenames in os.walk(root):
            for name in (*dirnames, *filenames):
                found.add(os.path.relpath(os.path.join(dirpath, name), base))
    return found


def forget_cli_state(run_dir: os.PathLike[str] | str, kept: set[str], dirs: tuple[str, ...] = CLI_STATE_DIRS) -> list[str]:
    """Remove what the CLI wrote into its state dirs in the run dir (`dirs`: config homes,
    private HOME, scratch cwd) during the session: its transcripts (claude `projects/*.jsonl`,
    codex `sessions/rollout-*.jsonl`), MCP logs, history databases (opencode's
    `home/.local/share/opencode/opencode.db*`), caches. They hold every tool argument verbatim,
    host secrets among them, and no redaction can be trusted inside a binary database;
    whatever a new release adds is removed too, because only the entries the host put there
    before the CLI started (`kept`, from config_home_entries) stay. Symlinks are unlinked,
    never followed. Returns the removed paths, relative to the run dir."""
    base = os.fspath(run_dir)
    removed: list[str] = []
    for root in _state_roots(run_dir, dirs):
        for dirpath, dirnames, filenames in os.walk(root, topdown=False):
            for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, base)
                if rel not in kept:
                    try:
                        os.unlink(path)
                        removed.append(rel)
                    except OSError:
                        pass
            for name in dirnames:
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, base)
                if rel not in kept and not os.path.islink(path):
                    try:
                        os.rmdir(path)
                        removed.append(rel)
                    except OSError:
                        pass
    return removed


def remove_private_tree(path: os.PathLike[str] | str) -> str | None:
    """Remove a session's private dir whatever modes its CLI left (a mode-0 subdir, a file
    without write permission, a dir chmod'ed 0777): every directory beneath it is made
    u+rwx first (never following a symlink: one is unlinked, not walked), then the tree is
    removed. None when it is gone; else why not (the caller reports it: never silent)."""
    top = os.fspath(path)
    if not os.path.lexists(top):
        return None
    if os.path.islink(top) or not os.path.isdir(top):
        try:
            os.unlink(top)
            return None
        except OSError as err:
            return os.strerror(err.errno or 0)

    def open_up(directory: str) -> None:
        try:
            st = os.lstat(directory)
            if stat.S_ISDIR(st.st_mode) and (st.st_mode & 0o700) != 0o700:
                os.chmod(directory, stat.S_IMODE(st.st_mode) | 0o700)
        except OSError:
            return
        try:
            entries = list(os.scandir(directory))
        except OSError:
            return
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                open_up(entry.path)

    open_up(top)
    errors: list[str] = []
    shutil.rmtree(top, onexc=lambda _fn, p, exc: errors.append(f"{os.path.relpath(p, top)}: {exc.strerror or exc}")) if sys.version_info >= (
        3,
        12,
    ) else shutil.rmtree(top, onerror=lambda _fn, p, info: errors.append(f"{os.path.relpath(p, top)}: {info[1]}"))
    if os.path.lexists(top):
        return "; ".join(errors[:3]) or "still present"
    return None


def recheck_private(run_dir: os.PathLike[str] | str) -> list[str]:
    """After the session: the run dir is still 0700 and owned by us, and nothing beneath it is
    writable by another user (a CLI under the guards alone can chmod what it can reach). What
    was found is made private again and returned (relative paths and modes) for the outcome."""
    base = os.fspath(run_dir)
    found: list[str] = []
    try:
        st = os.lstat(base)
    except OSError:
        return found
    if stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) != 0o700:
        found.append(f"the run dir was mode {stat.S_IMODE(st.st_mode):o}")
        try:
            os.chmod(base, 0o700)
        except OSError:
            pass
    for dirpath, dirnames, filenames in os.walk(base):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            try:
                est = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISLNK(est.st_mode) or not est.st_mode & stat.S_IWOTH:
                continue
            found.append(f"{os.path.relpath(path, base)} was mode {stat.S_IMODE(est.st_mode):o}")
            try:
                os.chmod(path, stat.S_IMODE(est.st_mode) & ~0o022)
            except OSError:
                pass
    return found
