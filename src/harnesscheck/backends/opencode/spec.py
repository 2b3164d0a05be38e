"""The ProviderSpec of the `opencode` backend: its id, kind, capabilities and CLI pins.

Collected, in the matrix order, by backends/registry.py `BUILTIN_SPECS` (doc/SPEC-registry.md).
"""

from __future__ import annotations

from harnesscheck.core.contracts import Capability as C
from harnesscheck.core.contracts import Kind, ProviderSpec

SPEC = ProviderSpec(
    id="opencode",
    kind=Kind.harness,
    label="opencode (opencode run)",
    factory="harnesscheck.backends.opencode:OpencodeTransport",
    kit_profile="harnesscheck.backends.opencode.kit_profile:PROFILE",
    capabilities=frozenset(
        {
            C.mcp_tools,
            C.host_policy,
            C.event_stream,
            C.host_approvals,
            C.builtin_tools_off,  # "tools": {name: false} + permission deny; checked at the wire
            C.usage_reporting,
            C.cost_reporting,
            C.cancellation,
            C.config_isolation,
        }
    ),
    cli_name="opencode",
    cli_package="opencode-ai",
    min_version="1.18.0",
    max_version="2.0.0",
    pinned_version="1.18.33",
    # the Bun binary's start, its sqlite migration, plugin and MCP start: first model request
    # 30 s after spawn at load 10 (2 cores; `--version` alone 8.7 s at load 16); measured start-ups raise it
    cold_start_s=30.0,
    description="BYOK CLI; per-run config and plugin cache, built-ins off, host tools through the MCP bridge.",
)
