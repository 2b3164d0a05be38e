"""ApiAdapter: the `api` backend against a scripted Anthropic Messages server on 127.0.0.1.

The server is a few dozen lines of http.server (no network beyond 127.0.0.1, no port
fixed in advance): each scenario is a list of replies — a streamed turn (SSE, shaped like
the vendor's stream), an HTTP error with the vendor's error body, or a stall. Every request
is recorded (path, headers, body) so checks can see what the model was shown and which
credentials travelled. It runs in the installed wheel without any test-only dependency.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from harnesscheck.config import Settings
from harnesscheck.contracts import Usage
from harnesscheck.kit.adapters import (
    BackendUnderTest,
    Facts,
    Progress,
    SessionRun,
    Setup,
    SkipCell,
    patched_environ,
)

REQUESTED = "hc-test-model"  # not in the price table: no dollar figure may appear
SERVED = "hc-test-model-20260101"


@dataclass
class Turn:
    text: str = ""
    tool_calls: list[tuple[str, dict]] = field(default_factory=list)
    usage: Usage = field(default_factory=lambda: Usage(input=10, output=5))
    usage_repeats: int = 1
    model: str = SERVED


@dataclass
class Fail:
    status: int
    etype: str
    message: str
    headers: dict = field(default_factory=dict)


@dataclass
class Stall:
    text: str = ""  # streamed before the stall


def _sse(event: str, data: dict) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def turn_events(turn: Turn, n: int) -> list[bytes]:
    u = turn.usage
    out = [_sse("message_start", {"type": "message_start", "message": {
        "id": f"msg_{n:02d}", "type": "message", "role": "assistant", "model": turn.model, "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": u.input, "output_tokens": 1, "cache_read_input_tokens": u.cache_read,
                  "cache_creation_input_tokens": u.cache_write}}})]
    index = 0
    if turn.text:
        out.append(_sse("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}))
        words = turn.text.split(" ")
        for i, word in enumerate(words):
            out.append(_sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                    "delta": {"type": "text_delta", "text": (" " if i else "") + word}}))
        out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": 0}))
        index = 1
    for k, (name, args) in enumerate(turn.tool_calls):
        out.append(_sse("content_block_start", {"type": "content_block_start", "index": index,
                                                "content_block": {"type": "tool_use", "id": f"toolu_{n}_{k}", "name": name, "input": {}}}))
        out.append(_sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                                "delta": {"type": "input_json_delta", "partial_json": json.dumps(args)}}))
        out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    stop = "tool_use" if turn.tool_calls else "end_turn"
    for _ in range(max(1, turn.usage_repeats)):  # cumulative usage, repeated
        out.append(_sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                          "usage": {"output_tokens": u.output}}))
    out.append(_sse("message_stop", {"type": "message_stop"}))
    return out


class ScriptedServer:
    """A threaded HTTP server on 127.0.0.1 replying with the script, one reply per request."""

    def __init__(self, replies: list, repeat_last: bool = False):
        self.replies, self.repeat_last = list(replies), repeat_last
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
            body = json.dumps({"type": "error", "error": {"type": reply.etype, "message": reply.message}}).encode()
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
        try:
            if isinstance(reply, Stall):
                events = turn_events(Turn(text=reply.text), n)[:4 if reply.text else 1]
                for ev in events:
                    h.wfile.write(ev)
                h.wfile.flush()
                if self.stalled_at is None:
                    self.stalled_at = time.monotonic()
                while not self.stopping.wait(0.05):
                    pass
                return
            for ev in turn_events(reply, n):
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


def api_scenarios(echo: list[str]) -> dict[str, tuple[list, bool, Facts]]:
    """Scenario -> (replies, repeat_last, facts)."""
    said = (" (" + " ".join(echo) + ")") if echo else ""
    u = Usage(input=120, output=30, cache_read=7)
    served = Facts(served_model=SERVED, requested_model=REQUESTED)
    return {
        "success": ([Turn(text="The answer is 42.", usage=u)], False, Facts(usage=u, served_model=SERVED)),
        "repeated_usage": (
            [Turn(text="reading", usage=u, usage_repeats=3, tool_calls=[("list_dir", {"path": "."})]),
             Turn(text="done", usage=Usage(input=200, output=10), usage_repeats=4)],
            False, Facts(usage=u + Usage(input=200, output=10), served_model=SERVED),
        ),
        "tool_calls": ([Turn(tool_calls=[("read_file", {"path": "README.md"})]), Turn(text="README greets you.")], False, served),
        "max_turns": ([Turn(text="looking", tool_calls=[("list_dir", {"path": "."})])], True, Facts()),
        "auth_401": ([Fail(401, "authentication_error", "invalid x-api-key" + said)], True, Facts()),
        "not_logged_in": ([Fail(401, "authentication_error", "OAuth token has expired" + said)], True, Facts()),
        "usage_limit": ([Fail(400, "billing_error", "Your credit balance is too low" + said)], True, Facts()),
        "rate_limit_429": ([Fail(429, "rate_limit_error", "rate limited" + said, {"retry-after": "30"})], True, Facts()),
        "overloaded_529": ([Fail(529, "overloaded_error", "Overloaded" + said)], True, Facts()),
        "context_overflow": ([Fail(400, "invalid_request_error", "prompt is too long: 250000 tokens > 200000 maximum" + said)], True, Facts()),
        "model_not_found": ([Fail(404, "not_found_error", f"model: {REQUESTED}" + said)], True, Facts()),
        "timeout_mid_stream": (
            [Turn(text="partial answer", tool_calls=[("list_dir", {"path": "."})]), Stall(text="")],
            True, Facts(partial_text="partial answer"),
        ),
        "served_model_mismatch": ([Turn(text="hi", model="hc-other-model-1")], False,
                                  Facts(served_model="hc-other-model-1", requested_model=REQUESTED)),
    }


class ApiAdapter(BackendUnderTest):
    """`api` (anthropic_messages) against the scripted server; the key is a canary."""

    name = "api-loopback-server"
    api_mode = "anthropic_messages"

    def __init__(self, spec, level, tmp_path):
        super().__init__(spec, level, tmp_path)
        self.key = "sk-ant-hc-canary-" + secrets.token_hex(12)
        self._servers: list[ScriptedServer] = []

    def _env(self, url: str = "http://127.0.0.1:9") -> dict[str, str]:
        return {"ANTHROPIC_API_KEY": self.key, "ANTHROPIC_BASE_URL": url}

    def transport(self, url: str | None = None, **settings):
        from harnesscheck.registry import build_transport

        settings.setdefault("api_mode", self.api_mode)
        settings.setdefault("model", REQUESTED)
        self.run_settings(settings)
        with patched_environ(self._env(url or "http://127.0.0.1:9")):
            transport = build_transport(self.spec, Settings(backend=self.spec.id, **settings))
        llm = getattr(transport, "llm", None)
        if llm is not None and hasattr(llm, "backoff_s"):
            llm.backoff_s = 0.01  # quirk: keep the bounded 5xx retries, not their real-time backoff
        return transport

    def parent_env_canaries(self) -> dict[str, str]:
        return super().parent_env_canaries()

    def prepare(self, scenario, ws, *, tool_calls, model, timeout_s, echo) -> Setup:
        if scenario == "network_error":
            server = ScriptedServer([])
            server.close()  # nothing listens on its port any more: connection refused
            self._servers.append(server)
            return Setup(self.transport(server.url), Facts(), model=REQUESTED, extra={"server": server})
        if scenario == "tools":
            replies = [Turn(tool_calls=[(c.name, dict(c.args)) for c in tool_calls or []]), Turn(text="done")]
            repeat, facts = False, Facts(served_model=SERVED)
        else:
            table = api_scenarios(echo)
            if scenario not in table:
                raise SkipCell("unsupported-by-backend", f"the api backend has no {scenario} situation")
            replies, repeat, facts = table[scenario]
        server = ScriptedServer(replies, repeat_last=repeat)
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
        for req in server.requests:
            try:
                body = json.loads(req["body"])
            except ValueError:
                continue
            for message in body.get("messages", []):
                content = message.get("content")
                if not isinstance(content, list):
                    continue
                for block in content:
                    if isinstance(block, dict) and block.get("type") == "tool_result":
                        inner = block.get("content")
                        if isinstance(inner, list):
                            inner = "".join(b.get("text", "") for b in inner if isinstance(b, dict))
                        run.model_saw.append(str(inner))
        # the key travels only in its header; everywhere else it is a leak
        for req in server.requests:
            headers = {k.lower(): v for k, v in req["headers"].items()}
            if headers.get("x-api-key") == self.key:
                headers.pop("x-api-key")
            req["visible_headers"] = headers

    def system_seen(self, run: SessionRun):
        for req in run.requests:
            try:
                system = json.loads(req["body"]).get("system")
            except ValueError:
                continue
            if isinstance(system, list):
                system = "".join(b.get("text", "") for b in system if isinstance(b, dict))
            if system:
                return system
        return None

    def tools_offered(self, run: SessionRun):
        for req in run.requests:
            try:
                tools = json.loads(req["body"]).get("tools")
            except ValueError:
                continue
            if tools is not None:
                return [t.get("name") for t in tools]
        return None

    def __del__(self):
        for server in self._servers:
            try:
                server.close()
            except Exception:
                pass

