"""What the suite asks of a backend, in one place: the required minimum and the optional rest.

SQLAlchemy's ``requirements.py`` idea: a backend's whole support story is a small, visible
table, and "not declared" never means "not checked". Claiming less never means testing less.

- The minimum every safe backend meets, declared or not (doc/AUTHORS.md, "The minimum"):
  the environment (env.*: no provider key, secret or host credential reaches the child), the
  scope (scope.*: every tool call reaches the choke point, nothing outside the root is read,
  written or shown), time (time.*: deadlines, cancellation and process trees), errors
  (errors.*: typed, retryable or not, secret-free) and, for a harness, bridge readiness
  (bridge.*: a session never runs on without the tools it was given). Most of those checks
  require no capability, so they run for everyone. ``REQUIRED[kind]`` names the capabilities
  the rest of them need: a check requiring one runs for every backend of the kind, and a
  backend that does not declare it is judged anyway (a declaration cannot buy a green cell):
  ``cancellation`` (time.cancel-ends-session), for a harness ``mcp_tools`` (host tools reach
  it through an MCP server: the scope and bridge checks), for an api backend
  ``host_tool_loop`` (the host's loop runs every tool call through dispatch).
- Every other capability is optional. A check that requires an optional capability runs
  only for backends that declare it; a ``declines=`` check runs for those that do not, and
  judges that the backend declines honestly by its behaviour: it refuses with a typed error
  or says what it will not do, and never silently pretends (``audit.declines-builtins-honestly``,
  ``selection.declines-stated``, ``selection.huge-folded-prompt-not-in-argv``,
  ``selection.complete-declines-tools``, ``usage.served-model-never-guessed``,
  ``usage.cost-never-fabricated``).

The plugin reads ``required_for`` when it decides whether a cell runs; the matrix shows per
column how many of the applicable checks ran (kit/matrix.py ``coverage``), so a backend that
declares little shows a thin column, never a full green one.
"""

from __future__ import annotations

from harnesscheck.core.contracts import Capability, Kind, ProviderSpec

REQUIRED: dict[Kind, frozenset[Capability]] = {
    Kind.harness: frozenset({Capability.cancellation, Capability.mcp_tools}),
    Kind.api: frozenset({Capability.cancellation, Capability.host_tool_loop}),
}


def required_for(spec: ProviderSpec) -> frozenset[Capability]:
    """The capabilities `spec`'s backend is judged on whatever it declares."""
    return REQUIRED.get(spec.kind, frozenset())


def unmet(spec: ProviderSpec, requires) -> list[str]:
    """The capabilities among `requires` that `spec` neither declares nor is required to meet
    (a cell needing one of them is skipped `unsupported-by-backend`)."""
    required = required_for(spec)
    return sorted(c.value for c in requires if not spec.supports(c) and c not in required)
