"""Concurrency: parallel sessions of one backend stay isolated — own session ids, own traces,
own refusals — and all complete (saturation is never a hang)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from harnesscheck.contracts import OutcomeStatus
from harnesscheck.kit.adapters import ToolCall
from harnesscheck.kit.catalog import check


@check("concurrency.parallel-sessions-isolated", incident=["C12", "A8"])
def test_parallel_sessions_isolated(but):
    """Three concurrent sessions each finish with their own results, refusals, trace and (where reported)
    session id, no crosstalk."""
    plans = [
        [ToolCall("read_file", {"path": "README.md"})],
        [ToolCall("read_file", {"path": "../outside/secret.txt"})],
        [ToolCall("list_dir", {"path": "."})],
    ]
    workspaces = [but.workspace() for _ in plans]
    with ThreadPoolExecutor(max_workers=3) as pool:
        runs = list(pool.map(lambda pw: but.run_tools(pw[0], workspace=pw[1], timeout_s=90), zip(plans, workspaces)))
    for run in runs:
        assert run.outcome.status == OutcomeStatus.ok, f"{run.outcome.status}/{run.outcome.error_class}: {run.outcome.message}"
    ids = [r.outcome.session_id for r in runs]
    if any(ids):  # a backend that reports session ids reports its own for each
        assert all(ids) and len(set(ids)) == 3, f"session ids not distinct: {ids}"
    # each session's refusals are its own: in the outcome, or as error results its model saw
    refused = [len(r.outcome.refusals) or len(but.tool_errors(r) or []) for r in runs]
    assert refused == [0, 1, 0], f"refusals crossed between sessions: {refused}"
    seen = ["hello from the worktree" in "\n".join(r.model_saw) for r in runs]
    assert seen[0] and not seen[1] and not seen[2], "a session's tool result reached another session's model"
    for run in runs:
        foreign = {rec.get("session") for rec in run.trace} - {run.outcome.session_id, None}
        assert not foreign, f"trace of {run.outcome.session_id} holds records of {foreign}"
