"""Concurrency: parallel sessions of one backend stay isolated — own session ids, own traces,
own refusals — and all complete (saturation is never a hang); the host's concurrency cap holds."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor

from harnesscheck.core.contracts import Kind, OutcomeStatus
from harnesscheck.kit.catalog import check
from harnesscheck.kit.session import ToolCall

#: The host's cap in concurrency.cap-holds (Settings.concurrency) and the sessions started at once.
CAP = 2
#: How long each CLI stays alive in its first run, then the longest hold tried before `budget`.
HOLD_S, MAX_HOLD_S = 0.3, 2.4


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
        assert run.outcome.status == OutcomeStatus.ok, run.said
    ids = [r.outcome.session_id for r in runs]
    printed = {i for r in runs for i in r.facts.cli_session_ids}
    # a backend that reports session ids reports its own for each (the CLI's own id passed
    # through is true whatever it is: a fixture's CLI prints the same one every time)
    if any(ids) and not set(ids) <= printed:
        assert all(ids) and len(set(ids)) == 3, f"session ids not distinct: {ids}"
    # each session's refusals are its own: in the outcome, or as error results its model saw
    refused = [len(r.outcome.refusals) or len(but.tool_errors(r) or []) for r in runs]
    assert refused == [0, 1, 0], f"refusals crossed between sessions: {refused}"
    seen = ["hello from the worktree" in "\n".join(r.model_saw) for r in runs]
    assert seen[0] and not seen[1] and not seen[2], "a session's tool result reached another session's model"
    for run in runs:
        foreign = {rec.get("session") for rec in run.trace} - {run.outcome.session_id, None}
        assert not foreign, f"trace of {run.outcome.session_id} holds records of {foreign}"


#: Rounds of concurrent session pairs in concurrency.shared-worktree-isolated: a defect that
#: shares a file between sessions shows whenever both sessions wrote it before either read it.
SHARED_ROUNDS = 3


@check("concurrency.shared-worktree-isolated", levels=["offline"], incident=["C12", "A8"])
def test_shared_worktree_isolated(but):
    """Two sessions run at once on ONE worktree, their run dirs side by side under one parent:
    each session's trace and outcome hold only its own calls, each model sees only its own
    results, neither session's run files are clobbered by the other's (the run dir's trace, judged
    where the backend keeps one: always for a backend built on harnesscheck's providers), and
    the writes of both land in the worktree. Repeated a few rounds (a shared file shows when both sessions wrote it
    before either read it); a correct backend is clean in every round."""
    ws = but.workspace()
    parent = ws.base / "runs"
    parent.mkdir(mode=0o700)
    # The run-dir trace is harnesscheck's own contract: judged for backends built on its
    # providers (an empty one there is a clobbered one) and for any other that writes it.
    traced = but.built_on_dispatch()
    for n in range(SHARED_ROUNDS):
        names = [f"from-a-{n}.txt", f"from-b-{n}.txt"]
        plans = [
            [ToolCall("write_file", {"path": name, "content": f"written by session {tag} round {n}\n"}), ToolCall("read_file", {"path": name})]
            for name, tag in zip(names, "ab")
        ]
        dirs = [parent / f"{tag}{n}" for tag in "ab"]
        with ThreadPoolExecutor(max_workers=2) as pool:
            runs = list(pool.map(lambda pd: but.run_tools(pd[0], workspace=ws, read_only=False, run_dir=pd[1], timeout_s=90), zip(plans, dirs)))
        for run, name, other, tag in zip(runs, names, reversed(names), "ab"):
            o = run.outcome
            assert not run.tool_failures, f"round {n}: session {tag}'s calls reached no tool server: {run.tool_failures[:2]}"
            assert o.status == OutcomeStatus.ok, f"round {n}: session {tag} {o.status}/{o.error_class}: {o.message}"
            landed = ws.root / name
            assert landed.is_file() and landed.read_text() == f"written by session {tag} round {n}\n", (
                f"round {n}: session {tag}'s write of {name} did not land as written"
            )
            saw = "\n".join(run.model_saw)
            assert f"session {tag} round {n}" in saw, f"round {n}: session {tag}'s model never saw its own read of {name}"
            other_tag = "b" if tag == "a" else "a"
            assert f"session {other_tag} round {n}" not in saw, f"round {n}: session {tag}'s model saw session {other_tag}'s result"
            if not (traced or run.trace):
                continue  # no harnesscheck trace kept (optional for a backend not built on its providers)
            trace = json.dumps(run.trace)
            assert name in trace, (
                f"round {n}: session {tag}'s trace (in its run dir {os.path.basename(dirs[0 if tag == 'a' else 1])}) "
                f"does not hold its own calls on {name}: a run file was shared or clobbered"
            )
            assert other not in trace, f"round {n}: session {tag}'s trace holds the other session's calls on {other}"
            foreign = {rec.get("session") for rec in run.trace} - {o.session_id, None}
            assert not foreign, f"round {n}: session {tag}'s trace holds records of {foreign}"


def _most_at_once(spans: list[tuple[float, float]]) -> int:
    """The largest number of (start, end) intervals that were open at the same moment."""
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans], key=lambda e: (e[0], e[1]))
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


@check("concurrency.cap-holds", kinds=[Kind.harness], levels=["offline"], incident="C12")
def test_cap_holds(but):
    """N+1 sessions started at once (HARNESS_BACKEND_CONCURRENCY=N) never run more than N CLIs at
    the same moment, judged from the start and end each fake CLI recorded itself; all complete.

    The verdict needs CLIs that would have overlapped without a cap: every CLI stays alive
    `hold` seconds, and a run counts only if that hold outlasts the spread of the sessions'
    starts plus twice the slowest spawn seen; otherwise the hold grows to fit (up to MAX_HOLD_S),
    then the cell is skipped `budget` (this machine too slow to tell), never judged.

    The cap is harnesscheck's own host setting (`Settings.concurrency`): a backend not built on
    its providers was never given it (doc/AUTHORS.md), so it is not judged on it."""
    if not but.built_on_dispatch():
        but.skip("unsupported-by-backend", f"{but.spec.id} is not built on harnesscheck's providers: HARNESS_BACKEND_CONCURRENCY is not its contract")
    hold = HOLD_S
    while True:
        but.hold_s = hold
        workspaces = [but.workspace() for _ in range(CAP + 1)]
        with ThreadPoolExecutor(max_workers=CAP + 1) as pool:
            runs = list(pool.map(lambda ws: but.run("held_success", workspace=ws, timeout_s=60, settings={"concurrency": CAP}), workspaces))
        for run in runs:
            assert run.outcome.status == OutcomeStatus.ok, run.said
        spans = [span for run in runs for span in (run.cli_spans or [])]
        if len(spans) != CAP + 1:
            raise AssertionError(f"the {CAP + 1} sessions recorded {len(spans)} CLI runs: expected one each")
        most = _most_at_once(spans)
        assert most <= CAP, (
            f"{most} CLIs ran at once with HARNESS_BACKEND_CONCURRENCY={CAP} (recorded spans, monotonic: "
            f"{sorted((round(a, 3), round(b, 3)) for a, b in spans)})"
        )
        # Would an uncapped backend have overlapped them all? The first CLI's span must cover the
        # last session's start plus a spawn (the slowest of the CLIs that started first, doubled).
        started = sorted(run.timeline.started for run in runs)
        first = sorted(spans)
        spawn = max(a - started[0] for a, _ in first[:CAP])
        if first[0][1] > started[-1] + 2 * spawn:
            return
        if hold >= MAX_HOLD_S:
            but.skip(
                "budget",
                f"sessions started {started[-1] - started[0]:.2f} s apart and spawned in up to {spawn:.2f} s: "
                f"a {hold:g} s hold cannot show whether the cap held on this machine now",
            )
        needed = started[-1] + 2 * spawn - first[0][0]  # what the first CLI's span had to cover
        hold = min(max(1.5 * needed, 2 * hold), MAX_HOLD_S)
