"""The LLM client over its three api_modes, offline (respx on the SDKs' httpx2 stack).

Streaming text, tool calls accumulated from the stream, usage and served model, every
error class from HTTP status and error bodies, bounded retries with injectable backoff,
abort of an in-flight stream, SSE chunk boundaries (Hypothesis), lazy SDK imports.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import api_wire as W
import httpx
import pytest
import respx
import respx_httpx2  # noqa: F401  (registers the "httpx2" respx mocker)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harnesscheck.backends.llm import (
    LLM,
    Abort,
    Aborted,
    LLMError,
    classify,
    parse_retry_after,
    to_chat_messages,
    to_responses_input,
)
from harnesscheck.core.contracts import ErrorClass, Usage

MODES = list(W.PATHS)
TOOLS = [
    {"name": "read_file", "description": "Read a file.", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}
]
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
def router():
    with respx.mock(using="httpx2", assert_all_mocked=True, assert_all_called=False) as r:
        yield r


def make_llm(mode: str, **kwargs) -> LLM:
    kwargs.setdefault("sleep", lambda s: None)
    return LLM(mode, api_key=W.CANARY_KEY, base_url=W.base_url(mode), model=W.MODELS[mode], **kwargs)


# ---------------------------------------------------------------------------------------
# streaming, tool calls, usage, served model


@pytest.mark.parametrize("mode", MODES)
def test_streams_text_deltas_to_the_callback(router, mode):
    router.post(W.url(mode)).mock(side_effect=W.script(mode, [W.Turn(text="The answer is 42.")]))
    seen: list[str] = []
    reply = make_llm(mode).create(messages=HI, on_text=seen.append)
    assert reply.text == "The answer is 42."
    assert len(seen) > 1 and "".join(seen) == reply.text
    assert reply.tool_calls == []
    assert reply.served_model == W.SERVED[mode]
    assert reply.attempts == 1


@pytest.mark.parametrize("mode", MODES)
def test_accumulates_tool_calls_from_the_stream(router, mode):
    calls = [("call_a", "read_file", {"path": "src/a.py"}), ("call_b", "grep", {"pattern": "def ", "path": "."})]
    router.post(W.url(mode)).mock(side_effect=W.script(mode, [W.Turn(text="Looking.", tool_calls=calls)]))
    reply = make_llm(mode).create(messages=HI, tools=TOOLS)
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == calls
    assert reply.text == "Looking."


@pytest.mark.parametrize("mode", MODES)
def test_invalid_tool_arguments_are_kept_raw_not_guessed(router, mode):
    turn = W.Turn(tool_calls=[("call_x", "read_file", '{"path": "a.py"')])
    router.post(W.url(mode)).mock(side_effect=W.script(mode, [turn]))
    (call,) = make_llm(mode).create(messages=HI, tools=TOOLS).tool_calls
    assert call.arguments is None and call.raw_arguments == '{"path": "a.py"'


@pytest.mark.parametrize("mode", MODES)
def test_usage_is_normalized(router, mode):
    usage = {"input": 100, "output": 20, "cache_read": 30, "cache_write": 7, "reasoning": 5}
    router.post(W.url(mode)).mock(side_effect=W.script(mode, [W.Turn(text="ok", usage=usage)]))
    got = make_llm(mode).create(messages=HI).usage
    expected = {
        # Anthropic reports no separate reasoning count; Responses reports no cache writes.
        "anthropic_messages": Usage(input=100, output=20, cache_read=30, cache_write=7, reasoning=0),
        "chat_completions": Usage(input=100, output=20, cache_read=30, cache_write=7, reasoning=5),
        "responses": Usage(input=100, output=20, cache_read=30, cache_write=0, reasoning=5),
    }[mode]
    assert got == expected


@pytest.mark.parametrize("mode", MODES)
def test_stream_cut_before_the_end_is_a_server_error_not_a_success(router, mode):
    chunks = W.events(mode, W.Turn(text="half an answer"))
    router.post(W.url(mode)).mock(side_effect=lambda req: W.sse_response(chunks[: len(chunks) // 2]))
    with pytest.raises(LLMError) as info:
        make_llm(mode, retries=0).create(messages=HI)
    assert info.value.error_class is ErrorClass.server_error


def test_no_model_is_an_invalid_request_before_any_http(router):
    llm = LLM("anthropic_messages", api_key=W.CANARY_KEY, base_url=W.BASE)
    with pytest.raises(LLMError) as info:
        llm.create(messages=HI)
    assert info.value.error_class is ErrorClass.invalid_request


def test_unknown_api_mode_is_refused():
    with pytest.raises(ValueError, match="anthropic_messages"):
        LLM("completions", api_key="x")


def test_repr_never_shows_the_key():
    assert W.CANARY_KEY not in repr(make_llm("responses"))


# ---------------------------------------------------------------------------------------
# wire conversion of the canonical messages


HISTORY = [
    {"role": "user", "content": "read a.py"},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Reading."},
            {"type": "tool_use", "id": "c1", "name": "read_file", "input": {"path": "a.py"}},
            {"type": "tool_use", "id": "c2", "name": "read_file", "input": {"path": "/etc/passwd"}},
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": "print(1)\n"},
            {"type": "tool_result", "tool_use_id": "c2", "content": "refused: path_outside_scope: /etc/passwd", "is_error": True},
        ],
    },
]


def test_chat_conversion_keeps_tool_calls_and_results_in_order():
    out = to_chat_messages("be brief", HISTORY)
    assert out[0] == {"role": "system", "content": "be brief"}
    assert out[2]["tool_calls"][1]["function"] == {"name": "read_file", "arguments": '{"path":"/etc/passwd"}'}
    assert out[3] == {"role": "tool", "tool_call_id": "c1", "content": "print(1)\n"}
    assert out[4] == {"role": "tool", "tool_call_id": "c2", "content": "refused: path_outside_scope: /etc/passwd"}


def test_responses_conversion_uses_function_call_items():
    out = to_responses_input(HISTORY)
    assert out[1] == {"role": "assistant", "content": "Reading."}
    assert out[2] == {"type": "function_call", "call_id": "c1", "name": "read_file", "arguments": '{"path":"a.py"}'}
    assert out[5] == {"type": "function_call_output", "call_id": "c2", "output": "refused: path_outside_scope: /etc/passwd"}


# ---------------------------------------------------------------------------------------
# error classes


ANTHROPIC_ERR = lambda etype, msg: {"type": "error", "error": {"type": etype, "message": msg}}  # noqa: E731
OPENAI_ERR = lambda code, msg, etype="invalid_request_error": {"error": {"message": msg, "type": etype, "code": code}}  # noqa: E731

ERROR_CASES = [
    # (status, anthropic body, openai body, headers, expected class)
    (401, ANTHROPIC_ERR("authentication_error", "invalid x-api-key"), OPENAI_ERR("invalid_api_key", "Incorrect API key provided"), {}, ErrorClass.auth),
    (403, ANTHROPIC_ERR("permission_error", "not allowed"), OPENAI_ERR(None, "Project does not have access", "permission_error"), {}, ErrorClass.auth),
    (
        429,
        ANTHROPIC_ERR("rate_limit_error", "slow down"),
        OPENAI_ERR("rate_limit_exceeded", "Rate limit reached", "requests"),
        {"retry-after": "17"},
        ErrorClass.rate_limit,
    ),
    (
        429,
        ANTHROPIC_ERR("rate_limit_error", "usage limit reached for your plan"),
        OPENAI_ERR("insufficient_quota", "You exceeded your current quota", "insufficient_quota"),
        {},
        ErrorClass.quota,
    ),
    (
        400,
        ANTHROPIC_ERR("invalid_request_error", "Your credit balance is too low to access the Anthropic API."),
        OPENAI_ERR("billing_hard_limit_reached", "Billing hard limit has been reached"),
        {},
        ErrorClass.quota,
    ),
    (
        400,
        ANTHROPIC_ERR("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"),
        OPENAI_ERR("context_length_exceeded", "This model's maximum context length is 128000 tokens"),
        {},
        ErrorClass.context_overflow,
    ),
    (
        413,
        ANTHROPIC_ERR("request_too_large", "Request exceeds the maximum allowed number of bytes"),
        OPENAI_ERR(None, "request too large"),
        {},
        ErrorClass.context_overflow,
    ),
    (
        404,
        ANTHROPIC_ERR("not_found_error", "model: claude-nope"),
        OPENAI_ERR("model_not_found", "The model `gpt-nope` does not exist"),
        {},
        ErrorClass.model_unavailable,
    ),
    (
        400,
        ANTHROPIC_ERR("invalid_request_error", "max_tokens: field required"),
        OPENAI_ERR(None, "Invalid value for 'max_tokens'"),
        {},
        ErrorClass.invalid_request,
    ),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("status,a_body,o_body,headers,expected", ERROR_CASES)
def test_http_errors_map_to_error_classes_and_are_not_retried(router, mode, status, a_body, o_body, headers, expected):
    body = a_body if mode == "anthropic_messages" else o_body
    route = router.post(W.url(mode)).mock(return_value=W.error_response(status, body, headers))
    slept: list[float] = []
    with pytest.raises(LLMError) as info:
        make_llm(mode, sleep=slept.append).create(messages=HI)
    err = info.value
    assert err.error_class is expected
    assert err.status_code == status
    assert route.call_count == 1, "a non-retryable error must be sent exactly once"
    assert slept == []
    if expected is ErrorClass.rate_limit:
        assert err.retry_after_s == 17.0
    assert W.CANARY_KEY not in err.message


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "status,expected",
    [(529, ErrorClass.overloaded), (503, ErrorClass.overloaded), (500, ErrorClass.server_error), (502, ErrorClass.server_error)],
)
def test_overloaded_and_5xx_are_retried_a_bounded_number_of_times(router, mode, status, expected):
    body = ANTHROPIC_ERR("overloaded_error", "Overloaded") if status == 529 else {"error": {"message": "upstream failed", "type": "server_error"}}
    if status != 529:
        body = {"error": {"message": "upstream failed", "type": "api_error" if mode == "anthropic_messages" else "server_error"}}
    route = router.post(W.url(mode)).mock(return_value=W.error_response(status, body))
    slept: list[float] = []
    with pytest.raises(LLMError) as info:
        make_llm(mode, sleep=slept.append, retries=3, backoff_s=0.5).create(messages=HI)
    assert info.value.error_class is expected
    assert route.call_count == 4  # the first try and exactly three retries
    assert slept == [0.5, 1.0, 2.0]
    assert info.value.attempts == 4


@pytest.mark.parametrize("mode", MODES)
def test_a_retry_that_succeeds_returns_the_reply(router, mode):
    ok = W.script(mode, [W.Turn(text="fine now")])
    responses = iter([W.error_response(529, ANTHROPIC_ERR("overloaded_error", "Overloaded")), None])

    def side_effect(request):
        first = next(responses)
        return first if first is not None else ok(request)

    route = router.post(W.url(mode)).mock(side_effect=side_effect)
    reply = make_llm(mode).create(messages=HI)
    assert reply.text == "fine now" and reply.attempts == 2 and route.call_count == 2


def test_anthropic_in_stream_overloaded_error_is_classified_and_retried(router):
    mode = "anthropic_messages"
    start = W.events(mode, W.Turn(text="x"))[:1]
    error = b'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}\n\n'
    route = router.post(W.url(mode)).mock(side_effect=lambda req: W.sse_response(start + [error]))
    with pytest.raises(LLMError) as info:
        make_llm(mode, retries=2).create(messages=HI)
    assert info.value.error_class is ErrorClass.overloaded
    assert route.call_count == 3


def test_error_after_streamed_text_is_not_retried(router):
    """Retrying after text reached the callback would show the user duplicated text."""
    mode = "anthropic_messages"
    head = W.events(mode, W.Turn(text="partial answer"))[:5]
    error = b'event: error\ndata: {"type": "error", "error": {"type": "api_error", "message": "Internal"}}\n\n'
    route = router.post(W.url(mode)).mock(side_effect=lambda req: W.sse_response(head + [error]))
    with pytest.raises(LLMError) as info:
        make_llm(mode, retries=3).create(messages=HI, on_text=lambda t: None)
    assert info.value.error_class is ErrorClass.server_error
    assert info.value.partial.text.startswith("par")
    assert route.call_count == 1


@pytest.mark.parametrize("mode", ["chat_completions", "responses"])
def test_openai_in_stream_errors_are_classified(router, mode):
    if mode == "chat_completions":
        error = b'data: {"error": {"message": "context_length_exceeded: too long", "type": "invalid_request_error", "code": "context_length_exceeded"}}\n\n'
    else:
        error = b'event: response.failed\ndata: {"type": "response.failed", "sequence_number": 1, "response": {"id": "r", "object": "response", "created_at": 1, "model": "gpt-4.1-mini", "status": "failed", "output": [], "tools": [], "parallel_tool_calls": true, "tool_choice": "auto", "error": {"code": "rate_limit_exceeded", "message": "Rate limit reached"}}}\n\n'
    router.post(W.url(mode)).mock(side_effect=lambda req: W.sse_response([error]))
    with pytest.raises(LLMError) as info:
        make_llm(mode).create(messages=HI)
    expected = ErrorClass.context_overflow if mode == "chat_completions" else ErrorClass.rate_limit
    assert info.value.error_class is expected


@pytest.mark.parametrize("mode", MODES)
def test_connection_errors_are_network(router, mode):
    route = router.post(W.url(mode)).mock(side_effect=httpx.ConnectError("connection refused"))
    with pytest.raises(LLMError) as info:
        make_llm(mode).create(messages=HI)
    assert info.value.error_class is ErrorClass.network
    assert route.call_count == 1


@pytest.mark.parametrize("mode", MODES)
def test_error_text_echoing_the_key_is_scrubbed(router, mode):
    body = {"error": {"type": "authentication_error", "message": f"bad key {W.CANARY_KEY}"}}
    router.post(W.url(mode)).mock(return_value=W.error_response(401, body))
    with pytest.raises(LLMError) as info:
        make_llm(mode).create(messages=HI)
    assert W.CANARY_KEY not in str(info.value) and "[REDACTED]" in info.value.message


def test_error_text_echoing_another_environment_secret_is_scrubbed(router, monkeypatch):
    other = "ghp_" + "x1y2z3" * 6
    monkeypatch.setenv("SOME_SERVICE_TOKEN", other)
    body = {"error": {"type": "rate_limit_error", "message": f"slow down, holder of {other}"}}
    router.post(W.url("anthropic_messages")).mock(return_value=W.error_response(429, body))
    with pytest.raises(LLMError) as info:
        make_llm("anthropic_messages").create(messages=HI)
    assert other not in info.value.message


def test_retry_after_forms():
    assert parse_retry_after(httpx.Headers({"retry-after": "3"})) == 3.0
    assert parse_retry_after(httpx.Headers({"retry-after-ms": "1500", "retry-after": "9"})) == 1.5
    date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 120))
    assert 100 < parse_retry_after(httpx.Headers({"retry-after": date})) <= 121
    assert parse_retry_after(httpx.Headers({"retry-after": "soon"})) is None
    assert parse_retry_after(httpx.Headers({})) is None


def test_classify_precedence():
    assert classify(429, {"error": {"code": "insufficient_quota"}}) is ErrorClass.quota
    assert classify(429, {"error": {"code": "rate_limit_exceeded", "message": "quota of requests per min"}}) is ErrorClass.rate_limit
    assert classify(None, {"type": "error", "error": {"type": "overloaded_error"}}) is ErrorClass.overloaded
    assert classify(500, "gateway exploded") is ErrorClass.server_error
    assert classify(418, None) is ErrorClass.invalid_request


# ---------------------------------------------------------------------------------------
# abort of an in-flight stream


@pytest.mark.parametrize("mode", MODES)
def test_abort_ends_a_stalled_stream_with_the_partial_text(router, mode):
    chunks = W.events(mode, W.Turn(text="Partial answer here and more"))
    cut = 4 if mode != "anthropic_messages" else 5
    stalled = W.StallingStream(chunks[:cut])
    router.post(W.url(mode)).mock(side_effect=lambda req: W.sse_response(stalled))
    abort = Abort()
    seen: list[str] = []

    def fire_once_text_arrived():
        deadline = time.monotonic() + 30
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
        abort.fire("timeout")

    firer = threading.Thread(target=fire_once_text_arrived)
    firer.start()
    with pytest.raises(Aborted) as info:
        make_llm(mode).create(messages=HI, on_text=seen.append, abort=abort)
    firer.join()
    assert info.value.reason == "timeout" and info.value.error_class is ErrorClass.timeout
    assert info.value.partial.text == "".join(seen) and seen
    assert stalled.closed.is_set(), "the in-flight response was not closed"


def test_abort_fired_before_the_request_sends_nothing(router):
    route = router.post(W.url("responses")).mock(side_effect=W.script("responses", [W.Turn(text="x")]))
    abort = Abort()
    abort.fire("cancelled")
    with pytest.raises(Aborted):
        make_llm("responses").create(messages=HI, abort=abort)
    assert route.call_count == 0


def test_deadline_already_passed_sends_nothing(router):
    route = router.post(W.url("chat_completions")).mock(side_effect=W.script("chat_completions", [W.Turn(text="x")]))
    with pytest.raises(Aborted):
        make_llm("chat_completions").create(messages=HI, deadline=time.monotonic() - 1)
    assert route.call_count == 0


# ---------------------------------------------------------------------------------------
# SSE chunk boundaries do not matter


def _rechunk(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:]) if b > a]


@pytest.mark.parametrize("mode", MODES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=40), single_bytes=st.booleans())
def test_sse_chunk_boundaries_do_not_matter(mode, cuts, single_bytes):
    turn = W.Turn(
        text="Sé bien: ünïcödé → ok ✓",
        tool_calls=[("call_1", "read_file", {"path": "dir/ñ.py"})],
        usage={"input": 11, "output": 7, "cache_read": 2, "cache_write": 0, "reasoning": 0},
    )
    data = W.body(mode, turn)
    chunks = [data[i : i + 1] for i in range(len(data))] if single_bytes and len(cuts) % 3 == 0 else _rechunk(data, cuts)
    assert b"".join(chunks) == data
    with respx.mock(using="httpx2", assert_all_mocked=True) as router:
        router.post(W.url(mode)).mock(side_effect=lambda req: W.sse_response(list(chunks)))
        seen: list[str] = []
        reply = make_llm(mode).create(messages=HI, tools=TOOLS, on_text=seen.append)
    assert reply.text == turn.text == "".join(seen)
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [("call_1", "read_file", {"path": "dir/ñ.py"})]
    assert reply.served_model == W.SERVED[mode]
    assert reply.usage.input == 11 and reply.usage.output == 7 and reply.usage.cache_read == 2


# ---------------------------------------------------------------------------------------
# lazy SDK imports


def _modules_after(code: str) -> set[str]:
    probe = code + "\nimport sys, json; print(json.dumps(sorted(m for m in ('anthropic', 'openai') if m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_importing_the_provider_imports_neither_sdk():
    assert _modules_after("import harnesscheck.backends.api, harnesscheck.backends.llm, harnesscheck.core.models") == set()


@pytest.mark.parametrize(
    "mode,expected",
    [("anthropic_messages", {"anthropic"}), ("chat_completions", {"openai"}), ("responses", {"openai"})],
)
def test_each_mode_imports_only_its_own_sdk(mode, expected):
    code = f"from harnesscheck.backends.llm import LLM\nLLM({mode!r}, api_key='k', base_url='http://127.0.0.1:9').client()"
    assert _modules_after(code) == expected


# ---------------------------------------------------------------------------------------
# protocol breaks and the host's callback


@pytest.mark.parametrize("mode", MODES)
def test_malformed_sse_data_is_a_protocol_error(router, mode):
    head = W.events(mode, W.Turn(text="fine so far"))[:2]
    bad = b"event: content_block_delta\ndata: {not json\n\n" if mode == "anthropic_messages" else b"data: {not json\n\n"
    if mode == "responses":
        bad = b"event: response.output_text.delta\ndata: {not json\n\n"
    router.post(W.url(mode)).mock(side_effect=lambda req: W.sse_response(head + [bad]))
    with pytest.raises(LLMError) as info:
        make_llm(mode).create(messages=HI)
    assert info.value.error_class is ErrorClass.protocol


def test_an_exception_in_the_host_callback_passes_through_untouched(router):
    router.post(W.url("anthropic_messages")).mock(side_effect=W.script("anthropic_messages", [W.Turn(text="some text")]))

    class HostBug(Exception):
        pass

    def on_text(delta):
        raise HostBug("from the host")

    with pytest.raises(HostBug):
        make_llm("anthropic_messages").create(messages=HI, on_text=on_text)
