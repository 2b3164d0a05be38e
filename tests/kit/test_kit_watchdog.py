"""The per-cell watchdog and the kit's cleanup after a cell (kit/watchdog.py): a session still
running the check's bound after the moment it needs fails at that bound, and after any cell
nothing the kit or a failing backend started is left running."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from kit_support import cells, run_suite
from proc_support import survivors

from harnesscheck.kit.watchdog import MOMENTS, SessionOverran, Watchdog, WatchdogThread, end_survivors, identities, kill


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], stdin=subprocess.DEVNULL)


def test_a_watchdog_names_a_known_moment():
    assert set(MOMENTS) == {"abandon", "cancel", "deadline", "result", "stdin", "auth_refused"}
    with pytest.raises(ValueError, match="unknown moment"):
        Watchdog("later", 1.0)
    assert issubclass(SessionOverran, AssertionError)  # the cell fails, it is not an error of the kit


def test_the_watchdog_fires_only_once_the_bound_after_the_moment_has_passed():
    moment: list[float] = []
    ended: list[float] = []
    dog = WatchdogThread(Watchdog("abandon", 0.2), lambda: moment[0] if moment else None, lambda: ended.append(time.monotonic()) or [4242])
    dog.start()
    try:
        time.sleep(0.3)
        assert dog.fired is None and not ended, "fired before the moment happened"
        moment.append(time.monotonic())
        deadline = time.monotonic() + 5
        while dog.fired is None and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        dog.stop()
    assert dog.fired is not None and dog.fired >= moment[0] + 0.2
    assert ended and dog.ended == [4242]
    assert "did not end within 0.2 s after the caller abandoned its stream" in dog.message()


def test_kill_ends_a_stopped_process_and_end_survivors_spares_a_reused_pid():
    stopped = _sleeper()
    try:
        os.kill(stopped.pid, signal.SIGSTOP)
        assert kill([stopped.pid]) == [stopped.pid]
        assert stopped.wait(timeout=10) == -signal.SIGKILL
    finally:
        if stopped.poll() is None:
            stopped.kill()
    other = _sleeper()
    try:
        seen = identities([other.pid])
        assert end_survivors({pid: started + 1 for pid, started in seen.items()}) == []  # not the process recorded
        assert other.poll() is None
        assert end_survivors(seen) == [other.pid]
        assert other.wait(timeout=10) == -signal.SIGKILL
    finally:
        if other.poll() is None:
            other.kill()


def _recorded_pids(base) -> list[int]:
    """Every pid the fake CLIs of a run recorded (the CLI, its grandchildren and escapees, the
    MCP servers it started, one of them stopped with SIGSTOP)."""
    pids = []
    for record in base.rglob("*.record.jsonl"):
        for line in record.read_text(encoding="utf-8").split("\n"):
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("kind") == "invocation" and not set(rec.get("argv", [])[1:2]) & {"--version", "-v", "-V"}:
                pids.append(rec["pid"])
            if rec.get("kind") in ("spawn", "mcp_server"):
                pids.append(rec["child_pid"])
    return pids


def test_nothing_a_failing_backend_started_outlives_its_cells(tmp_path):
    """The mutant kills only its CLI: its grandchildren, its setsid escapees and the MCP server
    the fake CLI stopped with SIGSTOP survive its sessions; the kit ends them after each cell
    (before, `sleep 1000` escapees were left re-parented to init, and the stopped server stayed
    stopped). A subprocess run: what outlives a run is seen only once that run has ended."""
    base = tmp_path / "cells"
    checks = ("time.no-survivors-after-timeout", "time.stalled-tool-call-ends-by-deadline")
    code, report, out = run_suite(
        tmp_path,
        "--backend",
        "tests.mutants.harness:kills_only_the_direct_child",
        "--basetemp",
        str(base),
        *(a for c in checks for a in ("--hc-check", c)),
        files=("conformance/test_time.py",),
        timeout=300,
    )
    assert report is not None, out[-3000:]
    got = cells(report, "mutant-harness-KillsOnlyTheDirectChild")
    assert {c: got[c]["outcome"] for c in checks} == {c: "failed" for c in checks}, out[-3000:]
    assert "survived" in got["time.no-survivors-after-timeout"]["message"]
    pids = _recorded_pids(base)
    assert len(pids) >= 4, f"the fake CLIs recorded too little to judge: {pids}"
    # polled (bounded): the kit's after-cell SIGKILL is delivered asynchronously, and on a loaded
    # machine a killed process may still be running for a moment; one never killed stays alive
    left = survivors(pids)
    for pid in left:  # the verdict is taken: do not leave them on the machine either way
        os.kill(pid, signal.SIGKILL)
    assert not left, f"{len(left)} of the {len(pids)} processes the failing backend's sessions started outlived the run: {left}"
    assert code == 1


def test_a_session_that_overran_its_bound_fails_at_the_bound(tmp_path):
    """The abandoned stream of a backend that kills only its CLI: the session runs on (its CLI
    stalls to the 120 s deadline); the watchdog fails it at its bound and ends the tree."""
    code, report, out = run_suite(
        tmp_path,
        "--backend",
        "tests.mutants.harness:kills_only_the_direct_child",
        "--hc-check",
        "time.abandoned-stream-no-survivors",
        files=("conformance/test_time.py",),
        timeout=300,
    )
    assert report is not None, out[-3000:]
    cell = cells(report, "mutant-harness-KillsOnlyTheDirectChild")["time.abandoned-stream-no-survivors"]
    assert cell["outcome"] == "failed", cell
    assert re.search(r"did not end within \d+ s after the caller abandoned its stream", cell["message"]), cell["message"]
    assert cell["duration_s"] < 60, f"the cell took {cell['duration_s']} s: the watchdog did not bound it"


def test_a_process_that_is_dying_is_no_survivor():
    """still_running: a process with SIGKILL pending or already exiting runs nothing of its own
    (on a loaded machine a tree a correct backend killed can read as running for a moment); a
    live one is a survivor, a zombie or a gone pid is not."""
    from harnesscheck.kit.watchdog import dying, still_running

    stat = open(f"/proc/{os.getpid()}/stat", "rb").read()
    status = open(f"/proc/{os.getpid()}/status", "rb").read()
    assert not dying(stat, status) and still_running(os.getpid())
    head, _, rest = stat.rpartition(b") ")
    fields = rest.split()
    fields[6] = str(int(fields[6]) | 0x4).encode()  # PF_EXITING
    assert dying(head + b") " + b" ".join(fields), status)

    def pending(name: bytes, mask: bytes) -> bytes:
        return b"\n".join(name + b":\t" + mask if line.startswith(name + b":") else line for line in status.splitlines())

    assert dying(stat, pending(b"SigPnd", b"0000000000000100")) and dying(stat, pending(b"ShdPnd", b"0000000000000100"))
    assert not dying(stat, pending(b"SigPnd", b"0000000000004000")), "SIGTERM pending: it may ignore it and live on"
    assert not dying(stat, pending(b"ShdPnd", b"fffffffffffffeff")), "every signal but SIGKILL pending"
    child = os.fork()
    if child == 0:
        os._exit(0)
    try:
        end = time.monotonic() + 30  # an upper bound: the loop ends when the child is a zombie
        while time.monotonic() < end and still_running(child):
            time.sleep(0.01)
        assert not still_running(child), "an exited, unreaped child (a zombie) is no survivor"
    finally:
        os.waitpid(child, 0)
    assert not still_running(child), "a reaped pid is gone"
    leader_gone = subprocess.Popen(
        [sys.executable, "-c", "import ctypes, threading, time; threading.Thread(target=time.sleep, args=(60,)).start(); ctypes.CDLL(None).pthread_exit(None)"]
    )
    try:  # the main thread exits (pthread_exit): the leader reads as a zombie while a thread runs on
        end = time.monotonic() + 30  # an upper bound: the loop ends when the leader is a zombie
        while time.monotonic() < end and open(f"/proc/{leader_gone.pid}/stat").read().rsplit(") ", 1)[1][:1] != "Z":
            time.sleep(0.01)
        assert open(f"/proc/{leader_gone.pid}/stat").read().rsplit(") ", 1)[1][:1] == "Z", "the leader never exited"
        assert still_running(leader_gone.pid), "a process whose other thread still runs is a survivor"
    finally:
        leader_gone.kill()
        leader_gone.wait()
