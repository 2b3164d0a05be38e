"""The smallest honest MCP server: the floor a CLI's turn with tools pays for *some* bridge.

    python -I -S bench/_min_mcp.py TOOLS_JSON ROOT

Standard library only (no `mcp`, no pydantic): newline-delimited JSON-RPC on stdin/stdout,
`initialize`, `tools/list` (the tool definitions in TOOLS_JSON, the same list the bridge
serves: the CLI then offers the model the same tools), `tools/call` (read_file under ROOT,
anything else answered as an error), `ping`. No scope checks, no trace, no env scrub: what
the bridge does beyond this is what it costs. bench/bench_vs_sdk.py writes TOOLS_JSON.
"""

import json
import sys


def main() -> None:
    tools = json.load(open(sys.argv[1]))
    root = sys.argv[2]
    out = sys.stdout
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if "id" not in msg:
            continue  # notifications
        method, rid = msg.get("method"), msg["id"]
        if method == "initialize":
            version = (msg.get("params") or {}).get("protocolVersion") or "2025-06-18"
            result = {"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": {"name": "bridge", "version": "0"}}
        elif method == "tools/list":
            result = {"tools": tools}
        elif method == "tools/call":
            params = msg.get("params") or {}
            args = params.get("arguments") or {}
            try:
                if params.get("name") != "read_file":
                    raise OSError("unsupported")
                with open(root + "/" + str(args.get("path", "")), encoding="utf-8", errors="replace") as fh:
                    text, error = fh.read(65536), False
            except OSError as exc:
                text, error = f"refused: {exc}", True
            result = {"content": [{"type": "text", "text": text}], "isError": error}
        elif method == "ping":
            result = {}
        else:
            out.write(json.dumps({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "not found"}}) + "\n")
            out.flush()
            continue
        out.write(json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
