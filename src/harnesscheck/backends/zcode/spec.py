"""The ProviderSpec of the `zcode` backend: its id, kind, capabilities and CLI pins.

Collected, in the matrix order, by backends/registry.py `BUILTIN_SPECS` (doc/SPEC-registry.md).
"""

from __future__ import annotations

from harnesscheck.core.contracts import Capability as C
from harnesscheck.core.contracts import Kind, ProviderSpec

SPEC = ProviderSpec(
    id="zcode",
    kind=Kind.harness,
    label="zcode (Z.AI GLM coding plan, zcode --prompt)",
    factory="harnesscheck.backends.zcode:ZcodeTransport",
    kit_profile="harnesscheck.backends.zcode.kit_profile:PROFILE",
    capabilities=frozenset(
        {
            C.mcp_tools,
            C.host_policy,
            C.event_stream,
            C.host_approvals,
            C.native_tools_audited,
            C.usage_reporting,
            C.served_model_reporting,
            C.cancellation,
            C.config_isolation,
        }
    ),
    cli_name="zcode",
    # The built-in denylist is the one the references recorded from 0.16.9: a 0.x line
    # beyond it may add built-ins the list does not name (the audit still flags them).
    min_version="0.16.0",
    max_version="1.0.0",
    description="Subscription CLI (not obtainable here: offline level only, fixtures from references).",
)
