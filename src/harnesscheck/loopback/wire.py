"""Wire encoders: one scripted Turn as an Anthropic Messages, OpenAI Responses, Chat
Completions or Gemini API (`generateContent` / `streamGenerateContent?alt=sse`) answer
(SSE stream or JSON), and the request readers that say what the
client offered the model (tools) and how many model turns its history already holds.

Pure functions over dicts; the HTTP plumbing is in server.py.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Iterator

from harnesscheck.loopback.scenario import BRIDGE_SERVER, ServedUsage, ToolCall, Turn

ANTHROPIC = "anthropic_messages"
RESPONSES = "responses"
CHAT = "chat_completions"
GEMINI = "gemini_generate_content"


def _id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:24]}"


def sse(event: str | None, data: dict | str) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


# ---------------------------------------------------------------------------------------
# What the client offered: tool names per protocol


def offered_tools(protocol: str, body: dict) -> list[str]:
    """Every tool name the request offers the model, flattened.

    Anthropic/Chat: `tools[].name` (`tools[].function.name`). Responses: a function tool
    is its name; a namespace tool (codex MCP servers) contributes `ns/tool` for each of
    its tools (the default namespace `functions` contributes plain names); hosted tools
    without a name (`web_search`) are listed by their type. Tools sent as an
    `additional_tools` input item (codex code-mode models) count too."""
    out: list[str] = []
    tools = list(body.get("tools") or [])
    if protocol == GEMINI:
        # Gemini: tools[].functionDeclarations[].name; a hosted tool (googleSearch, codeExecution)
        # is listed by its key
        for tool in tools:
            if not isinstance(tool, dict):
                continue
            for key, value in tool.items():
                if key == "functionDeclarations" and isinstance(value, list):
                    out.extend(str(d.get("name")) for d in value if isinstance(d, dict))
                elif key != "functionDeclarations":
                    out.append(str(key))
        return out
    if protocol == RESPONSES and isinstance(body.get("input"), list):
        # codex's code-mode models get their tools as an `additional_tools` input item
        for item in body["input"]:
            if isinstance(item, dict) and item.get("type") == "additional_tools":
                tools.extend(item.get("tools") or [])
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        if protocol == CHAT:
            fn = tool.get("function") or {}
            out.append(str(fn.get("name") or tool.get("name") or tool.get("type")))
        elif protocol == RESPONSES and tool.get("type") == "namespace":
            ns = str(tool.get("name") or "")
            subs = tool.get("tools") or []
            if not subs:
                out.append(ns)
            for sub in subs:
                if isinstance(sub, dict):
                    sub_name = str(sub.get("name") or sub.get("type"))
                    out.append(sub_name if ns == "functions" else f"{ns}/{sub_name}")
        else:
            out.append(str(tool.get("name") or tool.get("type")))
    return out


def resolve_wire_name(call: ToolCall, offered: list[str], protocol: str) -> tuple[str, str | None]:
    """(name, namespace) the scripted call uses on the wire.

    A built-in is named verbatim. A bridge tool is matched against what the request
    offered: `mcp__bridge__read_file` (claude), `bridge_read_file` (opencode),
    `mcp__bridge/read_file` (a codex namespace tool: name `read_file`, namespace `mcp__bridge`), then
    (claude) `mcp__<any server>__read_file`, as a backend may name its server anything. When nothing matches:
    Responses uses the namespace form (codex may defer MCP tools behind tool_search),
    the others the claude form (the CLI must then refuse an unknown tool)."""
    if call.builtin:
        return call.name, None
    flat = f"mcp__{BRIDGE_SERVER}__{call.name}"
    if protocol == GEMINI:
        flat = f"mcp_{BRIDGE_SERVER}_{call.name}"  # gemini-cli's qualified MCP tool name
    for name in offered:
        if name in (flat, f"{BRIDGE_SERVER}_{call.name}"):  # claude's form, opencode's `<server>_<tool>`
            return name, None
        if "/" in name:
            ns, _, sub = name.partition("/")
            if sub == call.name and ns.startswith(f"mcp__{BRIDGE_SERVER}"):
                return sub, ns
    for name in offered:
        if name == call.name:
            return call.name, None
    if protocol == ANTHROPIC:  # a foreign backend's server has its own name: `mcp__<server>__<tool>`
        for name in offered:
            if name.startswith("mcp__") and name.endswith(f"__{call.name}") and len(name) > len(call.name) + 7:
                return name, None
    if protocol == RESPONSES:
        # codex defers MCP tools behind `tool_search` for models that support it; a
        # namespaced call still reaches the MCP server (measured on codex 0.171.0).
        return call.name, f"mcp__{BRIDGE_SERVER}"
    return flat, None


# ---------------------------------------------------------------------------------------
# How many model turns the request's history holds


#: How a side request for a session title opens its system prompt (opencode 1.18.33 sends
#: one, tool-less, before the turn unless `run --title` names the session).
TITLE_REQUEST_MARKERS = ("You are a title generator",)


def is_title_request(protocol: str, body: dict) -> bool:
    """A tool-less request asking only for a session title (not a model turn of the task)."""
    if offered_tools(protocol, body):
        return False
    for m in body.get("messages") or []:
        if isinstance(m, dict) and m.get("role") == "system":
            return _text_of(m.get("content")).lstrip().startswith(TITLE_REQUEST_MARKERS)
    system = body.get("system")
    return _text_of(system).lstrip().startswith(TITLE_REQUEST_MARKERS) if system else False


def history_turns(protocol: str, body: dict) -> int:
    """Model turns already in the conversation: assistant messages (Anthropic, Chat), or
    runs of consecutive model items (Responses `input`)."""
    if protocol in (ANTHROPIC, CHAT):
        return sum(1 for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "assistant")
    if protocol == GEMINI:
        return sum(1 for c in body.get("contents") or [] if isinstance(c, dict) and c.get("role") == "model")
    items = body.get("input")
    if not isinstance(items, list):
        return 0
    runs, in_run = 0, False
    for item in items:
        if not isinstance(item, dict):
            continue
        kind = item.get("type") or ("message" if "role" in item else "")
        model_item = (kind == "message" and item.get("role") == "assistant") or kind in (
            "function_call",
            "custom_tool_call",
            "reasoning",
            "local_shell_call",
            "web_search_call",
            "tool_search_call",
        )
        if model_item and not in_run:
            runs += 1
        in_run = model_item
    return runs


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for c in content:
            if isinstance(c, dict):
                if isinstance(c.get("text"), str):
                    parts.append(c["text"])
                elif "content" in c:
                    parts.append(_text_of(c["content"]))
                elif isinstance(c.get("output"), str):
                    parts.append(c["output"])
        return "\n".join(parts)
    return ""


def tool_results(protocol: str, body: dict) -> list[dict]:
    """Tool results in the request's history: [{id, is_error, text}]."""
    out: list[dict] = []
    if protocol == GEMINI:
        for content in body.get("contents") or []:
            for part in (content.get("parts") or []) if isinstance(content, dict) else []:
                reply = part.get("functionResponse") if isinstance(part, dict) else None
                if isinstance(reply, dict):
                    response = reply.get("response")
                    text = json.dumps(response) if not isinstance(response, str) else response
                    if isinstance(response, dict):
                        text = _text_of(response.get("output")) or _text_of(response.get("content")) or text
                    is_error = isinstance(response, dict) and "error" in response
                    out.append({"id": reply.get("id") or reply.get("name"), "is_error": is_error, "text": text})
        return out
    if protocol == ANTHROPIC:
        for m in body.get("messages") or []:
            if isinstance(m, dict) and isinstance(m.get("content"), list):
                for c in m["content"]:
                    if isinstance(c, dict) and c.get("type") == "tool_result":
                        out.append({"id": c.get("tool_use_id"), "is_error": bool(c.get("is_error")), "text": _text_of(c.get("content"))})
    elif protocol == RESPONSES:
        for item in body.get("input") or []:
            if isinstance(item, dict) and item.get("type") in ("function_call_output", "custom_tool_call_output"):
                output = item.get("output")
                text = output if isinstance(output, str) else _text_of(output)
                if isinstance(output, dict):
                    text = _text_of(output.get("content")) or json.dumps(output)
                out.append({"id": item.get("call_id"), "is_error": None, "text": text})
    else:
        for m in body.get("messages") or []:
            if isinstance(m, dict) and m.get("role") == "tool":
                out.append({"id": m.get("tool_call_id"), "is_error": None, "text": _text_of(m.get("content"))})
    return out


def summarize_messages(protocol: str, body: dict) -> list[dict]:
    """The conversation as [{role, text, tool_calls: [names]}] (system included)."""
    out: list[dict] = []
    if protocol == GEMINI:
        system = body.get("systemInstruction")
        if isinstance(system, dict):
            out.append({"role": "system", "text": _text_of(system.get("parts")), "tool_calls": []})
        elif isinstance(system, str):
            out.append({"role": "system", "text": system, "tool_calls": []})
        for content in body.get("contents") or []:
            if not isinstance(content, dict):
                continue
            parts = [p for p in content.get("parts") or [] if isinstance(p, dict)]
            calls = [str((p.get("functionCall") or {}).get("name")) for p in parts if "functionCall" in p]
            replies = [p for p in parts if "functionResponse" in p]
            role = "assistant" if content.get("role") == "model" else ("tool" if replies and not calls else content.get("role"))
            text = "".join(p["text"] for p in parts if isinstance(p.get("text"), str) and not p.get("thought"))
            out.append({"role": role, "text": text, "tool_calls": calls})
        return out
    if protocol == RESPONSES:
        if body.get("instructions"):
            out.append({"role": "system", "text": str(body["instructions"]), "tool_calls": []})
        items = body.get("input")
        if isinstance(items, str):
            return out + [{"role": "user", "text": items, "tool_calls": []}]
        for item in items or []:
            if not isinstance(item, dict):
                continue
            kind = item.get("type") or "message"
            if kind == "message":
                out.append({"role": item.get("role"), "text": _text_of(item.get("content")), "tool_calls": []})
            elif kind in ("function_call", "custom_tool_call"):
                name = item.get("name")
                if item.get("namespace"):
                    name = f"{item['namespace']}/{name}"
                out.append({"role": "assistant", "text": "", "tool_calls": [name]})
            elif kind in ("function_call_output", "custom_tool_call_output"):
                output = item.get("output")
                out.append({"role": "tool", "text": output if isinstance(output, str) else _text_of(output), "tool_calls": []})
        return out
    if protocol == ANTHROPIC and body.get("system"):
        out.append({"role": "system", "text": _text_of(body["system"]), "tool_calls": []})
    for m in body.get("messages") or []:
        if not isinstance(m, dict):
            continue
        calls = []
        if protocol == ANTHROPIC and isinstance(m.get("content"), list):
            calls = [c.get("name") for c in m["content"] if isinstance(c, dict) and c.get("type") == "tool_use"]
        elif protocol == CHAT:
            calls = [(tc.get("function") or {}).get("name") for tc in m.get("tool_calls") or [] if isinstance(tc, dict)]
        out.append({"role": m.get("role"), "text": _text_of(m.get("content")), "tool_calls": calls})
    return out


# ---------------------------------------------------------------------------------------
# Errors


def error_body(protocol: str, turn: Turn) -> dict:
    etype = turn.error_type or "api_error"
    msg = turn.error_message or f"status {turn.status} (scripted)"
    if protocol == ANTHROPIC:
        return {"type": "error", "error": {"type": etype, "message": msg}}
    if protocol == GEMINI:
        return {"error": {"code": int(turn.status or 500), "message": msg, "status": GEMINI_STATUS.get(int(turn.status or 500), "INTERNAL")}}
    code = turn.error_code or {"authentication_error": "invalid_api_key", "rate_limit_error": "rate_limit_exceeded"}.get(etype, etype)
    return {"error": {"message": msg, "type": etype, "param": None, "code": code}}


# ---------------------------------------------------------------------------------------
# Anthropic Messages


def _anthropic_usage(u: ServedUsage, output: int | None = None) -> dict:
    return {
        "input_tokens": u.input,
        "cache_creation_input_tokens": u.cache_write,
        "cache_read_input_tokens": u.cache_read,
        "output_tokens": u.output if output is None else output,
    }


def anthropic_blocks(turn: Turn, offered: list[str]) -> list[dict]:
    blocks: list[dict] = []
    if turn.text:
        blocks.append({"type": "text", "text": turn.text})
    for call in turn.tool_calls:
        name, _ = resolve_wire_name(call, offered, ANTHROPIC)
        blocks.append({"type": "tool_use", "id": _id("toolu_lb"), "name": name, "input": call.input})
    return blocks


def anthropic_message(turn: Turn, model: str, offered: list[str]) -> dict:
    blocks = anthropic_blocks(turn, offered)
    return {
        "id": _id("msg_lb"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": "tool_use" if turn.tool_calls else "end_turn",
        "stop_sequence": None,
        "usage": _anthropic_usage(turn.usage),
    }


def anthropic_stream(turn: Turn, model: str, offered: list[str]) -> Iterator[bytes]:
    """message_start, one content block per text/tool_use, message_delta, message_stop.
    With `hang`, only message_start and the first text delta are produced (the server
    then stalls)."""
    msg = anthropic_message(turn, model, offered)
    start = dict(msg, content=[], stop_reason=None, usage=_anthropic_usage(turn.usage, output=1))
    yield sse("message_start", {"type": "message_start", "message": start})
    if turn.hang:
        yield sse("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
        yield sse(
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": turn.text or "..."}},
        )
        return
    for i, block in enumerate(msg["content"]):
        if block["type"] == "text":
            yield sse("content_block_start", {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}})
            yield sse("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": block["text"]}})
        else:
            yield sse(
                "content_block_start",
                {"type": "content_block_start", "index": i, "content_block": dict(block, input={})},
            )
            yield sse(
                "content_block_delta",
                {"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}},
            )
        yield sse("content_block_stop", {"type": "content_block_stop", "index": i})
    yield sse(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": turn.usage.output},
        },
    )
    yield sse("message_stop", {"type": "message_stop"})


# ---------------------------------------------------------------------------------------
# OpenAI Responses


def _responses_usage(u: ServedUsage) -> dict:
    return {
        "input_tokens": u.input + u.cache_read,
        "input_tokens_details": {"cached_tokens": u.cache_read},
        "output_tokens": u.output,
        "output_tokens_details": {"reasoning_tokens": u.reasoning},
        "total_tokens": u.input + u.cache_read + u.output,
    }


def responses_items(turn: Turn, offered: list[str]) -> list[dict]:
    items: list[dict] = []
    if turn.text:
        items.append(
            {
                "id": _id("msg_lb"),
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": turn.text, "annotations": []}],
            }
        )
    for call in turn.tool_calls:
        name, namespace = resolve_wire_name(call, offered, RESPONSES)
        if call.freeform is not None:
            items.append(
                {
                    "id": _id("ctc_lb"),
                    "type": "custom_tool_call",
                    "status": "completed",
                    "call_id": _id("call_lb"),
                    "name": name,
                    "input": call.freeform,
                }
            )
            continue
        item = {
            "id": _id("fc_lb"),
            "type": "function_call",
            "status": "completed",
            "call_id": _id("call_lb"),
            "name": name,
            "arguments": json.dumps(call.input),
        }
        if namespace:
            item["namespace"] = namespace
        items.append(item)
    return items


def responses_object(turn: Turn, model: str, offered: list[str], *, status: str = "completed", output: list | None = None) -> dict:
    return {
        "id": _id("resp_lb"),
        "object": "response",
        "created_at": 1764000000,
        "status": status,
        "model": model,
        "output": responses_items(turn, offered) if output is None else output,
        "usage": _responses_usage(turn.usage) if status == "completed" else None,
        "error": None,
        "incomplete_details": None,
    }


def responses_stream(turn: Turn, model: str, offered: list[str]) -> Iterator[bytes]:
    resp = responses_object(turn, model, offered)
    seq = iter(range(10_000))

    def ev(kind: str, **data: Any) -> bytes:
        return sse(kind, {"type": kind, "sequence_number": next(seq), **data})

    shell = dict(resp, status="in_progress", output=[], usage=None)
    yield ev("response.created", response=shell)
    yield ev("response.in_progress", response=shell)
    for idx, item in enumerate(resp["output"]):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            yield ev("response.output_item.added", output_index=idx, item=dict(item, status="in_progress", content=[]))
            yield ev(
                "response.content_part.added",
                item_id=item["id"],
                output_index=idx,
                content_index=0,
                part={"type": "output_text", "text": "", "annotations": []},
            )
            yield ev("response.output_text.delta", item_id=item["id"], output_index=idx, content_index=0, delta=text)
            if turn.hang:
                return
            yield ev("response.output_text.done", item_id=item["id"], output_index=idx, content_index=0, text=text)
            yield ev(
                "response.content_part.done",
                item_id=item["id"],
                output_index=idx,
                content_index=0,
                part={"type": "output_text", "text": text, "annotations": []},
            )
        elif item["type"] == "custom_tool_call":
            yield ev("response.output_item.added", output_index=idx, item=dict(item, status="in_progress", input=""))
            yield ev("response.custom_tool_call_input.delta", item_id=item["id"], output_index=idx, delta=item["input"])
            yield ev("response.custom_tool_call_input.done", item_id=item["id"], output_index=idx, input=item["input"])
        else:
            yield ev("response.output_item.added", output_index=idx, item=dict(item, status="in_progress", arguments=""))
            yield ev("response.function_call_arguments.delta", item_id=item["id"], output_index=idx, delta=item["arguments"])
            yield ev("response.function_call_arguments.done", item_id=item["id"], output_index=idx, arguments=item["arguments"])
        yield ev("response.output_item.done", output_index=idx, item=item)
    if turn.hang:
        return
    yield ev("response.completed", response=resp)


# ---------------------------------------------------------------------------------------
# Chat Completions


def _chat_usage(u: ServedUsage) -> dict:
    return {
        "prompt_tokens": u.input + u.cache_read,
        "completion_tokens": u.output,
        "total_tokens": u.input + u.cache_read + u.output,
        "prompt_tokens_details": {"cached_tokens": u.cache_read},
        "completion_tokens_details": {"reasoning_tokens": u.reasoning},
    }


def _chat_tool_calls(turn: Turn, offered: list[str]) -> list[dict]:
    calls = []
    for i, call in enumerate(turn.tool_calls):
        name, _ = resolve_wire_name(call, offered, CHAT)
        calls.append({"index": i, "id": _id("call_lb"), "type": "function", "function": {"name": name, "arguments": json.dumps(call.input)}})
    return calls


def chat_completion(turn: Turn, model: str, offered: list[str]) -> dict:
    calls = _chat_tool_calls(turn, offered)
    message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
    if calls:
        message["tool_calls"] = [{k: v for k, v in c.items() if k != "index"} for c in calls]
    return {
        "id": _id("chatcmpl-lb"),
        "object": "chat.completion",
        "created": 1764000000,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop", "logprobs": None}],
        "usage": _chat_usage(turn.usage),
    }


def chat_stream(turn: Turn, model: str, offered: list[str], *, include_usage: bool) -> Iterator[bytes]:
    cid = _id("chatcmpl-lb")

    def chunk(delta: dict, finish: str | None = None, usage: dict | None = None, choices: bool = True) -> bytes:
        body: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk", "created": 1764000000, "model": model}
        body["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}] if choices else []
        if usage is not None:
            body["usage"] = usage
        return sse(None, body)

    yield chunk({"role": "assistant", "content": ""})
    if turn.text:
        yield chunk({"content": turn.text})
    if turn.hang:
        return
    calls = _chat_tool_calls(turn, offered)
    for c in calls:
        yield chunk({"tool_calls": [c]})
    yield chunk({}, "tool_calls" if calls else "stop")
    if include_usage:
        yield chunk({}, usage=_chat_usage(turn.usage), choices=False)
    yield sse(None, "[DONE]")


# ---------------------------------------------------------------------------------------
# Gemini API (generateContent / streamGenerateContent?alt=sse)

#: HTTP status -> the google.rpc status name the Gemini API puts in its error body.
GEMINI_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    529: "UNAVAILABLE",
}


def gemini_model_from_path(path: str) -> str | None:
    """`/v1beta/models/<model>:streamGenerateContent` -> `<model>` (the Gemini API names the
    model in the path, not the body)."""
    _, sep, rest = path.partition("/models/")
    if not sep:
        return None
    model = rest.split(":", 1)[0]
    return model or None


def _gemini_usage(u: ServedUsage) -> dict:
    return {
        "promptTokenCount": u.input + u.cache_read,
        "candidatesTokenCount": u.output,
        "totalTokenCount": u.input + u.cache_read + u.output + u.reasoning,
        "cachedContentTokenCount": u.cache_read,
        "thoughtsTokenCount": u.reasoning,
    }


def gemini_parts(turn: Turn, offered: list[str]) -> list[dict]:
    parts: list[dict] = []
    if turn.text:
        parts.append({"text": turn.text})
    for call in turn.tool_calls:
        name, _ = resolve_wire_name(call, offered, GEMINI)
        parts.append({"functionCall": {"name": name, "args": call.input}})
    return parts


def gemini_response(turn: Turn, model: str, offered: list[str], *, parts: list[dict] | None = None, finish: bool = True) -> dict:
    """One GenerateContentResponse (a whole answer, or one SSE chunk of it)."""
    candidate: dict[str, Any] = {
        "content": {"role": "model", "parts": gemini_parts(turn, offered) if parts is None else parts},
        "index": 0,
    }
    if finish:
        candidate["finishReason"] = "STOP"
    body: dict[str, Any] = {"candidates": [candidate], "modelVersion": model, "responseId": _id("lb")}
    if finish:
        body["usageMetadata"] = _gemini_usage(turn.usage)
    return body


def gemini_stream(turn: Turn, model: str, offered: list[str]) -> Iterator[bytes]:
    """`alt=sse`: the text in one chunk, then the function calls with finishReason and
    usageMetadata. With `hang`, only the first text chunk (the server then stalls)."""
    if turn.hang:
        yield sse(None, gemini_response(turn, model, offered, parts=[{"text": turn.text or "..."}], finish=False))
        return
    parts = gemini_parts(turn, offered)
    text_parts = [p for p in parts if "text" in p]
    rest = [p for p in parts if "text" not in p]
    if text_parts and rest:
        yield sse(None, gemini_response(turn, model, offered, parts=text_parts, finish=False))
        yield sse(None, gemini_response(turn, model, offered, parts=rest))
    else:
        yield sse(None, gemini_response(turn, model, offered, parts=parts))
