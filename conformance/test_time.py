"""Timeouts, cancellation and process trees: a stall always ends, truncated, with what was seen,
inside timeout + grace, and nothing the backend started survives it."""

from __future__ import annotations

import os

from harnesscheck.contracts import Capability as C
from harnesscheck.contracts import ErrorClass as E
from harnesscheck.contracts import Kind, OutcomeStatus
from harnesscheck.kit.catalog import check

TIMEOUT_S = 2.0
GRACE_S = 12.0  # term grace + linger + bounded drain + a noisy 2-core machine; an upper bound only


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead for our purposes
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][:1] != "Z"
    except OSError:
        return False


@check("time.timeout-truncates", incident=["C1", "C3"])
def test_timeout_truncates(but):
    """A stall past the deadline ends truncated (timeout) with the partial text, within timeout + grace."""
    run = but.run("timeout_mid_stream", timeout_s=TIMEOUT_S)
    o = run.outcome
    assert o.status == OutcomeStatus.truncated, f"status {o.status} after a stall (error_class {o.error_class})"
    assert o.error_class == E.timeout
    assert run.duration_s < TIMEOUT_S + GRACE_S, f"returned after {run.duration_s:.1f} s for a {TIMEOUT_S} s timeout"
    if run.facts.partial_text:
        assert run.facts.partial_text in o.text, f"partial text lost: {o.text!r}"


@check("time.max-turns-truncates", requires=[C.max_turns], incident="E5")
def test_max_turns_truncates(but):
    """A model that never stops is cut at max_iters: truncated, error_class max_turns."""
    run = but.run("max_turns", max_iters=2)
    o = run.outcome
    assert o.status == OutcomeStatus.truncated and o.error_class == E.max_turns, f"{o.status}/{o.error_class}"
    if but.kind is not Kind.harness:
        assert o.iterations <= 2, f"{o.iterations} turns with max_iters=2"


@check("time.cancel-ends-session", requires=[C.cancellation], incident="C8")
def test_cancel_ends_session(but):
    """Host cancellation ends a stalled session promptly with status cancelled and no survivors."""
    run = but.run("timeout_mid_stream", timeout_s=120, cancel_after_s=1.0)
    assert run.outcome.status == OutcomeStatus.cancelled, f"status {run.outcome.status} after cancel"
    assert run.duration_s < 1.0 + GRACE_S, f"cancel took {run.duration_s:.1f} s"
    survivors = [p for p in but.child_pids(run) if _alive(p)]
    assert not survivors, f"processes survived cancellation: {survivors}"


@check("time.no-survivors-after-timeout", kinds=[Kind.harness], incident=["C1", "C2", "C9"])
def test_no_survivors_after_timeout(but):
    """After a timeout no process of the tree survives: CLI, grandchildren, even setsid escapees."""
    run = but.run("timeout_tree", timeout_s=TIMEOUT_S)
    pids = but.child_pids(run)
    assert len(pids) >= 3, f"the fake CLI recorded {pids}: the kit could not observe the tree"
    survivors = [p for p in pids if _alive(p)]
    assert not survivors, f"processes survived the timeout: {survivors}"


@check("time.linger-after-result", kinds=[Kind.harness], incident="C4")
def test_linger_after_result(but):
    """A CLI that prints its result and lingers is killed after a short grace; the outcome comes from the event."""
    run = but.run("linger_after_result", timeout_s=120)
    o = run.outcome
    assert o.status == OutcomeStatus.ok, f"status {o.status} ({o.error_class}): the result event said success"
    assert o.terminal_event_seen
    assert run.duration_s < 30, f"took {run.duration_s:.1f} s: a lingering CLI must be killed after a short grace"
    survivors = [p for p in but.child_pids(run) if _alive(p)]
    assert not survivors, f"processes survived: {survivors}"


@check("time.stdin-not-left-open", kinds=[Kind.harness], incident="C6")
def test_stdin_not_left_open(but):
    """The CLI's stdin is /dev/null or a pipe closed after the prompt: never an open pipe it could block on."""
    run = but.run("success", timeout_s=60)
    assert run.children, "the fake CLI was never run"
    for child in run.children:
        assert child.get("stdin_type") in ("devnull", "pipe", "file", "closed"), f"stdin {child.get('stdin_type')}"
    # the fake reads stdin to EOF first: a pipe left open would stall it into a timeout
    assert run.outcome.status == OutcomeStatus.ok, f"status {run.outcome.status} ({run.outcome.error_class})"
