"""`harnesscheck acp serve`: one of our backends served as an Agent Client Protocol (v1) agent.

Requirements (doc/SPEC-acp-serve.md is the contract; the MUSTs of ACP v1 plus ours):
- `initialize`: protocolVersion 1 (the only version spoken; answered whatever the client
  asks); honest capabilities: no `session/load`, no MCP transports, text and resource links
  only in prompts; `authMethods: []` (a backend's login is the host's configuration).
- `session/new`: `cwd` must be an absolute, existing directory (else -32602 naming it); it is
  the ToolScope root of every prompt of the session (inside `--root` when one is given).
  Client-given `mcpServers` are never started (logged): the tools are harnesscheck's own.
  Modes: `ask` (default: every write asks the client first) and `read-only`.
- `session/prompt`: one agent step through the backend (`run_session`), text streamed as
  `agent_message_chunk`, tool calls as `tool_call` / `tool_call_update`; stopReason from the
  outcome (ok -> end_turn, max_turns -> max_turn_requests, cancelled -> cancelled); any other
  ending is a JSON-RPC error whose `data` is {errorClass, retryable, status} (auth: -32000).
- Permission: for a backend whose tool calls run through dispatch in this process
  (`host_tool_loop`), the host's policy asks `session/request_permission` before every write in
  mode `ask`; only the option `allow-once` runs it; a reject, a cancel, an unknown option, an
  error answer or no answer before the step's deadline refuses it (the model reads the
  refusal). A harness backend's tools run in its bridge process, which asks through the host
  link (bridge/hostlink.py) the same way; a backend that declares no `host_approvals` cannot
  ask: its sessions run with a read-only scope in every mode (writes refused, never unasked).
- `session/cancel` cancels the running step (the transport's cancel path ends the process
  tree), releases any pending permission request as cancelled, and the prompt is answered
  `cancelled`; nothing of that turn is sent after its answer.
- stdin EOF, SIGTERM, SIGINT or SIGHUP: every running step is cancelled, waited for (bounded),
  and the server exits 0; process.py's guard ends any tree left.
- We never call the client's `fs/*` or `terminal/*`. No secret of this process reaches a
  message or a log line (envpolicy.redact with this process's secret values).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harnesscheck.acpserve.wire import (
    AUTH_REQUIRED,
    DEFAULT_MAX_LINE_BYTES,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    OVERSIZE,
    PARSE_ERROR,
    Writer,
    read_lines,
)

PROTOCOL_VERSION = 1
MODE_ASK = "ask"
MODE_READ_ONLY = "read-only"
ALLOW_ONCE = "allow-once"
REJECT_ONCE = "reject-once"
#: On stdin EOF or a signal: how long running steps get to end after their cancel.
SHUTDOWN_WAIT_S = 15.0
MAX_SESSIONS = 256
RAW_VALUE_CHARS = 4096
RESULT_CHARS = 16384

_KINDS = {"read_file": "read", "list_dir": "read", "grep": "search", "write_file": "edit", "edit_file": "edit"}


class RpcError(Exception):
    def __init__(self, code: int, message: str, data: Any = None):
        message = " ".join(str(message).split())  # one line, always
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


@dataclass
class _Pending:
    """An outgoing request (session/request_permission) waiting for the client's answer."""

    done: threading.Event = field(default_factory=threading.Event)
    answer: dict | None = None
    cancelled: bool = False


@dataclass
class _Turn:
    """One running session/prompt."""

    msg_id: Any
    deadline: float
    cancel: threading.Event = field(default_factory=threading.Event)
    answered: bool = False
    streamed: bool = False
    calls: int = 0
    pending: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)  # orders the turn's updates before its answer


@dataclass
class _Session:
    id: str
    root: Path
    mode: str = MODE_ASK
    turn: _Turn | None = None


class AcpServer:
    """The agent side of one stdio connection: `serve(fd, stop_fd)` until EOF or a stop."""

    def __init__(
        self,
        transport: Any,
        spec: Any,
        writer: Writer,
        *,
        model: str | None = None,
        timeout_s: float = 1800.0,
        fence: Path | None = None,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    ):
        from harnesscheck.contain.envpolicy import secret_values
        from harnesscheck.core.contracts import Capability

        self.transport, self.spec, self.writer = transport, spec, writer
        self.model, self.timeout_s, self.fence, self.max_line_bytes = model, timeout_s, fence, max_line_bytes
        self.in_process = spec.supports(Capability.host_tool_loop)
        #: Whether the backend's tool calls can ask the client: in this process (a host loop), or
        #: in its bridge process through the host link (doc/SPEC-policy.md, "The host link").
        self.asks = spec.supports(Capability.host_approvals)
        self.sessions: dict[str, _Session] = {}
        self.pending: dict[str, _Pending] = {}
        self.threads: list[threading.Thread] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self._next = 0
        self._secrets = secret_values(os.environ)
        self.stop_reason = "stdin closed"

    # -- the loop ---------------------------------------------------------------------

    def serve(self, fd: int, stop_fd: int | None = None) -> int:
        """Serve until EOF on `fd`, the client gone, or `stop_fd` readable; then shut down."""
        for line in read_lines(fd, self.max_line_bytes, stop_fd):
            self.handle_line(line)
            if self.stopping.is_set() or self.writer.closed:
                break
        self.shutdown(self.stop_reason)
        return 0

    def shutdown(self, why: str) -> None:
        """Cancel every running step, wait for each (bounded), then return."""
        self.stopping.set()
        with self.lock:
            sessions = list(self.sessions.values())
        running = [s for s in sessions if s.turn is not None]
        if running:
            self.log(f"{why}: cancelling {len(running)} running step(s)")
        for session in running:
            self._cancel_turn(session)
        end = time.monotonic() + SHUTDOWN_WAIT_S
        for thread in list(self.threads):
            thread.join(max(0.0, end - time.monotonic()))
        self.log(f"{why}: exiting")

    def log(self, text: str) -> None:
        from harnesscheck.contain.envpolicy import redact

        try:
            print(f"harnesscheck acp serve: {redact(text, self._secrets)}", file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass

    def redact(self, text: str) -> str:
        from harnesscheck.contain.envpolicy import redact

        return redact(text, self._secrets)

    # -- one line ---------------------------------------------------------------------

    def handle_line(self, raw: bytes | object) -> None:
        if raw is OVERSIZE:
            self.writer.error(None, INVALID_REQUEST, f"Invalid Request: a line longer than {self.max_line_bytes} bytes was dropped")
            return
        assert isinstance(raw, bytes)
        if not raw.strip():
            return
        try:
            msg = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            self.writer.error(None, PARSE_ERROR, "Parse error: the line is not a UTF-8 JSON text")
            return
        msg_id = msg.get("id") if isinstance(msg, dict) else None
        if not _valid_id(msg_id):
            msg_id = None
        if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0":
            self.writer.error(msg_id, INVALID_REQUEST, 'Invalid Request: not a JSON-RPC 2.0 object ("jsonrpc": "2.0")')
            return
        if "method" in msg:
            method, params = msg["method"], msg.get("params", {})
            if not isinstance(method, str) or ("id" in msg and not _valid_id(msg["id"])):
                self.writer.error(msg_id, INVALID_REQUEST, "Invalid Request: method must be a string, id a string or an integer")
                return
            if "id" not in msg:
                self.on_notification(method, params)
                return
            if not isinstance(params, dict):
                self.writer.error(msg_id, INVALID_PARAMS, "Invalid params: params must be an object")
                return
            self.on_request(msg_id, method, params)
        elif "id" in msg and ("result" in msg or "error" in msg):
            self.on_response(msg)
        else:
            self.writer.error(msg_id, INVALID_REQUEST, "Invalid Request: neither a request, a notification nor a response")

    def on_request(self, msg_id: Any, method: str, params: dict) -> None:
        handlers = {
            "initialize": self.initialize,
            "authenticate": self.authenticate,
            "session/new": self.new_session,
            "session/set_mode": self.set_mode,
            "session/prompt": self.prompt,
        }
        handler = handlers.get(method)
        try:
            if handler is None:
                raise RpcError(METHOD_NOT_FOUND, f"Method not found: {method[:100]}")
            result = handler(msg_id, params)
        except RpcError as err:
            self.writer.error(msg_id, err.code, self.redact(err.message), err.data)
            return
        except Exception as exc:  # noqa: BLE001 - one failed request never ends the connection
            self.log(f"{method}: internal error: {type(exc).__name__}: {exc}")
            self.writer.error(msg_id, INTERNAL_ERROR, f"Internal error: {type(exc).__name__}")
            return
        if result is not _LATER:
            self.writer.result(msg_id, result)

    def on_notification(self, method: str, params: Any) -> None:
        if method == "session/cancel":
            from acp.schema import CancelNotification

            try:
                note = CancelNotification.model_validate(params)
            except Exception:  # noqa: BLE001 - a notification is never answered
                self.log("session/cancel with invalid params: ignored")
                return
            with self.lock:
                session = self.sessions.get(note.session_id)
            if session is None:
                self.log("session/cancel for an unknown session: ignored")
                return
            self._cancel_turn(session)
            return
        self.log(f"notification {method[:100]!r} ignored")

    def on_response(self, msg: dict) -> None:
        with self.lock:
            pending = self.pending.get(str(msg.get("id")))
        if pending is None:
            self.log("a response to no pending request: ignored")
            return
        pending.answer = msg
        pending.done.set()

    # -- methods ----------------------------------------------------------------------

    def initialize(self, msg_id: Any, params: dict) -> dict:
        from acp.schema import (
            AgentCapabilities,
            Implementation,
            InitializeRequest,
            InitializeResponse,
            McpCapabilities,
            PromptCapabilities,
        )

        from harnesscheck import __version__

        _validate(InitializeRequest, params)
        response = InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(
                load_session=False, prompt_capabilities=PromptCapabilities(), mcp_capabilities=McpCapabilities(http=False, sse=False)
            ),
            auth_methods=[],
            agent_info=Implementation(name="harnesscheck", title=f"harnesscheck ({self.spec.id})", version=__version__),
            field_meta={
                "harnesscheck": {
                    "backend": self.spec.id,
                    "clientFs": "never called: files are read and written by harnesscheck's scoped tools",
                    "clientTerminal": "never called: no shell tool exists",
                    "mcpServers": "not started: the tools are harnesscheck's own",
                    "permission": (
                        "asked before every write in mode ask" if self.asks else "this backend's tools cannot ask: writes are refused in every mode"
                    ),
                }
            },
        )
        return _dump(response)

    def authenticate(self, msg_id: Any, params: dict) -> dict:
        raise RpcError(INVALID_PARAMS, "Invalid params: this agent offers no auth methods (the backend's login is the host's configuration)")

    def new_session(self, msg_id: Any, params: dict) -> dict:
        from acp.schema import NewSessionRequest, NewSessionResponse, SessionMode, SessionModeState

        from harnesscheck.backends._harness import scratch_dir
        from harnesscheck.core.contracts import HarnessError

        request = _validate(NewSessionRequest, params)
        cwd = request.cwd
        if not os.path.isabs(cwd):
            raise RpcError(INVALID_PARAMS, f"Invalid params: cwd {cwd[:300]!r} must be an absolute path")
        try:
            root = Path(cwd)
            if not root.is_dir():
                raise RpcError(INVALID_PARAMS, f"Invalid params: cwd {cwd[:300]!r} is not an existing directory")
            root = root.resolve(strict=True)
        except (OSError, ValueError):  # a NUL byte, a name too long, a loop
            raise RpcError(INVALID_PARAMS, f"Invalid params: cwd {cwd[:300]!r} is not a usable directory path") from None
        if self.fence is not None and not root.is_relative_to(self.fence):
            raise RpcError(INVALID_PARAMS, f"Invalid params: cwd {cwd!r} is not inside this server's --root")
        if request.additional_directories:
            raise RpcError(INVALID_PARAMS, "Invalid params: additionalDirectories are not supported (one root per session)")
        try:
            scratch = scratch_dir(root, "hc-acp-check-")  # a root holding every temp dir is refused now, not per prompt
            scratch.rmdir()
        except HarnessError as exc:
            raise RpcError(INVALID_PARAMS, f"Invalid params: cwd {cwd!r}: {exc.message}") from None
        with self.lock:
            if len(self.sessions) >= MAX_SESSIONS:
                raise RpcError(INVALID_REQUEST, f"Invalid Request: at most {MAX_SESSIONS} sessions per connection")
            session = _Session(id=uuid.uuid4().hex, root=root)
            self.sessions[session.id] = session
        if request.mcp_servers:
            names = ", ".join(getattr(s, "name", "?")[:40] for s in request.mcp_servers[:10])
            self.log(
                f"session {session.id}: {len(request.mcp_servers)} MCP server(s) from the client not started "
                f"({names}): this agent's tools are harnesscheck's own scoped tools"
            )
        modes = SessionModeState(
            current_mode_id=MODE_ASK,
            available_modes=[
                SessionMode(
                    id=MODE_ASK,
                    name="Ask before writes",
                    description=("every write asks the client first" if self.asks else "writes are refused: this backend's tools cannot ask"),
                ),
                SessionMode(id=MODE_READ_ONLY, name="Read-only", description="only the reading tools run"),
            ],
        )
        return _dump(NewSessionResponse(session_id=session.id, modes=modes))

    def set_mode(self, msg_id: Any, params: dict) -> dict:
        from acp.schema import SetSessionModeRequest, SetSessionModeResponse

        request = _validate(SetSessionModeRequest, params)
        session = self._session(request.session_id)
        if request.mode_id not in (MODE_ASK, MODE_READ_ONLY):
            raise RpcError(INVALID_PARAMS, f"Invalid params: unknown modeId {request.mode_id[:60]!r} (modes: {MODE_ASK}, {MODE_READ_ONLY})")
        session.mode = request.mode_id
        return _dump(SetSessionModeResponse())

    def prompt(self, msg_id: Any, params: dict) -> object:
        from acp.schema import PromptRequest, ResourceContentBlock, TextContentBlock

        request = _validate(PromptRequest, params)
        session = self._session(request.session_id)
        parts: list[str] = []
        for block in request.prompt:
            if isinstance(block, TextContentBlock):
                parts.append(block.text)
            elif isinstance(block, ResourceContentBlock):
                parts.append(f"[resource: {block.uri}]")
            else:
                raise RpcError(
                    INVALID_PARAMS, f"Invalid params: content of type {block.type!r} is not supported (promptCapabilities: text and resource_link only)"
                )
        text = "\n".join(parts)
        if not text.strip():
            raise RpcError(INVALID_PARAMS, "Invalid params: the prompt has no text")
        if self.stopping.is_set():
            raise RpcError(INVALID_REQUEST, "Invalid Request: the server is shutting down")
        with self.lock:
            if session.turn is not None:
                raise RpcError(INVALID_REQUEST, "Invalid Request: a prompt is already running in this session")
            turn = session.turn = _Turn(msg_id=msg_id, deadline=time.monotonic() + self.timeout_s)
        thread = threading.Thread(target=self._run_prompt, args=(session, turn, text), daemon=True, name=f"acp-prompt-{session.id[:8]}")
        self.threads = [t for t in self.threads if t.is_alive()] + [thread]
        thread.start()
        return _LATER

    # -- a prompt ---------------------------------------------------------------------

    def _run_prompt(self, session: _Session, turn: _Turn, text: str) -> None:
        try:
            outcome = self._run_step(session, turn, text)
            self._answer(session, turn, outcome)
        except Exception as exc:  # noqa: BLE001 - the prompt is answered, whatever broke
            if turn.cancel.is_set():  # ACP: an abort after session/cancel still answers cancelled
                self._finish(session, turn, result={"stopReason": "cancelled"})
            elif isinstance(exc, RpcError):
                self._finish(session, turn, error=exc)
            else:
                self.log(f"session {session.id}: internal error: {type(exc).__name__}: {exc}")
                self._finish(session, turn, error=RpcError(INTERNAL_ERROR, f"Internal error: {type(exc).__name__}"))

    def _run_step(self, session: _Session, turn: _Turn, text: str):
        from harnesscheck.backends._harness import scratch_dir
        from harnesscheck.core.contracts import AgentSessionRequest, HarnessError
        from harnesscheck.core.policy import Policy, Rule, ToolKind, Verdict
        from harnesscheck.core.scope import ToolScope

        read_only = session.mode == MODE_READ_ONLY or not self.asks
        run_dir = scratch_dir(session.root, "hc-acp-")
        reporter = _ToolReporter(self, session, turn)
        try:
            # Mode ask: every write is approval_required under the host's policy; the approver
            # is the client, asked with session/request_permission (doc/SPEC-policy.md).
            policy = Policy(rules=(Rule(decision=Verdict.APPROVAL_REQUIRED, kinds=(ToolKind.WRITE,), reason="the client is asked before every write"),))
            request = AgentSessionRequest(
                prompt=text,
                scope=ToolScope(root=session.root, read_only=read_only),
                model=self.model,
                timeout_s=self.timeout_s,
                run_dir=run_dir,
                session_id=f"acp-{uuid.uuid4().hex}",
                policy=policy,
                approver=reporter.approve,
                on_event=reporter.on_event,
            )

            def on_text(chunk: str) -> None:
                if chunk:
                    turn.streamed = True
                    self._text(session, turn, chunk)

            try:
                outcome = self.transport.run_session(request, cancel=turn.cancel, on_text=on_text)
            except HarnessError as exc:
                data = {"errorClass": exc.error_class.value, "retryable": False, "status": "blocked"}
                code = AUTH_REQUIRED if exc.error_class.value == "auth" else INTERNAL_ERROR
                message = "Authentication required" if code == AUTH_REQUIRED else f"Internal error: {exc.message}"
                raise RpcError(code, self.redact(message), data) from None
            if not turn.streamed and outcome.text and not turn.cancel.is_set():
                self._text(session, turn, outcome.text)
            if not self.in_process:
                self._bridge_calls(session, turn, run_dir, reported=reporter.reported)
            return outcome
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)

    def _answer(self, session: _Session, turn: _Turn, outcome: Any) -> None:
        from acp.schema import PromptResponse, Usage

        status = outcome.status.value
        error_class = outcome.error_class.value if outcome.error_class else None
        if turn.cancel.is_set() or status == "cancelled":
            stop = "cancelled"
        elif status == "ok":
            stop = "end_turn"
        elif status == "truncated" and error_class == "max_turns":
            stop = "max_turn_requests"
        else:
            data = {"errorClass": error_class or "unknown", "retryable": bool(outcome.retryable), "status": status}
            if outcome.retry_after_s is not None:
                data["retryAfterS"] = outcome.retry_after_s
            if error_class == "auth":
                err = RpcError(AUTH_REQUIRED, "Authentication required", data)
            else:
                detail = " ".join(self.redact(outcome.message).split())[:300]
                err = RpcError(INTERNAL_ERROR, f"Internal error: {status} ({error_class or 'unknown'})" + (f": {detail}" if detail else ""), data)
            self._finish(session, turn, error=err)
            return
        usage = None
        u = outcome.usage
        if u.total or u.reasoning:
            usage = Usage(
                total_tokens=u.total + u.reasoning,
                input_tokens=u.input,
                output_tokens=u.output,
                thought_tokens=u.reasoning or None,
                cached_read_tokens=u.cache_read or None,
                cached_write_tokens=u.cache_write or None,
            )
        self._finish(session, turn, result=_dump(PromptResponse(stop_reason=stop, usage=usage)))

    def _finish(self, session: _Session, turn: _Turn, *, result: dict | None = None, error: RpcError | None = None) -> None:
        """Answer the prompt once; nothing of this turn is sent after the answer."""
        with turn.lock:
            if turn.answered:
                return
            turn.answered = True
            with self.lock:
                if session.turn is turn:
                    session.turn = None
            if error is not None:
                self.writer.error(turn.msg_id, error.code, error.message, error.data)
            else:
                self.writer.result(turn.msg_id, result)

    def _cancel_turn(self, session: _Session) -> None:
        with self.lock:
            turn = session.turn
            if turn is None:
                return
            turn.cancel.set()
            pending = [self.pending[i] for i in turn.pending if i in self.pending]
        for item in pending:
            item.cancelled = True
            item.done.set()

    # -- session/update ---------------------------------------------------------------

    def update(self, session: _Session, turn: _Turn, update: Any) -> None:
        from acp.schema import SessionNotification

        note = _dump(SessionNotification(session_id=session.id, update=update))
        with turn.lock:
            if turn.answered:
                return
            self.writer.notify("session/update", note)  # under the turn's lock: never after its answer

    def _text(self, session: _Session, turn: _Turn, text: str) -> None:
        from acp.schema import AgentMessageChunk, TextContentBlock

        self.update(session, turn, AgentMessageChunk(session_update="agent_message_chunk", content=TextContentBlock(type="text", text=self.redact(text))))

    def tool_started(self, session: _Session, turn: _Turn, call: Any) -> str:
        from acp.schema import ToolCallStart

        with self.lock:
            turn.calls += 1
            call_id = f"call-{turn.calls}"
        self.update(session, turn, ToolCallStart(session_update="tool_call", status="pending", **_describe(self, session, call, call_id)))
        return call_id

    def tool_ended(self, session: _Session, turn: _Turn, call_id: str, ok: bool, text: str) -> None:
        from acp.schema import ContentToolCallContent, TextContentBlock, ToolCallProgress

        shown = self.redact(text)
        shown = shown if len(shown) <= RESULT_CHARS else shown[:RESULT_CHARS] + " [...]"
        self.update(
            session,
            turn,
            ToolCallProgress(
                session_update="tool_call_update",
                tool_call_id=call_id,
                status="completed" if ok else "failed",
                content=[ContentToolCallContent(type="content", content=TextContentBlock(type="text", text=shown))],
            ),
        )

    def _bridge_calls(self, session: _Session, turn: _Turn, run_dir: Path, *, reported=frozenset()) -> None:
        """A harness backend's tool calls the host link did not report as they happened
        (`reported`: their digests), after the fact, from its bridge trace."""
        path = run_dir / "bridge-trace.jsonl"
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
        except OSError:
            return
        for line in lines:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if not isinstance(rec, dict) or rec.get("event") != "tool":
                continue
            if rec.get("digest") and str(rec["digest"])[:16] in reported:
                continue
            call = _TraceCall(str(rec.get("tool") or "?"), {"path": str(rec.get("path") or "")})
            call_id = self.tool_started(session, turn, call)
            ok = rec.get("decision") == "allow"
            self.tool_ended(session, turn, call_id, ok, "done" if ok else f"refused: {rec.get('code')}: {rec.get('detail', '')}")

    # -- session/request_permission ---------------------------------------------------

    def ask_permission(self, session: _Session, turn: _Turn, call: Any, call_id: str) -> bool:
        from acp.schema import PermissionOption, RequestPermissionRequest, RequestPermissionResponse, ToolCallUpdate

        with self.lock:
            if turn.cancel.is_set() or self.stopping.is_set():
                return False
            self._next += 1
            req_id = f"hc-permission-{self._next}"
            pending = self.pending[req_id] = _Pending()
            turn.pending.add(req_id)
        try:
            params = _dump(
                RequestPermissionRequest(
                    session_id=session.id,
                    tool_call=ToolCallUpdate(status="pending", **_describe(self, session, call, call_id)),
                    options=[
                        PermissionOption(option_id=ALLOW_ONCE, name="Allow once", kind="allow_once"),
                        PermissionOption(option_id=REJECT_ONCE, name="Reject", kind="reject_once"),
                    ],
                )
            )
            if not self.writer.request(req_id, "session/request_permission", params):
                return False
            pending.done.wait(max(0.0, turn.deadline - time.monotonic()))
            if pending.cancelled or pending.answer is None:
                return False
            result = pending.answer.get("result")
            if not isinstance(result, dict):
                return False  # an error answer, or none
            try:
                outcome = RequestPermissionResponse.model_validate(result).outcome
            except Exception:  # noqa: BLE001 - a malformed answer is no approval
                self.log("session/request_permission: malformed answer: not approved")
                return False
            option = getattr(outcome, "option_id", None)
            if option is not None and option not in (ALLOW_ONCE, REJECT_ONCE):
                self.log(f"session/request_permission: unknown optionId {str(option)[:60]!r}: not approved")
            return outcome.outcome == "selected" and option == ALLOW_ONCE
        finally:
            with self.lock:
                self.pending.pop(req_id, None)
                turn.pending.discard(req_id)

    def _session(self, session_id: str) -> _Session:
        with self.lock:
            session = self.sessions.get(session_id)
        if session is None:
            raise RpcError(INVALID_PARAMS, f"Invalid params: unknown sessionId {session_id[:80]!r}")
        return session


class _ToolReporter:
    """One turn's tool calls as the client sees them, from the session's typed events
    (harnesscheck.core.events): each call the choke point is asked about is a `tool_call`, its end a
    `tool_call_update`; the policy's approver is the client, asked with
    session/request_permission before the write runs."""

    def __init__(self, server: AcpServer, session: _Session, turn: _Turn):
        self.server, self.session, self.turn = server, session, turn
        self._ids: dict[str, str] = {}
        self._calls: dict[str, _TraceCall] = {}
        #: digests (16 hex) of the calls shown to the client as they happened
        self.reported: set[str] = set()

    def on_event(self, event: Any) -> None:
        if event.kind == "tool_call" and event.digest:
            self.reported.add(event.digest[:16])
            call = _TraceCall(event.tool or "?", {"path": event.path} if event.path else {})
            self._calls[event.digest] = call
            self._ids[event.digest] = self.server.tool_started(self.session, self.turn, call)
        elif event.kind == "tool_decision" and event.decision != "allow" and event.digest in self._ids:
            self.server.tool_ended(
                self.session,
                self.turn,
                self._ids.pop(event.digest),
                False,
                f"refused: {'not_approved' if event.code and event.code.startswith('approval') else 'policy_denied'}: {event.code}",
            )
        elif event.kind == "tool_result" and not event.late and event.digest in self._ids:
            self.server.tool_ended(self.session, self.turn, self._ids.pop(event.digest), bool(event.ok), "done" if event.ok else f"refused: {event.code}")

    def approve(self, request: Any) -> bool:
        digest = request.digest[:16]
        call = _TraceCall(request.tool, dict(request.args))
        call_id = self._ids.get(digest) or self.server.tool_started(self.session, self.turn, call)
        self._ids[digest] = call_id
        return self.server.ask_permission(self.session, self.turn, call, call_id)


@dataclass
class _TraceCall:
    tool: str
    args: dict


_LATER = object()


def _valid_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _validate(model: Any, params: dict) -> Any:
    from pydantic import ValidationError

    try:
        return model.model_validate(params)
    except ValidationError as exc:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ())) or "params"
        raise RpcError(INVALID_PARAMS, f"Invalid params: {where}: {first.get('msg', 'invalid')}"[:300]) from None


def _dump(model: Any) -> dict:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def _describe(server: AcpServer, session: _Session, call: Any, call_id: str) -> dict:
    """toolCallId, title, kind, rawInput (bounded, redacted) and the location of one call."""
    args = {str(k): (server.redact(v) if isinstance(v, str) else v) for k, v in dict(call.args).items()}
    args = {k: (v[:RAW_VALUE_CHARS] + " [...]" if isinstance(v, str) and len(v) > RAW_VALUE_CHARS else v) for k, v in args.items()}
    path = args.get("path")
    out: dict[str, Any] = {
        "tool_call_id": call_id,
        "title": f"{call.tool} {path}" if path else call.tool,
        "kind": _KINDS.get(call.tool, "other"),
        "raw_input": args,
    }
    if isinstance(path, str) and path and not os.path.isabs(path):
        target = os.path.normpath(os.path.join(session.root, path))
        if target == str(session.root) or target.startswith(str(session.root) + os.sep):
            from acp.schema import ToolCallLocation

            out["locations"] = [ToolCallLocation(path=target)]
    return out
