"""Known-bad variants of the reasoning-only Claude Code backend (tests/test_claude_code_reasoning.py
proves each is caught; it has no matrix column yet, so they are not in the MUTANTS table)."""

from __future__ import annotations

import json

from harnesscheck.llm import Reply, ToolCall
from harnesscheck.providers.claude_code_reasoning import OneTurnClaude, ReasoningLLM, parse_tool_calls


class DispatchesAnyName(ReasoningLLM):
    """Turns every fenced JSON call into a tool call, advertised or not."""

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
        return Reply(text="", tool_calls=[ToolCall(id="call_1", name=obj["tool"], arguments=obj.get("args") or {})],
                     usage=reply.usage, served_model=reply.served_model)


class HasNoTripwire(ReasoningLLM):
    """Ignores a tool_use block in the CLI's stream and goes on as if the turn were text."""

    @staticmethod
    def reply(outcome, advertised, abort=None):
        return ReasoningLLM.reply(outcome.model_copy(update={"native_tool_calls": [], "tool_calls": 0}), advertised, abort)


class PassesTheApiKeyThrough(OneTurnClaude):
    """Hands the CLI the host's ANTHROPIC_API_KEY (as the SDK's env precedence would): the API key is billed."""

    def invocation(self, ctx, request, cli, *, tool_less):
        inv = super().invocation(ctx, request, cli, tool_less=tool_less)
        key = self.parent_env.get("ANTHROPIC_API_KEY")
        if key:
            inv.injections["ANTHROPIC_API_KEY"] = key
        return inv


__all__ = ["DispatchesAnyName", "HasNoTripwire", "PassesTheApiKeyThrough", "parse_tool_calls"]
