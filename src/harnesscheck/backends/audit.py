"""Post-run audit: what a harness touched, from its own event log plus the run's facts.

Contract (doc/SPEC-audit.md). One streaming pass (constant memory in the size of the log)
over the CLI's JSONL event log, for each CLI with a reader (`audit_clis()`), plus facts the runner
collected: scope root, read-only, the bridge's trace summary, worktree snapshots before and
after (hash + mtime of every file, untracked and ignored included), sentinel files outside
the scope, instruction files the CLI may have loaded. The verdict is an `AuditVerdict`:
`clean` unless a violation flag is raised; informational flags (codes in `INFO_CODES`) are
listed but do not make a run unclean. Codes are stable strings:

  native_tool_use             a vendor built-in ran while built-ins were meant to be off
  native_shell                a native shell command ran (its file access cannot be bound)
  native_file_outside_scope   a native tool named a path outside the scope (realpath-bound)
  write_in_read_only          a native mutating tool ran in a read-only session
  unknown_native_tool         a native tool the audit cannot classify (fail closed)
  foreign_mcp_tool            an MCP tool of a server other than the bridge
  unknown_tool_event          a tool-looking event of an unknown shape (format drift; in
                              DRIFT_CODES: it never ends a session by itself)
  unexplained_change          a worktree change not explained by a bridge write
  protected_path_changed      .git internals, .claude/, .codex/, hooks ... changed
  sentinel_changed            a sentinel file outside the scope changed or vanished
  sentinel_accessed           a native tool named a sentinel file
  bridge_call_without_tool_use  the bridge served more calls than the CLI's log shows (in
                              DRIFT_CODES: each went through dispatch)
  event_log_empty             no JSON event at all: nothing could be audited
  native_tool_attempted       codex: the model called a built-in that codex refused, seen only
                              in its rollout file (raised by backends/codex/__init__.py, fail closed)
  -- informational --
  native_tool_refused_by_cli  the model asked for a disabled built-in; the CLI refused it
  tool_use_not_reaching_bridge  a bridge tool_use in the log that the bridge never served
  instruction_file_present    CLAUDE.md / AGENTS.md / ... the CLI may have loaded
  project_config_present      .mcp.json / .claude/settings.json / ... in the worktree or parents
  native_tools_offered        the CLI reported built-ins loaded (claude system/init tools)

Each CLI's event reader lives in its backend's folder (`backends/<backend>/audit.py`, an
`AuditReader`) and that backend's kit profile names it (`KitProfile.audit_reader`); this module
keeps what every reader shares (the Auditor: flags, call ids, path binding, shell words, the
host's policy, the run's facts) and finds a reader through the registry, never by a CLI's name.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from harnesscheck.core.contracts import AuditFlag, AuditVerdict

INFO_CODES: frozenset[str] = frozenset(
    {
        "native_tool_refused_by_cli",
        "tool_use_not_reaching_bridge",
        "instruction_file_present",
        "project_config_present",
        "native_tools_offered",
    }
)
#: Violation codes that make a verdict unclean but are no evidence that anything ran outside
#: the bridge (format drift; bridge calls, every one through dispatch, that the CLI's log does
#: not show): they never end a session by themselves. Every other violation
#: ends an ok session blocked/policy_violation where the audit is the backend's enforcement
#: (`native_tools_audited`, backends/_harness.py `judge`); an unknown event must stay
#: ignorable (conformance parse.unknown-events-ignored), and the verdict still says unclean.
DRIFT_CODES: frozenset[str] = frozenset({"unknown_tool_event", "bridge_call_without_tool_use"})
BRIDGE_SERVER = "bridge"

#: At most this many flags per code are kept; the last one says how many more were seen.
MAX_FLAGS_PER_CODE = 20
#: Dedup sets (call ids) stop growing here; the pass stays bounded on hostile logs.
MAX_TRACKED_IDS = 100_000

INSTRUCTION_FILES: tuple[str, ...] = (
    "CLAUDE.md",
    "CLAUDE.local.md",
    "AGENTS.md",
    "AGENTS.override.md",
    "GEMINI.md",
    ".cursorrules",
    ".windsurfrules",
    ".clinerules",
    "CONVENTIONS.md",
    ".github/copilot-instructions.md",
)
INSTRUCTION_DIRS: tuple[str, ...] = (".cursor/rules", ".claude/commands", ".claude/agents", ".claude/skills")
PROJECT_CONFIG_FILES: tuple[str, ...] = (
    ".mcp.json",
    ".claude/settings.json",
    ".claude/settings.local.json",
    ".codex/config.toml",
    ".cursor/mcp.json",
    ".cursor/cli-config.json",
    ".cursor/cli.json",
    ".gemini/settings.json",
    "opencode.json",
    "opencode.jsonc",
    ".env",
    ".env.local",
)
#: Worktree paths no session may change (I3). Compared case-insensitively.
PROTECTED_PREFIXES: tuple[str, ...] = (
    ".git/",
    ".claude/",
    ".codex/",
    ".gemini/",
    ".cursor/",
    ".opencode/",
    ".vscode/",
    ".idea/",
)
_SKIP_WALK_DIRS = frozenset({".git", "node_modules", ".venv", "__pycache__"})


# ---------------------------------------------------------------------------------------
# Facts the runner collects


@dataclass(frozen=True)
class FileState:
    """A file's identity for change detection: content hash, size, mtime, kind."""

    sha256: str
    size: int
    mtime_ns: int
    kind: str = "file"  # file | symlink | other
    ctime_ns: int = 0  # changes on every write and cannot be set back from user space
    ino: int = 0


def _hash_file(path: str) -> str:
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        while chunk := os.read(fd, 1 << 20):
            h.update(chunk)
    finally:
        os.close(fd)
    return h.hexdigest()


def file_state(path: str | os.PathLike[str]) -> FileState | None:
    """State of one path (never following a symlink), or None when it does not exist."""
    p = os.fspath(path)
    try:
        st = os.lstat(p)
    except (FileNotFoundError, NotADirectoryError):
        return None
    ids = {"ctime_ns": st.st_ctime_ns, "ino": st.st_ino}
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(p)
        return FileState(hashlib.sha256(os.fsencode(target)).hexdigest(), st.st_size, st.st_mtime_ns, "symlink", **ids)
    if stat.S_ISREG(st.st_mode):
        try:
            digest = _hash_file(p)
        except OSError:
            digest = "unreadable"
        return FileState(digest, st.st_size, st.st_mtime_ns, "file", **ids)
    return FileState("", 0, st.st_mtime_ns, "other", **ids)


def snapshot_tree(root: str | os.PathLike[str], previous: dict[str, FileState] | None = None) -> dict[str, FileState]:
    """Every file under root (tracked, untracked and ignored; .git included), keyed by the
    root-relative POSIX path. Directories are walked without following symlinks.

    With `previous` (the snapshot before the session), a regular file whose size, mtime,
    ctime and inode are all unchanged keeps its previous hash instead of being re-read:
    any write moves ctime, which user space cannot set back."""
    out: dict[str, FileState] = {}
    base = os.fspath(root)
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        try:
            entries = list(os.scandir(os.path.join(base, rel_dir) if rel_dir else base))
        except OSError:
            continue
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(rel)
                    continue
            except OSError:
                continue
            old = previous.get(rel) if previous is not None else None
            if old is not None and old.kind == "file" and old.ino:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode) and (old.size, old.mtime_ns, old.ctime_ns, old.ino) == (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino):
                    out[rel] = old
                    continue
            state = file_state(entry.path)
            if state is not None:
                out[rel] = state
    return out


def snapshot_files(paths: Iterable[str | os.PathLike[str]]) -> dict[str, FileState | None]:
    """States of specific files (sentinels outside the scope); None for a missing file."""
    return {os.fspath(p): file_state(p) for p in paths}


_INSTRUCTION_CANDIDATES = (
    ("instruction", INSTRUCTION_FILES, stat.S_ISREG),
    ("instruction", INSTRUCTION_DIRS, stat.S_ISDIR),
    ("config", PROJECT_CONFIG_FILES, stat.S_ISREG),
)


def _stat_mode(path: str) -> int | None:
    """st_mode of `path`, symlinks followed; None where Path.is_file()/is_dir() would say
    False (missing, not a directory, a loop). Any other error is raised, as they raise it."""
    try:
        return os.stat(path).st_mode
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP):
            return None
        raise
    except ValueError:
        return None


def find_instruction_files(root: str | os.PathLike[str], *, max_entries: int = 200_000) -> list[tuple[str, str]]:
    """(kind, path) of instruction and project config files a CLI may load: anywhere in the
    worktree (bounded walk, skipping .git/node_modules) and in every parent directory."""
    found: list[tuple[str, str]] = []
    root_path = Path(os.fspath(root)).absolute()

    def check_dir(d: str, present: frozenset[str] | None = None) -> None:
        """`present`: the names in `d` when the walk already listed them (only those are
        stat-ed); None to stat every candidate (a missing first component skips its names)."""
        firsts: dict[str, int | None] = {}

        def mode(name: str) -> int | None:
            first = name.split("/", 1)[0]
            if present is not None and first not in present:
                return None
            if first != name:
                if first not in firsts:
                    firsts[first] = _stat_mode(os.path.join(d, first))
                if firsts[first] is None:
                    return None
            return _stat_mode(os.path.join(d, name))

        for kind, names, want in _INSTRUCTION_CANDIDATES:
            for name in names:
                m = mode(name)
                if m is not None and want(m):
                    found.append((kind, os.path.join(d, name)))

    for parent in reversed(root_path.parents):
        check_dir(str(parent))
    seen = 0
    for dirpath, dirnames, filenames in os.walk(root_path):
        check_dir(dirpath, frozenset(dirnames) | frozenset(filenames))
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_WALK_DIRS)
        seen += 1 + len(dirnames)
        if seen > max_entries:
            break
    return found


@dataclass
class RunFacts:
    """What the runner knows about the session besides the CLI's own log."""

    scope_root: Path
    read_only: bool = True
    builtin_tools_off: bool = True
    bridge: Any = None  # harnesscheck.bridge.spec.BridgeSummary | None
    session_cwd: Path | None = None
    allowed_roots: tuple[Path, ...] = ()
    worktree_before: dict[str, FileState] | None = None
    worktree_after: dict[str, FileState] | None = None
    sentinels_before: dict[str, FileState | None] | None = None
    sentinels_after: dict[str, FileState | None] | None = None
    instruction_files: list[tuple[str, str]] = field(default_factory=list)
    #: The host's policy engine for the session (harnesscheck.core.policy.PolicyEngine), when the
    #: request set a policy: each built-in call the audit sees is decided by it after the fact.
    policy: Any = None


# ---------------------------------------------------------------------------------------
# Path binding


_GLOB_CHARS = "*?[{"


class _Binder:
    """Binds a path a native tool named to the scope, by realpath."""

    def __init__(self, facts: RunFacts):
        self.root = os.path.realpath(facts.scope_root)
        self.cwd = os.fspath(facts.session_cwd or facts.scope_root)
        self.allowed = [self.root] + [os.path.realpath(p) for p in facts.allowed_roots]
        sentinels = facts.sentinels_before or {}
        self.sentinels = {os.path.realpath(p) for p in sentinels}

    def _within(self, real: str) -> bool:
        return any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in self.allowed)

    def check(self, raw: str) -> tuple[bool, str]:
        """(inside, why). Home-relative and unbindable glob patterns are outside."""
        text = str(raw)
        if not text:
            return True, ""
        if "\0" in text:
            return False, "NUL in path"
        if text.startswith("~"):
            return False, "home-relative path"
        if any(c in text for c in _GLOB_CHARS):
            if "{" in text:
                return False, "brace pattern cannot be bound"
            cut = min(text.find(c) for c in _GLOB_CHARS if c in text)
            prefix, rest = text[:cut], text[cut:]
            if ".." in rest.replace("\\", "/").split("/"):
                return False, "pattern climbs with .."
            text = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
            if not text:
                text = "."
        joined = text if os.path.isabs(text) else os.path.join(self.cwd, text)
        real = os.path.realpath(joined)
        return self._within(real), real

    def is_sentinel(self, raw: str) -> bool:
        if not self.sentinels or not raw or raw.startswith("~"):
            return False
        joined = raw if os.path.isabs(raw) else os.path.join(self.cwd, raw)
        return os.path.realpath(joined) in self.sentinels


# ---------------------------------------------------------------------------------------
# The streaming auditor


_PATH_KEYS = (
    "file_path",
    "path",
    "filePath",
    "notebook_path",
    "target_file",
    "targetFile",
    "directory",
    "targetDirectory",
    "target_directory",
    "dir",
    "cwd",
    "absolute_path",
    "dir_path",
)
_GLOB_KEYS = ("pattern", "globPattern", "glob")
#: Built-ins that search or list from a directory, the CLI's cwd when they name none (lower case).
_SEARCH_TOOLS = frozenset(
    {"grep", "glob", "ls", "list", "listdir", "list_directory", "grep_search", "search_file_content", "codebasesearch", "semsearch", "filesearch", "search"}
)


@dataclass(frozen=True)
class AuditReader:
    """One CLI's event-log reader: what the shared Auditor asks of the backend whose log it reads.
    Each lives in its backend's folder (`backends/<backend>/audit.py`) and that backend's kit
    profile names it (`KitProfile.audit_reader`); `reader_for` finds it through the registry."""

    #: The CLI's name in the verdict, the trace and the flags' details (`claude`, `codex`, ...).
    name: str
    #: A line holding none of these bytes cannot hold a tool event or a fact the reader needs:
    #: it is counted and never parsed.
    markers: tuple[bytes, ...]
    #: Reads one JSON event: (the Auditor, the event) -> None; reports through the Auditor.
    read: Callable[[Auditor, dict], None]
    #: The shell and mutating built-ins among the calls this reader holds until their result
    #: (`Auditor._pending_native`): a held call the log never settles is judged with these.
    pending_shell_tools: frozenset[str] = frozenset()
    pending_write_tools: frozenset[str] = frozenset()
    #: Called once the whole log is read, before the run's facts are judged (or None).
    finish: Callable[[Auditor], None] | None = None


@cache
def _readers() -> dict[str, AuditReader]:
    """Every built-in backend's reader by the names a caller may give: the reader's own, the
    backend id and the CLI's executable (`claude`, `claude-code`; `cursor`, `cursor-agent`).
    Found through each spec's kit profile: no CLI is named here."""
    from harnesscheck.backends.registry import BUILTIN_SPECS, kit_profile

    found: dict[str, AuditReader] = {}
    for spec in BUILTIN_SPECS.values():
        reader = kit_profile(spec).audit_reader
        if reader is not None:
            for name in (reader.name, spec.id, spec.cli_name):
                if name:
                    found.setdefault(name, reader)
    return found


def audit_clis() -> list[str]:
    """The CLIs whose event logs the audit reads (their readers' names), sorted."""
    return sorted({reader.name for reader in _readers().values()})


def reader_for(cli: str) -> AuditReader:
    """The reader of `cli`'s event log (a reader's name, a backend id or a CLI executable);
    ValueError for a CLI no built-in backend reads."""
    reader = _readers().get(cli)
    if reader is None:
        raise ValueError(f"unknown cli {cli!r}: one of {', '.join(audit_clis())}")
    return reader


@cache
def _held_tools() -> tuple[frozenset[str], frozenset[str]]:
    """The shell and mutating tools of every reader that holds calls until their result: a
    reused call id settles the earlier call with these (the union, whichever CLI's log)."""
    readers = set(_readers().values())
    return (
        frozenset().union(*(r.pending_shell_tools for r in readers)),
        frozenset().union(*(r.pending_write_tools for r in readers)),
    )


class Auditor:
    """Feed lines (str or bytes) one at a time; `verdict()` at the end. Constant memory:
    only flags (capped per code), counters and a bounded set of call ids are kept."""

    def __init__(self, cli: str, facts: RunFacts):
        self.reader = reader_for(cli)
        self.cli = self.reader.name
        self.facts = facts
        self.binder = _Binder(facts)
        self._flags: dict[str, list[AuditFlag]] = {}
        self._counts: dict[str, int] = {}
        self.json_events = 0
        self.malformed_lines = 0
        self.bridge_tool_uses = 0
        self.native_calls: list[str] = []
        self._seen_ids: dict[str, set[bytes]] = {}  # call id -> digests of the calls seen under it
        self._pending_native: dict[str, str] = {}  # claude tool_use id -> tool name
        self._pending_args: dict[str, tuple[Any, bool]] = {}  # claude tool_use id -> (input, known)
        self.started_items: dict[str, str] = {}  # items seen started, not completed (a reader's `finish` judges them)
        self._markers = self.reader.markers

    # -- flags --------------------------------------------------------------------------

    def flag(self, code: str, detail: str = "") -> None:
        n = self._counts.get(code, 0) + 1
        self._counts[code] = n
        if n <= MAX_FLAGS_PER_CODE:
            self._flags.setdefault(code, []).append(AuditFlag(code=code, detail=detail[:500]))

    def mcp_call(self, server: Any, foreign: str) -> None:
        """An MCP tool call the log shows: one bridge call when `server` is the bridge, else a
        `foreign_mcp_tool` flag whose detail is `foreign` (each reader says how it read the server)."""
        if server == BRIDGE_SERVER:
            self.bridge_tool_uses += 1
        else:
            self.flag("foreign_mcp_tool", foreign)

    def _native(self, name: str) -> None:
        if len(self.native_calls) < 1000:
            self.native_calls.append(name)

    def _new_id(self, call_id: str | None, *what: Any) -> bool:
        """False when this call was already handled (its started and completed events): the
        same id *and* the same call (`what`: the tool and, where every event of a call repeats
        them, its arguments). Ids come from the model server: a reused id with another call
        under it is a new call, audited, never hidden behind the first."""
        if not call_id:
            return True
        digest = hashlib.blake2b(json.dumps(what, sort_keys=True, default=str).encode("utf-8", "replace"), digest_size=16).digest()
        seen = self._seen_ids.get(call_id)
        if seen is not None and digest in seen:
            return False
        if seen is None:
            if len(self._seen_ids) < MAX_TRACKED_IDS:
                self._seen_ids[call_id] = {digest}
        elif len(seen) < 64:
            seen.add(digest)
        return True

    def _paths(self, tool: str, args: Any) -> None:
        """Bind every path-looking argument of a native tool call to the scope. A search or
        listing built-in that names no path at all (`grep` with only a pattern) reads the CLI's
        own cwd, recursively: it is bound as `.` from the session cwd (not the scope root)."""
        if not isinstance(args, dict):
            return
        if tool.lower() in _SEARCH_TOOLS and not any(isinstance(args.get(k), str) and args.get(k) for k in _PATH_KEYS + ("paths", "files", "targets")):
            inside, why = self.binder.check(".")
            if not inside:
                self.flag("native_file_outside_scope", f"{tool}: no path, so it searches the CLI's cwd ({why})")
        for key in _PATH_KEYS + _GLOB_KEYS:
            value = args.get(key)
            if not isinstance(value, str) or not value:
                continue
            if key == "pattern" and tool.lower() in ("grep", "search"):
                continue  # a regex, not a path
            inside, why = self.binder.check(value)
            if not inside:
                self.flag("native_file_outside_scope", f"{tool}: {key}={value!r} ({why})")
            if self.binder.is_sentinel(value):
                self.flag("sentinel_accessed", f"{tool}: {value!r}")
        for key in ("paths", "files", "targets"):
            values = args.get(key)
            if isinstance(values, list):
                for v in values[:1000]:
                    if isinstance(v, str):
                        self._paths(tool, {"path": v})

    # -- feeding ------------------------------------------------------------------------

    def feed(self, line: str | bytes) -> None:
        if isinstance(line, str):
            raw = line.encode("utf-8", "surrogatepass")
        else:
            raw = line
        stripped = raw.strip()
        if not stripped:
            return
        if not stripped.startswith(b"{"):
            self.malformed_lines += 1
            return
        self.json_events += 1
        if not any(m in stripped for m in self._markers):
            return  # cannot hold a tool event or a fact the audit needs: skip the parse
        try:
            event = json.loads(stripped)
        except ValueError:
            self.malformed_lines += 1
            self.json_events -= 1
            return
        if isinstance(event, dict):
            self.reader.read(self, event)

    def feed_all(self, lines: Iterable[str | bytes]) -> "Auditor":
        for line in lines:
            self.feed(line)
        return self

    # -- shared -------------------------------------------------------------------------

    def _settle_reused(self, call_id: str) -> None:
        """A new call reuses the id of one still waiting for its result: the earlier one is
        judged now as run (fail closed), never overwritten unseen."""
        name = self._pending_native.pop(call_id, None)
        if name is None:
            return
        args, known = self._pending_args.pop(call_id, (None, False))
        shells, writes = _held_tools()
        self._native_used(name, args, shell=name in shells, write=name in writes, known=known)

    def _native_used(self, name: str, args: Any, *, shell: bool, write: bool, known: bool) -> None:
        self._native(name)
        if self.facts.builtin_tools_off:
            self.flag("native_tool_use", name)
        if not known:
            self.flag("unknown_native_tool", name)
            if self.facts.read_only:
                self.flag("write_in_read_only", f"{name} (unclassified tool, assumed mutating)")
        if shell:
            cmd = args.get("command") if isinstance(args, dict) else None
            self.flag("native_shell", f"{name}: {str(cmd)[:200]}" if cmd else name)
            for word in shell_path_words(cmd):
                self._paths(name, {"path": word})
        if write and self.facts.read_only:
            self.flag("write_in_read_only", name)
        self._paths(name, args)
        if self.facts.policy is not None:
            self._judge_by_policy(name, args, shell=shell, write=write, known=known)

    def _judge_by_policy(self, name: str, args: Any, *, shell: bool, write: bool, known: bool) -> None:
        """The host's policy on a built-in that already ran (it could not be asked before): a
        call the policy would not allow (denied, or needing an approval nobody could give) is a
        violation. Its kind comes from the audit's own classification of the CLI's tools."""
        from harnesscheck.core.policy import ToolCall, ToolKind, Verdict, _rel_path

        engine = self.facts.policy
        kind = ToolKind.EXECUTE if shell else ToolKind.WRITE if write else ToolKind.READ if known else ToolKind.OTHER
        arguments = dict(args) if isinstance(args, dict) else {}
        path = next((arguments[k] for k in _PATH_KEYS if isinstance(arguments.get(k), str) and arguments[k]), None)
        call = ToolCall(tool=name, args=arguments, kind=kind, path=_rel_path(path, engine.root) if path else None)
        decision = engine.judge_ran(call)
        if decision.verdict is not Verdict.ALLOW:
            self.flag("builtin_denied_by_policy", f"{name} ({kind.value}): {decision.verdict.value}, {decision.code}")

    # -- facts --------------------------------------------------------------------------

    def _facts(self) -> None:
        f = self.facts
        summary = f.bridge
        if self.json_events == 0:
            self.flag("event_log_empty", f"{self.malformed_lines} non-JSON lines")
        for call_id, name in list(self._pending_native.items()):
            # a native tool_use with no tool_result: assume it ran (the log may be truncated)
            args, known = self._pending_args.get(call_id, (None, False))
            shells, writes = self.reader.pending_shell_tools, self.reader.pending_write_tools
            self._native_used(name, args, shell=name in shells, write=name in writes, known=known)
        self._pending_native.clear()
        self._pending_args.clear()
        if self.reader.finish is not None:
            self.reader.finish(self)
        if summary is not None:
            served = int(getattr(summary, "tool_calls", 0))
            if served > self.bridge_tool_uses:
                self.flag(
                    "bridge_call_without_tool_use",
                    f"bridge served {served} calls, the {self.cli} log shows {self.bridge_tool_uses}",
                )
            elif served < self.bridge_tool_uses:
                self.flag(
                    "tool_use_not_reaching_bridge",
                    f"{self.bridge_tool_uses} bridge tool uses in the log, {served} served",
                )
        if f.worktree_before is not None and f.worktree_after is not None:
            explained = set(getattr(summary, "writes", []) or []) if summary is not None else set()
            for rel in sorted(_changed(f.worktree_before, f.worktree_after)):
                if rel.lower().startswith(PROTECTED_PREFIXES) or "/.git/" in rel.lower():
                    self.flag("protected_path_changed", rel)
                if rel not in explained:
                    self.flag("unexplained_change", rel)
        if f.sentinels_before is not None:
            after = f.sentinels_after or {}
            for path, state in f.sentinels_before.items():
                now = after.get(path) if path in after else file_state(path)
                if now != state:
                    self.flag("sentinel_changed", path)
        for kind, path in f.instruction_files:
            self.flag("instruction_file_present" if kind == "instruction" else "project_config_present", path)

    def verdict(self) -> AuditVerdict:
        self._facts()
        flags: list[AuditFlag] = []
        for code, items in self._flags.items():
            flags.extend(items)
            extra = self._counts[code] - len(items)
            if extra > 0:
                flags.append(AuditFlag(code=code, detail=f"... and {extra} more"))
        clean = not any(fl.code not in INFO_CODES for fl in flags)
        return AuditVerdict(clean=clean, flags=flags)


_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "fish"})
_MAX_SHELL_WORDS = 200


def shell_path_words(command: Any, *, depth: int = 0) -> list[str]:
    """Words of a native shell command that name a file: `/etc/passwd`, `../x`, `~/.ssh/id_rsa`,
    `src/a.py`, `--out=/tmp/x`; `bash -lc '...'` scripts are read too. Evidence only: a shell
    builds paths at run time ($VAR, $(...), cd), so words with `$` or backquotes are skipped and
    the command stays flagged `native_shell` whatever this finds."""
    import shlex

    if isinstance(command, (list, tuple)):
        words = [str(w) for w in command][:_MAX_SHELL_WORDS]
    elif isinstance(command, str) and command:
        try:
            lexer = shlex.shlex(command[:20_000], posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            words = []
            for word in lexer:
                words.append(word)
                if len(words) >= _MAX_SHELL_WORDS:
                    break
        except ValueError:  # unbalanced quotes: fall back to whitespace
            words = command[:20_000].split()[:_MAX_SHELL_WORDS]
    else:
        return []
    found: list[str] = []
    scripts: set[int] = set()
    for i, word in enumerate(words):
        if i in scripts:
            continue
        if os.path.basename(word) in _SHELLS and depth < 2:
            for j in range(i + 1, min(i + 3, len(words) - 1)):
                if words[j].startswith("-") and "c" in words[j].lstrip("-"):
                    found.extend(shell_path_words(words[j + 1], depth=depth + 1))
                    scripts.add(j + 1)
                    break
            continue
        if word.startswith("-"):
            if "=" not in word:
                continue
            word = word.split("=", 1)[1]
        if not word or "$" in word or "`" in word or "://" in word or "\n" in word:
            continue
        if "/" in word or word.startswith("~") or word == "..":
            found.append(word)
    return found


def _glob_joined(args: dict) -> dict:
    """A Glob call's arguments with its pattern joined to its base `path` (a pattern is
    relative to it), so the binder judges where the pattern really reaches: the seed's audit
    took only the literal prefix and missed `{/etc,src}/*` and `**/../../etc/*` (review §3.4)."""
    pattern, base = args.get("pattern"), args.get("path")
    if isinstance(pattern, str) and pattern and isinstance(base, str) and base and not os.path.isabs(pattern):
        return {**args, "pattern": base.rstrip("/") + "/" + pattern}
    return args


def _changed(before: dict[str, FileState], after: dict[str, FileState]) -> Iterator[str]:
    for rel, state in after.items():
        old = before.get(rel)
        if old is None or (old.sha256, old.kind) != (state.sha256, state.kind):
            yield rel
    for rel in before:
        if rel not in after:
            yield rel


def _lines(source: str | os.PathLike[str] | Iterable[str | bytes]) -> Iterator[str | bytes]:
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as fh:
            yield from fh
    else:
        yield from source


def audit_events(
    source: str | os.PathLike[str] | Iterable[str | bytes],
    cli: str,
    facts: RunFacts,
    *,
    trace: Any = None,
    auditor: type | None = None,
) -> AuditVerdict:
    """Audit one session: `source` is a JSONL file path or an iterable of lines (`auditor`: an
    Auditor subclass to use instead)."""
    auditor = (auditor or Auditor)(cli, facts).feed_all(_lines(source))
    verdict = auditor.verdict()
    if trace is not None:
        trace.record("audit", cli=auditor.cli, clean=verdict.clean, codes=sorted({f.code for f in verdict.flags}))
    return verdict


def summary_line(backend: str, verdict: AuditVerdict | None, *, native_tools_possible: bool) -> str:
    """The RUN_REPORT line, e.g. "backend: cursor — native tools possible, audit: clean"."""
    tools = "native tools possible" if native_tools_possible else "native tools off"
    if verdict is None:
        audit = "not run"
    elif verdict.clean:
        notes = sorted({f.code for f in verdict.flags})
        audit = "clean" + (f" (notes: {', '.join(notes)})" if notes else "")
    else:
        codes = sorted({f.code for f in verdict.flags if f.code not in INFO_CODES})
        audit = "FLAGGED: " + ", ".join(codes)
    return f"backend: {backend} — {tools}, audit: {audit}"
