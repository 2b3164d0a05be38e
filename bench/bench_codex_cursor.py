"""codex and cursor parser throughput (target >= 50 MB/s each) and memory flat in the log size.

Streams are generated in the real shapes (codex: mcp_tool_call started/completed with a
~2 KB result, a command_execution, an agent_message per turn, turn.completed at the end;
cursor: assistant segments, mcpToolCall started/completed with a ~2 KB result, a result at
the end) and fed in 64 KiB chunks through process.py's line framer (`_Run.feed_out`) into
`CodexParser.feed` / `CursorParser.feed`. Side by side in alternating rounds, the baseline
is the same framer with `json.loads` on every line; the ratio is the stable figure on this
shared machine. Memory: ru_maxrss of a fresh process at N and 4N MB.

    .venv/bin/python bench/bench_codex_cursor.py            # 100 MB streams
    .venv/bin/python bench/bench_codex_cursor.py --mb 20
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

TARGET_MB_S = 50.0
MEMORY_SLACK_MB = 16.0
CHUNK = 64 * 1024
PAYLOAD = ("line of a source file with some code in it = 42\n" * 40)[:2000]


def codex_lines(total: int):
    yield b'{"type":"thread.started","thread_id":"019a7c3e-5b21-7d40-9a7e-3f0c2b8d41aa"}\n{"type":"turn.started"}\n'
    size, n = 0, 0
    while size < total:
        n += 1
        base = {"id": f"item_{n}", "type": "mcp_tool_call", "server": "bridge", "tool": "read_file", "arguments": {"path": f"src/mod{n}.py"}}
        started = {"type": "item.started", "item": {**base, "result": None, "error": None, "status": "in_progress"}}
        done = {
            "type": "item.completed",
            "item": {**base, "result": {"content": [{"type": "text", "text": PAYLOAD}], "structured_content": None}, "error": None, "status": "completed"},
        }
        cmd = {
            "type": "item.completed",
            "item": {
                "id": f"c{n}",
                "type": "command_execution",
                "command": "bash -lc ls",
                "aggregated_output": "a\nb\n",
                "exit_code": 0,
                "status": "completed",
            },
        }
        msg = {"type": "item.completed", "item": {"id": f"m{n}", "type": "agent_message", "text": f"Turn {n}: next file."}}
        chunk = b"".join(json.dumps(e, separators=(",", ":")).encode() + b"\n" for e in (started, done, cmd, msg))
        size += len(chunk)
        yield chunk
    yield b'{"type":"turn.completed","usage":{"input_tokens":34172,"cached_input_tokens":27136,"output_tokens":163}}\n'


def cursor_lines(total: int):
    yield b'{"type":"system","subtype":"init","apiKeySource":"login","cwd":"/s","session_id":"s","model":"Auto"}\n'
    size, n = 0, 0
    while size < total:
        n += 1
        args = {"name": "bridge-read_file", "args": {"path": f"src/mod{n}.py"}, "toolName": "read_file", "providerIdentifier": "bridge"}
        say = {"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": f"Turn {n}."}]}, "session_id": "s"}
        st = {"type": "tool_call", "subtype": "started", "call_id": f"c{n}", "tool_call": {"mcpToolCall": {"args": args}}, "session_id": "s"}
        dn = {
            "type": "tool_call",
            "subtype": "completed",
            "call_id": f"c{n}",
            "tool_call": {"mcpToolCall": {"args": args, "result": {"success": {"content": [{"type": "text", "text": PAYLOAD}], "isError": False}}}},
            "session_id": "s",
        }
        chunk = b"".join(json.dumps(e, separators=(",", ":")).encode() + b"\n" for e in (say, st, dn))
        size += len(chunk)
        yield chunk
    yield b'{"type":"result","subtype":"success","is_error":false,"result":"done","usage":{"inputTokens":10,"outputTokens":5}}\n'


def chunks(gen) -> list[bytes]:
    data = b"".join(gen)
    return [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)]


def feed(parts: list[bytes], on_line) -> float:
    from harnesscheck.contain.process import _Run

    state = _Run(on_line, 64 * 1024 * 1024, 64 * 1024)
    start = time.perf_counter()
    for part in parts:
        state.feed_out(part)
    return time.perf_counter() - start


def throughput(cli: str, mb: int) -> tuple[float, float]:
    from harnesscheck.backends.codex import CodexParser
    from harnesscheck.backends.cursor import CursorParser

    parts = chunks((codex_lines if cli == "codex" else cursor_lines)(mb * 1024 * 1024))
    size_mb = sum(map(len, parts)) / 1e6
    ours, base = [], []
    for _ in range(3):
        parser = CodexParser() if cli == "codex" else CursorParser()
        ours.append(feed(parts, parser.feed))
        base.append(feed(parts, json.loads))
    return size_mb / statistics.median(ours), size_mb / statistics.median(base)


def peak_rss_mb(cli: str, mb: int) -> float:
    """Peak traced Python memory of a fresh process that generates and parses `mb` MB chunk
    by chunk (tracemalloc: ru_maxrss would carry the parent's size across fork+exec)."""
    code = (
        "import tracemalloc, sys; sys.path.insert(0, %r)\n"
        "import bench_codex_cursor as b\n"
        "from harnesscheck.contain.process import _Run\n"
        "from harnesscheck.backends.codex import CodexParser\n"
        "from harnesscheck.backends.cursor import CursorParser\n"
        "p = CodexParser() if %r == 'codex' else CursorParser()\n"
        "s = _Run(p.feed, 64*1024*1024, 64*1024)\n"
        "tracemalloc.start()\n"
        "for c in (b.codex_lines if %r == 'codex' else b.cursor_lines)(%d*1024*1024): s.feed_out(c)\n"
        "print(tracemalloc.get_traced_memory()[1] / 1e6)\n"
    ) % (sys.path[0], cli, cli, mb)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def main(argv: list[str]) -> int:
    mb = int(argv[argv.index("--mb") + 1]) if "--mb" in argv else 100
    misses = 0
    for cli in ("codex", "cursor"):
        ours, base = throughput(cli, mb)
        ok = ours >= TARGET_MB_S
        misses += not ok
        print(
            f"{cli} parser: {ours:.0f} MB/s on {mb} MB (framer+json.loads baseline {base:.0f} MB/s, "
            f"ratio {ours / base:.2f}); target >= {TARGET_MB_S:.0f} MB/s {'PASS' if ok else 'MISS'}"
        )
        small, large = peak_rss_mb(cli, mb // 4 or 1), peak_rss_mb(cli, mb)
        flat = large - small <= MEMORY_SLACK_MB
        misses += not flat
        print(
            f"{cli} peak traced memory: {small:.1f} MB at {mb // 4 or 1} MB, {large:.1f} MB at {mb} MB; "
            f"flat within {MEMORY_SLACK_MB:.0f} MB {'PASS' if flat else 'MISS'}"
        )
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
