"""A small raw JSON-RPC client for ACP agents over stdio (tests only; self-contained).

Raw on purpose: it can send any bytes (a malformed line, a bad id), it keeps every line the
agent wrote to stdout (so a test can say stdout carried only JSON-RPC), and it answers the
agent's `session/request_permission` with whatever the test chooses. Standard library only.

    client = AcpClient.spawn([...argv...], env=env)
    client.request("initialize", {"protocolVersion": 1})
    sid = client.request("session/new", {"cwd": str(root), "mcpServers": []})["result"]["sessionId"]
    answer = client.request("session/prompt", {...}, on_permission=lambda req: {"outcome": {"outcome": "selected", "optionId": "allow-once"}})
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
from typing import Any, Callable


class AcpClient:
    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.lines: list[bytes] = []  # every stdout line, raw
        self.messages: list[dict] = []  # every parsed message, in order
        self._inbox: "queue.Queue[dict | None]" = queue.Queue()
        self._next_id = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @classmethod
    def spawn(cls, argv: list[str], *, env: dict[str, str], cwd: str | None = None) -> "AcpClient":
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd, start_new_session=True)
        return cls(proc)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            try:
                msg = json.loads(line)
            except ValueError:
                msg = {"_unparsed": line.decode("utf-8", "replace")}
            self.messages.append(msg)
            self._inbox.put(msg)
        self._inbox.put(None)

    # -- sending ------------------------------------------------------------------------

    def send_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, message: dict) -> None:
        self.send_raw(json.dumps(message).encode("utf-8") + b"\n")

    def notify(self, method: str, params: dict) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def start(self, method: str, params: dict) -> int:
        self._next_id += 1
        self.send({"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params})
        return self._next_id

    def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()

    # -- receiving ----------------------------------------------------------------------

    def next_message(self, timeout: float = 30.0) -> dict:
        msg = self._inbox.get(timeout=timeout)
        if msg is None:
            raise EOFError("the agent closed its stdout")
        return msg

    def wait_for(
        self, msg_id: Any, *, timeout: float = 60.0, on_permission: Callable[[dict], dict] | None = None, on_message: Callable[[dict], None] | None = None
    ) -> dict:
        """Read until the answer to `msg_id`; answer agent requests on the way (permission by
        `on_permission`, or cancelled when none; anything else: method not found)."""
        end = time.monotonic() + timeout
        while True:
            msg = self.next_message(max(0.1, end - time.monotonic()))
            if on_message is not None:
                on_message(msg)
            if "method" in msg and "id" in msg:
                if msg["method"] == "session/request_permission":
                    result = on_permission(msg) if on_permission else {"outcome": {"outcome": "cancelled"}}
                    if result is not None:
                        self.send({"jsonrpc": "2.0", "id": msg["id"], "result": result})
                else:
                    self.send({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "Method not found"}})
                continue
            if msg.get("id") == msg_id and ("result" in msg or "error" in msg):
                return msg

    def request(self, method: str, params: dict, **kwargs: Any) -> dict:
        return self.wait_for(self.start(method, params), **kwargs)

    def updates(self, session_id: str | None = None) -> list[dict]:
        return [
            m["params"]["update"]
            for m in self.messages
            if m.get("method") == "session/update" and (session_id is None or m["params"].get("sessionId") == session_id)
        ]

    def finish(self, timeout: float = 30.0) -> int:
        """Close stdin, wait for the exit; kill the group if it does not exit (and say so)."""
        try:
            self.close_stdin()
        except (OSError, ValueError):
            pass
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            self.proc.wait()
            raise

    def stderr_text(self) -> str:
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode("utf-8", "replace")
