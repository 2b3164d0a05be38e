"""`harnesscheck verify` runs the suite in a child pytest that loads only the kit's plugin (and
xdist for -n), and gives the same cells serially and in parallel (kit/verify.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from harnesscheck.kit.verify import child_env, pytest_args


def test_the_child_loads_only_the_plugins_it_names(tmp_path):
    args = pytest_args(["fake"], ["offline"], tmp_path, None, None)
    assert args[args.index("-p", args.index("no:cacheprovider") + 1) + 1] == "harnesscheck.kit.plugin"
    assert "xdist.plugin" not in args and "-n" not in args
    assert args[args.index("harnesscheck.kit.plugin") + 1:][:3] == ["-p", "no:unraisableexception", "--hc-exit-fast"]
    parallel = pytest_args(["fake"], ["offline"], tmp_path, None, "2")
    assert parallel[-4:] == ["-p", "xdist.plugin", "-n", "2"]
    assert child_env()["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] == "1"


def test_default_jobs_one_more_worker_than_cpus_at_most_four_and_auto_agrees(monkeypatch):
    from types import SimpleNamespace

    from harnesscheck.kit import plugin, verify
    from harnesscheck.paths import conformance_dir

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
        capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    cells = json.loads((out / "conformance-report.json").read_text())["cells"]
    return {(c["check"], c["outcome"], c["reason"] or "") for c in cells}


def test_serial_and_parallel_runs_give_the_same_cells(tmp_path):
    serial = _verify(tmp_path, "-n", "0")
    assert ("parity.outcome-schema", "passed", "") in serial
    assert serial == _verify(tmp_path, "-n", "2") == _verify(tmp_path)


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
        argv = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-p", "harnesscheck.kit.plugin",
                str(tmp_path / "test_exit.py"), *(["--hc-exit-fast"] if fast else [])]
        proc = subprocess.run(argv, cwd=tmp_path, env={**child_env(), "HC_TEST_OUT": str(out)},
                              capture_output=True, text=True, timeout=120)
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
        base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "harnesscheck.kit.plugin",
                *(["--hc-exit-fast"] if fast else [])]
        stopped = subprocess.run([*base, str(tmp_path / "test_x.py")], cwd=tmp_path,
                                 env={**child_env(), "HC_TEST_STOP": "1"}, capture_output=True, text=True, timeout=120)
        usage = subprocess.run([*base, "--backend", "no-such-backend", str(tmp_path / "test_x.py")], cwd=tmp_path,
                               env=child_env(), capture_output=True, text=True, timeout=120)
        results[fast] = (stopped.returncode, usage.returncode)
    assert results[False] == (7, 4)
    assert results[True] == results[False]


def test_n_auto_over_the_suite_alone_starts_as_many_workers_as_verify_would(tmp_path: Path):
    """The kit's pytest_xdist_auto_num_workers runs before xdist's own (a first-result hook)."""
    import re

    from harnesscheck.kit.scheduling import suite_workers

    cmd = [a for a in pytest_args(["fake"], ["offline"], tmp_path, None, "auto") if a != "-q"]
    proc = subprocess.run(cmd + ["--basetemp", str(tmp_path / "t")], env=child_env(), capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=300)
    created = re.search(r"created: (\d+)/\1 worker", proc.stdout)
    assert created and int(created[1]) == suite_workers(), proc.stdout[-2000:]
