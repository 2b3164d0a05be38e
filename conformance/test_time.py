"""Timeouts, cancellation and process trees: a stall always ends, truncated, with what was seen,
inside timeout + grace, and nothing the backend started survives it."""

from __future__ import annotations

import os
import signal

from harnesscheck.core.contracts import Capability as C
from harnesscheck.core.contracts import ErrorClass as E
from harnesscheck.core.contracts import Kind, OutcomeStatus
from harnesscheck.kit.catalog import check
from harnesscheck.kit.watchdog import Watchdog, still_running

#: The session deadline of the timeout checks. It only has to outlast the upstream's way to
#: its stall, which the kit observes (the fake CLI records each step it has done): a run in
#: which the deadline could fire first is repeated at 4x, then skipped `budget`, never judged
#: (BackendUnderTest.run_stalled). Where the adapter cannot see the stall, BLIND_TIMEOUT_S.
TIMEOUT_S = 0.1
BLIND_TIMEOUT_S = 2.0
GRACE_S = 12.0  # term grace + linger + bounded drain + a noisy 2-core machine; an upper bound only
#: A lingering CLI must be killed this soon after it printed its result (the reference waits
#: 2 s, harness-anchors C10 asks 2-5 s; a backend that waits 30 s fails). Counted from the
#: result line the fake recorded writing, so CLI start-up on a loaded machine is not in it.
LINGER_BOUND_S = 15.0
LINGER_BLIND_BOUND_S = 30.0  # from the start, where the result line's time is not observable
#: The host's linger and term grace (Settings.linger_s / term_grace_s) in the checks whose CLI
#: lingers or ignores SIGTERM: what is judged is that the tree is ended, not how long the
#: production default (2 s) lets it flush. A backend that ignores the host's setting is only slower.
TEARDOWN_S = 0.1
#: How long after the prompt's last byte the CLI may wait for stdin's EOF: a backend that writes
#: the prompt and closes the pipe leaves microseconds between the two; the bound only has to
#: outlast a descheduled writer thread on a loaded machine, never the backend's own waiting.
STDIN_HELD_BOUND_S = 2.5
CANCEL_TIMEOUT_S = 120.0  # only an upper bound: the kit cancels as soon as the upstream stalls
#: The per-cell watchdogs (kit/watchdog.py): a session still running this long after the moment
#: its check needs has failed, so the kit ends it there and the cell fails at once, instead of
#: waiting out CANCEL_TIMEOUT_S or a lingering CLI. Where the check already bounds the session
#: (GRACE_S after the deadline or the cancel, LINGER_BOUND_S after the result) the watchdog uses
#: that very bound, so the verdict cannot change; where it did not (giving control back after an
#: abandoned stream, or after a timeout whose subject is the tree), twice GRACE_S.
SESSION_END_BOUND_S = 2 * GRACE_S
AFTER_DEADLINE = Watchdog("deadline", GRACE_S)
AFTER_CANCEL = Watchdog("cancel", GRACE_S)
AFTER_RESULT = Watchdog("result", LINGER_BOUND_S)
ENDS_AFTER_DEADLINE = Watchdog("deadline", SESSION_END_BOUND_S)
ENDS_AFTER_ABANDON = Watchdog("abandon", SESSION_END_BOUND_S)
#: A CLI still waiting on an open stdin pipe GRACE_S after its last byte (about five times
#: STDIN_HELD_BOUND_S) was held past that bound already: the session need not run to its 60 s deadline.
STDIN_LEFT_OPEN = Watchdog("stdin", GRACE_S)
BLIND_CANCEL_AFTER_S = 1.0  # where the stall is not observable, the host cancels this long after the start


def _reaped(survivors: list[int]) -> list[int]:
    """`survivors`, after killing them: the verdict is taken, and a failing backend's leaked
    processes are not left running on the machine (a stopped one is thawed first, or SIGKILL
    would wait for it)."""
    for pid in survivors:
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except OSError:
                pass
    return survivors


@check("time.timeout-truncates", incident=["C1", "C3"], paced=True)
def test_timeout_truncates(but):
    """A stall past the deadline ends truncated (timeout) with the partial text, within timeout + grace."""
    run = but.run_stalled("timeout_mid_stream", timeout_s=TIMEOUT_S, blind_timeout_s=BLIND_TIMEOUT_S, watchdog=AFTER_DEADLINE)
    o, timeout = run.outcome, run.timeline.timeout_s
    assert o.status == OutcomeStatus.truncated, f"status {o.status} after a stall (error_class {o.error_class})"
    assert o.error_class == E.timeout
    assert run.duration_s < timeout + GRACE_S, f"returned after {run.duration_s:.1f} s for a {timeout:g} s timeout"
    if run.facts.partial_text:  # streamed before the stall, hence before the deadline (run_stalled)
        assert run.facts.partial_text in o.text, f"partial text {run.facts.partial_text!r} lost: {o.text!r}"


@check("time.max-turns-truncates", requires=[C.max_turns], incident="E5")
def test_max_turns_truncates(but):
    """A model that never stops is cut at max_iters: truncated, error_class max_turns."""
    run = but.run("max_turns", max_iters=2)
    o = run.outcome
    assert o.status == OutcomeStatus.truncated and o.error_class == E.max_turns, f"{o.status}/{o.error_class}"
    if but.kind is not Kind.harness:
        assert o.iterations <= 2, f"{o.iterations} turns with max_iters=2"


@check("time.cancel-ends-session", requires=[C.cancellation], incident="C8", paced=True)
def test_cancel_ends_session(but):
    """Host cancellation ends a stalled session promptly with status cancelled and no survivors."""
    run = but.run("timeout_mid_stream", timeout_s=CANCEL_TIMEOUT_S, cancel_on_stall=True, cancel_after_s=BLIND_CANCEL_AFTER_S, watchdog=AFTER_CANCEL)
    tl = run.timeline
    if tl.cancel_sent is None and tl.ended >= tl.started + tl.timeout_s:
        but.skip(
            "budget",
            f"the upstream had not stalled after {CANCEL_TIMEOUT_S:g} s, so the kit never cancelled: "
            "this machine is too slow right now; the backend was not judged",
        )
    assert tl.cancel_sent is not None, f"the session ended ({run.outcome.status}) before the upstream stalled: nothing to cancel"
    assert run.outcome.status == OutcomeStatus.cancelled, f"status {run.outcome.status} after cancel"
    took = tl.ended - tl.cancel_sent
    assert took < GRACE_S, f"cancel took {took:.1f} s"
    survivors = _reaped([p for p in but.child_pids(run) if still_running(p)])
    assert not survivors, f"processes survived cancellation: {survivors}"


@check("time.no-survivors-after-timeout", kinds=[Kind.harness], incident=["C1", "C2", "C9"], paced=True, cli_model=True)
def test_no_survivors_after_timeout(but):
    """After a timeout no process of the tree survives: CLI, grandchildren, even setsid escapees
    with an empty environment.

    Judged from the processes themselves: every pid the fake CLI started was recorded by it
    before the stall (the CLI, a grandchild in its group, one that left by setsid, one that
    left by setsid with `env -i`, the bridge), and each must be gone (a zombie counts as gone).
    Never by the backend's env marker (the `env -i` escapee carries none) nor by counting
    processes (other sessions run on the same machine)."""
    run = but.run_stalled("timeout_tree", timeout_s=TIMEOUT_S, blind_timeout_s=BLIND_TIMEOUT_S, teardown_s=TEARDOWN_S, watchdog=ENDS_AFTER_DEADLINE)
    # The tree as it was: the CLI, what it spawned and the MCP servers it started (recorded
    # before the stall, hence before the deadline), and any bridge a trace names; no layout assumed.
    assert run.children, "the backend never ran its CLI"
    pids = but.child_pids(run)
    survivors = _reaped([p for p in pids if still_running(p)])
    assert not survivors, f"processes survived the timeout: {survivors}"


@check("time.stalled-tool-call-ends-by-deadline", requires=[C.mcp_tools], kinds=[Kind.harness], levels=["offline"], incident=["C1", "C2"], paced=True)
def test_stalled_tool_call_ends_by_deadline(but):
    """A bridge that stops answering mid-session does not stop the clock: while the CLI waits
    on a tool call that is never answered, the session still ends at its deadline, truncated
    (timeout), within timeout + grace, and no process of the tree survives, the stopped
    bridge included.

    Evidence: the fake CLI starts the configured servers, stops the one its call goes to with
    SIGSTOP (a stopped process takes no SIGTERM: only SIGKILL ends it), sends the call and waits,
    ignoring SIGTERM; every pid it recorded (the CLI, the stopped server) and any bridge a trace
    names must be gone."""
    run = but.run_stalled("stalled_tool_call", timeout_s=TIMEOUT_S, blind_timeout_s=BLIND_TIMEOUT_S, teardown_s=TEARDOWN_S, watchdog=AFTER_DEADLINE)
    o, timeout = run.outcome, run.timeline.timeout_s
    assert run.children, "the backend never ran its CLI"
    assert run.stalled_calls, f"the CLI's tool call reached no MCP server: nothing was judged ({o.status}: {o.message!r})"
    assert o.status == OutcomeStatus.truncated and o.error_class == E.timeout, (
        f"{o.status}/{o.error_class} after a tool call that was never answered: {o.message!r}"
    )
    assert run.duration_s < timeout + GRACE_S, (
        f"returned after {run.duration_s:.1f} s for a {timeout:g} s timeout: the clock stopped while a tool call was pending"
    )
    survivors = _reaped([p for p in but.child_pids(run) if still_running(p)])
    assert not survivors, f"processes survived the timeout: {survivors}"


@check("time.linger-after-result", kinds=[Kind.harness], incident="C4", paced=True)
def test_linger_after_result(but):
    """A CLI that prints its result and lingers is killed after a short grace; the outcome comes from the event."""
    run = but.run("linger_after_result", timeout_s=120, teardown_s=TEARDOWN_S, watchdog=AFTER_RESULT)
    o = run.outcome
    assert o.status == OutcomeStatus.ok, f"status {o.status} ({o.error_class}): the result event said success"
    assert o.terminal_event_seen
    tl = run.timeline
    if tl.last_output is not None:
        grace = tl.ended - tl.last_output
        assert grace < LINGER_BOUND_S, f"returned {grace:.1f} s after the CLI printed its result: a lingering CLI must be killed after a short grace"
    else:
        assert run.duration_s < LINGER_BLIND_BOUND_S + tl.allowance_s, f"took {run.duration_s:.1f} s: a lingering CLI must be killed after a short grace"
    survivors = _reaped([p for p in but.child_pids(run) if still_running(p)])
    assert not survivors, f"processes survived: {survivors}"


@check("time.stdin-not-left-open", kinds=[Kind.harness], incident="C6", cli_model=True)
def test_stdin_not_left_open(but):
    """The CLI's stdin is /dev/null or a pipe closed right after the prompt: never an open pipe
    it could block on, not even for a while.

    Evidence: what fd 0 was (fstat), and where the CLI reads its prompt to EOF (claude `-p`),
    when the last prompt byte came and when EOF did, as the fake CLI recorded them: held open
    past STDIN_HELD_BOUND_S after the prompt fails, though the CLI got EOF in the end. A pipe
    left open for good stalls the CLI into a timeout. (A CLI driven with `--input-format
    stream-json` reads messages until stdin closes: there only the session's end is judged.)"""
    run = but.run("success", timeout_s=60, watchdog=STDIN_LEFT_OPEN)
    assert run.children, "the fake CLI was never run"
    for child in run.children:
        assert child.get("stdin_type") in ("devnull", "pipe", "file", "closed"), f"stdin {child.get('stdin_type')}"
    # the fake reads stdin to EOF first: a pipe left open would stall it into a timeout
    assert run.outcome.status == OutcomeStatus.ok, f"status {run.outcome.status} ({run.outcome.error_class})"
    for child in run.children:
        eof, began = child.get("stdin_eof_mono"), child.get("stdin_read_mono")
        if eof is None or began is None:
            continue  # not read to EOF before the steps (stream-json input, a CLI that ignores stdin)
        after = max(began, child.get("stdin_data_mono") or began)
        held = eof - after
        what = "the last prompt byte" if child.get("stdin_data_mono") else "the CLI began reading it (no prompt came)"
        assert held < STDIN_HELD_BOUND_S, (
            f"the CLI's stdin pipe was held open {held:.1f} s after {what} "
            f"({child.get('stdin_bytes', 0)} bytes): the CLI blocked on it until the backend closed it"
        )


def _gone_within(pids: list[int], grace_s: float) -> list[int]:
    """The pids still alive once `grace_s` has passed (polled; returns as soon as none is)."""
    import time

    deadline = time.monotonic() + grace_s
    while True:
        alive = [p for p in pids if still_running(p)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.05)


@check("time.abandoned-stream-no-survivors", kinds=[Kind.harness], incident=["C1", "C8"], paced=True)
def test_abandoned_stream_no_survivors(but):
    """A caller that abandons the session mid-stream (its text callback raises, as breaking out
    of a loop over the stream or cancelling the task unwinds through the backend) leaves no
    process of the session behind: CLI, grandchildren, setsid escapees and bridge all end.

    Evidence: the session's tree as the fake CLI recorded it before its first text (the CLI, a
    grandchild in its group, one escaped by setsid, one by setsid with `env -i`, the bridge),
    each checked alive or not after the backend gave control back, with GRACE_S for a cleanup
    that runs beside it. Processes that survive are killed by the kit after the verdict."""

    run = but.run("timeout_tree", timeout_s=CANCEL_TIMEOUT_S, abandon_on_text=True, teardown_s=TEARDOWN_S, watchdog=ENDS_AFTER_ABANDON)
    if run.abandoned is None:
        but.skip(
            "unsupported-by-backend",
            f"the backend streamed no text to its caller (the session ended "
            f"{run.outcome.status}): there was no stream to abandon; {run.outcome.error_class}: {run.outcome.message[:200]}",
        )
    assert run.children, "the backend never ran its CLI"
    pids = but.child_pids(run)
    survivors = _gone_within(pids, GRACE_S)
    for pid in survivors:  # not left running on the machine: the verdict is already taken
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    assert not survivors, f"{len(survivors)} of the session's {len(pids)} processes outlived the abandoned stream by {GRACE_S:g} s: {survivors}"
