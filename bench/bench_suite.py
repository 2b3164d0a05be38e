"""Offline conformance suite over every built-in backend: wall time against its floor, and the
pytest-xdist speed-up with the same report.

    python bench/bench_suite.py [--backend ID ...] [--jobs auto]

Floor = (fake-CLI invocations the run made) × (bare `python -c pass` start-up), both measured
in this run, side by side. Target: serial wall time within 3x of the floor. Then the suite
runs again with `-n JOBS`; the two reports must hold the same cells with the same outcomes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET_RATIO = 3.0


def python_startup_s(runs: int = 15) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run_suite(backends: list[str], work: Path, jobs: str | None) -> tuple[float, dict, int]:
    report = work / "report.json"
    basetemp = work / "tmp"
    cmd = [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", "-m", "conformance and not live",
           "--basetemp", str(basetemp), "--hc-report", str(report)]
    for b in backends:
        cmd += ["--backend", b]
    if jobs:
        cmd += ["-n", jobs]
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    spawns = 0
    for record in basetemp.rglob("*.record.jsonl"):
        spawns += sum(1 for line in record.read_text(errors="replace").splitlines() if '"kind": "invocation"' in line)
    return wall, json.loads(report.read_text()), spawns


def cells(report: dict) -> set[tuple[str, str, str, str]]:
    return {(c["check"], c["backend"], c["level"], c["outcome"]) for c in report["cells"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", action="append", default=[])
    parser.add_argument("--jobs", default="auto")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "src"))
    from harnesscheck.registry import BUILTIN_SPECS

    backends = args.backend or list(BUILTIN_SPECS)
    startup = python_startup_s()
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        serial, report1, spawns = run_suite(backends, Path(a), None)
        parallel, report2, _ = run_suite(backends, Path(b), args.jobs)
    floor = spawns * startup
    ratio = serial / floor if floor else float("inf")
    same = cells(report1) == cells(report2)
    print(f"backends: {', '.join(backends)}; {len(report1['cells'])} cells")
    print(f"python start-up (median): {startup * 1000:.1f} ms; fake-CLI invocations: {spawns}; floor: {floor:.1f} s")
    print(f"serial wall: {serial:.1f} s = {ratio:.2f}x floor (target <= {TARGET_RATIO:.0f}x) {'OK' if ratio <= TARGET_RATIO else 'OVER'}")
    print(f"-n {args.jobs} wall: {parallel:.1f} s; speed-up {serial / parallel:.2f}x; same report: {same}")
    if not same:
        diff = sorted(cells(report1) ^ cells(report2))[:10]
        print(f"  differing cells: {diff}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
