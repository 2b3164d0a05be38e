"""What the suite asks of a backend, in one place: the required minimum and the optional rest.

SQLAlchemy's ``requirements.py`` idea: a backend's whole support story is a small, visible
table, and "not declared" never means "not checked".

- ``REQUIRED[kind]``: capabilities every safe backend of that kind must meet, declared or not.
  A check that requires one of them runs for every backend of the kind; a backend that does
  not declare it is judged anyway (a declaration cannot buy a green cell). Today: a harness
  must end a session, tree and all, when the host cancels (``cancellation``: the time area's
  promise a host relies on to stop a runaway CLI). The rest of the minimum (environment,
  scope, timeouts and process trees, error classes, bridge readiness when tools are offered)
  is made of checks that require no capability at all, so they already run for everyone.
- Every other capability is optional. A check that requires an optional capability runs
  only for backends that declare it; a ``declines=`` check runs for those that do not, and
  judges that the backend declines honestly by its behaviour (e.g.
  ``audit.declines-builtins-honestly``, ``selection.complete-declines-tools``).

The plugin reads ``required_for`` when it decides whether a cell runs; doc/SPEC-kit.md and
doc/AUTHORS.md describe the table.
"""

from __future__ import annotations

from harnesscheck.contracts import Capability, Kind, ProviderSpec

REQUIRED: dict[Kind, frozenset[Capability]] = {
    Kind.harness: frozenset({Capability.cancellation}),
    Kind.api: frozenset({Capability.cancellation}),
}


def required_for(spec: ProviderSpec) -> frozenset[Capability]:
    """The capabilities `spec`'s backend is judged on whatever it declares."""
    return REQUIRED.get(spec.kind, frozenset())


def unmet(spec: ProviderSpec, requires) -> list[str]:
    """The capabilities among `requires` that `spec` neither declares nor is required to meet
    (a cell needing one of them is skipped `unsupported-by-backend`)."""
    required = required_for(spec)
    return sorted(c.value for c in requires if not spec.supports(c) and c not in required)
