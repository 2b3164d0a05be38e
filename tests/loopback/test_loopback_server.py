"""The scripted model servers: wire formats the vendor SDKs accept, scripting, recording
without credential values, 127.0.0.1 only."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from harnesscheck.loopback import wire
from harnesscheck.loopback.pytest_fixtures import loopback_server  # noqa: F401 - fixture
from harnesscheck.loopback.scenario import Scenario, ServedUsage, ToolCall, Turn, named_scenario, status_turn
from harnesscheck.loopback.server import ScriptedModelServer

KEY = "sk-loopback-test-key-123456"


def post(url: str, body: dict, headers: dict | None = None, timeout: float = 10) -> tuple[int, dict, bytes]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    req.add_header("content-type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def sse_events(raw: bytes) -> list[dict]:
    out = []
    for block in raw.decode().split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data: ") and line[6:] != "[DONE]":
                out.append(json.loads(line[6:]))
    return out


def test_binds_loopback_only(loopback_server):
    srv = loopback_server("success")
    assert srv.base_url.startswith("http://127.0.0.1:")
    assert srv._httpd.server_address[0] == "127.0.0.1"


def test_anthropic_sdk_reads_text_tool_use_and_usage(loopback_server):
    anthropic = pytest.importorskip("anthropic")
    usage = ServedUsage(input=101, output=23, cache_read=5, cache_write=3)
    scen = Scenario(
        "t",
        (
            Turn(text="reading", tool_calls=(ToolCall("read_file", {"path": "a.txt"}),), usage=usage),
            Turn(text="done", usage=usage),
        ),
        served_model="served-x",
    )
    srv = loopback_server(scen, expected_key=KEY)
    client = anthropic.Anthropic(base_url=srv.base_url, api_key=KEY, max_retries=0)
    tools = [{"name": "mcp__bridge__read_file", "description": "r", "input_schema": {"type": "object"}}]
    with client.messages.stream(model="req-model", max_tokens=50, messages=[{"role": "user", "content": "hi"}], tools=tools) as s:
        msg = s.get_final_message()
    assert msg.model == "served-x"
    assert [b.type for b in msg.content] == ["text", "tool_use"]
    assert msg.content[1].name == "mcp__bridge__read_file" and msg.content[1].input == {"path": "a.txt"}
    assert msg.stop_reason == "tool_use"
    assert (msg.usage.input_tokens, msg.usage.output_tokens) == (101, 23)
    assert (msg.usage.cache_read_input_tokens, msg.usage.cache_creation_input_tokens) == (5, 3)
    # second turn: the history holds one assistant turn
    follow = client.messages.create(
        model="req-model",
        max_tokens=50,
        tools=tools,
        messages=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in msg.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": msg.content[1].id, "content": "file text", "is_error": True}]},
        ],
    )
    assert follow.content[0].text == "done"
    reqs = srv.turn_requests()
    assert [r.turn_index for r in reqs] == [0, 1]
    assert reqs[0].tools == ["mcp__bridge__read_file"]
    assert reqs[1].tool_results == [{"id": msg.content[1].id, "is_error": True, "text": "file text"}]
    assert all(r.credentials_present and r.credential_matches for r in reqs)
    assert srv.served_usage_total() == ServedUsage(202, 46, 10, 6, 0)


def test_openai_sdk_reads_responses_stream_and_namespace_calls(loopback_server):
    openai = pytest.importorskip("openai")
    scen = Scenario("t", (Turn(text="hi there", tool_calls=(ToolCall("read_file", {"path": "b"}),), usage=ServedUsage(50, 9, cache_read=20)),))
    srv = loopback_server(scen)
    client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key=KEY, max_retries=0)
    tools = [
        {"type": "namespace", "name": "mcp__bridge", "description": "", "tools": [{"type": "function", "name": "read_file", "parameters": {"type": "object"}}]}
    ]  # noqa: E501
    with client.responses.stream(model="gpt-x", input="hi", extra_body={"tools": tools}) as s:
        final = s.get_final_response()
    assert final.model == "gpt-x"
    kinds = [item.type for item in final.output]
    assert kinds == ["message", "function_call"]
    call = final.output[1]
    assert call.name == "read_file" and json.loads(call.arguments) == {"path": "b"}
    assert getattr(call, "namespace", None) == "mcp__bridge" or "namespace" in (call.model_extra or {})
    assert final.usage.input_tokens == 70 and final.usage.input_tokens_details.cached_tokens == 20
    rec = srv.turn_requests()[0]
    assert rec.tools == ["mcp__bridge/read_file"]
    assert rec.served_tool_calls == ["read_file"]


def test_openai_sdk_reads_chat_completions_stream(loopback_server):
    openai = pytest.importorskip("openai")
    scen = Scenario("t", (Turn(tool_calls=(ToolCall("read_file", {"path": "c"}),), usage=ServedUsage(12, 4)), Turn(text="ok")))
    srv = loopback_server(scen)
    client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key=KEY, max_retries=0)
    tools = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]
    stream = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "x"}], tools=tools, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    calls = [tc for c in chunks for ch in c.choices for tc in (ch.delta.tool_calls or [])]
    assert calls[0].function.name == "read_file"
    assert chunks[-1].usage.prompt_tokens == 12
    non_stream = client.chat.completions.create(
        model="m",
        tools=tools,
        messages=[
            {"role": "user", "content": "x"},
            {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "data"},
        ],
    )
    assert non_stream.choices[0].message.content == "ok"
    assert srv.turn_requests()[1].tool_results == [{"id": "c1", "is_error": None, "text": "data"}]


@pytest.mark.parametrize("status,etype,retry_after", [(401, "authentication_error", None), (429, "rate_limit_error", "7"), (529, "overloaded_error", None)])
def test_status_turns_carry_body_and_headers(loopback_server, status, etype, retry_after):
    srv = loopback_server(Scenario("s", (status_turn(status, retry_after=7 if retry_after else None),), repeat_last=True))
    code, headers, raw = post(srv.base_url + "/v1/messages?beta=true", {"model": "m", "messages": [], "stream": True})
    assert code == status
    assert json.loads(raw)["error"]["type"] == etype
    assert {k.lower(): v for k, v in headers.items()}.get("retry-after") == retry_after
    code2, _, _ = post(srv.base_url + "/v1/messages", {"model": "m", "messages": []})
    assert code2 == status  # repeat_last: retries get the same answer
    assert [r.status for r in srv.requests] == [status, status]
    assert srv.requests[0].query == "beta=true"


def test_credentials_are_booleans_and_canaries_are_located_never_stored(loopback_server):
    canary = "HC-CANARY-abcdef0123"
    srv = loopback_server("success", expected_key=KEY, watch=[canary])
    post(srv.base_url + "/v1/messages", {"model": "m", "messages": [{"role": "user", "content": "x"}]}, {"x-api-key": "wrong-key-0000", "x-extra": canary})
    post(srv.base_url + "/v1/responses", {"model": "m", "input": f"tell {canary}"}, {"authorization": f"Bearer {KEY}"})
    a, b = srv.requests
    assert a.credentials_present and a.credential_matches is False
    assert a.canary_hits == ["x-extra"]
    assert b.credentials_present and b.credential_matches is True
    assert b.canary_hits == ["body"]
    dumped = json.dumps([r.summary() for r in srv.requests])
    assert KEY not in dumped and "wrong-key-0000" not in dumped and canary not in dumped
    assert "x-api-key" in a.header_names


def test_count_tokens_and_unknown_paths_are_recorded(loopback_server):
    srv = loopback_server("success")
    code, _, raw = post(srv.base_url + "/v1/messages/count_tokens", {"model": "m", "messages": []})
    assert code == 200 and json.loads(raw) == {"input_tokens": 42}
    code, _, _ = post(srv.base_url + "/v1/nope", {})
    assert code == 404
    assert [r.path for r in srv.requests] == ["/v1/messages/count_tokens", "/v1/nope"]
    assert srv.turn_requests() == []


def test_hang_streams_the_start_then_stalls_until_stop():
    """...and notes, on the monotonic clock, when the request came and when the stall began."""
    srv = ScriptedModelServer(named_scenario("timeout_mid_stream")).start()
    assert srv.stalled_at is None and srv.last_request_at is None
    before = time.monotonic()
    got: list[bytes] = []
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    body = json.dumps({"model": "m", "messages": [], "stream": True}).encode()
    sock.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)

    def reader() -> None:
        while True:
            try:
                data = sock.recv(65536)
            except OSError:
                return
            if not data:
                return
            got.append(data)

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    deadline = time.monotonic() + 10
    while b"content_block_delta" not in b"".join(got) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert b"partial" in b"".join(got)
    assert b"message_stop" not in b"".join(got)
    deadline = time.monotonic() + 10
    while srv.stalled_at is None and time.monotonic() < deadline:
        time.sleep(0.01)  # the handler notes the stall right after its last write
    assert srv.last_request_at is not None and before <= srv.last_request_at <= srv.stalled_at <= time.monotonic()
    srv.stop()  # releases the hanging handler; the connection closes
    t.join(timeout=10)
    assert not t.is_alive()
    sock.close()


def test_delay_and_served_model_and_exhausted_script(loopback_server):
    scen = Scenario("d", (Turn(text="late", delay_s=0.2, served_model="other-model"),))
    srv = loopback_server(scen)
    code, _, raw = post(srv.base_url + "/v1/messages", {"model": "asked", "messages": [{"role": "user", "content": "x"}]})
    assert code == 200 and json.loads(raw)["model"] == "other-model"
    # past the end of the script: a closing text, never an error
    code, _, raw = post(
        srv.base_url + "/v1/messages",
        {"model": "asked", "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "late"}, {"role": "user", "content": "y"}]},
    )
    assert code == 200 and "exhausted" in json.loads(raw)["content"][0]["text"]


def test_responses_history_turns_count_model_runs():
    body = {
        "input": [
            {"type": "message", "role": "user", "content": "x"},
            {"type": "reasoning", "summary": []},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "a"}]},
            {"type": "function_call", "name": "read_file", "call_id": "c", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": "data"},
            {"type": "function_call", "name": "read_file", "call_id": "d", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "d", "output": "data"},
        ]
    }
    assert wire.history_turns(wire.RESPONSES, body) == 2


def test_additional_tools_items_count_as_offered():
    body = {
        "input": [
            {
                "type": "additional_tools",
                "role": "developer",
                "tools": [{"type": "namespace", "name": "functions", "tools": [{"type": "custom", "name": "exec"}]}],
            },  # noqa: E501
        ],
        "tools": [{"type": "web_search"}],
    }
    assert wire.offered_tools(wire.RESPONSES, body) == ["web_search", "exec"]
