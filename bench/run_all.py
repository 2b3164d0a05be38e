"""Run every benchmark in bench/ in one process tree and print each figure with its target.

    .venv/bin/python bench/run_all.py            # all
    .venv/bin/python bench/run_all.py dispatch   # those whose file name contains 'dispatch'

Every bench_*.py here runs, bench_vs_sdk.py (a session vs the bare CLI turn and the official
SDKs, a loopback cell, verify vs its floor) among them. Each prints its own lines
("<figure> ... target ... PASS|MISS"). This runner only sequences them (never in parallel: this machine has 2 shared cores) and summarises.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    wanted = argv[1:]
    scripts = sorted(p for p in HERE.glob("bench_*.py") if not wanted or any(w in p.name for w in wanted))
    failed: list[str] = []
    misses = 0
    for script in scripts:
        print(f"\n== {script.name}", flush=True)
        start = time.monotonic()
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
        sys.stdout.write(proc.stdout)
        if proc.returncode != 0:
            failed.append(script.name)
            sys.stdout.write(proc.stderr[-4000:])
        misses += proc.stdout.count("MISS")
        print(f"   ({time.monotonic() - start:.1f} s)")
    print(f"\n{len(scripts)} benchmarks, {misses} targets missed, {len(failed)} crashed {failed or ''}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
