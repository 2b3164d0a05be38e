"""LLM: one streaming completion client over three wire protocols (api_modes).

Contract (doc/SPEC-api.md):
- api_mode `anthropic_messages` uses the anthropic SDK, `chat_completions` and `responses`
  the openai SDK; each imports only its own SDK, lazily, on first request.
- Messages are in the canonical Anthropic block shape (user text, assistant text/tool_use
  blocks, user tool_result blocks); each mode converts them to its wire shape.
- The system prompt is a string or ordered blocks (a list of strings). anthropic_messages
  places prompt-cache breakpoints (`cache_control: {"type": "ephemeral"}`) on the first two
  system blocks and the last two non-system messages; the OpenAI modes send none (their
  servers cache prefixes by themselves).
- Every request streams; text deltas go to an optional callback; tool calls are
  accumulated from the stream; usage and the served model are read from the response.
- The SDK's own retries are off (max_retries=0). Overloaded/5xx are retried here a bounded
  number of times with backoff (injectable sleep), only while nothing has been streamed.
- Every failure is an `LLMError` with a normalized `ErrorClass`; messages never carry the
  API key. An `Abort` fired from another thread ends the in-flight request at once.

Over 800 lines for a reason: the three wires are converted from one message model, one stream
accumulator and one error classifier, and their parity is judged side by side
(tests/backends/test_llm.py, the parity snapshot); split, each wire module would import the other two's
halves. The seam, when a fourth wire comes: llm/{anthropic,chat,responses,retry}.py.
"""

from __future__ import annotations

import email.utils
import importlib
import json
import re
import socket
import threading
import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Callable

from harnesscheck.core.contracts import ErrorClass, Usage

#: The running session's retry notices: `(attempt, wait_s, error_class)` before each backoff
#: wait (the api transport sets it for its session's thread; doc/SPEC-events.md).
retry_notices: ContextVar[Callable[[int, float, str], None] | None] = ContextVar("hc_retry_notices", default=None)
#: The running session's thought stream: each reasoning text delta (Anthropic thinking,
#: Responses reasoning summaries) as it arrives (doc/SPEC-events.md `thought`).
thought_notices: ContextVar[Callable[[str], None] | None] = ContextVar("hc_thought_notices", default=None)

API_MODES: tuple[str, ...] = ("anthropic_messages", "chat_completions", "responses")


def sdk_module(api_mode: str) -> str:
    """The one SDK package an api mode imports (anthropic for messages, openai otherwise)."""
    return "anthropic" if api_mode == "anthropic_messages" else "openai"


#: Status classes retried here (bounded), when nothing has been streamed yet.
RETRIED: frozenset[ErrorClass] = frozenset({ErrorClass.overloaded, ErrorClass.server_error})

DEFAULT_MAX_TOKENS = 4096
DEFAULT_RETRIES = 3
DEFAULT_BACKOFF_S = 1.0
MAX_BACKOFF_S = 30.0


# ---------------------------------------------------------------------------------------
# Results and errors


@dataclass
class ToolCall:
    """One tool call the model asked for. `arguments` is None when the JSON was invalid."""

    id: str
    name: str
    arguments: dict | None
    raw_arguments: str = ""


@dataclass
class Reply:
    """One model turn: text, tool calls, stop reason, usage, served model."""

    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    stop_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    served_model: str | None = None
    attempts: int = 1
    #: The model the client itself asked for, when the session named none (a CLI's default
    #: model, from its init event); None for an HTTP client, which always names one.
    requested_model: str | None = None
    #: The turn's reasoning as the wire must get it back on the next request, in order:
    #: Anthropic `thinking` (text + signature) and `redacted_thinking` blocks, or a Responses
    #: `reasoning` item (`{"type": "openai_reasoning", "item": {...}}`, encrypted content kept).
    thinking: list[dict] = field(default_factory=list)

    @property
    def thought(self) -> str:
        """The readable part of the turn's reasoning (thinking text, reasoning summaries)."""
        parts = []
        for block in self.thinking:
            if block.get("type") == "thinking":
                parts.append(block.get("thinking", ""))
            elif block.get("type") == "openai_reasoning":
                parts += [s.get("text", "") for s in block["item"].get("summary") or [] if isinstance(s, dict)]
        return "".join(parts)

    def assistant_message(self) -> dict:
        """This turn as a canonical assistant message (Anthropic block shape), its reasoning
        first, so the next request carries it back (signatures and encrypted content intact)."""
        blocks: list[dict] = [dict(b) for b in self.thinking]
        if self.text:
            blocks.append({"type": "text", "text": self.text})
        for call in self.tool_calls:
            blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments or {}})
        return {"role": "assistant", "content": blocks}


class LLMError(Exception):
    """A normalized failure of one request. `message` never contains a secret."""

    def __init__(
        self,
        error_class: ErrorClass,
        message: str,
        *,
        status_code: int | None = None,
        retry_after_s: float | None = None,
        partial: Reply | None = None,
        attempts: int = 1,
    ):
        self.error_class = error_class
        self.message = message
        self.status_code = status_code
        self.retry_after_s = retry_after_s
        self.partial = partial or Reply()
        self.attempts = attempts
        super().__init__(message)


class Aborted(LLMError):
    """The request was ended from outside (deadline or host cancellation)."""

    def __init__(self, reason: str, partial: Reply | None = None):
        self.reason = reason
        error_class = ErrorClass.timeout if reason == "timeout" else ErrorClass.unknown
        super().__init__(error_class, f"aborted: {reason}", partial=partial)


class Abort:
    """Thread-safe kill switch for the in-flight request.

    `fire(reason)` from any thread: marks the abort and shuts down the socket of the
    attached streaming response (waking a blocked read at once), then closes it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._event = threading.Event()
        self._response: Any = None
        self.reason: str | None = None

    @property
    def fired(self) -> bool:
        return self._event.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`; True if the abort fired meanwhile."""
        return self._event.wait(max(0.0, seconds))

    def attach(self, response: Any) -> None:
        with self._lock:
            self._response = response
            fired = self._event.is_set()
        if fired:
            _kill_response(response)

    def detach(self) -> None:
        with self._lock:
            self._response = None

    def fire(self, reason: str) -> None:
        with self._lock:
            if self._event.is_set():
                return
            self.reason = reason
            self._event.set()
            response = self._response
        if response is not None:
            _kill_response(response)


def _kill_response(response: Any) -> None:
    """Shut the socket down (wakes a reader blocked in recv), then close the response."""
    stream = getattr(response, "extensions", {}).get("network_stream")
    if stream is not None:
        try:
            sock = stream.get_extra_info("socket")
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)
        except Exception:
            pass
    try:
        response.close()
    except Exception:
        pass


# ---------------------------------------------------------------------------------------
# Error classification (duck-typed over both SDKs' exceptions)

_CONTEXT_MARKERS = (
    "prompt is too long",
    "context_length_exceeded",
    "context length",
    "maximum context",
    "context window",
    "too many tokens",
    "input is too long",
)
_QUOTA_MARKERS = (
    "insufficient_quota",
    "credit balance is too low",
    "billing",
    "quota",
    "usage limit",
    "payment required",
)
_MODEL_MARKERS = ("model_not_found", "does not exist", "unknown model", "model not found", "not_found_error")


def _body_fields(body: Any) -> tuple[str, str, str]:
    """(type, code, message) from an error body of either vendor, lower-cased."""
    if isinstance(body, dict):
        inner = body.get("error") if isinstance(body.get("error"), dict) else body
        etype = str(inner.get("type") or "")
        code = str(inner.get("code") or "")
        msg = str(inner.get("message") or "")
        return etype.lower(), code.lower(), msg.lower()
    if isinstance(body, str):
        return "", "", body.lower()
    return "", "", ""


def parse_retry_after(headers: Any) -> float | None:
    """Seconds from `retry-after-ms`, `retry-after` (seconds or an HTTP date), else None."""
    if headers is None:
        return None
    try:
        ms = headers.get("retry-after-ms")
        if ms is not None:
            return max(0.0, float(ms) / 1000.0)
        value = headers.get("retry-after")
    except Exception:
        return None
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def classify(status: int | None, body: Any) -> ErrorClass:
    """The ErrorClass for an HTTP status and error body (or an in-stream error body)."""
    etype, code, msg = _body_fields(body)
    text = " ".join((etype, code, msg))
    if etype in ("authentication_error", "permission_error") or status in (401, 403):
        return ErrorClass.auth
    if etype == "billing_error" or status == 402 or any(m in text for m in _QUOTA_MARKERS):
        if not (status == 429 and code == "rate_limit_exceeded"):
            return ErrorClass.quota
    if etype == "rate_limit_error" or status == 429 or code == "rate_limit_exceeded":
        return ErrorClass.rate_limit
    if status == 413 or etype == "request_too_large" or any(m in text for m in _CONTEXT_MARKERS):
        return ErrorClass.context_overflow
    if etype == "overloaded_error" or status in (503, 529) or "overloaded" in text:
        return ErrorClass.overloaded
    if status == 404 or code == "model_not_found" or any(m in text for m in _MODEL_MARKERS):
        return ErrorClass.model_unavailable
    if etype == "api_error" or code == "server_error" or (status is not None and status >= 500):
        return ErrorClass.server_error
    if status is not None and 400 <= status < 500:
        return ErrorClass.invalid_request
    return ErrorClass.unknown


def _exception_to_error(exc: BaseException, secrets: tuple[str, ...]) -> LLMError:
    """Map an SDK exception (either vendor) to an LLMError without leaking the key."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    status = getattr(exc, "status_code", None)
    if "APITimeoutError" in names or "TimeoutException" in names:
        return LLMError(ErrorClass.timeout, "request timed out")
    if "APIConnectionError" in names or "TransportError" in names or "StreamError" in names:
        cause = exc.__cause__ or exc.__context__
        detail = f" ({type(cause).__name__})" if cause is not None else ""
        return LLMError(ErrorClass.network, scrub(f"connection error{detail}", secrets))
    body = getattr(exc, "body", None)
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if status == 200:  # an error event inside a 200 stream: classify by its body only
        status = None
    error_class = classify(status, body)
    etype, code, msg = _body_fields(body)
    label = code or etype or "error"
    prefix = f"HTTP {status}" if status else "stream error"
    message = scrub(f"{prefix}: {label}: {msg[:300]}" if msg else f"{prefix}: {label}", secrets)
    retry_after = parse_retry_after(headers) if error_class is ErrorClass.rate_limit else None
    return LLMError(error_class, message, status_code=status, retry_after_s=retry_after)


def scrub(text: str, secrets: tuple[str, ...]) -> str:
    """Text safe to show: the API key (any length), every secret value of the environment
    and secret-looking tokens replaced (harnesscheck.contain.envpolicy.redact)."""
    from harnesscheck.contain.envpolicy import REDACTED, redact

    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    return redact(text, secrets)


# ---------------------------------------------------------------------------------------
# Wire conversion (canonical Anthropic blocks → each protocol)


def _blocks(content: Any) -> list[dict]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content or [])


def _result_text(block: dict) -> str:
    content = block.get("content", "")
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))


def _args_json(arguments: Any) -> str:
    return json.dumps(arguments or {}, ensure_ascii=False, separators=(",", ":"))


def to_chat_messages(system: str | list[str] | None, messages: list[dict]) -> list[dict]:
    """Canonical messages → Chat Completions messages (one system message per system block)."""
    out: list[dict] = [{"role": "system", "content": block} for block in system_blocks(system)]
    for message in messages:
        role, content = message["role"], message.get("content")
        if role == "assistant":
            blocks = _blocks(content)
            text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
            calls = [
                {
                    "id": b["id"],
                    "type": "function",
                    "function": {"name": b["name"], "arguments": _args_json(b.get("input"))},
                }
                for b in blocks
                if b.get("type") == "tool_use"
            ]
            item: dict = {"role": "assistant", "content": text or None}
            if calls:
                item["tool_calls"] = calls
            out.append(item)
            continue
        if isinstance(content, str):
            out.append({"role": role, "content": content})
            continue
        texts: list[str] = []
        for block in content or []:
            if block.get("type") == "tool_result":
                out.append({"role": "tool", "tool_call_id": block["tool_use_id"], "content": _result_text(block)})
            elif block.get("type") == "text":
                texts.append(block.get("text", ""))
        if texts:
            out.append({"role": role, "content": "".join(texts)})
    return out


def to_responses_input(messages: list[dict]) -> list[dict]:
    """Canonical messages → Responses API input items."""
    out: list[dict] = []
    for message in messages:
        role, content = message["role"], message.get("content")
        if isinstance(content, str):
            out.append({"role": role, "content": content})
            continue
        texts: list[str] = []
        for block in content or []:
            kind = block.get("type")
            if kind == "text":
                texts.append(block.get("text", ""))
                continue
            if texts:
                out.append({"role": role, "content": "".join(texts)})
                texts = []
            if kind == "tool_use":
                out.append(
                    {
                        "type": "function_call",
                        "call_id": block["id"],
                        "name": block["name"],
                        "arguments": _args_json(block.get("input")),
                    }
                )
            elif kind == "tool_result":
                out.append({"type": "function_call_output", "call_id": block["tool_use_id"], "output": _result_text(block)})
            elif kind == "openai_reasoning":  # back as it came: id, summary, encrypted content
                out.append(dict(block["item"]))
        if texts:
            out.append({"role": role, "content": "".join(texts)})
    return out


#: Anthropic's prompt-cache marker. A breakpoint caches the prompt prefix up to and including
#: its block; a request may carry at most four, so: the first two system blocks and the last
#: two non-system messages (the provider-layer seed, after opencode's applyCaching). The
#: OpenAI wires have no breakpoint: their servers cache prompt prefixes by themselves, and
#: what they read from the cache comes back in usage (cached_tokens).
CACHE_CONTROL: dict = {"type": "ephemeral"}
CACHED_SYSTEM_BLOCKS = 2
CACHED_MESSAGES = 2


def system_blocks(system: str | list[str] | None) -> list[str]:
    """The system prompt as ordered blocks: a string is one block; empty blocks are dropped."""
    if not system:
        return []
    if isinstance(system, str):
        return [system]
    return [block for block in system if block]


def anthropic_system(system: str | list[str] | None) -> list[dict] | None:
    """The system prompt as Anthropic text blocks, the first CACHED_SYSTEM_BLOCKS of them with
    a cache breakpoint; None without a system prompt."""
    out: list[dict] = [{"type": "text", "text": block} for block in system_blocks(system)]
    for block in out[:CACHED_SYSTEM_BLOCKS]:
        block["cache_control"] = dict(CACHE_CONTROL)
    return out or None


def with_cache_breakpoints(messages: list[dict]) -> list[dict]:
    """Anthropic wire messages with a cache breakpoint on the last content block of each of the
    last CACHED_MESSAGES messages (a string content becomes one text block; an empty one is
    left alone: Anthropic refuses empty text blocks). The input is not changed."""
    out = list(messages)
    for i in range(max(0, len(out) - CACHED_MESSAGES), len(out)):
        content = out[i].get("content")
        if isinstance(content, str):
            blocks = [{"type": "text", "text": content}] if content else []
        else:
            blocks = [dict(block) for block in content or []]
        if not blocks:
            continue
        blocks[-1]["cache_control"] = dict(CACHE_CONTROL)
        out[i] = {**out[i], "content": blocks}
    return out


def to_anthropic_messages(messages: list[dict]) -> list[dict]:
    """Canonical messages are Anthropic's shape; tool_result errors keep `is_error: true`."""
    out: list[dict] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            out.append({"role": message["role"], "content": content})
            continue
        blocks = []
        for block in content or []:
            if block.get("type") == "tool_result":
                item = {"type": "tool_result", "tool_use_id": block["tool_use_id"], "content": _result_text(block)}
                if block.get("is_error"):
                    item["is_error"] = True
                blocks.append(item)
            elif block.get("type") != "openai_reasoning":  # another wire's reasoning never crosses
                blocks.append(block)
        out.append({"role": message["role"], "content": blocks})
    return out


def tool_param(mode: str, tool: dict) -> dict:
    """A canonical tool {name, description, input_schema} in the mode's wire shape."""
    if mode == "anthropic_messages":
        return {"name": tool["name"], "description": tool["description"], "input_schema": tool["input_schema"]}
    if mode == "chat_completions":
        return {
            "type": "function",
            "function": {"name": tool["name"], "description": tool["description"], "parameters": tool["input_schema"]},
        }
    return {
        "type": "function",
        "name": tool["name"],
        "description": tool["description"],
        "parameters": tool["input_schema"],
        "strict": False,
    }


# ---------------------------------------------------------------------------------------
# Stream accumulation


class _Turn:
    """Accumulates one streamed turn; forwards text deltas to the callback."""

    def __init__(self, on_text: Callable[[str], None] | None):
        self.on_text = on_text
        self.reply = Reply()
        self.text_parts: list[str] = []
        self.calls: dict[Any, dict] = {}
        self.order: list[Any] = []
        self.think_slots: dict[Any, dict] = {}
        self.think_order: list[Any] = []
        self.streamed = False
        self.finished = False

    def text(self, delta: str | None) -> None:
        if not delta:
            return
        self.streamed = True
        self.text_parts.append(delta)
        if self.on_text is not None:
            try:
                self.on_text(delta)
            except BaseException as exc:  # the host's own error: passed through untouched
                raise _CallbackError(exc) from exc

    def call(self, key: Any, *, id: str | None = None, name: str | None = None, args: str | None = None) -> None:
        self.streamed = True
        slot = self.calls.get(key)
        if slot is None:
            slot = self.calls[key] = {"id": "", "name": "", "args": []}
            self.order.append(key)
        if id:
            slot["id"] = id
        if name:
            slot["name"] = name
        if args:
            slot["args"].append(args)

    def thinking(self, key: Any, *, kind: str = "thinking", text: str | None = None, signature: str | None = None, data: str | None = None) -> None:
        """Anthropic reasoning blocks, by their index: text deltas (shown as thought), the
        signature, or a redacted block's data."""
        self.streamed = True
        slot = self.think_slots.get(key)
        if slot is None:
            slot = self.think_slots[key] = {"type": kind, **({"thinking": "", "signature": ""} if kind == "thinking" else {"data": ""})}
            self.think_order.append(key)
        if text:
            slot["thinking"] += text
            self.thought(text)
        if signature:
            slot["signature"] += signature
        if data:
            slot["data"] += data

    def thought(self, delta: str | None) -> None:
        notice = thought_notices.get()
        if delta and notice is not None:
            notice(delta)

    def reasoning_item(self, item: dict) -> None:
        """A finished Responses reasoning item, kept whole to be sent back."""
        self.think_order.append(object())
        self.think_slots[self.think_order[-1]] = {"type": "openai_reasoning", "item": item}

    def set_args(self, key: Any, args: str) -> None:
        if key in self.calls:
            self.calls[key]["args"] = [args]

    def model(self, served: str | None) -> None:
        if served and not self.reply.served_model:
            self.reply.served_model = served

    def build(self) -> Reply:
        self.reply.text = "".join(self.text_parts)
        self.reply.thinking = [dict(self.think_slots[k]) for k in self.think_order]
        calls = []
        for key in self.order:
            slot = self.calls[key]
            raw = "".join(slot["args"])
            try:
                parsed = json.loads(raw) if raw.strip() else {}
                args = parsed if isinstance(parsed, dict) else None
            except ValueError:
                args = None
            calls.append(ToolCall(id=slot["id"] or f"call_{len(calls)}", name=slot["name"], arguments=args, raw_arguments=raw))
        self.reply.tool_calls = calls
        return self.reply


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _int(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) else 0


def _openai_usage(usage: Any, input_name: str, output_name: str, in_details: str, out_details: str) -> Usage:
    prompt = _int(_get(usage, input_name))
    details = _get(usage, in_details)
    cached = _int(_get(details, "cached_tokens"))
    cache_write = _int(_get(details, "cache_write_tokens"))
    reasoning = _int(_get(_get(usage, out_details), "reasoning_tokens"))
    return Usage(
        input=max(0, prompt - cached - cache_write),
        output=_int(_get(usage, output_name)),
        cache_read=cached,
        cache_write=cache_write,
        reasoning=reasoning,
    )


def _consume_anthropic(stream: Any, turn: _Turn) -> None:
    usage = {"input": 0, "output": 0, "cache_read": 0, "cache_write": 0}
    for event in stream:
        kind = event.type
        if kind == "message_start":
            message = event.message
            turn.model(message.model)
            u = message.usage
            usage.update(
                input=_int(u.input_tokens),
                output=_int(u.output_tokens),
                cache_read=_int(getattr(u, "cache_read_input_tokens", 0)),
                cache_write=_int(getattr(u, "cache_creation_input_tokens", 0)),
            )
        elif kind == "content_block_start":
            block = event.content_block
            if block.type == "tool_use":
                turn.call(event.index, id=block.id, name=block.name)
            elif block.type == "text" and block.text:
                turn.text(block.text)
            elif block.type == "thinking":
                turn.thinking(event.index, text=getattr(block, "thinking", None), signature=getattr(block, "signature", None))
            elif block.type == "redacted_thinking":
                turn.thinking(event.index, kind="redacted_thinking", data=getattr(block, "data", None))
        elif kind == "content_block_delta":
            delta = event.delta
            if delta.type == "text_delta":
                turn.text(delta.text)
            elif delta.type == "input_json_delta":
                turn.call(event.index, args=delta.partial_json)
            elif delta.type == "thinking_delta":
                turn.thinking(event.index, text=delta.thinking)
            elif delta.type == "signature_delta":
                turn.thinking(event.index, signature=delta.signature)
        elif kind == "message_delta":
            turn.reply.stop_reason = event.delta.stop_reason
            u = event.usage
            usage["output"] = _int(u.output_tokens)
            for name, attr in (
                ("input", "input_tokens"),
                ("cache_read", "cache_read_input_tokens"),
                ("cache_write", "cache_creation_input_tokens"),
            ):
                value = getattr(u, attr, None)
                if value is not None:
                    usage[name] = _int(value)
        elif kind == "message_stop":
            turn.finished = True
    turn.reply.usage = Usage(**usage)


def _consume_chat(stream: Any, turn: _Turn) -> None:
    for chunk in stream:
        turn.model(chunk.model)
        if chunk.usage is not None:
            turn.reply.usage = _openai_usage(chunk.usage, "prompt_tokens", "completion_tokens", "prompt_tokens_details", "completion_tokens_details")
        for choice in chunk.choices or []:
            if choice.index != 0:
                continue
            delta = choice.delta
            if delta is not None:
                # Not in the standard wire, but what OpenAI-compatible reasoning servers stream
                # (`reasoning_content`; `reasoning` on some routers): shown as thought, never
                # sent back (those servers refuse it in a request).
                reasoning = _get(delta, "reasoning_content") or _get(delta, "reasoning")
                turn.thought(reasoning if isinstance(reasoning, str) else None)
                turn.text(delta.content)
                for call in delta.tool_calls or []:
                    fn = call.function
                    turn.call(call.index, id=call.id, name=_get(fn, "name"), args=_get(fn, "arguments"))
            if choice.finish_reason:
                turn.reply.stop_reason = choice.finish_reason
                turn.finished = True


def _consume_responses(stream: Any, turn: _Turn) -> None:
    for event in stream:
        kind = event.type
        if kind in ("response.created", "response.in_progress"):
            turn.model(event.response.model)
        elif kind == "response.output_text.delta":
            turn.text(event.delta)
        elif kind == "response.reasoning_summary_text.delta":
            turn.streamed = True
            turn.thought(event.delta)
        elif kind == "response.output_item.done" and event.item.type == "reasoning":
            item = event.item.model_dump(exclude_none=True) if hasattr(event.item, "model_dump") else dict(event.item)
            item.pop("status", None)
            turn.reasoning_item(item)
        elif kind == "response.output_item.added" and event.item.type == "function_call":
            turn.call(event.item.id or event.item.call_id, id=event.item.call_id, name=event.item.name, args=event.item.arguments)
        elif kind == "response.function_call_arguments.delta":
            turn.call(event.item_id, args=event.delta)
        elif kind == "response.output_item.done" and event.item.type == "function_call":
            key = event.item.id or event.item.call_id
            turn.call(key, id=event.item.call_id, name=event.item.name)
            turn.set_args(key, event.item.arguments or "")
        elif kind in ("response.completed", "response.incomplete"):
            response = event.response
            turn.reply.served_model = response.model or turn.reply.served_model
            if response.usage is not None:
                turn.reply.usage = _openai_usage(response.usage, "input_tokens", "output_tokens", "input_tokens_details", "output_tokens_details")
            if kind == "response.incomplete":
                reason = _get(response.incomplete_details, "reason")
                turn.reply.stop_reason = "max_tokens" if reason == "max_output_tokens" else (reason or "incomplete")
            else:
                turn.reply.stop_reason = "tool_calls" if turn.calls else "stop"
            turn.finished = True
        elif kind == "response.failed":
            error = event.response.error
            raise _StreamFailure({"code": _get(error, "code"), "message": _get(error, "message")})
        elif kind == "error":
            raise _StreamFailure({"code": getattr(event, "code", None), "message": getattr(event, "message", "")})


class _CallbackError(Exception):
    """Carries an exception raised by the host's on_text callback out of the stream."""

    def __init__(self, original: BaseException):
        self.original = original
        super().__init__(repr(original))


class _StreamFailure(Exception):
    def __init__(self, body: dict):
        self.body = body
        super().__init__(str(body.get("code") or "error"))


# ---------------------------------------------------------------------------------------
# The client


_TLS_CONTEXT: Any = None
_TLS_LOCK = threading.Lock()


def tls_context() -> Any:
    """One verifying TLS context per process, as the SDKs' own default builds it (trust store and
    SSL_CERT_* honoured): building one loads the CA bundle, ~20 ms for every client otherwise."""
    global _TLS_CONTEXT
    with _TLS_LOCK:
        if _TLS_CONTEXT is None:
            import httpx2

            _TLS_CONTEXT = httpx2.create_ssl_context()
        return _TLS_CONTEXT


#: The request options each wire can carry (contracts.RequestOptions field names).
WIRE_OPTIONS: dict[str, frozenset[str]] = {
    # The Messages API of the pinned SDK takes no temperature; effort is `output_config.effort`.
    "anthropic_messages": frozenset({"thinking_budget", "reasoning_effort", "max_output_tokens"}),
    "chat_completions": frozenset({"reasoning_effort", "temperature", "max_output_tokens"}),
    "responses": frozenset({"reasoning_effort", "reasoning_summary", "temperature", "max_output_tokens"}),
}
_REASONING_OPTIONS = frozenset({"reasoning_effort", "reasoning_summary", "thinking_budget"})


def wire_options(api_mode: str, options: Any) -> dict[str, Any]:
    """The request body fields for `options` on this wire (as the pinned SDKs spell them):
    - anthropic_messages: `thinking: {type: enabled, budget_tokens}`, `output_config: {effort}`,
      `max_tokens` (no temperature on this wire's SDK: refused);
    - chat_completions: `reasoning_effort`, `temperature`, `max_completion_tokens`;
    - responses: `reasoning: {effort, summary}` (+ `include: [reasoning.encrypted_content]`, so a
      reasoning item can be sent back with store=false), `temperature`, `max_output_tokens`."""
    given = options.given()
    out: dict[str, Any] = {}
    if "temperature" in given and api_mode != "anthropic_messages":
        out["temperature"] = given["temperature"]
    if api_mode == "anthropic_messages":
        if "max_output_tokens" in given:
            out["max_tokens"] = given["max_output_tokens"]
        if "thinking_budget" in given:
            out["thinking"] = {"type": "enabled", "budget_tokens": given["thinking_budget"]}
        if "reasoning_effort" in given:
            out["output_config"] = {"effort": given["reasoning_effort"]}
    elif api_mode == "chat_completions":
        if "max_output_tokens" in given:
            out["max_completion_tokens"] = given["max_output_tokens"]
        if "reasoning_effort" in given:
            out["reasoning_effort"] = given["reasoning_effort"]
    else:
        if "max_output_tokens" in given:
            out["max_output_tokens"] = given["max_output_tokens"]
        reasoning = {k: given[f"reasoning_{k}"] for k in ("effort", "summary") if f"reasoning_{k}" in given}
        if reasoning:
            out["reasoning"] = reasoning
            out["include"] = ["reasoning.encrypted_content"]
    return out


#: One run of letters (any script). The published tokenizers of the wires here (OpenAI's
#: cl100k/o200k) split text before encoding so that no token spans two such runs; a run of N
#: letters is one token or more.
_LETTER_RUN = re.compile(r"[^\W\d_]+")


def token_floor(*parts: Any) -> int:
    """A number of tokens the request's text cannot be below, for any of our wires' models:
    half the runs of letters in every string of `parts` (system, messages, tool definitions),
    walked recursively. Half, because Anthropic's tokenizer is not published: the margin keeps
    a refusal certain, so a request that fits is never refused (a request between this floor
    and the real count goes out and the provider answers context_overflow, as before)."""
    runs = 0
    stack = list(parts)
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            runs += len(_LETTER_RUN.findall(item))
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return runs // 2


def check_options(api_mode: str, options: Any, info: Any, *, default_max_tokens: int) -> tuple[str, str] | None:
    """The first option this wire or this model cannot honour, as (option, why); None when all
    can. `info`: the model's metadata (harnesscheck.core.models.ModelInfo), None when unknown: then
    only the wire is judged (the provider judges the model)."""
    given = options.given()
    for name in given:
        if name not in WIRE_OPTIONS.get(api_mode, frozenset()):
            return name, f"the {api_mode} wire has no such option"
    if api_mode == "anthropic_messages" and given.get("reasoning_effort") == "minimal":
        return "reasoning_effort", "the anthropic_messages wire's efforts are low, medium and high (no minimal)"
    if info is not None:
        for name in given:
            if name in _REASONING_OPTIONS and not info.reasoning:
                return name, f"{info.provider}/{info.model} is not a reasoning model ({info.source})"
        if "temperature" in given and info.temperature is False:
            return "temperature", f"{info.provider}/{info.model} takes no temperature ({info.source})"
        limit = info.output
        if "max_output_tokens" in given and limit and given["max_output_tokens"] > limit:
            return "max_output_tokens", f"{given['max_output_tokens']} is above {info.provider}/{info.model}'s output limit {limit} ({info.source})"
    budget = given.get("thinking_budget")
    ceiling = given.get("max_output_tokens", default_max_tokens)
    if budget is not None and budget >= ceiling:
        return "thinking_budget", f"the budget ({budget}) must be below the request's max output tokens ({ceiling})"
    return None


class LLM:
    """Streaming completions over one api_mode. Thread-compatible (one request at a time)."""

    def __init__(
        self,
        api_mode: str,
        *,
        api_key: str,
        base_url: str | None = None,
        model: str | None = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        retries: int = DEFAULT_RETRIES,
        backoff_s: float = DEFAULT_BACKOFF_S,
        sleep: Callable[[float], None] | None = None,
        bearer: bool = False,
        default_headers: dict[str, str] | None = None,
    ):
        """`bearer`: the key goes as `Authorization: Bearer` in every mode (anthropic_messages
        too, instead of `x-api-key`; the Copilot provider's codecs). `default_headers`: sent with
        every request (they replace an SDK default of the same name)."""
        if api_mode not in API_MODES:
            raise ValueError(f"unknown api_mode {api_mode!r}; use one of {', '.join(API_MODES)}")
        self.api_mode = api_mode
        self.model = model
        self.max_tokens = max_tokens
        self.retries = max(0, retries)
        self.backoff_s = backoff_s
        self._sleep = sleep
        self._api_key = api_key
        self._base_url = base_url
        self._bearer = bearer
        self._default_headers = dict(default_headers or {})
        self._client: Any = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:  # never shows the key
        return f"LLM(api_mode={self.api_mode!r}, model={self.model!r}, base_url={self._base_url!r})"

    # -- SDK client ------------------------------------------------------------------

    def client(self) -> Any:
        """The SDK client, built on first use (imports only this mode's SDK)."""
        with self._lock:
            if self._client is None:
                anthropic_bearer = self._bearer and self.api_mode == "anthropic_messages"
                kwargs: dict[str, Any] = {"auth_token" if anthropic_bearer else "api_key": self._api_key, "max_retries": 0}
                if self._default_headers:
                    kwargs["default_headers"] = dict(self._default_headers)
                if self._base_url:
                    kwargs["base_url"] = self._base_url
                sdk = importlib.import_module(sdk_module(self.api_mode))
                kwargs["http_client"] = sdk.DefaultHttpxClient(verify=tls_context())
                self._client = sdk.Anthropic(**kwargs) if self.api_mode == "anthropic_messages" else sdk.OpenAI(**kwargs)
            return self._client

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    # -- requests ----------------------------------------------------------------------

    def request_kwargs(
        self,
        model: str,
        system: str | list[str] | None,
        messages: list[dict],
        tools: list[dict] | None,
        max_tokens: int,
        options: Any = None,
    ) -> dict[str, Any]:
        """The SDK call's arguments for this mode (the wire body, before the SDK adds `stream`).

        anthropic_messages places the prompt-cache breakpoints (`anthropic_cache`). `options`
        (contracts.RequestOptions, checked by `check_options` first) are spelled as the wire
        spells them (`wire_options`)."""
        if self.api_mode == "anthropic_messages":
            kwargs: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "messages": with_cache_breakpoints(to_anthropic_messages(messages))}
            blocks = anthropic_system(system)
            if blocks:
                kwargs["system"] = blocks
        elif self.api_mode == "chat_completions":
            kwargs = {
                "model": model,
                "messages": to_chat_messages(system, messages),
                "max_completion_tokens": max_tokens,
                "stream_options": {"include_usage": True},
            }
        else:
            kwargs = {"model": model, "input": to_responses_input(messages), "max_output_tokens": max_tokens, "store": False}
            if system_blocks(system):
                kwargs["instructions"] = "\n\n".join(system_blocks(system))
        if tools:
            kwargs["tools"] = [tool_param(self.api_mode, t) for t in tools]
        if options is not None:
            kwargs.update(wire_options(self.api_mode, options))
        return kwargs

    def _open_stream(
        self,
        model: str,
        system: str | list[str] | None,
        messages: list[dict],
        tools: list[dict] | None,
        max_tokens: int,
        timeout: float | None,
        extra_headers: dict[str, str] | None = None,
        options: Any = None,
    ) -> Any:
        client = self.client()
        extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        if extra_headers:
            extra["extra_headers"] = dict(extra_headers)
        kwargs = self.request_kwargs(model, system, messages, tools, max_tokens, options)
        if self.api_mode == "anthropic_messages":
            return client.messages.create(stream=True, **kwargs, **extra)
        if self.api_mode == "chat_completions":
            return client.chat.completions.create(stream=True, **kwargs, **extra)
        return client.responses.create(stream=True, **kwargs, **extra)

    def _consume(self, stream: Any, turn: _Turn) -> None:
        if self.api_mode == "anthropic_messages":
            _consume_anthropic(stream, turn)
        elif self.api_mode == "chat_completions":
            _consume_chat(stream, turn)
        else:
            _consume_responses(stream, turn)

    def create(
        self,
        *,
        messages: list[dict],
        system: str | list[str] | None = None,
        tools: list[dict] | None = None,
        model: str | None = None,
        max_tokens: int | None = None,
        on_text: Callable[[str], None] | None = None,
        timeout_s: float | None = None,
        abort: Abort | None = None,
        deadline: float | None = None,
        extra_headers: dict[str, str] | None = None,
        options: Any = None,
    ) -> Reply:
        """One streamed turn, with bounded retries of overloaded/5xx. Raises LLMError.

        `deadline` (time.monotonic) bounds every attempt's SDK timeout and the backoff.
        `extra_headers`: sent with this request only (the Copilot provider's per-turn headers)."""
        model = model or self.model
        if not model:
            raise LLMError(ErrorClass.invalid_request, "no model given (set HARNESS_BACKEND_MODEL or pass model)")
        max_tokens = max_tokens or self.max_tokens
        attempt = 0
        while True:
            attempt += 1
            timeout = timeout_s
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Aborted("timeout")
                timeout = left if timeout is None else min(timeout, left)
            turn = _Turn(on_text)
            try:
                return self._attempt(turn, model, system, messages, tools, max_tokens, timeout, abort, attempt, extra_headers, options)
            except LLMError as err:
                err.attempts = attempt
                if err.error_class is ErrorClass.timeout and deadline is not None and not isinstance(err, Aborted):
                    if time.monotonic() >= deadline - 0.5:
                        raise Aborted("timeout", partial=err.partial) from None
                if isinstance(err, Aborted) or err.error_class not in RETRIED or turn.streamed or attempt > self.retries:
                    raise
                delay = min(MAX_BACKOFF_S, self.backoff_s * (2 ** (attempt - 1)))
                if deadline is not None and time.monotonic() + delay >= deadline:
                    raise
                notice = retry_notices.get()
                if notice is not None:
                    notice(attempt + 1, delay, err.error_class.value)
                if self._sleep is not None:
                    self._sleep(delay)
                elif abort is not None:
                    if abort.wait(delay):
                        raise Aborted(abort.reason or "cancelled", partial=turn.build()) from None
                else:
                    time.sleep(delay)

    def _attempt(
        self,
        turn: _Turn,
        model: str,
        system: str | list[str] | None,
        messages: list[dict],
        tools: list[dict] | None,
        max_tokens: int,
        timeout: float | None,
        abort: Abort | None,
        attempt: int,
        extra_headers: dict[str, str] | None = None,
        options: Any = None,
    ) -> Reply:
        secrets = (self._api_key,)
        if abort is not None and abort.fired:
            raise Aborted(abort.reason or "cancelled", partial=turn.build())
        stream = None
        try:
            stream = self._open_stream(model, system, messages, tools, max_tokens, timeout, extra_headers, options)
            if abort is not None:
                abort.attach(stream.response)
            try:
                self._consume(stream, turn)
            except (_CallbackError, _StreamFailure, LLMError):
                raise
            except (ValueError, KeyError, AttributeError, TypeError, IndexError) as exc:
                if _is_sdk_error(exc) or (abort is not None and abort.fired):
                    raise
                # Malformed SSE data or an event missing its fields: the stream broke the protocol.
                raise LLMError(ErrorClass.protocol, f"malformed stream: {type(exc).__name__}", partial=turn.build()) from None
        except _CallbackError as exc:
            raise exc.original from None
        except LLMError:
            raise
        except _StreamFailure as exc:
            if abort is not None and abort.fired:
                raise Aborted(abort.reason or "cancelled", partial=turn.build()) from None
            error_class = classify(None, exc.body)
            if error_class is ErrorClass.unknown:
                error_class = ErrorClass.server_error
            etype, code, msg = _body_fields(exc.body)
            raise LLMError(error_class, scrub(f"stream error: {code or etype or 'error'}: {msg[:300]}", secrets), partial=turn.build()) from None
        except Exception as exc:
            if abort is not None and abort.fired:
                raise Aborted(abort.reason or "cancelled", partial=turn.build()) from None
            if not _is_sdk_error(exc):
                raise
            err = _exception_to_error(exc, secrets)
            err.partial = turn.build()
            raise err from None
        finally:
            if abort is not None:
                abort.detach()
            if stream is not None:
                try:
                    stream.response.close()
                except Exception:
                    pass
        if abort is not None and abort.fired:
            raise Aborted(abort.reason or "cancelled", partial=turn.build())
        reply = turn.build()
        reply.attempts = attempt
        if not turn.finished:
            raise LLMError(ErrorClass.server_error, "the stream ended before the response was complete", partial=reply)
        return reply


def _is_sdk_error(exc: BaseException) -> bool:
    """An exception from either SDK or its HTTP stack (never a bug in our own code)."""
    module = type(exc).__module__.split(".", 1)[0]
    return module in ("anthropic", "openai", "httpx2", "httpcore2", "httpx", "httpcore")
