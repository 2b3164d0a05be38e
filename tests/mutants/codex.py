"""Known-bad backends built on the codex transport (see __init__.py)."""

from __future__ import annotations

from harnesscheck.contracts import Capability
from harnesscheck.providers.codex import CodexTransport
from tests.mutants import mutant_spec

M = "tests.mutants.codex"


class HidesItsBuiltins(CodexTransport):
    """Declares neither built-ins off nor an audit of them: native tool use would go unseen."""


class ForgetsNativeToolCalls(CodexTransport):
    """Drops the vendor built-in calls it saw from the outcome."""

    def _finish(self, outcome, ctx, result, info, redact):
        return super()._finish(outcome, ctx, result, info, redact).model_copy(update={"native_tool_calls": []})


class FailsAnUnverifiedModel(CodexTransport):
    """Treats a served model codex never reports as a mismatch: every guarded session fails."""

    def judge(self, outcome, ctx, *, tool_less):
        from harnesscheck.contracts import ErrorClass, ModelVerdict, OutcomeStatus

        outcome = super().judge(outcome, ctx, tool_less=tool_less)
        if (outcome.ok and outcome.requested_model and outcome.model_verdict is ModelVerdict.unverified
                and self.settings.model_mismatch == "fail"):
            return outcome.model_copy(update={"status": OutcomeStatus.error, "error_class": ErrorClass.invalid_request,
                                              "message": "served model unverified (HARNESS_MODEL_MISMATCH=fail)"})
        return outcome


hides_its_builtins = mutant_spec(
    "codex", M, HidesItsBuiltins,
    capabilities=frozenset(c for c in mutant_spec("codex", M, HidesItsBuiltins).capabilities if c is not Capability.native_tools_audited),
)
forgets_native_tool_calls = mutant_spec("codex", M, ForgetsNativeToolCalls)
fails_an_unverified_model = mutant_spec("codex", M, FailsAnUnverifiedModel)
