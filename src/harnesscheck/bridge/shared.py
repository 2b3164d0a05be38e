"""Shared mode: one bridge in the host process serving several sessions over streamable
HTTP on 127.0.0.1, each at its own secret path. No process start per session.

Contract (doc/SPEC-bridge.md, "Shared mode"):
- binds 127.0.0.1 only, on an ephemeral port; DNS-rebinding protection (Host/Origin must be
  this loopback address);
- `add_session(spec)` returns `http://127.0.0.1:<port>/s/<secret>/mcp`; the secret (256
  bits) is the session's only credential, so the URL is written only into the CLI's MCP
  config file (mode 0600) in the run dir, never into argv or a trace;
- each session has its own scope, trace file and session id; every tool call is the same
  `build_server` shim over `dispatch` as the stdio bridge;
- any other path, a removed session or a wrong secret answers 404 with no detail.
"""

from __future__ import annotations

import hmac
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from harnesscheck.bridge.spec import BridgeSpec

START_TIMEOUT_S = 30.0


@dataclass
class _Session:
    spec: BridgeSpec
    secret: str
    app: Any = None
    trace: Any = None
    started: threading.Event = field(default_factory=threading.Event)
    stop: Any = None  # anyio.Event, created in the loop
    error: BaseException | None = None


class SharedBridge:
    """Start with `SharedBridge()`, `url = add_session(spec)`, `remove_session(id)`, `close()`."""

    def __init__(self) -> None:
        import uvicorn
        from anyio.from_thread import start_blocking_portal

        self._sessions: dict[str, _Session] = {}  # session_id -> session
        self._lock = threading.Lock()
        self._portal_cm = start_blocking_portal()
        self._portal = self._portal_cm.__enter__()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # inherited by accepted sockets
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        self.port: int = sock.getsockname()[1]
        config = uvicorn.Config(
            self._asgi,
            interface="asgi3",
            log_level="warning",
            lifespan="off",
            access_log=False,
            proxy_headers=False,
            server_header=False,
            date_header=False,
        )
        self._server = uvicorn.Server(config)
        self._serving = self._portal.start_task_soon(self._server.serve, [sock])
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._server.started:
            if self._serving.done() or time.monotonic() > deadline:
                self.close()
                raise RuntimeError("shared bridge: the HTTP server did not start")
            time.sleep(0.005)

    # -- the ASGI entry: route by secret path -------------------------------------------

    def _find(self, secret: str) -> _Session | None:
        with self._lock:
            sessions = list(self._sessions.values())
        found = None
        for sess in sessions:  # constant-time comparison, every session checked
            if hmac.compare_digest(sess.secret.encode(), secret.encode()):
                found = sess
        return found

    async def _asgi(self, scope, receive, send) -> None:
        if scope.get("type") != "http":
            return
        parts = scope.get("path", "").split("/")
        sess = None
        if len(parts) == 4 and parts[1] == "s" and parts[3] == "mcp" and parts[2]:
            sess = self._find(parts[2])
        if sess is None or sess.app is None:
            await send({"type": "http.response.start", "status": 404, "headers": [(b"content-length", b"0")]})
            await send({"type": "http.response.body", "body": b""})
            return
        await sess.app(scope, receive, send)

    # -- sessions -------------------------------------------------------------------------

    async def _run_session(self, sess: _Session) -> None:
        import anyio
        from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
        from mcp.server.transport_security import TransportSecuritySettings

        from harnesscheck.bridge.server import build_server
        from harnesscheck.choke.trace import Trace

        try:
            spec = sess.spec
            sess.trace = Trace(spec.trace_path, session_id=spec.session_id)
            spec.scope.open_root(expect=spec.root_identity)  # once per session, as the stdio bridge does
            server = build_server(spec.scope, trace=sess.trace, session_id=spec.session_id, policy=spec.policy)
            here = f"127.0.0.1:{self.port}"
            manager = StreamableHTTPSessionManager(
                app=server,
                json_response=True,  # one JSON body per request: no event stream to hold open
                session_idle_timeout=None,  # lifetime is add_session .. remove_session, not idleness
                max_sessions=8,  # one CLI, a few reconnects at most
                security_settings=TransportSecuritySettings(
                    enable_dns_rebinding_protection=True,
                    allowed_hosts=[here],
                    allowed_origins=[f"http://{here}"],
                ),
            )
            sess.stop = anyio.Event()
            async with manager.run():
                sess.app = StreamableHTTPASGIApp(manager)
                sess.trace.record("bridge_start", pid=os.getpid(), mode="shared", tools=list(spec.scope.tool_names()))
                sess.started.set()
                await sess.stop.wait()
            sess.app = None
            sess.trace.record("bridge_stop", reason="removed")
        except BaseException as exc:  # noqa: BLE001 - reported to add_session's caller
            sess.error = exc
            sess.started.set()
            raise
        finally:
            if sess.trace is not None:
                sess.trace.close()

    def add_session(self, spec: BridgeSpec) -> str:
        """Serve `spec`'s scope at a new secret URL; returns the URL for the MCP config."""
        with self._lock:
            if spec.session_id in self._sessions:
                raise ValueError(f"session {spec.session_id!r} is already served")
            sess = _Session(spec=spec, secret=secrets.token_urlsafe(32))
            self._sessions[spec.session_id] = sess
        self._portal.start_task_soon(self._run_session, sess)
        if not sess.started.wait(START_TIMEOUT_S) or sess.error is not None:
            with self._lock:
                self._sessions.pop(spec.session_id, None)
            raise RuntimeError(f"shared bridge: session {spec.session_id} did not start: {type(sess.error).__name__}")
        return f"http://127.0.0.1:{self.port}/s/{sess.secret}/mcp"

    def remove_session(self, session_id: str) -> None:
        """Stop serving a session: its URL answers 404 from now on."""
        with self._lock:
            sess = self._sessions.pop(session_id, None)
        if sess is not None and sess.stop is not None:
            sess.app = None
            self._portal.call(sess.stop.set)

    def close(self) -> None:
        for session_id in list(self._sessions):
            self.remove_session(session_id)
        self._server.should_exit = True
        try:
            self._serving.result(timeout=10)
        except Exception:  # noqa: BLE001 - shutting down
            pass
        self._portal_cm.__exit__(None, None, None)

    def __enter__(self) -> SharedBridge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
