"""An example backend that drives the real `claude` CLI: one `claude -p` per session, its
built-in tools off, the host's scoped tools served through harnesscheck's MCP bridge.

Written as a backend author outside harnesscheck writes one (doc/AUTHORS.md): a ProviderSpec
and a transport class the kit builds as ``factory(spec, settings)``. The transport builds on
harnesscheck's public harness base (``harnesscheck.authoring.HarnessTransport``: session dirs, the child environment, the
process tree, deadlines and cancellation, the bridge, the post-run audit) and supplies the two
things that are this CLI's own:

- ``invocation()``: the argv, the environment it adds and the stdin. Everything here is the
  example's choice: the prompt on stdin (never a flag), the MCP config given inline as JSON
  (the reference writes a file), a private config dir and HOME per session, built-ins off
  (``--tools ""``), only the scope's bridge tools allowed, no settings files, the system
  prompt in a private file (never in argv), the model name checked before it becomes an argv
  word.
- ``make_parser()``: the stream-json reader. The example reuses harnesscheck's
  ``ClaudeStreamParser`` (error classes, usage, served model, bridge readiness from
  ``system/init``): reading claude's stream is not where backends should differ.

Nothing here knows about the kit: the kit hands the transport the CLI to run in
``settings.cli`` (a fake CLI offline, the pinned real one at loopback) and judges what comes
out of it.

    PYTHONPATH=examples/claude_cli_backend/src \\
      pytest -m conformance --hc-backend claude_cli_backend:spec --hc-level offline
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from harnesscheck.authoring import (
    BRIDGE_SERVER,
    CLAUDE_INJECTIONS,
    AgentSessionRequest,
    ClaudeStreamParser,
    ConfigError,
    HarnessTransport,
    Invocation,
    Kind,
    ProviderSpec,
    SessionContext,
    bridge_command,
    config_home,
    write_private,
)
from harnesscheck.authoring import Capability as C

#: A model id is one plain argv word: it can neither be read as a flag nor split a list.
MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@\[\]-]*$")
TOOL_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")


def spec() -> ProviderSpec:
    """The backend as the kit and a host select it (`--hc-backend claude_cli_backend:spec`)."""
    return ProviderSpec(
        id="claude-cli-example",
        kind=Kind.harness,
        label="Example: claude -p driven by an outside backend",
        factory="claude_cli_backend:ClaudeCliTransport",
        cli_name="claude",
        min_version="2.1.0",
        max_version="3.0.0",
        capabilities=frozenset(
            {
                C.mcp_tools,
                C.builtin_tools_off,
                C.max_turns,
                C.system_prompt,
                C.usage_reporting,
                C.cost_reporting,
                C.served_model_reporting,
                C.auth_preflight,
                C.cancellation,
                C.config_isolation,
                C.early_auth_stop,
            }
        ),
        description="An example backend in its own package (examples/claude_cli_backend).",
    )


class ClaudeCliTransport(HarnessTransport):
    """`claude -p --output-format stream-json`, one process tree per session."""

    #: claude's own temp-dir variable, pointed at the session's private temp dir like TMPDIR
    private_tmp_vars = ("CLAUDE_CODE_TMPDIR",)
    #: no telemetry, no auto-update, wait for the MCP server before the first turn, no CLAUDE.md walking
    base_injections = CLAUDE_INJECTIONS

    def invocation(self, ctx: SessionContext, request: AgentSessionRequest, cli: Path, *, tool_less: bool) -> Invocation:
        # A private config dir and HOME for this session: the user's settings, MCP servers,
        # dotfiles and credential stores stay out of the CLI's reach.
        _, config_dir = config_home(ctx.run_dir, "CLAUDE_CONFIG_DIR")
        _, home = config_home(ctx.run_dir, "HOME")
        injections = {"CLAUDE_CONFIG_DIR": config_dir, "HOME": home}
        token = self.parent_env.get("CLAUDE_CODE_OAUTH_TOKEN")
        if token:  # the one credential this backend hands on: the subscription token, explicitly
            injections["CLAUDE_CODE_OAUTH_TOKEN"] = token
        argv = [str(cli), "-p", "--output-format", "stream-json", "--verbose", "--tools", ""]
        if not tool_less:
            assert ctx.spec_path is not None and ctx.scope is not None
            command, env = bridge_command(ctx.spec_path)
            servers = {BRIDGE_SERVER: {"type": "stdio", "command": command[0], "args": command[1:], "env": env}}
            argv += ["--mcp-config", json.dumps({"mcpServers": servers})]
            argv += ["--allowedTools", ",".join(self._tool_names(ctx.scope.tool_names()))]
        argv += ["--strict-mcp-config", "--setting-sources", "", "--max-turns", str(int(request.max_iters))]
        if request.system:
            argv += ["--system-prompt-file", str(write_private(ctx.run_dir / "system-prompt.md", request.system))]
        model = request.model or self.settings.model
        if model:
            if not MODEL_NAME.match(model):
                raise ConfigError(f"model name {model!r} is not a plain model id", "pass a model id such as claude-opus-4-8")
            argv += ["--model", model]
        return Invocation(argv=argv, injections=injections, stdin_bytes=request.prompt.encode("utf-8"))

    def make_parser(self, ctx, request, *, tool_less, on_text):
        return ClaudeStreamParser(
            expected_tools=[] if tool_less else self._tool_names(ctx.scope.tool_names()),
            requested_model=request.model or self.settings.model,
            subscription=True,
            on_text=on_text,
        )

    @staticmethod
    def _tool_names(tools) -> list[str]:
        """The exact MCP names claude gives the bridge's tools (never a wildcard)."""
        for name in tools:
            if not TOOL_NAME.match(name):
                raise ConfigError(f"tool name {name!r} is not a plain identifier", "use the scope's tool names")
        return [f"mcp__{BRIDGE_SERVER}__{name}" for name in tools]
