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
    assert args[args.index("harnesscheck.kit.plugin") + 1:][:2] == ["-p", "no:unraisableexception"]
    parallel = pytest_args(["fake"], ["offline"], tmp_path, None, "2")
    assert parallel[-4:] == ["-p", "xdist.plugin", "-n", "2"]
    assert child_env()["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] == "1"


def test_default_jobs_one_worker_per_cpu_at_most_four(monkeypatch):
    from harnesscheck.kit import verify

    for cpus, expected in ((1, None), (2, "2"), (64, "4")):
        monkeypatch.setattr(verify.os, "sched_getaffinity", lambda pid, n=cpus: set(range(n)))
        assert verify.default_jobs() == (expected, "")
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
