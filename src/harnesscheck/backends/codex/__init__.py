"""Codex transport: `codex exec --json` with the host's tools through the MCP bridge.

Requirements kept here (doc/SPEC-codex.md):
- argv `codex exec --json --sandbox read-only --skip-git-repo-check [-m MODEL] -`: the prompt
  goes on stdin (then EOF), so it can never become a flag, never shows in `ps`, and never
  hits ARG_MAX; no other stdin is ever attached.
- A per-run `CODEX_HOME` holding only our `config.toml` (the bridge as a required MCP server,
  web search off, `project_doc_max_bytes = 0` so no `AGENTS.md` from the scratch cwd up to a
  git root is loaded) and, when the user has a ChatGPT login, a link to their `auth.json` and
  nothing else of `~/.codex`. An `auth.json` that holds an API key is never linked.
- Codex has no system-prompt channel: the contract is prepended to the prompt. No turn cap
  either: only the wall-clock budget ends a runaway session.
- The parser is pure (lines in, AgentOutcome out). Terminal events are `turn.completed` /
  `turn.failed`; top-level `error` events before them are retry notices, and
  `item.completed{type:error}` items are warnings, never failures by themselves. A 401
  reconnect notice or a bridge start-up failure stops the session at once; a 429 / 529 /
  5xx retry notice stops it at the `retry_stop_after`-th one (retryable; the host decides).
- A built-in call codex refused, seen only in its rollout file, is listed in
  native_tool_calls and makes the audit unclean (`native_tool_attempted`).
- Codex reports no model id and no cost: the served model is unverified unless the stream
  says the model was rerouted; cost is none.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
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
from harnesscheck.backends._text import short
from harnesscheck.contain.envpolicy import redact
from harnesscheck.contain.process import Ending, LineAction, ProcessResult
from harnesscheck.contain.rundir import write_private as _write_private  # a fresh 0600 file, never following a link
from harnesscheck.core.contracts import (
    BLOCKING,
    RETRYABLE,
    AgentOutcome,
    Cost,
    ErrorClass,
    ModelVerdict,
    OutcomeStatus,
    Usage,
    model_verdict,
)

BRIDGE_SERVER = "bridge"

#: Item types that are codex built-in tools (recorded for the audit; no config key removes
#: the shell or patch tools, see observed-real-clis.md).
NATIVE_ITEM_TYPES = ("command_execution", "file_change", "web_search", "collab_tool_call", "image_view")

#: Built-in tools still offered with our config (BUILTINS_OFF_TOML below; measured on
#: 0.171.0 by the loopback level): the MCP resource tools, and by model either
#: `apply_patch` + `tool_search` (gpt-5.x) or code-mode `exec`/`wait`. Reported for the audit.
NATIVE_TOOLS_REMAINING = (
    "list_mcp_resources",
    "list_mcp_resource_templates",
    "read_mcp_resource",
    "apply_patch",
    "tool_search",
    "exec",
    "wait",
)

BRIDGE_STARTUP_TIMEOUT_S = 30
BRIDGE_TOOL_TIMEOUT_S = 120

_RECONNECT = re.compile(r"^Reconnecting\.\.\.\s*(\d+)\s*/\s*(\d+)")
#: A retry notice of codex's reconnect ladder (or its end): "Reconnecting... 1/5 (...)",
#: "exceeded retry limit, last status: 429 Too Many Requests".
_RETRY_NOTICE = re.compile(r"^Reconnecting\.\.\.|exceeded retry limit", re.IGNORECASE)
#: "Reconnecting... 2/5": the retry codex is about to make is its Nth, i.e. request N+1.
_RECONNECT_COUNT = re.compile(r"^Reconnecting\.\.\.\s*(\d+)/\d+")
#: The HTTP status a retry notice names (structured enough to win over the prose).
_NOTICE_STATUS = re.compile(r"(?:last status|unexpected status|status code|status)[:\s]+(\d{3})\b", re.IGNORECASE)
_RETRY_AFTER = re.compile(r"(?:retry[- ]after|try again in)[:=\s]*(\d+(?:\.\d+)?)\s*(ms|milliseconds?|s|sec(?:ond)?s?)?\b", re.IGNORECASE)
#: HTTP status -> class for retry notices (the transient ones; 401 is auth, handled first).
_TRANSIENT_STATUS = {429: ErrorClass.rate_limit, 529: ErrorClass.overloaded, 503: ErrorClass.overloaded}
_TRANSIENT = (ErrorClass.rate_limit, ErrorClass.overloaded, ErrorClass.server_error)
_REROUTE = re.compile(r"^model rerouted:\s*(\S+)\s*->\s*(\S+)")
_MCP_WARNING = re.compile(r"MCP (?:client|server)|mcp_servers?|required MCP", re.IGNORECASE)


# ---------------------------------------------------------------------------------------
# The pure parser


class CodexParser:
    """Folds `codex exec --json` lines into an AgentOutcome. No I/O, no clock."""

    def __init__(
        self,
        *,
        requested_model: str | None = None,
        bridge_server: str = BRIDGE_SERVER,
        retry_stop_after: int | None = 1,
    ):
        """`retry_stop_after`: stop at the Nth retry notice for a transient failure (429 /
        529 / 5xx) and report it retryable, so the host (not codex's ~30 s reconnect
        ladder) decides whether to retry; None lets the ladder run to its own end."""
        self.requested_model = requested_model
        self.retry_stop_after = retry_stop_after
        self.transient_notices = 0
        self.retrying: tuple[ErrorClass, str] | None = None  # a transient failure codex was still retrying
        self.retry_after_s: float | None = None
        #: `retry` events for the host (set by the harness base): each transient retry notice
        self.retry_notice: Callable[..., object] = lambda **fields: None
        self.bridge_server = bridge_server
        self.thread_id: str | None = None
        self.turns = 0
        self.messages = TextTail(sep="\n\n")  # every agent message (bounded), for partial text
        self.last_message: str | None = None
        self.usage = Usage()
        self.terminal: str | None = None  # "completed" | "failed"
        self.failure: str = ""
        self.errors: list[str] = []  # top-level error messages, in order
        self.warnings: list[str] = []  # item.completed{type:error} messages
        self.early: ErrorClass | None = None
        self.early_message = ""
        self.rerouted_to: str | None = None
        self.open_items: set[str] = set()  # tool items started and not yet completed
        self.calls = CallLog()
        self.bridge_errors = 0
        self.decoder = EventDecoder()
        self.on_text = None  # optional callback: each agent message as it completes

    # -- lines --------------------------------------------------------------------------

    def feed(self, line: str) -> LineAction | None:
        """One stdout line. Returns TERMINAL on turn.completed/turn.failed, STOP to end now."""
        event = self.decoder.decode(line)
        if event is None:
            return None
        if self.terminal is not None:
            return None  # exactly one terminal outcome: later lines change nothing
        kind = event.get("type")
        if kind == "thread.started":
            if isinstance(event.get("thread_id"), str):
                self.thread_id = event["thread_id"]
        elif kind == "turn.started":
            self.turns += 1
        elif kind in ("item.started", "item.updated", "item.completed"):
            self.retrying = None  # the model answered: an earlier retry is over
            item = event.get("item")
            if isinstance(item, dict):
                return self._item(item, completed=kind == "item.completed")
        elif kind == "turn.completed":
            self.usage = self.usage + _usage(event.get("usage"))
            self.terminal = "completed"
            return LineAction.TERMINAL
        elif kind == "turn.failed":
            err = event.get("error")
            self.failure = str(err.get("message", "")) if isinstance(err, dict) else str(err or "")
            self.terminal = "failed"
            return LineAction.TERMINAL
        elif kind == "error":
            return self._error(str(event.get("message", "")))
        return None

    def _item(self, item: dict, *, completed: bool) -> LineAction | None:
        itype = item.get("type")
        item_id = str(item.get("id", ""))
        if itype == "agent_message" and completed:
            if isinstance(item.get("text"), str):
                self.messages.append(item["text"])
                self.last_message = item["text"]
                if self.on_text is not None:
                    self.on_text(item["text"])
        elif itype == "error" and completed:
            message = str(item.get("message", ""))
            self.warnings.append(message)
            reroute = _REROUTE.match(message)
            if reroute:
                self.rerouted_to = reroute.group(2)
            elif _MCP_WARNING.search(message) and self.bridge_server in message:
                return self._stop(ErrorClass.mcp_unavailable, message)
        elif itype == "mcp_tool_call":
            first = self._first_sight(item_id, completed)
            server, tool = str(item.get("server", "")), str(item.get("tool", ""))
            if server == self.bridge_server:
                if first:
                    self.calls.bridge(tool)
                if completed and (item.get("error") or item.get("status") == "failed"):
                    self.bridge_errors += 1
            elif first:
                self.calls.native(f"mcp:{server}/{tool}")
        elif itype in NATIVE_ITEM_TYPES:
            if self._first_sight(item_id, completed):
                self.calls.native(str(itype))
        return None

    def _first_sight(self, item_id: str, completed: bool) -> bool:
        """True the first time a tool item is seen (started, updated or completed); the id is
        forgotten at completion, so memory holds only the items in flight."""
        first = item_id not in self.open_items
        if completed:
            self.open_items.discard(item_id)
        elif first and len(self.open_items) < 100_000:
            self.open_items.add(item_id)
        return first

    def _error(self, message: str) -> LineAction | None:
        self.errors.append(message)
        cls = classify_text(message)
        if _RECONNECT.match(message) and cls is ErrorClass.auth:
            # Codex would retry a 401 five times (~7-20 s) before failing: block now.
            return self._stop(ErrorClass.auth, message)
        if cls is ErrorClass.mcp_unavailable:
            return self._stop(cls, message)
        if _RETRY_NOTICE.search(message):
            notice = notice_class(message)
            if notice is ErrorClass.quota:
                return self._stop(notice, message)  # the plan's limit: retrying cannot help
            if notice in _TRANSIENT:
                self.transient_notices += 1
                self.retrying = (notice, message)
                self.retry_after_s = notice_retry_after(message) or self.retry_after_s
                counted = _RECONNECT_COUNT.match(message)
                self.retry_notice(attempt=int(counted[1]) + 1 if counted else None, wait_s=notice_retry_after(message), error_class=notice.value)
                if self.retry_stop_after is not None and self.transient_notices >= self.retry_stop_after:
                    # Codex's ladder would take ~26-36 s: report it now, the host decides.
                    return self._stop(notice, message)
        return None

    def _stop(self, cls: ErrorClass, message: str) -> LineAction:
        if self.early is None:
            self.early, self.early_message = cls, message
        return LineAction.STOP

    # -- the outcome --------------------------------------------------------------------

    def final_text(self) -> str:
        """The last agent message when the turn completed; every message so far otherwise."""
        if self.terminal == "completed":
            return self.last_message or ""
        return self.messages.text()

    def outcome(self, result: ProcessResult) -> AgentOutcome:
        """The normalized outcome. Precedence: early stop, host endings (deadline, cancel,
        oversize), the terminal event, then the stderr tail and exit code."""
        served = self.rerouted_to
        verdict = model_verdict(self.requested_model, served) if served else ModelVerdict.unverified
        if served and not self.requested_model:
            verdict = ModelVerdict.mismatch  # rerouted away from the CLI's default
        out = AgentOutcome(
            status=OutcomeStatus.ok,
            text=self.final_text(),
            iterations=self.turns,
            tool_calls=self.calls.bridge_calls,
            tools_used=self.calls.tools_used,
            native_tool_calls=self.calls.native_calls,
            usage=self.usage,
            cost=Cost(),
            requested_model=self.requested_model,
            served_model=served,
            model_verdict=verdict,
            session_id=self.thread_id,
            exit_code=result.exit_code,
            signal=result.signal,
            duration_s=result.duration_s,
            terminal_event_seen=self.terminal is not None,
            orphan_suspected=result.orphan_suspected,
            stderr_tail=result.stderr_tail,
        )
        status, cls, message = self._classify(result)
        out.status, out.error_class, out.message = status, cls, redact(message)
        out.retryable = cls in RETRYABLE if cls is not None else False
        if out.retryable and cls in _TRANSIENT:
            out.retry_after_s = self.retry_after_s
        if status is not OutcomeStatus.ok:
            out.cost = Cost(partial=status is OutcomeStatus.truncated)
        return out

    def _classify(self, result: ProcessResult) -> tuple[OutcomeStatus, ErrorClass | None, str]:
        notes = self._notes(result)
        if self.early is not None and result.ending is Ending.early_stop:
            return _failed(self.early), self.early, short(self.early_message) + notes
        if result.ending is Ending.cancelled:
            return OutcomeStatus.cancelled, None, "cancelled by the host" + notes
        if result.ending is Ending.deadline and self.terminal is None:
            return self._classify_deadline(notes)
        if result.ending is Ending.oversize:
            limit = result.oversize_limit
            return (
                OutcomeStatus.error,
                ErrorClass.protocol,
                f"a stdout line exceeded the {limit}-byte line limit (max_line_bytes)" + notes,
            )
        if self.terminal == "completed":
            if not self.messages:
                return OutcomeStatus.error, ErrorClass.protocol, "turn completed without an agent message" + notes
            return OutcomeStatus.ok, None, notes.lstrip("; ")
        if self.terminal == "failed":
            text = self.failure or (self.errors[-1] if self.errors else "")
            cls = classify_text(self.failure) or classify_text(self.errors[-1] if self.errors else "")
            cls = cls or ErrorClass.unknown
            if cls in (ErrorClass.budget, ErrorClass.max_turns):
                return OutcomeStatus.truncated, cls, short(text) + notes
            return _failed(cls), cls, short(text) + notes
        # No terminal event: the process ended (or was killed) mid-turn.
        cause = self._root_of_errors(result)
        if cause is not None:
            return _failed(cause[0]), cause[0], short(cause[1]) + notes
        if self.decoder.malformed or result.partial_tail:
            return OutcomeStatus.error, ErrorClass.protocol, "the stream ended inside an event (no terminal event)" + notes
        fallback = ending_outcome(result, terminal_seen=False)
        assert fallback is not None
        return fallback[0], fallback[1], fallback[2] + notes

    def _classify_deadline(self, notes: str) -> tuple[OutcomeStatus, ErrorClass | None, str]:
        """The deadline passed with no terminal event: a transient failure codex was still
        retrying is the root cause (the ladder ran into the deadline), else the timeout."""
        if self.retrying is not None:
            cls, message = self.retrying
            return _failed(cls), cls, short(message) + "; codex was still retrying when the wall-clock budget was reached" + notes
        return OutcomeStatus.truncated, ErrorClass.timeout, "wall-clock budget reached" + notes

    def _root_of_errors(self, result: ProcessResult) -> tuple[ErrorClass, str] | None:
        """The process ended without a terminal event: the root cause (backends/_rootcause.py)
        among the stream's top-level errors, in order, then the stderr tail's lines."""
        from harnesscheck.backends._rootcause import root_cause, text_signals

        return root_cause([*((classify_text(e), e) for e in self.errors), *text_signals(result.stderr_tail)])

    def _notes(self, result: ProcessResult) -> str:
        parts = []
        if self.warnings:
            parts.append(f"{len(self.warnings)} warning(s): {short(self.warnings[0], 120)}")
        if self.decoder.malformed:
            parts.append(f"{self.decoder.malformed} malformed line(s) skipped")
        if result.partial_tail:
            parts.append("truncated last line dropped")
        if self.rerouted_to:
            parts.append(f"model rerouted to {self.rerouted_to}")
        return "".join(f"; {p}" for p in parts)


def notice_class(message: str) -> ErrorClass | None:
    """The class of a retry notice: the HTTP status it names first (429 rate_limit, 529/503
    overloaded, other 5xx server_error), unless the text says quota / usage limit; then
    the message patterns."""
    text_cls = classify_text(message)
    if text_cls is ErrorClass.quota:
        return text_cls
    match = _NOTICE_STATUS.search(message)
    if match:
        status = int(match.group(1))
        if status in _TRANSIENT_STATUS:
            return _TRANSIENT_STATUS[status]
        if 500 <= status < 600:
            return ErrorClass.server_error
    return text_cls


def notice_retry_after(message: str) -> float | None:
    """Seconds a notice says to wait ("retry-after: 7", "try again in 1.5s"), or None."""
    match = _RETRY_AFTER.search(message)
    if not match:
        return None
    value = float(match.group(1))
    unit = (match.group(2) or "s").lower()
    return round(value / 1000.0, 3) if unit.startswith("m") else value


def _usage(raw) -> Usage:
    """turn.completed usage -> Usage. OpenAI counts cached input inside input_tokens and
    reasoning inside output_tokens: input is the uncached part; reasoning is informative."""
    if not isinstance(raw, dict):
        return Usage()

    def num(key: str) -> int:
        value = raw.get(key)
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else 0

    cached = num("cached_input_tokens")
    return Usage(
        input=max(0, num("input_tokens") - cached),
        cache_read=cached,
        cache_write=num("cache_write_input_tokens"),
        output=num("output_tokens"),
        reasoning=num("reasoning_output_tokens"),
    )


def _failed(cls: ErrorClass) -> OutcomeStatus:
    return OutcomeStatus.blocked if cls in BLOCKING else OutcomeStatus.error


# ---------------------------------------------------------------------------------------
# The per-run CODEX_HOME and the invocation


def toml_string(value: str) -> str:
    """A TOML basic string. JSON escapes are valid TOML escapes once non-ASCII stays literal
    (json would write astral characters as surrogate pairs, which TOML rejects); DEL, a
    control character TOML forbids raw and json leaves alone, is escaped too."""
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def toml_array(values: list[str]) -> str:
    return "[" + ", ".join(toml_string(v) for v in values) + "]"


#: Tables that take vendor built-ins off the wire (measured on codex 0.171.0 against a
#: scripted server; doc/SPEC-loopback.md). Still offered afterwards: the three MCP
#: resource tools (registered whenever any MCP server is configured) and, by model,
#: `apply_patch` + `tool_search` (gpt-5.x) or code-mode `exec`/`wait` (the default model;
#: its JS reaches tools only through the same router, i.e. the bridge). The audit covers them.
BUILTINS_OFF_TOML = """\
[features]
shell_tool = false
unified_exec = false
view_image = false
goals = false
apps = false
image_generation = false
tool_suggest = false
request_permissions_tool = false
standalone_web_search = false
code_mode = false
sleep_tool = false
send_message_to_user_async = false
skill_search = false
plugins = false
browser_use = false
computer_use = false
hooks = false

[agents]
enabled = false

[tools.experimental_request_user_input]
enabled = false

[tools.update_plan]
enabled = false
"""

#: No metrics: codex exec's analytics are on by default, and its metrics exporter looks its
#: vendor's host up in every session (seen with strace at the loopback level: a DNS query from
#: the sandbox, a network call outside 127.0.0.1). The key is codex's own (`[analytics]
#: enabled = false`, printed in its help for `analytics_default_enabled`).
ANALYTICS_OFF_TOML = """\
[analytics]
enabled = false
"""


#: No project instructions: codex would otherwise read `AGENTS.md` (and `AGENTS.override.md`) in
#: every directory from the nearest `.git` above its cwd down to the cwd, and the scratch cwd
#: sits in the run dir, which a host may keep inside a checkout. The global
#: `$CODEX_HOME/AGENTS.md` cannot exist: the per-run CODEX_HOME holds only our files.
PROJECT_DOCS_OFF_TOML = "project_doc_max_bytes = 0"


def render_config(
    *,
    bridge: tuple[list[str], dict[str, str]] | None,
    bridge_tools: tuple[str, ...] = (),
    extra_toml: str = "",
    top_toml: str = "",
) -> str:
    """config.toml for one session: the bridge as a required MCP server, web search off, no
    project AGENTS.md loaded, no analytics.

    Only keys the references document are used (cli-formats §2.A): `web_search`,
    `approval_policy`, `project_doc_max_bytes` (0: codex reads no `AGENTS.md` from its cwd up
    to a git root, wherever the run dir sits; codex-rs agents_md.rs), and
    `[mcp_servers.<name>]` with `command`, `args`, `env`, `required`, `startup_timeout_sec`,
    `tool_timeout_sec`, `enabled_tools`, `default_tools_approval_mode`.
    """
    lines = [
        "# Written by harnesscheck for one session (doc/SPEC-codex.md). Not the user's config.",
        'web_search = "disabled"',
        'approval_policy = "never"',
        PROJECT_DOCS_OFF_TOML,
    ]
    if top_toml.strip():
        lines.append(top_toml.strip())  # top-level keys must precede every [table]
    lines += ["", BUILTINS_OFF_TOML.strip(), "", ANALYTICS_OFF_TOML.strip()]
    if bridge is not None:
        argv, env = bridge
        lines += [
            "",
            f"[mcp_servers.{BRIDGE_SERVER}]",
            f"command = {toml_string(argv[0])}",
            f"args = {toml_array(argv[1:])}",
            "required = true",
            f"startup_timeout_sec = {BRIDGE_STARTUP_TIMEOUT_S}",
            f"tool_timeout_sec = {BRIDGE_TOOL_TIMEOUT_S}",
            f"enabled_tools = {toml_array(list(bridge_tools))}",
            'default_tools_approval_mode = "approve"',
        ]
        if env:
            pairs = ", ".join(f"{toml_string(k)} = {toml_string(v)}" for k, v in sorted(env.items()))
            lines.append(f"env = {{ {pairs} }}")
    if extra_toml.strip():
        lines += ["", "# loopback / caller additions", extra_toml.strip()]
    return "\n".join(lines) + "\n"


def user_codex_home(parent_env: dict[str, str]) -> Path | None:
    """Where the user's own codex state lives (read only to find auth.json)."""
    if parent_env.get("CODEX_HOME"):
        return Path(parent_env["CODEX_HOME"])
    if parent_env.get("HOME"):
        return Path(parent_env["HOME"]) / ".codex"
    return None


def subscription_auth_file(parent_env: dict[str, str]) -> Path | None:
    """The user's ChatGPT-login auth.json, or None (absent, unreadable, or an API-key login:
    an API key is never handed to a session, whatever file it sits in)."""
    home = user_codex_home(parent_env)
    if home is None:
        return None
    path = home / "auth.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    if str(data.get("auth_mode", "")).lower().replace("_", "") in ("apikey", "api"):
        return None
    if data.get("OPENAI_API_KEY") and not data.get("tokens"):
        return None
    return path if data.get("tokens") else None


def compose_prompt(system: str | None, prompt: str, tool_names: tuple[str, ...]) -> str:
    """Codex has no system-prompt channel: the contract goes first, then the task."""
    return _text.compose_prompt(system, prompt, tool_names)


class CodexTransport(HarnessTransport):
    """`codex exec --json` with a per-run CODEX_HOME. See the module docstring."""

    counts_turns = True

    def turn_event(self, event: dict) -> str | None:
        """codex exec --json: an item the model produced (its message, reasoning, or a tool call
        starting) is output; a tool call's completed item is its result."""
        if event.get("type") not in ("item.started", "item.completed"):
            return None
        item = event.get("item") if isinstance(event.get("item"), dict) else {}
        kind = item.get("type")
        if kind in ("agent_message", "reasoning"):
            return "output"
        if kind in ("mcp_tool_call", "command_execution", "file_change", "web_search"):
            return "output" if event["type"] == "item.started" else "result"
        return None

    def __init__(self, spec, settings=None, *, extra_config_toml: str = "", loopback=None, retry_stop_after: int | None = 1, **kwargs):
        """`loopback`: a harnesscheck.loopback.LoopbackEndpoint. The session then talks to that
        scripted server on 127.0.0.1 through a provider in the per-run config.toml, with a
        dummy key injected explicitly; no login is linked. `retry_stop_after`: see CodexParser."""
        super().__init__(spec, settings, **kwargs)
        self.retry_stop_after = retry_stop_after
        self.extra_config_toml = extra_config_toml
        self.audit_worktree = False  # hash the worktree before/after (the run command sets it)
        self._audit = SessionAudit("codex")
        self.loopback = loopback

    def invocation(self, ctx: SessionContext, request, cli: Path, *, tool_less: bool) -> Invocation:
        from harnesscheck.contain.envpolicy import config_home

        model = request.model or self.settings.model
        if model:
            safe_model(model)  # refuse before anything is written or spawned
        _, codex_home = config_home(ctx.run_dir, "CODEX_HOME")
        home = Path(codex_home)
        tool_names = () if tool_less else request.scope.tool_names()
        bridge = None if tool_less or ctx.spec_path is None else bridge_command(ctx.spec_path)
        top, extra, injections = "", self.extra_config_toml, {}
        if self.loopback is not None:
            from harnesscheck.backends.loopback_endpoint import codex_env, codex_provider_table, codex_provider_top

            top = codex_provider_top(self.loopback)
            extra = codex_provider_table(self.loopback) + "\n" + extra
            injections = codex_env(self.loopback)
        config = render_config(bridge=bridge, bridge_tools=tool_names, extra_toml=extra, top_toml=top)
        _write_private(home / "config.toml", config)
        auth = None if self.loopback is not None else subscription_auth_file(self.parent_env)
        link = home / "auth.json"
        if link.is_symlink() or link.exists():
            link.unlink()
        if auth is not None:
            link.symlink_to(auth)
        user_home = ctx.run_dir / "home"
        user_home.mkdir(mode=0o700, exist_ok=True)
        argv = [str(cli), "exec", "--json", "--sandbox", "read-only", "--skip-git-repo-check"]
        if model:
            argv.append(f"--model={safe_model(model)}")
        argv.append("-")  # the prompt comes on stdin, then EOF
        prompt = compose_prompt(request.system, request.prompt, tool_names)
        self._audit.before(ctx, request, worktree=self.audit_worktree)
        return Invocation(
            argv=argv,
            injections={"CODEX_HOME": str(home), "HOME": str(user_home), **injections},
            stdin_bytes=prompt.encode("utf-8"),
        )

    def make_parser(self, ctx: SessionContext, request, *, tool_less: bool, on_text=None):
        from harnesscheck.backends._eventlog import EVENT_LOG_NAME, LoggedParser

        parser = CodexParser(requested_model=request.model or self.settings.model, retry_stop_after=self.retry_stop_after)
        parser.on_text = on_text
        return LoggedParser(parser, ctx.run_dir / EVENT_LOG_NAME)

    def after_session(self, ctx: SessionContext, outcome: AgentOutcome) -> AgentOutcome:
        link = ctx.run_dir / "config-homes" / "codex_home" / "auth.json"
        if link.is_symlink() or link.exists():
            # The run dir outlives the session; no credential may stay in it (a CLI that
            # refreshed its token may have replaced the link with a file of its own).
            link.unlink()
        # The host's session id ties the outcome to its traces and run dir (the CLI's own
        # thread/session id stays in events.jsonl).
        refused = refused_native_calls(ctx.run_dir / "config-homes" / "codex_home")
        update: dict = {"session_id": ctx.session_id}
        if refused:
            update["native_tool_calls"] = [*outcome.native_tool_calls, *refused]
        outcome = self._audit.after(ctx, self.spec, outcome.model_copy(update=update))
        if refused:
            outcome = outcome.model_copy(update={"audit": flag_refused(outcome.audit, refused)})
        return outcome


#: Audit code for a built-in call the model made that codex refused or blocked. Unlike
#: claude (built-ins verifiably off at the wire, the refusal in its own stream), codex
#: cannot take its built-ins off and shows such an attempt only in its rollout file, never
#: in `exec --json`: the audit fails closed on it (a violation, not a note).
NATIVE_ATTEMPT_CODE = "native_tool_attempted"


def flag_refused(verdict, refused: list[str]):
    """The verdict with the refused built-in attempts: each noted as refused by the CLI,
    plus one violation flag, so the session is never a clean success."""
    from harnesscheck.core.contracts import AuditFlag, AuditVerdict

    verdict = verdict or AuditVerdict()
    flags = [
        *verdict.flags,
        *(AuditFlag(code="native_tool_refused_by_cli", detail=r) for r in refused[:20]),
        AuditFlag(
            code=NATIVE_ATTEMPT_CODE,
            detail=f"{len(refused)} built-in call(s) attempted ({', '.join(refused[:5])}); codex refused them, seen only in its rollout file",
        ),
    ]
    return verdict.model_copy(update={"clean": False, "flags": flags})


def refused_native_calls(codex_home: Path, limit: int = 1000) -> list[str]:
    """Built-in calls the model attempted and codex refused ("unsupported call: X"), read from
    the rollout files codex writes under `$CODEX_HOME/sessions/` (observed on 0.171.0:
    `response_item` `function_call` / `custom_tool_call`, then its `*_output` saying
    "unsupported call" or that the sandbox blocked it). Such an attempt never shows in the `exec --json` stream; MCP calls (a `namespace` of
    `mcp__<server>`) do show there and are skipped here. Streaming; bounded."""
    sessions = Path(codex_home) / "sessions"
    if not sessions.is_dir():
        return []
    pending: dict[str, str] = {}
    out: list[str] = []
    for path in sorted(sessions.rglob("rollout-*.jsonl")):
        try:
            fh = open(path, "rb")
        except OSError:
            continue
        with fh:
            for raw in fh:
                if b'"response_item"' not in raw:
                    continue
                try:
                    rec = json.loads(raw)
                except ValueError:
                    continue
                payload = rec.get("payload") if isinstance(rec, dict) else None
                if not isinstance(payload, dict):
                    continue
                kind = payload.get("type")
                if kind in ("function_call", "custom_tool_call"):
                    if str(payload.get("namespace") or "").startswith("mcp__"):
                        continue
                    if len(pending) < 10_000:
                        pending[str(payload.get("call_id"))] = str(payload.get("name") or "?")
                elif kind in ("function_call_output", "custom_tool_call_output"):
                    name = pending.pop(str(payload.get("call_id")), None)
                    if name and _REFUSED_OUTPUT.search(_output_text(payload.get("output"))) and len(out) < limit:
                        out.append(f"{name} (refused by codex)")
    return out


#: What codex answers a built-in call it refuses (not offered) or blocks (sandbox), 0.171.0.
_REFUSED_OUTPUT = re.compile(r"unsupported call|patch rejected|blocked by (?:the )?(?:read-only )?sandbox", re.IGNORECASE)


def _output_text(output) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return " ".join(str(p.get("text", "")) for p in output if isinstance(p, dict))
    if isinstance(output, dict):
        return str(output.get("content") or output.get("text") or "")
    return ""
