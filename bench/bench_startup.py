"""`harnesscheck --help` wall time vs `python -c pass` (target: within 3x), and the process
runner's own overhead per session (spawn + guard + reap of `true`, vs a bare Popen).

Both pairs are measured side by side in alternating rounds on the same machine, and the
medians are compared: this machine is shared and noisy, so only the ratio is meaningful.

    .venv/bin/python bench/bench_startup.py            # 21 rounds each
    .venv/bin/python bench/bench_startup.py --rounds 41
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET_RATIO = 3.0
HERE = Path(__file__).resolve().parent


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def cli_argv() -> list[str]:
    """The installed console script next to this interpreter, else `python -m harnesscheck.apps.cli`."""
    script = Path(sys.executable).with_name("harnesscheck")
    if script.exists():
        return [str(script), "--help"]
    found = shutil.which("harnesscheck")
    if found:
        return [found, "--help"]
    return [sys.executable, "-m", "harnesscheck.apps.cli", "--help"]


def side_by_side(a: list[str], b: list[str], rounds: int) -> tuple[float, float]:
    timed(a), timed(b)  # warm the page cache
    ta, tb = [], []
    for _ in range(rounds):
        ta.append(timed(a))
        tb.append(timed(b))
    return statistics.median(ta), statistics.median(tb)


def runner_overhead(rounds: int) -> tuple[float, float]:
    """Median wall time of run_process(["true"]) vs subprocess.run(["true"])."""
    from harnesscheck.contain.process import run_process

    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    true = shutil.which("true") or "/bin/true"

    def ours() -> float:
        start = time.perf_counter()
        run_process([true], env=env, cwd=".", on_line=lambda line: None, timeout_s=30)
        return time.perf_counter() - start

    def bare() -> float:
        start = time.perf_counter()
        subprocess.run([true], env=env, stdin=subprocess.DEVNULL, capture_output=True, check=True)
        return time.perf_counter() - start

    ours(), bare()
    to, tb = [], []
    for _ in range(rounds):
        to.append(ours())
        tb.append(bare())
    return statistics.median(to), statistics.median(tb)


def main(argv: list[str]) -> int:
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 21
    help_argv = cli_argv()
    t_help, t_pass = side_by_side(help_argv, [sys.executable, "-c", "pass"], rounds)
    ratio = t_help / t_pass
    verdict = "PASS" if ratio <= TARGET_RATIO else "MISS"
    print(
        f"harnesscheck --help: {t_help * 1000:.1f} ms vs python -c pass: {t_pass * 1000:.1f} ms"
        f" (median of {rounds}, alternating) ratio {ratio:.2f}x   target <= {TARGET_RATIO:.0f}x   {verdict}"
    )
    t_ours, t_bare = runner_overhead(rounds)
    print(
        f"run_process(['true']) {t_ours * 1000:.1f} ms vs subprocess.run(['true']) {t_bare * 1000:.1f} ms"
        f" (median of {rounds}): +{(t_ours - t_bare) * 1000:.1f} ms per session for the guard, marker sweep"
        f" and reap   (informational)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
