"""The per-cell watchdog, and the kit's cleanup after a cell.

A session still running a bounded time after the moment its check needs (the caller abandoned
the stream, the kit cancelled, the deadline passed, the CLI printed its result and lingers) IS
that check's failure: "did not end within N s after <moment>". So a defective backend costs the
check's own bound (GRACE_S, LINGER_BOUND_S: seconds), never its upper bound (a 120 s cancel
deadline that only exists so that a run cannot hang forever). Each check passes the bound its
own assertion already holds the session to, so a correct backend is judged exactly as before
and an overrun it would fail anyway fails sooner; the bounds are generous upper bounds for a
loaded 2-core machine, never a measure of speed.

When the watchdog fires it ends every process the session is known to have started (what the
upstream recorded, each bridge a trace names) with SIGKILL, so the backend's run_session gives
control back in the check's thread (the backend is never run in another thread); the run then
raises SessionOverran, an AssertionError, so the cell fails with that message.

After every cell, whatever its verdict, the kit ends the processes of its sessions that are
still alive (`end_survivors`): a failing backend's survivors (a CLI's grandchildren, a setsid
escapee, an MCP server the fake CLI stopped with SIGSTOP) never outlive the cell. A pid is ended
only if it is still the process that was alive when its session ended (same start time in
/proc), so a pid the system has since given to another process is never touched.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Callable

#: What each moment a check can time a session from is called in a failure message.
MOMENTS: dict[str, str] = {
    "abandon": "the caller abandoned its stream",
    "cancel": "the kit cancelled it",
    "deadline": "its deadline",
    "result": "the CLI printed its last line and lingered",
    "stdin": "the CLI last got data on its stdin pipe, which stayed open while it waited",
    "auth_refused": "the model answered its first 401 (the loopback model server's record)",
}


@dataclass(frozen=True)
class Watchdog:
    """`after`: the moment (a key of MOMENTS); `within_s`: how long the session may still run after it."""

    after: str
    within_s: float

    def __post_init__(self) -> None:
        if self.after not in MOMENTS:
            raise ValueError(f"unknown moment {self.after!r} (one of {', '.join(MOMENTS)})")


class SessionOverran(AssertionError):
    """The session was still running `within_s` after the moment its check needs."""


class WatchdogThread:
    """Polls `moment()` (a monotonic time, None until it happened); once `within_s` has passed
    since it, calls `end()` (which ends the session's known processes) and keeps calling it
    every second until stopped, in case the backend starts more."""

    POLL_S = 0.05

    def __init__(self, dog: Watchdog, moment: Callable[[], float | None], end: Callable[[], list[int]]):
        self.dog, self._moment, self._end = dog, moment, end
        self.fired: float | None = None  # when it fired (monotonic)
        self.ended: list[int] = []  # the pids it ended
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="hc-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join(timeout=5)

    def message(self) -> str:
        ended = f"; the kit ended its {len(self.ended)} known process(es) {self.ended}" if self.ended else ""
        return (
            f"the session did not end within {self.dog.within_s:g} s after {MOMENTS[self.dog.after]}{ended}: "
            "a backend must give control back and end its tree within that bound"
        )

    def _watch(self) -> None:
        while not self._done.wait(self.POLL_S):
            if self.fired is None:
                moment = self._moment()
                if moment is None or time.monotonic() < moment + self.dog.within_s:
                    continue
                self.fired = time.monotonic()
            with contextlib.suppress(Exception):  # ending is best effort; the verdict is already taken
                self.ended = sorted(set(self.ended) | set(self._end()))
            if self._done.wait(1.0):
                return


def _start_time(pid: int) -> int | None:
    """The process's start time (clock ticks after boot, /proc/<pid>/stat field 22), None when
    it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b") ", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] == b"Z":
        return None
    return int(fields[19])


#: task->flags bit set once a process has begun to exit (/proc/<pid>/stat field 9).
PF_EXITING = 0x4
#: SIGKILL's bit in /proc/<pid>/status SigPnd / ShdPnd (signal n is bit n - 1).
SIGKILL_BIT = 1 << (signal.SIGKILL - 1)


def still_running(pid: int) -> bool:
    """Whether `pid` is a process that can still run code of its own: a survivor, for the checks
    that judge that nothing outlives a session. Gone, a zombie, a process that has begun to exit
    (PF_EXITING) and one with SIGKILL pending are not: SIGKILL is delivered asynchronously, and
    on a loaded machine a tree a correct backend killed just before it returned can still read
    as running for a moment, in which it runs nothing of its own. Judged thread by thread (a
    leader that called pthread_exit reads as a zombie while its other threads run on); one read
    of each, no wait."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:  # gone (or never ours to see: then not a process this session started)
        return False
    for tid in threads or [str(pid)]:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as fh:
                stat = fh.read()
            with open(f"/proc/{pid}/task/{tid}/status", "rb") as fh:
                status = fh.read()
        except OSError:  # that thread is gone
            continue
        if not dying(stat, status):
            return True
    return False


def dying(stat: bytes, status: bytes) -> bool:
    """From a process's /proc stat and status: a zombie (or dead), exiting, or SIGKILL pending."""
    try:
        fields = stat.rsplit(b") ", 1)[1].split()
        if fields[0] in (b"Z", b"X", b"x"):
            return True
        if int(fields[6]) & PF_EXITING:  # field 9 of the whole line: the 7th after the state
            return True
    except (IndexError, ValueError):
        return False
    for line in status.splitlines():
        name, _, value = line.partition(b":")
        if name in (b"SigPnd", b"ShdPnd"):
            try:
                if int(value.strip(), 16) & SIGKILL_BIT:
                    return True
            except ValueError:
                continue
    return False


def identities(pids: list[int]) -> dict[int, int]:
    """pid -> start time of each of `pids` alive now (what `end_survivors` later matches)."""
    out = {}
    for pid in dict.fromkeys(pids):
        started = _start_time(pid)
        if started is not None:
            out[pid] = started
    return out


def kill(pids: list[int]) -> list[int]:
    """SIGKILL each pid alive now (a SIGSTOPped one too: SIGKILL needs no SIGCONT); returns
    those signalled. For processes a session is running right now (the watchdog)."""
    hit = []
    for pid, _started in identities(pids).items():
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
            hit.append(pid)
    return hit


def end_survivors(alive_then: dict[int, int]) -> list[int]:
    """SIGKILL each process of `alive_then` (pid -> start time, from `identities`) that is still
    the same process; returns the pids ended."""
    hit = []
    for pid, started in alive_then.items():
        if _start_time(pid) == started:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                hit.append(pid)
    return hit
