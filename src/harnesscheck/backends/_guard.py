"""The served-model guard: one verdict for every backend (HARNESS_MODEL_MISMATCH).

Requirement (DESIGN "Configuration", doc/SPEC-contracts.md "Served-model guard"): every
backend, api and harness alike, judges the served model the same way once its own parser
has said what was requested, what was served and whether they match:

- `mismatch` under `HARNESS_MODEL_MISMATCH=fail`: an otherwise ok session ends
  `error` / `MISMATCH_ERROR_CLASS`, its message naming both models; under `warn` it stays
  ok and the message says so.
- `unverified` (the backend reported no served model for a requested one): the session is
  not failed for it under either policy (nothing contradicts the request), and the message
  warns that the served model could not be verified.
- `match`: nothing changes.

A session that already failed keeps its own status and class (the guard never hides an
earlier failure behind a model complaint).
"""

from __future__ import annotations

from typing import NamedTuple

from harnesscheck.core.contracts import AgentOutcome, ErrorClass, ModelVerdict, OutcomeStatus

#: A served-model mismatch under HARNESS_MODEL_MISMATCH=fail is this error class (status error).
MISMATCH_ERROR_CLASS = ErrorClass.invalid_request


class GuardVerdict(NamedTuple):
    """What the guard decides: `fail` ends the session; `note` goes into its message."""

    fail: bool
    note: str


def guard_verdict(requested: str | None, served: str | None, verdict: ModelVerdict, policy: str) -> GuardVerdict:
    """The one decision: (requested, served, the backend's verdict, the policy) -> fail?, note."""
    if verdict is ModelVerdict.mismatch:
        note = f"served model {served!r} is not the requested {requested!r} (HARNESS_MODEL_MISMATCH={policy})"
        return GuardVerdict(policy == "fail", note)
    if verdict is ModelVerdict.unverified and requested:
        return GuardVerdict(False, f"served model unverified: the backend did not report which model answered (requested {requested!r})")
    return GuardVerdict(False, "")


def apply_model_guard(outcome: AgentOutcome, policy: str) -> AgentOutcome:
    """The outcome with the guard's verdict applied (see the module docstring)."""
    decision = guard_verdict(outcome.requested_model, outcome.served_model, outcome.model_verdict, policy)
    if not decision.note or outcome.status is not OutcomeStatus.ok:
        return outcome
    if decision.fail:
        return outcome.model_copy(
            update={
                "status": OutcomeStatus.error,
                "error_class": MISMATCH_ERROR_CLASS,
                "retryable": False,
                "message": _join(decision.note, outcome.message),
            }
        )
    return outcome.model_copy(update={"message": _join(outcome.message, decision.note)})


def _join(first: str, second: str) -> str:
    return "; ".join(p for p in (first, second) if p)
