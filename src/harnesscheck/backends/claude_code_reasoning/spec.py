"""The ProviderSpec of the `claude-code-reasoning` backend: its id, kind, capabilities and CLI pins.

Collected, in the matrix order, by backends/registry.py `BUILTIN_SPECS` (doc/SPEC-registry.md).
"""

from __future__ import annotations

from harnesscheck.core.contracts import Capability as C
from harnesscheck.core.contracts import Kind, ProviderSpec

SPEC = ProviderSpec(
    id="claude-code-reasoning",
    kind=Kind.api,
    label="Claude Code, reasoning only (one claude -p call per host turn)",
    factory="harnesscheck.backends.claude_code_reasoning:ClaudeReasoningTransport",
    kit_profile="harnesscheck.backends.claude_code_reasoning.kit_profile:PROFILE",
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
        }
    ),
    # No CLI fields of its own: it runs the claude-code spec's CLI (its pin, its range).
    description="The host owns the loop; the CLI executes nothing (tools as a text protocol; tripwire on tool_use).",
)
