"""A known-bad bridge (tests/mutants/harness.py ConfiguresASilentBridge): the real bridge behind
a relay that drops every request line that is not a well-formed JSON-RPC 2.0 object, without
an answer, as the MCP SDK's reader did (issue 17 finding 8). Calls with bad tool names or
arguments are well-formed and pass through: only malformed requests meet silence.

Run as `<python> _silent_bridge.py <bridge argv...>`; stdlib only."""

from __future__ import annotations

import json
import subprocess
import sys


def well_formed(line: bytes) -> bool:
    try:
        msg = json.loads(line)
    except ValueError:
        return False
    if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0":
        return False
    if "id" in msg and (isinstance(msg["id"], bool) or not isinstance(msg["id"], (str, int))):
        return False
    if "method" not in msg:
        return "id" in msg and ("result" in msg or "error" in msg)  # a response to the bridge
    return isinstance(msg["method"], str) and isinstance(msg.get("params", {}), dict)


def main() -> int:
    child = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE)  # stdout, stderr: ours
    try:
        for line in sys.stdin.buffer:
            if line.strip() and well_formed(line):
                child.stdin.write(line)
                child.stdin.flush()
    except BrokenPipeError:
        pass
    finally:
        try:
            child.stdin.close()
        except BrokenPipeError:
            pass
    return child.wait()


if __name__ == "__main__":
    sys.exit(main())
