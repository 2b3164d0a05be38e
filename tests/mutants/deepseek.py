"""Known-bad backends built on the deepseek transport (see __init__.py): the seed's mistakes."""

from __future__ import annotations

from harnesscheck.backends import deepseek as ds
from harnesscheck.backends.deepseek import DeepSeekParser, DeepSeekTransport
from harnesscheck.core.contracts import OutcomeStatus
from tests.mutants import mutant_spec

M = "tests.mutants.deepseek"


class InheritsTheHostEnv(DeepSeekTransport):
    """Hands the SDK the host's whole environment (the SDK's own default), keys and all."""

    def invocation(self, ctx, request, cli, *, tool_less):
        inv = super().invocation(ctx, request, cli, tool_less=tool_less)
        inv.injections = {**self.parent_env, **inv.injections}
        return inv


class ReadsTheKeyFromAnthropicApiKey(DeepSeekTransport):
    """Falls back to ANTHROPIC_API_KEY / OPENAI_API_KEY for the DeepSeek key ("this machine points
    at DeepSeek"), and passes it to the SDK as DEEPSEEK_API_KEY in the child env."""

    def api_key(self):
        return super().api_key() or self.parent_env.get("ANTHROPIC_API_KEY") or self.parent_env.get("OPENAI_API_KEY")

    def invocation(self, ctx, request, cli, *, tool_less):
        inv = super().invocation(ctx, request, cli, tool_less=tool_less)
        key = self.api_key()
        if key:
            inv.injections = {**inv.injections, "DEEPSEEK_API_KEY": key}
        return inv


class _TrustingParser(DeepSeekParser):
    def _classify(self, result):
        if self.result is not None:
            return OutcomeStatus.ok, None, ""
        return super()._classify(result)


class EmptyErrorIsSuccess(DeepSeekTransport):
    """Reports any RunResult as success: an empty final_response with finish_reason error is ok."""

    def make_parser(self, ctx, request, *, tool_less, on_text=None):
        logged = super().make_parser(ctx, request, tool_less=tool_less, on_text=on_text)
        logged.parser.__class__ = _TrustingParser
        return logged


class LeavesBuiltinsOn(DeepSeekTransport):
    """Never disables the sdk profile's tool plugins: bash, edit, write, web_fetch, subagent... stay offered."""

    def invocation(self, ctx, request, cli, *, tool_less):
        saved = ds.TOOL_PLUGINS
        ds.TOOL_PLUGINS = ()
        try:
            return super().invocation(ctx, request, cli, tool_less=tool_less)
        finally:
            ds.TOOL_PLUGINS = saved


class LoadsWorkspaceInstructions(DeepSeekTransport):
    """Leaves the runtime's agent-instructions plugin on: every AGENTS.md / CLAUDE.md from the
    nearest git root above its scratch cwd reaches the model (a run dir inside a checkout)."""

    #: Judged without the reference's sandbox: in one, the CLI finds no worktree or checkout above its cwd to read (the defect is
    #: harmless there); the check must catch the defect itself, as in a backend with no sandbox.
    sandboxed = False

    def invocation(self, ctx, request, cli, *, tool_less):
        saved = ds.INSTRUCTION_PLUGINS
        ds.INSTRUCTION_PLUGINS = ()
        try:
            return super().invocation(ctx, request, cli, tool_less=tool_less)
        finally:
            ds.INSTRUCTION_PLUGINS = saved


class NeverAddsTheBridge(DeepSeekTransport):
    """Declares mcp_tools but never inserts the MCP client (the seed's composition named no MCP
    plugin) and does not read the bridge's trace: sessions run tool-less and end ok."""

    readiness_from_trace = False

    def invocation(self, ctx, request, cli, *, tool_less):
        return super().invocation(ctx, request, cli, tool_less=True)


inherits_the_host_env = mutant_spec("deepseek", M, InheritsTheHostEnv)
reads_the_key_from_anthropic_api_key = mutant_spec("deepseek", M, ReadsTheKeyFromAnthropicApiKey)
empty_error_is_success = mutant_spec("deepseek", M, EmptyErrorIsSuccess)
leaves_builtins_on = mutant_spec("deepseek", M, LeavesBuiltinsOn)
never_adds_the_bridge = mutant_spec("deepseek", M, NeverAddsTheBridge)
loads_workspace_instructions = mutant_spec("deepseek", M, LoadsWorkspaceInstructions)
