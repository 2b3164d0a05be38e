"""`harnesscheck verify` runs the suite in a child pytest that loads only the kit's plugin (and
xdist for -n), and gives the same cells serially and in parallel (kit/verify.py)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from proc_support import alive, survivors

from harnesscheck.kit.verify import child_env, pytest_args


def test_the_child_loads_only_the_plugins_it_names(tmp_path):
    args = pytest_args(["fake"], ["offline"], tmp_path, None, None)
    assert args[args.index("-p", args.index("no:cacheprovider") + 1) + 1] == "harnesscheck.kit.plugin"
    assert "xdist.plugin" not in args and "-n" not in args
    assert args[args.index("harnesscheck.kit.plugin") + 1 :][:3] == ["-p", "no:unraisableexception", "--hc-exit-fast"]
    parallel = pytest_args(["fake"], ["offline"], tmp_path, None, "2")
    assert parallel[-4:] == ["-p", "xdist.plugin", "-n", "2"]
    assert child_env()["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] == "1"


def test_default_jobs_one_more_worker_than_cpus_at_most_four_and_auto_agrees(monkeypatch):
    from types import SimpleNamespace

    from harnesscheck.core.paths import conformance_dir
    from harnesscheck.kit import plugin, verify

    for cpus, expected in ((1, None), (2, "3"), (3, "4"), (64, "4")):
        monkeypatch.setattr(verify.os, "sched_getaffinity", lambda pid, n=cpus: set(range(n)))
        assert verify.default_jobs() == (expected, "")
        # `-n auto` over the suite alone asks the kit, so it means the same; other runs: xdist's own
        suite_alone = SimpleNamespace(args=[str(conformance_dir())], option=SimpleNamespace(numprocesses="auto"))
        assert plugin.pytest_xdist_auto_num_workers(suite_alone) == int(expected or 0)  # 0: serial
        mixed = SimpleNamespace(args=[str(conformance_dir()), "tests"], option=SimpleNamespace(numprocesses="auto"))
        assert plugin.pytest_xdist_auto_num_workers(mixed) is None
    # the user's own choice stands: -n logical, PYTEST_XDIST_AUTO_NUM_WORKERS
    logical = SimpleNamespace(args=[str(conformance_dir())], option=SimpleNamespace(numprocesses="logical"))
    assert plugin.pytest_xdist_auto_num_workers(logical) is None
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "1")
    assert plugin.pytest_xdist_auto_num_workers(suite_alone) is None
    assert "-n" not in pytest_args(["fake"], ["offline"], Path("r"), None, "0")


def _verify(tmp_path: Path, *extra: str) -> set[tuple[str, str, str]]:
    out = tmp_path / ("report" + "".join(extra))
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("harnesscheck")), "verify", "--backend", "fake", "--level", "offline", "--report", str(out), *extra],
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    cells = json.loads((out / "conformance-report.json").read_text())["cells"]
    return {(c["check"], c["outcome"], c["reason"] or "") for c in cells}


def test_serial_and_parallel_runs_give_the_same_cells(tmp_path):
    """The same verdicts whatever the workers. A cell the machine was too slow to judge in one
    of the runs (skipped `budget`: a race that judged nothing under load) is a fact about the
    machine, not a verdict, and is left out of the comparison on both sides."""
    runs = [_verify(tmp_path, "-n", "0"), _verify(tmp_path, "-n", "2"), _verify(tmp_path)]
    assert ("parity.outcome-schema", "passed", "") in runs[0]
    unjudged = {check for run in runs for check, outcome, reason in run if reason == "budget"}
    judged = [{cell for cell in run if cell[0] not in unjudged} for run in runs]
    assert judged[0] == judged[1] == judged[2]
    assert len(unjudged) <= 2, f"most cells must be judged: {sorted(unjudged)}"


FAST_EXIT_TESTS = """
import atexit, os, sys, threading, time

OUT = os.environ["HC_TEST_OUT"]

def mark(name):
    open(os.path.join(OUT, name), "w").close()

class Teardown:
    def __del__(self, _open=open, _path=os.path.join(OUT, "module-teardown")):
        _open(_path, "w").close()

KEEP = Teardown()  # deleted only by the interpreter's module teardown

def test_registers_exit_work():
    atexit.register(mark, "atexit-ran")
    threading.Thread(target=lambda: (time.sleep(0.2), mark("thread-finished"))).start()
    sys.stdout.write("unflushed-tail")

def test_fails():
    assert False
"""


def test_exit_fast_keeps_the_exit_status_threads_atexit_and_output_and_skips_the_teardown(tmp_path):
    """--hc-exit-fast (verify's child): the session's exit status, non-daemon threads joined,
    atexit handlers run, stdout flushed; only the module teardown is skipped."""
    (tmp_path / "test_exit.py").write_text(FAST_EXIT_TESTS)
    results = {}
    for fast in (False, True):
        out = tmp_path / ("fast" if fast else "normal")
        out.mkdir()
        argv = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-s",
            "-p",
            "no:cacheprovider",
            "-p",
            "harnesscheck.kit.plugin",
            str(tmp_path / "test_exit.py"),
            *(["--hc-exit-fast"] if fast else []),
        ]
        proc = subprocess.run(argv, cwd=tmp_path, env={**child_env(), "HC_TEST_OUT": str(out)}, capture_output=True, text=True, timeout=120)
        results[fast] = (proc.returncode, "unflushed-tail" in proc.stdout, sorted(p.name for p in out.iterdir()))
    assert results[False] == (1, True, ["atexit-ran", "module-teardown", "thread-finished"])
    assert results[True] == (1, True, ["atexit-ran", "thread-finished"])


def test_exit_fast_keeps_the_status_of_a_run_stopped_before_the_kit_saw_the_session(tmp_path):
    """A hook that ends the run before the kit's session start (pytest.exit with a code), and
    a usage error while configuring: the same status with --hc-exit-fast as without it
    (review finding: both ended 0)."""
    (tmp_path / "conftest.py").write_text(
        "import os, pytest\n"
        "@pytest.hookimpl(tryfirst=True)\n"
        "def pytest_sessionstart(session):\n"
        "    if os.environ.get('HC_TEST_STOP'):\n"
        "        pytest.exit('stopped', returncode=7)\n"
    )
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    results = {}
    for fast in (False, True):
        base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "harnesscheck.kit.plugin", *(["--hc-exit-fast"] if fast else [])]
        stopped = subprocess.run(
            [*base, str(tmp_path / "test_x.py")], cwd=tmp_path, env={**child_env(), "HC_TEST_STOP": "1"}, capture_output=True, text=True, timeout=120
        )
        usage = subprocess.run(
            [*base, "--backend", "no-such-backend", str(tmp_path / "test_x.py")], cwd=tmp_path, env=child_env(), capture_output=True, text=True, timeout=120
        )
        results[fast] = (stopped.returncode, usage.returncode)
    assert results[False] == (7, 4)
    assert results[True] == results[False]


def test_n_auto_over_the_suite_alone_starts_as_many_workers_as_verify_would(tmp_path: Path):
    """The kit's pytest_xdist_auto_num_workers runs before xdist's own (a first-result hook)."""
    import re

    from harnesscheck.kit.scheduling import suite_workers

    cmd = [a for a in pytest_args(["fake"], ["offline"], tmp_path, None, "auto") if a != "-q"]
    proc = subprocess.run(cmd + ["--basetemp", str(tmp_path / "t")], env=child_env(), capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300)
    created = re.search(r"created: (\d+)/\1 worker", proc.stdout)
    assert created and int(created[1]) == suite_workers(), proc.stdout[-2000:]


# ---------------------------------------------------------------------------------------
# Nothing verified is never green; progress; writes only where asked; Ctrl-C


def _harnesscheck(*args: str, env: dict | None = None, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    import os

    return subprocess.run(
        [str(Path(sys.executable).with_name("harnesscheck")), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


def test_verify_that_can_verify_nothing_here_exits_3_with_one_line_and_no_table(tmp_path):
    """--level loopback on a machine without the pinned CLIs (an empty HARNESSCHECK_CACHE)."""
    (tmp_path / "cache").mkdir()
    proc = _harnesscheck(
        "verify",
        "--backend",
        "codex",
        "--backend",
        "claude-code",
        "--level",
        "loopback",
        "--report",
        str(tmp_path / "report"),
        env={"HARNESSCHECK_CACHE": str(tmp_path / "cache")},
    )
    assert proc.returncode == 3, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "loopback cannot run codex" in lines[0] and "install-clis" in lines[0], proc.stderr
    assert "|" not in proc.stdout and "Backend verification matrix" not in proc.stdout
    assert not (tmp_path / "report" / "conformance-report.json").exists()
    # a backend with no loopback level at all: nothing of the run could be verified either
    proc = _harnesscheck("verify", "--backend", "fake", "--level", "loopback", "--report", str(tmp_path / "report"))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "harnesscheck verify: nothing can be verified here: no selected backend can run at loopback (fake: fake is in-process: only the offline level exists)"
    ]
    assert not (tmp_path / "report" / "conformance-report.json").exists()


def test_verify_whose_every_cell_skipped_exits_3_without_a_table(tmp_path):
    """Every cell ran and skipped (a check fake does not declare the capability of)."""
    proc = _harnesscheck(
        "verify", "--backend", "fake", "--level", "offline", "--check", "usage.vendor-cost-reported", "-n", "0", "--report", str(tmp_path / "r")
    )
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "harnesscheck verify: nothing was verified: all 1 cells were skipped (unsupported-by-backend: fake does not declare cost_reporting)"
    ]
    assert "Backend verification matrix" not in proc.stdout


def test_a_failing_cell_prints_its_id_requirement_and_the_command_that_reruns_it(tmp_path):
    """Plain progress (not a terminal): the failure as it happens, a line per finished column."""
    from harnesscheck.kit.catalog import load_catalog

    baseline = tmp_path / "baseline.json"  # lists a passing cell: it fails as stale
    baseline.write_text(
        json.dumps({"version": 1, "known_failing": [{"id": "parity.outcome-schema", "backend": "fake", "reason": "upstream-bug", "note": "x"}]})
    )
    proc = _harnesscheck(
        "verify",
        "--backend",
        "fake",
        "--level",
        "offline",
        "--check",
        "parity.outcome-schema",
        "--check",
        "selection.registry-builds-backend",
        "--baseline",
        str(baseline),
        "-n",
        "0",
        "--report",
        str(tmp_path / "r"),
        env={"CI": "true"},
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    requirement = load_catalog()["parity.outcome-schema"].requirement
    out = proc.stdout
    assert "FAILED parity.outcome-schema on fake (offline)" in out
    assert f"  requirement: {requirement}" in out
    assert "  rerun: harnesscheck verify --backend fake --level offline --check parity.outcome-schema" in out
    assert "fake@offline: 2/2 cells: 1 passed, 1 failed, 0 skipped" in out
    assert "\x1b[" not in out, "no colour, no redraw when not a terminal"


def test_progress_folds_the_events_and_the_live_view_is_only_for_a_terminal_outside_ci(monkeypatch):
    import io

    from harnesscheck.kit import progress

    p = progress.Progress()
    assert (
        p.feed(
            {
                "e": "plan",
                "cells": {"a[fake@offline]": ["fake@offline", "x.a"], "b[fake@offline]": ["fake@offline", "x.b"]},
                "requirements": {"x.a": "A holds."},
            }
        )
        == []
    )
    p.feed({"e": "start", "id": "a[fake@offline]"})
    assert p.columns["fake@offline"].running == {"a[fake@offline]": "x.a"}
    said = p.feed({"e": "done", "id": "a[fake@offline]", "check": "x.a", "backend": "fake", "level": "offline", "outcome": "failed", "message": "boom\nmore"})
    assert [what for what, _ in said] == ["failed"] and not p.columns["fake@offline"].running
    said = p.feed({"e": "done", "id": "b[fake@offline]", "check": "x.b", "backend": "fake", "level": "offline", "outcome": "skipped", "reason": "budget"})
    assert [what for what, _ in said] == ["column-done"]
    out = io.StringIO()
    shown = progress.PlainView(p, out)
    shown.announce("column-done", said[0][1])
    assert out.getvalue() == "fake@offline: 2/2 cells: 0 passed, 1 failed, 1 skipped\n"

    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.delenv("CI", raising=False)
    assert progress.interactive(Tty()) and not progress.interactive(io.StringIO())
    monkeypatch.setenv("CI", "true")
    assert not progress.interactive(Tty())


def _entries(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


def test_verify_leaves_nothing_in_tmp(tmp_path):
    """A private /tmp (a mount namespace where the machine allows one) and a private TMPDIR:
    after a verify that starts CLIs and bridges, only its report is there. --keep keeps the
    run's own folder and says where."""
    import shutil

    verify = [
        str(Path(sys.executable).with_name("harnesscheck")),
        "verify",
        "--backend",
        "codex",
        "--backend",
        "fake",
        "--level",
        "offline",
        "--check",
        "scope.bridge-reaches-dispatch",
        "--check",
        "time.timeout-truncates",
    ]
    script = f"mount -t tmpfs none /tmp && {subprocess.list2cmdline(verify)} --report /tmp/report >/dev/null; echo rc=$?; ls -A /tmp"
    unshare = shutil.which("unshare")
    probe = subprocess.run([unshare, "-Urm", "true"], capture_output=True) if unshare else None
    under_tmp = any(Path(p).resolve().is_relative_to("/tmp") for p in (sys.executable, Path(__file__).parent))
    if probe is not None and probe.returncode == 0 and not under_tmp:  # a tmpfs on /tmp would hide a checkout there
        proc = subprocess.run(
            [unshare, "-Urm", "sh", "-c", script],
            capture_output=True,
            text=True,
            timeout=600,
            stdin=subprocess.DEVNULL,
            env={k: v for k, v in __import__("os").environ.items() if k != "TMPDIR"},
        )
        assert proc.stdout.split() == ["rc=0", "report"], proc.stdout + proc.stderr
    private = tmp_path / "tmp"
    private.mkdir()
    proc = _harnesscheck(*verify[1:], "--report", str(tmp_path / "report"), env={"TMPDIR": str(private)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _entries(private) == set(), f"left in TMPDIR: {_entries(private)}"
    assert _entries(tmp_path / "report") == {"conformance-report.json", "junit.xml", "backends.md", "backends.json", "backends.html", "pytest-output.txt"}
    proc = _harnesscheck(*verify[1:], "--report", str(tmp_path / "report"), "--keep", env={"TMPDIR": str(private)})
    kept = [p for p in private.iterdir()]
    assert proc.returncode == 0 and len(kept) == 1 and f"kept the run's temporary files: {kept[0]}" in proc.stdout
    assert list(kept[0].glob("pytest/**/*.record.jsonl")), "the kept folder holds the sessions' records"


def _verify_ended_mid_run(tmp_path: Path, signum: int, *, to_group: bool) -> tuple[subprocess.Popen, str, str, Path, dict, Path, list[str]]:
    """A first verify leaves a report; a second one, over codex and fake, gets `signum` once a
    cell is done (its process group, as a terminal's Ctrl-C; or its pid alone, as `timeout`
    and a CI job's timeout send SIGTERM). Returns (proc, stdout, stderr, report folder, the
    folder's files before, the private TMPDIR, the child pytest processes (pid: command line)
    that were running when the signal was sent and still were the moment verify ended)."""
    import os
    import signal
    import time

    private = tmp_path / "tmp"
    private.mkdir()
    report = tmp_path / "report"
    first = _harnesscheck(
        "verify",
        "--backend",
        "fake",
        "--level",
        "offline",
        "--check",
        "parity.outcome-schema",
        "-n",
        "0",
        "--report",
        str(report),
        env={"TMPDIR": str(private)},
    )
    assert first.returncode == 0, first.stdout + first.stderr
    (report / "mine.txt").write_text("the user's own file")
    before = {p.name: p.read_bytes() for p in report.iterdir()}
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("harnesscheck")),
            "verify",
            "--backend",
            "codex",
            "--backend",
            "fake",
            "--level",
            "offline",
            "--report",
            str(report),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "TMPDIR": str(private)},
        # a terminal's foreground job starts with these at their default; a test process
        # that inherited one ignored (nohup, `&`) would pass that on
        preexec_fn=lambda: [signal.signal(s, signal.SIG_DFL) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)],
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        events = [p for p in report.glob(".harnesscheck-partial-*/progress.jsonl") if '"e":"done"' in p.read_text()]
        if events:
            break
        time.sleep(0.2)
    assert proc.poll() is None, "verify ended before a cell was done"
    child = _processes_naming(f"{report}/.harnesscheck-partial-")  # the child pytest (its workers name no path)
    assert child, "no child run of verify was found"
    if to_group:
        os.killpg(proc.pid, signum)
    else:
        os.kill(proc.pid, signum)
    out, err = proc.communicate(timeout=120)
    running = set(_processes_naming(f"{report}/.harnesscheck-partial-"))
    return proc, out, err, report, before, private, [line for line in child if line in running]


def _processes_naming(text: str) -> list[str]:
    """The command lines of the running processes that name `text` (zombies left out)."""
    import os

    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[-1].split()[0] == "Z":
                    continue
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{pid}: {cmdline[:160]}")
    return found


def test_ctrl_c_keeps_the_previous_report_whole_and_prints_no_teardown_noise(tmp_path):
    """SIGINT to verify's process group, as a terminal's Ctrl-C sends it, once cells are done:
    exit 130, one line, the report folder as the previous run left it, nothing in TMPDIR."""
    import signal

    proc, out, err, report, before, private, survivors = _verify_ended_mid_run(tmp_path, signal.SIGINT, to_group=True)
    assert not survivors, f"outlived verify: {survivors}"
    assert proc.returncode == 130, out + err
    assert err.strip().splitlines() == [f"harnesscheck verify: interrupted: {report} still holds the previous run's files"], err
    for noise in ("Traceback", "Warning", "Exception", "KeyboardInterrupt", "Error"):
        assert noise not in out + err, out + err
    assert {p.name: p.read_bytes() for p in report.iterdir()} == before, "old and new runs are never mixed"
    assert _entries(private) == set(), f"left in TMPDIR: {_entries(private)}"


def test_sigterm_to_verify_alone_ends_its_whole_run(tmp_path):
    """SIGTERM to verify's pid alone, as `timeout` and a CI job's timeout send it: the child's
    run (in a session of its own, so the signal never reaches it) is ended as on Ctrl-C, no
    process of it survives, exit 143, one line, the previous report whole, nothing in TMPDIR.
    Before, verify died at the signal's default and left the whole suite running."""
    import signal
    import time

    proc, out, err, report, before, private, survivors = _verify_ended_mid_run(tmp_path, signal.SIGTERM, to_group=False)
    assert not survivors, f"outlived verify: {survivors}"
    deadline = time.monotonic() + 30  # the rest of the run (forkservers...) leaves after its main process
    while time.monotonic() < deadline and _processes_naming(str(private)):
        time.sleep(0.2)
    assert not _processes_naming(str(private)), f"outlived verify: {_processes_naming(str(private))}"
    assert proc.returncode == 143, out + err
    assert err.strip().splitlines() == [f"harnesscheck verify: ended by SIGTERM: {report} still holds the previous run's files"], err
    for noise in ("Traceback", "Warning", "Exception", "KeyboardInterrupt", "Error"):
        assert noise not in out + err, out + err
    assert {p.name: p.read_bytes() for p in report.iterdir()} == before, "old and new runs are never mixed"
    assert _entries(private) == set(), f"left in TMPDIR: {_entries(private)}"


#: verify's child as the kit's plugin makes it: it watches verify's liveness pipe, runs one more
#: process in its group, and would run for ten minutes.
_CHILD_OF_VERIFY = """
import os, subprocess, sys, time
from harnesscheck.kit.verify import end_with_verify, remove_verify_folders

end_with_verify()
kid = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
try:
    # inside the try: verify's end may come the moment this line is read, before the sleep
    print(kid.pid, sorted(k for k in os.environ if k.startswith("HARNESSCHECK_VERIFY")), flush=True)
    time.sleep(600)
except KeyboardInterrupt:
    remove_verify_folders()
    print("interrupted", flush=True)
"""


def test_verifys_child_ends_its_group_when_verify_is_gone(tmp_path):
    """EOF on verify's liveness pipe (verify killed) ends the child's whole process group, which
    would otherwise run on, and removes verify's scratch and staging folders (only folders of
    those names); no process the child starts sees the pipe's variables."""
    import os
    import signal

    from harnesscheck.kit.verify import ALIVE_FD_ENV, FOLDERS_ENV

    scratch, staging, other = (tmp_path / n for n in ("harnesscheck-verify-x", ".harnesscheck-partial-y", "users-own"))
    for folder in (scratch, staging, other):
        (folder / "sub").mkdir(parents=True)
    alive_read, alive_write = os.pipe()
    env = {**os.environ, ALIVE_FD_ENV: str(alive_read), FOLDERS_ENV: os.pathsep.join(map(str, (scratch, staging, other)))}
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD_OF_VERIFY],
        env=env,
        pass_fds=(alive_read,),
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as a terminal's job has it
    )
    os.close(alive_read)
    try:
        kid, seen = proc.stdout.readline().split(" ", 1)
        assert seen.strip() == "[]", f"the pipe's variables reached the child's own processes: {seen}"
        assert proc.poll() is None and alive(int(kid)), "the child ended before verify did"
        os.close(alive_write)  # verify is gone
        out, err = proc.communicate(timeout=60)
        assert "interrupted" in out, out + err
        # it got the same SIGINT; it may still be unwinding
        assert not survivors([int(kid)], within_s=30), "a process of the child's group outlived the child's ending"
        assert not scratch.exists() and not staging.exists(), "verify's folders were left"
        assert (other / "sub").is_dir(), "a folder that is not verify's was removed"
    finally:
        with contextlib.suppress(OSError):
            os.close(alive_write)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def test_a_killed_verify_leaves_no_run_and_no_folder_behind(tmp_path):
    """SIGKILL to verify's pid alone (a CI cancel's last step, the OOM killer): verify cannot
    handle it, so its child, in a session of its own, must notice (EOF on verify's liveness
    pipe) and end its own run: no process of it survives, and the run's scratch and staging
    folders go as verify's own ending would remove them; the previous report stays whole.
    Before, the whole suite ran on, orphaned, and its folders stayed for good."""
    import signal
    import time

    proc, out, err, report, before, private, _ = _verify_ended_mid_run(tmp_path, signal.SIGKILL, to_group=False)
    assert proc.returncode == -signal.SIGKILL
    deadline = time.monotonic() + 60  # SIGINT's unwinding, then SIGTERM and SIGKILL 12 s and 17 s on
    while time.monotonic() < deadline and (_processes_naming(str(private)) or _processes_naming(str(report))):
        time.sleep(0.2)
    assert not _processes_naming(str(private)) and not _processes_naming(str(report)), (
        f"outlived a killed verify: {_processes_naming(str(private)) + _processes_naming(str(report))}"
    )
    while time.monotonic() < deadline and (_entries(private) or {p.name: p.read_bytes() for p in report.iterdir()} != before):
        time.sleep(0.2)
    assert {p.name for p in report.iterdir()} == set(before), "the killed run's staging folder was left in the report folder"
    assert {p.name: p.read_bytes() for p in report.iterdir()} == before, "old and new runs are never mixed"
    assert _entries(private) == set(), f"left in TMPDIR: {_entries(private)}"


#: Under nohup (SIGHUP ignored), a closed terminal's SIGHUP never ends verify's run.
_IGNORED_STAYS_IGNORED = """
import os, signal
from harnesscheck.kit.verify import _interrupts_end_the_run

signal.signal(signal.SIGHUP, signal.SIG_IGN)
with _interrupts_end_the_run():
    os.kill(os.getpid(), signal.SIGHUP)
    print("ran on", signal.getsignal(signal.SIGHUP) is signal.SIG_IGN)
print("ignored after", signal.getsignal(signal.SIGHUP) is signal.SIG_IGN)
"""


def test_a_signal_ignored_when_verify_starts_stays_ignored():
    """nohup ignores SIGHUP (and a shell's `&` SIGINT) for the command it starts: verify keeps
    them ignored instead of ending its run at them."""
    res = subprocess.run([sys.executable, "-c", _IGNORED_STAYS_IGNORED], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout.split("\n")[:2] == ["ran on True", "ignored after True"], res.stdout + res.stderr


#: verify's interrupt handling in a child process: the first signal ends the run, and the
#: signals that follow while it is being ended (a CI cancel: SIGINT, then SIGTERM, then SIGKILL)
#: must not cut that ending short.
_LATER_SIGNALS = """
import os, signal, sys
from harnesscheck.kit.verify import _interrupts_end_the_run

# as a terminal starts verify: a test run under nohup or `&` (a CI runner's) would pass those ignored
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGTERM, signal.SIG_DFL)
signal.signal(signal.SIGHUP, signal.SIG_DFL)
first, later = (getattr(signal, name) for name in sys.argv[1:3])
steps = []
try:
    with _interrupts_end_the_run():
        try:
            os.kill(os.getpid(), first)
            steps.append("not interrupted")
        except KeyboardInterrupt:
            steps.append("interrupted")
            os.kill(os.getpid(), later)  # while the child's group is being ended
            steps.append("ended in full")
            raise
except KeyboardInterrupt as exc:
    steps.append(f"{type(exc).__name__}:{getattr(exc, 'signum', signal.SIGINT)}")
print(" ".join(steps))
"""


@pytest.mark.parametrize(("first", "later"), [("SIGINT", "SIGTERM"), ("SIGTERM", "SIGINT"), ("SIGHUP", "SIGTERM")])
def test_a_signal_while_the_run_is_being_ended_does_not_cut_the_ending_short(first, later):
    """The first of SIGINT, SIGTERM and SIGHUP ends verify's run (KeyboardInterrupt, or
    Terminated with the signal's number for the exit status); one that comes while the child's
    group is being ended is noted and ignored, so the ending completes."""
    import signal

    res = subprocess.run([sys.executable, "-c", _LATER_SIGNALS, first, later], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr[-2000:]
    kind = "KeyboardInterrupt" if first == "SIGINT" else "Terminated"
    assert res.stdout.strip() == f"interrupted ended in full {kind}:{int(getattr(signal, first))}", res.stdout + res.stderr


_SIGNAL_LOGGER = """
import signal, sys, time
log, ignored = sys.argv[1], {getattr(signal, name) for name in sys.argv[2:]}
def seen(signum, frame):
    with open(log, "a") as f:
        f.write(signal.Signals(signum).name + "\\n")
    if signum not in ignored:
        raise KeyboardInterrupt
for sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(sig, seen)
try:
    print("ready", flush=True)  # inside the try: a signal right after it still unwinds through it
    while True:
        time.sleep(0.05)
except KeyboardInterrupt:
    with open(log, "a") as f:
        f.write("unwound\\n")  # a finally block's turn: what a session removes at its end
"""


def test_an_interrupted_verify_ends_its_child_with_sigint_first_so_sessions_unwind(tmp_path):
    """verify ends its child's group with SIGINT first (the pytest processes unwind through
    their sessions' cleanup: at SIGTERM's default a worker dies mid-session and leaves its
    short runtime dir in /tmp), then SIGTERM, then SIGKILL for a group that ignores both."""
    from harnesscheck.kit.verify import _end_group

    def started(log: Path, *ignored: str) -> subprocess.Popen:
        proc = subprocess.Popen(
            [sys.executable, "-c", _SIGNAL_LOGGER, str(log), *ignored], stdout=subprocess.PIPE, text=True, start_new_session=True, stdin=subprocess.DEVNULL
        )
        assert proc.stdout.readline().strip() == "ready"
        return proc

    polite = started(tmp_path / "polite.log")
    _end_group(polite, graces_s=(30, 30, 30))
    assert (tmp_path / "polite.log").read_text().split() == ["SIGINT", "unwound"]
    stubborn = started(tmp_path / "stubborn.log", "SIGINT", "SIGTERM")
    _end_group(stubborn, graces_s=(2, 2, 30))  # 2 s: time for a loaded child to log each signal
    assert stubborn.returncode == -9 and (tmp_path / "stubborn.log").read_text().split() == ["SIGINT", "SIGTERM"]
