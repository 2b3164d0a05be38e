"""Claude Code transport: `claude -p --output-format stream-json --verbose` with the host's
tools through the MCP bridge and nothing else.

Requirements kept here (doc/SPEC-claude-code.md):
- argv: `-p --output-format stream-json --verbose --tools "" --mcp-config <run_dir file>
  --strict-mcp-config --allowedTools mcp__bridge__<tool>,... --setting-sources ""
  --max-turns N [--system-prompt-file F] [--model M]`; the prompt goes on stdin (then EOF),
  so it never becomes a flag, never shows in `ps` and never meets ARG_MAX. No secret in argv.
- A per-run `CLAUDE_CONFIG_DIR` (config_isolation). Subscription credentials reach it by an
  explicit `CLAUDE_CODE_OAUTH_TOKEN` injection when the host has one, else by a symlink to
  the one credentials file (`.credentials.json`) of the user's config dir; nothing else of
  the user's home is exposed, and the link is removed after the session.
- The parser is pure (lines in, AgentOutcome out). It fails closed at `system/init` when the
  bridge is not `connected` or its tools are missing (mcp_unavailable), or when an API key
  is the auth source in subscription mode (policy_violation); it stops at the first
  `system/api_retry` for `authentication_failed`/401 (blocked/auth in seconds, not after
  the CLI's multi-minute ladder), and at the `retry_stop_after`-th api_retry for a
  transient 429 / 529 / 5xx (error, retryable: the host decides whether to retry).
  `result` is the terminal event.
- Precedence: `is_error` before `subtype`; structured fields (`api_error_status`, the
  assistant `error` code, api_retry `error_status`) before message patterns; the terminal
  event before the exit code. Usage is counted once per message id (last wins); the served
  model is the main chain's `message.model`; helper models are reported apart; cost is
  `total_cost_usd` as reported (source `subscription` under a subscription: not billed).

Over 800 lines for a reason: the transport and its stream parser for Claude Code's stream-json,
whose event kinds (system, assistant, user, result, api_retry, rate-limit events) are
classified in one place. The seam: parser.py beside the transport, as Part C sketches for every
backend.
"""

from __future__ import annotations

import json
import os
import re
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from harnesscheck.backends._harness import (
    BRIDGE_SERVER,
    HarnessTransport,
    Invocation,
    SessionContext,
    _inside,
    bridge_command,
    ending_outcome,
)
from harnesscheck.backends._text import short
from harnesscheck.contain.process import LineAction
from harnesscheck.contain.rundir import write_private as _write_private  # a fresh 0600 file, never following a link
from harnesscheck.core.config import Settings
from harnesscheck.core.contracts import (
    BLOCKING,
    RETRYABLE,
    AgentOutcome,
    AgentSessionRequest,
    ConfigError,
    Cost,
    CostSource,
    ErrorClass,
    ModelVerdict,
    OutcomeStatus,
    ProviderSpec,
    Usage,
    model_verdict,
)

#: The only apiKeySource that means "subscription / OAuth" (cli-formats §1.B).
SUBSCRIPTION_KEY_SOURCES = frozenset({"none"})

#: Env names the transport always sets for the CLI (values are not secrets).
CLAUDE_INJECTIONS: dict[str, str] = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",  # no telemetry/update/auto-title calls
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "MCP_CONNECTION_NONBLOCKING": "0",  # wait for the bridge before the first turn (G1)
    "CLAUDE_CODE_DISABLE_CLAUDE_MDS": "1",  # no CLAUDE.md walking (B2), where the CLI honours it
}

#: Claude 2.1.197 replaces any tool result over 50 000 characters (of its JSON form; only a
#: remote flag changes that) with "<persisted-output> Output too large (N KB). Full output
#: saved to: <file>" and a 2 KB preview. With built-ins off the model cannot read that file,
#: and the bridge's truncation marker (at the end) is lost. So the bridge bounds each result
#: below that threshold, with room for JSON escaping: the model sees the head of the result
#: and the marker "[truncated: showing N of M bytes]".
CLAUDE_RESULT_CAP_BYTES = 32 * 1024

_TOOL_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@\[\]-]*$")
_LEGACY_COST_KEYS = ("total_cost_usd", "cost_usd", "total_cost")


def bridge_tool_names(tools: tuple[str, ...] | list[str]) -> list[str]:
    """Exact MCP names the CLI gives the bridge's tools (never a wildcard)."""
    for name in tools:
        if not _TOOL_NAME.match(name):
            raise ConfigError(f"tool name {name!r} is not a plain identifier", "use the built-in tool names")
    return [f"mcp__{BRIDGE_SERVER}__{name}" for name in tools]


def check_model_name(model: str) -> str:
    """A model id is one argv word that cannot be read as a flag or split a list (J1, J2)."""
    if not _MODEL_NAME.match(model or ""):
        raise ConfigError(f"model name {model!r} is not a plain model id", "pass a model id such as claude-opus-4-8")
    return model


def build_argv(
    cli: str | os.PathLike[str],
    *,
    mcp_config: Path | None,
    allowed_tools: list[str],
    max_turns: int,
    system_prompt_file: Path | None = None,
    model: str | None = None,
) -> list[str]:
    """The argv for one session. The prompt is not in it: it goes on stdin."""
    argv = [
        str(cli),
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        "--tools",
        "",  # every built-in tool off
    ]
    if mcp_config is not None:
        argv += ["--mcp-config", str(mcp_config)]
    argv += ["--strict-mcp-config"]  # no MCP server from anywhere else (without a config: none)
    if allowed_tools:
        argv += ["--allowedTools", ",".join(allowed_tools)]  # one comma-joined argument
    argv += ["--setting-sources", ""]  # no user/project/local settings files
    argv += ["--max-turns", str(int(max_turns))]
    if system_prompt_file is not None:
        argv += ["--system-prompt-file", str(system_prompt_file)]
    if model:
        argv += ["--model", check_model_name(model)]
    return argv


def mcp_config(spec_path: Path) -> dict:
    """`--mcp-config` content: the bridge only, absolute interpreter, explicit env."""
    argv, env = bridge_command(spec_path)
    return {"mcpServers": {BRIDGE_SERVER: {"type": "stdio", "command": argv[0], "args": argv[1:], "env": env}}}


# ---------------------------------------------------------------------------------------
# The pure parser


#: Partial text kept for a truncated session (the tail), so memory stays flat in the log size.
TEXT_TAIL_CHARS = 1 << 20
#: Native tool names kept for the audit (the count is exact beyond it).
NATIVE_CALLS_KEPT = 1000
#: A user line starting like this is a tool result: the parser has no use for it, so it is
#: not decoded (big tool results are most of a session's bytes).
_USER_PREFIX = '{"type":"user",'
_RATE_PREFIX = '{"type":"rate_limit_event",'
_BRIDGE_PREFIX = f"mcp__{BRIDGE_SERVER}__"


class UsageById:
    """Usage per message id, the last line of a message wins (streaming repeats it).

    Memory is bounded: only the last `window` message ids are kept open; older ones are
    folded into per-group sums (a message's lines are contiguous in the stream). Values are
    the raw API usage dicts, converted only when folded or read.
    """

    def __init__(self, window: int = 256):
        self.window = window
        self.open: OrderedDict[str, tuple[str, Any]] = OrderedDict()
        self.folded: dict[str, list[int]] = {}
        self.ids = 0

    def put(self, msg_id: str, group: str, usage: Any) -> None:
        if msg_id in self.open:
            self.open[msg_id] = (group, usage)
            return
        self.ids += 1
        self.open[msg_id] = (group, usage)
        if len(self.open) > self.window:
            _, (old_group, old_usage) = self.open.popitem(last=False)
            sums = self.folded.setdefault(old_group, [0, 0, 0, 0])
            for i, value in enumerate(_usage_numbers(old_usage)):
                sums[i] += value

    def totals(self) -> dict[str, Usage]:
        sums = {group: list(values) for group, values in self.folded.items()}
        for group, usage in self.open.values():
            acc = sums.setdefault(group, [0, 0, 0, 0])
            for i, value in enumerate(_usage_numbers(usage)):
                acc[i] += value
        return {g: Usage(input=v[0], output=v[1], cache_read=v[2], cache_write=v[3]) for g, v in sums.items()}


_USAGE_KEYS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


def _usage_numbers(raw: Any) -> tuple[int, int, int, int]:
    if not isinstance(raw, dict):
        return (0, 0, 0, 0)
    out = []
    for key in _USAGE_KEYS:
        value = raw.get(key)
        out.append(int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 else 0)
    return tuple(out)  # type: ignore[return-value]


def _api_usage(raw: Any) -> Usage:
    """Anthropic API usage (snake_case) -> Usage."""
    i, o, cr, cw = _usage_numbers(raw)
    return Usage(input=i, output=o, cache_read=cr, cache_write=cw)


def _model_usage(raw: Any) -> Usage:
    """result.modelUsage entry (camelCase) -> Usage."""
    if not isinstance(raw, dict):
        return Usage()

    def num(key: str) -> int:
        value = raw.get(key)
        return int(value) if isinstance(value, (int, float)) and value >= 0 else 0

    return Usage(
        input=num("inputTokens"),
        output=num("outputTokens"),
        cache_read=num("cacheReadInputTokens"),
        cache_write=num("cacheCreationInputTokens"),
    )


#: HTTP status -> error class (structured: wins over message text).
_STATUS_CLASSES: dict[int, ErrorClass] = {
    401: ErrorClass.auth,
    403: ErrorClass.auth,
    404: ErrorClass.model_unavailable,
    413: ErrorClass.context_overflow,
    429: ErrorClass.rate_limit,
    529: ErrorClass.overloaded,
    503: ErrorClass.overloaded,
}

#: The assistant message `error` literal (SDK AssistantMessageError) -> error class.
_ASSISTANT_ERRORS: dict[str, ErrorClass] = {
    "authentication_failed": ErrorClass.auth,
    "billing_error": ErrorClass.quota,
    "rate_limit": ErrorClass.rate_limit,
    "invalid_request": ErrorClass.invalid_request,
    "server_error": ErrorClass.server_error,
}

#: Message patterns for claude's result prose, first match wins (used only when no
#: structured field decided). Ordered from most specific to most generic.
_CLAUDE_TEXT_RULES: tuple[tuple[ErrorClass, re.Pattern[str]], ...] = tuple(
    (cls, re.compile(pattern, re.IGNORECASE))
    for cls, pattern in (
        (
            ErrorClass.auth,
            r"not logged in|please run /login|invalid api key|failed to authenticate"
            r"|oauth (?:session|token) (?:has )?expired|authentication_failed",
        ),
        # "not your usage limit" is the CLI's wording for a plain 429 burst: never quota.
        (ErrorClass.quota, r"out of extra usage|(?<!not your )usage limit|credit balance is too low|billing_error|quota"),
        (ErrorClass.context_overflow, r"prompt is too long|context (?:window|length)|too many tokens"),
        (ErrorClass.model_unavailable, r"issue with the selected model|model .{0,40}(?:may not exist|not found)|cannot use this model|not_found_error"),
        (ErrorClass.rate_limit, r"rate.?limit|too many requests|\b429\b"),
        (ErrorClass.overloaded, r"overloaded|at capacity|\b529\b"),
        (ErrorClass.server_error, r"api error: 5\d\d|internal server error|\b50[0234]\b|server_error"),
        (ErrorClass.network, r"connection (?:refused|reset|closed)|network|econnrefused|enotfound|etimedout"),
    )
)


def classify_claude_text(text: str) -> ErrorClass | None:
    for cls, pattern in _CLAUDE_TEXT_RULES:
        if pattern.search(text or ""):
            return cls
    return None


#: api_retry `error` literals that mean the CLI is retrying a transient upstream failure.
_RETRY_ERRORS: dict[str, ErrorClass] = {
    "rate_limit": ErrorClass.rate_limit,
    "overloaded": ErrorClass.overloaded,
    "server_error": ErrorClass.server_error,
}


def retry_event_class(event: dict) -> ErrorClass | None:
    """The retryable class an `api_retry` event names (429 / 529 / 5xx / overloaded /
    rate_limit), structured status first, then the `error` literal; None otherwise."""
    status = event.get("error_status")
    if isinstance(status, int) and not isinstance(status, bool):
        cls = _status_class(status)
        if cls in (ErrorClass.rate_limit, ErrorClass.overloaded, ErrorClass.server_error):
            return cls
        if cls is not None:
            return None
    return _RETRY_ERRORS.get(str(event.get("error") or ""))


def _plan_window(info: dict | None) -> bool:
    """A rejected rate-limit window that is the plan's usage limit (a named window such as
    five_hour, or rejected overage), not a transient burst."""
    if not isinstance(info, dict):
        return False
    return bool(info.get("rateLimitType")) or info.get("overageStatus") == "rejected"


def _status_class(status: int) -> ErrorClass | None:
    if status in _STATUS_CLASSES:
        return _STATUS_CLASSES[status]
    if 500 <= status < 600:
        return ErrorClass.server_error
    if status == 400:
        return None  # 400 is many things: let the message say which (e.g. prompt too long)
    return None


def _short(text: str, limit: int = 400) -> str:
    """`_text.short` with claude's longer bound (its messages carry the CLI's own prose), any
    value read as its str()."""
    return short(str(text), limit)


def _cli_own(event: dict) -> bool:
    """An event the CLI emits on its own, before or without a model request: system/init and
    the `<synthetic>` assistant message that repeats the CLI's own error ("Not logged in")."""
    if event.get("type") == "system":
        return event.get("subtype") == "init"
    if event.get("type") == "assistant":
        message = event.get("message")
        return isinstance(message, dict) and message.get("model") == "<synthetic>"
    return False


class ClaudeStreamParser:
    """Lines of `claude -p --output-format stream-json --verbose` -> one AgentOutcome.

    `feed(line)` returns None, LineAction.TERMINAL (the `result` event) or LineAction.STOP
    (fail closed now). Pure: no I/O, no clock; the same lines give the same outcome however
    they were chunked.
    """

    def __init__(
        self,
        *,
        expected_tools: list[str] | None = None,
        requested_model: str | None = None,
        subscription: bool = True,
        on_text: Callable[[str], None] | None = None,
        retry_stop_after: int | None = 1,
    ):
        """`retry_stop_after`: stop at the Nth `api_retry` for a transient failure (429 /
        529 / 5xx) and report it retryable, so the host (not the CLI's multi-minute ladder)
        decides whether to retry; None lets the CLI's ladder run to its own end."""
        self.expected_tools = list(expected_tools or [])
        self.retry_stop_after = retry_stop_after
        self.requested_model = requested_model
        self.subscription = subscription
        self.on_text = on_text
        # diagnostics
        self.noise_lines = 0
        self.malformed_lines = 0
        self.lines = 0
        # init
        self.init_seen = False
        self.init_model: str | None = None
        self.init_tools: list[str] = []
        self.mcp_status: dict[str, str] = {}
        self.auth_source: str | None = None
        self.session_id: str | None = None
        # stream
        self.texts: list[str] = []
        self.text_chars = 0
        self.text_dropped = False
        self.main_usage = UsageById()  # group "" = main chain
        self.sub_usage = UsageById()  # group = helper model id
        self.served_model: str | None = None
        self.bridge_calls = 0
        self.bridge_tools: dict[str, None] = {}  # first-use order
        self.native_calls: list[str] = []
        self.native_count = 0
        self.assistant_error: str | None = None
        self.last_retry: dict | None = None
        self.transient_retries = 0  # api_retry events for 429 / 529 / 5xx
        #: `retry` events for the host (set by the harness base): each transient api_retry, as the
        #: CLI announces it, before its wait (doc/SPEC-events.md)
        self.retry_notice: Callable[..., object] = lambda **fields: None
        self.retrying: ErrorClass | None = None  # a transient failure the CLI was still retrying (no answer since)
        self.rate_limit_rejected: dict | None = None
        # endings
        self.result: dict | None = None
        self.early: tuple[OutcomeStatus, ErrorClass, str] | None = None
        #: the bridge was not connected at system/init (pending, failed, absent, tools missing):
        #: the session ends mcp_unavailable after the linger grace or at the first sign of it
        #: going on with the model, unless the CLI gives up first for a root cause (never
        #: logged in: auth) (_classify)
        self.bridge_problem: tuple[OutcomeStatus, ErrorClass, str] | None = None

    # -- feeding ------------------------------------------------------------------------

    def feed(self, line: str) -> Any:
        self.lines += 1
        stripped = line if line[:1] == "{" else line.strip()
        if not stripped:
            return None
        if stripped[0] != "{":
            self.noise_lines += 1  # [SandboxDebug], banners: skipped (cli-formats §6.3)
            return None
        if self.result is not None or self.early is not None:
            return None  # exactly one terminal outcome; ignore anything after it
        if stripped.startswith(_USER_PREFIX):
            return None  # tool results: the bridge trace says what dispatch did
        if stripped.startswith(_RATE_PREFIX) and '"rejected"' not in stripped:
            return None  # an allowed rate-limit window: nothing to record
        try:
            event = json.loads(stripped)
        except ValueError:
            self.malformed_lines += 1
            return None
        if not isinstance(event, dict):
            return None
        kind = event.get("type")
        if self.bridge_problem is not None and kind != "result" and not _cli_own(event):
            return self._stop(*self.bridge_problem)  # the session goes on with the model: never toolless
        if kind == "system":
            return self._system(event)
        if kind == "assistant":
            self._assistant(event)
        elif kind == "user":
            pass  # tool results: the bridge trace says what dispatch did
        elif kind == "rate_limit_event":
            info = event.get("rate_limit_info")
            if isinstance(info, dict) and info.get("status") == "rejected":
                self.rate_limit_rejected = info
        elif kind == "result":
            self.result = event
            if isinstance(event.get("session_id"), str):
                self.session_id = event["session_id"]
            return LineAction.TERMINAL
        return None  # unknown types are ignored (D6)

    def _stop(self, status: OutcomeStatus, cls: ErrorClass, message: str) -> Any:
        self.early = (status, cls, message)
        return LineAction.STOP

    def _system(self, event: dict) -> Any:
        subtype = event.get("subtype")
        if subtype == "init":
            return self._init(event)
        if subtype == "api_retry":
            self.last_retry = event
            error = str(event.get("error") or "")
            status = event.get("error_status")
            if error == "authentication_failed" or status == 401:
                return self._stop(
                    OutcomeStatus.blocked,
                    ErrorClass.auth,
                    f"authentication failed (api_retry attempt {event.get('attempt')}, status {status}); "
                    "stopped instead of waiting out the CLI's retry ladder. Log in again (claude /login) "
                    "or check the credentials given to this backend",
                )
            if error == "billing_error":
                return self._stop(OutcomeStatus.blocked, ErrorClass.quota, "billing error reported by the CLI (api_retry)")
            cls = retry_event_class(event)
            if cls is not None:
                if cls is ErrorClass.rate_limit and _plan_window(self.rate_limit_rejected):
                    return self._stop(
                        OutcomeStatus.blocked,
                        ErrorClass.quota,
                        "the plan's usage limit was reached (api_retry 429 after a rejected usage window)",
                    )
                self.transient_retries += 1
                self.retrying = cls
                delay = event.get("retry_delay_ms")
                attempt = event.get("attempt")
                self.retry_notice(
                    attempt=attempt + 1 if isinstance(attempt, int) else None,
                    wait_s=delay / 1000 if isinstance(delay, (int, float)) else None,
                    error_class=cls.value,
                )
                if self.retry_stop_after is not None and self.transient_retries >= self.retry_stop_after:
                    return self._stop(
                        OutcomeStatus.error,
                        cls,
                        f"{cls.value} (api_retry attempt {event.get('attempt')}, status {status}, error {error or '-'}); "
                        "stopped instead of waiting out the CLI's retry ladder: the host decides whether to retry",
                    )
        return None

    def _init(self, event: dict) -> Any:
        if self.init_seen:
            return None  # re-emitted per turn in streaming-input mode; the first one decides
        self.init_seen = True
        self.init_model = event.get("model") if isinstance(event.get("model"), str) else None
        tools = event.get("tools")
        self.init_tools = [t for t in tools if isinstance(t, str)] if isinstance(tools, list) else []
        servers = event.get("mcp_servers")
        if isinstance(servers, list):
            for server in servers:
                if isinstance(server, dict) and isinstance(server.get("name"), str):
                    self.mcp_status[server["name"]] = str(server.get("status"))
        source = event.get("apiKeySource")
        self.auth_source = str(source) if source is not None else None
        if isinstance(event.get("session_id"), str):
            self.session_id = event["session_id"]
        if self.subscription and self.auth_source is not None and self.auth_source not in SUBSCRIPTION_KEY_SOURCES:
            return self._stop(
                OutcomeStatus.blocked,
                ErrorClass.policy_violation,
                f"the CLI authenticated with apiKeySource={self.auth_source!r} while this backend is in "
                "subscription mode (it would bill an API key); remove the key from the CLI's reach",
            )
        if self.expected_tools:
            status = self.mcp_status.get(BRIDGE_SERVER)
            missing = [t for t in self.expected_tools if t not in self.init_tools]
            if status != "connected":
                self.bridge_problem = (
                    OutcomeStatus.blocked,
                    ErrorClass.mcp_unavailable,
                    f"the tool bridge is {status or 'absent'} at system/init; the session would run without the host's tools",
                )
            elif missing:
                self.bridge_problem = (OutcomeStatus.blocked, ErrorClass.mcp_unavailable, f"bridge tools missing at system/init: {', '.join(missing)}")
            if self.bridge_problem is not None:
                # a short grace (the linger) for the CLI's own verdict ("Not logged in" comes
                # right after init), then the tree is killed; a model event ends it at once (feed)
                return LineAction.TERMINAL
        return None

    def _assistant(self, event: dict) -> None:
        message = event.get("message")
        if type(message) is not dict:
            return
        main = event.get("parent_tool_use_id") is None
        if main and message.get("model") != "<synthetic>":
            self.retrying = None  # the API answered: an earlier retry is over
        msg_id = message.get("id")
        model = message.get("model")
        synthetic = model == "<synthetic>"
        if type(model) is not str or model.startswith("<"):
            model = None  # "<synthetic>": the CLI's own messages, not a served model
        if main and "error" in event and isinstance(event["error"], str):
            self.assistant_error = event["error"]
        if type(msg_id) is str and "usage" in message:
            # raw usage: converted once, when the message is folded; repeated lines: last wins
            if main:
                self.main_usage.put(msg_id, "", message["usage"])
            elif model:
                self.sub_usage.put(msg_id, model, message["usage"])
        if main and model:
            self.served_model = model
        content = message.get("content")
        if type(content) is not list:
            return
        for block in content:
            if type(block) is not dict:
                continue
            btype = block.get("type")
            if btype == "text":
                text = block.get("text")
                # 2.1.197 repeats an API error's prose as a "<synthetic>" message before the
                # result (loopback-recorded): the CLI's words, not the model's text
                if main and type(text) is str and not synthetic:
                    self._keep_text(text)
                    if self.on_text is not None:
                        self.on_text(text)
            elif btype in ("tool_use", "server_tool_use") and type(block.get("name")) is str:
                name = block["name"]
                if name.startswith(_BRIDGE_PREFIX):
                    self.bridge_calls += 1
                    self.bridge_tools.setdefault(name[len(_BRIDGE_PREFIX) :], None)
                else:
                    self.native_count += 1
                    if len(self.native_calls) < NATIVE_CALLS_KEPT:
                        self.native_calls.append(name)

    def _keep_text(self, text: str) -> None:
        """Keep the text for the outcome; past TEXT_TAIL_CHARS only the tail survives."""
        self.texts.append(text)
        self.text_chars += len(text)
        while self.text_chars > TEXT_TAIL_CHARS and len(self.texts) > 1:
            self.text_chars -= len(self.texts.pop(0))
            self.text_dropped = True

    # -- the outcome --------------------------------------------------------------------

    def outcome(self, result: Any) -> AgentOutcome:
        """The normalized outcome: the early stop, else the result event, else the ending."""
        status, cls, message = self._classify(result)
        res = self.result or {}
        usage, helper = self._usage()
        served = self.served_model
        requested = self.requested_model or self.init_model
        text = res.get("result") if isinstance(res.get("result"), str) and status is OutcomeStatus.ok else None
        if text is None:
            text = "\n".join(self.texts)
        notes = self._notes(result)
        if notes:
            message = f"{message}; {notes}" if message else notes
        tools_used = list(self.bridge_tools)
        num_turns = res.get("num_turns")
        return AgentOutcome(
            status=status,
            error_class=cls,
            retryable=cls in RETRYABLE if cls else False,
            retry_after_s=self._retry_after(cls),
            message=message,
            text=text,
            iterations=int(num_turns) if isinstance(num_turns, int) else self.main_usage.ids,
            tool_calls=self.bridge_calls,
            tools_used=tools_used,
            native_tool_calls=list(self.native_calls),
            usage=usage,
            helper_usage=helper,
            cost=self._cost(status),
            requested_model=requested,
            served_model=served,
            model_verdict=self._verdict(requested, served),
            auth_source=self.auth_source,
            session_id=self.session_id,
            terminal_event_seen=self.result is not None,
        )

    def _classify(self, result: Any) -> tuple[OutcomeStatus, ErrorClass | None, str]:
        if self.early is not None:
            return self.early  # the parser asked to stop: whatever ending followed is our own kill
        ended = self._classify_no_result(result) if self.result is None else self._classify_result(self.result)
        if self.bridge_problem is not None:
            # the CLI ended before going on with the model: its own failure wins when it is a
            # root cause of the bridge's (a session never logged in is auth whatever the
            # bridge's state); anything else is the bridge's failure, never an ok session
            from harnesscheck.backends._rootcause import tier

            if ended[1] is not None and tier(ended[1]) < tier(ErrorClass.mcp_unavailable):
                return ended
            return self.bridge_problem
        return ended

    def _classify_no_result(self, result: Any) -> tuple[OutcomeStatus, ErrorClass | None, str]:
        """No result event: the root cause (backends/_rootcause.py) among the transient
        failure the CLI was still retrying (a 429 ladder the deadline cut short), the lines
        of the stderr tail (a crash's own words, when the CLI ended by itself) and the process
        ending (deadline, crash, exit 0). A cancel or an oversize line is the host's own
        ending and decides alone."""
        from harnesscheck.backends._rootcause import root_cause, text_signals
        from harnesscheck.contain.process import Ending

        ending = ending_outcome(result, terminal_seen=False)
        if ending is None:
            return OutcomeStatus.error, ErrorClass.protocol, "no result event"
        status, cls, message = ending
        if result.ending in (Ending.cancelled, Ending.oversize):
            return ending
        retrying = None
        if self.retrying is not None and self.last_retry is not None:
            retrying = (
                self.retrying,
                f"{self.retrying.value}: the CLI was still retrying (api_retry attempt "
                f"{self.last_retry.get('attempt')}, status {self.last_retry.get('error_status')}, error "
                f"{self.last_retry.get('error') or '-'}) when the session ended",
            )
        # the stderr tail is the CLI's own last words only when it ended by itself (a crash,
        # exit 0); at the deadline it holds whatever warnings came before the host's kill
        words = text_signals(getattr(result, "stderr_tail", "") or "") if result.ending is not Ending.deadline else []
        signals = [retrying, *words, (cls, message)]
        root = root_cause(signals)
        if root is None or root == (cls, message):
            if cls is ErrorClass.timeout and self.last_retry is not None:
                message += f" (the CLI was retrying: {self.last_retry.get('error')} {self.last_retry.get('error_status')})"
            return status, cls, message
        root_cls, why = root
        return (OutcomeStatus.blocked if root_cls in BLOCKING else OutcomeStatus.error), root_cls, _short(f"{why}; then: {message}")

    def _classify_result(self, res: dict) -> tuple[OutcomeStatus, ErrorClass | None, str]:
        subtype = str(res.get("subtype") or "")
        is_error = res.get("is_error") is True
        if not is_error and subtype == "success":
            return OutcomeStatus.ok, None, ""
        # A failure: is_error said so, or (older builds) a non-success subtype with is_error false.
        errors = res.get("errors") if isinstance(res.get("errors"), list) else []
        prose = "; ".join(str(x) for x in [res.get("result") or "", *errors] if x)
        terminal_reason = res.get("terminal_reason")
        if subtype == "error_max_turns" or terminal_reason == "max_turns":
            return OutcomeStatus.truncated, ErrorClass.max_turns, _short(prose or "the turn cap was reached")
        if subtype == "error_max_budget_usd" or terminal_reason == "budget_exhausted":
            return OutcomeStatus.truncated, ErrorClass.budget, _short(prose or "the budget cap was reached")
        cls = None
        status_code = res.get("api_error_status")
        if isinstance(status_code, int):
            cls = _status_class(status_code)
        if cls is None and self.assistant_error in _ASSISTANT_ERRORS:
            cls = _ASSISTANT_ERRORS[self.assistant_error]
            refined = classify_claude_text(prose)
            if cls is ErrorClass.invalid_request and refined in (ErrorClass.context_overflow, ErrorClass.model_unavailable):
                # `invalid_request` is any 400; 2.1.197 says "Prompt is too long" with it (loopback-recorded)
                cls = refined
        if cls is None:
            cls = classify_claude_text(prose)
        if cls is None and self.rate_limit_rejected is not None:
            cls = ErrorClass.quota  # a rejected rate-limit window and no other signal
        if cls is ErrorClass.rate_limit and (
            self.assistant_error == "billing_error" or _plan_window(self.rate_limit_rejected) or classify_claude_text(prose) is ErrorClass.quota
        ):
            cls = ErrorClass.quota  # a 429 that is the plan's usage limit / credit balance, not a burst
        cls = cls or ErrorClass.unknown
        if cls is ErrorClass.quota and self.rate_limit_rejected is not None:
            resets = self.rate_limit_rejected.get("resetsAt")
            window = self.rate_limit_rejected.get("rateLimitType")
            if isinstance(resets, (int, float)):
                import datetime as _dt

                when = _dt.datetime.fromtimestamp(resets, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
                prose = f"{prose} (window {window}, resets {when})"
        status = OutcomeStatus.blocked if cls in BLOCKING else OutcomeStatus.error
        return status, cls, _short(prose or f"the CLI reported an error (subtype {subtype})")

    def _retry_after(self, cls: ErrorClass | None) -> float | None:
        """The CLI's own next retry delay (api_retry `retry_delay_ms`), retryable classes only."""
        if cls not in (ErrorClass.rate_limit, ErrorClass.overloaded, ErrorClass.server_error) or self.last_retry is None:
            return None
        delay = self.last_retry.get("retry_delay_ms")
        return round(delay / 1000.0, 3) if isinstance(delay, (int, float)) and delay > 0 else None

    def _main_model_keys(self, model_usage: dict) -> list[str]:
        keys = [k for k in model_usage if isinstance(k, str)]
        main = []
        for key in keys:
            if self.served_model and model_verdict(key, self.served_model) is ModelVerdict.match:
                main.append(key)
            elif self.init_model and model_verdict(self.init_model, key) is ModelVerdict.match:
                main.append(key)
        if not main and len(keys) == 1:
            main = keys
        return main

    def _usage(self) -> tuple[Usage, dict[str, Usage]]:
        """Main-chain usage and helper usage by model. The result's per-model figures when
        present; else its aggregate; else the stream's, once per message id."""
        stream_main = self.main_usage.totals().get("", Usage())
        helper = self.sub_usage.totals()
        res = self.result
        if res is None:
            return stream_main, helper
        model_usage = res.get("modelUsage") if isinstance(res.get("modelUsage"), dict) else None
        if model_usage is None and isinstance(res.get("model_usage"), dict):
            model_usage = res["model_usage"]  # field-name drift (D10)
        if model_usage:
            main_keys = self._main_model_keys(model_usage)
            if main_keys:
                helper = {k: _model_usage(v) for k, v in model_usage.items() if k not in main_keys}
                return sum((_model_usage(model_usage[k]) for k in main_keys), Usage()), helper
        if isinstance(res.get("usage"), dict):
            return _api_usage(res["usage"]), helper
        return stream_main, helper

    def _cost(self, status: OutcomeStatus) -> Cost:
        res = self.result or {}
        for key in _LEGACY_COST_KEYS:
            value = res.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
                source = CostSource.subscription if self.subscription else CostSource.reported
                return Cost(usd=float(value), source=source)
        return Cost(usd=None, source=CostSource.none, partial=status is OutcomeStatus.truncated)

    def _verdict(self, requested: str | None, served: str | None) -> ModelVerdict:
        verdict = model_verdict(requested, served)
        if verdict is ModelVerdict.mismatch and requested and "-" not in requested and self.init_model:
            return model_verdict(self.init_model, served)  # an alias (opus): the CLI resolved it
        return verdict

    def _notes(self, result: Any) -> str:
        notes = []
        if self.malformed_lines:
            notes.append(f"{self.malformed_lines} malformed JSON line(s) skipped")
        if self.text_dropped:
            notes.append(f"partial text cut to its last {TEXT_TAIL_CHARS} characters")
        if self.native_count > len(self.native_calls):
            notes.append(f"{self.native_count} native tool calls (first {len(self.native_calls)} listed)")
        if getattr(result, "partial_tail", None):
            notes.append("the last stdout line was truncated (no newline) and dropped")
        builtins = [t for t in self.init_tools if not t.startswith("mcp__")]
        if builtins:
            notes.append(f'built-in tools were offered despite --tools "": {", ".join(builtins[:10])}')
        return "; ".join(notes)


# ---------------------------------------------------------------------------------------
# The transport


def user_config_dir(parent_env: Mapping[str, str]) -> Path | None:
    """The user's real Claude config dir (only ever read to link one credentials file)."""
    if parent_env.get("CLAUDE_CONFIG_DIR"):
        return Path(parent_env["CLAUDE_CONFIG_DIR"])
    home = parent_env.get("HOME")
    return Path(home) / ".claude" if home else None


class ClaudeCodeTransport(HarnessTransport):
    """claude-code: one `claude -p` per session, built-ins off, host tools via the bridge."""

    #: claude's own temp-dir variable (beside TMPDIR): its state dirs and messaging socket stay private
    private_tmp_vars = ("CLAUDE_CODE_TMPDIR",)

    base_injections = CLAUDE_INJECTIONS

    def __init__(
        self,
        spec: ProviderSpec,
        settings: Settings | None = None,
        *,
        auth_mode: str = "subscription",
        link_credentials: bool = True,
        loopback: Any = None,
        retry_stop_after: int | None = 1,
        result_cap: int | None = CLAUDE_RESULT_CAP_BYTES,
        **kwargs: Any,
    ):
        """`loopback`: a harnesscheck.loopback.LoopbackEndpoint. The session then talks to that
        scripted server on 127.0.0.1 (ANTHROPIC_BASE_URL and a dummy subscription token,
        injected explicitly and traced by name); no host credential is read or linked."""
        if loopback is not None:
            from harnesscheck.backends.loopback_endpoint import claude_env

            kwargs["injections"] = {**dict(kwargs.get("injections") or {}), **claude_env(loopback)}
            link_credentials = False
        self.loopback = loopback
        self.retry_stop_after = retry_stop_after  # see ClaudeStreamParser
        self.result_cap = result_cap  # see CLAUDE_RESULT_CAP_BYTES; None: the scope's bound only
        super().__init__(spec, settings, **kwargs)
        if auth_mode not in ("subscription", "api_key"):
            raise ConfigError(f"unknown auth_mode {auth_mode!r}", "use 'subscription' or 'api_key'")
        if auth_mode == "subscription":
            keys = sorted(k for k in self.injections if k in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"))
            if keys:
                raise ConfigError(
                    f"{', '.join(keys)} injected while claude-code is in subscription mode",
                    "drop the key, or build the transport with auth_mode='api_key'",
                )
        self.auth_mode = auth_mode
        self.link_credentials = link_credentials

    def invocation(self, ctx: SessionContext, request: AgentSessionRequest, cli: Path, *, tool_less: bool) -> Invocation:
        from harnesscheck.contain.envpolicy import config_home

        var, config_dir = config_home(ctx.run_dir, "CLAUDE_CONFIG_DIR")
        # A private HOME too: the user's dotfiles (~/.claude.json, git/gh config) stay out of reach.
        _, home = config_home(ctx.run_dir, "HOME")
        injections = {var: config_dir, "HOME": home}
        injections.update(self._credentials(Path(config_dir)))
        mcp_file = None
        allowed: list[str] = []
        if not tool_less:
            assert ctx.spec_path is not None and ctx.scope is not None
            allowed = bridge_tool_names(ctx.scope.tool_names())
            mcp_file = _write_private(ctx.run_dir / "claude-mcp.json", json.dumps(mcp_config(ctx.spec_path), indent=1))
        system_file = None
        if request.system:
            system_file = _write_private(ctx.run_dir / "system-prompt.md", request.system)
        argv = build_argv(
            cli,
            mcp_config=mcp_file,
            allowed_tools=allowed,
            max_turns=request.max_iters,
            system_prompt_file=system_file,
            model=request.model or self.settings.model,
        )
        return Invocation(argv=argv, injections=injections, stdin_bytes=request.prompt.encode("utf-8"))

    def _credentials(self, config_dir: Path) -> dict[str, str]:
        """Subscription credentials for the per-run config dir: an explicit OAuth token, else a
        link to the one credentials file. Never the whole home; never an API key."""
        if self.auth_mode != "subscription" or self.loopback is not None:
            return {}
        token = self.parent_env.get("CLAUDE_CODE_OAUTH_TOKEN")
        if token:
            return {"CLAUDE_CODE_OAUTH_TOKEN": token}
        if self.link_credentials:
            source = user_config_dir(self.parent_env)
            cred = source / ".credentials.json" if source else None
            if cred is not None and cred.is_file() and not _inside(cred, config_dir):
                link = config_dir / ".credentials.json"
                if not link.exists() and not link.is_symlink():
                    os.symlink(cred, link)
        return {}

    def after_session(self, ctx: SessionContext, outcome: AgentOutcome) -> None:
        link = ctx.run_dir / "config-homes" / "claude_config_dir" / ".credentials.json"
        if link.is_symlink():
            link.unlink()

    def make_parser(self, ctx, request, *, tool_less, on_text):
        expected = [] if tool_less else bridge_tool_names(ctx.scope.tool_names())
        return ClaudeStreamParser(
            expected_tools=expected,
            requested_model=request.model or self.settings.model,
            subscription=self.auth_mode == "subscription",
            on_text=on_text,
            retry_stop_after=self.retry_stop_after,
        )
