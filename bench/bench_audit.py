"""Audit throughput and memory over large generated event logs (claude, codex, cursor).

    .venv/bin/python bench/bench_audit.py [--mb 100]

Each log mixes the real event shapes: assistant text, bridge tool uses, native tool uses,
tool results carrying large file contents (the bulk of a real log), and noise. Target:
>= 50 MB/s per CLI; memory flat (tracemalloc peak on a log 5x larger stays within 2x and
under 16 MiB), i.e. constant in the size of the log.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
import tracemalloc
from pathlib import Path

from harnesscheck.backends.audit import RunFacts, audit_events
from harnesscheck.bridge.spec import BridgeSummary

random.seed(7)
FILLER = "".join(random.choice("abcdefghij klmnop\n") for _ in range(4096))


def claude_events(i: int) -> list[dict]:
    tid = f"toolu_{i:08d}"
    big = FILLER * random.randint(1, 16)
    native = i % 50 == 0
    name = "Read" if native else "mcp__bridge__read_file"
    args = {"file_path": f"/etc/f{i}"} if native else {"path": f"src/f{i}.py"}
    return [
        {"type": "assistant", "message": {"id": f"msg_{i}", "role": "assistant", "content": [{"type": "text", "text": "Looking. " * 20}]}},
        {"type": "assistant", "message": {"id": f"msg_{i}", "role": "assistant", "content": [{"type": "tool_use", "id": tid, "name": name, "input": args}]}},
        {
            "type": "user",
            "message": {"role": "user", "content": [{"tool_use_id": tid, "type": "tool_result", "content": [{"type": "text", "text": big}]}]},
            "tool_use_result": [{"type": "text", "text": big}],
        },
        {"type": "rate_limit_event", "rate_limit_info": {"status": "allowed"}},
    ]


def codex_events(i: int) -> list[dict]:
    big = FILLER * random.randint(1, 16)
    item = {
        "id": f"item_{i}",
        "type": "mcp_tool_call",
        "server": "bridge",
        "tool": "read_file",
        "arguments": {"path": "a"},
        "result": None,
        "error": None,
        "status": "in_progress",
    }
    out = [
        {"type": "item.completed", "item": {"id": f"r{i}", "type": "reasoning", "text": "thinking " * 30}},
        {"type": "item.started", "item": item},
        {"type": "item.completed", "item": dict(item, status="completed", result={"content": [{"type": "text", "text": big}]})},
    ]
    if i % 50 == 0:
        out.append(
            {
                "type": "item.completed",
                "item": {"id": f"c{i}", "type": "command_execution", "command": "ls", "aggregated_output": big, "exit_code": 0, "status": "completed"},
            }
        )
    return out


def cursor_events(i: int) -> list[dict]:
    big = FILLER * random.randint(1, 16)
    key = "readToolCall"
    args = {"path": f"src/f{i}.py"}
    return [
        {"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": "ok " * 40}]}, "session_id": "s"},
        {"type": "tool_call", "subtype": "started", "call_id": f"c{i}", "tool_call": {key: {"args": args}}, "session_id": "s"},
        {
            "type": "tool_call",
            "subtype": "completed",
            "call_id": f"c{i}",
            "tool_call": {key: {"args": args, "result": {"success": {"content": big}}}},
            "session_id": "s",
        },
    ]


GENERATORS = {"claude": claude_events, "codex": codex_events, "cursor": cursor_events}


def write_log(path: Path, cli: str, target_bytes: int) -> tuple[int, int]:
    """Write a log of about target_bytes; returns (bytes, bridge tool uses)."""
    size = 0
    i = 0
    bridge = 0
    with open(path, "w", encoding="utf-8") as fh:
        while size < target_bytes:
            for ev in GENERATORS[cli](i):
                s = json.dumps(ev) + "\n"
                fh.write(s)
                size += len(s)
            if not (cli in ("claude",) and i % 50 == 0):
                bridge += 1
            i += 1
            if i % 97 == 0:
                fh.write("WARN some non-JSON noise line\n")
    return size, bridge


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=100)
    ns = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-audit-") as tmp:
        base = Path(tmp)
        root = base / "root"
        root.mkdir()
        facts = RunFacts(scope_root=root, read_only=True, builtin_tools_off=False, bridge=BridgeSummary())
        worst = None
        for cli in GENERATORS:
            log = base / f"{cli}.jsonl"
            size, _ = write_log(log, cli, ns.mb * 1024 * 1024)
            audit_events(log, cli, facts)  # warm the page cache
            start = time.perf_counter()
            verdict = audit_events(log, cli, facts)
            dt = time.perf_counter() - start
            rate = size / dt / 1e6
            worst = rate if worst is None else min(worst, rate)
            print(
                f"{cli:7s} {size / 1e6:7.1f} MB in {dt:6.2f} s = {rate:7.1f} MB/s   target >= 50   "
                f"{'PASS' if rate >= 50 else 'MISS'}   ({len(verdict.flags)} flags)"
            )

            small = base / f"{cli}-small.jsonl"
            write_log(small, cli, ns.mb * 1024 * 1024 // 5)
            peaks = []
            for path in (small, log):
                tracemalloc.start()
                audit_events(path, cli, facts)
                peaks.append(tracemalloc.get_traced_memory()[1])
                tracemalloc.stop()
            flat = peaks[1] <= max(2 * peaks[0], 1 << 20) and peaks[1] < 16 << 20
            print(
                f"        memory peak {peaks[0] / 1024:8.0f} KiB on {ns.mb // 5} MB, {peaks[1] / 1024:8.0f} KiB on {ns.mb} MB   "
                f"flat   {'PASS' if flat else 'MISS'}"
            )
            small.unlink()
            log.unlink()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
