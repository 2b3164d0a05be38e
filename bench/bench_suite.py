"""Offline conformance suite over every built-in backend: wall time against its floor, and the
pytest-xdist speed-up with the same report.

    python bench/bench_suite.py [--backend ID ...] [--jobs auto] [--runs 3] [--tmpdir DIR]

Floor = (fake-CLI invocations the run made) × (bare `python -c pass` start-up), both measured
in this run, side by side. Target: wall time within 3x of the floor (printed for the serial
and the parallel run; `harnesscheck verify` runs parallel by default). A second floor also
counts the MCP servers the fake CLIs started (each a Python process: the bridge relay). Then the suite
runs again with `-n JOBS`; the two reports must hold the same cells with the same outcomes.
The pair is repeated (`--runs`, interleaved) and medians with ranges are printed: on this
shared VM one run can differ from the next by a second.

The suite runs as `harnesscheck verify --level offline` runs it (kit/verify.py pytest_args and
child_env: only the kit's plugin is loaded).

The literal floor leaves out the waits the checks are *required* to make: a session deadline
has to pass (timeout checks), a CLI that ignores SIGTERM has to get the host's term grace
before SIGKILL, a lingering CLI the host's linger (both set to test_time.TEARDOWN_S by those
checks), and the fixtures' own delays (a slow bridge start, a retry notice) have to be
replayed. They are printed beside the floor, with the ratio against the floor alone and
against floor + required waits. Timeouts and lingers are counted from the cells that ran and
the values the checks declare; fixture delays from what the fake CLIs recorded doing.
Cancels cost nothing: the kit sends them on the observed stall.

The package is byte-compiled first (`compile_package`), as an installed wheel is.

`--tmpdir DIR` puts every run's files (pytest's basetemp, the runs' temp dirs) in DIR, e.g. a
tmpfs, to compare code changes without the file system's history: on an ext4 without a
journal (this VM's), creating files within minutes of deleting thousands costs more (the
inode allocator skips recently freed inodes: `recently_deleted`), so the same code measures
up to a second slower after another run's cleanup. Not under /dev: the scope refuses roots
there.
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


def compile_package() -> None:
    """Bytecode for the package, the suite and the fake CLIs, as `pip install` leaves them. A
    checkout (an editable install) has none, and under PYTHONDONTWRITEBYTECODE (set on this
    VM) every process of every run would compile the package anew: ~0.45 s more on a
    -n auto run here, which no installed harnesscheck pays."""
    import compileall

    import harnesscheck
    from harnesscheck.core.paths import data_root

    for folder in (Path(harnesscheck.__file__).parent, data_root() / "conformance", data_root() / "fake_clis"):
        compileall.compile_dir(folder, quiet=1)


def run_suite(backends: list[str], work: Path, jobs: str | None, tmpdir: str | None = None) -> tuple[float, dict, int, dict[str, float]]:
    """The child pytest exactly as `harnesscheck verify --level offline` starts it."""
    from harnesscheck.kit.verify import bridge_template, child_env, pytest_args

    report = work / "conformance-report.json"
    basetemp = work / "tmp"
    env = {**child_env(), **({"TMPDIR": tmpdir} if tmpdir else {})}
    t0 = time.perf_counter()
    with bridge_template(backends) as template:
        cmd = pytest_args(backends, ["offline"], work, None, jobs, template) + ["--basetemp", str(basetemp)]
        subprocess.run(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    spawns = 0
    for record in basetemp.rglob("*.record.jsonl"):
        spawns += sum(1 for line in record.read_text(errors="replace").splitlines() if '"kind": "invocation"' in line)
    data = json.loads(report.read_text())
    return wall, data, spawns, required_waits(data, basetemp)


def bridge_spawns(basetemp: Path) -> int:
    """MCP servers the fake CLIs started (one Python relay, or a stdio bridge, per `bridge_start`)."""
    return sum(trace.read_text(errors="replace").count('"event":"bridge_start"') for trace in basetemp.rglob("bridge-trace.jsonl"))


def required_waits(report: dict, basetemp: Path) -> dict[str, float]:
    """Seconds the run had to spend waiting on purpose, by cause (see the module docstring)."""
    sys.path.insert(0, str(REPO))
    from conformance.test_time import TEARDOWN_S, TIMEOUT_S

    linger = term_grace = TEARDOWN_S  # the host teardown those checks set (Settings.linger_s, term_grace_s)
    ran = [c["check"] for c in report["cells"] if c["outcome"] in ("passed", "failed", "xfailed")]
    timed_out = sum(c in ("time.timeout-truncates", "time.no-survivors-after-timeout") for c in ran)
    return {
        f"session deadlines ({timed_out} x {TIMEOUT_S:g} s)": timed_out * TIMEOUT_S,
        f"term grace, CLI ignores SIGTERM ({ran.count('time.no-survivors-after-timeout')} x {term_grace:g} s)": ran.count("time.no-survivors-after-timeout")
        * term_grace,
        f"linger after the result ({ran.count('time.linger-after-result')} x {linger:g} s)": ran.count("time.linger-after-result") * linger,
        "fixture delays the fakes replayed": fixture_delays(basetemp),
        "cancels (sent on the observed stall)": 0.0,
    }


def fixture_delays(basetemp: Path) -> float:
    """Sum of the `delay` steps (and `gap`s between split pieces) the fake CLIs performed."""
    total = 0.0
    for record in basetemp.rglob("*.record.jsonl"):
        sidecar = record.with_name(record.name.replace(".record.jsonl", ".scenario.json"))
        try:
            steps = json.loads(Path(json.loads(sidecar.read_text())["scenario"]).read_text()).get("steps", [])
        except (OSError, ValueError, KeyError):
            continue
        for line in record.read_text(errors="replace").splitlines():
            if '"kind": "step"' not in line:
                continue
            rec = json.loads(line)
            step = steps[rec["index"]] if rec["index"] < len(steps) else {}
            if rec["action"] == "delay":
                total += float(step.get("delay", 0))
            elif step.get("gap"):
                total += float(step["gap"]) * len(step.get("split") or [])
    return total


def cells(report: dict) -> set[tuple[str, str, str, str]]:
    return {(c["check"], c["backend"], c["level"], c["outcome"]) for c in report["cells"]}


def _span(values: list[float], fmt: str = "{:.1f}") -> str:
    """Median and range of repeated measurements ("9.6 s (9.2-10.4)")."""
    med = statistics.median(values)
    return fmt.format(med) + (f" ({fmt.format(min(values))}-{fmt.format(max(values))})" if len(values) > 1 else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", action="append", default=[])
    parser.add_argument("--jobs", default="auto")
    parser.add_argument("--runs", type=int, default=3, help="serial/parallel pairs, interleaved (this machine is noisy)")
    parser.add_argument("--tmpdir", help="where the runs' files go (default: the system's temp dir); see above")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "src"))
    from harnesscheck.backends.registry import BUILTIN_SPECS

    backends = args.backend or list(BUILTIN_SPECS)
    compile_package()
    if args.tmpdir:
        tempfile.tempdir = args.tmpdir  # the bridge template (bridge_template) makes its directory there too
    serials, parallels, floors, startups, same = [], [], [], [], True
    report1 = waits = None
    spawns = bridges = 0
    # Every run's files are deleted only at the end: on this machine's ext4, files made soon
    # after thousands were deleted cost more (the inode allocator skips recently freed inodes),
    # which would tax every run after the first.
    with tempfile.TemporaryDirectory(dir=args.tmpdir) as work:
        for n in range(args.runs):
            startup = python_startup_s()
            a, b = Path(work) / f"serial-{n}", Path(work) / f"parallel-{n}"
            a.mkdir()
            b.mkdir()
            serial, report1, spawns, waits = run_suite(backends, a, None, args.tmpdir)
            bridges = bridge_spawns(a / "tmp")
            parallel, report2, _, _ = run_suite(backends, b, args.jobs, args.tmpdir)
            if cells(report1) != cells(report2):
                same = False
                print(f"  differing cells: {sorted(cells(report1) ^ cells(report2))[:10]}")
            serials.append(serial)
            parallels.append(parallel)
            startups.append(startup)
            floors.append(spawns * startup)
    waited = sum(waits.values())
    processes = [(spawns + bridges) * s for s in startups]
    budget = sorted(f"{c['check']}[{c['backend']}]" for c in report1["cells"] if c.get("reason") == "budget")
    print(
        f"backends: {', '.join(backends)}; {len(report1['cells'])} cells; {args.runs} serial/-n {args.jobs} pairs, "
        f"interleaved (median and range); files in {args.tmpdir or tempfile.gettempdir()}"
    )
    print(
        f"python start-up: {_span([s * 1000 for s in startups])} ms; fake-CLI invocations: {spawns}; literal floor (invocations x start-up): {_span(floors)} s"
    )
    print(f"waits the checks require: {waited:.1f} s")
    for cause, seconds in waits.items():
        print(f"  {cause}: {seconds:.1f} s")
    ratios = [w / f for w, f in zip(serials, floors)]
    print(
        f"serial wall: {_span(serials)} s = {_span(ratios, '{:.2f}')}x the literal floor (target <= {TARGET_RATIO:.0f}x) "
        f"{'OK' if statistics.median(ratios) <= TARGET_RATIO else 'OVER'}; "
        f"{_span([w / (f + waited) for w, f in zip(serials, floors)], '{:.2f}')}x floor + required waits"
    )
    if budget:
        print(f"  cells skipped 'budget' (the machine was too slow to judge them): {', '.join(budget)}")
    pratios = [w / f for w, f in zip(parallels, floors)]
    print(
        f"-n {args.jobs} wall: {_span(parallels)} s = {_span(pratios, '{:.2f}')}x the literal floor "
        f"{'OK' if statistics.median(pratios) <= TARGET_RATIO else 'OVER'}; "
        f"speed-up {_span([s / p for s, p in zip(serials, parallels)], '{:.2f}')}x; same report: {same}"
    )
    print(
        f"counting the bridges the CLIs started as well ({bridges}): floor {_span(processes)} s; "
        f"serial {_span([w / f for w, f in zip(serials, processes)], '{:.2f}')}x, "
        f"-n {args.jobs} {_span([w / f for w, f in zip(parallels, processes)], '{:.2f}')}x"
    )
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
