"""ToolScope: what a session's tools may touch, and path resolution beneath its root.

Contract (doc/SPEC-scope.md): every path a tool receives is resolved here, in one function,
relative to a directory fd opened on the root; nothing outside the root is ever opened.

Over 800 lines for a reason: path resolution is one security boundary (the walk from the root's
directory fd with O_NOFOLLOW, symlinks followed only while they stay beneath the root, the
hard-link and special-file checks, the deny patterns, the refusal codes), and it is reviewed as
one file; split, a reviewer could miss the half that refuses.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import re
import stat
import sys
import threading
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

READ_TOOLS: tuple[str, ...] = ("read_file", "list_dir", "grep")
WRITE_TOOLS: tuple[str, ...] = ("write_file", "edit_file")
ALL_TOOLS: tuple[str, ...] = READ_TOOLS + WRITE_TOOLS

DEFAULT_MAX_RESULT_BYTES = 256 * 1024


class ToolScope(BaseModel):
    """The host's tool scope for one session: a root, the tools allowed, read-only or not."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = "default"
    root: Path
    read_only: bool = True
    allowed_tools: tuple[str, ...] | None = Field(default=None, description="Tool names offered; None means every tool the mode permits.")
    path_patterns: tuple[str, ...] = Field(default=(), description="Glob patterns (relative to root) a path must match; empty = any.")
    max_result_bytes: int = Field(default=DEFAULT_MAX_RESULT_BYTES, gt=0)
    #: The root opened once (`open_root`); not a field: never serialized, not compared.
    _root_handle: "RootHandle | None" = PrivateAttr(default=None)

    def __eq__(self, other: object) -> bool:
        """Equal when the fields are: an opened root is state, not value."""
        return type(other) is type(self) and self.__dict__ == other.__dict__  # type: ignore[union-attr]

    def __hash__(self) -> int:
        return hash((type(self), tuple(self.__dict__.values())))

    def open_root(self, expect: tuple[int, int] | None = None) -> "RootHandle":
        """This scope's root as a directory fd, opened once (per process) and kept.

        Every later resolution walks beneath that fd; a call refuses `root_changed` once the
        root path no longer names the directory that was opened (rename, swap of the root
        or of a parent). `expect`: the (st_dev, st_ino) the host saw when it wrote the
        session's spec; a root that is not that directory is `root_changed` from the start."""
        with _ROOT_LOCK:
            handle = self._root_handle
            if handle is None or handle.pid != os.getpid():
                handle = RootHandle(str(self.root), expect or (handle.identity if handle is not None else None))
                self._root_handle = handle
            elif expect is not None and handle.identity != tuple(expect):
                handle.changed = True
            return handle

    def close_root(self) -> None:
        """Close the root opened by `open_root` (a later call opens it again, checked afresh
        against nothing: only for a scope whose session is over, e.g. a rehearsal)."""
        with _ROOT_LOCK:
            handle, self._root_handle = self._root_handle, None
        if handle is not None:
            handle.close()

    @field_validator("root")
    @classmethod
    def _root_absolute(cls, value: Path) -> Path:
        if not value.is_absolute():
            raise ValueError("scope root must be an absolute path")
        return value

    def tool_names(self) -> tuple[str, ...]:
        """Tools this scope offers: writers only when not read-only, filtered by allowed_tools."""
        names = READ_TOOLS if self.read_only else ALL_TOOLS
        if self.allowed_tools is not None:
            names = tuple(n for n in names if n in self.allowed_tools)
        return names


def require_root(scope: ToolScope) -> None:
    """A session's scope root must be an existing directory (the library's README snippet
    with a placeholder root used to run toolless and report ok): a ConfigError naming the
    root and the fix, before anything starts. Checked where a session starts, not when a
    scope is made (a host may build the scope before it creates the worktree)."""
    from harnesscheck.core.contracts import ConfigError

    if not scope.root.is_dir():
        what = "does not exist" if not scope.root.exists() else "is not a directory"
        raise ConfigError(f"scope root {scope.root}: {what}", "pass ToolScope(root=...) the worktree the tools are scoped to (an existing directory)")


# ---------------------------------------------------------------------------------------
# Path resolution: the one function every path-taking tool goes through.

#: Operations resolve_path knows. read/list/grep never mutate; write creates or opens for
#: overwrite (the caller truncates after the checks); edit opens an existing file read-write.
OPS: frozenset[str] = frozenset({"read", "list", "grep", "write", "edit"})
MUTATING_OPS: frozenset[str] = frozenset({"write", "edit"})

MAX_PATH_BYTES = 4096
MAX_COMPONENTS = 256
MAX_COMPONENT_BYTES = 255
MAX_SYMLINK_HOPS = 40

#: Every refusal code with its meaning. Stable: hosts, the bridge and checks key on these.
REASON_CODES: dict[str, str] = {
    "path_outside_scope": "the path climbs above the scope root, or is not matched by the scope's path patterns",
    "absolute_path": "absolute, drive-qualified, UNC, \\\\?\\ or home-relative (~) path",
    "invalid_path": "empty, control character or NUL, not NFC, too long, too many components",
    "symlink_escape": "a symlink on the way resolves outside the scope root",
    "symlink_loop": "too many symlinks while resolving (a loop)",
    "special_file": "the target is a FIFO, socket or device, not a regular file or directory",
    "not_found": "the target (or a directory on the way) does not exist",
    "is_directory": "a file operation named a directory",
    "not_directory": "a directory operation (or a path component) named a non-directory",
    "permission_denied": "the operating system refused access",
    "read_only": "a mutating tool or operation under a read-only scope",
    "not_allowed": "the tool exists but the scope does not offer it",
    "unknown_tool": "no tool of that name exists",
    "bad_arguments": "missing, extra or mistyped arguments, or an invalid regex",
    "too_large": "content or file above the tool's size limit",
    "hardlink_write": "a write through a file with more than one hard link",
    "hardlink_outside": "a read of a file with hard links that are not all inside the scope root (it may be an outside file)",
    "denied_path": "a hard-denied name (.git internals, agent config dirs), or a pseudo-filesystem (/proc, /sys, /dev, any procfs ...)",
    "exists": "the target kept appearing while being created (a race)",
    "no_match": "edit_file: the old text was not found, or found more than once",
    "not_text": "edit_file: the file is not UTF-8 text",
    "io_error": "an unexpected operating-system error during the operation",
    "root_changed": "the scope root was renamed, replaced or removed since the session opened it",
    "policy_denied": "the host's policy denied the call (a rule, a default, an approval not given; doc/SPEC-policy.md)",
    "limit_reached": "the session reached one of its policy limits (tool calls, bytes written, files touched, turns)",
}


class Refused(Exception):
    """A tool call refused by the scope. `code` is one of REASON_CODES; `detail` never
    quotes file contents or anything outside the root beyond the caller's own input."""

    def __init__(self, code: str, detail: str = ""):
        assert code in REASON_CODES, code
        self.code = code
        self.detail = detail
        super().__init__(f"{code}: {detail}" if detail else code)


@dataclass(slots=True)
class ResolvedPath:
    """An open fd on the resolved target beneath the root. All I/O goes through `fd`.

    `rel` is the scope-relative POSIX path of the target after symlinks ("." is the root).
    Close it (or use it as a context manager) when done.
    """

    rel: str
    kind: str  # "file" | "dir"
    fd: int
    st: os.stat_result
    created: bool = False
    created_dirs: tuple[str, ...] = ()

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    def __enter__(self) -> ResolvedPath:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# Names denied beneath the root, compared after NFC + casefold + Windows trimming (P7/P8).
DENY_ALWAYS: frozenset[str] = frozenset({".git"})
DENY_WRITE: frozenset[str] = frozenset({".git", ".claude", ".codex", ".cursor", ".gemini", ".opencode"})
DENY_WRITE_FILES: frozenset[str] = frozenset({".mcp.json"})
SPECIAL_TOP_DIRS: frozenset[str] = frozenset({"proc", "sys", "dev"})

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOCTTY = getattr(os, "O_NOCTTY", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_DIR_FLAGS = os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC
_LEAF_FLAGS = _O_NOFOLLOW | _O_NONBLOCK | _O_NOCTTY | _O_CLOEXEC
_DRIVE = re.compile(r"^[A-Za-z]:")


def deny_key(name: str) -> str:
    """The comparison form of a name for the deny-list: NFC, casefolded, with the trailing
    dots/spaces and `:stream` suffix Windows ignores removed."""
    key = unicodedata.normalize("NFC", name).casefold()
    key = key.split(":", 1)[0].rstrip(". ")
    return key or name


def is_denied_name(name: str, mutating: bool) -> bool:
    key = deny_key(name)
    if key in DENY_ALWAYS:
        return True
    return mutating and (key in DENY_WRITE or key in DENY_WRITE_FILES)


def show(path: object, limit: int = 160) -> str:
    """The caller's own input, quoted safely for a refusal detail (escaped, truncated)."""
    text = repr(path)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


def split_user_path(path: str) -> tuple[list[str], bool]:
    """Validate a tool path and split it into components (P1, P2, P8, P9, P10).

    Returns (components, trailing_slash). Backslash is a separator. `.` components are
    dropped; `..` stays a component and may not climb above the root lexically.
    """
    if not isinstance(path, str):
        raise Refused("bad_arguments", "path must be a string")
    if not path:
        raise Refused("invalid_path", "empty path (use '.' for the scope root)")
    for ch in path:
        if ch < " " or ch == "\x7f":
            what = "NUL byte" if ch == "\x00" else "control character"
            raise Refused("invalid_path", f"{what} in path {show(path)}")
    try:
        raw = path.encode("utf-8")
    except UnicodeEncodeError:
        raise Refused("invalid_path", f"path is not valid Unicode: {show(path)}") from None
    if len(raw) > MAX_PATH_BYTES:
        raise Refused("invalid_path", f"path longer than {MAX_PATH_BYTES} bytes")
    if not path.isascii() and not unicodedata.is_normalized("NFC", path):
        raise Refused("invalid_path", f"path is not NFC-normalized Unicode: {show(path)}")
    if path[0] in "/\\":
        raise Refused("absolute_path", f"{show(path)} is absolute; give a path relative to the scope root")
    if _DRIVE.match(path):
        raise Refused("absolute_path", f"{show(path)} is drive-qualified; give a path relative to the scope root")
    unified = path.replace("\\", "/")
    parts = [p for p in unified.split("/") if p and p != "."]
    if parts and parts[0].startswith("~"):
        raise Refused("absolute_path", f"{show(path)} is home-relative; give a path relative to the scope root")
    if len(parts) > MAX_COMPONENTS:
        raise Refused("invalid_path", f"more than {MAX_COMPONENTS} path components")
    depth = 0
    for part in parts:
        if len(part.encode("utf-8")) > MAX_COMPONENT_BYTES:
            raise Refused("invalid_path", f"a path component is longer than {MAX_COMPONENT_BYTES} bytes")
        if part == "..":
            depth -= 1
            if depth < 0:
                raise Refused("path_outside_scope", f"{show(path)} climbs above the scope root")
        else:
            depth += 1
    return parts, unified.endswith("/")


# ---------------------------------------------------------------------------------------
# path_patterns: globs relative to the root; `*` and `?` stay within a component, `**`
# crosses components; a pattern that matches a directory covers everything beneath it.


def _glob_to_regex(pattern: str) -> re.Pattern[str]:
    pat = pattern.replace("\\", "/").strip("/")
    out: list[str] = []
    i = 0
    while i < len(pat):
        if pat.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
            continue
        if pat.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        ch = pat[i]
        if ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "[" and pat.find("]", i + 2) != -1:
            end = pat.find("]", i + 2)
            body = pat[i + 1 : end]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end + 1
            continue
        else:
            out.append(re.escape(ch))
        i += 1
    return re.compile("(?:" + "".join(out) + r")(?:/.*)?\Z", re.DOTALL)


@lru_cache(maxsize=64)
def _compiled_patterns(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    return tuple(_glob_to_regex(p) for p in patterns)


def pattern_covers(patterns: tuple[str, ...], rel: str) -> bool:
    """True when no patterns are set, or one matches rel (or an ancestor of rel)."""
    if not patterns:
        return True
    return any(rx.match(rel) for rx in _compiled_patterns(patterns))


def pattern_may_contain(patterns: tuple[str, ...], rel_dir: str) -> bool:
    """True when something beneath directory rel_dir could match a pattern."""
    if not patterns or rel_dir == "." or pattern_covers(patterns, rel_dir):
        return True
    dparts = rel_dir.split("/")
    for pattern in patterns:
        pparts = pattern.replace("\\", "/").strip("/").split("/")
        for i, dpart in enumerate(dparts):
            if i >= len(pparts):
                break
            if pparts[i] == "**" or "**" in pparts[i]:
                return True
            if not fnmatch.fnmatchcase(dpart, pparts[i]):
                break
        else:
            if len(pparts) > len(dparts):
                return True
    return False


# ---------------------------------------------------------------------------------------


_ROOT_LOCK = threading.Lock()

#: statfs f_type of pseudo-filesystems (linux/magic.h): never served, wherever mounted.
#: devtmpfs reports tmpfs's magic, so /dev is also refused by its st_dev (special_fs_devices).
PSEUDO_FS_TYPES: dict[int, str] = {
    0x9FA0: "proc",
    0x62656572: "sysfs",
    0x64626720: "debugfs",
    0x74726163: "tracefs",
    0x73636673: "securityfs",
    0x27E0EB: "cgroup",
    0x63677270: "cgroup2",
    0xCAFE4A11: "bpf",
    0x62656570: "configfs",
    0x6165676C: "pstore",
    0xDE5E81E4: "efivarfs",
    0xF97CFF8C: "selinuxfs",
    0x43415D53: "smackfs",
    0x65735543: "fusectl",
    0x42494E4D: "binfmt_misc",
    0x19800202: "mqueue",
    0x6E736673: "nsfs",
    0x1CD1: "devpts",
    0x7655821: "resctrl",
    0x9FA2: "usbfs",
}

_FSTATFS: Any = None  # libc's fstatfs once loaded; False where unavailable
_STATFS_BUFS = threading.local()  # one struct statfs buffer per thread (the call drops the GIL)


def _load_fstatfs() -> Any:
    global _FSTATFS
    if _FSTATFS is None:
        fn: Any = False
        if sys.platform.startswith("linux"):
            try:
                import ctypes  # noqa: PLC0415 - only once a path is resolved

                fn = ctypes.CDLL(None, use_errno=True).fstatfs
                fn.restype = ctypes.c_int
                fn.buffer_type = ctypes.c_long * 32  # struct statfs: 120 bytes on 64-bit, f_type first
            except (OSError, AttributeError):
                fn = False
        _FSTATFS = fn
    return _FSTATFS


def pseudo_fs_type(fd: int) -> str | None:
    """The name of the pseudo-filesystem `fd` lies on (by `fstatfs` f_type), else None.

    A failing fstatfs on an open fd counts as pseudo (fail closed). Without fstatfs
    (not Linux) only the st_dev check of `special_fs_devices` applies."""
    fstatfs = _FSTATFS if _FSTATFS is not None else _load_fstatfs()
    if not fstatfs:
        return None
    buf = getattr(_STATFS_BUFS, "buf", None)
    if buf is None:
        buf = _STATFS_BUFS.buf = fstatfs.buffer_type()
    if fstatfs(fd, buf) != 0:
        return "unknown (fstatfs failed)"
    return PSEUDO_FS_TYPES.get(buf[0] & 0xFFFFFFFF)


@lru_cache(maxsize=1)
def special_fs_devices() -> frozenset[int]:
    """st_dev of procfs, sysfs and devtmpfs (when they are separate from /): never served."""
    devs: set[int] = set()
    try:
        root_dev = os.stat("/").st_dev
    except OSError:
        return frozenset()
    for top in ("/proc", "/sys", "/dev"):
        try:
            dev = os.stat(top).st_dev
        except OSError:
            continue
        if dev != root_dev:
            devs.add(dev)
    return frozenset(devs)


def is_special_fd(fd: int, st: os.stat_result, base_dev: int | None = None) -> bool:
    """True when an open fd lies on a pseudo-filesystem (by type) or on /proc, /sys, /dev.

    `base_dev`: the st_dev of a directory already checked (the scope root). A pseudo-
    filesystem is its own superblock with its own st_dev, so a target on the root's device
    needs no fstatfs; any other device (a mount or bind mount beneath the root) is checked."""
    if base_dev is not None and st.st_dev == base_dev:
        return False
    return st.st_dev in special_fs_devices() or pseudo_fs_type(fd) is not None


class RootHandle:
    """A scope root opened once: its directory fd, identity (st_dev, st_ino) and real path.

    `check()` runs before every resolution: the root path must still name the directory
    that was opened, else `root_changed`, for good (a rename or swap of the root or of any
    parent cannot redirect the session, and does not silently keep serving the old tree
    under a path that now means something else)."""

    __slots__ = ("path", "fd", "identity", "real", "pid", "changed", "is_fs_root", "error")

    def __init__(self, path: str, expect: tuple[int, int] | None = None):
        self.path = path
        self.pid = os.getpid()
        self.fd = -1
        self.identity: tuple[int, int] | None = tuple(expect) if expect is not None else None  # type: ignore[assignment]
        self.real = path
        self.changed = False
        self.is_fs_root = False
        self.error: Refused | None = None
        try:
            fd = os.open(path, _DIR_FLAGS & ~_O_NOFOLLOW)
        except OSError as err:
            self.error = Refused("not_found", f"the scope root is not an open-able directory ({errno.errorcode.get(err.errno or 0, 'EIO')})")
            return
        st = os.fstat(fd)
        opened = (st.st_dev, st.st_ino)
        real = os.path.realpath(path)
        try:
            real_st = os.stat(real)
        except OSError:
            real_st = None
        if (
            (self.identity is not None and opened != self.identity)
            or real_st is None
            or (
                real_st.st_dev,
                real_st.st_ino,
            )
            != opened
        ):
            self.changed = True
        self.fd, self.identity, self.real = fd, opened if self.identity is None else self.identity, real
        try:
            self.is_fs_root = _check_root(real)
            kind = pseudo_fs_type(fd) if st.st_dev not in special_fs_devices() else "proc, sys or dev"
            if kind is not None:
                raise Refused("denied_path", f"the scope root lies on a pseudo-filesystem ({kind})")
        except Refused as refusal:
            self.error = refusal

    def check(self) -> None:
        """Raise Refused unless the root path still names the directory opened."""
        if self.error is not None:
            raise self.error
        if not self.changed:
            try:
                st = os.stat(self.path)
                self.changed = (st.st_dev, st.st_ino) != self.identity
            except OSError:
                self.changed = True
        if self.changed:
            raise Refused(
                "root_changed",
                "the scope root was renamed, replaced or removed since the session opened it; refusing every call",
            )

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0 and self.pid == os.getpid():
            os.close(fd)

    def __del__(self) -> None:  # a scope dropped without close_root() does not leak its fd
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _check_root(root_real: str) -> bool:
    """Refuse a root inside /proc, /sys or /dev; return True when the root is '/'."""
    for top in ("/proc", "/sys", "/dev"):
        if _under(root_real, top):
            raise Refused("denied_path", "the scope root lies in /proc, /sys or /dev")
    return root_real == "/"


def _os_refusal(err: OSError, what: str) -> Refused:
    code = {
        errno.ENOENT: "not_found",
        errno.ENOTDIR: "not_directory",
        errno.EISDIR: "is_directory",
        errno.EACCES: "permission_denied",
        errno.EPERM: "permission_denied",
        errno.ENAMETOOLONG: "invalid_path",
        errno.ELOOP: "symlink_loop",
        errno.ENXIO: "special_file",
        errno.EEXIST: "exists",
    }.get(err.errno or 0, "io_error")
    name = errno.errorcode.get(err.errno or 0, "EIO")
    return Refused(code, f"{what}: {name}")


def resolve_path(scope: ToolScope, path: str, op: str) -> ResolvedPath:
    """Resolve a tool path beneath scope.root and return an open fd on the target.

    The root is opened once per scope as a directory fd (`ToolScope.open_root`) and must
    still be the directory the path names (`root_changed`); every component is opened
    relative to its parent's fd with O_NOFOLLOW, so nothing outside the root is ever opened
    (P1-P13). Pseudo-filesystems are refused by type wherever they are mounted.
    In-tree symlinks are followed by reading their text and walking it the same way; a
    link whose target leaves the root is refused. Raises Refused(code, detail).
    """
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}")
    mutating = op in MUTATING_OPS
    if mutating and scope.read_only:
        raise Refused("read_only", f"{op} is not allowed under a read-only scope")
    parts, trailing_slash = split_user_path(path)
    for part in parts:
        if part != ".." and is_denied_name(part, mutating):
            raise Refused("denied_path", f"{show(path)} names a protected path")
    handle = scope.open_root()
    handle.check()
    walker = _Walk(scope, op, handle.fd, handle.real, handle.is_fs_root, path, handle.identity[0])
    try:
        return walker.run(parts, trailing_slash)
    finally:
        walker.close_all()


#: Entries the scan for a hard-linked file's other names looks at before it gives up (refuses).
HARDLINK_SCAN_MAX = 100_000
_LINKS_SEEN: dict[tuple, bool] = {}


def links_all_inside(root_fd: int, st: os.stat_result) -> bool:
    """True when every one of a hard-linked file's `st_nlink` names lies beneath the root: a
    bounded walk of the root (no symlinks followed) counting the names of the same inode. A
    link to an outside file (P12 read) has a name the walk never finds; a walk over
    HARDLINK_SCAN_MAX entries gives up, and the read is refused. Cached per inode, link count
    and ctime (adding or removing a link changes both)."""
    try:
        root = os.fstat(root_fd)
    except OSError:
        return False
    key = (root.st_dev, root.st_ino, st.st_dev, st.st_ino, st.st_nlink, st.st_ctime_ns)
    if key in _LINKS_SEEN:
        return _LINKS_SEEN[key]
    found = seen = 0
    inside = False
    try:
        for _dir, _dirs, files, dfd in os.fwalk(".", dir_fd=root_fd, follow_symlinks=False):
            for name in files:
                seen += 1
                if seen > HARDLINK_SCAN_MAX:
                    raise StopIteration
                try:
                    other = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                except OSError:
                    continue
                if (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
                    found += 1
                    if found >= st.st_nlink:
                        inside = True
                        raise StopIteration
    except (StopIteration, OSError):
        pass
    if len(_LINKS_SEEN) > 4096:
        _LINKS_SEEN.clear()
    _LINKS_SEEN[key] = inside
    return inside


class _Walk:
    """One resolution: a stack of directory fds beneath the root, never above it."""

    def __init__(self, scope: ToolScope, op: str, root_fd: int, root_real: str, root_is_fs_root: bool, user_path: str, root_dev: int):
        self.scope = scope
        self.root_dev = root_dev
        self.op = op
        self.mutating = op in MUTATING_OPS
        self.root_fd = root_fd
        self.root_real = root_real
        self.root_is_fs_root = root_is_fs_root
        self.user_path = user_path
        self.stack: list[tuple[str, int]] = []
        self.hops = 0
        self.trailing_slash = False

    # -- helpers
    @property
    def cur(self) -> int:
        return self.stack[-1][1] if self.stack else self.root_fd

    def close_all(self) -> None:
        for _, fd in self.stack:
            os.close(fd)
        self.stack.clear()  # the root fd belongs to the scope's RootHandle

    def rel_of(self, leaf: str | None) -> str:
        names = [n for n, _ in self.stack]
        if leaf is not None:
            names.append(leaf)
        return "/".join(names) or "."

    def check_name(self, name: str, via_link: bool) -> None:
        if is_denied_name(name, self.mutating):
            raise Refused("denied_path", f"{show(self.user_path)} resolves to a protected path")
        if self.root_is_fs_root and not self.stack and name in SPECIAL_TOP_DIRS:
            raise Refused("denied_path", f"{show(self.user_path)}: /{name} is never served")

    def check_final(self, rel: str, st: os.stat_result, is_dir: bool, fd: int) -> None:
        if is_special_fd(fd, st, self.root_dev):
            raise Refused("denied_path", f"{show(self.user_path)} lies on a pseudo-filesystem (/proc, /sys, /dev, ...)")
        patterns = self.scope.path_patterns
        if patterns:
            ok = pattern_may_contain(patterns, rel) if is_dir and self.op in ("list", "grep") else pattern_covers(patterns, rel)
            if not ok:
                raise Refused("path_outside_scope", f"{show(self.user_path)} is not matched by the scope's path patterns")

    def check_creatable(self) -> None:
        """The current directory is not on a pseudo-filesystem: checked on entering a mount
        beneath the root (nothing on a procfs is opened, not even its directories' files),
        and before anything is created (a mkdir in cgroupfs or configfs is an action)."""
        cur = self.cur
        if is_special_fd(cur, os.fstat(cur), self.root_dev):
            raise Refused("denied_path", f"{show(self.user_path)} lies on a pseudo-filesystem (/proc, /sys, /dev, ...)")

    def follow(self, name: str, pending: list[tuple[str, bool]]) -> None:
        """Splice a symlink's text into the pending components, relative to its directory."""
        self.hops += 1
        if self.hops > MAX_SYMLINK_HOPS:
            raise Refused("symlink_loop", f"{show(self.user_path)}: too many levels of symbolic links")
        try:
            target = os.readlink(name, dir_fd=self.cur)
        except OSError as err:
            if err.errno in (errno.EINVAL, errno.ENOENT):
                pending.append((name, False))  # no longer a symlink: walk the name again
                return
            raise _os_refusal(err, show(self.user_path)) from None
        if not target or "\x00" in target:
            raise Refused("symlink_escape", f"{show(self.user_path)}: unusable symlink")
        if target.startswith("/"):
            real = self.root_real.rstrip("/") + "/"
            if self.root_real == "/":
                inner = target
            elif target == self.root_real or target.startswith(real):
                inner = target[len(self.root_real) :]
            else:
                raise Refused("symlink_escape", f"{show(self.user_path)} goes through a symlink that leaves the scope root")
            # An absolute in-tree link restarts from the root.
            for _, fd in self.stack:
                os.close(fd)
            self.stack.clear()
            target = inner
        comps = [c for c in target.split("/") if c and c != "."]
        pending.extend((c, True) for c in reversed(comps))

    # -- the walk
    def run(self, parts: list[str], trailing_slash: bool) -> ResolvedPath:
        self.trailing_slash = trailing_slash
        pending: list[tuple[str, bool]] = [(p, False) for p in reversed(parts)]
        while pending:
            name, via_link = pending.pop()
            if name == "..":
                if not self.stack:
                    if via_link:
                        raise Refused("symlink_escape", f"{show(self.user_path)} goes through a symlink that leaves the scope root")
                    raise Refused("path_outside_scope", f"{show(self.user_path)} climbs above the scope root")
                os.close(self.stack.pop()[1])
                continue
            self.check_name(name, via_link)
            if not pending:
                result = self.leaf(name, pending, trailing_slash)
                if result is not None:
                    return result
                continue  # the leaf was a symlink: its text is now pending
            fd = self.open_dir(name)
            if fd is None:
                self.follow(name, pending)
                continue
            if fd < 0:
                return self.create_chain(name, pending)
            self.stack.append((name, fd))
            if os.fstat(fd).st_dev != self.root_dev:  # a mount point: never walk into a pseudo-fs
                self.check_creatable()
        # Nothing left: the target is the current directory itself.
        return self.directory_target(os.dup(self.cur), self.rel_of(None))

    def open_dir(self, name: str) -> int | None:
        """Open an intermediate directory with O_NOFOLLOW. None: it is a symlink (follow it);
        -1: it does not exist and the op may create it."""
        for _attempt in range(4):
            try:
                return os.open(name, _DIR_FLAGS, dir_fd=self.cur)
            except OSError as err:
                if err.errno == errno.ENOENT and self.op == "write":
                    return -1
                if err.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                    raise _os_refusal(err, show(self.user_path)) from None
            try:
                mode = os.stat(name, dir_fd=self.cur, follow_symlinks=False).st_mode
            except FileNotFoundError:
                continue  # swapped meanwhile: try again
            except OSError as err:
                raise _os_refusal(err, show(self.user_path)) from None
            if stat.S_ISLNK(mode):
                return None
            if not stat.S_ISDIR(mode):
                raise Refused("not_directory", f"{show(self.user_path)}: a component is not a directory")
        raise Refused("exists", f"{show(self.user_path)} kept changing while being opened")

    def directory_target(self, fd: int, rel: str) -> ResolvedPath:
        try:
            st = os.fstat(fd)
            if not stat.S_ISDIR(st.st_mode):
                raise Refused("not_directory", f"{show(self.user_path)} is not a directory")
            if self.op in ("read", "write", "edit"):
                raise Refused("is_directory", f"{show(self.user_path)} is a directory")
            self.check_final(rel, st, is_dir=True, fd=fd)
        except BaseException:
            os.close(fd)
            raise
        return ResolvedPath(rel=rel, kind="dir", fd=fd, st=st)

    def leaf(self, name: str, pending: list[tuple[str, bool]], trailing_slash: bool) -> ResolvedPath | None:
        for _attempt in range(4):
            try:
                lst = os.stat(name, dir_fd=self.cur, follow_symlinks=False)
            except FileNotFoundError:
                if self.op != "write":
                    raise Refused("not_found", f"{show(self.user_path)} does not exist") from None
                if trailing_slash:
                    raise Refused("not_found", f"{show(self.user_path)}: no such directory") from None
                created = self.create_leaf(name)
                if created is not None:
                    return created
                continue  # it appeared meanwhile: look again
            except OSError as err:
                raise _os_refusal(err, show(self.user_path)) from None
            mode = lst.st_mode
            if stat.S_ISLNK(mode):
                self.follow(name, pending)
                return None
            if stat.S_ISDIR(mode):
                try:
                    fd = os.open(name, _DIR_FLAGS, dir_fd=self.cur)
                except OSError as err:
                    if err.errno in (errno.ELOOP, errno.ENOTDIR):
                        continue  # swapped meanwhile: look again
                    raise _os_refusal(err, show(self.user_path)) from None
                return self.directory_target(fd, self.rel_of(name))
            if not stat.S_ISREG(mode):
                raise Refused("special_file", f"{show(self.user_path)} is not a regular file")
            if trailing_slash or self.op == "list":
                raise Refused("not_directory", f"{show(self.user_path)} is not a directory")
            opened = self.open_file(name)
            if opened is not None:
                return opened
        raise Refused("exists", f"{show(self.user_path)} kept changing while being opened")

    def open_file(self, name: str) -> ResolvedPath | None:
        """Open a leaf lstat saw as a regular file; None if it was swapped meanwhile."""
        access = {"read": os.O_RDONLY, "grep": os.O_RDONLY, "edit": os.O_RDWR, "write": os.O_WRONLY}[self.op]
        try:
            fd = os.open(name, access | _LEAF_FLAGS, dir_fd=self.cur)
        except OSError as err:
            if err.errno in (errno.ELOOP, errno.ENOENT):
                return None  # swapped for a symlink or removed meanwhile: look again
            raise _os_refusal(err, show(self.user_path)) from None
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise Refused("is_directory", f"{show(self.user_path)} is a directory")
            if not stat.S_ISREG(st.st_mode):
                raise Refused("special_file", f"{show(self.user_path)} is not a regular file")
            rel = self.rel_of(name)
            self.check_final(rel, st, is_dir=False, fd=fd)
            if self.mutating and st.st_nlink > 1:
                raise Refused("hardlink_write", f"{show(self.user_path)} has {st.st_nlink} hard links; writes through hard links are refused")
            if not self.mutating and st.st_nlink > 1 and not links_all_inside(self.root_fd, st):
                raise Refused(
                    "hardlink_outside",
                    f"{show(self.user_path)} has {st.st_nlink} hard links, not all of them inside the scope root: it may be a file outside the root",
                )
        except BaseException:
            os.close(fd)
            raise
        return ResolvedPath(rel=rel, kind="file", fd=fd, st=st)

    def create_leaf(self, name: str, created_dirs: tuple[str, ...] = ()) -> ResolvedPath | None:
        rel = self.rel_of(name)
        if self.scope.path_patterns and not pattern_covers(self.scope.path_patterns, rel):
            raise Refused("path_outside_scope", f"{show(self.user_path)} is not matched by the scope's path patterns")
        self.check_creatable()
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _LEAF_FLAGS, 0o666, dir_fd=self.cur)
        except FileExistsError:
            if created_dirs:
                raise Refused("exists", f"{show(self.user_path)} appeared while being created") from None
            return None
        except OSError as err:
            raise _os_refusal(err, show(self.user_path)) from None
        try:
            st = os.fstat(fd)
            self.check_final(rel, st, is_dir=False, fd=fd)
        except BaseException:
            os.close(fd)
            raise
        return ResolvedPath(rel=rel, kind="file", fd=fd, st=st, created=True, created_dirs=created_dirs)

    def create_chain(self, first: str, pending: list[tuple[str, bool]]) -> ResolvedPath:
        """write to a path whose directories do not exist yet: check everything, then
        mkdir each one relative to its parent fd and create the leaf (P5)."""
        names = [first] + [n for n, _ in reversed(pending)]
        pending.clear()
        if self.trailing_slash:
            raise Refused("not_found", f"{show(self.user_path)}: no such directory (write_file writes files)")
        if ".." in names:
            raise Refused("not_found", f"{show(self.user_path)}: '..' after a directory that does not exist")
        for n in names:
            self.check_name(n, False)
        rel = self.rel_of(None)
        full = "/".join(([] if rel == "." else [rel]) + names)
        if self.scope.path_patterns and not pattern_covers(self.scope.path_patterns, full):
            raise Refused("path_outside_scope", f"{show(self.user_path)} is not matched by the scope's path patterns")
        made: list[str] = []
        for n in names[:-1]:
            self.check_creatable()
            try:
                os.mkdir(n, 0o777, dir_fd=self.cur)
                made.append(self.rel_of(n))
            except FileExistsError:
                pass
            except OSError as err:
                raise _os_refusal(err, show(self.user_path)) from None
            try:
                fd = os.open(n, _DIR_FLAGS, dir_fd=self.cur)
            except OSError as err:
                if err.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise Refused("symlink_escape", f"{show(self.user_path)}: a directory was swapped while being created") from None
                raise _os_refusal(err, show(self.user_path)) from None
            self.stack.append((n, fd))
        result = self.create_leaf(names[-1], tuple(made))
        if result is None:
            raise Refused("exists", f"{show(self.user_path)} appeared while being created")
        return result
