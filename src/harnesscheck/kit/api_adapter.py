"""ApiAdapter: the `api` backend against a scripted model server on 127.0.0.1, in the wire
protocol of the column's api_mode (`api/anthropic_messages`, `api/chat_completions`,
`api/responses`; a spec without api_mode is driven as anthropic_messages).

The server is a few dozen lines of http.server (no network beyond 127.0.0.1, no port
fixed in advance): each scenario is a list of replies — a streamed turn (SSE, shaped like
that vendor's stream), an HTTP error with that vendor's error body, or a stall. Every request
is recorded (path, headers, body) so checks can see what the model was shown and which
credentials travelled. It runs in the installed wheel without any test-only dependency.

Provenance: the streams and error bodies are written from the vendors' API references
(Anthropic Messages streaming, OpenAI Chat Completions chunks with `include_usage`, OpenAI
Responses events), not recorded; `PROVENANCE` says so in every cell.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from harnesscheck.core.config import Settings
from harnesscheck.core.contracts import Usage
from harnesscheck.kit.adapters import BackendUnderTest, Setup
from harnesscheck.kit.session import Facts, Progress, SessionRun, SkipCell, patched_environ

REQUESTED = "hc-test-model"  # not in the price table: no dollar figure may appear
SERVED = "hc-test-model-20260101"


@dataclass
class Turn:
    text: str = ""
    tool_calls: list[tuple[str, dict]] = field(default_factory=list)
    usage: Usage = field(default_factory=lambda: Usage(input=10, output=5))
    usage_repeats: int = 1
    model: str = SERVED
    thinking: str = ""  # the turn's reasoning: an Anthropic thinking block, a Responses reasoning item
    signature: str = "sig-hc-scripted-thinking"  # its signature (Anthropic) / encrypted content (Responses)


@dataclass
class Fail:
    status: int
    etype: str  # Anthropic's error type, or OpenAI's error type
    message: str
    headers: dict = field(default_factory=dict)
    code: str | None = None  # OpenAI's error code (None in Anthropic's shape)


@dataclass
class Stall:
    text: str = ""  # streamed before the stall


def _sse(event: str, data: dict) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def turn_events(turn: Turn, n: int) -> list[bytes]:
    u = turn.usage
    out = [
        _sse(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": f"msg_{n:02d}",
                    "type": "message",
                    "role": "assistant",
                    "model": turn.model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {
                        "input_tokens": u.input,
                        "output_tokens": 1,
                        "cache_read_input_tokens": u.cache_read,
                        "cache_creation_input_tokens": u.cache_write,
                    },
                },
            },
        )
    ]
    index = 0
    if turn.thinking:
        out.append(
            _sse("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}})
        )
        for i, word in enumerate(turn.thinking.split(" ")):
            out.append(
                _sse(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": (" " if i else "") + word}},
                )
            )
        out.append(_sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": turn.signature}}))
        out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": 0}))
        index = 1
    if turn.text:
        out.append(_sse("content_block_start", {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}))
        words = turn.text.split(" ")
        for i, word in enumerate(words):
            out.append(
                _sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": (" " if i else "") + word}})
            )
        out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    for k, (name, args) in enumerate(turn.tool_calls):
        out.append(
            _sse(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": f"toolu_{n}_{k}", "name": name, "input": {}}},
            )
        )
        out.append(
            _sse(
                "content_block_delta", {"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": json.dumps(args)}}
            )
        )
        out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    stop = "tool_use" if turn.tool_calls else "end_turn"
    for _ in range(max(1, turn.usage_repeats)):  # cumulative usage, repeated
        out.append(
            _sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": u.output}})
        )
    out.append(_sse("message_stop", {"type": "message_stop"}))
    return out


def chat_events(turn: Turn, n: int) -> list[bytes]:
    """A Chat Completions stream (`stream_options.include_usage`): content and tool-call deltas,
    a finish_reason, then the usage chunk; a repeated usage is cumulative on the last chunks,
    as servers streaming continuous usage send it."""
    u = turn.usage
    base = {"id": f"chatcmpl-{n:02d}", "object": "chat.completion.chunk", "created": 1, "model": turn.model}

    def chunk(delta: dict | None, finish: str | None = None, usage: dict | None = None) -> bytes:
        choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
        return f"data: {json.dumps({**base, 'choices': choices, 'usage': usage})}\n\n".encode()

    out = [chunk({"role": "assistant", "content": ""})]
    if turn.text:
        for i, word in enumerate(turn.text.split(" ")):
            out.append(chunk({"content": (" " if i else "") + word}))
    for k, (name, args) in enumerate(turn.tool_calls):
        out.append(chunk({"tool_calls": [{"index": k, "id": f"call_{n}_{k}", "type": "function", "function": {"name": name, "arguments": ""}}]}))
        out.append(chunk({"tool_calls": [{"index": k, "function": {"arguments": json.dumps(args)}}]}))
    out.append(chunk({}, "tool_calls" if turn.tool_calls else "stop"))
    prompt = u.input + u.cache_read + u.cache_write
    details = {"cached_tokens": u.cache_read, **({"cache_write_tokens": u.cache_write} if u.cache_write else {})}
    usage = {
        "prompt_tokens": prompt,
        "completion_tokens": u.output,
        "total_tokens": prompt + u.output,
        "prompt_tokens_details": details,
        "completion_tokens_details": {"reasoning_tokens": u.reasoning},
    }
    for _ in range(max(1, turn.usage_repeats)):
        out.append(chunk(None, usage=usage))
    out.append(b"data: [DONE]\n\n")
    return out


def responses_events(turn: Turn, n: int) -> list[bytes]:
    """A Responses stream: created, output items with their deltas, then response.completed
    carrying the usage (once: the protocol reports it only there)."""
    u = turn.usage
    seq = iter(range(10_000))
    response = {
        "id": f"resp_{n:02d}",
        "object": "response",
        "created_at": 1,
        "model": turn.model,
        "status": "in_progress",
        "output": [],
        "tools": [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "usage": None,
    }

    def ev(kind: str, **data) -> bytes:
        return _sse(kind, {"type": kind, "sequence_number": next(seq), **data})

    out, output, index = [ev("response.created", response=response)], [], 0
    if turn.thinking:
        item = {"id": f"rs_{n}", "type": "reasoning", "summary": []}
        out.append(ev("response.output_item.added", output_index=0, item=item))
        for i, word in enumerate(turn.thinking.split(" ")):
            out.append(ev("response.reasoning_summary_text.delta", item_id=item["id"], output_index=0, summary_index=0, delta=(" " if i else "") + word))
        done = {**item, "summary": [{"type": "summary_text", "text": turn.thinking}], "encrypted_content": turn.signature}
        out.append(ev("response.output_item.done", output_index=0, item=done))
        output.append(done)
        index = 1
    if turn.text:
        item = {"id": f"msg_{n}", "type": "message", "role": "assistant", "status": "in_progress", "content": []}
        out.append(ev("response.output_item.added", output_index=index, item=item))
        for i, word in enumerate(turn.text.split(" ")):
            out.append(ev("response.output_text.delta", item_id=item["id"], output_index=index, content_index=0, delta=(" " if i else "") + word, logprobs=[]))
        done = {**item, "status": "completed", "content": [{"type": "output_text", "text": turn.text, "annotations": []}]}
        out.append(ev("response.output_item.done", output_index=index, item=done))
        output.append(done)
        index += 1
    for k, (name, args) in enumerate(turn.tool_calls):
        item = {"id": f"fc_{n}_{k}", "type": "function_call", "call_id": f"call_{n}_{k}", "name": name, "arguments": "", "status": "in_progress"}
        out.append(ev("response.output_item.added", output_index=index, item=item))
        out.append(ev("response.function_call_arguments.delta", item_id=item["id"], output_index=index, delta=json.dumps(args)))
        done = {**item, "arguments": json.dumps(args), "status": "completed"}
        out.append(ev("response.output_item.done", output_index=index, item=done))
        output.append(done)
        index += 1
    usage = {
        "input_tokens": u.input + u.cache_read,
        "input_tokens_details": {"cached_tokens": u.cache_read},
        "output_tokens": u.output,
        "output_tokens_details": {"reasoning_tokens": u.reasoning},
        "total_tokens": u.input + u.cache_read + u.output,
    }
    out.append(ev("response.completed", response={**response, "status": "completed", "output": output, "usage": usage}))
    return out


#: api_mode -> (request path, the stream of one turn, how many events a Stall sends before it stalls (with text, without))
PROTOCOLS = {
    "anthropic_messages": ("/v1/messages", turn_events, (4, 1)),
    "chat_completions": ("/v1/chat/completions", chat_events, (2, 1)),
    "responses": ("/v1/responses", responses_events, (3, 1)),
}

#: Which usage fields each wire can carry: the others are served as 0, so a scenario's facts
#: are exactly what the mock served (Anthropic reports no reasoning count; Responses no cache write).
WIRE_USAGE = {
    "anthropic_messages": ("input", "output", "cache_read", "cache_write"),
    "chat_completions": ("input", "output", "cache_read", "cache_write", "reasoning"),
    "responses": ("input", "output", "cache_read", "reasoning"),
}


def served(mode: str, usage: Usage) -> Usage:
    """`usage` as `mode`'s wire can report it (WIRE_USAGE)."""
    return Usage(**{k: getattr(usage, k) for k in WIRE_USAGE[mode]})


class ScriptedServer:
    """A threaded HTTP server on 127.0.0.1 replying with the script, one reply per request."""

    def __init__(self, replies: list, repeat_last: bool = False, mode: str = "anthropic_messages"):
        self.replies, self.repeat_last, self.mode = list(replies), repeat_last, mode
        self.requests: list[dict] = []
        self.stalled_at: float | None = None  # monotonic: a Stall reply's events were flushed
        self.latest: float | None = None  # monotonic: the last request came in
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length).decode("utf-8", "replace")
                with server._lock:
                    server.latest = time.monotonic()
                    n = len(server.requests)
                    server.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                    if n < len(server.replies):
                        reply = server.replies[n]
                    elif server.repeat_last and server.replies:
                        reply = server.replies[-1]
                    else:
                        reply = Fail(500, "api_error", "script exhausted")
                server.answer(self, reply, n)

            def do_GET(self):
                with server._lock:
                    server.latest = time.monotonic()
                server.answer_get(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        # It lives for one session (~10 ms): a short poll makes close() prompt (shutdown waits a poll).
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.001}, daemon=True)
        self._thread.start()

    def answer(self, h: BaseHTTPRequestHandler, reply, n: int) -> None:
        if isinstance(reply, Fail):
            if self.mode == "anthropic_messages":
                error = {"type": "error", "error": {"type": reply.etype, "message": reply.message}}
            else:
                error = {"error": {"message": reply.message, "type": reply.etype, "param": None, "code": reply.code}}
            body = json.dumps(error).encode()
            h.send_response(reply.status)
            h.send_header("content-type", "application/json")
            h.send_header("content-length", str(len(body)))
            for k, v in reply.headers.items():
                h.send_header(k, v)
            h.end_headers()
            h.wfile.write(body)
            return
        h.send_response(200)
        h.send_header("content-type", "text/event-stream")
        h.send_header("cache-control", "no-cache")
        h.send_header("connection", "close")
        h.end_headers()
        _, render, (with_text, without) = PROTOCOLS[self.mode]
        try:
            if isinstance(reply, Stall):
                events = render(Turn(text=reply.text), n)[: with_text if reply.text else without]
                for ev in events:
                    h.wfile.write(ev)
                h.wfile.flush()
                if self.stalled_at is None:
                    self.stalled_at = time.monotonic()
                while not self.stopping.wait(0.05):
                    pass
                return
            for ev in render(reply, n):
                h.wfile.write(ev)
            h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
        h.close_connection = True

    def answer_get(self, h: BaseHTTPRequestHandler) -> None:
        """A GET (none of the vendors' codec endpoints is one): 404. Subclasses serve more."""
        self.send_json(h, 404, {"type": "error", "error": {"type": "not_found_error", "message": "not found"}})

    @staticmethod
    def send_json(h: BaseHTTPRequestHandler, status: int, data: dict) -> None:
        body = json.dumps(data).encode()
        h.send_response(status)
        h.send_header("content-type", "application/json")
        h.send_header("content-length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def close(self) -> None:
        if self.stopping.is_set():
            return
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()


#: The error replies of each vendor's shape, per scenario: (status, error type, message, extra headers, OpenAI code).
_ERRORS: dict[str, dict[str, tuple]] = {
    "anthropic": {
        "auth_401": (401, "authentication_error", "invalid x-api-key", {}, None),
        "not_logged_in": (401, "authentication_error", "OAuth token has expired", {}, None),
        "usage_limit": (400, "billing_error", "Your credit balance is too low", {}, None),
        "rate_limit_429": (429, "rate_limit_error", "rate limited", {"retry-after": "30"}, None),
        "overloaded_529": (529, "overloaded_error", "Overloaded", {}, None),
        "context_overflow": (400, "invalid_request_error", "prompt is too long: 250000 tokens > 200000 maximum", {}, None),
        "model_not_found": (404, "not_found_error", f"model: {REQUESTED}", {}, None),
    },
    "openai": {
        "auth_401": (401, "invalid_request_error", "Incorrect API key provided", {}, "invalid_api_key"),
        "not_logged_in": (401, "invalid_request_error", "Your authentication token has expired", {}, "invalid_api_key"),
        "usage_limit": (429, "insufficient_quota", "You exceeded your current quota, please check your plan and billing details", {}, "insufficient_quota"),
        "rate_limit_429": (429, "requests", "Rate limit reached for requests", {"retry-after": "30"}, "rate_limit_exceeded"),
        "overloaded_529": (503, "server_error", "The server is overloaded or not ready yet", {}, None),
        "context_overflow": (
            400,
            "invalid_request_error",
            "This model's maximum context length is 128000 tokens, however your messages resulted in 250000 tokens",
            {},
            "context_length_exceeded",
        ),
        "model_not_found": (404, "invalid_request_error", f"The model `{REQUESTED}` does not exist or you do not have access to it", {}, "model_not_found"),
    },
}

#: What every offline api cell ran against (the cell's provenance).
PROVENANCE = {
    "anthropic_messages": "scripted 127.0.0.1 server, Anthropic Messages SSE and error bodies written from the vendor's API reference",
    "chat_completions": "scripted 127.0.0.1 server, OpenAI Chat Completions chunks (include_usage) and error bodies written from the vendor's API reference",
    "responses": "scripted 127.0.0.1 server, OpenAI Responses events and error bodies written from the vendor's API reference",
}


def _metadata(api_mode: str, model: str | None):
    from harnesscheck.core.models import PROVIDER_OF_MODE, model_info

    return model_info(PROVIDER_OF_MODE.get(api_mode), model)


#: The reasoning of the `thinking_tool_turn` scenario's first turn (streamed, then carried back).
THOUGHT = "I should list the directory before I answer."


def api_scenarios(echo: list[str], mode: str = "anthropic_messages") -> dict[str, tuple[list, bool, Facts]]:
    """Scenario -> (replies, repeat_last, facts), in `mode`'s wire protocol. Facts.usage is
    what the mock served (`served`: the fields the wire can carry)."""
    said = (" (" + " ".join(echo) + ")") if echo else ""
    u = Usage(input=120, output=30, cache_read=7)
    first = Usage(input=300, output=20, cache_read=1200, cache_write=800, reasoning=12)
    second = Usage(input=40, output=15, cache_read=2000, reasoning=9)
    model = Facts(served_model=SERVED, requested_model=REQUESTED)
    errors = _ERRORS["anthropic" if mode == "anthropic_messages" else "openai"]
    table = {
        "success": ([Turn(text="The answer is 42.", usage=u)], False, Facts(usage=served(mode, u), served_model=SERVED)),
        "repeated_usage": (
            [
                Turn(text="reading", usage=u, usage_repeats=3, tool_calls=[("list_dir", {"path": "."})]),
                Turn(text="done", usage=Usage(input=200, output=10), usage_repeats=4),
            ],
            False,
            Facts(usage=served(mode, u + Usage(input=200, output=10)), served_model=SERVED),
        ),
        "cached_usage": (
            [Turn(text="reading", usage=first, tool_calls=[("list_dir", {"path": "."})]), Turn(text="done", usage=second)],
            False,
            Facts(usage=served(mode, first) + served(mode, second), served_model=SERVED),
        ),
        "tool_calls": ([Turn(tool_calls=[("read_file", {"path": "README.md"})]), Turn(text="README greets you.")], False, model),
        "thinking_tool_turn": ([Turn(thinking=THOUGHT, tool_calls=[("list_dir", {"path": "."})]), Turn(text="Listed.")], False, model),
        "max_turns": ([Turn(text="looking", tool_calls=[("list_dir", {"path": "."})])], True, Facts()),
        "timeout_mid_stream": (
            [Turn(text="partial answer", tool_calls=[("list_dir", {"path": "."})]), Stall(text="")],
            True,
            Facts(partial_text="partial answer"),
        ),
        "served_model_mismatch": ([Turn(text="hi", model="hc-other-model-1")], False, Facts(served_model="hc-other-model-1", requested_model=REQUESTED)),
    }
    for scenario, (status, etype, message, headers, code) in errors.items():
        table[scenario] = ([Fail(status, etype, message + said, dict(headers), code)], True, Facts())
    return table


class ApiAdapter(BackendUnderTest):
    """An api backend against the scripted server in its column's api_mode; the key is a canary."""

    name = "api-loopback-server"

    def __init__(self, spec, level, tmp_path):
        super().__init__(spec, level, tmp_path)
        self.api_mode = spec.api_mode or "anthropic_messages"
        prefix = "sk-ant-hc-canary-" if self.api_mode == "anthropic_messages" else "sk-hc-canary-"
        self.key = prefix + secrets.token_hex(12)
        self._servers: list[ScriptedServer] = []
        self.ran: list[str] = []  # scenarios this cell ran (its provenance)

    def _env(self, url: str = "http://127.0.0.1:9") -> dict[str, str]:
        from harnesscheck.backends.api import MODE_ENV

        key_var, url_var = MODE_ENV[self.api_mode]
        return {key_var: self.key, url_var: url if self.api_mode == "anthropic_messages" else url + "/v1"}

    def transport(self, url: str | None = None, **settings):
        from harnesscheck.backends.registry import build_transport

        if not self.spec.api_mode:
            settings.setdefault("api_mode", self.api_mode)
        settings.setdefault("model", REQUESTED)
        self.run_settings(settings)
        with patched_environ(self._env(url or "http://127.0.0.1:9")):
            transport = build_transport(self.spec, Settings(backend=self.spec.id, **settings))
        llm = getattr(transport, "llm", None)
        if llm is not None and hasattr(llm, "backoff_s"):
            llm.backoff_s = 0.01  # quirk: keep the bounded 5xx retries, not their real-time backoff
        if llm is not None and callable(getattr(llm, "client", None)):
            # The SDK client (and the SDK's import, ~1 s, far more on a loaded machine) before the
            # session's clock starts: a cell's deadline judges the backend, not this process's start-up.
            with contextlib.suppress(Exception):  # a failure shows in the session itself
                llm.client()
        return transport

    def parent_env_canaries(self) -> dict[str, str]:
        return super().parent_env_canaries()

    def usage_fields(self) -> tuple[str, ...]:
        return WIRE_USAGE[self.api_mode]

    def provenance(self) -> str:
        ran = ", ".join(dict.fromkeys(self.ran))
        return f"{PROVENANCE[self.api_mode]}" + (f"; scenarios: {ran}" if ran else "")

    def prepare(self, scenario, ws, *, tool_calls, model, timeout_s, echo) -> Setup:
        self.ran.append(scenario)
        if scenario == "network_error":
            server = ScriptedServer([], mode=self.api_mode)
            server.close()  # nothing listens on its port any more: connection refused
            self._servers.append(server)
            return Setup(self.transport(server.url), Facts(), model=REQUESTED, extra={"server": server})
        if scenario == "tools":
            replies = [Turn(tool_calls=[(c.name, dict(c.args)) for c in tool_calls or []]), Turn(text="done")]
            repeat, facts = False, Facts(served_model=SERVED)
        elif scenario == "priced_success":
            # The requested model, served as itself, with every usage field the wire carries
            # (a cache write only for a model priced for one: otherwise no figure is right).
            info = _metadata(self.api_mode, model)
            usage = served(self.api_mode, Usage(input=1200, output=300, cache_read=5000, cache_write=800 if info and info.cache_write_per_m is not None else 0))
            replies = [Turn(text="The answer is 42.", usage=usage, model=model)]
            repeat, facts = False, Facts(usage=usage, served_model=model, requested_model=model)
        else:
            table = api_scenarios(echo, self.api_mode)
            if scenario not in table:
                raise SkipCell("unsupported-by-backend", f"the api backend has no {scenario} situation")
            replies, repeat, facts = table[scenario]
        server = ScriptedServer(replies, repeat_last=repeat, mode=self.api_mode)
        self._servers.append(server)
        return Setup(self.transport(server.url), facts, model=facts.requested_model or REQUESTED, extra={"server": server})

    def observes_stalls(self) -> bool:
        return True

    def stall_progress(self, setup: Setup):
        """When the scripted server began a stall reply (its earlier replies all sent)."""
        server = setup.extra.get("server")
        if server is None:
            return None
        return Progress(server.stalled_at, server.stalled_at, server.latest)

    def collect(self, run: SessionRun, setup: Setup, request) -> None:
        super().collect(run, setup, request)
        server: ScriptedServer = setup.extra["server"]
        server.close()
        run.requests = list(server.requests)
        run.model_calls = len(server.requests)
        run.model_saw = []
        for body in self._bodies(run):
            run.model_saw.extend(_tool_results(self.api_mode, body))
        # the key travels only in its header; everywhere else it is a leak
        for req in server.requests:
            headers = {k.lower(): v for k, v in req["headers"].items()}
            if headers.get("x-api-key") == self.key:
                headers.pop("x-api-key")
            if headers.get("authorization") == f"Bearer {self.key}":
                headers.pop("authorization")
            req["visible_headers"] = headers

    def session_credentials(self, run: SessionRun) -> set[str]:
        """The credentials this session may send: the key the host configured for it."""
        return {self.key}

    def wire_credentials(self, run: SessionRun, host: dict[str, str]) -> list[dict]:
        """What each request the scripted server received carried (headers as sent)."""
        from harnesscheck.kit.session import judge_credentials

        session = self.session_credentials(run)
        return [judge_credentials(f"{req.get('method', 'POST')} {req['path']}", dict(req["headers"]), session, host) for req in run.requests]

    @staticmethod
    def _bodies(run: SessionRun) -> list[dict]:
        out = []
        for req in run.requests:
            try:
                body = json.loads(req["body"])
            except ValueError:
                continue
            if isinstance(body, dict):
                out.append(body)
        return out

    def system_seen(self, run: SessionRun):
        for body in self._bodies(run):
            if self.api_mode == "anthropic_messages":
                system = body.get("system")
                if isinstance(system, list):
                    system = "".join(b.get("text", "") for b in system if isinstance(b, dict))
            elif self.api_mode == "chat_completions":
                system = "".join(m.get("content") or "" for m in body.get("messages", []) if m.get("role") in ("system", "developer"))
            else:
                system = body.get("instructions")
            if system:
                return system
        return None

    def tools_offered(self, run: SessionRun):
        for body in self._bodies(run):
            tools = body.get("tools")
            if tools is not None:
                if self.api_mode == "chat_completions":
                    return [(t.get("function") or {}).get("name") for t in tools]
                return [t.get("name") for t in tools]
        return None

    def thinking_carried_back(self, run: SessionRun) -> list[dict] | None:
        """The reasoning the second request carried back to the model: Anthropic `thinking`
        blocks of its last assistant message, or Responses `reasoning` input items; None where
        the wire carries no reasoning (Chat Completions); [] when the second request has none."""
        if self.api_mode not in ("anthropic_messages", "responses"):
            return None
        bodies = self._bodies(run)
        if len(bodies) < 2:
            return []
        second = bodies[1]
        if self.api_mode == "responses":
            return [i for i in second.get("input") or [] if isinstance(i, dict) and i.get("type") == "reasoning"]
        assistants = [m for m in second.get("messages") or [] if isinstance(m, dict) and m.get("role") == "assistant"]
        content = assistants[-1].get("content") if assistants else None
        return [b for b in content or [] if isinstance(b, dict) and b.get("type") in ("thinking", "redacted_thinking")]

    def cache_breakpoints(self, run: SessionRun) -> list[list[str]] | None:
        """Per request, where its prompt-cache breakpoints sit (`system[i]`, `messages[i]`, and
        `messages[i].block[j]` for one not on a message's last block, `tools[i]`); None where the
        wire has no breakpoint (the OpenAI modes)."""
        if self.api_mode != "anthropic_messages":
            return None
        out = []
        for body in self._bodies(run):
            where = []
            system = body.get("system")
            for i, block in enumerate(system if isinstance(system, list) else []):
                if isinstance(block, dict) and "cache_control" in block:
                    where.append(f"system[{i}]")
            for i, message in enumerate(body.get("messages", [])):
                content = message.get("content")
                for j, block in enumerate(content if isinstance(content, list) else []):
                    if isinstance(block, dict) and "cache_control" in block:
                        where.append(f"messages[{i}]" if j == len(content) - 1 else f"messages[{i}].block[{j}]")
            for i, tool in enumerate(body.get("tools") or []):
                if isinstance(tool, dict) and "cache_control" in tool:
                    where.append(f"tools[{i}]")
            out.append(where)
        return out

    def request_shapes(self, run: SessionRun) -> list[dict]:
        """Per request, the counts a breakpoint check needs: system blocks and messages."""
        out = []
        for body in self._bodies(run):
            system = body.get("system")
            out.append({"system": len(system) if isinstance(system, list) else int(bool(system)), "messages": len(body.get("messages", []))})
        return out

    def __del__(self):
        for server in self._servers:
            try:
                server.close()
            except Exception:
                pass


def _tool_results(mode: str, body: dict) -> list[str]:
    """The tool results a request showed the model, in `mode`'s wire shape."""
    out: list[str] = []
    if mode == "responses":
        for item in body.get("input", []):
            if isinstance(item, dict) and item.get("type") == "function_call_output":
                out.append(str(item.get("output", "")))
        return out
    for message in body.get("messages", []):
        content = message.get("content")
        if mode == "chat_completions":
            if message.get("role") == "tool":
                out.append(content if isinstance(content, str) else "".join(b.get("text", "") for b in content or [] if isinstance(b, dict)))
            continue
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                inner = block.get("content")
                if isinstance(inner, list):
                    inner = "".join(b.get("text", "") for b in inner if isinstance(b, dict))
                out.append(str(inner))
    return out
