"""The ProviderSpec of the `cursor` backend: its id, kind, capabilities and CLI pins.

Collected, in the matrix order, by backends/registry.py `BUILTIN_SPECS` (doc/SPEC-registry.md).
"""

from __future__ import annotations

from harnesscheck.core.contracts import Capability as C
from harnesscheck.core.contracts import Kind, ProviderSpec

SPEC = ProviderSpec(
    id="cursor",
    kind=Kind.harness,
    label="Cursor (cursor-agent --print)",
    factory="harnesscheck.backends.cursor:CursorTransport",
    kit_profile="harnesscheck.backends.cursor.kit_profile:PROFILE",
    capabilities=frozenset({C.mcp_tools, C.host_policy, C.event_stream, C.host_approvals, C.native_tools_audited, C.usage_reporting, C.cancellation}),
    cli_name="cursor-agent",
    description="Subscription CLI (not on the npm registry: offline level only).",
)
