"""The ACP backend's specs: what every ACP agent declares (ACP_CAPABILITIES), the built-in
`acp-fake` column (the fake ACP agent, collected by backends/registry.py `BUILTIN_SPECS`), and
the spec of any other ACP agent, built from its profile (`acp_spec`, used by the registry's
`get_spec` for `acp:...` and the shipped `acp-<name>` profiles; doc/SPEC-acp.md).
"""

from __future__ import annotations

from pathlib import Path

from harnesscheck.core.contracts import Capability as C
from harnesscheck.core.contracts import Kind, ProviderSpec

#: What every ACP agent declares: the host's bridge as its MCP server and a cancel that ends
#: the tree (session/cancel, then the kill). Anything agent-specific (built-ins off, usage)
#: is a profile's to claim, not the protocol's.
ACP_CAPABILITIES = frozenset({C.mcp_tools, C.host_policy, C.event_stream, C.host_approvals, C.cancellation})

SPEC = ProviderSpec(
    id="acp-fake",
    kind=Kind.harness,
    label="ACP agent (harnesscheck's fake, offline)",
    factory="harnesscheck.backends.acp:AcpTransport",
    # the fake reports usage in its prompt result, as claude-agent-acp and opencode do
    capabilities=ACP_CAPABILITIES | {C.usage_reporting},
    cli_name="acp-agent",
    description="The fake ACP agent (fake_clis/acp-agent) through the ACP backend: the offline ACP column.",
)


def acp_spec(backend_id: str) -> ProviderSpec:
    """The spec of an ACP agent given by command line or profile file (`acp:...`): the profile
    is read now, so a bad one fails before anything runs."""
    from harnesscheck.backends.acp.profile import profile_for

    profile = profile_for(backend_id)
    package, _, version = (profile.install.npm or "").rpartition("@")
    return ProviderSpec(
        id=backend_id,
        kind=Kind.harness,
        label=f"ACP agent {profile.name}",
        factory="harnesscheck.backends.acp:AcpTransport",
        # a profile that switches the agent's built-ins off claims it (judged at the wire at loopback)
        capabilities=ACP_CAPABILITIES | ({C.builtin_tools_off} if profile.builtins_off else set()),
        cli_name=Path(profile.install.bin or profile.command[0]).name,
        # the npm pin the loopback level runs (the real agent against the scripted servers)
        cli_package=package or None,
        pinned_version=version or None,
        description=profile.description or f"ACP agent: {' '.join(profile.command)}",
    )
