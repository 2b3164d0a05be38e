"""`harnesscheck acp serve`: the agent side of ACP v1, driven as a subprocess by a raw client.

Each test judges an effect: the bytes on stdout, the file on disk, the process table, the
environment the backend's child recorded. doc/SPEC-acp-serve.md is the contract.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from acp_client import AcpClient
from proc_support import alive, survivors

from harnesscheck.testing.fakes import install_fake_cli, load_fixture

TESTS = str(Path(__file__).resolve().parents[1])
SCRIPTED = "acp_fakes:spec"
CANARY = "canary-acp-serve-7f3d91"


def serve(tmp_path: Path, backend: str, *extra: str, env: dict | None = None) -> AcpClient:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8", "PYTHONPATH": TESTS}
    base.update(env or {})
    argv = [sys.executable, "-m", "harnesscheck.apps.cli", "acp", "serve", "--backend", backend, *extra]
    return AcpClient.spawn(argv, env=base, cwd=str(tmp_path))


def open_session(client: AcpClient, root: Path) -> str:
    init = client.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    assert init["result"]["protocolVersion"] == 1
    answer = client.request("session/new", {"cwd": str(root), "mcpServers": []})
    return answer["result"]["sessionId"]


def prompt(client: AcpClient, sid: str, text: str, **kwargs) -> dict:
    return client.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}, **kwargs)


def script(*turns: dict, repeat_last: bool = False) -> str:
    return json.dumps({"turns": list(turns), "repeat_last": repeat_last})


def assert_only_jsonrpc(client: AcpClient) -> None:
    for line in client.lines:
        msg = json.loads(line)
        assert msg.get("jsonrpc") == "2.0", line


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "work"
    r.mkdir()
    (r / "notes.txt").write_text("original\n", encoding="utf-8")
    return r


# ---------------------------------------------------------------------------------------
# the wire: initialize, session/new, prompt, stream, stopReason


def test_initialize_new_prompt_streams_text_and_ends_turn(tmp_path, root):
    client = serve(tmp_path, "fake")
    try:
        init = client.request("initialize", {"protocolVersion": 65535, "clientCapabilities": {"fs": {"readTextFile": True}}})
        result = init["result"]
        assert result["protocolVersion"] == 1  # never the client's unsupported version echoed
        assert result["authMethods"] == []
        caps = result["agentCapabilities"]
        assert caps["loadSession"] is False and caps["mcpCapabilities"] == {"http": False, "sse": False, "acp": False}
        assert not any(caps["promptCapabilities"].values())
        new = client.request("session/new", {"cwd": str(root), "mcpServers": []})["result"]
        assert new["modes"]["currentModeId"] == "ask"
        assert {m["id"] for m in new["modes"]["availableModes"]} == {"ask", "read-only"}
        other = client.request("session/new", {"cwd": str(root), "mcpServers": []})["result"]["sessionId"]
        assert other != new["sessionId"]
        answer = prompt(client, new["sessionId"], "say ok")
        assert answer["result"]["stopReason"] == "end_turn"
        assert answer["result"]["usage"]["inputTokens"] == 10 and answer["result"]["usage"]["outputTokens"] == 5
        chunks = [u for u in client.updates(new["sessionId"]) if u["sessionUpdate"] == "agent_message_chunk"]
        assert "".join(c["content"]["text"] for c in chunks) == "ok"
        link = {"type": "resource_link", "uri": f"file://{root}/notes.txt", "name": "notes.txt"}  # baseline content
        assert client.request("session/prompt", {"sessionId": other, "prompt": [link]})["result"]["stopReason"] == "end_turn"
        assert client.finish() == 0
        assert_only_jsonrpc(client)
        assert not any(m.get("method", "").startswith(("fs/", "terminal/")) for m in client.messages)
    finally:
        if client.proc.poll() is None:
            client.proc.kill()


def test_bad_input_is_answered_and_the_server_goes_on(tmp_path, root):
    client = serve(tmp_path, "fake")
    try:
        client.send_raw(b"{this is not json\n")
        parse = client.next_message()
        assert parse["id"] is None and parse["error"]["code"] == -32700
        client.send_raw(b"\xff\xfe\n")
        assert client.next_message()["error"]["code"] == -32700
        client.send_raw(b'{"id": 7, "method": "initialize"}\n')  # no "jsonrpc": "2.0"
        bad = client.next_message()
        assert bad["id"] == 7 and bad["error"]["code"] == -32600
        rel = client.request("session/new", {"cwd": "relative/dir", "mcpServers": []})
        assert rel["error"]["code"] == -32602 and "'relative/dir'" in rel["error"]["message"]
        nul = client.request("session/new", {"cwd": "/tmp/a\u0000b", "mcpServers": []})
        assert nul["error"]["code"] == -32602
        missing = client.request("session/new", {"mcpServers": []})
        assert missing["error"]["code"] == -32602 and "cwd" in missing["error"]["message"]
        assert client.request("session/load", {"sessionId": "x", "cwd": str(root), "mcpServers": []})["error"]["code"] == -32601
        assert client.request("_vendor/thing", {})["error"]["code"] == -32601  # a custom request gets an answer
        client.notify("_vendor/note", {})  # an unknown notification is never answered
        sid = open_session(client, root)  # still serving after all of it
        assert client.request("session/set_mode", {"sessionId": sid, "modeId": "yolo"})["error"]["code"] == -32602
        assert client.request("session/set_mode", {"sessionId": sid, "modeId": "read-only"})["result"] == {}
        image = client.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "image", "data": "AA==", "mimeType": "image/png"}]})
        assert image["error"]["code"] == -32602
        assert client.finish() == 0
        assert_only_jsonrpc(client)
        assert len([m for m in client.messages if "error" in m]) == 10  # exactly one answer each, none for notifications
    finally:
        if client.proc.poll() is None:
            client.proc.kill()


def test_client_mcp_servers_are_not_started(tmp_path, root):
    marker = tmp_path / "mcp-started"
    client = serve(tmp_path, "fake")
    try:
        client.request("initialize", {"protocolVersion": 1})
        server = {"name": "planted", "command": "/bin/sh", "args": ["-c", f"touch {marker}"], "env": []}
        sid = client.request("session/new", {"cwd": str(root), "mcpServers": [server]})["result"]["sessionId"]
        assert prompt(client, sid, "hi")["result"]["stopReason"] == "end_turn"
        assert client.finish() == 0
        assert not marker.exists()
        assert "not started" in client.stderr_text()
    finally:
        if client.proc.poll() is None:
            client.proc.kill()


# ---------------------------------------------------------------------------------------
# permission: asked before every write; anything but allow-once leaves the file unchanged


WRITE = script({"text": "writing", "tool_calls": [["write_file", {"path": "notes.txt", "content": "changed\n"}]]}, {"text": "done"})


@pytest.mark.parametrize(
    "answer",
    [
        {"outcome": {"outcome": "selected", "optionId": "reject-once"}},
        {"outcome": {"outcome": "cancelled"}},
        {"outcome": {"outcome": "selected", "optionId": "_x-unknown"}},
        {"outcome": "nonsense"},
    ],
)
def test_a_write_asks_first_and_anything_but_allow_leaves_the_file(tmp_path, root, answer):
    client = serve(tmp_path, SCRIPTED)
    asked: list[dict] = []

    def on_permission(req: dict) -> dict:
        asked.append(req)
        assert (root / "notes.txt").read_text() == "original\n"  # asked BEFORE the write
        return answer

    try:
        sid = open_session(client, root)
        result = prompt(client, sid, WRITE, on_permission=on_permission)
        assert result["result"]["stopReason"] == "end_turn"
        assert (root / "notes.txt").read_text() == "original\n"
        assert len(asked) == 1
        params = asked[0]["params"]
        assert params["toolCall"]["kind"] == "edit" and params["toolCall"]["rawInput"]["path"] == "notes.txt"
        assert {o["kind"] for o in params["options"]} == {"allow_once", "reject_once"}
        ended = [u for u in client.updates(sid) if u["sessionUpdate"] == "tool_call_update"]
        assert [u["status"] for u in ended] == ["failed"]
        assert "not_approved" in ended[0]["content"][0]["content"]["text"]  # the model read a refusal
        assert client.finish() == 0
    finally:
        if client.proc.poll() is None:
            client.proc.kill()


def test_allow_once_runs_the_write_and_read_only_never_asks(tmp_path, root):
    client = serve(tmp_path, SCRIPTED)
    asked: list[str] = []

    def allow(req: dict) -> dict:
        asked.append((root / "notes.txt").read_text())
        return {"outcome": {"outcome": "selected", "optionId": "allow-once"}}

    try:
        sid = open_session(client, root)
        assert prompt(client, sid, WRITE, on_permission=allow)["result"]["stopReason"] == "end_turn"
        assert asked == ["original\n"] and (root / "notes.txt").read_text() == "changed\n"
        updates = client.updates(sid)
        starts = [u for u in updates if u["sessionUpdate"] == "tool_call"]
        assert starts and starts[0]["title"] == "write_file notes.txt" and starts[0]["status"] == "pending"
        assert [u["status"] for u in updates if u["sessionUpdate"] == "tool_call_update"] == ["completed"]
        # read-only: the write is refused without asking, the file stays
        (root / "notes.txt").write_text("original\n")
        assert client.request("session/set_mode", {"sessionId": sid, "modeId": "read-only"})["result"] == {}
        assert prompt(client, sid, WRITE, on_permission=allow)["result"]["stopReason"] == "end_turn"
        assert len(asked) == 1 and (root / "notes.txt").read_text() == "original\n"
        last = [u for u in client.updates(sid) if u["sessionUpdate"] == "tool_call_update"][-1]
        assert last["status"] == "failed" and "read_only" in last["content"][0]["content"]["text"]  # shown, refused
        # reads never ask
        read = script({"tool_calls": [["read_file", {"path": "notes.txt"}]]}, {"text": "read"})
        assert prompt(client, sid, read, on_permission=allow)["result"]["stopReason"] == "end_turn"
        assert len(asked) == 1
        assert client.finish() == 0
    finally:
        if client.proc.poll() is None:
            client.proc.kill()


def test_cancel_while_permission_is_pending_answers_cancelled_and_writes_nothing(tmp_path, root):
    client = serve(tmp_path, SCRIPTED)
    try:
        sid = open_session(client, root)
        msg_id = client.start("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": WRITE}]})

        def cancel_instead(req: dict) -> None:
            client.notify("session/cancel", {"sessionId": sid})
            return None  # never answered: the cancel must release it

        answer = client.wait_for(msg_id, on_permission=cancel_instead)
        assert answer["result"]["stopReason"] == "cancelled"
        assert (root / "notes.txt").read_text() == "original\n"
        after = client.messages.index(answer)
        assert not [m for m in client.messages[after + 1 :] if m.get("method") == "session/update"]
        assert prompt(client, sid, "again")["result"]["stopReason"] == "end_turn"  # the session goes on
        assert client.finish() == 0
    finally:
        if client.proc.poll() is None:
            client.proc.kill()


# ---------------------------------------------------------------------------------------
# stop reasons and typed errors


def test_stop_reasons_and_typed_errors(tmp_path, root):
    client = serve(tmp_path, SCRIPTED, env={"ANTHROPIC_API_KEY": CANARY})
    try:
        sid = open_session(client, root)
        loop = script({"tool_calls": [["list_dir", {"path": "."}]]}, repeat_last=True)
        assert prompt(client, sid, loop)["result"]["stopReason"] == "max_turn_requests"
        auth = prompt(client, sid, script({"error": "auth", "error_message": f"401 bad key {CANARY}"}))
        assert auth["error"]["code"] == -32000 and auth["error"]["message"] == "Authentication required"
        assert auth["error"]["data"] == {"errorClass": "auth", "retryable": False, "status": "blocked"}
        limited = prompt(client, sid, script({"error": "rate_limit", "error_message": f"429 slow down {CANARY}"}))
        assert limited["error"]["code"] == -32603
        assert limited["error"]["data"]["errorClass"] == "rate_limit" and limited["error"]["data"]["retryable"] is True
        assert client.finish() == 0
        assert CANARY not in b"".join(client.lines).decode() and CANARY not in client.stderr_text()
    finally:
        if client.proc.poll() is None:
            client.proc.kill()


# ---------------------------------------------------------------------------------------
# process trees: cancel, stdin EOF, SIGTERM; the backend child's environment


def _hanging_claude(tmp_path: Path):
    init = load_fixture("claude", "success")["steps"][0]
    scenario = {"version": "2.1.332 (Claude Code)", "stdin": "read", "steps": [init, {"spawn": "sleep 1000", "setsid": True}, {"hang": True}]}
    return install_fake_cli("claude", scenario, tmp_path / "bin")


def _tree_once_running(fake, client: AcpClient, timeout: float = 60.0) -> list[int]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        recs = fake.records()
        if recs and recs[-1]["grandchildren"]:
            return [recs[-1]["pid"]] + [g["pid"] for g in recs[-1]["grandchildren"]]
        assert client.proc.poll() is None, client.stderr_text()
        time.sleep(0.05)
    pytest.skip("the fake CLI did not start its grandchild within 60 s (machine under load)")


def test_cancel_mid_step_ends_the_tree_and_answers_cancelled(tmp_path, root):
    fake = _hanging_claude(tmp_path)
    client = serve(tmp_path, "claude-code", "--cli", str(fake.path), "--timeout", "600")
    try:
        sid = open_session(client, root)
        msg_id = client.start("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "hang"}]})
        pids = _tree_once_running(fake, client)
        assert all(alive(p) for p in pids)
        client.notify("session/cancel", {"sessionId": sid})
        answer = client.wait_for(msg_id, timeout=60)
        assert answer["result"]["stopReason"] == "cancelled"
        assert survivors(pids) == []
        assert client.finish() == 0
    finally:
        if client.proc.poll() is None:
            client.proc.kill()


@pytest.mark.parametrize("ending", ["stdin_eof", "sigterm"])
def test_stdin_eof_or_sigterm_exits_0_and_nothing_survives(tmp_path, root, ending):
    fake = _hanging_claude(tmp_path)
    client = serve(tmp_path, "claude-code", "--cli", str(fake.path), "--timeout", "600")
    try:
        sid = open_session(client, root)
        client.start("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "hang"}]})
        pids = _tree_once_running(fake, client)
        if ending == "stdin_eof":
            client.close_stdin()
        else:
            client.proc.send_signal(signal.SIGTERM)
        assert client.proc.wait(60) == 0
        assert survivors(pids + [client.proc.pid]) == []
    finally:
        if client.proc.poll() is None:
            client.proc.kill()


def test_no_canary_of_the_servers_env_reaches_the_backend_child(tmp_path, root):
    fake = install_fake_cli("claude", "success", tmp_path / "bin")
    canaries = {
        "ANTHROPIC_API_KEY": f"sk-ant-{CANARY}",
        "OPENAI_API_KEY": f"sk-{CANARY}",
        "GITHUB_TOKEN": f"ghp_{CANARY}",
        "HC_SECRET_TOKEN": CANARY,
        "NODE_OPTIONS": f"--require /{CANARY}.js",
    }
    client = serve(tmp_path, "claude-code", "--cli", str(fake.path), env=canaries)
    try:
        sid = open_session(client, root)
        answer = prompt(client, sid, "Summarize README.md")
        assert answer["result"]["stopReason"] == "end_turn", answer
        assert client.finish() == 0
        rec = fake.last()
        assert rec["env"], "the fake recorded no environment"
        assert [k for k, v in rec["env"].items() if CANARY in v] == []
        assert CANARY not in " ".join(rec["argv"])
        assert_only_jsonrpc(client)
        assert CANARY not in b"".join(client.lines).decode() and CANARY not in client.stderr_text()
    finally:
        if client.proc.poll() is None:
            client.proc.kill()


@pytest.mark.parametrize("answer", ["allow-once", "reject-once"])
def test_a_harness_backend_asks_before_a_write_through_its_bridge(tmp_path, root, answer):
    """The bridge runs in another process: its write is asked of the client through the host
    link before it runs; only allow-once writes the file. Each call is shown once, as it happens."""
    success = load_fixture("claude", "success")
    calls = {
        "mcp_calls": [
            {"name": "read_file", "arguments": {"path": "notes.txt"}},
            {"name": "write_file", "arguments": {"path": "notes.txt", "content": "changed\n"}},
        ]
    }
    scenario = {**success, "steps": [success["steps"][0], calls, *success["steps"][1:]]}
    fake = install_fake_cli("claude", scenario, tmp_path / "bin")
    client = serve(tmp_path, "claude-code", "--cli", str(fake.path))
    try:
        client.request("initialize", {"protocolVersion": 1})
        new = client.request("session/new", {"cwd": str(root), "mcpServers": []})["result"]
        assert "asks the client" in new["modes"]["availableModes"][0]["description"]
        sid = new["sessionId"]
        asked: list[str] = []

        def on_permission(req: dict) -> dict:
            asked.append((root / "notes.txt").read_text())
            return {"outcome": {"outcome": "selected", "optionId": answer}}

        assert prompt(client, sid, "hi", on_permission=on_permission)["result"]["stopReason"] == "end_turn"
        assert client.finish() == 0
        assert asked == ["original\n"], "asked once, before the write"
        assert (root / "notes.txt").read_text() == ("changed\n" if answer == "allow-once" else "original\n")
        updates = client.updates(sid)
        titles = [u["title"] for u in updates if u["sessionUpdate"] == "tool_call"]
        assert titles == ["read_file notes.txt", "write_file notes.txt"], titles
        ends = [u["status"] for u in updates if u["sessionUpdate"] == "tool_call_update" and u.get("status") != "pending"]
        assert ends == ["completed", "completed" if answer == "allow-once" else "failed"], ends
    finally:
        if client.proc.poll() is None:
            client.proc.kill()


# ---------------------------------------------------------------------------------------
# an api backend at loopback: the same gate, the refusal reaches the model


def test_api_backend_asks_before_a_write_and_the_model_reads_the_refusal(tmp_path, root):
    from harnesscheck.loopback.scenario import Scenario, ToolCall, Turn
    from harnesscheck.loopback.server import ScriptedModelServer

    key = f"sk-ant-loopback-{CANARY}"
    scenario = Scenario("acp-write", (Turn(tool_calls=(ToolCall("write_file", {"path": "notes.txt", "content": "changed\n"}),)), Turn(text="gave up")))
    with ScriptedModelServer(scenario, expected_key=key) as srv:
        client = serve(
            tmp_path, "api/anthropic_messages", env={"ANTHROPIC_API_KEY": key, "ANTHROPIC_BASE_URL": srv.base_url, "HARNESS_BACKEND_MODEL": "claude-haiku-4-5"}
        )
        try:
            sid = open_session(client, root)
            asked: list[str] = []

            def reject(req: dict) -> dict:
                asked.append((root / "notes.txt").read_text())
                return {"outcome": {"outcome": "selected", "optionId": "reject-once"}}

            answer = prompt(client, sid, "change the notes", on_permission=reject)
            assert answer["result"]["stopReason"] == "end_turn", answer
            assert asked == ["original\n"] and (root / "notes.txt").read_text() == "original\n"
            turns = [r for r in srv.requests if r.is_turn]
            assert len(turns) == 2
            assert "policy_denied" in json.dumps(turns[1].tool_results)  # the model read the refusal
            assert "gave up" in "".join(u["content"]["text"] for u in client.updates(sid) if u["sessionUpdate"] == "agent_message_chunk")
            assert client.finish() == 0
            assert key not in b"".join(client.lines).decode() and key not in client.stderr_text()
        finally:
            if client.proc.poll() is None:
                client.proc.kill()


def test_api_backend_401_is_authentication_required(tmp_path, root):
    from harnesscheck.loopback.scenario import Scenario, status_turn
    from harnesscheck.loopback.server import ScriptedModelServer

    with ScriptedModelServer(Scenario("auth", (status_turn(401),))) as srv:
        client = serve(
            tmp_path,
            "api/anthropic_messages",
            env={"ANTHROPIC_API_KEY": "sk-ant-wrong", "ANTHROPIC_BASE_URL": srv.base_url, "HARNESS_BACKEND_MODEL": "claude-haiku-4-5"},
        )
        try:
            sid = open_session(client, root)
            answer = prompt(client, sid, "hi")
            assert answer["error"]["code"] == -32000 and answer["error"]["data"]["errorClass"] == "auth"
            assert client.finish() == 0
        finally:
            if client.proc.poll() is None:
                client.proc.kill()


# ---------------------------------------------------------------------------------------
# in process: what a subprocess would not show better


class _Pipe:
    """An AcpServer on pipes, served in a thread; `send` lines, `read` answers."""

    def __init__(self, transport_spec: str = "fake", **kwargs):
        from harnesscheck.acpserve.agent import AcpServer
        from harnesscheck.acpserve.wire import Writer
        from harnesscheck.backends.registry import build_transport, get_spec
        from harnesscheck.core.config import Settings

        spec = get_spec(transport_spec)
        self.in_r, self.in_w = os.pipe()
        self.out_r, self.out_w = os.pipe()
        self.server = AcpServer(build_transport(spec, Settings()), spec, Writer(self.out_w), **kwargs)
        import threading

        self.thread = threading.Thread(target=self.server.serve, args=(self.in_r,), daemon=True)
        self.thread.start()
        self.reader = os.fdopen(self.out_r, "rb")

    def send(self, data: bytes) -> None:
        os.write(self.in_w, data)

    def read(self) -> dict:
        return json.loads(self.reader.readline())

    def close(self) -> None:
        os.close(self.in_w)
        self.thread.join(30)
        assert not self.thread.is_alive()
        for fd in (self.in_r, self.out_w):
            os.close(fd)
        self.reader.close()


def test_an_oversize_line_is_answered_and_the_next_line_served():
    pipe = _Pipe(max_line_bytes=1000)
    try:
        pipe.send(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"x":"' + b"a" * 5000 + b'"}}\n')
        assert pipe.read() == {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Invalid Request: a line longer than 1000 bytes was dropped"}}
        pipe.send(b'{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":1}}\r\n')
        assert pipe.read()["result"]["protocolVersion"] == 1
    finally:
        pipe.close()


def test_a_second_prompt_in_a_running_session_is_refused(root):
    from harnesscheck.backends.fake import FakeScript, FakeTurn

    pipe = _Pipe()
    try:
        pipe.server.transport.script = FakeScript([FakeTurn(text="slow", delay_s=60)])
        pipe.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": str(root), "mcpServers": []}}).encode() + b"\n")
        sid = pipe.read()["result"]["sessionId"]
        for msg_id in (2, 3):
            pipe.send(
                json.dumps(
                    {"jsonrpc": "2.0", "id": msg_id, "method": "session/prompt", "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]}}
                ).encode()
                + b"\n"
            )
        second = pipe.read()
        assert second["id"] == 3 and second["error"]["code"] == -32600
        pipe.send(json.dumps({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}).encode() + b"\n")
        first = pipe.read()
        assert first == {"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "cancelled"}}
    finally:
        pipe.close()


def test_root_fences_the_session_cwd(tmp_path, root):
    pipe = _Pipe(fence=root.resolve())
    try:
        pipe.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": str(tmp_path), "mcpServers": []}}).encode() + b"\n")
        assert pipe.read()["error"]["code"] == -32602
        pipe.send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": str(root), "mcpServers": []}}).encode() + b"\n")
        assert "sessionId" in pipe.read()["result"]
    finally:
        pipe.close()


def test_a_backend_that_cannot_be_built_is_reported_before_serving(tmp_path):
    (tmp_path / ".env").write_text(f"HARNESS_BACKEND=fake\nHARNESS_BACKEND_CLI={tmp_path}/planted\n")  # never read
    import subprocess

    argv = [sys.executable, "-m", "harnesscheck.apps.cli", "acp", "serve"]

    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
    proc = subprocess.run(argv, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == b""  # the planted .env chose nothing
    assert b"no backend selected" in proc.stderr
    proc = subprocess.run(argv + ["--backend", "api/anthropic_messages"], env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
    assert proc.returncode == 3 and proc.stdout == b"" and b"ANTHROPIC_API_KEY" in proc.stderr


def test_read_lines_frames_any_chunking_and_bounds_each_line():
    import threading

    from harnesscheck.acpserve.wire import OVERSIZE, read_lines

    data = b'{"a":1}\r\n\n' + b"x" * 50 + b"\n" + b"y" * 10 + b"\n" + b"tail-without-newline"
    expected = [b'{"a":1}', b"", OVERSIZE, b"y" * 10, b"tail-without-newline"]
    for step in (1, 3, 7, len(data)):
        r, w = os.pipe()

        def feed(w=w, step=step):
            for i in range(0, len(data), step):
                os.write(w, data[i : i + step])
            os.close(w)

        writer = threading.Thread(target=feed)
        writer.start()
        got = list(read_lines(r, max_line_bytes=20))
        writer.join()
        os.close(r)
        assert got == expected, step
    r, w = os.pipe()
    stop_r, stop_w = os.pipe()
    os.write(stop_w, b"x")  # a stop ends the reading even with the input still open
    assert list(read_lines(r, stop_fd=stop_r)) == []
    for fd in (r, w, stop_r, stop_w):
        os.close(fd)


def test_the_sdks_own_client_drives_the_server(tmp_path, root):
    """Interop: agent-client-protocol's typed client (its own framing and router) runs a prompt
    whose write it approves; every message we send must parse as its models expect."""
    import asyncio

    from acp import PROTOCOL_VERSION, RequestPermissionResponse, spawn_agent_process, text_block
    from acp.schema import AllowedOutcome

    seen: dict[str, list] = {"updates": [], "asked": []}

    class Editor:
        async def request_permission(self, session_id, tool_call, options, **kwargs):
            seen["asked"].append((tool_call.title, [o.option_id for o in options], (root / "notes.txt").read_text()))
            allow = next(o.option_id for o in options if o.kind == "allow_once")
            return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=allow))

        async def session_update(self, session_id, update, **kwargs):
            seen["updates"].append(update.session_update)

        def on_connect(self, conn):
            pass

    async def drive() -> str:
        env = {"HOME": str(tmp_path), "PYTHONPATH": TESTS, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        async with spawn_agent_process(
            Editor(), sys.executable, "-m", "harnesscheck.apps.cli", "acp", "serve", "--backend", SCRIPTED, env=env, cwd=str(tmp_path)
        ) as (conn, _proc):
            init = await conn.initialize(protocol_version=PROTOCOL_VERSION)
            assert init.protocol_version == 1
            new = await asyncio.wait_for(conn.new_session(cwd=str(root), mcp_servers=[]), 60)
            result = await asyncio.wait_for(conn.prompt(session_id=new.session_id, prompt=[text_block(WRITE)]), 60)
            return result.stop_reason

    assert asyncio.run(drive()) == "end_turn"
    assert seen["asked"] == [("write_file notes.txt", ["allow-once", "reject-once"], "original\n")]
    assert (root / "notes.txt").read_text() == "changed\n"
    assert {"agent_message_chunk", "tool_call", "tool_call_update"} <= set(seen["updates"])
