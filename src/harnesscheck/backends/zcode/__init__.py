"""zcode transport: Z.AI's GLM coding-plan CLI, headless, with the bridge over MCP.

Requirements kept here (doc/SPEC-zcode.md). zcode is not obtainable here: everything below
follows the shapes the seed implementation recorded from zcode 0.16.9
(shared/reference/seed-implementation-review.md §1.5); nothing was observed from a binary.

- argv `zcode --prompt=<fixed instruction> --attach <scratch>/PROMPT.md --output-format
  stream-json --mode plan --cwd <scratch> --disallowed-tools=<every known built-in>`. zcode
  has no stdin channel (stdin is /dev/null), and a command line is readable by every local
  user (/proc/<pid>/cmdline): so every prompt, whatever its size (system prompt, tool list,
  task), goes into PROMPT.md (0600, in the session's private scratch dir) and the argument
  carries only a fixed instruction to follow it (issue 30). Never on argv.
- cwd and `--cwd`: the session's empty scratch dir, never the worktree (a PR under review
  must not configure its reviewer); the worktree is reached only through the bridge.
- The bridge is declared in `<scratch>/.zcode/config.json` under `mcp.servers` (memory
  features off); HOME, the XDG dirs and `ZCODE_DATA_BASE_DIR` point into the run dir, so the
  user's `~/.zcode` config, memory and MCP servers are never read. Only the login file
  `<data dir>/v2/credentials.json` of the parent (its `ZCODE_DATA_BASE_DIR`, else
  `~/.zcode`) is linked in for the session, and removed after it.
- There is no `--model` flag: the model (the request's, the settings', else DEFAULT_MODEL)
  is pinned through a personal provider config file in the run dir named by
  `ZCODE_PERSONAL_PROVIDER_CONFIG_FILE`, with `options.reasoningLevel` (without it the CLI
  falls back to its first catalog model silently). The served model is
  `session.updated.payload.modelId`, compared case-sensitively with the pin, then by the
  model guard.
- The parser is pure. `result` is the terminal event (linger, then the tree is killed);
  its `response` is the answer, its `usage` the tokens. An error event (`turn.failed`,
  `error`, `request.failed`) fails the session whatever the exit code; status 429 or
  Z.AI code 1302 is rate_limit (retryable, with the CLI's own delay when it states one),
  never auth. Exit 0 without a `result` is never success.
- The built-ins are denied by name, but that list was pinned to 0.16.9: the spec claims
  `native_tools_audited`, not `builtin_tools_off`. Every `tool.updated` call is recorded
  for the audit (audit.py, cli `zcode`), whose unclean verdict ends the session
  (the base's `judge`); zcode reports no MCP status, so readiness is read from the bridge's
  own trace.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harnesscheck.backends import _text
from harnesscheck.backends._args import safe_model
from harnesscheck.backends._bounded import CallLog, TextTail
from harnesscheck.backends._errortext import classify_text
from harnesscheck.backends._eventlog import SessionAudit
from harnesscheck.backends._harness import (
    BRIDGE_SERVER,
    EventDecoder,
    HarnessTransport,
    Invocation,
    SessionContext,
    bridge_command,
    ending_outcome,
)
from harnesscheck.backends._rootcause import tail_cause
from harnesscheck.backends._text import short
from harnesscheck.contain.envpolicy import redact
from harnesscheck.contain.process import Ending, LineAction, ProcessResult
from harnesscheck.contain.rundir import write_private as _write_private  # a fresh 0600 file, never following a link
from harnesscheck.core.contracts import (
    BLOCKING,
    RETRYABLE,
    AgentOutcome,
    ErrorClass,
    ModelVerdict,
    OutcomeStatus,
    Usage,
    model_verdict,
)

#: The largest argv string this transport passes is a fixed instruction; the prompt (of any
#: size) is in PROMPT.md. (Linux caps one argv string at 128 KiB; the prompt never meets it.)
MAX_ARGV_PROMPT_BYTES = 100_000
PROMPT_FILE = "PROMPT.md"
ATTACHED_PROMPT = "Your task is in the attached PROMPT.md. Read it and follow it exactly."

#: Every built-in the references name: the seed's 0.16.9 denylist plus its read-only tools
#: (the host's tools come through the bridge; nothing native is needed).
DISALLOWED_TOOLS: tuple[str, ...] = (
    "Bash",
    "Edit",
    "Write",
    "MultiEdit",
    "NotebookEdit",
    "Agent",
    "Skill",
    "ExitPlanMode",
    "EnterPlanMode",
    "AskUserQuestion",
    "SendMessage",
    "WebFetch",
    "WebSearch",
    "CreateWorkflow",
    "AmendWorkflow",
    "SaveWorkflow",
    "EvalWorkflowSnippet",
    "ResumeWorkflowRun",
    "ResolveWorkflowQuestion",
    "TaskStop",
    "mcp__node_repl__js",
    "mcp__web_reader__webReader",
    "mcp__4_5v_mcp__analyze_image",
    "Read",
    "Grep",
    "Glob",
    "LS",
    "TodoRead",
    "TodoWrite",
    "TaskOutput",
    "ReadSessionContext",
    "ListWorkflowRuns",
    "GetWorkflowRun",
    "ListSavedWorkflows",
    "ListModels",
)

#: Error events the references name (the seed's pacer); their payload shape is unconfirmed,
#: so status, code and message are looked for anywhere inside them (bounded).
ERROR_EVENTS = frozenset({"turn.failed", "error", "request.failed"})
#: Z.AI's business code for "too many concurrent requests" (the seed's pacer: `[1302]`).
RATE_LIMIT_CODES = frozenset({"1302"})

#: The personal provider config the references show (providerId of the coding plan).
DEFAULT_PROVIDER_ID = "account:bigmodel-individual-coding-plan"
DEFAULT_REASONING_LEVEL = "max"
#: The model pinned when the host names none (the one the references' pin shows): the per-run
#: data dir hides the user's own default, and an unpinned zcode takes its first catalog model
#: without a word, so every session pins one and the served model is always judged.
DEFAULT_MODEL = "GLM-5.3-Flash"
PROVIDER_CONFIG_NAME = "zcode-provider.json"


def provider_config(model: str, *, provider_id: str = DEFAULT_PROVIDER_ID, reasoning_level: str = DEFAULT_REASONING_LEVEL) -> dict:
    """The minimal personal provider config pinning `model` (review §1.5 shape)."""
    return {
        "schemaVersion": 1,
        "config": {
            "providerConfigRules": {"providerRules": []},
            "modelConfigRules": {"providerModelRules": [], "manualProviderModelRules": []},
            "defaultModelSelection": {
                "providerId": provider_id,
                "modelId": model,
                "options": {"reasoningLevel": reasoning_level},
            },
        },
    }


def project_config(bridge: tuple[list[str], dict[str, str]] | None) -> dict:
    """`<scratch>/.zcode/config.json`: memory off, and only the bridge as MCP server."""
    servers: dict[str, Any] = {}
    if bridge is not None:
        argv, env = bridge
        server: dict[str, Any] = {"type": "stdio", "command": argv[0], "args": argv[1:]}
        if env:
            server["env"] = dict(env)
        servers[BRIDGE_SERVER] = server
    return {"features": {"memory": False}, "memory": {"use": False}, "mcp": {"servers": servers}}


def compose_prompt(system: str | None, prompt: str, tool_names: tuple[str, ...]) -> str:
    """zcode has no system-prompt flag: the contract goes first, then the task."""
    return _text.compose_prompt(system, prompt, tool_names, closing="Do not use built-in file or shell tools.")


def _walk(value: Any, depth: int = 0):
    """(key, value) pairs of a nested event payload, bounded in depth and breadth."""
    if depth > 4:
        return
    if isinstance(value, dict):
        for i, (k, v) in enumerate(value.items()):
            if i >= 50:
                break
            yield k, v
            yield from _walk(v, depth + 1)
    elif isinstance(value, list):
        for v in value[:20]:
            yield from _walk(v, depth + 1)


def error_facts(event: dict) -> tuple[int | None, str | None, str, float | None]:
    """(HTTP status, vendor code, message, retry delay s) stated anywhere in an error event."""
    status = code = None
    messages: list[str] = []
    retry = None
    for key, value in _walk(event):
        k = str(key).lower()
        if k in ("status", "statuscode", "status_code", "httpstatus") and isinstance(value, int) and not isinstance(value, bool):
            status = status or value
        elif k in ("code", "errorcode", "error_code") and isinstance(value, (int, str)) and not isinstance(value, bool):
            code = code or str(value).strip("[] ")
        elif k in ("message", "error", "text", "detail") and isinstance(value, str) and value.strip():
            messages.append(value.strip())
        elif k in ("retryafter", "retry_after", "retryafters") and isinstance(value, (int, float)) and value > 0:
            retry = float(value)
        elif k in ("retryafterms", "retry_after_ms", "retrydelayms") and isinstance(value, (int, float)) and value > 0:
            retry = round(value / 1000.0, 3)
    message = " ".join(dict.fromkeys(messages))[:2000]
    if code is None and "[" in message:
        import re

        found = re.search(r"\[(\d{3,5})\]", message)
        code = found.group(1) if found else None
    return status, code, message, retry


def error_class(status: int | None, code: str | None, message: str) -> ErrorClass:
    """429 or Z.AI 1302 -> rate_limit (before any text rule: never auth); 401/403 -> auth;
    otherwise the shared text rules, else unknown."""
    if status == 429 or (code in RATE_LIMIT_CODES):
        return ErrorClass.rate_limit
    if status in (401, 403):
        return ErrorClass.auth
    if status in (529, 503):
        return ErrorClass.overloaded
    by_text = classify_text(message)
    if by_text is not None:
        return by_text
    if status is not None and 500 <= status < 600:
        return ErrorClass.server_error
    return ErrorClass.unknown


class ZcodeParser:
    """Folds `zcode --output-format stream-json` lines into an AgentOutcome."""

    def __init__(self, *, requested_model: str | None = None, bridge_server: str = BRIDGE_SERVER):
        self.requested_model = requested_model
        self.bridge_prefix = f"mcp__{bridge_server}__"
        self.served_model: str | None = None
        self.provider_id: str | None = None
        self.deltas = TextTail()
        self.result: dict | None = None
        self.errors: list[tuple[int | None, str | None, str, float | None]] = []
        self.seen_calls: set[str] = set()
        self.calls = CallLog()
        self.turns = 0
        self.decoder = EventDecoder()
        self.on_text = None

    def feed(self, line: str) -> LineAction | None:
        event = self.decoder.decode(line)
        if event is None or self.result is not None:
            return None
        kind = event.get("type")
        payload = event.get("payload") if isinstance(event.get("payload"), dict) else {}
        if kind == "session.updated":
            if isinstance(payload.get("modelId"), str):
                self.served_model = payload["modelId"]
            if isinstance(payload.get("providerId"), str):
                self.provider_id = payload["providerId"]
        elif kind == "turn.started":
            self.turns += 1
        elif kind == "tool.updated":
            self._tool(payload)
        elif kind == "model.streaming":
            delta = payload.get("delta")
            if isinstance(delta, str) and payload.get("kind", "delta") == "delta":
                self.deltas.append(delta)
                if self.on_text is not None and delta:
                    self.on_text(delta)
        elif kind in ERROR_EVENTS:
            if len(self.errors) < 100:
                self.errors.append(error_facts(event))
        elif kind == "result":
            self.result = event
            return LineAction.TERMINAL
        return None

    def _tool(self, payload: dict) -> None:
        call_id = payload.get("toolCallId")
        if call_id is not None:
            call_id = str(call_id)
            if call_id in self.seen_calls:
                return  # counted once, on the first event naming it (scheduled normally)
            if len(self.seen_calls) < 100_000:
                self.seen_calls.add(call_id)
        name = str(payload.get("toolName") or "?")
        if name.startswith(self.bridge_prefix):
            self.calls.bridge(name[len(self.bridge_prefix) :])
        else:
            self.calls.native(name)

    # -- the outcome --------------------------------------------------------------------

    def outcome(self, result: ProcessResult) -> AgentOutcome:
        res = self.result or {}
        verdict = ModelVerdict.unverified
        if self.served_model and self.requested_model:
            if self.served_model == self.requested_model:
                verdict = ModelVerdict.match
            elif self.served_model.lower() == self.requested_model.lower():
                verdict = ModelVerdict.mismatch  # zcode matches model ids case-sensitively
            else:
                verdict = model_verdict(self.requested_model, self.served_model)
        response = res.get("response") if isinstance(res.get("response"), str) else None
        out = AgentOutcome(
            status=OutcomeStatus.ok,
            text=response if response is not None and response.strip() else self.deltas.text(),
            iterations=self.turns,
            tool_calls=self.calls.bridge_calls,
            tools_used=self.calls.tools_used,
            native_tool_calls=self.calls.native_calls,
            usage=_usage(res.get("usage")),
            requested_model=self.requested_model,
            served_model=self.served_model,
            model_verdict=verdict,
            exit_code=result.exit_code,
            signal=result.signal,
            duration_s=result.duration_s,
            terminal_event_seen=self.result is not None,
            orphan_suspected=result.orphan_suspected,
            stderr_tail=result.stderr_tail,
        )
        status, cls, message, retry = self._classify(result)
        out.status, out.error_class, out.message = status, cls, redact(message)
        out.retryable = cls in RETRYABLE if cls is not None else False
        out.retry_after_s = retry if out.retryable else None
        return out

    def _classify(self, result: ProcessResult) -> tuple[OutcomeStatus, ErrorClass | None, str, float | None]:
        notes = self._notes(result)
        if result.ending is Ending.cancelled:
            return OutcomeStatus.cancelled, None, "cancelled by the host" + notes, None
        if result.ending is Ending.oversize:
            return (
                OutcomeStatus.error,
                ErrorClass.protocol,
                f"a stdout line exceeded the {result.oversize_limit}-byte line limit (max_line_bytes)" + notes,
                None,
            )
        res = self.result
        response = res.get("response") if res is not None and isinstance(res.get("response"), str) else ""
        failed = res is not None and (res.get("isError") is True or res.get("is_error") is True or res.get("error") not in (None, "", False))
        if res is not None and not failed and response.strip():
            return OutcomeStatus.ok, None, notes.lstrip("; "), None
        if self.errors or failed:
            status, code, message, retry = self.errors[-1] if self.errors else error_facts({"result": res})
            cls = error_class(status, code, message)
            said = " ".join(p for p in (f"status {status}" if status else "", f"code {code}" if code else "") if p)
            text = short(message) or "an error event"
            return _failed(cls), cls, f"zcode reported an error ({said or 'no status'}): {text}" + notes, retry
        if result.ending is Ending.deadline and res is None:
            return OutcomeStatus.truncated, ErrorClass.timeout, "wall-clock budget reached" + notes, None
        if res is not None:
            return OutcomeStatus.error, ErrorClass.protocol, "result without an answer" + notes, None
        cause = tail_cause(result.stderr_tail)  # the root among the tail's lines (doc/SPEC-zcode.md)
        if cause is not None:
            return _failed(cause[0]), cause[0], short(cause[1]) + notes, None
        if self.decoder.malformed or result.partial_tail:
            return OutcomeStatus.error, ErrorClass.protocol, "the stream ended inside an event (no result event)" + notes, None
        fallback = ending_outcome(result, terminal_seen=False)
        assert fallback is not None
        return fallback[0], fallback[1], fallback[2] + notes, None

    def _notes(self, result: ProcessResult) -> str:
        parts = []
        if self.decoder.malformed:
            parts.append(f"{self.decoder.malformed} malformed line(s) skipped")
        if result.partial_tail:
            parts.append("truncated last line dropped")
        return "".join(f"; {p}" for p in parts)


def _usage(raw) -> Usage:
    if not isinstance(raw, dict):
        return Usage()

    def num(*keys: str) -> int:
        for key in keys:
            value = raw.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                return int(value)
        return 0

    return Usage(
        input=num("inputTokens", "input_tokens"),
        output=num("outputTokens", "output_tokens"),
        cache_read=num("cacheReadTokens", "cachedInputTokens", "cache_read_input_tokens"),
        cache_write=num("cacheWriteTokens", "cache_creation_input_tokens"),
    )


def _failed(cls: ErrorClass) -> OutcomeStatus:
    return OutcomeStatus.blocked if cls in BLOCKING else OutcomeStatus.error


def login_file(parent_env: dict[str, str]) -> Path | None:
    """The user's zcode login (`<data dir>/v2/credentials.json`; the data dir is the parent's
    ZCODE_DATA_BASE_DIR, else `~/.zcode`), if there is one."""
    base = parent_env.get("ZCODE_DATA_BASE_DIR")
    if not base:
        home = parent_env.get("HOME")
        if not home:
            return None
        base = str(Path(home) / ".zcode")
    path = Path(base) / "v2" / "credentials.json"
    return path if path.is_file() else None


class ZcodeTransport(HarnessTransport):
    """`zcode --prompt=... --output-format stream-json --mode plan`. See the module docstring."""

    #: zcode's stream says nothing about MCP servers: the bridge's own trace is the readiness signal.
    readiness_from_trace = True
    provider_id = DEFAULT_PROVIDER_ID
    reasoning_level = DEFAULT_REASONING_LEVEL
    default_model = DEFAULT_MODEL

    def requested_model(self, request) -> str:
        return request.model or self.settings.model or self.default_model

    def __init__(self, spec, settings=None, **kwargs):
        super().__init__(spec, settings, **kwargs)
        self.audit_worktree = False
        self._audit = SessionAudit("zcode")

    def invocation(self, ctx: SessionContext, request, cli: Path, *, tool_less: bool) -> Invocation:
        model = safe_model(self.requested_model(request))  # refused before anything is written or spawned
        home = ctx.run_dir / "home"
        data = home / ".zcode"
        for sub in (home, home / ".config", data, data / "v2"):
            sub.mkdir(mode=0o700, exist_ok=True)
        bridge = bridge_command(ctx.spec_path) if not tool_less and ctx.spec_path is not None else None
        (ctx.cwd / ".zcode").mkdir(mode=0o700, exist_ok=True)
        _write_private(ctx.cwd / ".zcode" / "config.json", json.dumps(project_config(bridge), indent=2) + "\n")
        link = data / "v2" / "credentials.json"
        if link.is_symlink() or link.exists():
            link.unlink()
        auth = login_file(self.parent_env)
        if auth is not None:
            link.symlink_to(auth)
        injections = {
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_DATA_HOME": str(home / ".local" / "share"),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "XDG_STATE_HOME": str(home / ".local" / "state"),
            "ZCODE_DATA_BASE_DIR": str(data),
            "NO_OPEN_BROWSER": "1",
        }
        pin = ctx.run_dir / PROVIDER_CONFIG_NAME
        _write_private(pin, json.dumps(provider_config(model, provider_id=self.provider_id, reasoning_level=self.reasoning_level), indent=2) + "\n")
        injections["ZCODE_PERSONAL_PROVIDER_CONFIG_FILE"] = str(pin)
        tool_names = () if tool_less else request.scope.tool_names()
        prompt = compose_prompt(request.system, request.prompt, tool_names)
        attached = _write_private(ctx.cwd / PROMPT_FILE, prompt)  # never on argv: /proc/<pid>/cmdline is public
        argv = [str(cli), f"--prompt={ATTACHED_PROMPT}", "--attach", str(attached)]
        argv += ["--output-format", "stream-json", "--mode", "plan", "--cwd", str(ctx.cwd), "--disallowed-tools=" + ",".join(DISALLOWED_TOOLS)]
        self._audit.before(ctx, request, worktree=self.audit_worktree)
        return Invocation(argv=argv, injections=injections)

    def make_parser(self, ctx: SessionContext, request, *, tool_less: bool, on_text=None):
        from harnesscheck.backends._eventlog import EVENT_LOG_NAME, LoggedParser

        parser = ZcodeParser(requested_model=self.requested_model(request))
        parser.on_text = on_text
        return LoggedParser(parser, ctx.run_dir / EVENT_LOG_NAME)

    def after_session(self, ctx: SessionContext, outcome: AgentOutcome) -> AgentOutcome:
        link = ctx.run_dir / "home" / ".zcode" / "v2" / "credentials.json"
        if link.is_symlink() or link.exists():
            link.unlink()  # no credential stays in the run dir, which outlives the session
        outcome = outcome.model_copy(update={"session_id": ctx.session_id})
        return self._audit.after(ctx, self.spec, outcome)
