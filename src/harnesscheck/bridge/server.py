"""The bridge process: a stdio MCP server whose every tool is a thin shim over `dispatch`.

Contract (doc/SPEC-bridge.md):
- Startup, before `mcp` or any tool code is imported: scrub its own environment with the
  env policy (the CLIs hand their whole env, API keys included, to the MCP servers they
  spawn); take private duplicates of fd 0/1 for the protocol, then point fd 1 and
  `sys.stdout` at stderr and fd 0 at /dev/null, so a stray print() anywhere after startup
  cannot corrupt the JSON-RPC stream and no child can read the protocol.
- It reads no configuration but its spec: no .env, nothing from its cwd, no env variable.
- It lists exactly `tool_definitions(scope)`; each call goes to `dispatch`, so refusals,
  codes, path resolution and result bounds equal the in-process loop. A refusal is a tool
  result with isError true whose text starts `refused: <code>:`.
- It exits on stdin EOF, and when its parent dies (PR_SET_PDEATHSIG confirmed by
  getppid(), plus a watchdog on getppid() and on the spec's parent_pid).
- It appends to its own per-session trace; every record carries the session id.
- `serve_spec` is the one server path for a spec: `python -m harnesscheck.bridge --spec`
  and the forkserver's child (bridge/forkserver.py), which also ends when its relay's
  connection closes (`hangup_fd`).

Over 800 lines for a reason: this is the one server path every bridge session takes (the
forkserver's child runs `serve_spec`), and its security promises (no config read, parent-death
exit, redacted trace, private protocol fds) are reviewed together in one file. The seam: the
MCP framing vs. the process hardening.
"""

from __future__ import annotations

import argparse
import io
import os
import signal
import sys
import threading
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from harnesscheck.bridge.spec import BridgeSpec
    from harnesscheck.choke.trace import Trace
    from harnesscheck.core.policy import Policy
    from harnesscheck.core.scope import ToolScope

WATCHDOG_INTERVAL_S = 0.25
#: On stdin EOF, tool calls still running get this long to answer before the bridge exits.
DRAIN_TIMEOUT_S = 30.0
#: After the session ended (stdin EOF, calls drained or the drain bound reached), the stdout
#: writer gets this long for what it still holds; a client that no longer reads its end must
#: not keep the bridge alive.
WRITE_GRACE_S = 2.0
#: The longest request line the bridge buffers. The largest legitimate request is an
#: edit_file whose `old` and `new` are each up to 8 MiB (dispatch's bound), so 32 MiB leaves
#: room for JSON escaping. Past it the line is answered with a JSON-RPC error and the rest of
#: it is dropped unread up to its newline: memory stays bounded, the session goes on.
MAX_REQUEST_LINE_BYTES = 32 << 20
#: Before a line is parsed, its nesting depth and number of JSON values are bounded (a
#: 60 MiB `[0,0,...]` became GBs of Python objects): past either, a JSON-RPC error.
MAX_JSON_DEPTH = 64
MAX_JSON_VALUES = 100_000
#: JSON-RPC error codes the bridge answers malformed messages with.
PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS = -32700, -32600, -32602
#: The one file of `rehearse`'s scope.
REHEARSAL_FILE = "rehearsal.txt"
_PR_SET_PDEATHSIG = 1
#: Delivered by the kernel when the spawning thread dies; confirmed with getppid().
PDEATH_SIGNAL = signal.SIGUSR2


# ---------------------------------------------------------------------------------------
# Startup hygiene: environment, standard streams, parent death


def scrub_environ() -> list[str]:
    """Replace os.environ by what the env policy lets a child keep (allowlist, then deny
    rules). The process runner's run marker is kept: it is not secret, and the orphan sweep
    finds the bridge's own children by it. Returns the names removed (never values)."""
    from harnesscheck.contain.envpolicy import RUN_MARKER_VAR, build_child_env

    marker = os.environ.get(RUN_MARKER_VAR)
    kept = build_child_env(dict(os.environ), injections={RUN_MARKER_VAR: marker} if marker else {})
    removed = [name for name in list(os.environ) if name not in kept]
    for name in removed:
        del os.environ[name]
    for name, value in kept.items():
        if os.environ.get(name) != value:
            os.environ[name] = value
    return removed


def _dup_private(fd: int) -> int:
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)


def take_stdio() -> tuple[int, int]:
    """Take the real stdin/stdout for the protocol; return their private duplicates.

    Afterwards fd 1 (and sys.stdout) write to stderr, fd 0 reads /dev/null: output from a
    tool, a library or a child process lands on stderr, never on the wire.
    """
    proto_in = _dup_private(0)
    proto_out = _dup_private(1)
    try:
        os.dup2(2, 1)
    except OSError:
        null_w = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null_w, 1)
        os.close(null_w)
    null_r = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null_r, 0)
    os.close(null_r)
    try:
        sys.stdout.flush()
    except (OSError, ValueError, AttributeError):
        pass
    sys.stdout = sys.stderr
    return proto_in, proto_out


_LIBC: Any = None


def _libc() -> Any:
    """The C library through ctypes, loaded once per process (the forkserver loads it before
    it forks, so its children do not pay the dlopen)."""
    global _LIBC
    if _LIBC is None:
        import ctypes

        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC


def _set_parent_death_signal(signum: int) -> bool:
    """Ask the kernel to send `signum` when the parent dies (Linux only)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return _libc().prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _start_time(pid: int) -> str | None:
    """A process's start time from /proc (pid reuse shows as a different value); None if gone.
    Without /proc, a kill(pid, 0) liveness test."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode("ascii", "replace")
        return stat.rsplit(")", 1)[1].split()[19]
    except FileNotFoundError:
        return None
    except (OSError, IndexError):
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return "alive"


class ParentWatch:
    """Ends the process when the spawning parent (or the host pid of the spec) dies."""

    def __init__(self, parent_pid: int | None, on_death, initial_ppid: int | None = None):
        self.initial_ppid = os.getppid() if initial_ppid is None else initial_ppid
        self.host_pid = parent_pid
        self.host_start = _start_time(parent_pid) if parent_pid else None
        self.on_death = on_death

    def dead_reason(self) -> str | None:
        if os.getppid() != self.initial_ppid:
            return "parent_died"
        if self.host_pid is not None and (self.host_start is None or _start_time(self.host_pid) != self.host_start):
            return "host_died"
        return None

    def start(self, hangup_fd: int | None = None, on_hangup=None) -> None:
        """Arm both detectors. The kernel's parent-death signal fires when the parent
        *thread* that spawned us exits, which in a multi-threaded CLI (a tokio blocking
        thread, say) is not the parent's death: so it is SIGUSR2, and its handler only
        exits when getppid() confirms it. The watchdog thread catches the rest.

        `hangup_fd` (a socket): the same thread also calls `on_hangup()` once its peer
        closes it (the forkserver child's relay connection): one thread, not two."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(PDEATH_SIGNAL, self._on_signal)
            _set_parent_death_signal(PDEATH_SIGNAL)
        reason = self.dead_reason()  # the parent may have died before prctl took effect
        if reason:
            self.on_death(reason)
            return
        _CALL_THREADS.submit(lambda: self._run(hangup_fd, on_hangup))  # never returns to the pool

    def _on_signal(self, signum, frame) -> None:
        reason = self.dead_reason()
        if reason:
            self.on_death(reason)

    def _run(self, hangup_fd: int | None, on_hangup) -> None:
        import select

        poller = select.poll()
        if hangup_fd is not None:
            poller.register(hangup_fd, select.POLLIN | select.POLLRDHUP)
        while True:
            try:
                events = poller.poll(WATCHDOG_INTERVAL_S * 1000)
            except InterruptedError:
                continue
            if events and _hung_up(hangup_fd, events):
                on_hangup()
                return
            reason = self.dead_reason()
            if reason:
                self.on_death(reason)
                return


def _start_thread(func, *args) -> None:
    """Start `func(*args)` in a daemon thread without waiting for it to run.

    `threading.Thread.start()` blocks until the new thread has been scheduled: 0.1 to 4 ms
    on a loaded 2-core box, paid in every bridge session (a forked bridge serves a whole
    session in ~10 ms). A `_thread` thread is a daemon thread the `threading` module does
    not list; the bridge leaves with `os._exit` anyway."""
    import _thread

    _thread.start_new_thread(func, args)


class _CallThreads:
    """The threads tool calls (and the parent watch) run in. An idle one takes the next job,
    as anyio's workers do; with none idle a new one is started by `_start_thread` (not waited
    for). An idle thread ends after `IDLE_S`; after `close()` (the forkserver, once its
    warm-up session is over) every thread ends as soon as it is idle. A forked child starts
    with none; a forkserver spare `park`s some before it waits for its session."""

    IDLE_S = 10.0

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._idle: list = []  # inboxes of idle threads
        self._closed = False

    def submit(self, job) -> None:
        import queue

        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is not None:
            inbox.put(job)
            return
        inbox = queue.SimpleQueue()
        inbox.put(job)
        _start_thread(self._serve, inbox)

    def park(self, count: int) -> None:
        """Start `count` more idle threads whose first wait has no time limit (a forkserver
        spare, before its session: the session's parent watch and first call then start no
        thread, and no new thread competes for the interpreter while the session starts)."""
        import queue

        for _ in range(count):
            inbox = queue.SimpleQueue()
            with self._lock:
                self._idle.append(inbox)
            _start_thread(self._serve, inbox, True)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for inbox in idle:
            inbox.put(None)

    def _serve(self, inbox, parked: bool = False) -> None:
        import queue

        wait_s = None if parked else self.IDLE_S  # a parked thread waits for its first job for good
        while True:
            try:
                job = inbox.get(timeout=wait_s)
            except queue.Empty:
                with self._lock:
                    if inbox in self._idle:
                        self._idle.remove(inbox)
                        return
                continue  # a call was handed over as the wait ended: it is in the inbox
            if job is None:
                return
            wait_s = self.IDLE_S
            job()
            with self._lock:
                if self._closed:
                    return
                self._idle.append(inbox)


_CALL_THREADS = _CallThreads()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_CALL_THREADS._reset)


async def _in_thread(func, *args):
    """`await anyio.to_thread.run_sync(func, *args)` without waiting for a new thread to be
    scheduled (see `_start_thread`, `_CallThreads`; anyio's first worker thread in every
    process pays that wait). Same semantics: not cancellable once started (the call runs
    to its end and its result is awaited), at most the default thread limiter's number of
    calls at once, exceptions re-raised here.

    The thread wakes the waiting task without waiting itself (on asyncio, the bridge's
    loop: `call_soon_threadsafe`; `from_thread.run_sync` would block the thread until the
    loop ran it, and its wake-up then competes with the answer's writing for the GIL)."""
    import asyncio

    import anyio
    from anyio import from_thread, lowlevel, to_thread

    done = anyio.Event()
    outcome: list = []
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # another backend
        token = lowlevel.current_token()

        def wake() -> None:
            from_thread.run_sync(done.set, token=token)
    else:

        def wake() -> None:
            loop.call_soon_threadsafe(done.set)

    def job() -> None:
        try:
            outcome.append((True, func(*args)))
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
            outcome.append((False, exc))
        try:
            wake()
        except RuntimeError:  # the event loop is gone: nobody is waiting
            pass

    with anyio.CancelScope(shield=True):
        async with to_thread.current_default_thread_limiter():
            _CALL_THREADS.submit(job)
            await done.wait()
    ok, value = outcome[0]
    if ok:
        return value
    raise value


def _hung_up(fd: int, events: list) -> bool:
    """Whether poll() `events` on socket `fd` mean its peer closed it."""
    import select

    if any(ev & (select.POLLHUP | select.POLLRDHUP | select.POLLERR | select.POLLNVAL) for _, ev in events):
        return True
    try:  # readable without a hang-up flag: a zero-length read means EOF
        return not os.read(fd, 4096)
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True


# ---------------------------------------------------------------------------------------
# The MCP server


class Inflight:
    """Tool calls received and not yet answered, so an EOF on stdin lets them answer before exit.

    Counted on the wire: a `tools/call` request is pending from the moment the read stream
    delivers it until its response is handed to the stdout writer (or the client cancels it),
    so no sleep has to guess whether a handler has started or its answer been written."""

    def __init__(self) -> None:
        self.count = 0  # handlers running (kept for the trace-free tests of build_server)
        self.pending: set[Any] = set()
        self._idle: Any = None  # an anyio.Event while `drained` waits; set when pending empties

    def received(self, item: Any) -> None:
        message = _jsonrpc(item)
        method = getattr(message, "method", None)
        if method == "tools/call" and getattr(message, "id", None) is not None:
            self.pending.add(message.id)
        elif method == "notifications/cancelled":
            params = getattr(message, "params", None)
            request_id = params.get("requestId") if isinstance(params, dict) else getattr(params, "request_id", None)
            self._discard(request_id)

    def answered(self, item: Any) -> None:
        message = _jsonrpc(item)
        if getattr(message, "method", None) is None and getattr(message, "id", None) is not None:
            self._discard(message.id)

    def _discard(self, request_id: Any) -> None:
        if not isinstance(request_id, (str, int)):  # a cancel naming `{}` must not kill the bridge
            return
        self.pending.discard(request_id)
        if not self.pending and self._idle is not None:
            self._idle.set()

    async def drained(self, timeout_s: float = DRAIN_TIMEOUT_S) -> None:
        """Return once every pending call is answered (woken by the last answer), or after
        `timeout_s`. Runs on the event loop, as `received` and `answered` do."""
        import anyio

        if not self.pending:
            return
        self._idle = anyio.Event()
        try:
            with anyio.move_on_after(timeout_s):
                await self._idle.wait()
        finally:
            self._idle = None
            if self.pending:
                global _CALLS_OUTLIVED_SESSION
                _CALLS_OUTLIVED_SESSION = True


#: Set when a session ended with tool calls still running (the drain bound passed): their
#: threads may still open and write files, so the process must exit at once, never linger
#: with its fds closed under them (forkserver_child._report_exit).
_CALLS_OUTLIVED_SESSION = False


def calls_outlived_session() -> bool:
    return _CALLS_OUTLIVED_SESSION


def _jsonrpc(item: Any) -> Any:
    """The JSON-RPC message inside a stream item (a SessionMessage), or None."""
    message = getattr(item, "message", None)
    return getattr(message, "root", message)


class _DrainOnEOF:
    """A read stream that notes each call it delivers and, at end of input, waits until every
    call is answered before ending. (The SDK ends the session, cancelling running handlers, as
    soon as the read side ends.)"""

    def __init__(self, inner, inflight: Inflight):
        self._inner = inner
        self._inflight = inflight

    def __getattr__(self, name: str):
        return getattr(self._inner, name)  # e.g. last_context, read by the SDK's loop

    async def __aenter__(self):
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc):
        return await self._inner.__aexit__(*exc)

    async def receive(self):
        import anyio

        try:
            item = await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            await self._inflight.drained()
            raise
        self._inflight.received(item)
        return item

    def __aiter__(self):
        return self

    async def __anext__(self):
        import anyio

        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None


class _NoteAnswers:
    """A write stream that tells `Inflight` which calls have been answered."""

    def __init__(self, inner, inflight: Inflight):
        self._inner = inner
        self._inflight = inflight

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    async def __aenter__(self):
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc):
        return await self._inner.__aexit__(*exc)

    async def send(self, item) -> None:
        await self._inner.send(item)
        self._inflight.answered(item)


def build_server(
    scope: "ToolScope",
    *,
    trace: "Trace | None" = None,
    session_id: str | None = None,
    policy: "Policy | None" = None,
    inflight: Inflight | None = None,
    link_dir: Path | None = None,
    link_approvals: bool = False,
):
    """The low-level MCP server named `bridge`, listing exactly the scope's tools, each
    call a thin shim over `dispatch`. With `link_dir`, the policy engine's events go to the
    host as they happen and (`link_approvals`) its approval requests to the host's approver
    (bridge/hostlink.py)."""
    import mcp_types as types
    from mcp.server.lowlevel import Server

    from harnesscheck import __version__
    from harnesscheck.bridge.spec import SERVER_NAME
    from harnesscheck.choke.dispatch import dispatch, tool_definitions

    tools = [
        types.Tool(
            name=d.name,
            description=d.description,
            input_schema=d.input_schema,
            annotations=types.ToolAnnotations(
                read_only_hint=d.name in ("read_file", "list_dir", "grep"),
                destructive_hint=d.name in ("write_file", "edit_file"),
                open_world_hint=False,
            ),
        )
        for d in tool_definitions(scope)
    ]

    engine = None
    if policy is not None or link_dir is not None:
        from harnesscheck.core.policy import Policy, PolicyEngine

        link = None
        if link_dir is not None:
            from harnesscheck.bridge.hostlink import LinkClient

            link = LinkClient(link_dir, timeout_s=(policy or Policy()).approval_timeout_s)
        engine = PolicyEngine(
            policy,
            root=scope.root,
            session=session_id or "bridge",
            approver=link.approve if link is not None and link_approvals else None,
            sink=link.event if link is not None else None,
        )

    limits = engine is not None and any(v is not None for v in engine.policy.limits.model_dump().values())
    trace_path = getattr(trace, "path", None)

    def _call(name: str, args: dict[str, Any]):
        if not (limits and trace_path is not None):
            return dispatch(name, args, scope, trace, session_id=session_id, policy=engine)
        # The session's limits span every bridge process the CLI starts: under a lock beside the
        # session's trace, the engine takes up the calls already traced, then this call runs.
        import fcntl

        from harnesscheck.choke.trace import read_trace

        fd = os.open(f"{trace_path}.policy-lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            engine.resume(r for r in read_trace(trace_path) if r.get("session") == session_id)
            return dispatch(name, args, scope, trace, session_id=session_id, policy=engine)
        finally:
            os.close(fd)

    listed = []

    async def on_list_tools(ctx, params) -> types.ListToolsResult:
        if trace is not None and not listed:  # readiness: the CLI really fetched the tools
            listed.append(True)
            trace.record("bridge_listed", tools=[t.name for t in tools])
        return types.ListToolsResult(tools=tools)

    async def on_call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        raw = _BAD_CALLS.pop(params.name, None) if params.name.startswith(_BAD_CALL_PREFIX) else None
        if raw is not None:  # a non-string name or non-object arguments: dispatch refuses them
            name, args = raw
        else:
            name, args = params.name, params.arguments if params.arguments is not None else {}
        if inflight is not None:
            inflight.count += 1
        try:
            result = await _in_thread(_call, name, args)
        except Exception as exc:  # a dispatch bug must not kill the session or leak details
            if trace is not None:
                trace.record("bridge_error", tool=str(name)[:80], error=type(exc).__name__)
            return types.CallToolResult(content=[types.TextContent(text=f"error: internal: {type(exc).__name__}")], is_error=True)
        finally:
            if inflight is not None:
                inflight.count -= 1
        from harnesscheck.choke.dispatch import safe_text

        return types.CallToolResult(content=[types.TextContent(text=safe_text(result.text))], is_error=not result.ok)

    return Server(
        SERVER_NAME,
        version=__version__,
        instructions="The host's tools, scoped to one worktree. Paths are relative to its root.",
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
    )


class _Oversize(str):
    """What `_PipeLines` yields for a request line longer than MAX_REQUEST_LINE_BYTES (its
    bytes were dropped unread): the transport answers it with a JSON-RPC error."""


OVERSIZE = _Oversize("")


class _PipeLines:
    """The protocol's input lines, without a reader thread: read from a pipe or socket once
    the event loop reports it readable (`anyio.wrap_file` reads every line in a worker
    thread, whose start the first read pays). The descriptor stays blocking (its open file
    description is not ours alone to change); a read after readiness does not block.
    `threaded=True` (a regular file, a terminal: not pollable everywhere) reads each chunk
    in a worker thread instead. Either way a line is buffered up to MAX_REQUEST_LINE_BYTES;
    a longer one yields `OVERSIZE` once and its bytes up to the next newline are dropped."""

    def __init__(self, fd: int, *, threaded: bool = False) -> None:
        self._fd = fd
        self._buf = bytearray()
        self._scanned = 0
        self._eof = False
        self._threaded = threaded
        self._dropping = False  # inside an oversize line: drop bytes up to its newline

    def __aiter__(self):
        return self

    async def _read(self) -> bytes | None:
        import anyio

        if self._threaded:
            try:
                return await anyio.to_thread.run_sync(os.read, self._fd, 65536)
            except OSError:
                return b""
        await anyio.wait_readable(self._fd)
        try:
            return os.read(self._fd, 65536)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError:  # ECONNRESET from a socket peer: the input is over
            return b""

    async def __anext__(self) -> str:
        while True:
            if not self._dropping:
                end = self._buf.find(b"\n", self._scanned)
                if end >= 0 or (self._eof and self._buf):
                    cut = end + 1 if end >= 0 else len(self._buf)
                    line = bytes(self._buf[:cut])
                    del self._buf[:cut]
                    self._scanned = 0
                    return line.decode("utf-8", "replace")
                if len(self._buf) > MAX_REQUEST_LINE_BYTES:
                    sys.stderr.write(f"harnesscheck bridge: a request line over {MAX_REQUEST_LINE_BYTES} bytes; dropped\n")
                    self._buf.clear()  # never buffered without bound (a peer sending no newline)
                    self._scanned = 0
                    self._dropping = True
                    return OVERSIZE
            if self._eof:
                raise StopAsyncIteration
            self._scanned = len(self._buf)
            chunk = await self._read()
            if chunk is None:
                continue
            if not chunk:
                self._eof = True
                self._dropping = False
                continue
            if self._dropping:
                end = chunk.find(b"\n")
                if end < 0:
                    continue
                chunk = chunk[end + 1 :]
                self._dropping = False
                self._scanned = 0
            self._buf += chunk


class _PipeWriter:
    """The SDK stdio transport's stdout, without a thread: each message written from the
    event loop, at most PIPE_BUF bytes per write and only once poll() reports room, so the
    blocking descriptor never blocks the loop (a writable pipe has a free page, a writable
    Unix socket a quarter of its buffer)."""

    def __init__(self, fd: int) -> None:
        import select

        self._fd = fd
        self._poll = select.poll()
        self._poll.register(fd, select.POLLOUT)
        self._chunk = getattr(select, "PIPE_BUF", 512)

    async def write(self, text: str) -> int:
        import anyio

        data = memoryview(text.encode("utf-8"))
        while data:
            if not self._poll.poll(0):
                await anyio.wait_writable(self._fd)
            try:
                written = os.write(self._fd, data[: self._chunk])
            except (BlockingIOError, InterruptedError):
                continue
            data = data[written:]
        return len(text)

    async def flush(self) -> None:
        return None


def _is_pipe_or_socket(fd: int) -> bool:
    import stat

    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _protocol_streams(proto_in: int, proto_out: int):
    """(stdin, stdout) for the SDK's `stdio_server`: the thread-free pipe streams when both
    fds are pipes or sockets (what a CLI gives its MCP servers) and poll() exists; else the
    SDK's thread-backed files (a terminal, a regular file: not pollable everywhere)."""
    import select

    import anyio

    if hasattr(select, "poll") and _is_pipe_or_socket(proto_in) and _is_pipe_or_socket(proto_out):
        return _PipeLines(proto_in), _PipeWriter(proto_out)
    writer = io.TextIOWrapper(os.fdopen(proto_out, "wb", closefd=False), encoding="utf-8", newline="\n")
    return _PipeLines(proto_in, threaded=True), anyio.wrap_file(writer)


_BAD_CALL_PREFIX = "\x00harnesscheck-bad-call-"
#: tools/call requests whose name is not a string or whose arguments are not an object, by
#: the one-off name they were forwarded under: `on_call_tool` hands the originals to
#: dispatch, which refuses them as a tool error (unknown_tool, bad_arguments), traced.
_BAD_CALLS: dict[str, tuple[Any, Any]] = {}
_MISSING = object()
_JSON_STRINGS: Any = None


def _too_big(raw: str) -> str | None:
    """Why a request line is refused before it is parsed (too deep, too many values), or None.

    Strings are cut out first (one C-level regex pass), so only structure is counted: a
    bound on the Python objects json.loads would build, checked without building them."""
    global _JSON_STRINGS
    if _JSON_STRINGS is None:
        import re

        _JSON_STRINGS = (re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"'), re.compile(r"[^\[\]{}]+"))
    strings, not_brackets = _JSON_STRINGS
    skeleton = strings.sub("", raw) if '"' in raw else raw
    if skeleton.count(",") + skeleton.count("[") + skeleton.count("{") > MAX_JSON_VALUES:
        return f"the message has more than {MAX_JSON_VALUES} JSON values"
    depth = deepest = 0
    for ch in not_brackets.sub("", skeleton):  # at most 2 * MAX_JSON_VALUES brackets
        if ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_JSON_DEPTH:
                    return f"the message nests deeper than {MAX_JSON_DEPTH} levels"
        elif ch in "]}":
            depth -= 1
    return None


def _valid_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def classify_message(line: str) -> tuple[str, Any]:
    """What the bridge does with one input line, before the SDK sees it:

    ("skip", None) blank; ("forward", obj) a JSON-RPC message for the SDK (a tools/call whose
    name or arguments have the wrong type is rewritten, see _BAD_CALLS); ("error", (id,
    code, message)) answer this JSON-RPC error; ("drop", reason) a notification or response
    that is malformed: JSON-RPC forbids answering a notification, and a response is never
    answered, so it is dropped and traced. Every request gets an answer."""
    import json

    if line is OVERSIZE:
        return "error", (None, INVALID_REQUEST, f"the message is longer than {MAX_REQUEST_LINE_BYTES} bytes; it was dropped")
    if not line.strip():
        return "skip", None
    reason = _too_big(line)
    if reason is not None:
        return "error", (None, INVALID_REQUEST, reason)
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        return "error", (None, PARSE_ERROR, "the line is not valid JSON")
    if isinstance(obj, list):
        return "error", (None, INVALID_REQUEST, "batch requests are not supported (MCP has no JSON-RPC batching); send one message per line")
    if not isinstance(obj, dict):
        return "error", (None, INVALID_REQUEST, "a JSON-RPC message must be a JSON object")
    rid = obj.get("id", _MISSING)
    has_id = rid is not _MISSING
    answer_id = rid if has_id and _valid_id(rid) else None
    if obj.get("jsonrpc") != "2.0":
        return "error", (answer_id, INVALID_REQUEST, 'the message needs "jsonrpc": "2.0"')
    if has_id and not _valid_id(rid):
        return "error", (None, INVALID_REQUEST, "the id must be a string or an integer (not null, a boolean, a fraction, an array or an object)")
    method = obj.get("method", _MISSING)
    if method is _MISSING:
        if has_id and ("result" in obj or "error" in obj):
            if ("result" in obj) == ("error" in obj) or not isinstance(obj.get("result", obj.get("error")), dict):
                return "drop", "a malformed response"
            return "forward", obj  # a response (the bridge sends no requests: the SDK drops it)
        return "error", (answer_id, INVALID_REQUEST, "the message has no method")
    if not isinstance(method, str):
        return "error", (answer_id, INVALID_REQUEST, "method must be a string")
    params = obj.get("params")
    if params is not None and not isinstance(params, dict):
        if not has_id:
            return "drop", f"notification {method[:60]!r} with params that are not an object"
        return "error", (rid, INVALID_PARAMS, "params must be an object")
    if not has_id:
        if method == "notifications/cancelled" and not _valid_id((params or {}).get("requestId")):
            return "drop", "notifications/cancelled without a valid requestId"
        return "forward", obj
    if method == "tools/call" and params is not None:
        name, args = params.get("name", _MISSING), params.get("arguments")
        if not isinstance(name, str) or (args is not None and not isinstance(args, dict)):
            import uuid as _uuid

            token = f"{_BAD_CALL_PREFIX}{_uuid.uuid4().hex}"
            _BAD_CALLS[token] = (None if name is _MISSING else name, args)
            obj = {**obj, "params": {**params, "name": token, "arguments": {}}}
    return "forward", obj


async def serve_stdio(server, proto_in: int, proto_out: int, inflight: Inflight | None = None, trace: "Trace | None" = None) -> None:
    """Run `server` over the given protocol fds until stdin EOF (running calls still answer).

    The transport is the bridge's own (the SDK's `stdio_server` left malformed requests
    unanswered and let a cancel with an unhashable id kill the process): every line goes
    through `classify_message` first; a malformed request is answered with a JSON-RPC
    error (id null when its id is unusable), never silence."""
    import anyio
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    try:
        from mcp.shared._context_streams import create_context_streams
    except ImportError:  # pragma: no cover - another SDK layout: plain memory streams
        create_context_streams = anyio.create_memory_object_stream

    stdin, stdout = _protocol_streams(proto_in, proto_out)
    read_writer, read_stream = create_context_streams[SessionMessage | Exception](0)
    write_stream, write_reader = create_context_streams[SessionMessage](0)
    errors_out = write_stream.clone() if hasattr(write_stream, "clone") else write_stream

    def answer_error(rid: Any, code: int, message: str) -> SessionMessage:
        if trace is not None:
            trace.record("bridge_rejected", code=code, reason=message[:200])
        return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=rid, error=types.ErrorData(code=code, message=message)))

    async def reader() -> None:
        async with read_writer, errors_out:
            async for line in stdin:
                action, value = classify_message(line)
                if action == "forward":
                    try:
                        message = types.jsonrpc_message_adapter.validate_python(value, by_name=False)
                    except Exception:  # noqa: BLE001 - the SDK's own checks: still answer
                        rid = value.get("id") if _valid_id(value.get("id")) else None
                        if rid is None and "id" not in value:
                            if trace is not None:
                                trace.record("bridge_rejected", code=INVALID_REQUEST, reason="a malformed notification")
                            continue
                        await errors_out.send(answer_error(rid, INVALID_REQUEST, "the message is not a valid MCP message"))
                        continue
                    await read_writer.send(SessionMessage(message))
                elif action == "error":
                    await errors_out.send(answer_error(*value))
                elif action == "drop" and trace is not None:
                    trace.record("bridge_rejected", code=None, reason=str(value)[:200])

    async def writer() -> None:
        async with write_reader:
            async for session_message in write_reader:
                text = session_message.message.model_dump_json(by_alias=True, exclude_unset=True)
                await stdout.write(text + "\n")
                await stdout.flush()

    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            tg.start_soon(writer)
            read, write = read_stream, write_stream
            if inflight is not None:
                read, write = _DrainOnEOF(read, inflight), _NoteAnswers(write, inflight)
            async with write_stream:
                await server.run(read, write, server.create_initialization_options())
            # The writer task ends only once it has written what it holds: against a client
            # that stopped reading (a full pipe) that is never. Bound it.
            scope.deadline = anyio.current_time() + WRITE_GRACE_S
            tg.cancel_scope.deadline = scope.deadline
        # (the reader ends at EOF; after server.run returned, nothing more is read)


def run_bridge(
    scope: "ToolScope",
    *,
    trace_path: Path | None,
    session_id: str,
    parent_pid: int | None,
    proto_fds: tuple[int, int],
    initial_ppid: int,
    hangup_fd: int | None = None,
    mode: str | None = None,
    root_identity: tuple[int, int] | None = None,
    policy: "Policy | None" = None,
    link_dir: Path | None = None,
    link_approvals: bool = False,
) -> int:
    """Serve until stdin EOF (exit 0) or parent death (exit 0 from the watchdog).

    `hangup_fd` (the forkserver's relay connection): its peer closing ends the bridge too,
    like a parent death (`bridge_stop reason: relay_gone`). `mode` is noted in bridge_start."""
    from harnesscheck.choke.trace import Trace

    trace = Trace(trace_path, session_id=session_id) if trace_path is not None else None
    stopping = threading.Lock()  # held by whichever ending is recorded: one bridge_stop only

    def record_stop(reason: str) -> None:
        # Non-blocking: the death signal's handler runs on the main thread, maybe inside this.
        if trace is not None and stopping.acquire(blocking=False):
            try:
                trace.record("bridge_stop", reason=reason)
            except OSError:
                pass

    def on_death(reason: str) -> None:
        record_stop(reason)
        os._exit(0)

    ParentWatch(parent_pid, on_death, initial_ppid=initial_ppid).start(hangup_fd, lambda: on_death("relay_gone"))
    # The root is opened once, now, for the whole session; it must be the directory the host
    # opened (root_identity). A root that is not, or changes later, refuses every call.
    scope.open_root(expect=root_identity)

    import anyio

    inflight = Inflight()
    server = build_server(scope, trace=trace, session_id=session_id, inflight=inflight, policy=policy, link_dir=link_dir, link_approvals=link_approvals)
    if trace is not None:
        from harnesscheck.choke.dispatch import tool_definitions

        extra = {"mode": mode} if mode else {}
        trace.record("bridge_start", pid=os.getpid(), tools=[d.name for d in tool_definitions(scope)], **extra)
    anyio.run(serve_stdio, server, *proto_fds, inflight, trace)
    # From here the session is over: a watch that now sees the relay go (the forkserver's
    # child reports its exit to the relay next) records nothing more.
    record_stop("eof")
    return 0


#: What `rehearse` sends: the messages of a CLI's session, answered into a pipe nobody reads
#: until the end (every answer together stays far below a pipe's 64 KiB).
REHEARSAL_REQUESTS = (
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "rehearsal", "version": "0"}},
    },
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "read_file", "arguments": {"path": REHEARSAL_FILE}}},
)


def rehearse(root: Path) -> None:
    """Serve one throw-away session in this process, on the code path a real one takes
    (`build_server`, a trace, `serve_stdio` over pipes: initialize, tools/list, a read_file
    of `root/REHEARSAL_FILE`, EOF). The forkserver runs it once before it forks, so lazy
    imports, pydantic's validators and the SDK's caches are built once per host; a spare
    child runs it again while it waits, so the pages a session writes are already its own
    (no copy-on-write fault on the session's path) and its call thread is already running.
    Nothing of it is kept: a read-only scope on `root` (a private directory holding only
    that file), a trace to /dev/null, no parent watch."""
    import json

    import anyio

    from harnesscheck.choke.dispatch import tool_definitions
    from harnesscheck.choke.trace import Trace
    from harnesscheck.core.scope import ToolScope

    in_r, in_w = os.pipe2(os.O_CLOEXEC)
    out_r, out_w = os.pipe2(os.O_CLOEXEC)
    trace = Trace(os.devnull, session_id="rehearsal")
    try:
        os.write(in_w, "".join(json.dumps(m) + "\n" for m in REHEARSAL_REQUESTS).encode())  # < a pipe's 64 KiB
        os.close(in_w)
        in_w = -1
        inflight = Inflight()
        scope = ToolScope(root=root, read_only=True)
        bridge = build_server(scope, trace=trace, session_id="rehearsal", inflight=inflight)
        trace.record("bridge_start", pid=os.getpid(), tools=[d.name for d in tool_definitions(scope)], mode="rehearsal")
        anyio.run(serve_stdio, bridge, in_r, out_w, inflight)
        trace.record("bridge_stop", reason="eof")
    finally:
        trace.close()
        if "scope" in locals():
            scope.close_root()  # a spare waits holding no fd but its hand-off socket
        for fd in (in_r, in_w, out_r, out_w):
            if fd >= 0:
                os.close(fd)


def _prepare() -> tuple[int, tuple[int, int]]:
    """Everything that must happen before any other import: note the parent, scrub the
    environment, take stdout/stdin for the protocol."""
    initial_ppid = os.getppid()
    scrub_environ()
    return initial_ppid, take_stdio()


def main_from_argv(argv: list[str]) -> int:
    """Entry of `python -m harnesscheck.bridge --spec FILE`."""
    initial_ppid, fds = _prepare()
    parser = argparse.ArgumentParser(prog="python -m harnesscheck.bridge", description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, type=Path, help="bridge spec JSON written by the transport")
    parser.add_argument(
        "--spec-sha256",
        metavar="HEX",
        help="serve the spec only if its bytes have this sha256 (the host pins the spec it registered)",
    )
    ns = parser.parse_args(argv)
    from harnesscheck.bridge.spec import load_spec

    try:
        spec = load_spec(ns.spec, sha256=ns.spec_sha256)
    except ValueError as exc:
        print(f"harnesscheck bridge: {exc}", file=sys.stderr)
        return 2
    return serve_spec(spec, proto_fds=fds, initial_ppid=initial_ppid)


def serve_spec(
    spec: "BridgeSpec",
    *,
    proto_fds: tuple[int, int],
    initial_ppid: int,
    hangup_fd: int | None = None,
    mode: str | None = None,
) -> int:
    """The one server path for a spec: `python -m harnesscheck.bridge --spec` and the
    forkserver's child (bridge/forkserver.py) both end here, after `_prepare()`."""
    return run_bridge(
        spec.scope,
        trace_path=spec.trace_path,
        session_id=spec.session_id,
        parent_pid=spec.parent_pid,
        proto_fds=proto_fds,
        initial_ppid=initial_ppid,
        hangup_fd=hangup_fd,
        mode=mode,
        root_identity=spec.root_identity,
        policy=spec.policy,
        link_dir=spec.run_dir if spec.host_link else None,
        link_approvals=spec.host_approver,
    )


def bridge_command(root: Path, read_only: bool, trace: Path | None) -> int:
    """`harnesscheck bridge --root DIR [--read-only] [--trace FILE]`: the same server, with a
    scope built from the flags and a fresh session id."""
    initial_ppid, fds = _prepare()
    from harnesscheck.core.scope import ToolScope

    root = Path(root).expanduser().absolute()
    if not root.is_dir():
        print(f"harnesscheck bridge: --root {root} is not a directory", file=sys.stderr)
        return 2
    scope = ToolScope(name="bridge", root=root.resolve(), read_only=read_only)
    session_id = f"bridge-{uuid.uuid4().hex[:12]}"
    trace_path = Path(trace).expanduser().absolute() if trace is not None else None
    return run_bridge(scope, trace_path=trace_path, session_id=session_id, parent_pid=None, proto_fds=fds, initial_ppid=initial_ppid)
