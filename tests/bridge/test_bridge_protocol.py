"""The bridge answers every request (issue 17 findings 6 and 8).

- A malformed request gets a JSON-RPC error (id null when its id is unusable), never
  silence; a well-formed notification is never answered (JSON-RPC forbids it), a malformed
  one is dropped and traced, and neither kills the bridge.
- A tools/call whose name is not a string or whose arguments are not an object is a tool
  error (isError, `refused: <code>:`), traced like any refusal, not JSON-RPC -32602.
- A request line over the size bound, or nested too deep, or with too many JSON values, is
  answered with an error before it is parsed and the session goes on.
- Names that are not UTF-8 (an in-tree symlink to one) never kill the bridge.

Everything runs the bridge's real transport (`serve_stdio` over pipes, in-process) or the
real process (`python -m harnesscheck.bridge --spec`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import anyio
import pytest

from harnesscheck.bridge import server
from harnesscheck.bridge.spec import BridgeSpec, bridge_argv, bridge_env, write_spec
from harnesscheck.choke.trace import Trace, read_trace
from harnesscheck.core.scope import ToolScope

BOUND_S = 60.0
INIT = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def _line(msg) -> bytes:
    return (msg if isinstance(msg, (bytes, str)) else json.dumps(msg)).encode() + b"\n" if not isinstance(msg, bytes) else msg + b"\n"


def _call(rid, name, args) -> dict:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": name, "arguments": args}}


def serve(root: Path, lines: list, trace_path: Path | None = None, read_only: bool = False) -> list[dict]:
    """Feed `lines` (after initialize) to the bridge's transport in this process; return
    every answer it wrote, in order. Raises whatever would have killed the bridge."""
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    out: list[bytes] = []

    def feed() -> None:
        try:
            for msg in [INIT, INITIALIZED, *lines]:
                os.write(in_w, _line(msg))
        finally:
            os.close(in_w)

    def drain() -> None:
        while chunk := os.read(out_r, 65536):
            out.append(chunk)

    threads = [threading.Thread(target=feed, daemon=True), threading.Thread(target=drain, daemon=True)]
    for t in threads:
        t.start()
    trace = Trace(trace_path, session_id="s1") if trace_path is not None else None
    inflight = server.Inflight()
    bridge = server.build_server(ToolScope(root=root, read_only=read_only), trace=trace, session_id="s1", inflight=inflight)

    async def go() -> None:
        with anyio.fail_after(BOUND_S):
            await server.serve_stdio(bridge, in_r, out_w, inflight, trace)

    try:
        anyio.run(go)
    finally:
        os.close(out_w)
        threads[1].join(BOUND_S)
        os.close(in_r)
        os.close(out_r)
        if trace is not None:
            trace.close()
    answers = [json.loads(x) for x in b"".join(out).split(b"\n") if x.strip()]
    assert answers and answers[0].get("id") == 0 and "result" in answers[0], answers[:1]
    return answers[1:]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "wt"
    r.mkdir()
    (r / "a.txt").write_text("alpha\n")
    return r


#: A call after the malformed line: answered even at EOF (calls are drained, SPEC-bridge).
OK_LIST = {"jsonrpc": "2.0", "id": "after", "method": "tools/call", "params": {"name": "list_dir", "arguments": {}}}

MALFORMED = [
    ("id-true", {"jsonrpc": "2.0", "id": True, "method": "tools/list"}, None, -32600),
    ("id-fraction", {"jsonrpc": "2.0", "id": 1.5, "method": "tools/list"}, None, -32600),
    ("id-object", {"jsonrpc": "2.0", "id": {}, "method": "tools/list"}, None, -32600),
    ("id-array", {"jsonrpc": "2.0", "id": [1], "method": "tools/list"}, None, -32600),
    ("id-null", {"jsonrpc": "2.0", "id": None, "method": "tools/list"}, None, -32600),
    ("no-method", {"jsonrpc": "2.0", "id": 7}, 7, -32600),
    ("method-not-string", {"jsonrpc": "2.0", "id": 8, "method": 5}, 8, -32600),
    ("params-array", {"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": [1]}, 9, -32602),
    ("params-string-call", {"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": "x"}, 10, -32602),
    ("batch", [{"jsonrpc": "2.0", "id": 11, "method": "tools/list"}], None, -32600),
    ("empty-batch", [], None, -32600),
    ("scalar", 42, None, -32600),
    ("null", None, None, -32600),
    ("string", "hello", None, -32600),
    ("not-json", "{nope", None, -32700),
    ("no-jsonrpc", {"id": 12, "method": "tools/list"}, 12, -32600),
    ("wrong-jsonrpc", {"jsonrpc": "1.0", "id": 13, "method": "tools/list"}, 13, -32600),
    ("response-without-id", {"jsonrpc": "2.0", "result": {}}, None, -32600),
    ("too-deep", "[" * 200 + "]" * 200, None, -32600),
    ("too-many-values", "[" + "0," * 150_000 + "0]", None, -32600),
]


@pytest.mark.parametrize("label, msg, want_id, want_code", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_every_malformed_request_is_answered(root: Path, tmp_path: Path, label, msg, want_id, want_code) -> None:
    raw = msg if isinstance(msg, str) and label in ("not-json", "too-deep", "too-many-values") else json.dumps(msg)
    answers = serve(root, [raw, OK_LIST], tmp_path / "trace.jsonl")
    assert len(answers) == 2, answers
    error, after = answers
    assert error.get("id") == want_id and error["error"]["code"] == want_code, error
    assert after["id"] == "after" and after["result"]["content"][0]["text"] == "a.txt"  # the session goes on
    rejected = [r for r in read_trace(tmp_path / "trace.jsonl") if r["event"] == "bridge_rejected"]
    assert [r["code"] for r in rejected] == [want_code]


@pytest.mark.parametrize(
    "msg",
    [
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": [1]},
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": {}}},
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": [1, 2]}},
        {"jsonrpc": "2.0", "method": "notifications/progress", "params": "x"},
        {"jsonrpc": "2.0", "id": 99, "result": {}},  # a response to nothing
        {"jsonrpc": "2.0", "id": 98, "result": 5},  # a malformed response
    ],
)
def test_notifications_and_responses_are_never_answered_and_never_kill_the_bridge(root: Path, msg) -> None:
    answers = serve(root, [msg, _call(1, "read_file", {"path": "a.txt"}), OK_LIST])
    by_id = {a.get("id"): a for a in answers}  # calls run in threads: answers in any order
    assert len(answers) == 2 and set(by_id) == {1, "after"}, answers
    assert by_id[1]["result"]["content"][0]["text"] == "alpha\n"


@pytest.mark.parametrize(
    "params, code",
    [
        ({"name": "read_file", "arguments": [1]}, "bad_arguments"),
        ({"name": "read_file", "arguments": "a.txt"}, "bad_arguments"),
        ({"name": "read_file", "arguments": 5}, "bad_arguments"),
        ({"name": 5, "arguments": {"path": "a.txt"}}, "unknown_tool"),
        ({"name": ["read_file"], "arguments": {}}, "unknown_tool"),
        ({"name": None, "arguments": {}}, "unknown_tool"),
        ({"arguments": {"path": "a.txt"}}, "unknown_tool"),
    ],
)
def test_bad_tool_name_or_arguments_are_tool_refusals(root: Path, tmp_path: Path, params, code) -> None:
    answers = serve(root, [{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": params}], tmp_path / "t.jsonl")
    assert len(answers) == 1 and answers[0]["id"] == 3, answers
    result = answers[0].get("result")
    assert result is not None, answers[0]  # a tool result, not JSON-RPC -32602
    assert result["isError"] is True and result["content"][0]["text"].startswith(f"refused: {code}: ")
    tools = [r for r in read_trace(tmp_path / "t.jsonl") if r["event"] == "tool"]
    assert len(tools) == 1 and tools[0]["decision"] == "refuse" and tools[0]["code"] == code
    assert not server._BAD_CALLS  # nothing kept once answered


def test_a_forged_bad_call_name_is_just_an_unknown_tool(root: Path) -> None:
    forged = _call(4, server._BAD_CALL_PREFIX + "0" * 32, {"path": "a.txt"})
    answers = serve(root, [forged])
    assert answers[0]["result"]["content"][0]["text"].startswith("refused: unknown_tool: ")


def test_an_oversize_line_is_answered_and_dropped_and_the_session_goes_on(root: Path, monkeypatch) -> None:
    monkeypatch.setattr(server, "MAX_REQUEST_LINE_BYTES", 200_000)
    huge = json.dumps(_call(5, "write_file", {"path": "big.txt", "content": "x" * 600_000}))
    answers = serve(root, [huge, _call(6, "read_file", {"path": "a.txt"})])
    assert [a.get("id") for a in answers] == [None, 6], answers  # the error is answered as the line is read
    assert answers[0]["error"]["code"] == -32600 and "longer than 200000 bytes" in answers[0]["error"]["message"]
    assert answers[1]["result"]["content"][0]["text"] == "alpha\n"
    assert not (root / "big.txt").exists()


def test_pipe_lines_drop_an_oversize_line_up_to_its_newline(monkeypatch) -> None:
    monkeypatch.setattr(server, "MAX_REQUEST_LINE_BYTES", 100_000)
    r, w = os.pipe()

    def feed() -> None:
        os.write(w, b'{"ok": 1}\n')
        for _ in range(10):  # 640 KB without a newline
            os.write(w, b"x" * 65536)
        os.write(w, b'tail of it\n{"ok": 2}\n')
        os.close(w)

    async def read_all() -> list[str]:
        threading.Thread(target=feed, daemon=True).start()
        return [line async for line in server._PipeLines(r)]

    try:
        lines = anyio.run(read_all)
    finally:
        os.close(r)
    assert lines == ['{"ok": 1}\n', server.OVERSIZE, '{"ok": 2}\n']
    assert lines[1] is server.OVERSIZE


# -- names that are not UTF-8 (finding 6)


@pytest.fixture
def undecodable(root: Path) -> Path:
    base = os.fsencode(str(root))
    with open(base + b"/caf\xe9.txt", "wb") as fh:
        fh.write(b"old text\n")
    os.symlink(b"caf\xe9.txt", base + b"/link")
    os.mkdir(base + b"/d\xff")
    os.symlink(b"d\xff", base + b"/dlink")
    return root


UNDECODABLE_CALLS = [
    ("edit_file", {"path": "link", "old": "old", "new": "new"}),
    ("write_file", {"path": "link", "content": "fresh\n"}),
    ("write_file", {"path": "dlink/x.txt", "content": "x\n"}),
    ("edit_file", {"path": "link", "old": "absent", "new": "x"}),
    ("list_dir", {"path": "."}),
    ("list_dir", {"path": "dlink"}),
    ("grep", {"pattern": "old|fresh|x", "path": "."}),
    ("read_file", {"path": "link"}),
]


def test_undecodable_names_never_kill_the_bridge_in_process(undecodable: Path) -> None:
    calls = [_call(i, name, args) for i, (name, args) in enumerate(UNDECODABLE_CALLS, 1)]
    answers = serve(undecodable, [*calls, OK_LIST])
    by_id = {a.get("id"): a for a in answers}
    assert len(answers) == len(calls) + 1 and set(by_id) == {*range(1, len(calls) + 1), "after"}
    assert "caf\\xe9" in by_id[1]["result"]["content"][0]["text"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process test")
def test_undecodable_names_never_kill_the_bridge_process(undecodable: Path, tmp_path: Path) -> None:
    """The real `python -m harnesscheck.bridge --spec`: it exited 1 on the first edit_file."""
    spec = BridgeSpec(
        scope=ToolScope(root=undecodable, read_only=False), run_dir=tmp_path / "run", trace_path=tmp_path / "run" / "bridge-trace.jsonl", session_id="s1"
    )
    spec_path = write_spec(spec, tmp_path / "run" / "bridge-spec.json")
    calls = [_call(i, name, args) for i, (name, args) in enumerate(UNDECODABLE_CALLS, 1)]
    stdin = b"".join(_line(m) for m in [INIT, INITIALIZED, *calls, OK_LIST])
    proc = subprocess.run(
        bridge_argv(spec_path), input=stdin, capture_output=True, timeout=BOUND_S * 2, env={**bridge_env(), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    answers = [json.loads(x) for x in proc.stdout.split(b"\n") if x.strip()]
    assert sorted(map(str, (a.get("id") for a in answers))) == sorted(map(str, [0, *range(1, len(calls) + 1), "after"]))
