"""Scripted SSE bodies for the three api_modes (Anthropic Messages, Chat Completions,
Responses), shaped like the vendors' streams, plus respx helpers. Used by test_llm.py,
test_api_provider.py, test_parity.py and bench/bench_api.py.

A *turn* is (text, tool_calls, usage) → the full SSE body for one streamed response.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field

import httpx

BASE = "http://127.0.0.1:9"
PATHS = {
    "anthropic_messages": "/v1/messages",
    "chat_completions": "/v1/chat/completions",
    "responses": "/v1/responses",
}
MODELS = {
    "anthropic_messages": "claude-haiku-4-5",
    "chat_completions": "gpt-4.1-mini",
    "responses": "gpt-4.1-mini",
}
SERVED = {
    "anthropic_messages": "claude-haiku-4-5-20251001",
    "chat_completions": "gpt-4.1-mini-2025-04-14",
    "responses": "gpt-4.1-mini-2025-04-14",
}
KEY_VARS = {
    "anthropic_messages": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
    "chat_completions": ("OPENAI_API_KEY", "OPENAI_BASE_URL"),
    "responses": ("OPENAI_API_KEY", "OPENAI_BASE_URL"),
}
CANARY_KEY = "sk-canary-4f1d2e3c9b8a7f6e"


def base_url(mode: str, root: str = BASE) -> str:
    """The base URL each SDK expects: anthropic appends /v1/..., openai only the path."""
    return root if mode == "anthropic_messages" else root + "/v1"


def url(mode: str, root: str = BASE) -> str:
    return root + PATHS[mode]


@dataclass
class Turn:
    text: str = ""
    tool_calls: list[tuple[str, str, dict | str]] = field(default_factory=list)  # (id, name, args)
    usage: dict = field(default_factory=lambda: {"input": 10, "output": 5, "cache_read": 0, "cache_write": 0, "reasoning": 0})
    model: str | None = None
    stop: str | None = None  # override stop reason
    thinking: str = ""  # the turn's reasoning: Anthropic thinking (with SIGNATURE), Responses reasoning summary
    signature: str = "sig-EqQBCgIYAhIM-test"


def _sse(event: str | None, data: dict | str) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


def _args(args: dict | str) -> str:
    return args if isinstance(args, str) else json.dumps(args)


def _split(text: str) -> list[str]:
    """Split text into a few deltas (so streaming is exercised)."""
    if len(text) < 4:
        return [text] if text else []
    step = max(1, len(text) // 3)
    return [text[i : i + step] for i in range(0, len(text), step)]


def anthropic_events(turn: Turn, model: str) -> list[bytes]:
    u = turn.usage
    out = [
        _sse(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_01",
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {
                        "input_tokens": u["input"],
                        "output_tokens": 1,
                        "cache_read_input_tokens": u["cache_read"],
                        "cache_creation_input_tokens": u["cache_write"],
                    },
                },
            },
        ),
        _sse("ping", {"type": "ping"}),
    ]
    index = 0
    if turn.thinking:
        out.append(
            _sse("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}})
        )
        for part in _split(turn.thinking):
            out.append(_sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": part}}))
        out.append(_sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": turn.signature}}))
        out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": 0}))
        index = 1
    if turn.text:
        out.append(_sse("content_block_start", {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}))
        for part in _split(turn.text):
            out.append(_sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": part}}))
        out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    for call_id, name, args in turn.tool_calls:
        out.append(
            _sse(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}}},
            )
        )
        raw = _args(args)
        for part in _split(raw):
            out.append(
                _sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": part}})
            )
        out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    stop = turn.stop or ("tool_use" if turn.tool_calls else "end_turn")
    out.append(_sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": u["output"]}}))
    out.append(_sse("message_stop", {"type": "message_stop"}))
    return out


def chat_events(turn: Turn, model: str) -> list[bytes]:
    u = turn.usage
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": model}

    def chunk(delta: dict, finish: str | None = None) -> bytes:
        return _sse(None, {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    out = [chunk({"role": "assistant", "content": ""})]
    for part in _split(turn.thinking):  # as OpenAI-compatible reasoning servers stream it
        out.append(chunk({"reasoning_content": part}))
    for part in _split(turn.text):
        out.append(chunk({"content": part}))
    for i, (call_id, name, args) in enumerate(turn.tool_calls):
        parts = _split(_args(args)) or [""]
        out.append(chunk({"tool_calls": [{"index": i, "id": call_id, "type": "function", "function": {"name": name, "arguments": parts[0]}}]}))
        for part in parts[1:]:
            out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": part}}]}))
    out.append(chunk({}, turn.stop or ("tool_calls" if turn.tool_calls else "stop")))
    usage = {
        "prompt_tokens": u["input"] + u["cache_read"] + u["cache_write"],
        "completion_tokens": u["output"],
        "total_tokens": u["input"] + u["cache_read"] + u["cache_write"] + u["output"],
        "prompt_tokens_details": {"cached_tokens": u["cache_read"]},
        "completion_tokens_details": {"reasoning_tokens": u["reasoning"]},
    }
    if u["cache_write"]:
        usage["prompt_tokens_details"]["cache_write_tokens"] = u["cache_write"]
    out.append(_sse(None, {**base, "choices": [], "usage": usage}))
    out.append(b"data: [DONE]\n\n")
    return out


def responses_events(turn: Turn, model: str) -> list[bytes]:
    u = turn.usage
    seq = iter(range(1000))
    response = {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "model": model,
        "status": "in_progress",
        "output": [],
        "tools": [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
    }

    def ev(kind: str, **data) -> bytes:
        return _sse(kind, {"type": kind, "sequence_number": next(seq), **data})

    out = [ev("response.created", response=response)]
    output = []
    index = 0
    if turn.thinking:
        item = {"id": "rs_1", "type": "reasoning", "summary": []}
        out.append(ev("response.output_item.added", output_index=0, item=item))
        for part in _split(turn.thinking):
            out.append(ev("response.reasoning_summary_text.delta", item_id="rs_1", output_index=0, summary_index=0, delta=part))
        done = {**item, "summary": [{"type": "summary_text", "text": turn.thinking}], "encrypted_content": turn.signature}
        out.append(ev("response.output_item.done", output_index=0, item=done))
        output.append(done)
        index = 1
    if turn.text:
        item = {"id": "msg_1", "type": "message", "role": "assistant", "status": "in_progress", "content": []}
        out.append(ev("response.output_item.added", output_index=index, item=item))
        for part in _split(turn.text):
            out.append(ev("response.output_text.delta", item_id="msg_1", output_index=index, content_index=0, delta=part, logprobs=[]))
        done = {**item, "status": "completed", "content": [{"type": "output_text", "text": turn.text, "annotations": []}]}
        out.append(ev("response.output_item.done", output_index=index, item=done))
        output.append(done)
        index += 1
    for call_id, name, args in turn.tool_calls:
        item_id = f"fc_{call_id}"
        raw = _args(args)
        item = {"id": item_id, "type": "function_call", "call_id": call_id, "name": name, "arguments": "", "status": "in_progress"}
        out.append(ev("response.output_item.added", output_index=index, item=item))
        for part in _split(raw):
            out.append(ev("response.function_call_arguments.delta", item_id=item_id, output_index=index, delta=part))
        done = {**item, "arguments": raw, "status": "completed"}
        out.append(ev("response.output_item.done", output_index=index, item=done))
        output.append(done)
        index += 1
    usage = {
        "input_tokens": u["input"] + u["cache_read"],
        "input_tokens_details": {"cached_tokens": u["cache_read"]},
        "output_tokens": u["output"],
        "output_tokens_details": {"reasoning_tokens": u["reasoning"]},
        "total_tokens": u["input"] + u["cache_read"] + u["output"],
    }
    out.append(ev("response.completed", response={**response, "status": "completed", "output": output, "usage": usage}))
    return out


def events(mode: str, turn: Turn) -> list[bytes]:
    model = turn.model or SERVED[mode]
    if mode == "anthropic_messages":
        return anthropic_events(turn, model)
    if mode == "chat_completions":
        return chat_events(turn, model)
    return responses_events(turn, model)


def body(mode: str, turn: Turn) -> bytes:
    return b"".join(events(mode, turn))


def sse_response(chunks: list[bytes] | object, status: int = 200, headers: dict | None = None) -> httpx.Response:
    """A streaming response yielding the given chunks as they are (boundaries kept)."""
    h = {"content-type": "text/event-stream", **(headers or {})}
    stream = chunks if not isinstance(chunks, list) else iter(chunks)
    return httpx.Response(status, headers=h, content=stream)


def script(mode: str, turns: list[Turn]):
    """A respx side effect replying with the given turns in order (fails past the end)."""
    remaining = list(turns)

    def side_effect(request: httpx.Request) -> httpx.Response:
        assert remaining, "the model was called more often than scripted"
        return sse_response(events(mode, remaining.pop(0)))

    return side_effect


class StallingStream:
    """Yields the given chunks, then blocks until closed (a server that stops mid-stream).

    `close()` is what a cancelled request calls; it wakes the blocked read, which then
    ends the stream. `closed` tells a test that the in-flight request was torn down."""

    def __init__(self, chunks: list[bytes], max_stall_s: float = 60.0):
        self.chunks = list(chunks)
        self.closed = threading.Event()
        self.max_stall_s = max_stall_s
        self.stalled_at: float | None = None  # monotonic: every chunk was read, the stall began

    def __iter__(self):
        yield from self.chunks
        self.stalled_at = time.monotonic()
        self.closed.wait(self.max_stall_s)
        if not self.closed.is_set():
            raise AssertionError("the stalled stream was never closed by the client")
        raise httpx.ReadError("connection closed by the client")

    def close(self) -> None:
        self.closed.set()


def error_response(status: int, body: dict | str, headers: dict | None = None) -> httpx.Response:
    if isinstance(body, str):
        return httpx.Response(status, headers=headers or {}, text=body)
    return httpx.Response(status, headers=headers or {}, json=body)
