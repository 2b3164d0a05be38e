"""The shared base of the harness transports (claude-code, codex, cursor).

Requirements kept here (doc/SPEC-claude-code.md §Harness base):
- Every session gets its own run dir (0700) and a scratch cwd for the CLI that is never the
  worktree, nor inside it (a CLI walks up from its cwd for CLAUDE.md / AGENTS.md); the
  worktree is reached only through the bridge.
- The child env is built by `build_child_env` from the parent env plus explicit injections
  (traced by name only); `run_process` adds the `HARNESSCHECK_RUN` marker.
- The bridge spec is written into the run dir; the CLI starts the bridge from the MCP
  config the subclass writes there.
- The CLI runs under `session_slot(settings.concurrency)`; the wait for a slot counts
  against `timeout_s` (no slot in time: truncated/timeout, "the session never started");
  the bridge trace is folded into the outcome
  (tool_calls, tools_used, refusals); duration, exit code/signal, the redacted stderr tail
  and the CLI version are set on every outcome.
- Endings without a terminal event map the same way for every CLI (`ending_outcome`):
  cancelled -> cancelled; oversize line -> error/protocol naming the limit; deadline ->
  truncated/timeout (partial text, usage kept by the parser); exit != 0 -> cli_crash;
  exit 0 -> protocol.
- `complete()` is a one-shot, tool-less call in an empty scratch cwd; it raises
  CapabilityUnsupported when given tools.

A subclass supplies `invocation(ctx, request, tool_less)` (argv, injections, stdin) and
`make_parser(ctx, request, tool_less, on_text)` (a pure parser with `feed(line)` and
`outcome(process_result)`).

Over 800 lines for a reason: HarnessTransport is the one session path of every CLI backend
(spawn, bridge, parse, audit, endings, policy limits), and its ending map must read the same
for all of them. The seam: the ending map and the policy limits (`ending_outcome`,
`_TurnLimit`) vs. the session.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from harnesscheck.contain.rundir import CLI_STATE_DIRS, config_home_entries, forget_cli_state
from harnesscheck.core.config import Settings
from harnesscheck.core.contracts import (
    AgentOutcome,
    AgentSessionRequest,
    Capability,
    CapabilityUnsupported,
    ConfigError,
    ErrorClass,
    OutcomeStatus,
    ProviderSpec,
)
from harnesscheck.core.scope import ToolScope, require_root

#: Bridge server name in every CLI's MCP config (claude sees mcp__bridge__read_file).
BRIDGE_SERVER = "bridge"


class StreamParser(Protocol):
    def feed(self, line: str) -> Any: ...

    def outcome(self, result: Any) -> AgentOutcome: ...


@dataclass
class SessionContext:
    """Where one session lives. Nothing here is inside the worktree."""

    run_dir: Path
    cwd: Path  # the CLI's cwd: an empty scratch dir
    session_id: str
    spec_path: Path | None  # bridge spec (None for tool-less one-shots)
    bridge_trace: Path | None
    session_trace: Path
    scope: ToolScope | None
    cleanup: list[Path] = field(default_factory=list)  # temp dirs we made outside run_dir
    #: the bridge's live line to this host (bridge/hostlink.py): events and approvals
    link: Any = None


@dataclass
class Invocation:
    """How to start the CLI for one session."""

    argv: list[str]
    injections: dict[str, str] = field(default_factory=dict)
    stdin_bytes: bytes | None = None
    #: A conversation on stdin (process.StdinFeed, e.g. an ACP agent's JSON-RPC) instead of bytes.
    stdin_feed: Any = None


class EventDecoder:
    """Stdout lines to JSON events (cli-formats §6.3): a line not starting with `{` is noise
    (skipped, counted); a `{` line that does not parse to an object is malformed (skipped,
    counted, reported in the outcome's message)."""

    def __init__(self) -> None:
        self.noise = 0
        self.malformed = 0

    def decode(self, line: str) -> dict | None:
        text = line
        if not text.startswith("{"):  # the common case skips a copy of a multi-MB line
            text = line.strip()
            if not text:
                return None
            if not text.startswith("{"):
                self.noise += 1
                return None
        try:
            event = json.loads(text)
        except ValueError:
            self.malformed += 1
            return None
        if not isinstance(event, dict):
            self.malformed += 1
            return None
        return event


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


#: Where a scratch dir may go when the temp dir is inside the scope root (e.g. root=/tmp),
#: in order after `tempfile.gettempdir()`. None of them inside the root: the root is refused.
SCRATCH_BASES: tuple[str, ...] = ("/var/tmp", "/dev/shm", "/tmp")


def scratch_dir(root: Path, prefix: str) -> Path:
    """A new private (0700) temp dir that is not inside the scope root `root`: the temp dir
    when it is outside, else the first of SCRATCH_BASES that is. A root containing all of
    them (e.g. `/`) is refused up front with a usage error (ConfigError), before anything runs."""
    tried = []
    for base in (tempfile.gettempdir(), *SCRATCH_BASES):
        if base in tried:
            continue
        tried.append(base)
        if os.path.isdir(base) and os.access(base, os.W_OK | os.X_OK) and not _inside(Path(base), root):
            return Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    raise ConfigError(
        f"the scope root {root} contains every scratch location ({', '.join(tried)})",
        "give a narrower root (the worktree itself), or set TMPDIR to a directory outside it",
    )


def new_session_context(request: AgentSessionRequest, backend: str, *, tool_less: bool = False, result_cap: int | None = None) -> SessionContext:
    """Create the run dir, an empty scratch cwd outside the worktree, and the bridge spec.

    `result_cap`: a tighter bound for the bridge's tool results than the scope's (a CLI that
    replaces bigger results with its own notice); never a looser one."""
    from harnesscheck.contain.rundir import prepare_run_dir

    session_id = request.session_id or f"{backend}-{uuid.uuid4().hex[:12]}"
    cleanup: list[Path] = []
    root = request.scope.root
    # Fresh and private (0700, ours), or verified so; never inside the worktree, checked after
    # resolving '..' and symlinks (rundir.py): the model must not reach its own audit trail.
    if request.run_dir is not None:
        run_dir = prepare_run_dir(request.run_dir, forbidden=[root], prefix=f"harnesscheck-{backend}-")
    else:
        run_dir = scratch_dir(root, f"harnesscheck-{backend}-")  # a fresh mkdtemp outside the worktree
    cwd = run_dir / "cwd"
    if _inside(root, run_dir):
        # A CLI walks up from its cwd for instruction files: never start it under the worktree.
        cwd = scratch_dir(root, f"harnesscheck-{backend}-cwd-")
        cleanup.append(cwd)
    else:
        if cwd.exists():
            shutil.rmtree(cwd)
        cwd.mkdir(mode=0o700)
    spec_path = bridge_trace = None
    if not tool_less:
        bridge_trace = run_dir / "bridge-trace.jsonl"
        spec_path = Path(request.bridge_spec_path) if request.bridge_spec_path else run_dir / "bridge-spec.json"
        if request.bridge_spec_path:
            from harnesscheck.contain.rundir import check_outside

            check_outside(os.path.realpath(spec_path), [root])  # the CLI loads it: never in the worktree
        scope = request.scope
        if result_cap is not None and result_cap < scope.max_result_bytes:
            scope = scope.model_copy(update={"max_result_bytes": int(result_cap)})
        link = None
        if request.on_event is not None or request.approver is not None:
            from harnesscheck.bridge.hostlink import HostLink
            from harnesscheck.core.policy import Policy

            link = HostLink.start(
                run_dir,
                events=request.events(session_id) if request.on_event is not None else None,
                approver=request.approver,
                timeout_s=(request.policy or Policy()).approval_timeout_s,
            )
        write_bridge_spec(
            scope,
            run_dir,
            bridge_trace,
            session_id,
            spec_path,
            policy=request.policy,
            host_link=link is not None,
            host_approver=link is not None and request.approver is not None,
        )
    return SessionContext(
        run_dir=run_dir,
        cwd=cwd,
        session_id=session_id,
        spec_path=spec_path,
        bridge_trace=bridge_trace,
        session_trace=run_dir / "session-trace.jsonl",
        scope=None if tool_less else request.scope,
        cleanup=cleanup,
        link=None if tool_less else link,
    )


def write_bridge_spec(
    scope: ToolScope,
    run_dir: Path,
    trace_path: Path,
    session_id: str,
    spec_path: Path,
    *,
    policy=None,
    host_link: bool = False,
    host_approver: bool = False,
) -> Path:
    from harnesscheck.bridge.spec import BridgeSpec, write_spec

    # The host opens the root once for the session; the bridge must find that same directory.
    identity = scope.open_root().identity
    spec = BridgeSpec(
        scope=scope,
        run_dir=run_dir,
        trace_path=trace_path,
        session_id=session_id,
        parent_pid=os.getpid(),
        root_identity=identity,
        policy=policy,
        host_link=host_link,
        host_approver=host_approver,
    )
    return write_spec(spec, spec_path)


def bridge_command(spec_path: Path) -> tuple[list[str], dict[str, str]]:
    """(argv, env) a CLI's MCP config uses to start the bridge: absolute interpreter, explicit env.

    The relay to this host's bridge forkserver when it runs (the spec is registered now, so
    write the spec first; `release_bridge` after the session), else the full stdio bridge.
    Either way the full bridge is pinned (`--spec-sha256`) to the spec's bytes as written now."""
    from harnesscheck.bridge.forkserver import relay_command
    from harnesscheck.bridge.spec import bridge_argv, bridge_env, spec_sha256

    relay = relay_command(spec_path)
    if relay is not None:
        return relay
    try:
        pin = spec_sha256(Path(spec_path).read_bytes())
    except OSError:
        pin = None  # unreadable now: the bridge will fail to read it too, and say why
    return bridge_argv(spec_path, spec_sha256=pin), bridge_env()


def start_bridge() -> None:
    """At a session's start, before anything else: start this host's bridge forkserver if it
    does not run yet (not waiting for it: its ~0.5 s of imports overlap the version probe,
    the session's set-up and the CLI's own start; the relay waits for it if need be)."""
    from harnesscheck.bridge.forkserver import get_forkserver

    get_forkserver()


def warm_up(*, wait: bool = True, timeout_s: float = 60.0) -> bool:
    """For a host that runs sessions: call once at its start, so that even its first session
    costs what its tenth does. Starts this host's process guard and bridge forkserver (its `import mcp`, the
    ~0.5-0.8 s a first session would otherwise wait for where the CLI's own start does not
    cover it) and, with `wait`, returns when it is ready: the cost the official SDKs pay at
    their import. True when the forkserver is ready (or, without `wait`, started); False
    when it cannot run here (sessions then use the stdio bridge, as they would anyway)."""
    from harnesscheck.bridge.forkserver import ForkServerError, get_forkserver
    from harnesscheck.contain.process import start_guard

    start_guard()  # the process guard, too: an interpreter start the first session would wait for
    server = get_forkserver()
    if server is None:
        return False
    if not wait:
        return True
    try:
        return server.await_ready(timeout_s)
    except ForkServerError:
        return False


def bind_bridge(spec_path: Path | None, cli_pid: int) -> None:
    """As soon as the CLI runs: its forkserver bridge is served to the CLI and the processes
    it started only. Unbound, the relay is refused and the session fails loudly."""
    from harnesscheck.bridge.forkserver import bind_session

    bind_session(spec_path, cli_pid)


def release_bridge(spec_path: Path | None) -> None:
    """After a session, any ending: kill and reap its forkserver bridge children (they are not
    in the CLI's process group), synchronously. A no-op for the stdio bridge."""
    from harnesscheck.bridge.forkserver import release_session

    release_session(spec_path)


def ending_outcome(result: Any, *, terminal_seen: bool) -> tuple[OutcomeStatus, ErrorClass | None, str] | None:
    """What the process ending says when the stream gave no terminal event (None: the stream decides).

    Same for every CLI: cancel -> cancelled, oversize -> protocol (names the limit),
    deadline -> truncated/timeout, the supervisor stopped or killed from inside the tree ->
    policy_violation, exit != 0 or a signal -> cli_crash, exit 0 -> protocol.
    """
    from harnesscheck.contain.process import Ending

    if result.ending is Ending.cancelled and not terminal_seen:
        return OutcomeStatus.cancelled, None, "cancelled by the host; the process tree was ended"
    if result.ending is Ending.oversize and not terminal_seen:
        limit = result.oversize_limit
        return (
            OutcomeStatus.error,
            ErrorClass.protocol,
            f"a stdout line exceeded the {limit}-byte limit (max_line_bytes); raise it or bound the tool output",
        )
    if result.ending is Ending.deadline and not terminal_seen:
        return OutcomeStatus.truncated, ErrorClass.timeout, "the session deadline passed; partial output kept"
    if result.ending is Ending.process_limit:
        return OutcomeStatus.truncated, ErrorClass.budget, process_limit_message(result)
    if terminal_seen or result.ending is Ending.early_stop:
        return None
    if getattr(result, "supervisor_lost", False):
        return (
            OutcomeStatus.error,
            ErrorClass.policy_violation,
            "a process of the CLI's tree stopped or killed the session's supervisor; the tree was killed",
        )
    if result.exit_code not in (0, None) or result.signal is not None:
        how = f"signal {result.signal}" if result.signal is not None else f"exit code {result.exit_code}"
        return OutcomeStatus.error, ErrorClass.cli_crash, f"the CLI ended with {how} and no terminal event"
    return OutcomeStatus.error, ErrorClass.protocol, "the CLI exited 0 without a terminal event"


def process_limit_message(result: Any) -> str:
    return f"stopped at the policy's processes limit: the CLI's tree held {result.processes_seen} processes at once; the tree was ended"


def _policy_turn_cap(request: AgentSessionRequest, spec: ProviderSpec) -> tuple[AgentSessionRequest, bool]:
    """The request with the policy's turns limit as the CLI's own turn cap, for a CLI that has
    one (`max_turns`) and when the limit is the tighter; whether it was applied (a CLI that then
    stops at its cap has reached the policy's limit: truncated/budget, doc/SPEC-policy.md)."""
    policy = getattr(request, "policy", None)
    turns = policy.limits.turns if policy is not None else None
    if turns is None or not spec.supports(Capability.max_turns) or (request.max_iters and request.max_iters <= turns):
        return request, False
    return request.model_copy(update={"max_iters": max(turns, 1)}), True


class _TurnLimit:
    """The policy's turns limit for a CLI with no turn cap of its own whose stream shows where a
    model turn begins (`HarnessTransport.turn_event`): a model output seen first, or first after a
    tool result, or an explicit step, begins a turn. The turn past the limit is stopped when its
    first output is seen (its request was already made: the CLI owns its loop)."""

    def __init__(self, limit: int, turn_event: Callable[[dict], str | None]):
        self.limit, self.turn_event = limit, turn_event
        self.turns = 0
        self.after_result = True
        self.exceeded = False

    @classmethod
    def for_session(cls, request: AgentSessionRequest, transport: "HarnessTransport", *, tool_less: bool):
        policy = getattr(request, "policy", None)
        turns = policy.limits.turns if policy is not None else None
        if turns is None or tool_less or transport.spec.supports(Capability.max_turns) or not transport.counts_turns:
            return None
        return cls(turns, transport.turn_event)

    def see(self, line: str) -> bool:
        """True once the line begins a turn past the limit."""
        if self.exceeded or not line.startswith("{"):
            return self.exceeded
        try:
            event = json.loads(line)
        except ValueError:
            return False
        kind = self.turn_event(event) if isinstance(event, dict) else None
        if kind == "step" or (kind in ("output", "output_and_result") and self.after_result):
            self.turns += 1
            self.after_result = False
        if kind in ("result", "output_and_result"):
            self.after_result = True
        self.exceeded = self.turns > self.limit
        return self.exceeded

    def wrap(self, feed: Callable[[str], Any]) -> Callable[[str], Any]:
        from harnesscheck.contain.process import LineAction

        def on_line(line: str) -> Any:
            action = feed(line)
            return LineAction.STOP if self.see(line) else action

        return on_line


def _process_limit(request: AgentSessionRequest) -> int | None:
    policy = getattr(request, "policy", None)
    return policy.limits.processes if policy is not None else None


class _Tracer:
    """The session trace (env injections by name, session start/end); harnesscheck.choke.trace.Trace."""

    def __init__(self, path: Path, session_id: str):
        from harnesscheck.choke.trace import Trace

        self._trace = Trace(path, session_id)

    def record(self, event: str, **fields: Any) -> None:
        self._trace.record(event, **fields)

    def close(self) -> None:
        close = getattr(self._trace, "close", None)
        if close:
            close()


def _failed(outcome: AgentOutcome, cls: ErrorClass, why: str) -> AgentOutcome:
    """An ok outcome turned blocked with `cls`; what the session said stays in the message."""
    message = "; ".join(p for p in (why, outcome.message) if p)
    return outcome.model_copy(update={"status": OutcomeStatus.blocked, "error_class": cls, "retryable": False, "message": message})


#: What a declined request means for the session (HarnessTransport.declined).
DECLINED_WHY: dict[Capability, str] = {
    Capability.max_turns: "no turn cap: max_iters is not applied, only timeout_s bounds the session",
    Capability.system_prompt: "no system-prompt channel: the system prompt was put before the task in the prompt",
    Capability.builtin_tools_off: "the one-shot still offers the CLI's built-in tools",
}


def unremoved_dir_fails(outcome: AgentOutcome, failed: str | None, what: str) -> AgentOutcome:
    """A one-shot's outcome after its private dir was removed (`remove_private_tree`'s answer):
    unchanged when the dir is gone; else the reason is added to the message, and an outcome
    that was ok becomes a policy_violation error (never retryable): a dir the CLI kept from
    removal is a leftover the host must hear of, never a silent success."""
    if not failed:
        return outcome
    why = f"{what} could not be removed ({failed})"
    update: dict[str, Any] = {"message": "; ".join(p for p in (outcome.message, why) if p)}
    if outcome.ok:
        update.update(status=OutcomeStatus.error, error_class=ErrorClass.policy_violation, retryable=False)
    return outcome.model_copy(update=update)


class HarnessTransport:
    """Glue between a CLI's argv/parser and run_process. Subclasses: ClaudeCodeTransport, ..."""

    #: The CLI's own temp-dir variables, pointed at the session's private temp dir too
    #: (envpolicy.private_temp_dirs; TMPDIR, TMP, TEMP and XDG_RUNTIME_DIR always are).
    private_tmp_vars: tuple[str, ...] = ()

    #: Injected into every child env of this transport (names are traced, values never).
    base_injections: Mapping[str, str] = {}
    #: A bound for one bridge tool result tighter than the scope's, or None (see
    #: new_session_context); a subclass sets it when its CLI mangles bigger results.
    result_cap: int | None = None
    #: The CLI's stdout is a file in the run dir read as it grows, not a pipe (run_process's
    #: `stdout_spool`): for a node CLI that ends with process.exit(), which drops the writes
    #: still queued for a full pipe when the host reads late (gemini).
    stdout_spool: bool = False
    #: The CLI reports no bridge status of its own (cursor): readiness is read from the bridge's
    #: trace after the session (see judge). claude reports it in system/init and codex refuses
    #: to start without its required server; their parsers fail closed on those signals.
    readiness_from_trace: bool = False
    #: The run dir's subdirs this CLI writes its own state into (rundir.CLI_STATE_DIRS): after
    #: the session only what the host put there before the CLI started stays (forget_cli_state).
    cli_state_dirs: tuple[str, ...] = CLI_STATE_DIRS
    #: Whether a session takes one of the host's session slots (Settings.concurrency). False
    #: only for a CLI call made inside a session that already holds one (reasoning-only Claude
    #: Code's per-turn call, inside its api session): a second slot there deadlocks at the cap.
    takes_session_slot: bool = True
    #: Run the CLI in a sandbox of its own where the machine allows it (doc/SPEC-sandbox.md).
    sandboxed: bool = True
    #: Run-dir paths (relative) the CLI fills with what it never reads back after the session:
    #: in a sandbox, each is an empty tmpfs of the sandbox's own (Sandbox.scratch), so those
    #: writes stay in memory and go with the sandbox; unsandboxed, a plain private dir.
    sandbox_scratch: tuple[str, ...] = ()
    #: The CLI's stream shows where its model turns begin (`turn_event`), so the policy's turns
    #: limit is enforced for a CLI with no turn cap of its own (doc/SPEC-policy.md).
    counts_turns: bool = False

    def turn_event(self, event: dict) -> str | None:
        """What one JSON event of the CLI's stream says of its model turns: `step` (a model
        request begins), `output` (the model's text or tool call), `result` (a tool's result:
        the next output begins a turn), `output_and_result` (a tool call reported once, already
        done), or None. Only read when `counts_turns`."""
        return None

    def __init__(
        self,
        spec: ProviderSpec,
        settings: Settings | None = None,
        *,
        cli_path: Path | str | None = None,
        parent_env: Mapping[str, str] | None = None,
        injections: Mapping[str, str] | None = None,
        linger_s: float | None = None,
        term_grace_s: float | None = None,
        max_line_bytes: int | None = None,
        check_version: bool = True,
    ):
        self.spec = spec
        self.settings = settings or Settings()
        self._cli_path = Path(cli_path) if cli_path else None
        self.parent_env = dict(os.environ if parent_env is None else parent_env)
        self.injections = dict(injections or {})
        # Explicit arguments win over the host's settings (HARNESS_BACKEND_LINGER_S / _TERM_GRACE_S).
        self.linger_s = self.settings.linger_s if linger_s is None else linger_s
        self.term_grace_s = self.settings.term_grace_s if term_grace_s is None else term_grace_s
        self.max_line_bytes = max_line_bytes
        self.check_version = check_version
        self._cli_info: Any = None
        self._lock = threading.Lock()
        #: Host paths every session of this transport binds into its sandbox besides its own
        #: (bind_in_sandbox): (read-only, writable).
        self._extra_binds: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())

    def bind_in_sandbox(self, *, read_only: Sequence[str | os.PathLike[str]] = (), writable: Sequence[str | os.PathLike[str]] = ()) -> None:
        """Have every later session's sandbox bind these host paths too, at their own path (a
        host that runs the CLI through an executable of its own, as the kit's exec wrapper
        does: the real CLI's install read-only, the wrapper's record file writable). A path
        that does not exist when the session starts is left out."""
        ro, rw = self._extra_binds
        self._extra_binds = ((*ro, *map(os.fspath, read_only)), (*rw, *map(os.fspath, writable)))

    # -- hooks --------------------------------------------------------------------------

    def invocation(self, ctx: SessionContext, request: AgentSessionRequest, cli: Path, *, tool_less: bool) -> Invocation:
        raise NotImplementedError

    def make_parser(self, ctx: SessionContext, request: AgentSessionRequest, *, tool_less: bool, on_text: Callable[[str], None] | None) -> StreamParser:
        raise NotImplementedError

    def sandbox_paths(self, ctx: SessionContext, cli: Path) -> tuple[list[str], list[str]]:
        """(read-only, writable) host paths this CLI needs in its sandbox beyond what every
        session binds (session_sandbox): those the host gave bind_in_sandbox; a subclass adds
        its own to them."""
        ro, rw = self._extra_binds
        return list(ro), list(rw)

    def after_session(self, ctx: SessionContext, outcome: AgentOutcome) -> AgentOutcome | None:
        """Subclass clean-up after the process tree is gone (e.g. unlink a credential link).
        May return a replacement outcome (e.g. with the post-run audit verdict attached)."""

    # -- the CLI ------------------------------------------------------------------------

    def cli(self) -> Any:
        """The CLI (path, version), found once: explicit path, HARNESS_BACKEND_CLI, PATH, cache."""
        with self._lock:
            if self._cli_info is None:
                from harnesscheck.backends.registry import find_cli

                settings = self.settings
                if self._cli_path is not None:
                    settings = settings.model_copy(update={"cli": self._cli_path})
                self._cli_info = find_cli(self.spec, settings, check_version=self.check_version)
            return self._cli_info

    # -- sessions -----------------------------------------------------------------------

    def run_session(
        self,
        request: AgentSessionRequest,
        *,
        cancel: threading.Event | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> AgentOutcome:
        """One agent session through the CLI. In-session failures become the outcome; a
        scope whose root is no directory is refused before anything starts (ConfigError)."""
        require_root(request.scope)
        return self._run(request, cancel=cancel, on_text=on_text, tool_less=False)

    def complete(
        self,
        prompt: str,
        *,
        system: str | None = None,
        model: str | None = None,
        tools: list | None = None,
        timeout_s: float | None = None,
    ) -> AgentOutcome:
        """One-shot, tool-less call in an empty scratch cwd. Raises if given tools."""
        if tools:
            raise CapabilityUnsupported(self.spec.id, "tools in complete() (harness one-shots are tool-less)")
        scratch = Path(tempfile.mkdtemp(prefix=f"harnesscheck-{self.spec.id}-oneshot-"))
        try:
            request = AgentSessionRequest(
                prompt=prompt,
                scope=ToolScope(name="oneshot", root=scratch / "empty", read_only=True, allowed_tools=()),
                system=system,
                model=model,
                max_iters=1,
                timeout_s=timeout_s or self.settings.timeout_s,
                run_dir=scratch / "run",
            )
            (scratch / "empty").mkdir()
            outcome = self._run(request, cancel=None, on_text=None, tool_less=True)
        finally:
            from harnesscheck.contain.rundir import remove_private_tree

            failed = remove_private_tree(scratch)
        return unremoved_dir_fails(outcome, failed, "the one-shot's private dir")

    def _run(
        self,
        request: AgentSessionRequest,
        *,
        cancel: threading.Event | None,
        on_text: Callable[[str], None] | None,
        tool_less: bool,
    ) -> AgentOutcome:
        """One session, then what its clean-up found: a private dir that could not be removed,
        or a run dir (or anything in it) left writable by others, is an error of the outcome
        (never silent); the modes are made private again either way."""
        leftovers: list[str] = []
        outcome = self._run_once(request, cancel=cancel, on_text=on_text, tool_less=tool_less, leftovers=leftovers)
        if not leftovers:
            return outcome
        why = "the session's clean-up found: " + "; ".join(leftovers[:5])
        update: dict[str, Any] = {"message": "; ".join(p for p in (outcome.message, why) if p)}
        if outcome.ok:
            update.update(status=OutcomeStatus.error, error_class=ErrorClass.policy_violation, retryable=False)
        return outcome.model_copy(update=update)

    def _run_once(
        self,
        request: AgentSessionRequest,
        *,
        cancel: threading.Event | None,
        on_text: Callable[[str], None] | None,
        tool_less: bool,
        leftovers: list[str],
    ) -> AgentOutcome:
        from harnesscheck.contain.envpolicy import build_child_env, private_temp_dirs, redact
        from harnesscheck.contain.process import DEFAULT_MAX_LINE_BYTES, Ending, SlotBusy, run_process, session_slot

        if request.options is not None and request.options.given():  # before anything starts
            from harnesscheck.core.contracts import OptionUnsupported

            name = next(iter(request.options.given()))
            raise OptionUnsupported(self.spec.id, name, request.model, f"{self.spec.cli_name or self.spec.id} takes no {name} from the host")

        request, capped_by_policy = _policy_turn_cap(request, self.spec)
        if not tool_less:
            start_bridge()
        info = self.cli()
        from harnesscheck.backends.climanifest import verify as verify_install

        verify_install(info.path)  # every session: a cached CLI changed since install-clis is never run
        started = time.monotonic()  # the wait for a session slot counts against timeout_s
        ctx = new_session_context(request, self.spec.id, tool_less=tool_less, result_cap=self.result_cap)
        tracer = _Tracer(ctx.session_trace, ctx.session_id)
        injections: dict[str, str] = {}
        host_entries: set[str] | None = None
        try:
            if _inside(ctx.cwd, request.scope.root):
                raise ConfigError("the CLI cwd would be inside the worktree", "report this: the scratch cwd is misplaced")
            inv = self.invocation(ctx, request, Path(info.path), tool_less=tool_less)
            # the session's temp and runtime dirs go with it: listed in ctx.cleanup as they are made
            private, _ = private_temp_dirs(ctx.run_dir, self.private_tmp_vars, cleanup=ctx.cleanup)
            injections = {**private, **self.base_injections, **self.injections, **inv.injections}
            env = build_child_env(self.parent_env, injections=injections, trace=tracer)
            parser = self.make_parser(ctx, request, tool_less=tool_less, on_text=on_text)
            turn_limit = _TurnLimit.for_session(request, self, tool_less=tool_less)
            if request.on_event is not None and hasattr(parser, "retry_notice"):
                session_events = request.events(ctx.session_id)
                parser.retry_notice = lambda **fields: session_events("retry", **fields)
            host_entries = config_home_entries(ctx.run_dir, self.cli_state_dirs)  # what the host put there
            tracer.record("session_start", backend=self.spec.id, cli_version=info.version, tool_less=tool_less)
            with contextlib.ExitStack() as held:
                try:
                    if self.takes_session_slot:
                        held.enter_context(session_slot(self.settings.concurrency, wait_s=request.timeout_s - (time.monotonic() - started)))
                except SlotBusy as exc:
                    tracer.record("session_end", status="truncated", error_class="timeout", ending="no_slot")
                    return AgentOutcome(
                        status=OutcomeStatus.truncated,
                        error_class=ErrorClass.timeout,
                        retryable=True,
                        message=f"the session never started: {exc}",
                        session_id=ctx.session_id,
                        backend=self.spec.id,
                        cli_version=info.version,
                        duration_s=round(time.monotonic() - started, 3),
                    )
                left = request.timeout_s - (time.monotonic() - started)
                sandbox, sandbox_note = self.session_sandbox(ctx, Path(info.path), inv, host_entries, tool_less=tool_less)
                result = run_process(
                    inv.argv,
                    env=env,
                    cwd=ctx.cwd,
                    on_line=parser.feed if turn_limit is None else turn_limit.wrap(parser.feed),
                    on_err_line=getattr(parser, "feed_err", None),  # a parser reading the CLI's stderr log
                    timeout_s=max(left, 0.001),
                    stdin_bytes=inv.stdin_bytes,
                    stdin_feed=inv.stdin_feed,
                    cancel=cancel,
                    linger_s=self.linger_s,
                    term_grace_s=self.term_grace_s,
                    max_line_bytes=self.max_line_bytes or DEFAULT_MAX_LINE_BYTES,
                    run_marker=f"{ctx.session_id}-{uuid.uuid4().hex[:8]}",
                    on_spawn=(lambda pid: bind_bridge(ctx.spec_path, pid)) if ctx.spec_path is not None else None,
                    stdout_spool=ctx.run_dir if self.stdout_spool else None,
                    sandbox=sandbox,
                    max_processes=_process_limit(request),
                )
            release_bridge(ctx.spec_path)  # before the trace is read; the bridge child is not in the CLI's group
            if turn_limit is not None and turn_limit.exceeded and result.ending is Ending.early_stop:
                # ended by the host before the CLI finished, as a deadline ends it: the parser
                # keeps the partial text and usage; the class is set to budget below
                result = dataclasses.replace(result, ending=Ending.deadline)
            outcome = parser.outcome(result)
            if result.ending is Ending.process_limit:  # whatever the stream said last: the limit ended it
                outcome = outcome.model_copy(
                    update={"status": OutcomeStatus.truncated, "error_class": ErrorClass.budget, "retryable": False, "message": process_limit_message(result)}
                )
            elif result.process_count_note:  # a limit asked for and not enforced: said, never silent
                outcome = outcome.model_copy(update={"message": "; ".join(p for p in (outcome.message, result.process_count_note) if p)})
            parser_session_id = outcome.session_id
            outcome = self._finish(outcome, ctx, result, info, redact)
            if (turn_limit is not None and turn_limit.exceeded) or (capped_by_policy and outcome.error_class is ErrorClass.max_turns):
                limit = request.policy.limits.turns
                why = (
                    f"stopped at the policy's turns limit ({limit}): the CLI began model turn {limit + 1}"
                    if turn_limit is not None and turn_limit.exceeded
                    else f"stopped at the policy's turns limit ({limit}), the CLI's own turn cap"
                )
                outcome = outcome.model_copy(update={"status": OutcomeStatus.truncated, "error_class": ErrorClass.budget, "retryable": False, "message": why})
            note = sandbox_note or result.containment_note
            outcome = outcome.model_copy(update={"containment": result.containment, "containment_note": note or None})
            if request.on_event is not None and ctx.bridge_trace is not None:
                _report_bridge_calls(request.events(ctx.session_id), ctx.bridge_trace, ctx.session_id, reported=ctx.link.seal() if ctx.link is not None else ())
            tracer.record(
                "session_end",
                cli_session_id=parser_session_id,
                status=str(outcome.status),
                error_class=str(outcome.error_class) if outcome.error_class else None,
                ending=str(result.ending),
                exit_code=result.exit_code,
            )
            outcome = self.after_session(ctx, outcome) or outcome
            declined = self.declined(request, one_shot=tool_less)
            if declined:
                tracer.record("declined", capabilities=[str(c) for c in declined])
                note = "declined: " + ", ".join(f"{c} ({DECLINED_WHY[c]})" for c in declined)
                outcome = outcome.model_copy(update={"message": "; ".join(p for p in (outcome.message, note) if p)})
            return self._redacted(self.judge(outcome, ctx, tool_less=tool_less), injections)
        finally:
            try:
                release_bridge(ctx.spec_path)  # also when the CLI never started
                if ctx.link is not None:
                    ctx.link.close()
                tracer.close()
                if host_entries is not None:  # the CLI's transcripts and stores hold tool arguments verbatim
                    forget_cli_state(ctx.run_dir, host_entries, self.cli_state_dirs)
                self._redact_run_files(ctx, injections)
            finally:  # a Ctrl-C landing in the steps above (redaction reads every run file) skips none
                leftovers.extend(self.clean_up(ctx))

    def session_sandbox(self, ctx: SessionContext, cli: Path, inv: Invocation, host_entries: set[str] | None, *, tool_less: bool) -> tuple[Any, str]:
        """The session's sandbox (harnesscheck.contain.sandbox.Sandbox), or (None, why not).

        Read-only: the run dir (the MCP config, system prompt, spec the CLI loads; its traces
        cannot be rewritten), the CLI's install, the host's interpreter and harnesscheck's own
        files (the relay, the fake CLIs), the bridge forkserver's socket and relay. Writable:
        the CLI's state dirs in the run dir (private HOME, config homes, scratch cwd), its
        temp and runtime dirs, and the targets of the credential links the host put there
        (live level: the one credentials file a CLI refreshes). Not there: the worktree, the
        user's HOME, the host's /tmp, every other process."""
        from harnesscheck.contain import sandbox as sb

        mode = getattr(self.settings, "sandbox", "auto")
        if mode == "off":
            return None, "no sandbox asked for (HARNESS_BACKEND_SANDBOX=off)"
        if not self.sandboxed:
            return None, "this transport runs unsandboxed"
        if mode == "require" and not sb.status().available:
            raise ConfigError(f"a sandbox is required (HARNESS_BACKEND_SANDBOX=require) and cannot be had here: {sb.status().reason}", sb.INSTALL_FIX)
        relay: list[str] = []
        if not tool_less and ctx.spec_path is not None:
            from harnesscheck.bridge.forkserver import relay_binds

            found = relay_binds(ctx.spec_path)
            if found is None:
                if mode == "require":
                    raise ConfigError(
                        "a sandbox is required but the bridge forkserver does not run: the stdio bridge would need the worktree inside the sandbox",
                        "leave HARNESSCHECK_BRIDGE_FORKSERVER unset (the forkserver is on by default)",
                    )
                return None, "no bridge forkserver: the stdio bridge would need the worktree inside the sandbox"
            relay = found
        fake_ro, fake_rw = sb.sidecar_paths(cli)
        extra_ro, extra_rw = self.sandbox_paths(ctx, cli)
        writable = [str(p) for p in ctx.cleanup] + [str(ctx.cwd)] + fake_rw + extra_rw
        for rel in sorted(host_entries or ()):
            path = ctx.run_dir / rel
            if path.is_symlink():
                target = os.path.realpath(path)
                if os.path.isfile(target):
                    writable.append(target)  # a credential link: the CLI reads (and refreshes) that one file
        box = sb.for_session(
            run_dir=ctx.run_dir, cli=cli, bridge=relay, read_only=[*fake_ro, *extra_ro], writable=writable, state_dirs=(*self.cli_state_dirs, "tmp", "runtime")
        )
        if self.sandbox_scratch:
            scratch = [ctx.run_dir / rel for rel in self.sandbox_scratch]
            for path in scratch:
                path.mkdir(mode=0o700, parents=True, exist_ok=True)  # the mount point, on the host
            box = dataclasses.replace(box, scratch=tuple(str(p) for p in scratch))
        return box, ""

    def clean_up(self, ctx: SessionContext) -> list[str]:
        """After the tree is gone: remove the session's private dirs whatever modes its CLI
        left, and make the run dir private again; what could not be removed or had been
        opened up, for the outcome (never silent)."""
        from harnesscheck.contain.rundir import recheck_private, remove_private_tree

        found: list[str] = []
        for path in reversed(ctx.cleanup):  # the last made first: the short runtime dir outside the run dir
            failed = remove_private_tree(path)
            if failed:
                role = path.name if path.parent == ctx.run_dir else "a private temp dir"
                found.append(f"{role} could not be removed ({failed})")
        found.extend(recheck_private(ctx.run_dir))
        return found

    def declined(self, request: AgentSessionRequest, *, one_shot: bool = False) -> tuple[Capability, ...]:
        """Preflight: what this request asks for that the backend will not do, as the capability
        it lacks (typed; empty when everything is honoured). A turn cap (`max_iters`) without
        `max_turns` (only `timeout_s` bounds the session); a system prompt without
        `system_prompt` (it is folded into the prompt); a one-shot without `builtin_tools_off`
        (the CLI's built-ins stay on). Every session's outcome message also says so."""
        caps = self.spec.capabilities
        out = []
        if request.max_iters and not one_shot and Capability.max_turns not in caps:
            out.append(Capability.max_turns)
        if request.system and request.system.strip() and Capability.system_prompt not in caps:
            out.append(Capability.system_prompt)
        if one_shot and Capability.builtin_tools_off not in caps:
            out.append(Capability.builtin_tools_off)
        return tuple(out)

    def judge(self, outcome: AgentOutcome, ctx: SessionContext, *, tool_less: bool) -> AgentOutcome:
        """The verdicts every harness applies last, in this order, each only to a session
        still ok (an earlier failure keeps its own class):

        1. bridge readiness from the bridge's own trace, for a CLI that reports none itself
           (`readiness_from_trace`): a session with tools whose bridge never listed its
           tools ran without them -> blocked/mcp_unavailable (bridge/readiness.py);
        2. the audit, for a backend whose enforcement it is (`native_tools_audited`: its
           built-ins cannot be switched off): an unclean verdict -> blocked/policy_violation,
           the message naming the flags, so a library host need not re-derive it; unless its
           only violations are drift (audit.DRIFT_CODES: format drift, a log gap), which the message notes;
        3. the served-model guard (backends/_guard.py, HARNESS_MODEL_MISMATCH).
        """
        from harnesscheck.backends._guard import apply_model_guard

        if outcome.ok and self.readiness_from_trace and not tool_less and ctx.bridge_trace is not None and ctx.scope is not None:
            if ctx.scope.tool_names():
                from harnesscheck.bridge.readiness import bridge_listed

                ready = bridge_listed(ctx.bridge_trace, ctx.session_id)
                if not ready.ready:
                    outcome = _failed(
                        outcome, ErrorClass.mcp_unavailable, f"{ready.reason}: the session ran without the host's tools (never proceed tool-less)"
                    )
        audit = outcome.audit
        if outcome.ok and audit is not None and not audit.clean and self.spec.supports(Capability.native_tools_audited):
            from harnesscheck.backends.audit import DRIFT_CODES, INFO_CODES

            codes = sorted({f.code for f in audit.flags if f.code not in INFO_CODES})
            if not codes or set(codes) - DRIFT_CODES:
                outcome = _failed(
                    outcome,
                    ErrorClass.policy_violation,
                    f"the post-run audit is unclean ({', '.join(codes) or 'flagged'}): the CLI's built-ins "
                    "cannot be switched off, so the audit's verdict is the session's",
                )
            else:
                note = f"audit unclean by drift only ({', '.join(codes)}): nothing is known to have run outside the bridge"
                outcome = outcome.model_copy(update={"message": "; ".join(p for p in (outcome.message, note) if p)})
        return apply_model_guard(outcome, self.settings.model_mismatch)

    #: The session files a run dir holds that may quote tool arguments or CLI output.
    SESSION_FILES = ("bridge-trace.jsonl", "session-trace.jsonl", "events.jsonl")

    def _secrets(self, injections: Mapping[str, str]) -> set[str]:
        from harnesscheck.contain.envpolicy import session_secret_values

        return session_secret_values(self.parent_env, injections)

    def _redacted(self, outcome: AgentOutcome, injections: Mapping[str, str]) -> AgentOutcome:
        """The outcome with every host secret value replaced, in every string field (text,
        message, refusals, audit flags...): the report is written from it."""
        from harnesscheck.contain.envpolicy import replace_values

        secrets = self._secrets(injections)
        dumped = outcome.model_dump(mode="python")
        cleaned = replace_values(dumped, secrets)
        return outcome if cleaned == dumped else type(outcome).model_validate(cleaned)

    def _redact_run_files(self, ctx: SessionContext, injections: Mapping[str, str]) -> None:
        """Every file the session wrote in the run dir, redacted after the fact with the
        host's secret values (SPEC-bridge, "Redaction"): the bridge child only knew its
        scrubbed env, and the CLI's event log is kept verbatim while the session runs."""
        from harnesscheck.contain.rundir import redact_files

        names = list(self.SESSION_FILES)
        for path in (ctx.bridge_trace, ctx.session_trace):
            if path is not None and path.parent == ctx.run_dir and path.name not in names:
                names.append(path.name)
        try:
            redact_files(ctx.run_dir, names, self._secrets(injections))
        except OSError:
            pass  # a run dir removed meanwhile: nothing left to hold a secret

    def _finish(self, outcome: AgentOutcome, ctx: SessionContext, result: Any, info: Any, redact: Callable) -> AgentOutcome:
        update: dict[str, Any] = {
            "backend": self.spec.id,
            "cli_version": info.version,
            "duration_s": round(result.duration_s, 3),
            "exit_code": result.exit_code,
            "signal": result.signal,
            "orphan_suspected": bool(result.orphan_suspected),
            "stderr_tail": redact(result.stderr_tail or ""),
            "message": redact(outcome.message),
        }
        # The host's session id: it keys the bridge trace and the session trace. The CLI's own
        # id (if it printed one) is kept in the session trace as cli_session_id.
        update["session_id"] = ctx.session_id
        if ctx.bridge_trace is not None:
            from harnesscheck.bridge.spec import summarize_trace

            summary = summarize_trace(ctx.bridge_trace, ctx.session_id)
            if summary.started or summary.tool_calls:
                # The bridge trace is what dispatch did; the stream is only what the model asked.
                update["tool_calls"] = summary.tool_calls
                update["tools_used"] = list(summary.tools_used)
                # The trace was written by the bridge child, whose env knows fewer secrets than ours:
                # redact again with this run's secrets, and bound, before a detail reaches the outcome.
                from harnesscheck.choke.dispatch import trace_detail
                from harnesscheck.contain.envpolicy import redact as redact_with
                from harnesscheck.contain.envpolicy import secret_values

                secrets = secret_values(self.parent_env)
                update["refusals"] = [r.model_copy(update={"detail": trace_detail(redact_with(r.detail, secrets))}) for r in summary.refusals]
                # A policy limit reached at the bridge ends the session's work there (every later
                # call was refused): the host learns the work is incomplete (doc/SPEC-policy.md).
                if outcome.status is OutcomeStatus.ok and any(r.code == "limit_reached" for r in summary.refusals):
                    update.update(
                        status=OutcomeStatus.truncated,
                        error_class=ErrorClass.budget,
                        retryable=False,
                        message="stopped at a policy limit: the bridge refused every call past it",
                    )
        return outcome.model_copy(update=update)


def _report_bridge_calls(events: Callable[..., object], trace_path: Path, session_id: str, reported=()) -> None:
    """The bridge's calls the host link did not deliver as they happened (`reported`: their
    digests), as `tool_result` events marked `late`, from the bridge trace (doc/SPEC-events.md)."""
    import json

    try:
        lines = Path(trace_path).read_bytes().splitlines()
    except OSError:
        return
    for raw in lines:
        try:
            rec = json.loads(raw)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("event") == "tool" and rec.get("session") == session_id:
            if str(rec.get("digest") or "")[:16] in reported and rec.get("digest"):
                continue
            events("tool_result", tool=str(rec.get("tool"))[:80], ok=rec.get("decision") == "allow", code=rec.get("code"), digest=rec.get("digest"), late=True)


class HarnessLLM:
    """LLM-shaped adapter over a harness transport: tool-less one-shot completions only."""

    def __init__(self, transport: HarnessTransport):
        self.transport = transport

    def complete(
        self,
        prompt: str,
        *,
        system: str | None = None,
        model: str | None = None,
        tools: list | None = None,
        timeout_s: float | None = None,
    ) -> AgentOutcome:
        if tools:
            raise CapabilityUnsupported(self.transport.spec.id, "tools in complete() (harness one-shots are tool-less)")
        return self.transport.complete(prompt, system=system, model=model, timeout_s=timeout_s)
