"""Cursor transport: `cursor-agent --print --output-format stream-json` with the bridge over MCP.

Requirements kept here (doc/SPEC-cursor.md):
- argv `cursor-agent --print --output-format stream-json --force --approve-mcps --trust
  --workspace <scratch> [--model M]`; the prompt, whatever its size, goes on stdin, then
  EOF (an open stdin makes `--print` wait forever; a closed one does not): never on argv,
  which every local user can read in /proc/<pid>/cmdline (issue 30).
- cwd and `--workspace` are a per-session scratch directory, never the worktree, so a
  worktree's `.cursor/mcp.json`, `.cursor/rules`, `AGENTS.md` or `.env` is never read.
- The bridge is declared in `<per-run HOME>/.cursor/mcp.json` (and the scratch project's
  `.cursor/mcp.json`); HOME is a per-run directory, so the user's `~/.cursor/mcp.json`,
  `cli-config.json` and rules are not read. Only the login file
  `~/.config/cursor/auth.json` is linked in, when it exists.
- Readiness fails closed: the stream reports no MCP status, so after a session with tools
  the bridge's own trace must show its tools listed, else blocked/mcp_unavailable; and the
  audit is the enforcement: an unclean verdict ends the session blocked/policy_violation
  (both in the base's `judge`).
- The parser is pure. `result` is the terminal event (`is_error` before `subtype`, the
  event before the exit code); the process gets a short linger after it and is then
  killed with its tree. `system/init.apiKeySource` other than `login` stops the session
  (an API key would be billed instead of the subscription).

What cursor cannot isolate, stated plainly (the spec declares neither `builtin_tools_off`
nor `config_isolation`, and the audit flags what is used):
- its built-in read, write, edit, grep, glob and shell tools cannot be switched off in
  print mode, and `--force` lets the shell run unasked; every native call is recorded in
  `native_tool_calls` for the audit;
- there is no documented config-directory variable: isolation rests on the per-run HOME,
  which a future CLI may not honour; there is no strict-MCP switch, no system-prompt
  channel, no turn cap, and the served model is only a display name.
"""

from __future__ import annotations

import json
from pathlib import Path

from harnesscheck.backends import _text
from harnesscheck.backends._args import safe_model
from harnesscheck.backends._bounded import CallLog, TextTail
from harnesscheck.backends._errortext import classify_text
from harnesscheck.backends._eventlog import SessionAudit
from harnesscheck.backends._harness import (
    EventDecoder,
    HarnessTransport,
    Invocation,
    SessionContext,
    bridge_command,
    ending_outcome,
)
from harnesscheck.backends._rootcause import tail_cause
from harnesscheck.backends._text import last_line, short
from harnesscheck.contain.envpolicy import redact
from harnesscheck.contain.process import Ending, LineAction, ProcessResult
from harnesscheck.contain.rundir import write_private as _write_private  # a fresh 0600 file, never following a link
from harnesscheck.core.contracts import (
    BLOCKING,
    RETRYABLE,
    AgentOutcome,
    Cost,
    CostSource,
    ErrorClass,
    ModelVerdict,
    OutcomeStatus,
    Usage,
    model_verdict,
)

BRIDGE_SERVER = "bridge"

#: What init.apiKeySource must say for a subscription session.
SUBSCRIPTION_KEY_SOURCE = "login"


class CursorParser:
    """Folds `cursor-agent --print --output-format stream-json` lines into an AgentOutcome."""

    def __init__(self, *, requested_model: str | None = None, bridge_server: str = BRIDGE_SERVER):
        self.requested_model = requested_model
        self.bridge_server = bridge_server
        self.session_id: str | None = None
        self.display_model: str | None = None
        self.api_key_source: str | None = None
        self.segments = TextTail()  # full assistant segments (no timestamp_ms), bounded
        self.deltas = TextTail()  # streamed partial segments (timestamp_ms present), bounded
        self.result: dict | None = None
        self.open_calls: set[str] = set()  # call ids started and not yet completed
        self.calls = CallLog()
        self.iterations = 0
        self.early: ErrorClass | None = None
        self.early_message = ""
        self.decoder = EventDecoder()
        self.on_text = None  # optional callback: each assistant segment as it arrives

    # -- lines --------------------------------------------------------------------------

    def feed(self, line: str) -> LineAction | None:
        event = self.decoder.decode(line)
        if event is None:
            return None
        if self.result is not None:
            return None  # one terminal outcome; anything after it changes nothing
        kind = event.get("type")
        if kind == "system" and event.get("subtype") == "init":
            return self._init(event)
        if kind == "assistant":
            self._assistant(event)
        elif kind == "tool_call":
            self._tool_call(event)
        elif kind == "result":
            self.result = event
            if isinstance(event.get("session_id"), str):
                self.session_id = event["session_id"]
            return LineAction.TERMINAL
        return None

    def _init(self, event: dict) -> LineAction | None:
        if isinstance(event.get("session_id"), str):
            self.session_id = event["session_id"]
        if isinstance(event.get("model"), str):
            self.display_model = event["model"]
        source = event.get("apiKeySource")
        if isinstance(source, str):
            self.api_key_source = source
            if source != SUBSCRIPTION_KEY_SOURCE:
                self.early = ErrorClass.policy_violation
                self.early_message = f"cursor-agent reports apiKeySource={source!r}: an API key is in use, not the subscription login"
                return LineAction.STOP
        return None

    def _assistant(self, event: dict) -> None:
        message = event.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            return
        text = "".join(part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str))
        if "timestamp_ms" in event:
            self.deltas.append(text)
        else:
            self.segments.append(text)
            self.iterations += 1
            if self.on_text is not None and text:
                self.on_text(text)

    def _tool_call(self, event: dict) -> None:
        call = event.get("tool_call")
        if not isinstance(call, dict):
            return
        keys = [k for k, v in call.items() if isinstance(v, dict)]
        if not keys:
            return
        key = keys[0]
        call_id = event.get("call_id")
        if call_id is not None:
            call_id = str(call_id)
            if event.get("subtype") == "completed":
                if call_id in self.open_calls:
                    self.open_calls.discard(call_id)
                    return  # counted when it started
            elif call_id in self.open_calls:
                return
            elif len(self.open_calls) < 100_000:
                self.open_calls.add(call_id)
        body = call[key]
        if key == "mcpToolCall":
            args = body.get("args") if isinstance(body.get("args"), dict) else {}
            server = str(args.get("providerIdentifier") or args.get("serverIdentifier") or "")
            tool = str(args.get("toolName") or "")
            name = str(args.get("name") or "")
            if not server and name.startswith(self.bridge_server + "-"):
                server, tool = self.bridge_server, tool or name[len(self.bridge_server) + 1 :]
            if server == self.bridge_server:
                self.calls.bridge(tool or name)
            else:
                self.calls.native(f"mcp:{server or '?'}/{tool or name or '?'}")
        elif key == "function":
            self.calls.native(f"function:{body.get('name', '?')}")
        else:
            self.calls.native(key[: -len("ToolCall")] if key.endswith("ToolCall") else key)

    # -- the outcome --------------------------------------------------------------------

    def partial_text(self) -> str:
        return self.segments.text() if self.segments else self.deltas.text()

    def outcome(self, result: ProcessResult) -> AgentOutcome:
        res = self.result or {}
        served = self.display_model
        verdict = ModelVerdict.unverified
        if served and self.requested_model:
            verdict = model_verdict(_norm(self.requested_model), _norm(served))
        final = res.get("result") if isinstance(res.get("result"), str) else None
        out = AgentOutcome(
            status=OutcomeStatus.ok,
            text=final if final is not None and not res.get("is_error") else self.partial_text(),
            iterations=self.iterations,
            tool_calls=self.calls.bridge_calls,
            tools_used=self.calls.tools_used,
            native_tool_calls=self.calls.native_calls,
            usage=_usage(res.get("usage")),
            cost=_cost(res.get("usage")),
            requested_model=self.requested_model,
            served_model=served,
            model_verdict=verdict,
            auth_source=self.api_key_source,
            session_id=self.session_id,
            exit_code=result.exit_code,
            signal=result.signal,
            duration_s=result.duration_s,
            terminal_event_seen=self.result is not None,
            orphan_suspected=result.orphan_suspected,
            stderr_tail=result.stderr_tail,
        )
        status, cls, message = self._classify(result)
        out.status, out.error_class, out.message = status, cls, redact(message)
        out.retryable = cls in RETRYABLE if cls is not None else False
        if status is OutcomeStatus.truncated:
            out.cost = out.cost.model_copy(update={"partial": True})
        return out

    def _classify(self, result: ProcessResult) -> tuple[OutcomeStatus, ErrorClass | None, str]:
        notes = self._notes(result)
        if self.early is not None and result.ending is Ending.early_stop:
            return _failed(self.early), self.early, self.early_message + notes
        if result.ending is Ending.cancelled:
            return OutcomeStatus.cancelled, None, "cancelled by the host" + notes
        if result.ending is Ending.deadline and self.result is None:
            return OutcomeStatus.truncated, ErrorClass.timeout, "wall-clock budget reached" + notes
        if result.ending is Ending.oversize:
            return (
                OutcomeStatus.error,
                ErrorClass.protocol,
                f"a stdout line exceeded the {result.oversize_limit}-byte line limit (max_line_bytes)" + notes,
            )
        if self.result is not None:
            res = self.result
            text = res.get("result") if isinstance(res.get("result"), str) else ""
            if res.get("is_error") is True:
                cls = classify_text(text) or classify_text(result.stderr_tail) or ErrorClass.unknown
                return _failed(cls), cls, short(text or last_line(result.stderr_tail)) + notes
            if res.get("subtype") not in (None, "success"):
                cls = classify_text(text) or ErrorClass.unknown
                return _failed(cls), cls, f"result subtype {res.get('subtype')!r}: " + short(text) + notes
            if not text.strip():
                return OutcomeStatus.error, ErrorClass.protocol, "result without an answer" + notes
            return OutcomeStatus.ok, None, notes.lstrip("; ")
        cause = tail_cause(result.stderr_tail)  # the root among the tail's lines (doc/SPEC-cursor.md)
        if cause is not None:
            return _failed(cause[0]), cause[0], short(cause[1]) + notes
        if self.decoder.malformed or result.partial_tail:
            return OutcomeStatus.error, ErrorClass.protocol, "the stream ended inside an event (no result event)" + notes
        fallback = ending_outcome(result, terminal_seen=False)
        assert fallback is not None
        return fallback[0], fallback[1], fallback[2] + notes

    def _notes(self, result: ProcessResult) -> str:
        parts = []
        if self.decoder.malformed:
            parts.append(f"{self.decoder.malformed} malformed line(s) skipped")
        if result.partial_tail:
            parts.append("truncated last line dropped")
        return "".join(f"; {p}" for p in parts)


def _num(raw: dict, *keys: str) -> int:
    for key in keys:
        value = raw.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return int(value)
    return 0


def _usage(raw) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    return Usage(
        input=_num(raw, "inputTokens", "input_tokens"),
        output=_num(raw, "outputTokens", "output_tokens"),
        cache_read=_num(raw, "cacheReadTokens", "cache_read_input_tokens"),
        cache_write=_num(raw, "cacheWriteTokens", "cache_creation_input_tokens"),
    )


def _cost(raw) -> Cost:
    """A dollar figure only when cursor reports one; under the subscription it is not billed."""
    if isinstance(raw, dict):
        for key in ("totalCost", "cost"):
            value = raw.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
                return Cost(usd=float(value), source=CostSource.subscription)
    return Cost()


def _norm(model: str) -> str:
    """Display names ("Claude 4 Sonnet") and ids ("claude-4-sonnet") compared on one form."""
    return "-".join(model.strip().lower().replace("_", " ").split())


def _failed(cls: ErrorClass) -> OutcomeStatus:
    return OutcomeStatus.blocked if cls in BLOCKING else OutcomeStatus.error


# ---------------------------------------------------------------------------------------
# The per-run HOME and the invocation

#: A prompt longer than this goes on stdin (one argv string is capped at 128 KiB on Linux).
MAX_ARGV_PROMPT_BYTES = 100_000


def mcp_config(bridge: tuple[list[str], dict[str, str]]) -> dict:
    """`.cursor/mcp.json` declaring only the bridge (cli-formats §3.A shape)."""
    argv, env = bridge
    server: dict = {"command": argv[0], "args": argv[1:]}
    if env:
        server["env"] = dict(env)
    return {"mcpServers": {BRIDGE_SERVER: server}}


def compose_prompt(system: str | None, prompt: str, tool_names: tuple[str, ...]) -> str:
    """Cursor has no system-prompt flag: the contract goes first, then the task."""
    return _text.compose_prompt(system, prompt, tool_names, place="workspace", closing="Do not use the built-in file or shell tools.")


def subscription_auth_file(parent_env: dict[str, str]) -> Path | None:
    """The user's cursor login file (`~/.config/cursor/auth.json`), if there is one."""
    home = parent_env.get("HOME")
    if not home:
        return None
    path = Path(home) / ".config" / "cursor" / "auth.json"
    return path if path.is_file() else None


class CursorTransport(HarnessTransport):
    """`cursor-agent --print --output-format stream-json` with a per-run HOME. See the module docstring."""

    counts_turns = True

    def turn_event(self, event: dict) -> str | None:
        """cursor-agent's stream-json: an `assistant` message or a `tool_call` starting is the
        model's output; a `tool_call` completed is its result."""
        kind = event.get("type")
        if kind == "assistant":
            return "output"
        if kind == "tool_call":
            return "result" if event.get("subtype") == "completed" else "output"
        return None

    #: cursor's stream says nothing about MCP servers: the bridge's own trace is the only
    #: readiness signal (bridge/readiness.py bridge_listed), read after the session.
    readiness_from_trace = True

    def __init__(self, spec, settings=None, **kwargs):
        super().__init__(spec, settings, **kwargs)
        self.audit_worktree = False  # hash the worktree before/after (the run command sets it)
        self._audit = SessionAudit("cursor")

    def invocation(self, ctx: SessionContext, request, cli: Path, *, tool_less: bool) -> Invocation:
        model = request.model or self.settings.model
        if model:
            safe_model(model)  # refuse before anything is written or spawned
        home = ctx.run_dir / "home"
        for sub in (home, home / ".cursor", home / ".config", home / ".config" / "cursor"):
            sub.mkdir(mode=0o700, exist_ok=True)
        tool_names = () if tool_less else request.scope.tool_names()
        if not tool_less and ctx.spec_path is not None:
            text = json.dumps(mcp_config(bridge_command(ctx.spec_path)), indent=2) + "\n"
            _write_private(home / ".cursor" / "mcp.json", text)
            (ctx.cwd / ".cursor").mkdir(mode=0o700, exist_ok=True)
            _write_private(ctx.cwd / ".cursor" / "mcp.json", text)
        else:
            (home / ".cursor" / "mcp.json").unlink(missing_ok=True)  # a one-shot has no MCP server
        link = home / ".config" / "cursor" / "auth.json"
        if link.is_symlink() or link.exists():
            link.unlink()
        auth = subscription_auth_file(self.parent_env)
        if auth is not None:
            link.symlink_to(auth)
        argv = [str(cli), "--print", "--output-format", "stream-json", "--trust", "--workspace", str(ctx.cwd)]
        if tool_less:
            argv += ["--mode", "ask"]
        else:
            argv += ["--force", "--approve-mcps"]
        if model:
            argv.append(f"--model={safe_model(model)}")
        prompt = compose_prompt(request.system, request.prompt, tool_names)
        data = prompt.encode("utf-8")
        injections = {
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_DATA_HOME": str(home / ".local" / "share"),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "XDG_STATE_HOME": str(home / ".local" / "state"),
            "NO_OPEN_BROWSER": "1",
        }
        self._audit.before(ctx, request, worktree=self.audit_worktree)
        # Always on stdin (then EOF), whatever its size: a command line is readable by every
        # local user (/proc/<pid>/cmdline), a pipe is not (issue 30).
        return Invocation(argv=argv, injections=injections, stdin_bytes=data)

    def make_parser(self, ctx: SessionContext, request, *, tool_less: bool, on_text=None):
        from harnesscheck.backends._eventlog import EVENT_LOG_NAME, LoggedParser

        parser = CursorParser(requested_model=request.model or self.settings.model)
        parser.on_text = on_text
        return LoggedParser(parser, ctx.run_dir / EVENT_LOG_NAME)

    def after_session(self, ctx: SessionContext, outcome: AgentOutcome) -> AgentOutcome:
        link = ctx.run_dir / "home" / ".config" / "cursor" / "auth.json"
        if link.is_symlink() or link.exists():
            # The run dir outlives the session; no credential may stay in it (a CLI that
            # refreshed its token may have replaced the link with a file of its own).
            link.unlink()
        # The host's session id ties the outcome to its traces and run dir (the CLI's own
        # thread/session id stays in events.jsonl).
        outcome = outcome.model_copy(update={"session_id": ctx.session_id})
        return self._audit.after(ctx, self.spec, outcome)
