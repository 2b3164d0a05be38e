"""The ProviderSpec of the `codex` backend: its id, kind, capabilities and CLI pins.

Collected, in the matrix order, by backends/registry.py `BUILTIN_SPECS` (doc/SPEC-registry.md).
"""

from __future__ import annotations

from harnesscheck.core.contracts import Capability as C
from harnesscheck.core.contracts import Kind, ProviderSpec

SPEC = ProviderSpec(
    id="codex",
    kind=Kind.harness,
    label="Codex (codex exec)",
    factory="harnesscheck.backends.codex:CodexTransport",
    kit_profile="harnesscheck.backends.codex.kit_profile:PROFILE",
    capabilities=frozenset(
        {
            C.mcp_tools,
            C.host_policy,
            C.event_stream,
            C.host_approvals,
            C.native_tools_audited,
            C.usage_reporting,
            C.cancellation,
            C.config_isolation,
            C.early_auth_stop,  # stops at the first 401 "Reconnecting... 1/5" notice
        }
    ),
    cli_name="codex",
    cli_package="@openai/codex",
    min_version="0.100.0",
    max_version="1.0.0",
    pinned_version="0.171.0",
    description="Subscription CLI; bridge via per-run CODEX_HOME; built-ins audited.",
)
