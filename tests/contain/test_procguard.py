"""The per-process guard: when the host dies (even by SIGKILL), every registered session
tree dies with it; while the host lives the guard holds nothing of the CLIs.

Hosts are small scripts run as subprocesses (written to tmp_path), so they can be SIGKILLed.
Time is only ever an upper bound.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from proc_support import alive, survivors

from harnesscheck.contain import process
from harnesscheck.contain.process import LineAction, run_process

SCRIPTS = Path(__file__).resolve().parents[1] / "proc_scripts"
SRC = str(Path(__file__).resolve().parents[2] / "src")
GUARD = str(Path(process.__file__).with_name("_procguard.py"))
PY = sys.executable
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
SLEEPER = [PY, "-c", "import time\nwhile True: time.sleep(1)"]

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux process semantics")

HOST = textwrap.dedent(
    """
    import json, os, signal, sys, threading, time
    from harnesscheck.contain import process
    from harnesscheck.contain.process import run_process

    out, mode, scripts = sys.argv[1], sys.argv[2], sys.argv[3]
    PY = sys.executable
    ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}

    def write(name, value):
        tmp = os.path.join(out, name + ".tmp")
        with open(tmp, "w") as fh:
            json.dump(value, fh)
        os.replace(tmp, os.path.join(out, name))

    def tree(name, setsid=True):
        argv = [PY, os.path.join(scripts, "spawn_tree.py"), os.path.join(out, name)]
        run_process(argv + (["--setsid"] if setsid else []), env=ENV, cwd=out,
                    on_line=lambda line: None, timeout_s=600)

    def in_thread(*args):
        threading.Thread(target=tree, args=args, daemon=True).start()

    def quick():
        result = run_process([PY, "-c", "print('hi')"], env=ENV, cwd=out,
                             on_line=lambda line: None, timeout_s=60)
        assert result.exit_code == 0

    def wait_for(name):
        while not os.path.exists(os.path.join(out, name)):
            time.sleep(0.01)

    write("host", os.getpid())
    if mode == "trees":  # two sessions at once: grandchildren in the group, and a setsid one
        in_thread("pids0", False)
        in_thread("pids1", True)
        wait_for("pids0"); wait_for("pids1")
        write("ready", process._guard_pid())
    elif mode == "two":  # one session finishes, the other still runs
        in_thread("pids", True)
        quick()
        wait_for("pids")
        write("ready", process._guard_pid())
    elif mode == "exit":  # a normal exit after a session
        quick()
        write("ready", process._guard_pid())
        sys.exit(0)
    elif mode == "restart":  # the guard died while the host lives: the next session restarts it
        quick()
        first = process._guard_pid()
        os.kill(first, signal.SIGKILL)
        process._guard.proc.wait()
        in_thread("pids", True)
        wait_for("pids")
        write("ready", [first, process._guard_pid()])
    elif mode == "fork":  # a forked host child gets its own guard
        quick()
        parent_guard = process._guard_pid()
        if os.fork() == 0:
            try:
                write("child", os.getpid())
                wait_for("go")  # no session of its own yet: only the at-fork hook acts
                tree("pids", True)
            finally:
                os._exit(0)
        write("ready", parent_guard)
    time.sleep(600)
    """
)


def read_json(path: Path, within_s: float = 30.0):
    end = time.monotonic() + within_s
    while not path.exists():
        assert time.monotonic() < end, f"{path.name} never appeared"
        time.sleep(0.02)
    return json.loads(path.read_text())


def read_pids(path: Path, within_s: float = 30.0) -> list[int]:
    end = time.monotonic() + within_s
    while not path.exists():
        assert time.monotonic() < end, f"{path.name} never appeared"
        time.sleep(0.02)
    return [int(x) for x in path.read_text().split()]


def guard_of(host_pid: int) -> list[int]:
    """Live guards whose command line names `host_pid` as their host (not their supervisors,
    which are forks of a guard and share its command line)."""
    needle = f"{os.path.basename(GUARD)}\0{host_pid}\0".encode()
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if needle in Path(f"/proc/{entry}/cmdline").read_bytes() and alive(int(entry)):
                    stat = Path(f"/proc/{entry}/stat").read_bytes()
                    found[int(entry)] = int(stat[stat.rfind(b")") + 2 :].split()[1])
            except OSError:
                pass
    return sorted(pid for pid, ppid in found.items() if ppid not in found)


def wait_state(pid: int, state: str, within_s: float = 30.0) -> None:
    """Until /proc says pid is in `state` (a signal is delivered asynchronously)."""
    end = time.monotonic() + within_s
    while True:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
        if stat[stat.rfind(b")") + 2 :][:1].decode() == state:
            return
        assert time.monotonic() < end, f"{pid} never reached state {state}"
        time.sleep(0.01)


class Host:
    """A host script in a subprocess; every process it reported is killed at the end."""

    def __init__(self, tmp_path: Path, mode: str):
        self.out = tmp_path
        (tmp_path / "host.py").write_text(HOST)
        self.proc = subprocess.Popen(
            [PY, str(tmp_path / "host.py"), str(tmp_path), mode, str(SCRIPTS)],
            env=dict(os.environ, PYTHONPATH=SRC),
            cwd=tmp_path,
        )
        self.cleanup: list[int] = []

    def kill(self, pid: int | None = None) -> None:
        pid = pid or self.proc.pid
        os.kill(pid, signal.SIGKILL)
        if pid == self.proc.pid:
            self.proc.wait(timeout=30)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for pid in self.cleanup:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def host_factory(tmp_path: Path):
    hosts: list[Host] = []

    def make(mode: str) -> Host:
        host = Host(tmp_path, mode)
        hosts.append(host)
        return host

    yield make
    for host in hosts:
        host.close()


def test_host_sigkilled_with_two_sessions_leaves_nothing(tmp_path: Path, host_factory) -> None:
    host = host_factory("trees")
    guard = read_json(tmp_path / "ready")
    pids = read_pids(tmp_path / "pids0") + read_pids(tmp_path / "pids1")
    host.cleanup += pids + [guard]
    assert len(pids) == 5 and all(alive(p) for p in pids)
    assert guard_of(host.proc.pid) == [guard]  # one guard for both sessions
    host.kill()
    assert survivors(pids) == []
    assert survivors([guard]) == []  # the guard exits once it has swept


def test_finished_session_then_host_killed_the_running_tree_dies(tmp_path: Path, host_factory) -> None:
    host = host_factory("two")
    guard = read_json(tmp_path / "ready")
    pids = read_pids(tmp_path / "pids")
    host.cleanup += pids + [guard]
    assert all(alive(p) for p in pids)
    host.kill()
    assert survivors(pids) == []
    assert survivors([guard]) == []


def test_guard_exits_when_the_host_exits_normally(tmp_path: Path, host_factory) -> None:
    host = host_factory("exit")
    guard = read_json(tmp_path / "ready")
    host.cleanup.append(guard)
    assert host.proc.wait(timeout=60) == 0
    assert survivors([guard]) == []


def test_dead_guard_is_restarted_and_protects_the_running_sessions(tmp_path: Path, host_factory) -> None:
    host = host_factory("restart")
    first, second = read_json(tmp_path / "ready")
    pids = read_pids(tmp_path / "pids")
    host.cleanup += pids + [second]
    assert first != second and not alive(first) and alive(second)
    host.kill()
    assert survivors(pids) == []
    assert survivors([second]) == []


def test_forked_host_child_gets_its_own_guard(tmp_path: Path, host_factory) -> None:
    host = host_factory("fork")
    parent_guard = read_json(tmp_path / "ready")
    child = read_json(tmp_path / "child")
    host.cleanup += [parent_guard, child]
    assert alive(parent_guard)
    # The child dropped its copy of the parent's guard pipe at fork: the parent's death
    # alone is EOF for the parent's guard.
    host.kill()
    assert survivors([parent_guard]) == []
    assert alive(child)
    (tmp_path / "go").write_text("")
    pids = read_pids(tmp_path / "pids")
    child_guards = guard_of(child)
    host.cleanup += pids + child_guards
    assert len(child_guards) == 1 and child_guards[0] != parent_guard
    assert all(alive(p) for p in pids)
    host.kill(child)
    assert survivors(pids) == []
    assert survivors(child_guards) == []


def test_guard_holds_no_cli_pipe_and_the_cli_holds_no_guard_pipe(tmp_path: Path) -> None:
    if not process._use_guard():
        pytest.skip("no guard on this platform")
    report = (
        "import json, os\n"
        "fds = {}\n"
        "for fd in os.listdir('/proc/self/fd'):\n"
        "    try:\n"
        "        fds[fd] = os.readlink('/proc/self/fd/' + fd)\n"
        "    except OSError:\n"
        "        pass  # the directory listing's own fd, closed by now\n"
        "print(json.dumps(fds), flush=True)\n"
        "import time; time.sleep(60)\n"
    )
    seen: dict = {}

    def on_line(line: str) -> LineAction:
        # Looked at while the CLI still runs and its pipes exist.
        seen["cli"] = json.loads(line)
        guard = process._guard_pid()
        try:
            seen["guard"] = [os.readlink(f"/proc/{guard}/fd/{fd}") for fd in os.listdir(f"/proc/{guard}/fd")]
        except PermissionError:
            seen["guard"] = None  # non-root: the non-dumpable guard hides its fds from us too
        seen["host_end"] = f"socket:[{os.fstat(process._guard.fd).st_ino}]"
        return LineAction.STOP

    run_process([PY, "-c", report], env=ENV, cwd=tmp_path, on_line=on_line, timeout_s=60)
    cli_targets = set(seen["cli"].values())
    cli_pipes = {seen["cli"]["1"], seen["cli"]["2"]}
    assert all(p.startswith("pipe:") for p in cli_pipes)
    assert seen["host_end"] not in cli_targets
    assert not any(t.startswith("socket:") for t in cli_targets)
    if seen["guard"] is None:
        pytest.skip("not root: cannot list the (non-dumpable) guard's descriptors")
    assert not cli_pipes & set(seen["guard"])
    sockets = [t for t in seen["guard"] if t.startswith("socket:")]
    assert len(sockets) == 1 and sockets[0] != seen["host_end"]  # the peer end: its stdin
    # Besides: /dev/null, its supervisors' pidfds and its own `taken` pipe (never a CLI's).
    assert all(t in (sockets[0], "/dev/null", "anon_inode:[pidfd]") or t.startswith("pipe:") for t in seen["guard"])


def test_guard_stdin_cannot_be_reopened_through_proc(tmp_path: Path) -> None:
    """A same-uid process (a CLI's shell tool) must not be able to write registrations to
    the guard or hold its input open: its stdin is a socket, which /proc cannot reopen, and
    the guard is not dumpable."""
    if not process._use_guard():
        pytest.skip("no guard on this platform")
    result = run_process([PY, "-c", "print('hi')"], env=ENV, cwd=tmp_path, on_line=lambda line: None, timeout_s=60)
    assert result.exit_code == 0
    guard = process._guard_pid()
    assert guard is not None
    attempt = (
        "import os, sys\n"
        "path = '/proc/' + sys.argv[1] + '/fd/0'\n"
        "try:\n"
        "    os.open(path, os.O_WRONLY)\n"
        "    print('opened')\n"
        "except OSError as exc:\n"
        "    print('refused', exc.errno)\n"
        "print('owner', os.stat('/proc/' + sys.argv[1]).st_uid)\n"
    )
    lines: list[str] = []
    run_process([PY, "-c", attempt, str(guard)], env=ENV, cwd=tmp_path, on_line=lines.append, timeout_s=60)
    # Root gets ENXIO (a socket cannot be opened via /proc); another uid is refused earlier.
    assert lines[0] in (f"refused {errno.ENXIO}", f"refused {errno.EACCES}"), lines
    if os.geteuid() != 0:  # non-dumpable: /proc/<guard> belongs to root, not to our uid
        assert lines[1] == "owner 0", lines


def test_guard_ignores_garbage_and_kills_only_its_own_trees(tmp_path: Path) -> None:
    """The guard protocol alone: malformed messages are ignored; a request is served by a
    supervisor; on EOF the guard kills that session's whole tree (a setsid escapee with a
    blank environment included) and leaves every other process alone, whatever its env says."""
    tag = os.urandom(6).hex()
    bystander = subprocess.Popen(SLEEPER, env={**ENV, "HARNESSCHECK_RUN": f"m-{tag}"}, start_new_session=True)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    guard = subprocess.Popen(
        [PY, "-I", "-S", GUARD, "0"], stdin=theirs.detach(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={}, cwd="/", start_new_session=True
    )
    pidfile = tmp_path / "pids"
    sess_host, sess_sup = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    out_r, out_w = os.pipe()
    try:
        ours.send(b"garbage")
        socket.send_fds(ours, [b"x"], [out_w, out_w, out_w])  # not a request: its fds are dropped
        socket.send_fds(ours, [b"s"], [sess_sup.fileno(), out_w, out_w])
        sess_sup.close()
        os.close(out_w)
        import marshal

        spec = marshal.dumps((PY, [PY, str(SCRIPTS / "spawn_tree.py"), str(pidfile), "--setsid"], dict(ENV), str(tmp_path)))
        sess_host.sendall(b"%08x" % len(spec) + spec)
        sess_host.settimeout(60)
        words = sess_host.recv(256).split()
        assert words[0] == b"p", words
        pids = read_pids(pidfile)
        assert int(words[1]) == pids[0] and all(alive(p) for p in pids)
        ours.close()  # the host is gone
        assert guard.wait(timeout=60) == 0
        assert survivors(pids) == []
        assert alive(bystander.pid)
    finally:
        sess_host.close()
        os.close(out_r)
        bystander.kill()
        bystander.wait()
        if guard.poll() is None:
            guard.kill()
            guard.wait()


def test_stuck_guard_is_replaced_without_killing_running_sessions(tmp_path: Path) -> None:
    """A stopped guard (a same-uid CLI can SIGSTOP it) is noticed at the next spawn, killed and
    replaced; the running session keeps its own supervisor and is not swept."""
    if not process._use_guard():
        pytest.skip("no guard on this platform")
    import threading

    pidfile = tmp_path / "pids"
    cancel = threading.Event()
    results = []
    worker = threading.Thread(
        target=lambda: results.append(
            run_process(
                [PY, str(SCRIPTS / "spawn_tree.py"), str(pidfile), "--setsid"],
                env=ENV,
                cwd=tmp_path,
                on_line=lambda line: None,
                timeout_s=300,
                cancel=cancel,
                term_grace_s=0.5,
            )
        )
    )
    worker.start()
    try:
        pids = read_pids(pidfile)
        old = process._guard_pid()
        os.kill(old, signal.SIGSTOP)
        wait_state(old, "T")
        quick = run_process([PY, "-c", "print('ok')"], env=ENV, cwd=tmp_path, on_line=lambda line: None, timeout_s=60)
        assert quick.exit_code == 0
        new = process._guard_pid()
        assert new is not None and new != old
        assert survivors([old]) == []  # killed and reaped, never resumed to read an EOF
        assert all(alive(p) for p in pids)  # the running session was not swept
        assert new in guard_of(os.getpid())
    finally:
        cancel.set()
        worker.join(timeout=120)
    assert results and survivors(pids) == []


def test_guard_that_cannot_start_falls_back_and_runs_the_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No interpreter for the guard: the session still runs (the CLI gets the fallback
    parent-death signal), its tree is still ended, and no further start is attempted."""
    fresh = process._Guard()
    monkeypatch.setattr(process, "_guard", fresh)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-such-python"))
    pidfile = tmp_path / "pids"
    result = run_process(
        [PY, str(SCRIPTS / "spawn_tree.py"), str(pidfile), "--setsid"], env=ENV, cwd=tmp_path, on_line=lambda line: None, timeout_s=1.5, term_grace_s=0.5
    )
    assert result.ending is process.Ending.deadline and result.orphan_suspected is True
    assert survivors(read_pids(pidfile)) == []
    assert fresh.unavailable and fresh.proc is None


def test_start_guard_starts_it_ahead_of_the_first_session_and_the_session_uses_it() -> None:
    """`warm_up()`'s guard part: before any session the host has no guard; `start_guard()`
    starts one (idempotent: the same one again), and the first session is spawned through it,
    not through a second guard."""
    script = textwrap.dedent(
        """
        import json, sys
        from harnesscheck.contain import process
        before = process._guard_pid()
        assert process.start_guard()
        pid = process._guard_pid()
        assert process.start_guard() and process._guard_pid() == pid
        result = process.run_process([sys.executable, "-c", "print('ok')"], env={}, cwd="/", on_line=lambda l: None,
                                     timeout_s=60)
        print(json.dumps([before, pid, process._guard_pid(), result.exit_code]))
        """
    )
    out = subprocess.run([PY, "-c", script], capture_output=True, text=True, timeout=120, env={**ENV, "PYTHONPATH": SRC})
    assert out.returncode == 0, out.stderr
    before, pid, after, code = json.loads(out.stdout.strip().splitlines()[-1])
    assert before is None and pid and after == pid and code == 0
