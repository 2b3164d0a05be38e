"""Trace: append-only JSONL, one os.write per record, safe with many writers at once."""

from __future__ import annotations

import json
import multiprocessing
import os
import stat
import threading
from pathlib import Path

import pytest

import harnesscheck.choke.trace as trace_mod
from harnesscheck.choke.trace import Trace, read_trace

WRITERS = 4
RECORDS_PER_WRITER = 2500


def _writer(path: str, writer: int, count: int, start: multiprocessing.Event) -> None:
    trace = Trace(path, session_id=f"w{writer}")
    start.wait(30)
    for i in range(count):
        # Every 50th record is far larger than PIPE_BUF (4096): still one write.
        pad = "x" * (9000 if i % 50 == 0 else i % 97)
        trace.record("tick", writer=writer, seq=i, pad=pad)
    trace.close()


def test_many_processes_no_line_lost_or_interleaved(tmp_path):
    path = tmp_path / "trace.jsonl"
    ctx = multiprocessing.get_context("fork")
    start = ctx.Event()
    procs = [ctx.Process(target=_writer, args=(str(path), w, RECORDS_PER_WRITER, start), daemon=True) for w in range(WRITERS)]
    for p in procs:
        p.start()
    start.set()
    try:
        for p in procs:
            p.join(120)  # upper bound only
            assert p.exitcode == 0, f"writer exit code {p.exitcode}"
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    assert lines[-1] == b""
    seen: dict[int, list[int]] = {w: [] for w in range(WRITERS)}
    for line in lines[:-1]:
        rec = json.loads(line)  # any interleaving would break a line's JSON
        assert rec["event"] == "tick" and rec["session"] == f"w{rec['writer']}"
        assert len(rec["pad"]) == (9000 if rec["seq"] % 50 == 0 else rec["seq"] % 97)
        seen[rec["writer"]].append(rec["seq"])
    for w in range(WRITERS):
        assert seen[w] == list(range(RECORDS_PER_WRITER)), f"writer {w} lost or reordered records"
    assert sum(1 for _ in read_trace(path)) == WRITERS * RECORDS_PER_WRITER


def test_threads_share_one_trace(tmp_path):
    path = tmp_path / "t.jsonl"
    trace = Trace(path, session_id="s")

    def work(n):
        for i in range(500):
            trace.record("t", n=n, i=i, blob="y" * (i * 13 % 6000))

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    trace.close()
    recs = list(read_trace(path, strict=True))
    assert len(recs) == 2000
    assert sorted((r["n"], r["i"]) for r in recs) == [(n, i) for n in range(4) for i in range(500)]


def test_each_record_is_one_write(tmp_path, monkeypatch):
    calls = []
    real_write = os.write

    def counting_write(fd, data):
        calls.append(len(data))
        return real_write(fd, data)

    trace = Trace(tmp_path / "t.jsonl")
    monkeypatch.setattr(trace_mod.os, "write", counting_write)
    trace.record("big", blob="z" * 200_000)
    trace.record("small")
    monkeypatch.undo()
    assert len(calls) == 2 and calls[0] > 200_000


def test_record_shape_and_append_only(tmp_path):
    path = tmp_path / "sub" / "t.jsonl"
    path.parent.mkdir()
    path.write_text('{"event": "old"}\n')
    with Trace(path, session_id="abc") as trace:
        trace.record("tool", tool="read_file", path=Path("a/b.txt"), bytes=3, nested={"k": (1, 2)}, none=None)
        trace.record("other", session="override")
    recs = list(read_trace(path))
    assert recs[0] == {"event": "old"}
    rec = recs[1]
    assert list(rec)[:3] == ["ts", "session", "event"]
    assert rec["session"] == "abc" and rec["path"] == "a/b.txt" and rec["nested"] == {"k": [1, 2]}
    assert recs[2]["session"] == "override"
    Trace(path).close()  # reopening appends, never truncates
    assert len(list(read_trace(path))) == 3


def test_new_trace_file_is_private(tmp_path):
    Trace(tmp_path / "new.jsonl").close()
    assert stat.S_IMODE(os.stat(tmp_path / "new.jsonl").st_mode) & 0o077 == 0


def test_null_trace_is_a_no_op(tmp_path):
    trace = Trace(None)
    assert not trace.enabled
    trace.record("anything", x=1)
    trace.close()
    assert list(tmp_path.iterdir()) == []


def test_read_trace_skips_a_truncated_last_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"event":"a"}\n\n[1,2]\n{"event":"b"}\n{"event":"tru')
    assert [r["event"] for r in read_trace(path)] == ["a", "b"]
    with pytest.raises(ValueError):
        list(read_trace(path, strict=True))
    assert list(read_trace(tmp_path / "missing.jsonl")) == []


def test_string_values_pass_through_redact(tmp_path, monkeypatch):
    monkeypatch.setattr(trace_mod, "_REDACT_LOADED", True)
    monkeypatch.setattr(trace_mod, "_REDACT", lambda s: s.replace("sk-live-123", "[REDACTED]"))
    path = tmp_path / "t.jsonl"
    with Trace(path, session_id="sk-live-123") as trace:
        trace.record("tool", path="sk-live-123/x", items=["sk-live-123"], n=5)
    text = path.read_text()
    assert "sk-live-123" not in text and text.count("[REDACTED]") == 3


def test_redactor_is_optional(monkeypatch):
    monkeypatch.setattr(trace_mod, "_REDACT_LOADED", False)
    monkeypatch.setattr(trace_mod, "_REDACT", None)
    redact = trace_mod._redactor()
    try:
        from harnesscheck.contain.envpolicy import redact as real  # noqa: F401
    except Exception:
        assert redact is None
    else:
        assert redact is real


def test_redaction_memo_follows_env_secret_changes(tmp_path, monkeypatch):
    pytest.importorskip("harnesscheck.contain.envpolicy")
    monkeypatch.setattr(trace_mod, "_REDACT_LOADED", False)
    value = "zq" + "x7" * 10  # looks like nothing: only known-by-value redaction can catch it
    path = tmp_path / "t.jsonl"
    with Trace(path) as trace:
        trace.record("e", path=f"dir/{value}")
        monkeypatch.setenv("MY_SERVICE_TOKEN", value)
        trace.record("e", path=f"dir/{value}")  # same string: the memo must not serve the old result
    first, second = list(read_trace(path))
    assert first["path"] == f"dir/{value}"
    assert value not in second["path"]


# -- issue 17 finding 9: records end at "\n" only


LINE_BREAKERS = ["\u2028", "\u2029", "\x85", "\x0c", "\x1c", "\x1d", "\x1e", "\x0b", "\r"]


def test_readers_split_records_on_newline_only(tmp_path: Path) -> None:
    """Six records whose paths hold characters splitlines() breaks on, written raw (as a
    writer with ensure_ascii=False would): every reader of the kit sees all six."""
    from harnesscheck.bridge.spec import summarize_trace
    from harnesscheck.kit.session import read_trace as kit_read_trace

    path = tmp_path / "t.jsonl"
    recs = [
        {
            "ts": 0,
            "session": "s",
            "event": "tool",
            "tool": "read_file",
            "decision": "refuse",
            "code": "not_found",
            "path": f"a{LINE_BREAKERS[i]}b{LINE_BREAKERS[-1 - i]}c",
        }
        for i in range(6)
    ]
    with open(path, "w", encoding="utf-8", newline="") as fh:
        for rec in recs:
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    assert len(path.read_text(encoding="utf-8").splitlines()) > 6  # what hid records before
    assert [r["path"] for r in read_trace(path, strict=True)] == [r["path"] for r in recs]
    assert [r["path"] for r in kit_read_trace(path)] == [r["path"] for r in recs]
    assert summarize_trace(path, "s").tool_calls == 6 and summarize_trace(path, "s").malformed_lines == 0


def test_trace_writes_line_breaking_characters_escaped(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    with Trace(path, session_id="s") as trace:
        for ch in LINE_BREAKERS:
            trace.record("tool", path=f"x{ch}y")
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) == len(LINE_BREAKERS)  # one line per record for every reader
    assert [r["path"] for r in read_trace(path, strict=True)] == [f"x{ch}y" for ch in LINE_BREAKERS]
