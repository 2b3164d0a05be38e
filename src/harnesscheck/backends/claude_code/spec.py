"""The ProviderSpec of the `claude-code` backend: its id, kind, capabilities and CLI pins.

Collected, in the matrix order, by backends/registry.py `BUILTIN_SPECS` (doc/SPEC-registry.md).
"""

from __future__ import annotations

from harnesscheck.core.contracts import Capability as C
from harnesscheck.core.contracts import Kind, ProviderSpec

SPEC = ProviderSpec(
    id="claude-code",
    kind=Kind.harness,
    label="Claude Code (claude -p)",
    factory="harnesscheck.backends.claude_code:ClaudeCodeTransport",
    kit_profile="harnesscheck.backends.claude_code.kit_profile:PROFILE",
    capabilities=frozenset(
        {
            C.mcp_tools,
            C.host_policy,
            C.event_stream,
            C.host_approvals,
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
    cli_name="claude",
    cli_package="@anthropic-ai/claude-code",
    min_version="2.1.0",
    max_version="3.0.0",
    pinned_version="2.1.332",
    description="Subscription CLI; built-ins off, host tools through the MCP bridge.",
)
