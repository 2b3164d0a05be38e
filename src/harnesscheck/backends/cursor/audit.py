"""The post-run audit's reader of cursor's event log (cursor-agent --print --output-format stream-json).

Contract: doc/SPEC-audit.md. `read(auditor, event)` is called for each JSON event of the log
that holds one of READER.markers; it classifies every tool call the CLI shows (bridge, foreign
MCP server, built-in: read, write, shell, other, unknown) and reports it through the shared
`Auditor` (backends/audit.py), which binds paths, judges policy and keeps the flags.
"""

from __future__ import annotations

import json
from typing import Any

from harnesscheck.backends.audit import Auditor, AuditReader

_CURSOR_READ_TOOLS = frozenset({"read", "ls", "glob", "grep", "codebaseSearch", "semSearch", "readLints", "listDir", "fileSearch"})

_CURSOR_WRITE_TOOLS = frozenset({"write", "edit", "delete", "strReplace", "multiEdit", "applyPatch", "editNotebook", "move", "rename"})

_CURSOR_SHELL_TOOLS = frozenset({"shell", "terminal", "runTerminalCommand", "bash"})

_CURSOR_OTHER_NATIVE = frozenset({"webSearch", "webFetch", "todo", "updateTodos", "askUserQuestion", "task"})


def read(auditor: Auditor, ev: dict) -> None:
    kind = str(ev.get("type", ""))
    if kind != "tool_call":
        if "tool" in kind:
            auditor.flag("unknown_tool_event", f"cursor event type {kind!r}")
        return
    call = ev.get("tool_call")
    if not isinstance(call, dict) or not call:
        auditor.flag("unknown_tool_event", "cursor tool_call without a tool")
        return
    key, body = next(iter(call.items()))
    if not auditor._new_id(ev.get("call_id"), key, body.get("name") if isinstance(body, dict) else None):
        return
    body = body if isinstance(body, dict) else {}
    if key == "function":
        name = str(body.get("name", ""))
        try:
            args = json.loads(body.get("arguments") or "{}")
        except (TypeError, ValueError):
            args = {}
    else:
        name = key[: -len("ToolCall")] if key.endswith("ToolCall") else key
        args = body.get("args")
    if name == "mcp" or name.startswith("mcp__"):
        server = _cursor_mcp_server(name, args)
        auditor.mcp_call(server, f"cursor MCP call to server {server!r}")
        return
    known = name in _CURSOR_READ_TOOLS | _CURSOR_WRITE_TOOLS | _CURSOR_SHELL_TOOLS | _CURSOR_OTHER_NATIVE
    auditor._native_used(name, args, shell=name in _CURSOR_SHELL_TOOLS, write=name in _CURSOR_WRITE_TOOLS, known=known)


def _cursor_mcp_server(name: str, args: Any) -> str:
    if name.startswith("mcp__"):
        parts = name.split("__")
        return parts[1] if len(parts) >= 3 else ""
    if isinstance(args, dict):
        for key in ("providerIdentifier", "serverName", "server", "provider"):
            if isinstance(args.get(key), str):
                return args[key]
        tool = args.get("toolName") or args.get("name")
        if isinstance(tool, str) and tool.startswith("mcp__"):
            return _cursor_mcp_server(tool, None)
    return ""


#: This CLI's event-log reader, named by its kit profile (`audit_reader`), found by
#: backends/audit.py `reader_for` through the registry.
READER = AuditReader(
    name="cursor",
    markers=(b"tool",),
    read=read,
)
