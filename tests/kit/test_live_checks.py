"""The live smokes can fail: each is run here against stand-in evidence of a known-bad
backend (no real CLI is needed), and passes on the evidence of a good one. The live level
itself needs a login and is never run in CI (conformance/test_live.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
import tests_mutants_import  # noqa: F401 - puts the checkout on sys.path

from conformance import test_live as live  # the module, not its functions: pytest would collect those here
from harnesscheck.backends.registry import get_spec
from harnesscheck.core.contracts import AgentOutcome, ModelVerdict, OutcomeStatus, Refusal
from harnesscheck.kit.session import Workspace


@dataclass
class _Run:
    outcome: AgentOutcome
    extra: list = field(default_factory=list)

    def outcome_and_artifacts(self) -> str:
        return self.outcome.model_dump_json()


class _Backend:
    """Plays a backend at the live level: every run returns `outcome`."""

    def __init__(self, tmp_path: Path, outcome: AgentOutcome, spec: str = "claude-code"):
        self.spec, self.outcome, self.tmp_path, self.n = get_spec(spec), outcome, tmp_path, 0

    def parent_env_canaries(self):
        return {"OPENAI_API_KEY": "canary-openai-1"}

    def workspace(self):
        self.n += 1
        return Workspace(self.tmp_path / f"ws{self.n}")

    def run(self, scenario, **kwargs):
        return _Run(self.outcome)


GOOD = AgentOutcome(
    status=OutcomeStatus.ok,
    text="OK",
    auth_source="none",
    requested_model="claude-opus-4-8",
    served_model="claude-opus-4-8",
    model_verdict=ModelVerdict.match,
    tool_calls=1,
    refusals=[Refusal(tool="read_file", code="path_outside_scope", detail="../outside")],
)


def test_the_smokes_pass_a_good_backend(tmp_path):
    live.test_smoke_answers(_Backend(tmp_path, GOOD))
    live.test_smoke_refuses_outside(_Backend(tmp_path, GOOD))


@pytest.mark.parametrize(
    "defect",
    [
        {"auth_source": None},  # the auth source it claims to preflight is never reported
        {"served_model": None, "model_verdict": ModelVerdict.unverified},  # no served model
        {"served_model": "claude-haiku-9", "model_verdict": ModelVerdict.mismatch},  # another model answered
    ],
)
def test_smoke_answers_fails_a_backend_that_hides_its_auth_or_model(tmp_path, defect):
    with pytest.raises(AssertionError):
        live.test_smoke_answers(_Backend(tmp_path, GOOD.model_copy(update=defect)))


def test_smoke_refuses_outside_fails_when_nothing_was_refused(tmp_path):
    """The model never called the tool (or the refusals were dropped): not a pass."""
    with pytest.raises(AssertionError, match="no read_file refusal"):
        live.test_smoke_refuses_outside(_Backend(tmp_path, GOOD.model_copy(update={"refusals": [], "tool_calls": 0})))
