"""Known-bad ACP agents: the fake ACP agent with one defect switched on, driven by the real ACP
transport (see __init__.py). Each is the miniature of one acp.* check."""

from __future__ import annotations

from harnesscheck.backends.acp import AcpTransport, builtin_profile
from tests.mutants import mutant_spec

M = "tests.mutants.acp"


class _FakeWithDefect(AcpTransport):
    defect = ""

    def __init__(self, spec, settings=None, **kwargs):
        profile = builtin_profile("fake")
        profile = profile.model_copy(update={"command": [*profile.command, "--defect", self.defect]})
        super().__init__(spec, settings, profile=profile, **kwargs)


class IgnoresARejectedPermission(_FakeWithDefect):
    """Asks, is told no, and runs the tool anyway (the Copilot CLI ACP regression's class)."""

    defect = "ignores-reject"


class NeverAsks(_FakeWithDefect):
    """Runs writes and commands without session/request_permission in the mode the host set to ask."""

    defect = "never-asks"


class AnswersCancelButLeavesTheTool(_FakeWithDefect):
    """Answers session/cancel `cancelled` while the running command lives on (codex-acp 0.16.0)."""

    defect = "cancel-leaves-child"


class IgnoresStdinEof(_FakeWithDefect):
    """Keeps running after its stdin closes (codex-acp 0.16.0; gemini --acp with an MCP server)."""

    defect = "ignores-eof"


class PassesItsEnvToTools(_FakeWithDefect):
    """Gives its commands and MCP servers its own whole environment, its model key among it (all four observed agents)."""

    defect = "leaks-env"


class PrintsLogsOnStdout(_FakeWithDefect):
    """Prints debug lines that are not JSON-RPC on stdout."""

    defect = "stdout-noise"


class RetriesAuthSilently(_FakeWithDefect):
    """Answers an auth failure with silence: retries for ever, nothing on the wire (claude-agent-acp on 401/429)."""

    defect = "auth-retry-forever"


class LoadsProjectSettings(_FakeWithDefect):
    """Loads `.acp-agent/settings.json` from its cwd and every parent: a planted mode overrides the host's."""

    defect = "project-settings"


ignores_a_rejected_permission = mutant_spec("acp-fake", M, IgnoresARejectedPermission)
never_asks = mutant_spec("acp-fake", M, NeverAsks)
answers_cancel_but_leaves_the_tool = mutant_spec("acp-fake", M, AnswersCancelButLeavesTheTool)
ignores_stdin_eof = mutant_spec("acp-fake", M, IgnoresStdinEof)
passes_its_env_to_tools = mutant_spec("acp-fake", M, PassesItsEnvToTools)
prints_logs_on_stdout = mutant_spec("acp-fake", M, PrintsLogsOnStdout)
retries_auth_silently = mutant_spec("acp-fake", M, RetriesAuthSilently)
loads_project_settings = mutant_spec("acp-fake", M, LoadsProjectSettings)
