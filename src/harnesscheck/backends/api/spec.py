"""The ProviderSpec of the `api` backend: its id, kind, capabilities and CLI pins.

Collected, in the matrix order, by backends/registry.py `BUILTIN_SPECS` (doc/SPEC-registry.md).
"""

from __future__ import annotations

from harnesscheck.core.contracts import Capability as C
from harnesscheck.core.contracts import Kind, ProviderSpec

SPEC = ProviderSpec(
    id="api",
    kind=Kind.api,
    label="API (Anthropic Messages / OpenAI Chat Completions / Responses)",
    factory="harnesscheck.backends.api:ApiTransport",
    kit_profile="harnesscheck.backends.api.kit_profile:PROFILE",
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
            C.early_auth_stop,
            C.retry_events,
        }
    ),
    description="Raw model API; the host owns the tool loop through dispatch.",
)
