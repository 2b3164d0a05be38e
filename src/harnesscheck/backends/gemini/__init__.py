"""Gemini CLI transport: `gemini -p -o stream-json --skip-trust -m MODEL` with the host's tools
through the MCP bridge and none of the CLI's built-ins.

Requirements kept here (doc/SPEC-gemini.md):
- argv `gemini -p "" -o stream-json --skip-trust -m <model>`: the prompt goes on stdin (then
  EOF; the CLI reads a piped stdin as the prompt), so it never becomes a flag, never shows in
  `ps` and never meets ARG_MAX. The model is always explicit and never `auto`: the `auto`
  router first calls a routing model and retried that call for a minute here when its answer
  was not the routing JSON it expects. Without `--skip-trust` a headless run exits 0 with
  only a stderr message (observed on 0.61.0): the flag is always given.
- A per-run HOME holding only our `.gemini/settings.json` (config_isolation): the user's
  `~/.gemini` (settings, OAuth tokens, GEMINI.md, extensions) is never read, and
  `context.memoryBoundaryMarkers: []` keeps the CLI from walking up from its scratch cwd for
  `GEMINI.md` files (it would go up to the nearest `.git`, e.g. a checkout holding the run dir). The settings
  select `security.auth.selectedType: gemini-api-key`, turn usage statistics, auto-update
  and its notification off, allow only the `bridge` MCP server (`mcp.allowed`), declare it
  in `mcpServers` with `trust: true` (no confirmation prompt headless), and list only the
  bridge's qualified tool names in `tools.core`, so no built-in tool is registered
  (builtin_tools_off; verified at the wire by the loopback level).
- The key: at the loopback level the endpoint's dummy key, injected explicitly
  (`GEMINI_API_KEY`, `GOOGLE_GEMINI_BASE_URL`, traced by name). Otherwise only a key the
  host program hands the transport (`api_key=`); the host environment's GEMINI_API_KEY /
  GOOGLE_API_KEY are never passed through (the env policy denies GEMINI_* and GOOGLE_*).
- The parser is pure. `result` is the terminal event; its `status` decides (`success` with
  an answer -> ok; after the CLI's loop detection ("Loop detected, stopping execution") ->
  truncated/max_turns; `error` -> the error's class, structured `error.type` before the message
  text); an exit 0 without a result event is a protocol error, never success. The served
  model is the key of `result.stats.models` (the server's `modelVersion`); usage is the
  result's stats. An auth failure is blocked and never retried.
- `general.maxAttempts: 1`: the CLI's silent retry ladder (up to 10 attempts, 5-30 s apart,
  nothing in stream-json while it waits) is off, so a 429 / 5xx ends the session at once as
  a retryable error and the host decides whether to retry.
- Readiness fails closed: the stream reports no MCP status and a bridge that never started
  only makes its tools "not found" to the model, so after a session with tools the bridge's
  own trace must show its tools listed, else blocked/mcp_unavailable (the base's `judge`).
- stdout is a file in the run dir, not a pipe (`stdout_spool`): the CLI ends with
  `process.exit()`, which drops what node still had queued for a full pipe, so a host that
  read late saw the stream end inside an event (issue #21).
- MCP tools are named `mcp_<server>_<tool>` by the CLI: `mcp_bridge_read_file` is a bridge
  call, any other `tool_use` a native one (recorded for the audit).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

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
from harnesscheck.backends._text import short
from harnesscheck.contain.envpolicy import redact
from harnesscheck.contain.process import Ending, LineAction, ProcessResult
from harnesscheck.contain.rundir import write_private as _write_private  # a fresh 0600 file, never following a link
from harnesscheck.core.contracts import (
    BLOCKING,
    RETRYABLE,
    AgentOutcome,
    ConfigError,
    Cost,
    ErrorClass,
    ModelVerdict,
    OutcomeStatus,
    Usage,
    model_verdict,
)

#: The prefix gemini-cli gives the tools of an MCP server (`mcp_<server>_<tool>`, 0.61.0).
BRIDGE_PREFIX = f"mcp_{BRIDGE_SERVER}_"

#: The model used when neither the request nor the settings name one (never `auto`).
DEFAULT_MODEL = "gemini-2.5-flash"

#: Model names that select the CLI's router instead of a model: refused.
ROUTER_MODELS = frozenset({"auto"})

#: The `error` event with which 0.61.0's loop detection ends a model that repeats a tool call
#: (observed at loopback: three identical bridge calls, then this warning and a success result
#: without an answer).
LOOP_DETECTED = "Loop detected, stopping execution"

#: How long the CLI waits for a bridge tool call (ms, the mcpServers `timeout` key).
BRIDGE_TOOL_TIMEOUT_MS = 120_000

#: `result.error.type` (the CLI's error class name) -> error class. Structured: wins over text.
ERROR_TYPES: dict[str, ErrorClass] = {
    "FatalAuthenticationError": ErrorClass.auth,
    "FatalTurnLimitedError": ErrorClass.max_turns,
}

#: google.rpc status names in error messages -> error class (the API's own vocabulary).
RPC_STATUS: tuple[tuple[str, ErrorClass], ...] = (
    ("UNAUTHENTICATED", ErrorClass.auth),
    ("PERMISSION_DENIED", ErrorClass.auth),
    ("API_KEY_INVALID", ErrorClass.auth),
    ("RESOURCE_EXHAUSTED", ErrorClass.rate_limit),
    ("UNAVAILABLE", ErrorClass.overloaded),
    ("NOT_FOUND", ErrorClass.model_unavailable),
    ("INTERNAL", ErrorClass.server_error),
)

#: Text of the CLI's own auth failures (no key, the wrong auth type), checked before the generic rules.
_AUTH_TEXT = (
    "GEMINI_API_KEY",
    "API key not valid",
    "Please set an Auth method",
    "API key",
)


#: The Gemini API's words for a prompt over the model's window (a 400 INVALID_ARGUMENT).
_CONTEXT_TEXT = re.compile(r"input token count .{0,40}exceeds the maximum number of tokens", re.IGNORECASE)
#: ... for a model it does not serve (a 404 the CLI reports without its status), and the CLI's class name for it.
_MODEL_TEXT = re.compile(r"is not found for API version|ModelNotFoundError")


def classify_gemini(error_type: str | None, message: str | None) -> ErrorClass | None:
    """The class of a gemini failure: the structured `error.type`, then the RPC status the
    message names, then the CLI's own auth wording, then the shared text rules."""
    if error_type in ERROR_TYPES:
        return ERROR_TYPES[error_type]
    text = message or ""
    if _CONTEXT_TEXT.search(text):
        return ErrorClass.context_overflow
    if _MODEL_TEXT.search(text):
        return ErrorClass.model_unavailable
    shared = classify_text(text)
    if shared in (ErrorClass.quota, ErrorClass.context_overflow, ErrorClass.mcp_unavailable):
        return shared  # a RESOURCE_EXHAUSTED that is the plan's quota; an INVALID_ARGUMENT that is the context
    for status, cls in RPC_STATUS:
        if status in text:
            return cls
    if any(marker in text for marker in _AUTH_TEXT) and (
        "invalid" in text.lower() or "must specify" in text.lower() or "not valid" in text.lower() or "set an auth" in text.lower()
    ):
        return ErrorClass.auth
    return shared


class GeminiParser:
    """Folds `gemini -p -o stream-json` lines into an AgentOutcome (pure: no I/O, no clock)."""

    def __init__(self, *, requested_model: str | None = None, bridge_prefix: str = BRIDGE_PREFIX):
        self.requested_model = requested_model
        self.bridge_prefix = bridge_prefix
        self.session_id: str | None = None
        self.init_model: str | None = None
        self.segments = TextTail(sep="\n")  # assistant text before the last tool call, per model turn
        self.current = TextTail()  # assistant text since the last tool call (deltas joined)
        self.result: dict | None = None
        self.calls = CallLog()
        self.tool_ids: set[str] = set()
        self.tool_errors = 0
        self.errors: list[str] = []  # `error` events (warnings and errors), bounded
        self.decoder = EventDecoder()
        self.on_text = None

    def feed(self, line: str) -> LineAction | None:
        event = self.decoder.decode(line)
        if event is None or self.result is not None:
            return None  # one terminal outcome; anything after it changes nothing
        kind = event.get("type")
        if kind == "init":
            if isinstance(event.get("session_id"), str):
                self.session_id = event["session_id"]
            if isinstance(event.get("model"), str):
                self.init_model = event["model"]
        elif kind == "message":
            if event.get("role") == "assistant" and isinstance(event.get("content"), str):
                self.current.append(event["content"])
                if self.on_text is not None and event["content"]:
                    self.on_text(event["content"])
        elif kind == "tool_use":
            self._tool_use(event)
        elif kind == "tool_result":
            if event.get("status") == "error":
                self.tool_errors += 1
        elif kind == "error":
            if len(self.errors) < 50:
                self.errors.append(f"{event.get('severity', 'error')}: {str(event.get('message', ''))[:500]}")
        elif kind == "result":
            self.result = event
            return LineAction.TERMINAL
        return None

    def _tool_use(self, event: dict) -> None:
        if self.current:
            self.segments.append(self.current.text())
            self.current = TextTail()
        tool_id = event.get("tool_id")
        if isinstance(tool_id, str):
            if tool_id in self.tool_ids:
                return
            if len(self.tool_ids) < 100_000:
                self.tool_ids.add(tool_id)
        name = str(event.get("tool_name") or "?")
        if name.startswith(self.bridge_prefix):
            self.calls.bridge(name[len(self.bridge_prefix) :])
        else:
            self.calls.native(name)

    # -- the outcome --------------------------------------------------------------------

    def final_text(self) -> str:
        """The answer: the assistant text after the last tool call."""
        return self.current.text() if self.current else ""

    def all_text(self) -> str:
        """Everything the assistant said (a truncated or failed session keeps it all)."""
        parts = [p for p in (self.segments.text() if self.segments else "", self.final_text()) if p]
        return "\n".join(parts)

    def served_models(self) -> list[str]:
        stats = (self.result or {}).get("stats")
        models = stats.get("models") if isinstance(stats, dict) else None
        return [k for k in models if isinstance(k, str)] if isinstance(models, dict) else []

    def _served(self) -> tuple[str | None, dict[str, Usage]]:
        """The main model (the requested one when it was served, else the only one served)
        and the usage of any other model the CLI called (helpers)."""
        stats = (self.result or {}).get("stats") or {}
        models = stats.get("models") if isinstance(stats.get("models"), dict) else {}
        keys = self.served_models()
        requested = self.requested_model or self.init_model
        main = next((k for k in keys if requested and model_verdict(requested, k) is ModelVerdict.match), None)
        if main is None and len(keys) == 1:
            main = keys[0]
        if main is None and keys:
            main = max(keys, key=lambda k: _usage(models.get(k)).output)  # the chain that answered
        helpers = {k: _usage(models.get(k)) for k in keys if k != main}
        return main, helpers

    def outcome(self, result: ProcessResult) -> AgentOutcome:
        res = self.result or {}
        served, helpers = self._served()
        requested = self.requested_model or self.init_model
        verdict = model_verdict(requested, served) if served and requested else ModelVerdict.unverified
        stats = res.get("stats") if isinstance(res.get("stats"), dict) else None
        usage = _usage(stats)
        if helpers and stats is not None and served:
            usage = _usage((stats.get("models") or {}).get(served))
        status, cls, message = self._classify(result)
        out = AgentOutcome(
            status=status,
            error_class=cls,
            retryable=cls in RETRYABLE if cls is not None else False,
            message=redact(message),
            text=self.final_text() if status is OutcomeStatus.ok else self.all_text(),
            iterations=self.segments.count + (1 if self.current else 0),
            tool_calls=self.calls.bridge_calls,
            tools_used=self.calls.tools_used,
            native_tool_calls=self.calls.native_calls,
            usage=usage,
            helper_usage=helpers,
            cost=Cost(partial=status is OutcomeStatus.truncated),
            requested_model=requested,
            served_model=served,
            model_verdict=verdict,
            session_id=self.session_id,
            exit_code=result.exit_code,
            signal=result.signal,
            duration_s=result.duration_s,
            terminal_event_seen=self.result is not None,
            orphan_suspected=result.orphan_suspected,
            stderr_tail=result.stderr_tail,
        )
        return out

    def _classify(self, result: ProcessResult) -> tuple[OutcomeStatus, ErrorClass | None, str]:
        notes = self._notes(result)
        if self.result is None:
            if result.ending is Ending.cancelled:
                return OutcomeStatus.cancelled, None, "cancelled by the host; the process tree was ended" + notes
            if result.ending is Ending.deadline:
                return OutcomeStatus.truncated, ErrorClass.timeout, "the session deadline passed; partial output kept" + notes
            if result.ending is not Ending.oversize:
                cause = self._root_of_errors(result)
                if cause is not None:
                    return _failed(cause[0]), cause[0], short(cause[1]) + notes
            if result.ending is Ending.exited and (self.decoder.malformed or result.partial_tail):
                return OutcomeStatus.error, ErrorClass.protocol, "the stream ended inside an event (no result event)" + notes
            fallback = ending_outcome(result, terminal_seen=False)
            assert fallback is not None
            return fallback[0], fallback[1], fallback[2] + notes
        res = self.result
        if res.get("status") == "success":
            loop = next((e for e in self.errors if LOOP_DETECTED in e), None)
            if loop is not None and not self.final_text().strip():
                # the CLI's own loop detection ended a model that kept calling tools: a turn cap
                return OutcomeStatus.truncated, ErrorClass.max_turns, f"the CLI stopped a tool loop ({loop})" + notes
            if not self.final_text().strip():
                return OutcomeStatus.error, ErrorClass.protocol, "result success without an answer" + notes
            return OutcomeStatus.ok, None, notes.lstrip("; ")
        error = res.get("error") if isinstance(res.get("error"), dict) else {}
        etype = str(error.get("type") or "") or None
        text = str(error.get("message") or "") or "; ".join(self.errors)
        cls = classify_gemini(etype, text) or classify_gemini(None, result.stderr_tail) or ErrorClass.unknown
        if cls is ErrorClass.max_turns:
            return OutcomeStatus.truncated, cls, short(text or "the turn cap was reached") + notes
        what = f"result status {res.get('status')!r}" + (f" ({etype})" if etype else "")
        return _failed(cls), cls, f"{what}: {short(text)}" + notes

    def _root_of_errors(self, result: ProcessResult) -> tuple[ErrorClass, str] | None:
        """No result event: the root cause (backends/_rootcause.py) among the stream's
        errors, in order, then the stderr tail's lines, each classified on its own."""
        from harnesscheck.backends._rootcause import root_cause

        lines = [line.strip() for line in (result.stderr_tail or "").splitlines() if line.strip()]
        return root_cause((classify_gemini(None, text), text) for text in [*self.errors, *lines])

    def _notes(self, result: ProcessResult) -> str:
        parts = []
        if self.decoder.malformed:
            parts.append(f"{self.decoder.malformed} malformed line(s) skipped")
        if result.partial_tail:
            parts.append("truncated last line dropped")
        if self.tool_errors:
            parts.append(f"{self.tool_errors} tool call(s) failed")
        return "".join(f"; {p}" for p in parts)


def _num(raw: dict, key: str) -> int:
    value = raw.get(key)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else 0


def _usage(raw) -> Usage:
    """result.stats (or one stats.models entry) -> Usage: `input` is the uncached input
    (`input_tokens` minus `cached` where `input` is absent), `cached` is cache read."""
    if not isinstance(raw, dict):
        return Usage()
    cached = _num(raw, "cached")
    uncached = _num(raw, "input") if "input" in raw else max(0, _num(raw, "input_tokens") - cached)
    return Usage(input=uncached, output=_num(raw, "output_tokens"), cache_read=cached)


def _failed(cls: ErrorClass) -> OutcomeStatus:
    return OutcomeStatus.blocked if cls in BLOCKING else OutcomeStatus.error


# ---------------------------------------------------------------------------------------
# The per-run HOME, settings.json and the invocation


def check_model(model: str) -> str:
    """One plain model id; `auto` (the router) is refused before anything runs."""
    safe_model(model)
    if model.strip().lower() in ROUTER_MODELS:
        raise ConfigError(
            f"model {model!r} selects gemini's router, which first calls a routing model (and retried it for a minute when the answer was not routing JSON)",
            "name a model, e.g. HARNESS_BACKEND_MODEL=gemini-2.5-flash",
        )
    return model


def bridge_tool_names(tools: tuple[str, ...] | list[str]) -> list[str]:
    """The names gemini-cli gives the bridge's tools (`mcp_bridge_<tool>`)."""
    return [f"{BRIDGE_PREFIX}{name}" for name in tools]


#: gemini loads `GEMINI.md` from its cwd up to the nearest directory holding a boundary marker
#: (default `.git`), every one on the way (0.61.0, core memoryDiscovery.ts). An empty marker
#: list stops the walk at the cwd, which is the session's empty scratch dir.
CONTEXT_FILES_OFF = {"memoryBoundaryMarkers": []}


def render_settings(bridge: tuple[list[str], dict[str, str]] | None, tool_names: tuple[str, ...]) -> dict:
    """The whole `$HOME/.gemini/settings.json` of one session.

    `tools.core` is an allow-list of built-ins: naming only the bridge's tools registers no
    built-in at all (0.61.0 offered 8 by default). With no tools (a one-shot) it names a tool
    that does not exist, for the same effect."""
    settings: dict = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": False},
        # maxAttempts 1: a 429 / 5xx ends the session at once, retryable, and the host decides
        # (the CLI's own ladder is up to 10 attempts, 5-30 s apart, silent in stream-json)
        "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False, "maxAttempts": 1},
        "telemetry": {"enabled": False},
        "tools": {"core": bridge_tool_names(tool_names) or ["harnesscheck_no_builtin_tools"]},
        "mcp": {"allowed": [BRIDGE_SERVER] if bridge is not None else []},
        # no parent walk for GEMINI.md: only the (empty) scratch cwd is searched, wherever the
        # run dir sits (the global ~/.gemini/GEMINI.md cannot exist in the per-run HOME)
        "context": dict(CONTEXT_FILES_OFF),
    }
    if bridge is not None:
        argv, env = bridge
        server: dict = {"command": argv[0], "args": argv[1:], "trust": True, "timeout": BRIDGE_TOOL_TIMEOUT_MS}
        if env:
            server["env"] = dict(env)
        settings["mcpServers"] = {BRIDGE_SERVER: server}
    return settings


def compose_prompt(system: str | None, prompt: str, tool_names: tuple[str, ...]) -> str:
    """No system-prompt channel is used (GEMINI_SYSTEM_MD would replace the CLI's whole
    system prompt): the contract goes first, then the task."""
    return _text.compose_prompt(system, prompt, bridge_tool_names(tool_names), place="workspace")


class GeminiTransport(HarnessTransport):
    """`gemini -p` with a per-run HOME. See the module docstring."""

    counts_turns = True

    def turn_event(self, event: dict) -> str | None:
        """gemini's stream-json: an assistant `message` or a `tool_use` is the model's output, a
        `tool_result` ends the turn's tools."""
        kind = event.get("type")
        if kind == "tool_result":
            return "result"
        if kind == "tool_use" or (kind == "message" and event.get("role") == "assistant"):
            return "output"
        return None

    #: The CLI relaunches itself in a second node process (for a heap of half the RAM) unless
    #: told not to: that doubled its start-up here (`--version`: 24 s against 13 s on a loaded
    #: 2-core machine). A headless session needs no bigger heap than node's default.
    base_injections = {"GEMINI_CLI_NO_RELAUNCH": "true"}

    #: gemini's stream says nothing about its MCP servers, and a bridge that failed to start
    #: only makes its tools "not found": the bridge's own trace is the readiness signal
    #: (bridge/readiness.py bridge_listed), read after the session (base `judge`).
    readiness_from_trace = True

    #: gemini ends a headless session with `process.exit()`, which drops the stdout writes node
    #: still has queued for a full pipe (64 KiB): when the host read late (a loaded machine), the
    #: stream ended inside an event (issue #21: selection.huge-folded-prompt-not-in-argv, whose
    #: 200 KB prompt the CLI echoes in a `message{role:user}` line, and scope.large-result-bounded,
    #: whose result it echoes in `tool_result`). Its stdout is a file in the run dir instead, which
    #: node writes synchronously: nothing is lost however late the host reads.
    stdout_spool = True

    #: Tool results stay below 32 KiB (the model still sees the truncation marker): 0.61.0
    #: echoes each result whole in a stream-json `tool_result` line, and a smaller stream is
    #: cheaper for the host to read. (This cap was first a work-around for the loss above.)
    result_cap = 32 * 1024

    def __init__(self, spec, settings=None, *, loopback=None, api_key: str | None = None, **kwargs):
        """`loopback`: a harnesscheck.loopback.LoopbackEndpoint; the session then talks to that
        scripted server with its dummy key. `api_key`: the Gemini API key a host program hands
        the transport for a real session (never read from the host environment)."""
        if loopback is not None:
            from harnesscheck.backends.loopback_endpoint import gemini_env

            kwargs["injections"] = {**dict(kwargs.get("injections") or {}), **gemini_env(loopback)}
        elif api_key:
            kwargs["injections"] = {**dict(kwargs.get("injections") or {}), "GEMINI_API_KEY": api_key}
        super().__init__(spec, settings, **kwargs)
        self.loopback = loopback
        self.audit_worktree = False  # hash the worktree before/after (the run command sets it)
        self._audit = SessionAudit("gemini")

    def model_for(self, request) -> str:
        return check_model(request.model or self.settings.model or DEFAULT_MODEL)

    def invocation(self, ctx: SessionContext, request, cli: Path, *, tool_less: bool) -> Invocation:
        from harnesscheck.contain.envpolicy import config_home

        model = self.model_for(request)  # refused before anything is written or spawned
        _, home = config_home(ctx.run_dir, "HOME")
        gemini_dir = Path(home) / ".gemini"
        gemini_dir.mkdir(mode=0o700, exist_ok=True)
        tool_names = () if tool_less else request.scope.tool_names()
        bridge = None if tool_less or ctx.spec_path is None else bridge_command(ctx.spec_path)
        text = json.dumps(render_settings(bridge, tool_names), indent=2) + "\n"
        _write_private(gemini_dir / "settings.json", text)
        argv = [str(cli), "-p", "", "-o", "stream-json", "--skip-trust", "-m", model]
        prompt = compose_prompt(request.system, request.prompt, tool_names)
        injections = {
            "HOME": home,
            "XDG_CONFIG_HOME": str(Path(home) / ".config"),
            "XDG_CACHE_HOME": str(Path(home) / ".cache"),
            "XDG_DATA_HOME": str(Path(home) / ".local" / "share"),
            "XDG_STATE_HOME": str(Path(home) / ".local" / "state"),
            "NO_BROWSER": "true",
        }
        self._audit.before(ctx, request, worktree=self.audit_worktree)
        return Invocation(argv=argv, injections=injections, stdin_bytes=prompt.encode("utf-8"))

    def make_parser(self, ctx: SessionContext, request, *, tool_less: bool, on_text=None):
        from harnesscheck.backends._eventlog import EVENT_LOG_NAME, LoggedParser

        parser = GeminiParser(requested_model=self.model_for(request))
        parser.on_text = on_text
        return LoggedParser(parser, ctx.run_dir / EVENT_LOG_NAME)

    def after_session(self, ctx: SessionContext, outcome: AgentOutcome) -> AgentOutcome:
        outcome = outcome.model_copy(update={"session_id": ctx.session_id})
        return self._audit.after(ctx, self.spec, outcome)
