"""The ProviderSpec of the `copilot` backend: its id, kind, capabilities and CLI pins.

Collected, in the matrix order, by backends/registry.py `BUILTIN_SPECS` (doc/SPEC-registry.md).
"""

from __future__ import annotations

from harnesscheck.core.contracts import Capability as C
from harnesscheck.core.contracts import Kind, ProviderSpec

SPEC = ProviderSpec(
    id="copilot",
    kind=Kind.api,
    label="GitHub Copilot (api provider: device-flow login, routed by GET /models)",
    factory="harnesscheck.backends.copilot:CopilotTransport",
    kit_profile="harnesscheck.backends.copilot.kit_profile:PROFILE",
    capabilities=frozenset(
        {
            C.host_tool_loop,
            C.host_policy,
            C.event_stream,
            C.host_approvals,
            C.builtin_tools_off,
            C.max_turns,
            C.system_prompt,
            C.usage_reporting,
            C.served_model_reporting,
            C.cancellation,
            C.early_auth_stop,  # a 401 is sent once more only with a refreshed credential
            C.credential_exchange,
        }
    ),
    description="GitHub Copilot subscription over its API; the host owns the tool loop (harnesscheck login copilot).",
)
