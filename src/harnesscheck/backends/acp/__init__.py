"""The ACP backend: drive and judge any coding agent through the Agent Client Protocol.

`AcpTransport` (transport.py) runs an agent described by an `AcpProfile` (profile.py, TOML files
in profiles/) under the host's process layer; `AcpSession` (session.py) is the host side of the
JSON-RPC conversation; errors.py maps the agent's errors to our classes. doc/SPEC-acp.md.
"""

from harnesscheck.backends.acp.profile import AcpProfile, adhoc_profile, builtin_profile, load_profile, profile_for
from harnesscheck.backends.acp.session import AcpEvidence, AcpSession
from harnesscheck.backends.acp.transport import AcpTransport

__all__ = ["AcpEvidence", "AcpProfile", "AcpSession", "AcpTransport", "adhoc_profile", "builtin_profile", "load_profile", "profile_for"]
