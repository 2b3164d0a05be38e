"""Containment by construction: a hostile CLI's descendants cannot outlive the session,
whatever they do (setsid, double fork, fork-hopping, non-dumpable, a blank or overwritten
environment, daemons like ssh-agent, stopping or killing the session's supervisor), on a
timeout and when the host is SIGKILLed. Each escape is tests/proc_scripts/escape.py MODE.

Survivors are found from the escapees' own records (every process appends its pid before
anything else) and, for exec'd `sleep`s, by a per-test token on their command line; never
by the env marker. Time is only ever an upper bound.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from proc_support import alive, survivors

from harnesscheck.contain import process
from harnesscheck.contain.process import Ending, run_process

SCRIPTS = Path(__file__).resolve().parents[1] / "proc_scripts"
SRC = str(Path(__file__).resolve().parents[2] / "src")
PY = sys.executable
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
#: The unprivileged host runs the system interpreter (the venv's may live in a 0700 home, so
#: it could not start its guard) with this environment's packages.
SITE = [p for p in sys.path if p.endswith("site-packages")]

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or not process._use_guard(), reason="Linux process semantics, with the supervisor")

MODES = ["setsid-env-i", "double-fork", "fork-hop", "nondumpable", "overwrite-env"]
if shutil.which("ssh-agent"):
    MODES.append("ssh-agent")


def token() -> str:
    return f"97.{int.from_bytes(os.urandom(3), 'big') % 10**6:06d}"


def by_token(tok: str) -> list[int]:
    """Live processes whose command line carries tok (the exec'd escapees)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if tok.encode() in Path(f"/proc/{entry}/cmdline").read_bytes() and alive(int(entry)):
                    found.append(int(entry))
            except OSError:
                pass
    return found


def recorded(pidfile: Path, at_least: int = 2, within_s: float = 30.0) -> list[int]:
    end = time.monotonic() + within_s
    while True:
        pids = [int(x) for x in pidfile.read_text().split()] if pidfile.exists() else []
        if len(pids) >= at_least:
            return pids
        assert time.monotonic() < end, f"the escape recorded only {pids}"
        time.sleep(0.02)


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


@pytest.mark.parametrize("mode", MODES)
def test_escapee_dies_at_the_timeout_and_is_reported(tmp_path: Path, mode: str) -> None:
    """On a deadline the whole tree dies, and the escapee (it left the CLI's group) is reported."""
    tok = token()
    # the deadline must come after the escape ("ready"): a short one, repeated longer when the
    # script had not got there by then (a loaded machine); every attempt's pids are checked
    pids: list[int] = []
    for timeout in (0.6, 3.0, 12.0):
        pidfile = tmp_path / f"pids-{timeout:g}"
        lines: list[str] = []
        result = run_process(
            [PY, str(SCRIPTS / "escape.py"), mode, str(pidfile), tok], env=ENV, cwd=tmp_path, on_line=lines.append, timeout_s=timeout, term_grace_s=0.2
        )
        pids += recorded(pidfile, at_least=1)
        if "ready" in lines:
            break
    try:
        assert result.ending is Ending.deadline
        assert survivors(pids) == [] and survivors(by_token(tok)) == []
        assert result.orphan_suspected is True
    finally:
        kill_all(pids + by_token(tok))


HOST = textwrap.dedent(
    """
    import json, os, sys
    from harnesscheck.contain.process import run_process
    out, argv = sys.argv[1], json.loads(sys.argv[2])
    result = run_process(argv, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, cwd=out,
                         on_line=lambda line: open(os.path.join(out, "ready"), "w").close(), timeout_s=600)
    with open(os.path.join(out, "result.tmp"), "w") as fh:
        json.dump({"ending": str(result.ending), "orphan_suspected": result.orphan_suspected,
                   "supervisor_lost": result.supervisor_lost}, fh)
    os.replace(os.path.join(out, "result.tmp"), os.path.join(out, "result"))
    import time
    time.sleep(600)
    """
)


def run_host(out: Path, mode: str, tok: str, *, user: str | None = None) -> subprocess.Popen:
    (out / "host.py").write_text(HOST)
    cli = PY if user is None else "/usr/bin/python3"  # the venv's interpreter may sit in a 0700 home
    argv = [cli, str(SCRIPTS / "escape.py"), mode, str(out / "pids"), tok]
    host_py = PY if user is None else "/usr/bin/python3"
    cmd = [host_py, str(out / "host.py"), str(out), json.dumps(argv)]
    pythonpath = SRC if user is None else os.pathsep.join([SRC, *SITE])
    if user is not None:
        entry = pwd.getpwnam(user)
        cmd = ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups", *cmd]
    return subprocess.Popen(cmd, env=dict(os.environ, PYTHONPATH=pythonpath), cwd=out)


def wait_for(path: Path, within_s: float = 60.0) -> None:
    end = time.monotonic() + within_s
    while not path.exists():
        assert time.monotonic() < end, f"{path.name} never appeared"
        time.sleep(0.02)


def host_killed_leaves_nothing(out: Path, mode: str, user: str | None = None) -> None:
    tok = token()
    host = run_host(out, mode, tok, user=user)
    pids: list[int] = []
    try:
        wait_for(out / "ready")
        pids = recorded(out / "pids")
        time.sleep(0.1)
        host.kill()
        host.wait(timeout=30)
        assert survivors(pids) == [] and survivors(by_token(tok)) == []
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()
        kill_all(pids + by_token(tok))


@pytest.mark.parametrize("mode", MODES)
def test_escapee_dies_with_a_sigkilled_host(tmp_path: Path, mode: str) -> None:
    host_killed_leaves_nothing(tmp_path, mode)


def unprivileged_dir() -> Path:
    out = Path(tempfile.mkdtemp(prefix="hc-nobody-"))
    out.chmod(0o777)
    return out


@pytest.mark.parametrize("mode", ["nondumpable", "setsid-env-i"])
def test_non_root_host_escapee_dies_with_a_sigkilled_host(mode: str) -> None:
    """As an unprivileged host, a non-dumpable escapee's environ cannot be read (the marker
    sweep was blind to it); the supervisor does not need to read anything."""
    if os.geteuid() != 0 or not shutil.which("setpriv") or not os.access("/usr/bin/python3", os.X_OK):
        pytest.skip("needs root to start the host as the unprivileged user nobody (setpriv)")
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user nobody on this machine")
    probe = subprocess.run(
        [
            "setpriv",
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "/usr/bin/python3",
            "-c",
            "import sys, harnesscheck.contain.process as p; sys.exit(0 if p._use_guard() else 3)",
        ],
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([SRC, *SITE])),
        capture_output=True,
        cwd="/",
    )
    if probe.returncode != 0:
        pytest.skip(f"the user nobody cannot run this interpreter and source tree: {probe.stderr[-200:]!r}")
    out = unprivileged_dir()
    try:
        host_killed_leaves_nothing(out, mode, user="nobody")
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_stopped_supervisor_and_guard_then_host_killed(tmp_path: Path) -> None:
    """The CLI SIGSTOPs its supervisor and the guard, then the host is SIGKILLed: the host has
    noticed the stopped supervisor first and killed the tree (reported), so nothing is left."""
    tok = token()
    host = run_host(tmp_path, "stop-supervisor", tok)
    pids: list[int] = []
    try:
        wait_for(tmp_path / "result")
        pids = recorded(tmp_path / "pids")
        result = json.loads((tmp_path / "result").read_text())
        assert result["supervisor_lost"] is True and result["orphan_suspected"] is True
        host.kill()
        host.wait(timeout=30)
        assert survivors(pids) == []
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()
        kill_all(pids)


def test_stopped_supervisor_and_guard_then_host_killed_at_once(tmp_path: Path) -> None:
    """The same, but the host is SIGKILLed before it can notice: the kernel's SIGCONT at the
    host's hang-up (F_SETSIG) resumes the guard and the supervisor, which kill the tree."""
    host_killed_leaves_nothing(tmp_path, "stop-supervisor")


def test_killed_supervisor_ends_the_session_reported(tmp_path: Path) -> None:
    """The CLI SIGKILLs its supervisor: the guard kills the re-parented tree, the session ends
    with supervisor_lost and orphan_suspected, and nothing is left."""
    pidfile = tmp_path / "pids"
    result = run_process(
        [PY, str(SCRIPTS / "escape.py"), "kill-supervisor", str(pidfile)], env=ENV, cwd=tmp_path, on_line=lambda line: None, timeout_s=120, term_grace_s=0.2
    )
    pids = recorded(pidfile)
    try:
        assert result.supervisor_lost is True and result.orphan_suspected is True
        assert result.ending is Ending.exited and result.duration_s < 60
        assert survivors(pids) == []
    finally:
        kill_all(pids)
