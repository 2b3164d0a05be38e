"""Known-bad backends built on the cursor transport (see __init__.py)."""

from __future__ import annotations

from harnesscheck.backends.cursor import CursorTransport
from tests.mutants import mutant_spec

M = "tests.mutants.cursor"


class RunsOnWithoutItsBridge(CursorTransport):
    """Never reads the bridge's trace: a session whose bridge never started ends ok, tool-less."""

    readiness_from_trace = False


class EndsOkOnAnUncleanAudit(CursorTransport):
    """Attaches the audit's unclean verdict but leaves the session ok: the host must re-derive it."""

    def judge(self, outcome, ctx, *, tool_less):
        audit = outcome.audit
        judged = super().judge(outcome.model_copy(update={"audit": None}), ctx, tool_less=tool_less)
        return judged.model_copy(update={"audit": audit})


runs_on_without_its_bridge = mutant_spec("cursor", M, RunsOnWithoutItsBridge)
ends_ok_on_an_unclean_audit = mutant_spec("cursor", M, EndsOkOnAnUncleanAudit)


class DeclinesSilently(CursorTransport):
    """Ignores max_iters and folds the system prompt into the prompt without telling the host."""

    def declined(self, request, *, one_shot=False):
        return ()


declines_silently = mutant_spec("cursor", M, DeclinesSilently)
