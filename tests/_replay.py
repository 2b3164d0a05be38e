"""Replay a fixture scenario through a transport's pure parser, without a process.

The scenario's stdout bytes are built the way the fake engine writes them, framed by the
real line framer of `harnesscheck.process` (in any chunking), and the ending the runner
would report is derived from the steps: `exit` -> exited, `hang` after a terminal line ->
linger, `hang` before one -> deadline, a STOP from the parser -> early_stop.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from harnesscheck.fakes import load_fixture
from harnesscheck.process import DEFAULT_MAX_LINE_BYTES, Ending, LineAction, ProcessResult, _Run

PLACEHOLDERS = {
    "cwd": "/scratch/session",
    "session_id": "00000000-0000-4000-8000-000000000000",
    "pid": "4242",
    "prompt": "hi",
}


def _fill(value, ph):
    if isinstance(value, str):
        for k, v in ph.items():
            value = value.replace("{{" + k + "}}", v)
        return value
    if isinstance(value, list):
        return [_fill(v, ph) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, ph) for k, v in value.items()}
    return value


@dataclass
class Replay:
    stdout: bytes
    stderr: str
    exit_code: int | None
    hangs: bool


def build(cli: str, scenario: str, model: str | None = None) -> Replay:
    """The stdout bytes, stderr text and ending of a fixture scenario."""
    sc = load_fixture(cli, scenario)
    ph = {**PLACEHOLDERS, "model": model or sc.get("default_model", "")}
    out = bytearray()
    err = []
    for step in sc["steps"]:
        if "emit" in step:
            payload = _fill(step["emit"], ph)
            line = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
            out += line.encode() + b"\n"
        elif "noise" in step:
            out += _fill(step["noise"], ph).encode() + b"\n"
        elif "raw" in step:
            out += _fill(step["raw"], ph).encode() + (b"\n" if step.get("newline") else b"")
        elif "oversize" in step:
            shell = json.dumps(_fill(step["template"], ph), separators=(",", ":")).encode()
            fill = int(step["oversize"]) - (len(shell) - len(b"{{pad}}"))
            out += shell.replace(b"{{pad}}", b"A" * fill, 1) + b"\n"
        elif "invalid_utf8" in step:
            out += b"\xff\xfe\xfd not utf-8 \xc3\x28\n"
        elif "stderr" in step:
            err.append(_fill(step["stderr"], ph) * int(step.get("repeat", 1)))
        elif "exit" in step:
            return Replay(bytes(out), "\n".join(err) + ("\n" if err else ""), int(step["exit"]), False)
        elif "hang" in step:
            return Replay(bytes(out), "\n".join(err) + ("\n" if err else ""), None, True)
    return Replay(bytes(out), "\n".join(err) + ("\n" if err else ""), 0, False)


def run_parser(parser, replay: Replay, cuts: list[int] | None = None, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES):
    """Feed the replay to `parser` through the real framer, cut at `cuts`; return the outcome."""
    state = _Run(parser.feed, max_line_bytes, 64 * 1024)
    data = replay.stdout
    points = sorted({c for c in (cuts or []) if 0 < c < len(data)})
    start = 0
    for cut in [*points, len(data)]:
        state.feed_out(data[start:cut])
        start = cut
    if state.oversize:
        ending, code, sig = Ending.oversize, None, 15
    elif state.action is LineAction.STOP:
        ending, code, sig = Ending.early_stop, None, 15
    elif replay.hangs:
        ending = Ending.linger if state.action is LineAction.TERMINAL else Ending.deadline
        code, sig = None, 15
    else:
        ending, code, sig = Ending.exited, replay.exit_code, None
    result = ProcessResult(
        ending=ending,
        exit_code=code,
        signal=sig,
        stderr_tail=replay.stderr,
        duration_s=0.0,
        oversize_limit=max_line_bytes if ending is Ending.oversize else None,
        partial_tail=state.partial_tail(),
    )
    return parser.outcome(result)
