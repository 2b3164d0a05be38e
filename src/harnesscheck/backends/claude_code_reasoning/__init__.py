"""Reasoning-only Claude Code: the api kind's host-owned tool loop, one `claude -p` call per turn.

Requirements kept here (doc/SPEC-claude-code-reasoning.md; the 004 seed's design D1-D5):
- `ClaudeReasoningTransport` is the `api` transport's loop (backends/api/) with its model
  client replaced by `ReasoningLLM`: every host turn is ONE `claude -p` call that executes
  nothing. Built-ins are off (`--tools ""`), denied again by name (`--disallowedTools`, the
  backstop), no MCP server is configured (`--strict-mcp-config` without a config), the turn
  cap is 1, and a tripwire fails the turn loudly (policy_violation) if a `tool_use` block
  ever appears in the CLI's stream.
- The host's tools (the turn's advertised set, recomputed every turn) are described as a
  text protocol in the system prompt; the model answers a call with one fenced ```json
  {"tool": <name>, "args": {...}}``` block. `parse_tool_calls` turns it into the loop's
  tool calls, which the host dispatches (`harnesscheck.choke.dispatch`). Malformed JSON degrades
  to text; a name outside the advertised set is never dispatched (left as text).
- The CLI runs in the claude-code transport's tool-less one-shot set-up, in a private dir
  of its own inside the session's run dir (`turn-*`, removed after the call whatever modes
  the CLI left, or the turn fails as a policy_violation; the system temp dir only when the
  host names no run dir): an empty scratch cwd, a per-run
  CLAUDE_CONFIG_DIR and HOME, the env policy's allowlist (API keys
  stripped: it never bills an API key), the saved login only (the OAuth token or the linked
  credentials file). A rate limit is an error the host may retry later; there is no fallback
  to any other (paid) provider.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
import time
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from harnesscheck.backends.api import ApiTransport
from harnesscheck.backends.claude_code import ClaudeCodeTransport
from harnesscheck.backends.claude_code_reasoning.spec import SPEC as _SPEC
from harnesscheck.backends.llm import Aborted, LLMError, Reply, ToolCall
from harnesscheck.core.config import Settings
from harnesscheck.core.contracts import (
    AgentOutcome,
    AgentSessionRequest,
    Cost,
    CostSource,
    ErrorClass,
    OutcomeStatus,
    ProviderSpec,
)
from harnesscheck.core.scope import ToolScope

#: Every built-in claude 2.1.x names, denied by name behind `--tools ""` (the backstop).
DENIED_BUILTINS: tuple[str, ...] = (
    "Bash",
    "BashOutput",
    "KillShell",
    "Read",
    "Write",
    "Edit",
    "MultiEdit",
    "Glob",
    "Grep",
    "LS",
    "NotebookRead",
    "NotebookEdit",
    "WebFetch",
    "WebSearch",
    "Task",
    "Agent",
    "TodoWrite",
    "TodoRead",
    "Skill",
    "SlashCommand",
    "ExitPlanMode",
    "EnterPlanMode",
    "AskUserQuestion",
    "ToolSearch",
    "EnterWorktree",
    "Monitor",
    "TaskOutput",
    "TaskStop",
)

_FENCE_OPEN = re.compile(r"```json[ \t]*\n", re.I)
#: Closing fences tried per block: a JSON string holding ``` (an argument that writes a
#: markdown file) must not end the block, so later closings are tried until the body parses.
_MAX_CLOSINGS = 16


def _fences(text: str):
    """(start, end, body) of each ```json block. A block ends at the first closing fence
    after which its body parses as JSON, else at its first closing fence (as text); an
    unclosed block is no block."""
    pos = 0
    while (m := _FENCE_OPEN.search(text, pos)) is not None:
        close, first, chosen = text.find("```", m.end()), None, None
        for _ in range(_MAX_CLOSINGS):
            if close == -1:
                break
            body = text[m.end() : close]
            body = body[:-1] if body.endswith("\n") else body
            first = first or (close, body)
            try:
                json.loads(body)
            except (ValueError, RecursionError):
                close = text.find("```", close + 3)
                continue
            chosen = (close, body)
            break
        if first is None:
            return
        close, body = chosen or first
        yield m.start(), close + 3, body
        pos = close + 3


#: A reply is parsed only up to this size (a runaway answer is text, not a call list).
MAX_PARSED_CHARS = 1_000_000
MAX_CALLS_PER_TURN = 16


def tool_protocol(tools: list[dict]) -> str:
    """The host's tools as a text protocol (the system prompt's last section)."""
    lines = [
        "# Tools",
        "",
        "You cannot run any tool yourself. The host runs tools for you. To call one, reply with",
        "exactly one fenced block and nothing after it:",
        "",
        "```json",
        '{"tool": "<name>", "args": {<arguments>}}',
        "```",
        "",
        "The host answers with the tool's result in the next message. When you have the final",
        "answer, reply in plain text with no json block. Tools available now:",
        "",
    ]
    for tool in tools:
        schema = json.dumps(tool.get("input_schema") or {}, separators=(",", ":"), sort_keys=True)
        lines.append(f"- {tool['name']}: {tool.get('description') or ''} Arguments (JSON Schema): {schema}")
    return "\n".join(lines)


def parse_tool_calls(text: str, advertised: set[str] | frozenset[str]) -> tuple[str, list[ToolCall]]:
    """(text, calls) from a reply: each fenced json block that is an object
    `{"tool": <advertised name>, "args": <object>}` becomes a call and leaves the text; any
    other block (malformed JSON, not an object, a name outside `advertised`, args not an
    object) stays in the text and is never dispatched."""
    if not isinstance(text, str) or not advertised or "```" not in text:
        return text, []
    head, tail = text[:MAX_PARSED_CHARS], text[MAX_PARSED_CHARS:]
    calls: list[ToolCall] = []
    kept: list[str] = []
    pos = 0
    for start, end, body in _fences(head):
        call = _call(body, advertised) if len(calls) < MAX_CALLS_PER_TURN else None
        kept.append(head[pos:start] if call is not None else head[pos:end])
        pos = end
        if call is not None:
            calls.append(ToolCall(id=f"call_{len(calls) + 1}", name=call[0], arguments=call[1], raw_arguments=json.dumps(call[1])))
    kept.append(head[pos:])
    return ("".join(kept).strip() if calls else head) + tail, calls


def _call(body: str, advertised) -> tuple[str, dict] | None:
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict) or set(obj) - {"tool", "args"}:
        return None
    name, args = obj.get("tool"), obj.get("args", {})
    if not isinstance(name, str) or name not in advertised or not isinstance(args, dict):
        return None
    return name, args


def render_transcript(messages: list[dict], nonce: str) -> str:
    """The conversation so far as one prompt. Each message opens with a marker holding a
    per-call random nonce, so text inside a message (a file's content) cannot pose as a turn."""
    out = []
    for msg in messages:
        role = msg.get("role", "user")
        content = msg.get("content")
        parts: list[str] = []
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            for block in content:
                if not isinstance(block, dict):
                    continue
                kind = block.get("type")
                if kind == "text":
                    parts.append(str(block.get("text", "")))
                elif kind == "tool_use":
                    call = {"tool": block.get("name"), "args": block.get("input") or {}}
                    parts.append("```json\n" + json.dumps(call) + "\n```")
                elif kind == "tool_result":
                    flag = " (error)" if block.get("is_error") else ""
                    parts.append(f"[tool result {block.get('tool_use_id')}{flag}]\n{block.get('content', '')}")
        label = {"user": "host", "assistant": "you"}.get(role, role)
        out.append(f"<<{nonce} {label}>>\n" + "\n\n".join(parts))
    return (f"The conversation so far; each message starts with a <<{nonce} ...>> marker. Answer the last host message.\n\n") + "\n\n".join(out)


_HEADER = re.compile(r"The conversation so far; each message starts with a <<([0-9a-f]+) \.\.\.>> marker")


def transcript_turns(prompt: str) -> int:
    """How many model ("you") messages a prompt rendered by `render_transcript` holds: the
    host turns already taken (the scripted model server serves the next one by it)."""
    m = _HEADER.search(prompt or "")
    return prompt.count(f"<<{m[1]} you>>") if m else 0


class _CancelHandle:
    """What `Abort.attach` closes when the host's watchdog fires: it sets the CLI's cancel event."""

    extensions: dict = {}

    def __init__(self, event: threading.Event):
        self.event = event

    def close(self) -> None:
        self.event.set()


class OneTurnClaude(ClaudeCodeTransport):
    """claude-code's tool-less one-shot, with the deny-by-name backstop added to its argv. It
    takes no session slot of its own: the api session it serves holds one (two per session
    deadlocked concurrent sessions at the slot cap, found by concurrency.parallel-sessions-isolated)."""

    takes_session_slot = False

    def invocation(self, ctx, request, cli, *, tool_less):
        inv = super().invocation(ctx, request, cli, tool_less=tool_less)
        inv.argv += ["--disallowedTools", ",".join(DENIED_BUILTINS)]
        return inv


#: The run dir of the session a ReasoningLLM call serves (set by ClaudeReasoningTransport.run_session
#: for the thread that runs the session's loop), None when the host named none.
SESSION_RUN_DIR: ContextVar[Path | None] = ContextVar("claude_reasoning_session_run_dir", default=None)


class ReasoningLLM:
    """The api loop's model client: one CLI call per turn, nothing executed by the CLI."""

    def __init__(self, cli: ClaudeCodeTransport):
        self.cli = cli

    def create(self, *, messages, system=None, tools=None, model=None, on_text=None, abort=None, deadline=None, max_tokens=None) -> Reply:
        advertised = frozenset(t["name"] for t in tools or [])
        timeout = max(0.5, (deadline - time.monotonic()) if deadline else self.cli.settings.timeout_s)
        cancel = threading.Event()
        if abort is not None:
            abort.attach(_CancelHandle(cancel))
        try:
            outcome = self._one_call(self.prompt(messages), self.system_prompt(system, tools), model, timeout, cancel)
        finally:
            if abort is not None:
                abort.detach()
        return self.reply(outcome, advertised, abort)

    @staticmethod
    def system_prompt(system: str | None, tools: list[dict] | None) -> str | None:
        """The host's system prompt, then the text protocol of the turn's tools."""
        parts = [p for p in (system, tool_protocol(tools) if tools else None) if p and p.strip()]
        return "\n\n".join(parts) or None

    @staticmethod
    def prompt(messages: list[dict]) -> str:
        """The conversation so far as the call's one prompt (a fresh nonce per call)."""
        return render_transcript(messages, secrets.token_hex(6))

    def _one_call(self, prompt, system, model, timeout, cancel) -> AgentOutcome:
        """One turn's CLI call in a private dir of its own, removed after it whatever modes the CLI
        left; a dir that could not be removed fails the turn (`unremoved_dir_fails`)."""
        import os
        import tempfile

        from harnesscheck.backends._harness import unremoved_dir_fails
        from harnesscheck.contain.rundir import remove_private_tree

        base = SESSION_RUN_DIR.get()
        if base is not None:  # the call's dirs are the session's: nothing of it outside the run dir the host gave
            os.makedirs(base, mode=0o700, exist_ok=True)
            scratch = Path(tempfile.mkdtemp(prefix="turn-", dir=base))
        else:
            scratch = Path(tempfile.mkdtemp(prefix="harnesscheck-claude-reasoning-"))
        try:
            (scratch / "empty").mkdir()
            request = AgentSessionRequest(
                prompt=prompt,
                system=system,
                model=model,
                max_iters=1,
                timeout_s=timeout,
                run_dir=scratch / "run",
                scope=ToolScope(name="reasoning", root=scratch / "empty", read_only=True, allowed_tools=()),
            )
            outcome = self.cli._run(request, cancel=cancel, on_text=None, tool_less=True)
        finally:
            failed = remove_private_tree(scratch)
        return unremoved_dir_fails(outcome, failed, "the turn's private dir")

    @staticmethod
    def reply(outcome: AgentOutcome, advertised, abort=None) -> Reply:
        """The turn's Reply, or the LLMError the loop turns into the outcome. The tripwire first:
        any tool_use the CLI saw (a built-in or anything else) fails the turn, whatever it says."""
        if outcome.native_tool_calls or outcome.tool_calls:
            names = ", ".join((outcome.native_tool_calls or [])[:5]) or f"{outcome.tool_calls} call(s)"
            raise LLMError(
                ErrorClass.policy_violation,
                f"tripwire: the CLI's stream held a tool_use block ({names}); a reasoning-only turn must execute nothing, so the turn is failed",
            )
        if outcome.status is OutcomeStatus.cancelled:
            raise Aborted(abort.reason if abort is not None and abort.reason else "cancelled")
        if outcome.status is OutcomeStatus.truncated and outcome.error_class is ErrorClass.timeout:
            raise Aborted("timeout", partial=Reply(text=outcome.text))
        if not outcome.ok:
            cls = outcome.error_class or ErrorClass.unknown
            raise LLMError(cls, outcome.message or f"the claude turn ended {outcome.status}", retry_after_s=outcome.retry_after_s)
        text, calls = parse_tool_calls(outcome.text, advertised)
        return Reply(
            text=text,
            tool_calls=calls,
            stop_reason="tool_use" if calls else "end_turn",
            usage=outcome.usage,
            served_model=outcome.served_model,
            requested_model=outcome.requested_model,
        )


class ClaudeReasoningTransport(ApiTransport):
    """Backend `claude-code-reasoning` (kind api): the host loop over ReasoningLLM. See the module docstring.

    Built through the api transport's public seams only: `llm=` (the model client), and
    `session_cost` (no dollar figure) and `model_required` (the CLI's default model) overridden."""

    api_mode = "claude_code_reasoning"
    model_required = False

    def __init__(self, spec: ProviderSpec, settings: Settings, *, cli_transport: ClaudeCodeTransport | None = None, **cli_kwargs: Any):
        from harnesscheck.backends.registry import get_spec

        # The served-model guard is the host loop's (api.py, per reply, with the served model in the
        # outcome); a guard inside each CLI turn would fail it first and lose which model answered.
        cli_settings = settings.model_copy(update={"backend": "claude-code", "model_mismatch": "warn"})
        cli = cli_transport or self.cli_class(get_spec("claude-code"), cli_settings, **cli_kwargs)
        self._cli_transport = cli
        super().__init__(spec, settings, llm=self.llm_class(cli))

    def run_session(self, request: AgentSessionRequest, **kwargs: Any) -> AgentOutcome:
        """The api loop, each turn's CLI call made inside the request's run dir (SESSION_RUN_DIR)."""
        token = SESSION_RUN_DIR.set(Path(request.run_dir) if request.run_dir is not None else None)
        try:
            return super().run_session(request, **kwargs)
        finally:
            SESSION_RUN_DIR.reset(token)

    def bind_in_sandbox(self, **paths: Any) -> None:
        """Every turn's CLI sandbox binds these too (HarnessTransport.bind_in_sandbox)."""
        self._cli_transport.bind_in_sandbox(**paths)

    #: The one-turn CLI transport and the model client (a known-bad variant swaps one).
    cli_class: type[ClaudeCodeTransport] = OneTurnClaude
    llm_class: type[ReasoningLLM] = ReasoningLLM

    def __repr__(self) -> str:
        return f"ClaudeReasoningTransport(model={self.settings.model!r})"

    def session_cost(self, model, usage, *, partial: bool) -> Cost:
        """Under the saved login nothing is billed per token: no dollar figure is made up."""
        return Cost(source=CostSource.none, partial=partial)


#: The registry's built-in spec (also selectable as `harnesscheck.backends.claude_code_reasoning:SPEC`).
SPEC: ProviderSpec = _SPEC
