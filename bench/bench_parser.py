"""claude stream-json parser throughput on a generated 200 MB session (target >= 50 MB/s),
and peak memory flat in the log size (ru_maxrss at 50 MB vs 200 MB, each in a fresh process).

Because this machine is shared and noisy, the same run also measures, side by side in
alternating rounds over the same in-memory chunks, a baseline: the framer with
`json.loads` on every line (what a naive parser costs). The ratio is the stable figure.

The session is generated on the fly in the real 2.1.x shapes (init; per turn: an assistant
text line and a tool_use line sharing one message id with repeated usage, a ~2 KB MCP
tool_result, a rate_limit_event; a result at the end) and fed in 64 KiB chunks through the
same line framer as process.py (`_Run.feed_out`) into `ClaudeStreamParser.feed`. Only the
framer + parser time is measured; generation is outside the timed region.

    .venv/bin/python bench/bench_parser.py            # 200 MB throughput + memory at 50/200 MB
    .venv/bin/python bench/bench_parser.py --mb 20    # smaller run
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time

TARGET_MB_S = 50.0
MEMORY_SLACK_MB = 16.0  # "flat": the 200 MB run may not need more than this over the 50 MB run
CHUNK = 64 * 1024
SID = "8fc99cf0-8cae-4821-aa70-c0e9a24667c3"
BRIDGE = ["mcp__bridge__read_file", "mcp__bridge__list_dir", "mcp__bridge__grep"]


def lines(total_bytes: int):
    """Yield stream-json lines (bytes, newline included) until about total_bytes."""
    init = {
        "type": "system",
        "subtype": "init",
        "cwd": "/scratch",
        "session_id": SID,
        "tools": BRIDGE,
        "mcp_servers": [{"name": "bridge", "status": "connected"}],
        "model": "claude-opus-4-8[1m]",
        "permissionMode": "default",
        "apiKeySource": "none",
        "claude_code_version": "2.1.197",
    }
    out = (json.dumps(init, separators=(",", ":")) + "\n").encode()
    yield out
    size = len(out)
    payload = ("line of a source file with some code in it = 42\\n" * 40)[:2000]
    turn = 0
    while size < total_bytes:
        turn += 1
        mid = f"msg_01{turn:022d}"
        usage = (
            '{"input_tokens":3,"cache_creation_input_tokens":1649,"cache_read_input_tokens":18624,'
            '"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":1649},'
            '"output_tokens":26,"service_tier":"standard","inference_geo":"not_available"}'
        )
        head = '{"type":"assistant","message":{"model":"claude-opus-4-8","id":"%s","type":"message","role":"assistant","content":[' % mid
        tail = (
            '],"stop_reason":null,"stop_sequence":null,"usage":%s,"context_management":null},'
            '"parent_tool_use_id":null,"session_id":"%s","uuid":"cef7a33f-88a5-4bf9-ba7a-b92a81d1d0a1"}\n' % (usage, SID)
        )
        text = head + '{"type":"text","text":"Turn %d: reading the next file to check the call sites."}' % turn + tail
        tool = (
            head
            + (
                '{"type":"tool_use","id":"toolu_%020d","name":"mcp__bridge__read_file",'
                '"input":{"path":"src/mod%d.py"},"caller":{"type":"direct"}}' % (turn, turn)
            )
            + tail
        )
        result = (
            '{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_%020d",'
            '"type":"tool_result","content":[{"type":"text","text":"%s"}]}]},"parent_tool_use_id":null,'
            '"session_id":"%s","uuid":"e64c3b7c-39c9-4508-b324-2e503b62580b"}\n' % (turn, payload, SID)
        )
        rate = (
            '{"type":"rate_limit_event","rate_limit_info":{"status":"allowed","resetsAt":1772139600,'
            '"rateLimitType":"five_hour"},"uuid":"7ab62505-ca36-45b2-9662-16987eeea053","session_id":"%s"}\n' % SID
        )
        for piece in (text, tool, result, rate):
            data = piece.encode()
            size += len(data)
            yield data
    final = {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "num_turns": turn,
        "result": "done",
        "session_id": SID,
        "total_cost_usd": 12.5,
        "usage": {"input_tokens": 3 * turn, "output_tokens": 26 * turn},
    }
    yield (json.dumps(final, separators=(",", ":")) + "\n").encode()


def chunks(total_bytes: int):
    buf = bytearray()
    for line in lines(total_bytes):
        buf += line
        while len(buf) >= CHUNK:
            yield bytes(buf[:CHUNK])
            del buf[:CHUNK]
    if buf:
        yield bytes(buf)


def measure(total_mb: int) -> dict:
    from harnesscheck.backends.claude_code import ClaudeStreamParser
    from harnesscheck.contain.process import Ending, ProcessResult, _Run

    parser = ClaudeStreamParser(expected_tools=BRIDGE)
    framer = _Run(parser.feed, 64 * 1024 * 1024, 64 * 1024)
    fed = 0
    busy = 0.0
    for chunk in chunks(total_mb * 1_000_000):
        start = time.perf_counter()
        framer.feed_out(chunk)
        busy += time.perf_counter() - start
        fed += len(chunk)
    result = ProcessResult(ending=Ending.exited, exit_code=0, signal=None, stderr_tail="", duration_s=busy)
    outcome = parser.outcome(result)
    assert outcome.ok and outcome.tool_calls == parser.bridge_calls and outcome.usage.output == 26 * (outcome.iterations)
    return {"mb": fed / 1e6, "seconds": busy, "mb_s": fed / 1e6 / busy, "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def side_by_side(total_mb: int = 20, rounds: int = 5) -> dict:
    """Parser vs framer+json.loads-every-line over the same chunks, alternating rounds; medians."""
    import statistics

    from harnesscheck.backends.claude_code import ClaudeStreamParser
    from harnesscheck.contain.process import _Run

    data = list(chunks(total_mb * 1_000_000))
    size = sum(map(len, data)) / 1e6

    def parser_round() -> float:
        parser = ClaudeStreamParser(expected_tools=BRIDGE)
        framer = _Run(parser.feed, 64 * 1024 * 1024, 64 * 1024)
        start = time.perf_counter()
        for chunk in data:
            framer.feed_out(chunk)
        return time.perf_counter() - start

    def loads_round() -> float:
        framer = _Run(lambda line: json.loads(line) if line[:1] == "{" else None, 64 * 1024 * 1024, 64 * 1024)
        start = time.perf_counter()
        for chunk in data:
            framer.feed_out(chunk)
        return time.perf_counter() - start

    ours, base = [], []
    for _ in range(rounds):
        ours.append(parser_round())
        base.append(loads_round())
    return {"parser_mb_s": size / statistics.median(ours), "loads_mb_s": size / statistics.median(base)}


def child(total_mb: int) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", str(total_mb)], capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def main(argv: list[str]) -> int:
    if argv[1:2] == ["--child"]:
        print(json.dumps(measure(int(argv[2]))))
        return 0
    big = int(argv[argv.index("--mb") + 1]) if "--mb" in argv else 200
    small = max(1, big // 4)
    small_run = child(small)
    big_run = child(big)
    print(
        f"parser throughput ({big_run['mb']:.0f} MB stream-json, framer+parser): {big_run['mb_s']:.1f} MB/s"
        f" in {big_run['seconds']:.2f} s   target >= {TARGET_MB_S:.0f} MB/s   {verdict(big_run['mb_s'] >= TARGET_MB_S)}"
    )
    sbs = side_by_side()
    print(
        f"side by side (20 MB, 5 alternating rounds, medians): parser {sbs['parser_mb_s']:.1f} MB/s vs "
        f"framer+json.loads-every-line {sbs['loads_mb_s']:.1f} MB/s (ratio {sbs['parser_mb_s'] / sbs['loads_mb_s']:.2f}x)"
    )
    growth = big_run["maxrss_mb"] - small_run["maxrss_mb"]
    print(
        f"peak RSS: {small_run['maxrss_mb']:.1f} MB at {small} MB, {big_run['maxrss_mb']:.1f} MB at {big} MB"
        f" (growth {growth:+.1f} MB)   target flat (< {MEMORY_SLACK_MB:.0f} MB growth)   {verdict(growth < MEMORY_SLACK_MB)}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
