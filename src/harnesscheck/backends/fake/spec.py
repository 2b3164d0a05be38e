"""The ProviderSpec of the `fake` backend: its id, kind, capabilities and CLI pins.

Collected, in the matrix order, by backends/registry.py `BUILTIN_SPECS` (doc/SPEC-registry.md).
"""

from __future__ import annotations

from harnesscheck.core.contracts import Capability as C
from harnesscheck.core.contracts import Kind, ProviderSpec

SPEC = ProviderSpec(
    id="fake",
    kind=Kind.api,
    label="Fake (in-process, scripted)",
    factory="harnesscheck.backends.fake:FakeTransport",
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
        }
    ),
    description="Deterministic in-process backend; the reference for every applicable check.",
)
