"""Adopt a backend built on Anthropic's Claude Agent SDK for Python (`claude-agent-sdk`,
module `claude_agent_sdk`) as a backend under test, without shims (issue 19).

The SDK is never a dependency of harnesscheck: it is imported here only, and
tests/kit/test_foreign_sdk.py skips unless it is importable. Nothing of the SDK is copied. This
is the thinnest binding an author writes from the SDK's documentation: one
`ClaudeSDKClient` session per request, configured through `ClaudeAgentOptions` only, and
every result translated, never corrected:

- `cli_path` is the CLI the kit names (`settings.cli`, or the kit's loopback wrapper);
  `cwd` is the run dir (a scratch dir, not the worktree); `env` adds nothing of its own
  (the SDK merges it over the host's whole environment); at the loopback level `env` is the
  endpoint's `claude_env` (the model server's URL and a dummy subscription token).
- `mcp_servers` holds one stdio server, `workspace`: harnesscheck's bridge for the request's
  scope (`harnesscheck.bridge.spec`), the host's bridge as any host would start it;
  `allowed_tools` lists its scope tools (`mcp__workspace__<tool>`), `tools=[]` turns the
  built-ins off, `strict_mcp_config` ignores every other MCP config.
- `system_prompt`, `model`, `max_turns` come from the request.
- The outcome: text from the assistant's text blocks (the `ResultMessage.result` when
  there is one), status from `ResultMessage.subtype` as the SDK's examples read it
  (`success` ok, `error_max_turns` truncated/max_turns, any other subtype an error), usage,
  `total_cost_usd`, the assistant's model and the session id as the SDK reports them.
  Errors are the SDK's own vocabulary translated, never inferred from text or status codes:
  `AssistantMessage.error` (SDK_ERRORS), `ProcessError` (the CLI died: cli_crash),
  `CLIJSONDecodeError` (protocol), any other exception unknown, `CLINotFoundError` the
  contract's `CliNotFound`; the request's timeout is an `anyio.move_on_after` around the session
  (truncated/timeout, partial text kept) and the host's cancel event is polled and
  answered with `ClaudeSDKClient.interrupt()`, then the session is left (cancelled). Leaving
  the `async with` block is the SDK's only cleanup: `close()` closes stdin, waits, then
  terminates the CLI.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from harnesscheck.core.contracts import (
    BLOCKING,
    RETRYABLE,
    AgentOutcome,
    CapabilityUnsupported,
    CliNotFound,
    Cost,
    CostSource,
    ErrorClass,
    Kind,
    OutcomeStatus,
    ProviderSpec,
    Usage,
)
from harnesscheck.core.contracts import Capability as C

SERVER = "workspace"
PREFIX = f"mcp__{SERVER}__"
#: the SDK's own error vocabulary (`AssistantMessage.error`) -> harnesscheck's; nothing else is classified
SDK_ERRORS = {
    "authentication_failed": ErrorClass.auth,
    "billing_error": ErrorClass.quota,
    "rate_limit": ErrorClass.rate_limit,
    "invalid_request": ErrorClass.invalid_request,
    "server_error": ErrorClass.server_error,
    "unknown": ErrorClass.unknown,
}


class SdkClaude:
    """harnesscheck's Transport protocol over one `ClaudeSDKClient` session per request."""

    def __init__(self, spec: ProviderSpec, settings, *, cli_path=None, loopback=None):
        self.spec, self.settings = spec, settings
        self.cli_path = str(cli_path or settings.cli or "") or None  # None: the SDK finds (or bundles) its own
        self.extra_env: dict[str, str] = {}
        if loopback is not None:  # point the CLI at the kit's scripted model server
            from harnesscheck.backends.loopback_endpoint import claude_env

            self.extra_env = claude_env(loopback)

    def _options(self, request, run_dir: Path):
        from claude_agent_sdk import ClaudeAgentOptions

        from harnesscheck.bridge.spec import BridgeSpec, bridge_argv, bridge_env, write_spec

        bridge = BridgeSpec(scope=request.scope, run_dir=run_dir, trace_path=run_dir / "sdk-bridge.jsonl", session_id=request.session_id or "sdk")
        argv = bridge_argv(write_spec(bridge, run_dir / "sdk-bridge-spec.json"))
        return ClaudeAgentOptions(
            cli_path=self.cli_path,
            cwd=str(run_dir),
            env=dict(self.extra_env),
            mcp_servers={SERVER: {"type": "stdio", "command": argv[0], "args": argv[1:], "env": bridge_env()}},
            allowed_tools=[PREFIX + t for t in request.scope.tool_names()],
            tools=[],
            strict_mcp_config=True,
            system_prompt=request.system,
            model=request.model,
            max_turns=request.max_iters,
        )

    def run_session(self, request, *, cancel: threading.Event | None = None, on_text=None) -> AgentOutcome:
        import anyio

        run_dir = Path(request.run_dir) if request.run_dir else Path.cwd() / "sdk-run"
        run_dir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        out = anyio.run(self._session, request, self._options(request, run_dir), cancel, on_text)
        out.duration_s = time.monotonic() - started
        return out

    async def _session(self, request, options, cancel, on_text) -> AgentOutcome:
        import anyio
        from claude_agent_sdk import (
            AssistantMessage,
            ClaudeSDKClient,
            ClaudeSDKError,
            CLIJSONDecodeError,
            CLINotFoundError,
            ProcessError,
            ResultError,
            ResultMessage,
            TextBlock,
            ToolUseBlock,
        )

        texts: list[str] = []
        tools: list[str] = []
        state: dict = {"result": None, "model": None, "cancelled": False, "error": None}

        async def converse(client) -> None:
            await client.query(request.prompt)
            async for msg in client.receive_response():
                if isinstance(msg, AssistantMessage):
                    state["model"] = msg.model or state["model"]
                    state["error"] = msg.error or state["error"]
                    for block in msg.content:
                        if isinstance(block, TextBlock) and block.text:
                            texts.append(block.text)
                            if on_text:
                                on_text(block.text)
                        elif isinstance(block, ToolUseBlock):
                            tools.append(block.name.removeprefix(PREFIX))
                elif isinstance(msg, ResultMessage):
                    state["result"] = msg

        async def watch_cancel(client, scope) -> None:
            while not cancel.is_set():
                await anyio.sleep(0.05)
            state["cancelled"] = True
            await client.interrupt()
            scope.cancel()

        error, crash = "", None
        with anyio.move_on_after(request.timeout_s) as deadline:
            try:
                async with ClaudeSDKClient(options=options) as client:
                    async with anyio.create_task_group() as tg:
                        if cancel is not None:
                            tg.start_soon(watch_cancel, client, tg.cancel_scope)
                        await converse(client)
                        tg.cancel_scope.cancel()
            except* CLINotFoundError as group:
                raise CliNotFound(self.spec.id, "claude", [str(options.cli_path or "")]) from group.exceptions[0]
            except* ClaudeSDKError as group:  # raised through the session's task group
                exc = group.exceptions[0]
                error = f"{type(exc).__name__}: {exc}"
                # the SDK's typed failures: the CLI died (ProcessError, not an error result), or
                # printed what is not JSON
                crash = (
                    ErrorClass.cli_crash
                    if isinstance(exc, ProcessError) and not isinstance(exc, ResultError)
                    else ErrorClass.protocol
                    if isinstance(exc, CLIJSONDecodeError)
                    else None
                )
            except* Exception as group:  # anything else the SDK raised ends the session as an error, unclassified
                exc = group.exceptions[0]
                error = f"{type(exc).__name__}: {exc}"
        result = state["result"]
        text = result.result if result is not None and result.result else "".join(texts)
        common = dict(
            text=text,
            tool_calls=len(tools),
            tools_used=tools,
            backend=self.spec.id,
            requested_model=request.model,
            served_model=state["model"],
            terminal_event_seen=result is not None,
        )
        if result is not None:
            usage = result.usage or {}
            common.update(
                iterations=result.num_turns,
                session_id=result.session_id,
                usage=Usage(
                    input=int(usage.get("input_tokens") or 0),
                    output=int(usage.get("output_tokens") or 0),
                    cache_read=int(usage.get("cache_read_input_tokens") or 0),
                    cache_write=int(usage.get("cache_creation_input_tokens") or 0),
                ),
                cost=Cost(usd=result.total_cost_usd, source=CostSource.reported) if result.total_cost_usd is not None else Cost(),
            )
        if state["cancelled"]:
            return AgentOutcome(status=OutcomeStatus.cancelled, message="cancelled by the host", **common)
        if deadline.cancelled_caught:
            return AgentOutcome(status=OutcomeStatus.truncated, error_class=ErrorClass.timeout, message=f"no result within {request.timeout_s} s", **common)
        failed = SDK_ERRORS.get(state["error"] or "") or crash
        if error or failed or result is None or result.subtype not in ("success", "error_max_turns"):
            cls = failed or ErrorClass.unknown
            message = error or (
                f"the CLI reported {state['error']}" if state["error"] else "the session ended without a result" if result is None else result.subtype
            )
            return AgentOutcome(
                status=OutcomeStatus.blocked if cls in BLOCKING else OutcomeStatus.error,
                error_class=cls,
                retryable=cls in RETRYABLE,
                message=message[:500],
                **common,
            )
        if result.subtype == "error_max_turns":
            return AgentOutcome(status=OutcomeStatus.truncated, error_class=ErrorClass.max_turns, **common)
        return AgentOutcome(status=OutcomeStatus.ok, **common)

    def complete(self, prompt, *, system=None, model=None, tools=None, timeout_s=None) -> AgentOutcome:
        raise CapabilityUnsupported(self.spec.id, "one-shot completion (the SDK backend runs sessions only)")


def claude() -> ProviderSpec:
    return ProviderSpec(
        id="sdk-claude",
        kind=Kind.harness,
        label="Claude Agent SDK (Python) backend",
        factory="tests.foreign.sdk_binding:SdkClaude",
        cli_name="claude",
        cli_package="@anthropic-ai/claude-code",
        pinned_version="2.1.197",
        capabilities=frozenset(
            {C.mcp_tools, C.builtin_tools_off, C.max_turns, C.system_prompt, C.usage_reporting, C.cost_reporting, C.served_model_reporting, C.cancellation}
        ),
    )


def claude_2_1_332() -> ProviderSpec:
    """The same backend over the newer claude release (its loopback column)."""
    return claude().model_copy(update={"id": "sdk-claude==2.1.332", "pinned_version": "2.1.332"})
