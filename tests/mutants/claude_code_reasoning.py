"""Known-bad variants of the reasoning-only Claude Code backend (see __init__.py). Each is a
ClaudeReasoningTransport with one part swapped: its model client (`llm_class`) or its
one-turn CLI transport (`cli_class`). The conformance suite catches every one but
DispatchesAnyName at the loopback level (the MUTANTS table);
tests/backends/test_claude_code_reasoning.py catches every one but LeavesTelemetryOn and
RunsTurnsOutsideTheRunDir (its own unit test pins where the turns' dirs go)."""

from __future__ import annotations

import json

from harnesscheck.backends.api import ApiTransport
from harnesscheck.backends.claude_code_reasoning import (
    ClaudeReasoningTransport,
    OneTurnClaude,
    ReasoningLLM,
    tool_protocol,
)
from harnesscheck.backends.llm import Reply, ToolCall
from tests.mutants import harness, mutant_spec

M = "tests.mutants.claude_code_reasoning"


class _AnyNameLLM(ReasoningLLM):
    @staticmethod
    def reply(outcome, advertised, abort=None):
        reply = ReasoningLLM.reply(outcome, advertised, abort)
        if reply.tool_calls or "```" not in outcome.text:
            return reply
        body = outcome.text.split("```json", 1)[-1].split("```", 1)[0]
        try:
            obj = json.loads(body)
        except ValueError:
            return reply
        if not isinstance(obj, dict) or not isinstance(obj.get("tool"), str):
            return reply
        return Reply(
            text="", tool_calls=[ToolCall(id="call_1", name=obj["tool"], arguments=obj.get("args") or {})], usage=reply.usage, served_model=reply.served_model
        )


class DispatchesAnyName(ClaudeReasoningTransport):
    """Turns every fenced JSON call into a tool call, advertised or not."""

    llm_class = _AnyNameLLM


class _NoTripwireLLM(ReasoningLLM):
    @staticmethod
    def reply(outcome, advertised, abort=None):
        return ReasoningLLM.reply(outcome.model_copy(update={"native_tool_calls": [], "tool_calls": 0}), advertised, abort)


class HasNoTripwire(ClaudeReasoningTransport):
    """Ignores a tool_use block in the CLI's stream and goes on as if the turn were text."""

    llm_class = _NoTripwireLLM


class _ProtocolOnlyLLM(ReasoningLLM):
    @staticmethod
    def system_prompt(system, tools):
        return tool_protocol(tools) if tools else None


class DropsTheHostSystemPrompt(ClaudeReasoningTransport):
    """Sends the text protocol as the whole system prompt: the host's own system prompt never reaches the model."""

    llm_class = _ProtocolOnlyLLM


class _NoResultsLLM(ReasoningLLM):
    @staticmethod
    def prompt(messages):
        kept = []
        for msg in messages:
            content = msg.get("content")
            if isinstance(content, list):
                msg = {**msg, "content": [b for b in content if not (isinstance(b, dict) and b.get("type") == "tool_result")]}
            kept.append(msg)
        return ReasoningLLM.prompt(kept)


class DropsTheToolResults(ClaudeReasoningTransport):
    """Renders the conversation without the host's tool results: the model never reads what its calls returned."""

    llm_class = _NoResultsLLM


class _ApiKeyCli(OneTurnClaude):
    def invocation(self, ctx, request, cli, *, tool_less):
        inv = super().invocation(ctx, request, cli, tool_less=tool_less)
        key = self.parent_env.get("ANTHROPIC_API_KEY")
        if key:
            inv.injections["ANTHROPIC_API_KEY"] = key
        return inv


class _LoudCli(harness.LeavesTelemetryOn, OneTurnClaude):
    """The one-turn CLI with claude-code's own telemetry defect (tests/mutants/harness.py)."""


class LeavesTelemetryOn(ClaudeReasoningTransport):
    """Runs each turn's claude with its non-essential traffic on (telemetry, update checks): the
    real claude looks its vendor's host up, whatever the host loop around it does."""

    cli_class = _LoudCli


class PassesTheApiKeyThrough(ClaudeReasoningTransport):
    """Hands the CLI the host's ANTHROPIC_API_KEY (as the SDK's env precedence would): the API key is billed."""

    cli_class = _ApiKeyCli


class RunsTurnsOutsideTheRunDir(ClaudeReasoningTransport):
    """Makes each turn's CLI dirs (its HOME, config dir, cwd) in the system temp dir instead of
    the session's run dir, as the backend did before 2026-12-07: the CLI reads and writes
    outside the run dir the host gave."""

    def run_session(self, request, **kwargs):
        return ApiTransport.run_session(self, request, **kwargs)


dispatches_any_name = mutant_spec("claude-code-reasoning", M, DispatchesAnyName)
has_no_tripwire = mutant_spec("claude-code-reasoning", M, HasNoTripwire)
drops_the_host_system_prompt = mutant_spec("claude-code-reasoning", M, DropsTheHostSystemPrompt)
drops_the_tool_results = mutant_spec("claude-code-reasoning", M, DropsTheToolResults)
leaves_telemetry_on = mutant_spec("claude-code-reasoning", M, LeavesTelemetryOn)
passes_the_api_key_through = mutant_spec("claude-code-reasoning", M, PassesTheApiKeyThrough)
runs_turns_outside_the_run_dir = mutant_spec("claude-code-reasoning", M, RunsTurnsOutsideTheRunDir)
