"""The ProviderSpec of the `gemini` backend: its id, kind, capabilities and CLI pins.

Collected, in the matrix order, by backends/registry.py `BUILTIN_SPECS` (doc/SPEC-registry.md).
"""

from __future__ import annotations

from harnesscheck.core.contracts import Capability as C
from harnesscheck.core.contracts import Kind, ProviderSpec

SPEC = ProviderSpec(
    id="gemini",
    kind=Kind.harness,
    label="Gemini CLI (gemini -p)",
    factory="harnesscheck.backends.gemini:GeminiTransport",
    kit_profile="harnesscheck.backends.gemini.kit_profile:PROFILE",
    capabilities=frozenset(
        {
            C.mcp_tools,
            C.host_policy,
            C.event_stream,
            C.host_approvals,
            C.builtin_tools_off,  # tools.core lists none of its built-ins (verified at the wire)
            C.usage_reporting,
            C.served_model_reporting,  # result.stats.models keys: the server's modelVersion
            C.cancellation,
            C.config_isolation,  # per-run HOME holding only our .gemini/settings.json
            C.early_auth_stop,  # a 401 is never retried by the CLI; its result ends the session
        }
    ),
    cli_name="gemini",
    cli_package="@google/gemini-cli",
    min_version="0.61.0",
    max_version="1.0.0",
    pinned_version="0.61.0",
    description="API-keyed CLI; built-ins removed by settings, host tools through the MCP bridge.",
)
