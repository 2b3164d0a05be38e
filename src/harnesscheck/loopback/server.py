"""The scripted model server: one stdlib threading HTTP server on 127.0.0.1 (port 0)
that speaks Anthropic Messages, OpenAI Responses and Chat Completions by path, serves
a Scenario, and records every request without ever keeping a credential value.

    with ScriptedModelServer(named_scenario("success")) as srv:
        srv.base_url            # http://127.0.0.1:<port>
        ...run a CLI...
        srv.requests            # [RecordedRequest]

Paths: POST /v1/messages (also ?beta=true), POST /v1/messages/count_tokens,
POST /v1/responses, POST /v1/chat/completions, GET /v1/models (a one-model list),
POST /v1beta/models/<model>:streamGenerateContent?alt=sse and :generateContent (Gemini;
the model is named in the path), :countTokens (a fixed count).
The turn served is the number of model turns in the request's conversation (`turn_of`).
A tool-less session-title side request (opencode's) is answered with a title and is not a
turn: it never gets the script's turn and is left out of turn_requests() and the usage.
Anything else: 404, recorded.

With `expected_key` the server serves its session's credential only: a request without it
(no credential, or another one: another session's CLI, another local user) is answered 401,
recorded with `foreign=True`, and never counted as the session's (turn_requests(), the usage
and the turn count leave it out; `foreign_requests()` lists it).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterable
from urllib.parse import urlsplit

from harnesscheck.loopback import wire
from harnesscheck.loopback.scenario import Scenario, ServedUsage, Turn

#: Header names that carry credentials. Their values are never stored.
CREDENTIAL_HEADERS = frozenset({"authorization", "x-api-key", "api-key", "x-goog-api-key", "proxy-authorization", "cookie"})

#: A closing answer served when the script is exhausted.
_CLOSING = Turn(text="(loopback script exhausted)")
#: The answer to a session-title side request (wire.is_title_request).
_TITLE = Turn(text="harnesscheck session")


@dataclass
class RecordedRequest:
    """What the client sent, minus credential values.

    `body` is the parsed JSON body (kept in memory for assertions; never written out by
    this module). Credentials are reduced to booleans: `credentials_present` (any
    credential header), `credential_matches` (its value equals the server's expected key).
    `canary_hits` names where a watched value appeared (header name or "body")."""

    seq: int
    method: str
    path: str
    query: str
    protocol: str | None
    header_names: list[str]
    credentials_present: bool
    credential_matches: bool | None
    canary_hits: list[str]
    body: dict[str, Any]
    model: str | None
    stream: bool
    tools: list[str]
    messages: list[dict]
    tool_results: list[dict]
    turn_index: int | None = None
    status: int = 200
    served_model: str | None = None
    served_usage: ServedUsage | None = None
    served_tool_calls: list[str] = field(default_factory=list)
    ts: float = 0.0
    #: Header values, except credential headers (their value is replaced by "[credential]").
    headers: dict[str, str] = field(default_factory=dict)
    #: The body as sent (decoded); for in-memory assertions only.
    body_text: str = ""
    #: A side request the server answered outside the script ("title"), else None.
    side_request: str | None = None
    #: Refused (401): it did not carry the session's credential (see the module doc).
    foreign: bool = False

    @property
    def is_turn(self) -> bool:
        """A model turn (not count_tokens, not a model list)."""
        return self.turn_index is not None

    def summary(self) -> dict:
        """A JSON-safe summary (no body, no credential values)."""
        return {
            "seq": self.seq,
            "method": self.method,
            "path": self.path,
            "protocol": self.protocol,
            "status": self.status,
            "model": self.model,
            "served_model": self.served_model,
            "stream": self.stream,
            "turn_index": self.turn_index,
            "tools": self.tools,
            "tool_results": self.tool_results,
            "served_tool_calls": self.served_tool_calls,
            "header_names": self.header_names,
            "credentials_present": self.credentials_present,
            "credential_matches": self.credential_matches,
            "canary_hits": self.canary_hits,
            "side_request": self.side_request,
        }


def _protocol_for(path: str) -> str | None:
    if "/models/" in path and (path.endswith(":streamGenerateContent") or path.endswith(":generateContent")):
        return wire.GEMINI
    if path.endswith("/messages"):
        return wire.ANTHROPIC
    if path.endswith("/responses"):
        return wire.RESPONSES
    if path.endswith("/chat/completions"):
        return wire.CHAT
    return None


def _credential_value(name: str, value: str) -> str:
    if name == "authorization" and value.lower().startswith("bearer "):
        return value[7:].strip()
    return value.strip()


class _Handler(BaseHTTPRequestHandler):
    server: "_HTTPServer"
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        return  # quiet: requests are recorded, not logged

    # -- entry points -------------------------------------------------------------------

    def _refused(self, rec: RecordedRequest) -> bool:
        """Answer 401 to a request without the session's credential; True when it was."""
        if self.server.owner.expected_key is None or rec.credential_matches:
            return False
        rec.foreign = True
        rec.status = 401
        self._json(
            401,
            {
                "type": "error",
                "error": {
                    "type": "authentication_error",
                    "code": 401,
                    "status": "UNAUTHENTICATED",
                    "message": "this loopback server serves its own session's credential only",
                },
            },
        )
        return True

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        owner = self.server.owner
        rec = owner._record(self, {}, protocol=None)
        if self._refused(rec):
            return
        if urlsplit(self.path).path.rstrip("/").endswith("/models"):
            model = owner.scenario.served_model or "loopback-model"
            self._json(200, {"object": "list", "data": [{"id": model, "object": "model", "type": "model"}]})
        else:
            rec.status = 404
            self._json(404, {"error": {"message": "not found", "type": "not_found_error"}})

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        owner = self.server.owner
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw.decode("utf-8", "replace")) if raw else {}
            if not isinstance(body, dict):
                body = {}
        except ValueError:
            body = {}
        path = urlsplit(self.path).path.rstrip("/")
        protocol = _protocol_for(path)
        rec = owner._record(self, body, protocol=protocol, raw=raw)
        if self._refused(rec):
            return
        if path.endswith("/count_tokens"):
            self._json(200, {"input_tokens": 42})
            return
        if path.endswith(":countTokens"):
            self._json(200, {"totalTokens": 42})
            return
        if protocol is None:
            rec.status = 404
            self._json(404, {"error": {"message": f"no route {path}", "type": "not_found_error"}})
            return
        self._serve_turn(rec, body, protocol)

    # -- serving a turn -------------------------------------------------------------------

    def _serve_turn(self, rec: RecordedRequest, body: dict, protocol: str) -> None:
        owner = self.server.owner
        owner.last_request_at = time.monotonic()
        if wire.is_title_request(protocol, body):
            # A session-title side request: answered with a title, never with the script's
            # turn, and not a turn (usage, tools offered and turn counts leave it out).
            rec.side_request = "title"
            self._answer(rec, body, protocol, _TITLE, rec.model or "loopback-model")
            return
        index = owner.turn_of(protocol, body)
        turn = owner.scenario.turn(index) or _CLOSING
        rec.turn_index = index
        model = turn.served_model or owner.scenario.served_model or rec.model or "loopback-model"
        rec.served_model = model
        if turn.delay_s and owner._stopping.wait(turn.delay_s):
            return
        if turn.is_status:
            rec.status = int(turn.status or 500)
            self._json(rec.status, wire.error_body(protocol, turn), headers=turn.headers)
            return
        rec.served_usage = turn.usage
        rec.served_tool_calls = [wire.resolve_wire_name(c, rec.tools, protocol)[0] for c in turn.tool_calls]
        if protocol == wire.GEMINI:
            self._serve_gemini(rec, turn, model)
            return
        self._answer(rec, body, protocol, turn, model)

    def _answer(self, rec: RecordedRequest, body: dict, protocol: str, turn: Turn, model: str) -> None:
        owner = self.server.owner
        if not rec.stream:
            if turn.hang:
                owner.note_stall()
                owner._stopping.wait()
                return
            if protocol == wire.ANTHROPIC:
                payload = wire.anthropic_message(turn, model, rec.tools)
            elif protocol == wire.RESPONSES:
                payload = wire.responses_object(turn, model, rec.tools)
            else:
                payload = wire.chat_completion(turn, model, rec.tools)
            self._json(200, payload, headers=turn.headers)
            return
        headers = list(turn.headers)
        if protocol != wire.ANTHROPIC:
            headers.append(("openai-model", model))  # as the OpenAI API sends it (codex reads it)
        if protocol == wire.ANTHROPIC:
            events: Iterable[bytes] = wire.anthropic_stream(turn, model, rec.tools)
        elif protocol == wire.RESPONSES:
            events = wire.responses_stream(turn, model, rec.tools)
        else:
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            events = wire.chat_stream(turn, model, rec.tools, include_usage=include_usage)
        self._stream(events, hang=turn.hang, headers=headers)

    def _serve_gemini(self, rec: RecordedRequest, turn: Turn, model: str) -> None:
        """Gemini: `:streamGenerateContent` (SSE with `alt=sse`) or `:generateContent` (JSON)."""
        if rec.stream:
            self._stream(wire.gemini_stream(turn, model, rec.tools), hang=turn.hang, headers=turn.headers)
            return
        if turn.hang:
            self.server.owner.note_stall()
            self.server.owner._stopping.wait()
            return
        self._json(200, wire.gemini_response(turn, model, rec.tools), headers=turn.headers)

    # -- low-level writers ----------------------------------------------------------------

    def _json(self, status: int, payload: dict, headers: Iterable[tuple[str, str]] = ()) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", "req_loopback")
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        try:
            self.wfile.write(data)
        except OSError:
            pass

    def _stream(self, events: Iterable[bytes], *, hang: bool, headers: Iterable[tuple[str, str]] = ()) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.send_header("request-id", "req_loopback")
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.close_connection = True
        try:
            for chunk in events:
                self.wfile.write(chunk)
                self.wfile.flush()
        except OSError:
            return
        if hang:
            self.server.owner.note_stall()
            self.server.owner._stopping.wait()


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = False
    owner: "ScriptedModelServer"


class ScriptedModelServer:
    """A scripted model server on 127.0.0.1 (see the module docstring).

    `expected_key`: the dummy credential the client is meant to send; recorded as
    `credential_matches`. `watch`: values (env canaries) whose appearance anywhere in a
    request (any header value, the body) is recorded by location, never by value."""

    def __init__(self, scenario: Scenario, *, expected_key: str | None = None, watch: Iterable[str] = (), turn_of: Callable[[str, dict], int] | None = None):
        self.scenario = scenario
        #: (protocol, body) -> the turn to serve: model turns already in the conversation
        #: (default `wire.history_turns`); a client that sends its conversation otherwise (one
        #: text prompt per host turn: claude_code_reasoning) brings its own count.
        self.turn_of = turn_of or wire.history_turns
        self.expected_key = expected_key
        self.watch = tuple(w for w in watch if w)
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        #: time.monotonic() when a hanging turn had sent all it will send (first time), and
        #: when a request last arrived: the kit times its deadlines and cancels by them.
        self.stalled_at: float | None = None
        self.last_request_at: float | None = None
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> "ScriptedModelServer":
        httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        httpd.owner = self
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True, name="loopback-server")
        self._thread.start()
        return self

    def note_stall(self) -> None:
        """A hanging turn has written everything it will: the first such moment is kept."""
        with self._lock:
            if self.stalled_at is None:
                self.stalled_at = time.monotonic()

    def stop(self) -> None:
        """Stop serving; hanging answers are released and their connections closed."""
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> "ScriptedModelServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- what was sent --------------------------------------------------------------------

    def turn_requests(self) -> list[RecordedRequest]:
        """Requests that asked for a model turn (what the model was offered and answered)."""
        with self._lock:
            return [r for r in self.requests if r.is_turn and not r.foreign]

    def foreign_requests(self) -> list[RecordedRequest]:
        """Requests refused for not carrying the session's credential (never the session's)."""
        with self._lock:
            return [r for r in self.requests if r.foreign]

    def served_usage_total(self) -> ServedUsage:
        """The sum of the usage the server reported over every answered turn."""
        total = ServedUsage(0, 0, 0, 0, 0)
        for r in self.turn_requests():
            if r.served_usage is not None and r.status == 200:
                u = r.served_usage
                total = ServedUsage(
                    total.input + u.input,
                    total.output + u.output,
                    total.cache_read + u.cache_read,
                    total.cache_write + u.cache_write,
                    total.reasoning + u.reasoning,
                )
        return total

    def wait_for_requests(self, count: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.requests) >= count:
                    return True
            time.sleep(0.02)
        return False

    def _record(self, handler: _Handler, body: dict, *, protocol: str | None, raw: bytes = b"") -> RecordedRequest:
        names = sorted({k.lower() for k in handler.headers.keys()})
        present, matches = False, None
        hits: list[str] = []
        safe_headers: dict[str, str] = {}
        for key, value in handler.headers.items():
            lname = key.lower()
            safe_headers[lname] = "[credential]" if lname in CREDENTIAL_HEADERS else value
            if lname in CREDENTIAL_HEADERS and value.strip():
                present = True
                if self.expected_key is not None:
                    ok = _credential_value(lname, value) == self.expected_key
                    matches = ok if matches is None else (matches and ok)
            for w in self.watch:
                if w in value and lname not in hits:
                    hits.append(lname)
        text = raw.decode("utf-8", "replace")
        if any(w in text for w in self.watch):
            hits.append("body")
        parts = urlsplit(handler.path)
        with self._lock:
            rec = RecordedRequest(
                seq=len(self.requests),
                method=handler.command,
                path=parts.path,
                query=parts.query,
                protocol=protocol,
                header_names=names,
                credentials_present=present,
                credential_matches=matches,
                canary_hits=hits,
                body=body,
                model=(
                    wire.gemini_model_from_path(parts.path) if protocol == wire.GEMINI else body.get("model") if isinstance(body.get("model"), str) else None
                ),
                stream=(parts.path.endswith(":streamGenerateContent") if protocol == wire.GEMINI else bool(body.get("stream"))),
                tools=wire.offered_tools(protocol, body) if protocol else [],
                messages=wire.summarize_messages(protocol, body) if protocol else [],
                tool_results=wire.tool_results(protocol, body) if protocol else [],
                ts=time.time(),
                headers=safe_headers,
                body_text=text,
            )
            self.requests.append(rec)
        return rec
