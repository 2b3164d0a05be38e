"""The ProviderSpec of the `deepseek` backend: its id, kind, capabilities and CLI pins.

Collected, in the matrix order, by backends/registry.py `BUILTIN_SPECS` (doc/SPEC-registry.md).
"""

from __future__ import annotations

from harnesscheck.core.contracts import Capability as C
from harnesscheck.core.contracts import Kind, ProviderSpec

SPEC = ProviderSpec(
    id="deepseek",
    kind=Kind.harness,
    label="DeepSeek Harness (deepseek-harness-sdk + dsh runtime)",
    factory="harnesscheck.backends.deepseek:DeepSeekTransport",
    kit_profile="harnesscheck.backends.deepseek.kit_profile:PROFILE",
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
            C.cancellation,
            C.early_auth_stop,  # a 401 ends the turn at once (observed: one request, no retry)
        }
    ),
    cli_name="deepseek",
    min_version="0.2.1rc2",
    max_version="0.3.0",
    pinned_version="0.2.1rc2",
    # the Python driver, the SDK import and the dsh runtime's start: 11 s for a whole plain
    # session at load 1, 26-35 s at load 15-20 (2 cores); measured start-ups raise it (loopback)
    cold_start_s=20.0,
    description="API-keyed Python SDK + bundled runtime (pip); built-ins off by composition, bridge via its MCP client.",
)
