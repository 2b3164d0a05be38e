"""The stdio framing of `harnesscheck acp serve`: JSON-RPC 2.0, one message per line.

Requirements (doc/SPEC-acp-serve.md, "Wire"):
- stdout carries only JSON-RPC: the server writes through a private duplicate of fd 1 and
  points fd 1 (and `sys.stdout`) at stderr, so a stray print anywhere cannot corrupt the
  stream; every message is one line of UTF-8 (`ensure_ascii=False`, a lone surrogate replaced),
  written whole under one lock.
- stdin is read in bounded chunks and split on b"\\n" (a trailing "\\r" tolerated); a line
  longer than `max_line_bytes` is discarded up to its newline and reported as OVERSIZE (the
  server answers it with an error, never silently); bytes after the last newline at EOF count
  as a last line. A stop fd (written by the signal handlers) ends the reading like EOF, so a
  signal never interrupts a write half-way.
- Nothing here knows ACP: the agent (acpserve/agent.py) gives meaning to the messages.
"""

from __future__ import annotations

import json
import os
import select
import sys
import threading
from typing import Any, Iterator

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
AUTH_REQUIRED = -32000  # ACP: "Authentication required"

DEFAULT_MAX_LINE_BYTES = 16 * 1024 * 1024
_CHUNK = 64 * 1024

#: A line that was longer than the limit (its bytes were dropped up to the newline).
OVERSIZE = object()


def read_lines(fd: int, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, stop_fd: int | None = None) -> Iterator[bytes | object]:
    """Lines of `fd` (without the newline), OVERSIZE for each line past the limit; ends at EOF,
    or as soon as `stop_fd` is readable (a signal handler writes to it)."""
    buf = bytearray()
    dropping = False
    while True:
        if stop_fd is not None:
            try:
                ready, _, _ = select.select([fd, stop_fd], [], [])
            except InterruptedError:
                continue
            if stop_fd in ready:
                return
        try:
            chunk = os.read(fd, _CHUNK)
        except InterruptedError:
            continue
        except OSError:
            chunk = b""
        if not chunk:
            if buf and not dropping:
                yield _strip_cr(bytes(buf))
            elif dropping:
                yield OVERSIZE
            return
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            piece = chunk[start:] if nl < 0 else chunk[start:nl]
            if not dropping:
                if len(buf) + len(piece) > max_line_bytes:
                    dropping = True
                    buf.clear()
                else:
                    buf += piece
            if nl < 0:
                break
            if dropping:
                yield OVERSIZE
                dropping = False
            else:
                yield _strip_cr(bytes(buf))
            buf.clear()
            start = nl + 1


def _strip_cr(line: bytes) -> bytes:
    return line[:-1] if line.endswith(b"\r") else line


def take_stdout() -> int:
    """A private duplicate of fd 1 for the protocol; fd 1 and sys.stdout then go to stderr."""
    sys.stdout.flush()
    proto = os.dup(1)
    os.set_inheritable(proto, False)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return proto


class Writer:
    """Writes whole JSON-RPC messages to an fd, one line each, one lock. `closed` once the
    reader of the other end is gone (EPIPE): every later write is dropped."""

    def __init__(self, fd: int):
        self.fd = fd
        self.closed = False
        self._lock = threading.Lock()

    def send(self, message: dict[str, Any]) -> bool:
        data = (json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False) + "\n").encode("utf-8", "replace")
        with self._lock:
            if self.closed:
                return False
            view = memoryview(data)
            try:
                while view:
                    view = view[os.write(self.fd, view) :]
            except OSError:
                self.closed = True
                return False
        return True

    def result(self, msg_id: Any, result: Any) -> bool:
        return self.send({"jsonrpc": "2.0", "id": msg_id, "result": result})

    def error(self, msg_id: Any, code: int, message: str, data: Any = None) -> bool:
        error: dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        return self.send({"jsonrpc": "2.0", "id": msg_id, "error": error})

    def notify(self, method: str, params: dict[str, Any]) -> bool:
        return self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def request(self, msg_id: Any, method: str, params: dict[str, Any]) -> bool:
        return self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
