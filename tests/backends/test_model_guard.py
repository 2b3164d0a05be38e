"""The served-model guard (backends/_guard.py): one decision for every backend.

The conformance check `usage.mismatch-policy-applied` runs it per backend (api, fake,
claude-code, codex, cursor); these pin the decision table itself."""

from __future__ import annotations

import pytest

from harnesscheck.backends._guard import MISMATCH_ERROR_CLASS, apply_model_guard, guard_verdict
from harnesscheck.core.contracts import AgentOutcome, ErrorClass, ModelVerdict, OutcomeStatus


def _outcome(verdict, *, status=OutcomeStatus.ok, requested="m-1", served="m-2", message=""):
    return AgentOutcome(status=status, requested_model=requested, served_model=served, model_verdict=verdict, message=message)


def test_mismatch_fails_only_under_the_fail_policy():
    failed = apply_model_guard(_outcome(ModelVerdict.mismatch), "fail")
    assert (failed.status, failed.error_class, failed.retryable) == (OutcomeStatus.error, MISMATCH_ERROR_CLASS, False)
    assert "'m-2'" in failed.message and "'m-1'" in failed.message
    warned = apply_model_guard(_outcome(ModelVerdict.mismatch, message="done"), "warn")
    assert warned.status is OutcomeStatus.ok and warned.message.startswith("done; served model 'm-2'")


@pytest.mark.parametrize("policy", ["fail", "warn"])
def test_unverified_warns_and_never_fails(policy):
    out = apply_model_guard(_outcome(ModelVerdict.unverified, served=None), policy)
    assert out.status is OutcomeStatus.ok and "unverified" in out.message
    assert not guard_verdict(None, None, ModelVerdict.unverified, policy).note  # nothing requested: nothing to verify


def test_a_failed_session_keeps_its_own_failure():
    out = apply_model_guard(_outcome(ModelVerdict.mismatch, status=OutcomeStatus.blocked).model_copy(update={"error_class": ErrorClass.auth}), "fail")
    assert (out.status, out.error_class) == (OutcomeStatus.blocked, ErrorClass.auth)


def test_match_changes_nothing():
    out = _outcome(ModelVerdict.match, served="m-1")
    assert apply_model_guard(out, "fail") == out
