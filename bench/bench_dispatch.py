"""Benchmark: dispatch overhead on the choke point, measured side by side.

    .venv/bin/python bench/bench_dispatch.py

Figures (issue 2): in-scope read_file of a 4 KiB file, median overhead over a bare
`open().read()` (target < 200 us); a refused path, median (target < 100 us).
Batches of the two are interleaved so machine noise hits both alike.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from harnesscheck.choke.dispatch import dispatch  # noqa: E402
from harnesscheck.choke.trace import Trace  # noqa: E402
from harnesscheck.core.scope import ToolScope  # noqa: E402

ROUNDS = 300
BATCH = 20


def per_call(fn) -> float:
    start = time.perf_counter()
    for _ in range(BATCH):
        fn()
    return (time.perf_counter() - start) / BATCH


def report(label: str, value_us: float, target_us: float) -> None:
    verdict = "PASS" if value_us < target_us else "MISS"
    print(f"{label}: {value_us:.1f} us (target < {target_us:g} us) {verdict}")


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ws"
        (root / "src" / "pkg").mkdir(parents=True)
        target = root / "src" / "pkg" / "module.py"
        target.write_bytes(b"x" * 4095 + b"\n")
        outside = Path(tmp) / "outside.txt"
        outside.write_text("secret")
        os.symlink(str(outside), root / "leak")
        scope = ToolScope(root=root, read_only=True)
        in_scope = {"path": "src/pkg/module.py"}
        path = str(target)

        def bare() -> None:
            with open(path, "rb") as fh:
                fh.read()

        def tool() -> None:
            result = dispatch("read_file", in_scope, scope)
            assert result.ok

        trace = Trace(Path(tmp) / "trace.jsonl", session_id="bench")

        def tool_traced() -> None:
            assert dispatch("read_file", in_scope, scope, trace).ok

        def refused_dotdot() -> None:
            assert dispatch("read_file", {"path": "../outside.txt"}, scope).code == "path_outside_scope"

        def refused_symlink() -> None:
            assert dispatch("read_file", {"path": "leak"}, scope).code == "symlink_escape"

        for fn in (bare, tool, tool_traced, refused_dotdot, refused_symlink):  # warm up
            per_call(fn)
        bare_t, tool_t, traced_t, dotdot_t, link_t = [], [], [], [], []
        for _ in range(ROUNDS):
            bare_t.append(per_call(bare))
            tool_t.append(per_call(tool))
            traced_t.append(per_call(tool_traced))
            dotdot_t.append(per_call(refused_dotdot))
            link_t.append(per_call(refused_symlink))
        bare_med = statistics.median(bare_t) * 1e6
        tool_med = statistics.median(tool_t) * 1e6
        print(f"bare open().read() of 4 KiB: {bare_med:.1f} us; dispatch read_file: {tool_med:.1f} us")
        report("dispatch read_file 4 KiB, median overhead over open().read()", tool_med - bare_med, 200)
        report("  same, with a Trace recording each call", statistics.median(traced_t) * 1e6 - bare_med, 200)
        trace.close()
        report("dispatch refused path ('../outside.txt'), median", statistics.median(dotdot_t) * 1e6, 100)
        report("dispatch refused path (symlink escape, walks the tree), median", statistics.median(link_t) * 1e6, 100)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
