"""hostlink: the bridge's live line back to its host (doc/SPEC-policy.md, doc/SPEC-events.md).

Requirement (issue 31): an `approval_required` call a harness CLI or an ACP agent makes through
the bridge reaches the host's approver, and the host sees the bridge's tool calls as they
happen. The bridge runs in another process (the forkserver's child, or the CLI's), so the host
listens on a Unix socket in the session's run dir and the bridge connects to it:

- the socket is `<run_dir>/hostlink.sock`; the run dir is private (0700, the host's), and the
  host accepts a peer only with its own uid (SO_PEERCRED). Inside the sandbox the run dir is not
  mounted, so the CLI cannot reach it; the bridge's server side runs outside.
- one JSON object per line, each side bounded (MAX_LINE_BYTES): `{"event": kind, "fields":
  {...}}` from the bridge (no answer), `{"approve": {...ApprovalRequest}}` from the bridge,
  answered by one `{"answer": {...ApprovalAnswer} | null, "code": ...}` line.
- the host asks its approver (policy._ask: sync or async, with the policy's timeout), one
  approval at a time (a terminal prompt is one prompt); it keeps no grant itself: the bridge's
  engine keeps what it is given, bound to the digest it asked about.
- the bridge fails closed: no link, a broken line, an oversized answer or no answer in time is
  an approver failure, i.e. a deny (`approval_failed`). An event that cannot be delivered is
  dropped: the host still reports the call from the bridge trace after the session (`late`).

Paths of the socket can exceed AF_UNIX's 108 bytes (pytest's tmp dirs do): both sides reach it
through `/proc/self/fd/<dirfd>/hostlink.sock` (Linux), a short path to the same inode.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

SOCKET_NAME = "hostlink.sock"
#: One line either way: an approval request carries the call's arguments (a write's content).
MAX_LINE_BYTES = 8 * 1024 * 1024
#: Connections the host serves at once (each bridge process of the session holds one).
MAX_PEERS = 16


@contextmanager
def _short_path(run_dir: Path):
    """A path to `<run_dir>/hostlink.sock` that fits AF_UNIX: through a directory descriptor
    on Linux, the path itself elsewhere."""
    path = Path(run_dir) / SOCKET_NAME
    if len(os.fsencode(path)) < 100 or not os.path.isdir("/proc/self/fd"):
        yield str(path)
        return
    fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    try:
        yield f"/proc/self/fd/{fd}/{SOCKET_NAME}"
    finally:
        os.close(fd)


def _read_line(stream, limit: int = MAX_LINE_BYTES) -> dict | None:
    """One JSON object line, or None at EOF, on a broken or oversized line."""
    line = stream.readline(limit + 1)
    if not line or len(line) > limit or not line.endswith(b"\n"):
        return None
    try:
        message = json.loads(line)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


def _line(message: dict) -> bytes:
    return json.dumps(message, separators=(",", ":"), default=str).encode() + b"\n"


class HostLink:
    """The host's end, for one session: events go to `events(kind, **fields)`, approval requests
    to `approver` (None: every request is answered `no_approver`). `close()` stops it and removes
    the socket; a session always closes its link."""

    def __init__(self, run_dir: Path, *, events: Callable[..., object] | None, approver: Callable[..., Any] | None, timeout_s: float):
        self.run_dir = Path(run_dir)
        self.events, self.approver, self.timeout_s = events, approver, timeout_s
        #: digests (16 hex) of the calls whose `tool_result` or denial arrived live
        self.reported: set[str] = set()
        self._ask_lock = threading.Lock()
        # an event is counted and delivered whole, or not after seal(): the host's sink
        # (core/events.py EventStream, which calls the request's on_event in the caller's
        # thread) runs under it, so a slow on_event delays seal(), and the session's end, by as
        # long (seal() is the kit's own, called from the session's thread, never from a sink)
        self._event_lock = threading.Lock()
        self._sealed = False
        self._serving: list[threading.Thread] = []
        self._peers: list[socket.socket] = []
        self._closed = threading.Event()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with _short_path(self.run_dir) as path:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
                self._sock.bind(path)
            os.chmod(self.run_dir / SOCKET_NAME, 0o600)
            self._sock.listen(MAX_PEERS)
        except OSError:
            self._sock.close()
            raise
        self._thread = threading.Thread(target=self._accept, name="hc-hostlink", daemon=True)
        self._thread.start()

    @classmethod
    def start(cls, run_dir: Path, **kwargs) -> "HostLink | None":
        """A link, or None where none can be had (no AF_UNIX): the session then runs without
        one, as before (approvals denied, bridge calls reported after the session)."""
        if not hasattr(socket, "AF_UNIX"):
            return None
        try:
            return cls(run_dir, **kwargs)
        except OSError:
            return None

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                peer, _ = self._sock.accept()
            except OSError:
                return
            if not _same_user(peer) or len(self._peers) >= MAX_PEERS:
                peer.close()
                continue
            self._peers.append(peer)
            thread = threading.Thread(target=self._serve, args=(peer,), name="hc-hostlink-peer", daemon=True)
            thread.start()
            self._serving.append(thread)  # started first: seal() joins it

    def _serve(self, peer: socket.socket) -> None:
        stream = peer.makefile("rb")
        try:
            while not self._closed.is_set():
                message = _read_line(stream)
                if message is None:
                    return
                if "event" in message:
                    self._event(message)
                elif "approve" in message:
                    peer.sendall(_line(self._answer(message.get("approve"))))
        except OSError:
            return
        finally:
            stream.close()
            peer.close()

    def _event(self, message: dict) -> None:
        kind, fields = message.get("event"), message.get("fields")
        if not isinstance(kind, str) or not isinstance(fields, dict):
            return
        digest = fields.get("digest")
        with self._event_lock:
            if self._sealed:
                return  # the session reports it from the bridge trace (seal())
            if kind == "tool_result" or (kind == "tool_decision" and fields.get("decision") == "deny"):
                if isinstance(digest, str):
                    self.reported.add(digest[:16])
            if self.events is not None:
                try:
                    self.events(kind, **{str(k): v for k, v in fields.items() if k not in ("kind", "seq", "session_id")})
                except Exception:  # a broken sink never breaks the link (events.py drops it itself)
                    pass

    def seal(self, wait_s: float = 1.0) -> set[str]:
        """At the session's end, before its bridge calls are reported from the trace: give the
        events already sent (the bridge is gone, its sockets at EOF) up to `wait_s` to be read,
        then deliver no more. Returns the digests delivered live, final from here on, so a call
        is reported once: live, or late from the trace, never both (a peer thread still reading
        under load delivered it live after the trace had reported it)."""
        end = time.monotonic() + wait_s
        for thread in list(self._serving):
            thread.join(timeout=max(0.0, end - time.monotonic()))
        with self._event_lock:
            self._sealed = True
            return set(self.reported)

    def _answer(self, raw: object) -> dict:
        from harnesscheck.core.policy import ApprovalRequest, ToolKind, _ask

        if self.approver is None:
            return {"answer": None, "code": "no_approver"}
        try:
            request = ApprovalRequest(
                tool=str(raw["tool"]),
                args=dict(raw["args"]),
                kind=ToolKind(raw["kind"]),
                path=raw.get("path"),
                digest=str(raw["digest"]),
                session=str(raw["session"]),
                root=str(raw["root"]),
                reason=str(raw.get("reason") or ""),
            )
        except (KeyError, TypeError, ValueError):
            return {"answer": None, "code": "approval_failed"}
        with self._ask_lock:  # one prompt at a time
            code, answer = _ask(self.approver, request, self.timeout_s)
        if answer is None:
            return {"answer": None, "code": code}
        return {"code": code, "answer": {"approve": answer.approve, "tools": list(answer.tools), "paths": list(answer.paths), "ttl_s": answer.ttl_s}}

    def close(self) -> None:
        self._closed.set()
        for s in [self._sock, *self._peers]:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        self._thread.join(timeout=2)
        try:
            os.unlink(self.run_dir / SOCKET_NAME)
        except OSError:
            pass


def _same_user(peer: socket.socket) -> bool:
    """The peer runs as this process's user (SO_PEERCRED); where that cannot be read, the
    run dir's mode (0700) is the only gate, as for every file in it."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return True
    try:
        _pid, uid, _gid = struct.unpack("3i", peer.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i")))
    except OSError:
        return False
    return uid == os.getuid()


class LinkClient:
    """The bridge's end: `event(kind, **fields)` (a PolicyEngine sink) and `approve(request)` (a
    PolicyEngine approver). Connects on first use; every failure is a drop (events) or a raise
    (approvals: the engine counts it `approval_failed`, a deny)."""

    def __init__(self, run_dir: Path, *, timeout_s: float):
        self.run_dir, self.timeout_s = Path(run_dir), timeout_s
        self._sock: socket.socket | None = None
        self._stream = None
        self._lock = threading.Lock()
        self._broken = False

    def _connect(self) -> socket.socket:
        if self._sock is None:
            if self._broken:
                raise OSError("the host link is broken")
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                with _short_path(self.run_dir) as path:
                    sock.connect(path)
            except OSError:
                sock.close()
                self._broken = True
                raise
            self._sock, self._stream = sock, sock.makefile("rb")
        return self._sock

    def _fail(self) -> None:
        self._broken = True
        if self._sock is not None:
            self._sock.close()
        self._sock = self._stream = None

    def event(self, kind: str, **fields: Any) -> None:
        with self._lock:
            try:
                self._connect().sendall(_line({"event": kind, "fields": fields}))
            except OSError:
                self._fail()

    def approve(self, request) -> object:
        from harnesscheck.core.policy import ApprovalAnswer

        message = {
            "approve": {
                "tool": request.tool,
                "args": dict(request.args),
                "kind": request.kind.value,
                "path": request.path,
                "digest": request.digest,
                "session": request.session,
                "root": request.root,
                "reason": request.reason,
            }
        }
        with self._lock:
            try:
                sock = self._connect()
                sock.settimeout(self.timeout_s + 1.0)
                sock.sendall(_line(message))
                reply = _read_line(self._stream, 64 * 1024)
                sock.settimeout(None)
            except OSError:
                self._fail()
                raise
        if reply is None:
            self._fail()
            raise OSError("the host link answered nothing")
        answer = reply.get("answer")
        if not isinstance(answer, dict):
            if reply.get("code") == "approval_timeout":
                raise TimeoutError("the host's approver did not answer in time")  # counted approval_timeout
            return ApprovalAnswer(approve=False)
        ttl = answer.get("ttl_s")
        return ApprovalAnswer(
            approve=answer.get("approve") is True,
            tools=tuple(str(t) for t in answer.get("tools") or ()),
            paths=tuple(str(p) for p in answer.get("paths") or ()),
            ttl_s=float(ttl) if isinstance(ttl, (int, float)) else None,
        )
