"""dispatch: the choke point every tool call goes through (doc/SPEC-scope.md).

`dispatch(name, args, scope, trace)` refuses unknown and not-offered tools, validates the
arguments, resolves every path with `scope.resolve_path` (one function), does all I/O on
the fds that resolution returned, bounds the result with an explicit marker, and traces
the decision with a stable reason code. It never raises for a tool-level problem: a
refusal is `ToolResult(ok=False, code=..., text="refused: <code>: <detail>")`.
"""

from __future__ import annotations

import codecs
import errno
import os
import re
import select
import signal
import stat
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

from harnesscheck.choke.trace import Trace
from harnesscheck.core.scope import (
    ALL_TOOLS,
    WRITE_TOOLS,
    Refused,
    ResolvedPath,
    ToolScope,
    is_denied_name,
    is_special_fd,
    pattern_covers,
    pattern_may_contain,
    resolve_path,
    show,
)

if TYPE_CHECKING:
    from harnesscheck.core.policy import PolicyEngine

MAX_WRITE_BYTES = 8 * 1024 * 1024
MAX_EDIT_BYTES = 8 * 1024 * 1024
MAX_LIST_ENTRIES = 5000
MAX_LIST_SCAN = 100_000
MAX_PATTERN_CHARS = 1000
GREP_TIME_BUDGET_S = 5.0
GREP_MAX_FILES = 20000
GREP_MAX_SCAN_BYTES = 64 * 1024 * 1024
GREP_MAX_FILE_BYTES = 4 * 1024 * 1024
GREP_MAX_MATCHES = 5000
GREP_MAX_DEPTH = 64
GREP_LINE_SHOWN = 300
GREP_LINE_MATCHED = 8192
TRACE_DETAIL_CHARS = 300

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_SUB_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | _O_CLOEXEC
_SUB_FILE_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | _O_CLOEXEC


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool call returns to the model. ok=False means refused (code set)."""

    ok: bool
    text: str
    code: str | None = None
    truncated: bool = False


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """A tool offered to the model: name, description, JSON Schema of its arguments."""

    name: str
    description: str
    input_schema: dict

    def to_anthropic(self) -> dict:
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}

    def to_openai_chat(self) -> dict:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.input_schema},
        }

    def to_openai_responses(self) -> dict:
        return {"type": "function", "name": self.name, "description": self.description, "parameters": self.input_schema}


def _schema(props: dict[str, str], required: tuple[str, ...]) -> dict:
    return {
        "type": "object",
        "properties": {k: {"type": "string", "description": v} for k, v in props.items()},
        "required": list(required),
        "additionalProperties": False,
    }


_PATH_DOC = "Path relative to the workspace root, '/' separated ('.' is the root)."

# name -> (description, properties, required, optional defaults)
_SPECS: dict[str, tuple[str, dict[str, str], tuple[str, ...], dict[str, str]]] = {
    "read_file": (
        "Read a UTF-8 text file beneath the workspace root. Long files are cut with a '[truncated: ...]' marker.",
        {"path": _PATH_DOC},
        ("path",),
        {},
    ),
    "list_dir": (
        "List a directory beneath the workspace root, one entry per line; directories end with '/', symlinks with '@'.",
        {"path": _PATH_DOC},
        (),
        {"path": "."},
    ),
    "grep": (
        "Search files for a Python regular expression, recursively under a directory (or in "
        "one file). Prints 'path:line: text' per matching line; binary files, symlinks met "
        "while recursing and special files are skipped.",
        {"pattern": f"Python regular expression (at most {MAX_PATTERN_CHARS} characters).", "path": _PATH_DOC},
        ("pattern",),
        {"path": "."},
    ),
    "write_file": (
        "Create or overwrite a text file beneath the workspace root with the given content. Missing parent directories are created.",
        {"path": _PATH_DOC, "content": "The complete new file content."},
        ("path", "content"),
        {},
    ),
    "edit_file": (
        "Replace one exact occurrence of `old` with `new` in an existing text file. `old` must occur exactly once; include enough context to make it unique.",
        {"path": _PATH_DOC, "old": "Exact text to replace (must occur once).", "new": "Replacement text."},
        ("path", "old", "new"),
        {},
    ),
}


def tool_definitions(scope: ToolScope) -> list[ToolDefinition]:
    """The tools this scope offers (writers only when not read-only), in a fixed order."""
    return [ToolDefinition(name, _SPECS[name][0], _schema(_SPECS[name][1], _SPECS[name][2])) for name in scope.tool_names()]


# ---------------------------------------------------------------------------------------
# bounding


def bound_text(body: bytes, total: int, cap: int) -> tuple[str, bool]:
    """Decode `body` (the first bytes of a `total`-byte result) within `cap` bytes; when
    anything is cut, end with the marker '\\n[truncated: showing N of M bytes]'."""
    if total <= cap and len(body) >= total:
        return body.decode("utf-8", "replace"), False
    reserve = len(f"\n[truncated: showing {cap} of {max(total, len(body))} bytes]".encode())
    keep = max(0, min(len(body), cap - reserve))
    head = codecs.getincrementaldecoder("utf-8")("replace").decode(body[:keep], final=False)
    shown = len(head.encode("utf-8"))
    return head + f"\n[truncated: showing {shown} of {max(total, len(body))} bytes]", True


def _read_capped(fd: int, limit: int) -> bytes:
    """Read at most `limit` bytes from fd, whatever st_size says (P13)."""
    chunks: list[bytes] = []
    remaining = limit
    while remaining > 0:
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def safe_text(text: str) -> str:
    """`text` as valid UTF-8 for the wire: a name that is not UTF-8 on disk (surrogateescape'd
    by the OS layer, e.g. reached through an in-tree symlink) is shown with its bytes escaped
    (`caf\\xe9`); any other lone surrogate is backslash-escaped. An SDK's JSON writer raises on
    lone surrogates, which killed the bridge (issue 17 finding 6)."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _display(name: str) -> str:
    """A name as the model sees it: valid UTF-8, control characters escaped."""
    text = name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    if any(c < " " or c == "\x7f" for c in text):
        text = "".join(c if c >= " " and c != "\x7f" else f"\\x{ord(c):02x}" for c in text)
    return text


# ---------------------------------------------------------------------------------------
# tools. Each returns (text, truncated, rel, nbytes).

_Outcome = tuple[str, bool, str, int]


def _read_file(scope: ToolScope, args: dict[str, str]) -> _Outcome:
    with resolve_path(scope, args["path"], "read") as rp:
        cap = scope.max_result_bytes
        data = _read_capped(rp.fd, cap + 1)
        total = max(rp.st.st_size, len(data))
        text, truncated = bound_text(data, total, cap)
        return text, truncated, rp.rel, len(data)


def _list_dir(scope: ToolScope, args: dict[str, str]) -> _Outcome:
    with resolve_path(scope, args["path"], "list") as rp:
        patterns = scope.path_patterns
        lines: list[str] = []
        count = 0
        entries = []
        scanned_all = True
        with os.scandir(rp.fd) as it:
            for entry in it:
                if len(entries) >= MAX_LIST_SCAN:
                    scanned_all = False
                    break
                entries.append(entry)
        entries.sort(key=lambda e: e.name)
        for entry in entries:
            rel = entry.name if rp.rel == "." else f"{rp.rel}/{entry.name}"
            try:
                is_link = entry.is_symlink()
                is_dir = not is_link and entry.is_dir(follow_symlinks=False)
                is_file = not is_link and entry.is_file(follow_symlinks=False)
            except OSError:
                continue
            if patterns and not (pattern_covers(patterns, rel) or (is_dir and pattern_may_contain(patterns, rel))):
                continue
            count += 1
            if count > MAX_LIST_ENTRIES:
                continue
            name = _display(entry.name)
            lines.append(name + "/" if is_dir else name + "@" if is_link else name if is_file else name + " [special]")
        if count > MAX_LIST_ENTRIES:
            lines.append(f"[{count - MAX_LIST_ENTRIES} more entries not shown]")
        if not scanned_all:
            lines.append(f"[stopped after reading {MAX_LIST_SCAN} entries; more exist]")
        body = ("\n".join(lines) if lines else "(empty directory)").encode("utf-8")
        text, truncated = bound_text(body, len(body), scope.max_result_bytes)
        return text, truncated or count > MAX_LIST_ENTRIES or not scanned_all, rp.rel, len(body)


def _write_file(scope: ToolScope, args: dict[str, str]) -> _Outcome:
    try:
        data = args["content"].encode("utf-8")
    except UnicodeEncodeError:
        raise Refused("bad_arguments", "content is not valid Unicode") from None
    if len(data) > MAX_WRITE_BYTES:
        raise Refused("too_large", f"content is {len(data)} bytes; the limit is {MAX_WRITE_BYTES}")
    with resolve_path(scope, args["path"], "write") as rp:
        if not rp.created:
            os.ftruncate(rp.fd, 0)  # only now, after every check passed (P12)
        _write_all(rp.fd, data)
        verb = "created" if rp.created else "overwrote"
        return f"{verb} {rp.rel} ({len(data)} bytes)", False, rp.rel, len(data)


def _edit_file(scope: ToolScope, args: dict[str, str]) -> _Outcome:
    old, new = args["old"], args["new"]
    if not old:
        raise Refused("bad_arguments", "old must not be empty")
    with resolve_path(scope, args["path"], "edit") as rp:
        if rp.st.st_size > MAX_EDIT_BYTES:
            raise Refused("too_large", f"the file is larger than {MAX_EDIT_BYTES} bytes")
        raw = _read_capped(rp.fd, MAX_EDIT_BYTES + 1)
        if len(raw) > MAX_EDIT_BYTES:
            raise Refused("too_large", f"the file is larger than {MAX_EDIT_BYTES} bytes")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise Refused("not_text", f"{rp.rel} is not UTF-8 text") from None
        found = text.count(old)
        if found == 0:
            raise Refused("no_match", f"old text not found in {rp.rel}")
        if found > 1:
            raise Refused("no_match", f"old text occurs {found} times in {rp.rel}; include more context")
        try:
            data = text.replace(old, new, 1).encode("utf-8")
        except UnicodeEncodeError:
            raise Refused("bad_arguments", "new is not valid Unicode") from None
        if len(data) > MAX_WRITE_BYTES:
            raise Refused("too_large", f"the edited file would be {len(data)} bytes; the limit is {MAX_WRITE_BYTES}")
        os.lseek(rp.fd, 0, os.SEEK_SET)
        _write_all(rp.fd, data)
        os.ftruncate(rp.fd, len(data))
        return f"edited {rp.rel}: replaced 1 occurrence ({len(raw)} -> {len(data)} bytes)", False, rp.rel, len(data)


# -- grep -------------------------------------------------------------------------------


def _grep_lines(rp: ResolvedPath, regex: re.Pattern[str], patterns: tuple[str, ...]) -> Iterator[str]:
    """Yield 'rel:lineno: text' for matches, then one final '\\0<status>' line.

    Walks with fds only: subdirectories opened O_NOFOLLOW|O_DIRECTORY relative to their
    parent, files O_NOFOLLOW|O_NONBLOCK then fstat'd; symlinks met while recursing, special
    files, denied names (.git) and binary files are skipped.
    """
    base_dev = rp.st.st_dev  # resolve_path checked the start: same device, same filesystem
    state = {"files": 0, "scanned": 0, "matches": 0}
    stop: list[str] = []

    def search(fd: int, rel: str) -> Iterator[str]:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or is_special_fd(fd, st, base_dev):
            return
        state["files"] += 1
        budget = min(GREP_MAX_FILE_BYTES, GREP_MAX_SCAN_BYTES - state["scanned"])
        data = _read_capped(fd, budget)
        state["scanned"] += len(data)
        if b"\x00" in data[:8192]:
            return  # binary
        shown_rel = _display(rel)
        # Lines end at "\n" only, as `grep -n` counts them (never at \x0c, \x85, U+2028 ...:
        # splitlines() would shift every later line number); a CRLF line drops its "\r".
        lines = data.decode("utf-8", "replace").split("\n")
        if lines and not lines[-1]:
            lines.pop()
        for lineno, line in enumerate(lines, 1):
            if line.endswith("\r"):
                line = line[:-1]
            if regex.search(line, 0, GREP_LINE_MATCHED):
                state["matches"] += 1
                if state["matches"] > GREP_MAX_MATCHES:
                    stop.append(f"more than {GREP_MAX_MATCHES} matching lines")
                    return
                shown = _display(line[:GREP_LINE_SHOWN]) + (" [...]" if len(line) > GREP_LINE_SHOWN else "")
                yield f"{shown_rel}:{lineno}: {shown}"

    def walk(dir_fd: int, rel: str, depth: int) -> Iterator[str]:
        with os.scandir(dir_fd) as it:
            entries = sorted(((e.name, e.is_dir(follow_symlinks=False), e.is_file(follow_symlinks=False)) for e in it))
        for name, is_dir, is_file in entries:
            if stop:
                return
            if is_denied_name(name, False) or not (is_dir or is_file):
                continue  # .git, symlinks, FIFOs, sockets, devices
            child = name if rel == "." else f"{rel}/{name}"
            if is_dir:
                if depth >= GREP_MAX_DEPTH or (patterns and not pattern_may_contain(patterns, child)):
                    continue
                try:
                    sub = os.open(name, _SUB_DIR_FLAGS, dir_fd=dir_fd)
                except OSError:
                    continue
                try:
                    if is_special_fd(sub, os.fstat(sub), base_dev):
                        continue  # a procfs, sysfs, ... mounted beneath the tree
                    yield from walk(sub, child, depth + 1)
                finally:
                    os.close(sub)
                continue
            if patterns and not pattern_covers(patterns, child):
                continue
            if state["files"] >= GREP_MAX_FILES:
                stop.append(f"more than {GREP_MAX_FILES} files")
                return
            if state["scanned"] >= GREP_MAX_SCAN_BYTES:
                stop.append(f"more than {GREP_MAX_SCAN_BYTES} bytes scanned")
                return
            try:
                fd = os.open(name, _SUB_FILE_FLAGS, dir_fd=dir_fd)
            except OSError:
                continue
            try:
                if os.fstat(fd).st_nlink > 1:
                    continue  # another name of this file may lie outside the root (P12): never searched
                yield from search(fd, child)
            finally:
                os.close(fd)

    if rp.kind == "dir":
        yield from walk(rp.fd, rp.rel, 0)
    else:
        yield from search(rp.fd, rp.rel)
    yield "\x00" + (f"stopped: {stop[0]}" if stop else "done")


def _close_all_but(keep: set[int]) -> None:
    """In the forked child: close every inherited fd above stderr except `keep`, so the
    child never holds another session's pipe open."""
    low = 3
    for fd in sorted(keep):
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1
    os.closerange(low, _max_fd())


def _max_fd() -> int:
    try:
        return max(os.sysconf("SC_OPEN_MAX"), 1024)
    except (ValueError, OSError):
        return 65536


def _grep_in_child(lines: Iterator[str], deadline_s: float, keep_bytes: int, keep_fds: set[int] = frozenset()) -> tuple[list[str], int, str]:
    """Run the grep generator in a forked child so that no regex can hang the caller:
    the child is killed at the deadline. Returns (kept lines, total bytes, status)."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: only os-level calls and the generator, then _exit
        status = 0
        try:
            os.close(rfd)
            _close_all_but(set(keep_fds) | {wfd})
            buf: list[bytes] = []
            size = 0
            for line in lines:
                data = (line + "\n").encode("utf-8", "backslashreplace")
                buf.append(data)
                size += len(data)
                if size >= 65536:
                    _write_all(wfd, b"".join(buf))
                    buf, size = [], 0
            _write_all(wfd, b"".join(buf))
        except BaseException:
            status = 1
        finally:
            os._exit(status)
    os.close(wfd)
    kept: list[str] = []
    kept_size = 0
    total = 0
    status = ""
    pending = b""
    deadline = time.monotonic() + deadline_s
    timed_out = False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select([rfd], [], [], left)
            if not ready:
                continue
            chunk = os.read(rfd, 65536)
            if not chunk:
                break
            pending += chunk
            *complete, pending = pending.split(b"\n")
            for raw in complete:
                line = raw.decode("utf-8", "replace")
                if line.startswith("\x00"):
                    status = line[1:]
                    continue
                size = len(raw) + 1
                total += size
                if kept_size + size <= keep_bytes:
                    kept.append(line)
                    kept_size += size
    finally:
        os.close(rfd)
        if timed_out:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _reap(pid)
    if timed_out:
        status = f"stopped: time budget of {deadline_s:g} s used up"
    elif not status:
        status = "stopped: the search failed"
    return kept, total, status


def _reap(pid: int) -> None:
    while True:
        try:
            os.waitpid(pid, 0)
            return
        except ChildProcessError:
            return
        except InterruptedError:
            continue


def _grep_in_process(lines: Iterator[str], deadline_s: float, keep_bytes: int, keep_fds: set[int] = frozenset()) -> tuple[list[str], int, str]:
    """Fallback without fork: the deadline is checked between lines."""
    kept: list[str] = []
    kept_size = total = 0
    status = "stopped: the search failed"
    deadline = time.monotonic() + deadline_s
    for line in lines:
        if line.startswith("\x00"):
            status = line[1:]
            break
        size = len(line.encode("utf-8", "backslashreplace")) + 1
        total += size
        if kept_size + size <= keep_bytes:
            kept.append(line)
            kept_size += size
        if time.monotonic() > deadline:
            status = f"stopped: time budget of {deadline_s:g} s used up"
            break
    return kept, total, status


def _grep(scope: ToolScope, args: dict[str, str]) -> _Outcome:
    pattern = args["pattern"]
    if not pattern:
        raise Refused("bad_arguments", "pattern must not be empty")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise Refused("bad_arguments", f"pattern longer than {MAX_PATTERN_CHARS} characters")
    try:
        regex = re.compile(pattern)
    except (re.error, RecursionError, OverflowError) as err:
        raise Refused("bad_arguments", f"invalid regular expression: {err}") from None
    with resolve_path(scope, args["path"], "grep") as rp:
        cap = scope.max_result_bytes
        lines = _grep_lines(rp, regex, scope.path_patterns)
        runner = _grep_in_child if hasattr(os, "fork") else _grep_in_process
        # Leave room for the truncation and status markers within the cap.
        kept, total, status = runner(lines, GREP_TIME_BUDGET_S, max(0, cap - 160), {rp.fd})
        body = "\n".join(kept)
        if not kept and total == 0:
            body = "(no matches)"
        truncated = total > len(body.encode("utf-8")) + 1
        if truncated:
            shown = len(body.encode("utf-8"))
            body += f"\n[truncated: showing {shown} of {total} bytes]"
        if status != "done":
            body += f"\n[{status}]"
            truncated = True
        return body, truncated, rp.rel, total


_TOOLS: dict[str, Callable[[ToolScope, dict[str, str]], _Outcome]] = {
    "read_file": _read_file,
    "list_dir": _list_dir,
    "grep": _grep,
    "write_file": _write_file,
    "edit_file": _edit_file,
}
assert set(_TOOLS) == set(ALL_TOOLS) == set(_SPECS)


def _check_args(name: str, args: object) -> dict[str, str]:
    if args is None:
        args = {}
    if not isinstance(args, Mapping):
        raise Refused("bad_arguments", f"{name} takes an object of arguments")
    _, props, required, defaults = _SPECS[name]
    extra = sorted(str(k) for k in args if k not in props)
    if extra:
        raise Refused("bad_arguments", f"{name} has no argument(s) {', '.join(show(k, 40) for k in extra[:5])}")
    clean: dict[str, str] = {}
    for key in props:
        if key in args:
            value = args[key]
        elif key in defaults:
            value = defaults[key]
        else:
            raise Refused("bad_arguments", f"{name} needs argument {key!r}")
        if not isinstance(value, str):
            raise Refused("bad_arguments", f"argument {key!r} must be a string")
        clean[key] = value
    return clean


def trace_detail(detail: str) -> str:
    """A refusal's detail as it may be traced and reported: the same words the model reads
    (the tool, the offending path as given), redacted of secrets first, then bounded."""
    from harnesscheck.contain.envpolicy import redact

    text = redact(str(detail))
    return text if len(text) <= TRACE_DETAIL_CHARS else text[: TRACE_DETAIL_CHARS - 1] + "…"


def _trace_path(args: object) -> str | None:
    if isinstance(args, Mapping):
        value = args.get("path")
        if isinstance(value, str):
            return value[:512]
    return None


def dispatch(
    name: str,
    args: Mapping[str, Any] | None,
    scope: ToolScope,
    trace: Trace | None = None,
    *,
    session_id: str | None = None,
    policy: "PolicyEngine | None" = None,
) -> ToolResult:
    """Run one tool call under the scope. Never raises for tool-level problems.

    With a `policy` (harnesscheck.core.policy), a call whose arguments are valid is authorized
    before it runs: a deny (a rule, a default, an approval not given, a limit) is refused
    `policy_denied` or `limit_reached` and nothing runs; the trace carries the decision's
    code and the call's digest. An allowed call is charged to the session's limits."""
    extra = {"session": session_id} if session_id is not None else {}
    call = None
    try:
        if not isinstance(name, str) or name not in _TOOLS:
            raise Refused("unknown_tool", f"no tool named {show(name, 80)}; tools: {', '.join(scope.tool_names())}")
        if name not in scope.tool_names():
            if name in WRITE_TOOLS and scope.read_only:
                raise Refused("read_only", f"{name} is not available: the scope is read-only")
            raise Refused("not_allowed", f"{name} is not offered by this scope")
        clean = _check_args(name, args)
        if policy is not None:
            call = policy.host_call(name, clean)
            decision = policy.authorize(call)
            if not decision.allowed:
                code = "limit_reached" if decision.code == "limit_reached" else "policy_denied"
                extra.update(policy=decision.code, digest=decision.digest[:16])
                if code == "policy_denied":
                    policy.record(call, ran=False)
                raise Refused(code, decision.detail)
            extra.update(policy=decision.code, digest=decision.digest[:16])
        text, truncated, rel, nbytes = _TOOLS[name](scope, clean)
        if call is not None:
            policy.record(call, ran=True)
            policy.finished(call, ok=True, code=None)
    except Refused as refusal:
        if call is not None and refusal.code not in ("policy_denied", "limit_reached"):
            policy.record(call, ran=False)
            policy.finished(call, ok=False, code=refusal.code)
        elif call is None and policy is not None:  # the scope refused before any decision
            policy.refused_before(str(name)[:80], args if isinstance(args, Mapping) else None, refusal.code)
        if trace is not None:
            trace.record(
                "tool", tool=str(name)[:80], decision="refuse", code=refusal.code, path=_trace_path(args), detail=trace_detail(refusal.detail), **extra
            )
        return ToolResult(ok=False, text=safe_text(f"refused: {refusal.code}: {refusal.detail}"), code=refusal.code)
    except OSError as err:
        if call is not None:
            policy.record(call, ran=False)
            policy.finished(call, ok=False, code="io_error")
        code_name = _errno_name(err)
        if trace is not None:
            trace.record(
                "tool",
                tool=name,
                decision="refuse",
                code="io_error",
                path=_trace_path(args),
                errno=code_name,
                detail=trace_detail(f"{name} failed ({code_name})"),
                **extra,
            )
        return ToolResult(ok=False, text=f"refused: io_error: {name} failed ({code_name})", code="io_error")
    if trace is not None:
        trace.record("tool", tool=name, decision="allow", code=None, path=rel, bytes=nbytes, truncated=truncated, **extra)
    return ToolResult(ok=True, text=safe_text(text), code=None, truncated=truncated)


def _errno_name(err: OSError) -> str:
    return errno.errorcode.get(err.errno or 0, "EIO")
