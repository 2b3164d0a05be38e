"""Start-up of the fake CLIs vs a bare interpreter (issue #6: the offline suite's floor is
fake-CLI spawns x `python -c pass`).

Five commands, measured side by side in alternating rounds, medians compared (this machine
is shared and noisy, so only the ratios mean something):

- `python -c pass` and `python -I -S -c pass`: the floors;
- `python -I -S -c "import json"`: the engine's own floor (its scenario and sidecar are
  JSON, and `json` brings `re`: most of what a fake adds to a bare interpreter);
- `<fake claude> --version`: what a transport's version probe costs;
- `<fake claude>` replaying the `success` fixture (stdin /dev/null, record written): one
  whole offline session's CLI.

The fakes are per-run wrappers from `harnesscheck.fakes.install_fake_cli`, as the tests and
the kit use them.

    .venv/bin/python bench/bench_fake.py            # 31 rounds each
    .venv/bin/python bench/bench_fake.py --rounds 61
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: `--version` of a fake within this factor of `python -I -S -c "import json"` (medians):
#: the engine adds little beyond the one import every run needs.
TARGET_VERSION_RATIO = 1.25


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def medians(commands: dict[str, list[str]], rounds: int) -> dict[str, float]:
    for argv in commands.values():  # warm the page cache
        timed(argv)
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(rounds):
        for name, argv in commands.items():
            times[name].append(timed(argv))
    return {name: statistics.median(t) for name, t in times.items()}


def main(argv: list[str]) -> int:
    from harnesscheck.fakes import install_fake_cli

    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 31
    with tempfile.TemporaryDirectory(prefix="bench-fake-") as tmp:
        fake = install_fake_cli("claude", "success", Path(tmp))
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "python -I -S -c pass": [sys.executable, "-I", "-S", "-c", "pass"],
            "python -I -S import json": [sys.executable, "-I", "-S", "-c", "import json"],
            "fake claude --version": [str(fake.path), "--version"],
            "fake claude success": [str(fake.path), "-p", "--output-format", "stream-json", "--verbose"],
        }
        result = medians(commands, rounds)
        replays = len(fake.records())
    floor, floor_isolated = result["python -c pass"], result["python -I -S -c pass"]
    print(f"medians over {rounds} alternating rounds ({replays} success replays recorded):")
    for name, median in result.items():
        print(f"  {name:<24} {median * 1000:7.2f} ms   {median / floor:5.2f}x python -c pass"
              f"   {median / floor_isolated:5.2f}x python -I -S -c pass")
    ratio = result["fake claude --version"] / result["python -I -S import json"]
    verdict = "PASS" if ratio <= TARGET_VERSION_RATIO else "MISS"
    print(f"fake --version / python -I -S -c 'import json' = {ratio:.2f}x  target <= {TARGET_VERSION_RATIO}x  {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
