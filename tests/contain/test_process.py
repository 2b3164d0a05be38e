"""process.run_process: lifecycle, framing and bounds, proved with real child processes.

Survivors are checked by pid (a process counts as alive unless /proc says it is gone or a
zombie). Time is only ever an upper bound.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from proc_support import alive, survivors

from harnesscheck.contain.process import (
    Ending,
    LineAction,
    LineTooLong,
    SlotBusy,
    find_marked,
    run_process,
    session_slot,
    terminate_tree,
)

SCRIPTS = Path(__file__).resolve().parents[1] / "proc_scripts"
PY = sys.executable
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
SLACK_S = 5.0  # generous upper-bound slack for a shared, noisy machine

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux process semantics")


def script(name: str, *args: str) -> list[str]:
    return [PY, str(SCRIPTS / name), *args]


def read_pids(path: Path, within_s: float = 20.0) -> list[int]:
    end = time.monotonic() + within_s
    while not path.exists():
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.02)
    return [int(x) for x in path.read_text().split()]


class Lines:
    """on_line recorder that can answer with an action on a matching line."""

    def __init__(self, act_on: str | None = None, action: LineAction | None = None):
        self.lines: list[str] = []
        self.act_on = act_on
        self.action = action

    def __call__(self, line: str) -> LineAction | None:
        self.lines.append(line)
        if self.act_on is not None and self.act_on in line:
            return self.action
        return None


# --- timeouts and trees ----------------------------------------------------------------


@pytest.mark.parametrize("setsid", [False, True], ids=["group", "setsid-escapee"])
def test_deadline_kills_every_grandchild_and_keeps_partial_output(tmp_path: Path, setsid: bool) -> None:
    # the deadline must come after the script's tree and partial output exist: a short one,
    # repeated longer when the script had not written its cut line by then (a loaded machine)
    for timeout, grace in ((0.5, 0.3), (2.0, 1.0), (8.0, 1.0)):
        pidfile = tmp_path / f"pids-{timeout:g}"
        lines = Lines()
        args = [str(pidfile)] + (["--setsid"] if setsid else [])
        started = time.monotonic()
        result = run_process(
            script("spawn_tree.py", *args),
            env=ENV,
            cwd=tmp_path,
            on_line=lines,
            timeout_s=timeout,
            term_grace_s=grace,
        )
        elapsed = time.monotonic() - started
        if result.partial_tail == '{"type":"cut':
            break
    pids = read_pids(pidfile)
    assert len(pids) == (3 if setsid else 2)
    assert survivors(pids) == []
    assert result.ending is Ending.deadline
    assert lines.lines == ['{"type":"partial","n":1}', '{"type":"partial","n":2}']
    assert result.partial_tail == '{"type":"cut'
    assert result.orphan_suspected is setsid
    assert elapsed < timeout + grace + SLACK_S
    assert result.duration_s <= elapsed


def test_leader_exit_does_not_leave_grandchildren_holding_the_pipes(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    lines = Lines()
    result = run_process(
        script("spawn_tree.py", str(pidfile), "--setsid", "--exit"),
        env=ENV,
        cwd=tmp_path,
        on_line=lines,
        timeout_s=60,
    )
    assert result.ending is Ending.exited
    assert result.exit_code == 0 and result.signal is None
    assert result.duration_s < 60  # did not wait for the pipes' EOF until the deadline
    assert survivors(read_pids(pidfile)) == []
    assert result.orphan_suspected is True
    assert result.partial_tail == '{"type":"cut'


def test_process_ignoring_sigterm_is_killed(tmp_path: Path) -> None:
    # SIGTERM must come after the script ignores it ("ready"): a short deadline, repeated
    # longer when the script had not got there by then (a loaded machine)
    for timeout, grace in ((0.3, 0.2), (1.5, 0.5), (6.0, 0.5)):
        pidfile = tmp_path / f"pid-{timeout:g}"
        lines = Lines()
        started = time.monotonic()
        result = run_process(
            script("ignore_term.py", str(pidfile)),
            env=ENV,
            cwd=tmp_path,
            on_line=lines,
            timeout_s=timeout,
            term_grace_s=grace,
        )
        elapsed = time.monotonic() - started
        if "ready" in lines.lines:
            break
    assert result.ending is Ending.deadline
    assert result.signal == signal.SIGKILL and result.exit_code is None
    assert survivors(read_pids(pidfile)) == []
    assert elapsed < timeout + grace + SLACK_S


def test_linger_after_terminal_line_is_killed_and_recorded(tmp_path: Path) -> None:
    lines = Lines(act_on='"result"', action=LineAction.TERMINAL)
    started = time.monotonic()
    result = run_process(
        script("linger.py", "forever"),
        env=ENV,
        cwd=tmp_path,
        on_line=lines,
        timeout_s=120,
        linger_s=0.5,
        term_grace_s=10,
    )
    assert result.ending is Ending.linger
    assert result.signal == signal.SIGTERM  # the lingering CLI took the group SIGTERM
    assert lines.lines[-1] == '{"type":"result","is_error":false}'
    assert time.monotonic() - started < 0.5 + 10 + SLACK_S  # nowhere near the 120 s deadline


def test_a_terminal_stderr_line_ends_the_run_like_a_stdout_one(tmp_path: Path) -> None:
    """on_err_line gets complete stderr lines (split across writes, CRLF trimmed, an
    over-long line skipped); its TERMINAL ends a CLI that would retry forever after the
    linger, and the stderr tail is kept as before."""
    code = (
        "import sys, time\n"
        "e = sys.stderr\n"
        "e.write('x' * 300 + '\\n'); e.write('first hal'); e.flush(); time.sleep(0.2)\n"
        "e.write('f\\r\\nlevel=ERROR stream error\\n'); e.flush()\n"
        "time.sleep(600)\n"
    )
    err = Lines(act_on="stream error", action=LineAction.TERMINAL)
    started = time.monotonic()
    result = run_process(
        [PY, "-c", code], env=ENV, cwd=tmp_path, on_line=Lines(), on_err_line=err, timeout_s=120, linger_s=0.2, term_grace_s=5, max_line_bytes=100
    )
    assert result.ending is Ending.linger
    assert err.lines == ["first half", "level=ERROR stream error"]
    assert "stream error" in result.stderr_tail
    assert time.monotonic() - started < 0.2 + 5 + SLACK_S  # nowhere near the 120 s deadline


def test_terminal_line_then_clean_exit_is_exited(tmp_path: Path) -> None:
    lines = Lines(act_on='"result"', action=LineAction.TERMINAL)
    result = run_process(
        script("linger.py", "exit"),
        env=ENV,
        cwd=tmp_path,
        on_line=lines,
        timeout_s=60,
        linger_s=30,
    )
    assert result.ending is Ending.exited
    assert result.exit_code == 0


def test_early_stop_kills_now_and_stops_delivering(tmp_path: Path) -> None:
    lines = Lines(act_on='"n":3', action=LineAction.STOP)
    result = run_process(
        script("emit.py", "stopper"),
        env=ENV,
        cwd=tmp_path,
        on_line=lines,
        timeout_s=120,
    )
    assert result.ending is Ending.early_stop
    assert lines.lines[-1] == '{"n":3}'
    assert result.duration_s < 60


def test_cancel_from_another_thread(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    cancel = threading.Event()
    lines = Lines()

    def cancel_when_ready() -> None:
        read_pids(pidfile)
        cancel.set()

    helper = threading.Thread(target=cancel_when_ready)
    helper.start()
    result = run_process(
        script("spawn_tree.py", str(pidfile)),
        env=ENV,
        cwd=tmp_path,
        on_line=lines,
        timeout_s=120,
        cancel=cancel,
        term_grace_s=0.5,
    )
    helper.join()
    assert result.ending is Ending.cancelled
    assert result.duration_s < 60
    assert survivors(read_pids(pidfile)) == []


def test_exception_in_on_line_kills_the_tree_and_propagates(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"

    def boom(line: str) -> None:
        raise RuntimeError("parser bug")

    with pytest.raises(RuntimeError, match="parser bug"):
        run_process(script("spawn_tree.py", str(pidfile), "--setsid"), env=ENV, cwd=tmp_path, on_line=boom, timeout_s=60)
    assert survivors(read_pids(pidfile)) == []


#: The child stays until on_spawn has looked at it (a marker file, 60 s at most): a child that
#: had printed and exited could be reaped before on_spawn ran under load (ProcessLookupError).
_WAITS_FOR_ON_SPAWN = (
    "import os, sys, time\n"
    "print(os.getpid(), os.getsid(0), flush=True)\n"
    "end = time.monotonic() + 60\n"
    "while not os.path.exists(sys.argv[1]) and time.monotonic() < end:\n"
    "    time.sleep(0.01)\n"
)


def test_on_spawn_gets_the_leader_of_the_childs_own_session_before_any_output(tmp_path: Path) -> None:
    seen: list[tuple[int, int, int]] = []
    lines: list[str] = []
    looked = tmp_path / "looked"

    def spawned(pid: int) -> None:
        assert not lines, "on_spawn must come before the child's output is read"
        seen.append((pid, os.getsid(pid), os.getpgid(pid)))
        looked.touch()

    result = run_process([PY, "-c", _WAITS_FOR_ON_SPAWN, str(looked)], env=ENV, cwd=tmp_path, on_line=lines.append, timeout_s=60, on_spawn=spawned)
    assert result.ending is Ending.exited and len(seen) == 1
    pid, sid, pgid = seen[0]
    assert pid == sid == pgid and lines == [f"{pid} {pid}"]


def test_exception_in_on_spawn_kills_the_tree_and_propagates(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"

    def refuse(pid: int) -> None:
        read_pids(pidfile)  # the whole tree exists, then the hook fails
        raise RuntimeError("could not bind the session")

    with pytest.raises(RuntimeError, match="could not bind"):
        run_process(script("spawn_tree.py", str(pidfile), "--setsid"), env=ENV, cwd=tmp_path, on_line=lambda line: None, timeout_s=60, on_spawn=refuse)
    assert survivors(read_pids(pidfile)) == []


def test_keyboard_interrupt_still_kills_the_tree(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"

    def interrupt(line: str) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_process(script("spawn_tree.py", str(pidfile), "--setsid"), env=ENV, cwd=tmp_path, on_line=interrupt, timeout_s=60)
    assert survivors(read_pids(pidfile)) == []


def test_interrupt_during_cleanup_skips_the_grace_but_still_kills(tmp_path: Path) -> None:
    """C8: a second Ctrl-C while the tree is being ended: the kill still completes (without
    waiting out the grace period) and the interrupt is re-raised afterwards."""
    pidfile = tmp_path / "pid"
    cancel = threading.Event()
    seen = []

    def on_line(line: str) -> None:
        seen.append(line)
        if cancel.is_set():
            raise KeyboardInterrupt  # arrives while terminate_tree drains during its grace
        if len(seen) == 3:
            cancel.set()

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_process(script("ticker.py", str(pidfile)), env=ENV, cwd=tmp_path, on_line=on_line, timeout_s=300, cancel=cancel, term_grace_s=120)
    assert time.monotonic() - started < 60  # the 120 s grace was skipped
    assert survivors(read_pids(pidfile)) == []


def test_host_killed_leaves_no_child_alive(tmp_path: Path) -> None:
    """SIGKILL the host mid-run: the guard kills the CLI and its descendants (more host-death
    cases in test_procguard.py)."""
    pidfile, hostpid = tmp_path / "pids", tmp_path / "host"
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = dict(os.environ, PYTHONPATH=src)
    host = subprocess.Popen([PY, str(SCRIPTS / "host.py"), str(pidfile), str(hostpid)], env=env)
    try:
        pids = read_pids(pidfile)
        assert read_pids(hostpid) == [host.pid]
        assert all(alive(p) for p in pids)
        host.send_signal(signal.SIGKILL)
        host.wait(timeout=30)
        assert survivors(pids, within_s=15) == []
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()


def test_terminate_tree_is_idempotent(tmp_path: Path) -> None:
    proc = subprocess.Popen([PY, "-c", "import time; time.sleep(60)"], start_new_session=True)
    assert terminate_tree(proc, proc.pid, None, 0.2) is False
    assert terminate_tree(proc, proc.pid, None, 0.2) is False
    assert proc.returncode is not None


def test_no_marked_process_left_after_a_run(tmp_path: Path) -> None:
    marker = "t" + os.urandom(8).hex()
    run_process(
        script("spawn_tree.py", str(tmp_path / "pids"), "--setsid"),
        env=ENV,
        cwd=tmp_path,
        on_line=Lines(),
        timeout_s=1.0,
        term_grace_s=0.2,
        run_marker=marker,
    )
    end = time.monotonic() + 10
    while find_marked(marker) and time.monotonic() < end:
        time.sleep(0.05)
    assert [p for p in find_marked(marker) if alive(p)] == []


# --- stdin -------------------------------------------------------------------------------


def test_stdin_is_dev_null_by_default(tmp_path: Path) -> None:
    lines = Lines()
    result = run_process(script("report_stdin.py"), env=ENV, cwd=tmp_path, on_line=lines, timeout_s=60)
    assert result.ending is Ending.exited and result.exit_code == 0
    assert json.loads(lines.lines[0]) == {"stdin": "devnull"}
    assert json.loads(lines.lines[1])["bytes"] == 0


def test_large_prompt_on_stdin_then_eof_without_deadlock(tmp_path: Path) -> None:
    import hashlib

    prompt = os.urandom(3 * 1024 * 1024)
    lines = Lines()
    # The child writes 2 MiB of stdout before it reads stdin: both pipes must move at once.
    result = run_process(
        script("report_stdin.py", str(2 * 1024 * 1024)),
        env=ENV,
        cwd=tmp_path,
        on_line=lines,
        timeout_s=60,
        stdin_bytes=prompt,
    )
    assert result.ending is Ending.exited and result.exit_code == 0
    assert json.loads(lines.lines[0]) == {"stdin": "pipe"}
    assert json.loads(lines.lines[-1]) == {"bytes": len(prompt), "sha256": hashlib.sha256(prompt).hexdigest()}


def test_empty_stdin_bytes_is_an_immediate_eof(tmp_path: Path) -> None:
    lines = Lines()
    run_process(script("report_stdin.py"), env=ENV, cwd=tmp_path, on_line=lines, timeout_s=60, stdin_bytes=b"")
    assert json.loads(lines.lines[0]) == {"stdin": "pipe"}
    assert json.loads(lines.lines[1])["bytes"] == 0


# --- framing -------------------------------------------------------------------------------


def test_framing_crlf_blank_lines_and_missing_final_newline(tmp_path: Path) -> None:
    lines = Lines()
    result = run_process(script("emit.py", "framing"), env=ENV, cwd=tmp_path, on_line=lines, timeout_s=60)
    assert result.ending is Ending.exited
    assert lines.lines == ["a", "b", ""]
    assert result.partial_tail == "c"


class LateReader:
    """on_line of a host that reads late (a loaded machine): the first line blocks until the
    child has written everything it will write and is about to exit."""

    def __init__(self, done: Path):
        self.done = done
        self.lines: list[str] = []

    def __call__(self, line: str) -> None:
        if not self.lines:
            end = time.monotonic() + 60
            while not self.done.exists():
                assert time.monotonic() < end, "the child never finished writing"
                time.sleep(0.01)
        self.lines.append(line)


def test_a_pipe_loses_what_a_node_like_cli_still_had_queued_at_exit(tmp_path: Path) -> None:
    """Why the spool exists: on a pipe, a CLI that writes without blocking and exits with writes
    still queued (node's process.exit) loses them while the host is not reading."""
    reader = LateReader(tmp_path / "done")
    result = run_process(script("exit_queued.py", str(reader.done), str(1024 * 1024)), env=ENV, cwd=tmp_path, on_line=reader, timeout_s=60)
    assert result.ending is Ending.exited
    assert reader.lines == ["start"] and result.partial_tail is not None  # the stream ends inside an event


@pytest.mark.parametrize("guard", [True, False])
def test_a_spooled_stdout_keeps_every_line_for_a_late_reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, guard: bool) -> None:
    from harnesscheck.contain import process

    if not guard:
        monkeypatch.setattr(process, "_use_guard", lambda: False)
    spool = tmp_path / "run"
    spool.mkdir()
    reader = LateReader(tmp_path / "done")
    result = run_process(script("exit_queued.py", str(reader.done), str(1024 * 1024)), env=ENV, cwd=tmp_path, on_line=reader, timeout_s=60, stdout_spool=spool)
    assert (result.ending, result.exit_code, result.partial_tail) == (Ending.exited, 0, None)
    assert [len(x) for x in reader.lines] == [5, 1024 * 1024 + 31, 17]
    assert reader.lines[-1] == '{"type":"result"}'
    assert list(spool.iterdir()) == [], "the spool file was left behind"


def test_a_spooled_stdout_keeps_the_framing_bounds_and_actions(tmp_path: Path) -> None:
    """The spool changes where stdout goes, nothing else: partial tail, oversize, terminal linger."""
    lines = Lines()
    result = run_process(script("emit.py", "framing"), env=ENV, cwd=tmp_path, on_line=lines, timeout_s=60, stdout_spool=tmp_path)
    assert (result.ending, lines.lines, result.partial_tail) == (Ending.exited, ["a", "b", ""], "c")
    result = run_process(
        script("emit.py", "bigline", str(8 * 1024 * 1024)),
        env=ENV,
        cwd=tmp_path,
        on_line=Lines(),
        timeout_s=60,
        max_line_bytes=1024 * 1024,
        stdout_spool=tmp_path,
    )
    assert (result.ending, result.oversize_limit) == (Ending.oversize, 1024 * 1024)
    pidfile = tmp_path / "pids"
    result = run_process(
        script("spawn_tree.py", str(pidfile)),
        env=ENV,
        cwd=tmp_path,
        timeout_s=60,
        linger_s=0.3,
        on_line=Lines(act_on='"n":1', action=LineAction.TERMINAL),
        stdout_spool=tmp_path,
    )
    assert result.ending is Ending.linger
    assert survivors(read_pids(pidfile)) == []
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".stdout-")] == []


def test_invalid_utf8_is_replaced(tmp_path: Path) -> None:
    lines = Lines()
    run_process(script("emit.py", "badutf8"), env=ENV, cwd=tmp_path, on_line=lines, timeout_s=60)
    assert lines.lines == ["ok \ufffd\ufffd end"]


def test_line_at_the_limit_passes(tmp_path: Path) -> None:
    lines: list[int] = []
    result = run_process(
        script("emit.py", "bigline", str(2 * 1024 * 1024)),
        env=ENV,
        cwd=tmp_path,
        on_line=lambda line: lines.append(len(line)),
        timeout_s=60,
        max_line_bytes=2 * 1024 * 1024,
    )
    assert result.ending is Ending.exited
    assert lines == [2 * 1024 * 1024, len("after")]


def test_oversize_line_is_a_typed_ending_naming_the_limit(tmp_path: Path) -> None:
    limit = 1024 * 1024
    lines = Lines()
    result = run_process(
        script("emit.py", "bigline", str(8 * limit)),
        env=ENV,
        cwd=tmp_path,
        on_line=lines,
        timeout_s=60,
        max_line_bytes=limit,
    )
    assert result.ending is Ending.oversize
    assert result.oversize_limit == limit
    assert result.partial_tail is None
    assert lines.lines == []
    err = result.line_too_long
    assert isinstance(err, LineTooLong) and err.limit == limit and str(limit) in str(err)


def test_oversize_memory_stays_bounded(tmp_path: Path) -> None:
    """A 200 MB line with a 1 MiB limit: the host's peak RSS stays far below the line."""
    out = _host_memory(tmp_path, "bigline", 200 * 1024 * 1024, 1024 * 1024)
    assert out["ending"] == "oversize" and out["oversize_limit"] == 1024 * 1024
    assert out["maxrss_kib"] < 100 * 1024


def test_stderr_flood_keeps_memory_bounded(tmp_path: Path) -> None:
    """100 MB of stderr without a newline: only the 64 KiB tail is kept."""
    out = _host_memory(tmp_path, "stderrflood", 100 * 1024 * 1024, 64 * 1024 * 1024)
    assert out["ending"] == "exited"
    assert out["stderr_tail_len"] <= 64 * 1024
    assert out["stderr_tail_end"].endswith("tail-end")
    assert out["maxrss_kib"] < 100 * 1024


def _host_memory(tmp_path: Path, mode: str, n: int, limit: int) -> dict:
    src = str(Path(__file__).resolve().parents[2] / "src")
    proc = subprocess.run(
        [PY, str(SCRIPTS / "host_memory.py"), mode, str(n), str(limit)],
        env=dict(os.environ, PYTHONPATH=src),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


# --- env, argv, errors ------------------------------------------------------------------------


@pytest.mark.parametrize("lc_ctype", [None, "C", "en_US.UTF-8"])
def test_env_is_passed_exactly_plus_the_run_marker(tmp_path: Path, lc_ctype: str | None) -> None:
    lines = Lines()
    env = {"PATH": ENV["PATH"], "ONLY_THIS": "1"}
    if lc_ctype is not None:
        env["LC_CTYPE"] = lc_ctype
    run_process(["env"], env=env, cwd=tmp_path, on_line=lines, timeout_s=60, run_marker="m1")
    assert dict(line.split("=", 1) for line in lines.lines) == {**env, "HARNESSCHECK_RUN": "m1"}


def test_argv_reaches_the_child_verbatim(tmp_path: Path) -> None:
    lines = Lines()
    run_process(script("print_env.py", "a b", "; rm -rf /", "$HOME", ""), env=ENV, cwd=tmp_path, on_line=lines, timeout_s=60)
    assert json.loads(lines.lines[0])["argv"][1:] == ["a b", "; rm -rf /", "$HOME", ""]  # no shell


def test_stderr_tail_is_redacted(tmp_path: Path) -> None:
    secret = "canary-" + os.urandom(12).hex()
    env = {**ENV, "MY_SERVICE_TOKEN": secret}
    result = run_process(script("print_env.py"), env=env, cwd=tmp_path, on_line=Lines(), timeout_s=60)
    assert secret not in result.stderr_tail
    assert "debug: MY_SERVICE_TOKEN is [REDACTED]" in result.stderr_tail


def test_missing_executable_raises_before_spawning(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        run_process(["no-such-cli-here"], env=ENV, cwd=tmp_path, on_line=Lines(), timeout_s=5)


def test_argv_must_be_a_list(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        run_process("echo hi", env=ENV, cwd=tmp_path, on_line=Lines(), timeout_s=5)  # type: ignore[arg-type]


def test_exit_code_and_signal_are_mirrored(tmp_path: Path) -> None:
    r = run_process([PY, "-c", "raise SystemExit(7)"], env=ENV, cwd=tmp_path, on_line=Lines(), timeout_s=60)
    assert (r.ending, r.exit_code, r.signal) == (Ending.exited, 7, None)
    r = run_process([PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"], env=ENV, cwd=tmp_path, on_line=Lines(), timeout_s=60)
    assert (r.ending, r.exit_code, r.signal) == (Ending.exited, None, signal.SIGSEGV)


# --- concurrency ----------------------------------------------------------------------------------


def test_session_slot_caps_concurrency() -> None:
    size = 1000 + os.getpid() % 1000  # a size no other test shares
    with session_slot(size):
        pass
    limit = 1
    with session_slot(limit):
        with pytest.raises(SlotBusy):
            with session_slot(limit, wait_s=0.05):
                pass
    with session_slot(limit, wait_s=0.05):
        pass


def test_session_slot_never_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The size comes from the caller (a transport's Settings.concurrency), never os.environ."""
    monkeypatch.setenv("HARNESS_BACKEND_CONCURRENCY", "1")
    with session_slot(), session_slot():  # the default, 2, whatever the environment says
        with pytest.raises(SlotBusy):
            with session_slot(wait_s=0.05):
                pass
    with pytest.raises(SlotBusy):
        with session_slot(1):
            with session_slot(1, wait_s=0):
                pass


@pytest.mark.parametrize("backend", ["fake", "api"])
def test_in_process_backends_take_a_slot_and_count_the_wait(tmp_path: Path, backend: str) -> None:
    """Settings.concurrency caps the api and fake backends too, and a session that cannot get a
    slot within its timeout_s ends truncated/timeout saying why, without running."""
    from harnesscheck.backends.registry import get_spec
    from harnesscheck.core.config import Settings
    from harnesscheck.core.contracts import AgentSessionRequest, ErrorClass, OutcomeStatus
    from harnesscheck.core.scope import ToolScope

    size = 500 + os.getpid() % 400  # a size no other test shares
    settings = Settings(concurrency=size, api_mode="anthropic_messages") if backend == "api" else Settings(concurrency=size)
    if backend == "api":
        from harnesscheck.backends.api import ApiTransport

        # A key that never leaves this process: the session must not reach the model at all.
        transport = ApiTransport(get_spec("api"), settings, environ={"ANTHROPIC_API_KEY": "sk-test-never-sent", "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"})
    else:
        from harnesscheck.backends.fake import FakeTransport

        transport = FakeTransport(get_spec("fake"), settings)
    (tmp_path / "root").mkdir()
    request = AgentSessionRequest(prompt="hi", scope=ToolScope(root=tmp_path / "root"), timeout_s=0.3, run_dir=tmp_path / "run")
    held = [session_slot(size) for _ in range(size)]
    for slot in held:
        slot.__enter__()
    try:
        started = time.monotonic()
        outcome = transport.run_session(request)
        waited = time.monotonic() - started
    finally:
        for slot in held:
            slot.__exit__(None, None, None)
    assert (outcome.status, outcome.error_class) == (OutcomeStatus.truncated, ErrorClass.timeout)
    assert "never started" in outcome.message and "HARNESS_BACKEND_CONCURRENCY" in outcome.message
    assert waited >= 0.3


def test_without_the_guard_the_tree_is_still_killed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fallback (no guard: the CLI leads the group, preexec sets its death signal)."""
    from harnesscheck.contain import process

    monkeypatch.setattr(process, "_use_guard", lambda: False)
    pidfile = tmp_path / "pids"
    lines = Lines()
    result = run_process(
        script("spawn_tree.py", str(pidfile), "--setsid"),
        env=ENV,
        cwd=tmp_path,
        on_line=lines,
        timeout_s=1.5,
        term_grace_s=0.5,
    )
    assert result.ending is Ending.deadline and result.orphan_suspected is True
    assert lines.lines[:2] == ['{"type":"partial","n":1}', '{"type":"partial","n":2}']
    assert survivors(read_pids(pidfile)) == []
    r = run_process([PY, "-c", "raise SystemExit(5)"], env=ENV, cwd=tmp_path, on_line=Lines(), timeout_s=60)
    assert (r.ending, r.exit_code) == (Ending.exited, 5)


def test_concurrent_runs_from_threads(tmp_path: Path) -> None:
    """Sessions run in worker threads (the transports' concurrency) do not disturb each other."""
    from concurrent.futures import ThreadPoolExecutor

    def one(i: int) -> tuple[Ending, int | None, list[str]]:
        lines = Lines()
        r = run_process([PY, "-c", f"print({i}); print('done')"], env=ENV, cwd=tmp_path, on_line=lines, timeout_s=60)
        return r.ending, r.exit_code, lines.lines

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(one, range(8)))
    assert results == [(Ending.exited, 0, [str(i), "done"]) for i in range(8)]


#: Signals 32 and 33 (glibc's SIGCANCEL/SIGSETXID, not valid_signals()): glibc's posix_spawn
#: leaves them ignored in every child it starts, and every glibc program installs its own
#: handlers for them at start-up. Every other signal must be at its default.
GLIBC_INTERNAL = (1 << 31) | (1 << 32)


def test_child_starts_with_default_signal_dispositions_and_mask(tmp_path: Path) -> None:
    """The CLI must get SIGTERM/SIGINT as usual: no blocked signal may leak from a host
    thread's mask (the mask survives exec)."""
    lines = Lines()
    grep = [shutil.which("grep") or "grep", "-E", "^Sig(Ign|Blk):", "/proc/self/status"]

    def run_in_thread_with_blocked_signals() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1, signal.SIGTERM})
        run_process(grep, env=ENV, cwd=tmp_path, on_line=lines, timeout_s=60)

    worker = threading.Thread(target=run_in_thread_with_blocked_signals)
    worker.start()
    worker.join()
    masks = dict(line.split(":\t") for line in lines.lines)
    assert int(masks["SigIgn"], 16) & ~GLIBC_INTERNAL == 0
    assert int(masks["SigBlk"], 16) == 0


def test_child_gets_default_dispositions_when_the_host_ignores_signals(tmp_path: Path) -> None:
    """A host started with nohup (or `cmd &` in sh) ignores SIGHUP/SIGINT; SIG_IGN survives
    exec, so the CLI must be reset to the defaults."""
    lines = Lines()
    grep = [shutil.which("grep") or "grep", "-E", "^SigIgn:", "/proc/self/status"]
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        run_process(grep, env=ENV, cwd=tmp_path, on_line=lines, timeout_s=60)
    finally:
        signal.signal(signal.SIGHUP, previous)
    assert int(lines.lines[0].split(":\t")[1], 16) & ~GLIBC_INTERNAL == 0


# --- framing property (the framer alone, every chunking) -----------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from harnesscheck.contain.process import _Run  # noqa: E402

_line_bytes = st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"").rstrip(b"\r"))


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(_line_bytes, max_size=12),
    crlf=st.lists(st.booleans(), min_size=12, max_size=12),
    tail=_line_bytes,
    cuts=st.lists(st.integers(min_value=0, max_value=600), max_size=12),
)
def test_framing_is_independent_of_chunking(lines, crlf, tail, cuts) -> None:
    data = b"".join(line + (b"\r\n" if crlf[i] else b"\n") for i, line in enumerate(lines)) + tail
    bounds = sorted({c for c in cuts if c < len(data)} | {0, len(data)})
    seen: list[str] = []
    run = _Run(seen.append, max_line_bytes=64, tail_bytes=16)
    for a, b in zip(bounds, bounds[1:]):
        run.feed_out(data[a:b])
    assert seen == [line.decode("utf-8", "replace") for line in lines]
    assert run.partial_tail() == (tail.decode("utf-8", "replace") if tail else None)
    assert not run.oversize


@settings(max_examples=200, deadline=None)
@given(size=st.integers(min_value=0, max_value=200), limit=st.integers(min_value=1, max_value=100), chunk=st.integers(min_value=1, max_value=50))
def test_oversize_exactly_past_the_limit(size: int, limit: int, chunk: int) -> None:
    data = b"x" * size + b"\r\n"
    seen: list[str] = []
    run = _Run(seen.append, max_line_bytes=limit, tail_bytes=16)
    for i in range(0, len(data), chunk):
        run.feed_out(data[i : i + chunk])
    assert run.oversize is (size > limit)
    assert seen == ([] if size > limit else ["x" * size])


def test_stderr_ring_keeps_only_the_tail() -> None:
    run = _Run(lambda line: None, max_line_bytes=64, tail_bytes=10)
    for i in range(1000):
        run.feed_err(b"%d," % i)
    assert bytes(run.err) == b"997,998,999,"[-10:] and run.err_dropped


def test_atexit_hook_kills_live_groups(tmp_path: Path) -> None:
    """The interpreter-exit hook ends every tree still running (here called directly while
    a session runs in a worker thread)."""
    from harnesscheck.contain import process

    pidfile = tmp_path / "pids"
    results = []
    worker = threading.Thread(
        target=lambda: results.append(
            run_process(
                script("spawn_tree.py", str(pidfile), "--setsid"),
                env=ENV,
                cwd=tmp_path,
                on_line=Lines(),
                timeout_s=300,
            )
        )
    )
    worker.start()
    pids = read_pids(pidfile)
    process._kill_live_groups()
    worker.join(timeout=120)
    assert not worker.is_alive()
    # terminate_tree with no grace: SIGTERM then SIGKILL at once; the CLI leads its group
    # itself, so it reports whichever of the two ended it.
    assert results and results[0].ending is Ending.exited and results[0].exit_code is None
    assert results[0].signal in (signal.SIGTERM, signal.SIGKILL)
    assert survivors(pids) == []


HARDEN_HOST = """
import ctypes, json, os, sys
from harnesscheck.contain.process import run_process
prctl = ctypes.CDLL(None).prctl
before = prctl(3, 0, 0, 0, 0)  # PR_GET_DUMPABLE
seen = []
peek = (
    "import os, sys\\n"
    "try:\\n"
    "    data = open('/proc/%s/environ' % sys.argv[1], 'rb').read()\\n"
    "    print('read', b'CANARY_SECRET_VALUE' in data)\\n"
    "except OSError as exc:\\n"
    "    print('refused', exc.errno)\\n"
)
result = run_process([sys.executable, "-c", peek, str(os.getpid())], env={"PATH": os.environ["PATH"]}, cwd=sys.argv[1],
                     on_line=seen.append, timeout_s=60)
print(json.dumps({"before": before, "after": prctl(3, 0, 0, 0, 0), "child": seen, "rc": result.exit_code}))
"""


@pytest.mark.parametrize("opt_out", [False, True])
def test_host_is_not_dumpable_after_a_session(tmp_path: Path, opt_out: bool) -> None:
    """The host turns PR_SET_DUMPABLE off before its first CLI, so a same-uid CLI cannot read
    the host's environment (secrets) from /proc; HARNESSCHECK_HOST_DUMPABLE=1 opts out."""
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = dict(os.environ, PYTHONPATH=src, CANARY_KEY="CANARY_SECRET_VALUE")
    env.pop("HARNESSCHECK_HOST_DUMPABLE", None)
    if opt_out:
        env["HARNESSCHECK_HOST_DUMPABLE"] = "1"
    out = subprocess.run([PY, "-c", HARDEN_HOST, str(tmp_path)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["rc"] == 0 and report["before"] == 1
    assert report["after"] == (1 if opt_out else 0)
    if opt_out:
        assert report["child"] == ["read True"]  # the check below would catch a leak
    elif os.geteuid() == 0:
        pytest.skip("running as root: CAP_SYS_PTRACE reads any /proc/<pid>/environ; only the flag was checked")
    else:
        assert report["child"] == [f"refused {errno.EACCES}"], report["child"]


def test_closing_the_session_kills_the_tree_even_when_the_teardown_did_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The supervisor kills its whole tree when the host's end of the session closes, so a
    host whose teardown failed (here: terminate_tree does nothing) still leaves nothing."""
    from harnesscheck.contain import process

    if not process._use_guard():
        pytest.skip("no supervisor on this platform")
    monkeypatch.setattr(process, "terminate_tree", lambda *args, **kwargs: False)
    pidfile = tmp_path / "pids"
    result = run_process(script("spawn_tree.py", str(pidfile), "--setsid"), env=ENV, cwd=tmp_path, on_line=Lines(), timeout_s=1.0, term_grace_s=0.0)
    assert result.ending is Ending.deadline
    assert survivors(read_pids(pidfile)) == []


def _busy_script(tmp_path: Path) -> tuple[Path, int]:
    """An executable script still held open for writing (by this process): exec gives ETXTBSY."""
    script = tmp_path / "busy.sh"
    fd = os.open(script, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o755)
    os.write(fd, b"#!/bin/sh\necho started\n")
    return script, fd


def test_an_executable_busy_being_written_is_started_once_the_writer_is_gone(tmp_path: Path) -> None:
    """The writer goes between the first attempt and the retry (a just-forked child of another
    thread execs, an install finishes): the spawn succeeds instead of failing the session."""
    from harnesscheck.contain.process import when_not_busy

    script, fd = _busy_script(tmp_path)
    attempts = []

    def start(*args, **kwargs):
        attempts.append(1)
        try:
            return subprocess.run(*args, **kwargs)
        finally:
            if len(attempts) == 1:
                os.close(fd)  # the writer goes right after the first, busy, attempt

    out = when_not_busy(start, [str(script)], capture_output=True)
    assert out.stdout == b"started\n" and len(attempts) == 2


def test_an_executable_that_stays_busy_fails_with_etxtbsy_and_other_errors_are_not_retried(tmp_path: Path, monkeypatch) -> None:
    from harnesscheck.contain import process

    monkeypatch.setattr(process, "BUSY_RETRY_S", (0.001, 0.001))
    script, fd = _busy_script(tmp_path)
    try:
        with pytest.raises(OSError) as busy:
            process.when_not_busy(subprocess.run, [str(script)], capture_output=True)
        assert busy.value.errno == errno.ETXTBSY
    finally:
        os.close(fd)
    calls = []

    def missing(*args, **kwargs):
        calls.append(1)
        raise FileNotFoundError(errno.ENOENT, "no such file")

    with pytest.raises(FileNotFoundError):
        process.when_not_busy(missing)
    assert calls == [1]
