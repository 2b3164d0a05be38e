"""One ACP session from the host's side: a pure-ish state machine fed the agent's stdout lines.

Requirements kept here (doc/SPEC-acp.md, "The session"):
- The host speaks first: `initialize` (protocolVersion 1; clientCapabilities fs read/write, no
  terminal), then `session/new` (cwd = the session's scratch dir; mcpServers = the host's bridge
  only, stdio, with its explicit env), then the profile's asking mode (`session/set_mode` or
  `session/set_config_option`), then `session/prompt`. A version other than 1 is refused.
- Every message the host sends is built from and checked against agent-client-protocol's
  typed models (acp.schema); framing and process handling stay the host's own (the line
  framer of process.py; the StdinFeed this session writes into).
- Agent requests: `session/request_permission` is answered by the host policy (`decide`);
  `fs/read_text_file` / `fs/write_text_file` are served through dispatch, the choke point,
  with the session's ToolScope: a path under the session cwd is that path under the scope root,
  any other path is refused with a JSON-RPC error; `terminal/*` and any other method get a
  JSON-RPC error (-32601), never a result.
- A stdout line that is not a JSON-RPC message is counted (evidence `noise`), never parsed.
- The prompt's answer (result or error) is the terminal event: stdin is closed at once (the
  agent should exit) and run_process lingers, then ends the whole tree.
- `request_cancel` (host cancel or deadline, from the transport's watcher thread) sends
  `session/cancel`; the outcome says `cancelled` (host) or truncated/timeout (deadline).
- An auth-looking signal (a profile-named notification reporting no login, or an auth line on
  stderr) starts a clock: no prompt answer and no update within `auth_stall_s` ends the
  session blocked/auth (`auth_stalled`), never a silent wait for the whole deadline.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harnesscheck.backends._text import short
from harnesscheck.backends.acp.errors import STOP_REASONS, classify_error, failed_status
from harnesscheck.backends.acp.profile import AcpProfile
from harnesscheck.contain.envpolicy import redact
from harnesscheck.contain.process import Ending, LineAction, ProcessResult, StdinFeed
from harnesscheck.core.contracts import RETRYABLE, AgentOutcome, Cost, ErrorClass, OutcomeStatus, Usage

PROTOCOL_VERSION = 1
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
#: JSON-RPC error the host answers a refused `fs/*` path with (ACP's "resource not found" family).
REFUSED = -32002


@dataclass
class PermissionAsked:
    """One `session/request_permission` and the host's answer."""

    at: float  # monotonic, when the host read it
    tool_call_id: str | None
    title: str
    kind: str | None
    options: list[dict]
    answer: dict  # the outcome sent back
    allowed: bool


@dataclass
class AcpEvidence:
    """What the host saw of one ACP session (for the kit's acp.* checks and the outcome)."""

    agent_capabilities: dict = field(default_factory=dict)
    protocol_version: Any = None
    session_id: str | None = None
    modes: list[str] = field(default_factory=list)  # current mode ids, in the order reported
    mode_set: str | None = None  # the asking mode the host set (None: none set or refused)
    permissions: list[PermissionAsked] = field(default_factory=list)
    tool_calls: dict[str, dict] = field(default_factory=dict)  # toolCallId -> last known fields
    tool_call_order: list[str] = field(default_factory=list)
    tool_started_at: dict[str, float] = field(default_factory=dict)  # first in_progress/completed
    fs_calls: list[tuple[str, str, bool]] = field(default_factory=list)  # (method, path, served)
    refused_methods: list[str] = field(default_factory=list)
    noise: list[str] = field(default_factory=list)  # stdout lines that were not JSON-RPC (bounded)
    stop_reason: str | None = None
    prompt_error: dict | None = None
    setup_error: dict | None = None
    prompt_sent_at: float | None = None
    answered_at: float | None = None
    cancel_sent_at: float | None = None
    cancel_reason: str | None = None  # "host" | "deadline" | "auth"
    auth_signal_at: float | None = None
    auth_stalled: bool = False
    last_update_at: float | None = None
    stdin_closed_at: float | None = None
    ending: str | None = None  # process.Ending of the run, set by the transport

    def summary(self) -> dict:
        return {
            "permissions": [{"tool_call_id": p.tool_call_id, "title": p.title, "kind": p.kind, "allowed": p.allowed} for p in self.permissions],
            "stop_reason": self.stop_reason,
            "modes": self.modes,
            "noise": len(self.noise),
            "ending": self.ending,
        }


def _model_check(model: type, payload: dict) -> dict:
    """`payload` validated by acp.schema's model and dumped the way the wire spells it."""
    return model.model_validate(payload).model_dump(by_alias=True, exclude_none=True, mode="json")


class AcpSession:
    """The host side of one session. `feed(line)` per stdout line (run_process's on_line),
    `feed_err(line)` per stderr line, `outcome(result)` at the end."""

    def __init__(
        self,
        *,
        profile: AcpProfile,
        feed: StdinFeed,
        cwd: Path,
        prompt: str,
        scope: Any | None,
        bridge: tuple[list[str], dict[str, str]] | None,
        wire_log: Path | None,
        dispatch_trace: Any | None = None,
        session_id: str | None = None,
        requested_model: str | None = None,
        on_text: Callable[[str], None] | None = None,
        evidence: AcpEvidence | None = None,
        observer: Callable[[str, dict, AcpEvidence], None] | None = None,
        policy: Callable[[dict, AcpSession], bool] | None = None,
        engine: Any | None = None,
    ):
        self.profile = profile
        self.feed_ = feed
        self.cwd = Path(cwd)
        self.prompt = prompt
        self.scope = scope
        self.bridge = bridge
        self.wire_log = wire_log
        self.dispatch_trace = dispatch_trace
        self.host_session_id = session_id
        self.requested_model = requested_model
        self.on_text = on_text
        self.ev = evidence if evidence is not None else AcpEvidence()
        self.observer = observer
        self.policy = policy
        #: The request's policy engine (harnesscheck.core.policy), when the host gave a policy,
        #: approver or event sink: it decides the agent's own tools and the client fs calls.
        self.engine = engine
        self.lock = threading.Lock()
        self.next_id = 0
        self.pending: dict[int, str] = {}  # request id -> method
        self.chunks: list[str] = []
        self.usage = Usage()
        self.usage_seen = False
        self.done = False
        self.malformed = 0
        self.bridge_names = self._bridge_names()

    # -- writing ---------------------------------------------------------------------------

    def _log(self, direction: str, message: dict | str) -> None:
        if self.wire_log is None:
            return
        record = {"mono": round(time.monotonic(), 6), "dir": direction, "msg": message}
        try:
            with open(self.wire_log, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        except OSError:
            pass

    def _send(self, message: dict) -> None:
        self._log("out", message)
        self.feed_.write((json.dumps(message, ensure_ascii=False) + "\n").encode("utf-8"))

    def _request(self, method: str, params: dict) -> int:
        with self.lock:
            self.next_id += 1
            rid = self.next_id
            self.pending[rid] = method
        self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return rid

    def _respond(self, rid: Any, result: dict | None = None, error: dict | None = None) -> None:
        msg: dict = {"jsonrpc": "2.0", "id": rid}
        if error is not None:
            msg["error"] = error
        else:
            msg["result"] = result if result is not None else {}
        self._send(msg)

    def close_stdin(self) -> None:
        if self.ev.stdin_closed_at is None:
            self.ev.stdin_closed_at = time.monotonic()
        self.feed_.close()

    # -- the conversation -----------------------------------------------------------------

    def start(self) -> None:
        """`initialize`: the first message (queued before the agent runs)."""
        from acp.schema import InitializeRequest

        params = _model_check(
            InitializeRequest,
            {
                "protocolVersion": PROTOCOL_VERSION,
                "clientCapabilities": {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": False},
                "clientInfo": {"name": "harnesscheck", "version": _version()},
            },
        )
        self._request("initialize", params)

    def _new_session(self) -> None:
        from acp.schema import NewSessionRequest

        servers = []
        if self.bridge is not None:
            argv, env = self.bridge
            servers.append({"name": "bridge", "command": argv[0], "args": list(argv[1:]), "env": [{"name": k, "value": v} for k, v in sorted(env.items())]})
        payload: dict = {"cwd": str(self.cwd), "mcpServers": servers}
        if self.profile.session_meta:
            payload["_meta"] = self.profile.session_meta
        self._request("session/new", _model_check(NewSessionRequest, payload))

    def _set_mode_or_prompt(self) -> None:
        mode = self.profile.mode
        if mode.mode_id is not None:
            from acp.schema import SetSessionModeRequest

            self._request("session/set_mode", _model_check(SetSessionModeRequest, {"sessionId": self.ev.session_id, "modeId": mode.mode_id}))
        elif mode.config_option is not None:
            self._request("session/set_config_option", {"sessionId": self.ev.session_id, **mode.config_option})
        else:
            self._prompt()

    def _prompt(self) -> None:
        from acp.schema import PromptRequest

        self.ev.prompt_sent_at = time.monotonic()
        self._request("session/prompt", _model_check(PromptRequest, {"sessionId": self.ev.session_id, "prompt": [{"type": "text", "text": self.prompt}]}))

    def request_cancel(self, reason: str) -> None:
        """Host cancel, deadline or auth stall: `session/cancel` once (a no-op when the prompt was
        answered or never sent)."""
        from acp.schema import CancelNotification

        with self.lock:
            if self.done or self.ev.cancel_sent_at is not None:
                return
            self.ev.cancel_sent_at = time.monotonic()
            self.ev.cancel_reason = reason
        if self.ev.session_id is None or self.ev.prompt_sent_at is None:
            self.close_stdin()
            return
        self._send({"jsonrpc": "2.0", "method": "session/cancel", "params": _model_check(CancelNotification, {"sessionId": self.ev.session_id})})

    # -- reading ----------------------------------------------------------------------------

    def feed(self, line: str) -> LineAction | None:
        text = line.strip()
        if not text:
            return None
        try:
            msg = json.loads(text)
        except ValueError:
            msg = None
        if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0":
            if len(self.ev.noise) < 50:
                self.ev.noise.append(text[:200])
            else:
                self.malformed += 1
            return None
        self._log("in", msg)
        if self.observer is not None:
            self.observer("in", msg, self.ev)
        if "method" in msg:
            if "id" in msg:
                self._on_request(msg)
            else:
                self._on_notification(msg)
            return None
        return self._on_response(msg)

    def feed_err(self, line: str) -> LineAction | None:
        """Agent stderr: only an auth line matters here (it starts the auth clock)."""
        from harnesscheck.backends._errortext import classify_text

        if self.ev.auth_signal_at is None and not self.done and classify_text(line) is ErrorClass.auth:
            self.ev.auth_signal_at = time.monotonic()
        return None

    def _on_response(self, msg: dict) -> LineAction | None:
        rid = msg.get("id")
        with self.lock:
            method = self.pending.pop(rid, None) if isinstance(rid, int) else None
        if method is None:
            return None  # an answer to nothing we asked: ignored
        error = msg.get("error") if isinstance(msg.get("error"), dict) else None
        result = msg.get("result") if isinstance(msg.get("result"), dict) else {}
        if method == "session/prompt":
            return self._answered(result, error)
        if error is not None:
            if method in ("session/set_mode", "session/set_config_option"):
                error = {**error, "message": f"the asking mode could not be set: {error.get('message', '')}"}
            self.ev.setup_error = {"method": method, **error}
            self.done = True
            self.close_stdin()
            return LineAction.TERMINAL
        if method == "initialize":
            self.ev.protocol_version = result.get("protocolVersion")
            self.ev.agent_capabilities = result.get("agentCapabilities") or {}
            if self.ev.protocol_version != PROTOCOL_VERSION:
                self.ev.setup_error = {
                    "method": method,
                    "code": None,
                    "message": f"the agent answered protocolVersion {self.ev.protocol_version!r}; this host speaks {PROTOCOL_VERSION}",
                }
                self.done = True
                self.close_stdin()
                return LineAction.TERMINAL
            self._new_session()
        elif method == "session/new":
            sid = result.get("sessionId")
            if not isinstance(sid, str) or not sid:
                self.ev.setup_error = {"method": method, "code": None, "message": "session/new gave no sessionId"}
                self.done = True
                self.close_stdin()
                return LineAction.TERMINAL
            self.ev.session_id = sid
            modes = result.get("modes") if isinstance(result.get("modes"), dict) else {}
            if isinstance(modes.get("currentModeId"), str):
                self.ev.modes.append(modes["currentModeId"])
            self._set_mode_or_prompt()
        elif method in ("session/set_mode", "session/set_config_option"):
            self.ev.mode_set = self.profile.mode.mode_id or json.dumps(self.profile.mode.config_option)
            self.ev.modes.append(self.ev.mode_set)  # accepted: the current mode from here on, until the agent reports another
            self._prompt()
        return None

    def _answered(self, result: dict, error: dict | None) -> LineAction:
        with self.lock:
            self.done = True
        self.ev.answered_at = time.monotonic()
        if error is not None:
            self.ev.prompt_error = error
        else:
            stop = result.get("stopReason")
            self.ev.stop_reason = stop if isinstance(stop, str) else repr(stop)
            self._usage(result)
        self.close_stdin()
        return LineAction.TERMINAL

    def _usage(self, result: dict) -> None:
        raw = result.get("usage")
        if not isinstance(raw, dict):
            return
        num = lambda k: int(raw[k]) if isinstance(raw.get(k), int) and raw[k] > 0 else 0  # noqa: E731
        self.usage = Usage(
            input=num("inputTokens"),
            output=num("outputTokens"),
            cache_read=num("cachedReadTokens"),
            cache_write=num("cachedWriteTokens"),
            reasoning=num("thoughtTokens"),
        )
        self.usage_seen = True

    def _on_notification(self, msg: dict) -> None:
        method = msg.get("method")
        params = msg.get("params") if isinstance(msg.get("params"), dict) else {}
        if method in self.profile.auth_signals:
            if str(params.get("kind", "")).lower() in ("none", "unauthenticated", "logged_out"):
                self.ev.auth_signal_at = self.ev.auth_signal_at or time.monotonic()
            return
        if method != "session/update":
            return
        update = params.get("update") if isinstance(params.get("update"), dict) else {}
        self.ev.last_update_at = time.monotonic()
        kind = update.get("sessionUpdate")
        if kind == "agent_message_chunk":
            content = update.get("content") if isinstance(update.get("content"), dict) else {}
            if content.get("type") == "text" and isinstance(content.get("text"), str):
                self.chunks.append(content["text"])
                if self.on_text is not None and content["text"]:
                    self.on_text(content["text"])
        elif kind in ("tool_call", "tool_call_update"):
            self._tool_update(update)
        elif kind == "current_mode_update":
            if isinstance(update.get("currentModeId"), str):
                self.ev.modes.append(update["currentModeId"])
        elif kind == "config_option_update" and self.profile.mode.mode_id is not None:
            # claude-agent-acp reports a mode change as its `mode` config option, not current_mode_update
            for option in update.get("configOptions") or []:
                if isinstance(option, dict) and option.get("category") == "mode" and isinstance(option.get("currentValue"), str):
                    self.ev.modes.append(option["currentValue"])

    def _tool_update(self, update: dict) -> None:
        tid = update.get("toolCallId")
        if not isinstance(tid, str):
            return
        known = self.ev.tool_calls.get(tid)
        if known is None:
            if len(self.ev.tool_calls) >= 10_000:
                return
            known = self.ev.tool_calls[tid] = {}
            self.ev.tool_call_order.append(tid)
        for key in ("title", "kind", "status", "rawInput", "name"):
            if key in update:
                known[key] = update[key]
        if update.get("status") in ("in_progress", "completed", "failed") and tid not in self.ev.tool_started_at:
            self.ev.tool_started_at[tid] = time.monotonic()

    def _on_request(self, msg: dict) -> None:
        method = str(msg.get("method"))
        rid = msg.get("id")
        params = msg.get("params") if isinstance(msg.get("params"), dict) else {}
        if method == "session/request_permission":
            self._respond(rid, self.decide(params))
        elif method == "fs/read_text_file":
            self._fs_read(rid, params)
        elif method == "fs/write_text_file":
            self._fs_write(rid, params)
        else:
            self.ev.refused_methods.append(method[:100])
            why = (
                "terminal is not offered by this client: run commands through the host's tools"
                if method.startswith("terminal/")
                else f"method not found: {method[:100]}"
            )
            self._respond(rid, error={"code": METHOD_NOT_FOUND, "message": why})

    # -- the host policy ----------------------------------------------------------------------

    def _bridge_names(self) -> set[str]:
        tools = self.scope.tool_names() if self.scope is not None else ()
        return {pattern.replace("{tool}", tool) for pattern in self.profile.bridge_tool_names for tool in tools}

    def is_bridge_call(self, tool_call: dict) -> bool:
        """Whether a tool call is one of the host bridge's tools, by the names the agent gives it
        (the permission's own title/name, or the earlier tool_call update with its id)."""
        names = {tool_call.get("title"), tool_call.get("name")}
        known = self.ev.tool_calls.get(str(tool_call.get("toolCallId")))
        if known:
            names |= {known.get("title"), known.get("name")}
        return bool({n for n in names if isinstance(n, str)} & self.bridge_names)

    def host_policy(self, tool_call: dict) -> bool:
        """The host's answer for one permission request (doc/SPEC-acp.md, doc/SPEC-policy.md):
        - a bridge tool: allowed, since the bridge decides the call itself against the same
          policy (it travels in the bridge spec) and refuses what it denies;
        - any other tool is the agent's own, which runs outside the choke point: allowed only
          where the policy says so explicitly (a rule that allows it, or an approval from the
          host's approver for an approval_required rule); a kind's default never allows it.
        Without a policy engine: bridge tools only."""
        if self.is_bridge_call(tool_call):
            return True
        if self.engine is None:
            return False
        from harnesscheck.core.policy import ACP_KINDS, ToolCall, ToolKind

        raw = tool_call.get("rawInput") if isinstance(tool_call.get("rawInput"), dict) else {}
        name = str(tool_call.get("title") or tool_call.get("name") or "agent-tool")[:120]
        call = ToolCall(tool=name, args=raw, kind=ACP_KINDS.get(str(tool_call.get("kind") or "other"), ToolKind.OTHER))
        decision = self.engine.authorize(call)
        return decision.allowed and decision.code != "default"

    def decide(self, params: dict) -> dict:
        """Answer `session/request_permission` with the host policy (`host_policy`): allowed
        once, or rejected once (rejected always, or cancelled, when the agent offers no
        reject-once option); a request whose options cannot be read is rejected."""
        tool_call = params.get("toolCall") if isinstance(params.get("toolCall"), dict) else {}
        options = [o for o in params.get("options") or [] if isinstance(o, dict)]
        by_kind: dict[str, str] = {}
        for option in options:
            if isinstance(option.get("kind"), str) and isinstance(option.get("optionId"), str):
                by_kind.setdefault(option["kind"], option["optionId"])
        wanted = self.policy(tool_call, self) if self.policy is not None else self.host_policy(tool_call)
        allowed = bool(wanted) and "allow_once" in by_kind
        if allowed:
            answer = {"outcome": {"outcome": "selected", "optionId": by_kind["allow_once"]}}
        elif "reject_once" in by_kind:
            answer = {"outcome": {"outcome": "selected", "optionId": by_kind["reject_once"]}}
        elif "reject_always" in by_kind:
            answer = {"outcome": {"outcome": "selected", "optionId": by_kind["reject_always"]}}
        else:
            answer = {"outcome": {"outcome": "cancelled"}}
        from acp.schema import RequestPermissionResponse

        answer = _model_check(RequestPermissionResponse, answer)
        self.ev.permissions.append(
            PermissionAsked(
                at=time.monotonic(),
                tool_call_id=tool_call.get("toolCallId"),
                title=str(tool_call.get("title") or ""),
                kind=tool_call.get("kind"),
                options=options[:20],
                answer=answer,
                allowed=allowed,
            )
        )
        return answer

    # -- client fs through the choke point -------------------------------------------------

    def _scoped_path(self, path: object) -> str | None:
        """The scope-relative path of an absolute path under the session cwd, else None."""
        if not isinstance(path, str) or not path.startswith("/"):
            return None
        cwd = str(self.cwd).rstrip("/")
        if path == cwd:
            return "."
        if not path.startswith(cwd + "/"):
            return None
        return path[len(cwd) + 1 :]

    def _dispatch(self, name: str, args: dict):
        from harnesscheck.choke.dispatch import dispatch

        return dispatch(name, args, self.scope, self.dispatch_trace, session_id=self.host_session_id, policy=self.engine)

    def _fs_read(self, rid: Any, params: dict) -> None:
        rel = self._scoped_path(params.get("path"))
        if self.scope is None or rel is None:
            self.ev.fs_calls.append(("fs/read_text_file", str(params.get("path"))[:300], False))
            self._respond(rid, error={"code": REFUSED, "message": "refused: path_outside_scope: only paths under the session cwd"})
            return
        result = self._dispatch("read_file", {"path": rel})
        self.ev.fs_calls.append(("fs/read_text_file", rel, result.ok))
        if not result.ok:
            if result.code == "not_found":
                self._respond(rid, {"content": ""})  # a new file: what agents expect (gemini's pre-read)
            else:
                self._respond(rid, error={"code": REFUSED, "message": result.text[:2000]})
            return
        text = result.text
        line, limit = params.get("line"), params.get("limit")
        if isinstance(line, int) or isinstance(limit, int):
            lines = text.splitlines(keepends=True)
            start = max(int(line) - 1, 0) if isinstance(line, int) else 0
            end = start + int(limit) if isinstance(limit, int) and limit >= 0 else None
            text = "".join(lines[start:end])
        self._respond(rid, {"content": text})

    def _fs_write(self, rid: Any, params: dict) -> None:
        rel = self._scoped_path(params.get("path"))
        content = params.get("content")
        if self.scope is None or rel is None or not isinstance(content, str):
            self.ev.fs_calls.append(("fs/write_text_file", str(params.get("path"))[:300], False))
            self._respond(
                rid,
                error={
                    "code": REFUSED if rel is None else INVALID_PARAMS,
                    "message": "refused: path_outside_scope: only paths under the session cwd" if rel is None else "content must be a string",
                },
            )
            return
        result = self._dispatch("write_file", {"path": rel, "content": content})
        self.ev.fs_calls.append(("fs/write_text_file", rel, result.ok))
        if result.ok:
            self._respond(rid, {})
        else:
            self._respond(rid, error={"code": REFUSED, "message": result.text[:2000]})

    # -- the outcome ----------------------------------------------------------------------------

    def outcome(self, result: ProcessResult) -> AgentOutcome:
        from harnesscheck.backends._harness import ending_outcome

        self.ev.ending = str(result.ending)
        answered = self.ev.stop_reason is not None or self.ev.prompt_error is not None
        text = "".join(self.chunks)
        notes = []
        if self.ev.noise:
            notes.append(f"{len(self.ev.noise) + self.malformed} stdout line(s) were not JSON-RPC")
        if self.ev.refused_methods:
            notes.append("refused: " + ", ".join(sorted(set(self.ev.refused_methods))[:5]))
        status: OutcomeStatus
        cls: ErrorClass | None
        cancelled_answer = not answered or self.ev.stop_reason == "cancelled"
        if self.ev.auth_stalled and cancelled_answer:
            status, cls = OutcomeStatus.blocked, ErrorClass.auth
            message = f"the agent signalled an auth failure and then said nothing for {self.profile.auth_stall_s:g} s (a silent retry ladder): ended"
        elif self.ev.cancel_reason == "deadline" and cancelled_answer:
            status, cls, message = OutcomeStatus.truncated, ErrorClass.timeout, "the session deadline passed; session/cancel sent; partial output kept"
        elif self.ev.prompt_error is not None:
            cls = classify_error(self.ev.prompt_error, self.profile.errors)
            status = failed_status(cls)
            message = f"session/prompt failed: {self.ev.prompt_error.get('code')} {short(str(self.ev.prompt_error.get('message', '')))}"
        elif self.ev.stop_reason is not None:
            status, cls = STOP_REASONS.get(self.ev.stop_reason, (OutcomeStatus.error, ErrorClass.protocol))
            message = "" if status is OutcomeStatus.ok else f"stopReason {self.ev.stop_reason}"
            if self.ev.stop_reason == "end_turn" and not text.strip() and not self.ev.tool_calls:
                pass  # an empty answer is still an answer: the agent said end_turn
        elif self.ev.setup_error is not None:
            cls = classify_error(self.ev.setup_error, self.profile.errors)
            if cls is ErrorClass.unknown:
                cls = ErrorClass.protocol
            status = failed_status(cls)
            message = f"{self.ev.setup_error.get('method')} failed: {short(str(self.ev.setup_error.get('message', '')))}"
        elif self.ev.cancel_reason == "host" and result.ending is not Ending.deadline:
            status, cls, message = OutcomeStatus.cancelled, None, "cancelled by the host; session/cancel sent, the tree was ended"
        else:
            fallback = ending_outcome(result, terminal_seen=False)
            assert fallback is not None
            status, cls, message = fallback
            if result.ending is Ending.exited:
                message = "the agent ended before it answered the prompt" + (f" ({message})" if message else "")
        if notes:
            message = "; ".join(p for p in (message, *notes) if p)
        native = [str(v.get("title") or v.get("name") or "?") for k, v in self.ev.tool_calls.items() if not self.is_bridge_call({"toolCallId": k})]
        return AgentOutcome(
            status=status,
            error_class=cls,
            retryable=cls in RETRYABLE if cls is not None else False,
            message=redact(message),
            text=text,
            iterations=1 if answered else 0,
            tool_calls=len(self.ev.tool_calls),
            tools_used=list(dict.fromkeys(str(v.get("title") or v.get("name") or "?") for v in self.ev.tool_calls.values())),
            native_tool_calls=native[:1000],
            usage=self.usage,
            cost=Cost(partial=status is OutcomeStatus.truncated),
            requested_model=self.requested_model,
            session_id=self.ev.session_id,
            exit_code=result.exit_code,
            signal=result.signal,
            duration_s=result.duration_s,
            terminal_event_seen=answered,
            orphan_suspected=result.orphan_suspected,
            stderr_tail=result.stderr_tail,
        )


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("harnesscheck")
    except Exception:  # noqa: BLE001 - a source checkout without metadata
        return "0"
