"""The post-run audit's reader of deepseek's event log (the SDK driver's JSON-RPC `session.event` notifications).

Contract: doc/SPEC-audit.md. `read(auditor, event)` is called for each JSON event of the log
that holds one of READER.markers; it classifies every tool call the CLI shows (bridge, foreign
MCP server, built-in: read, write, shell, other, unknown) and reports it through the shared
`Auditor` (backends/audit.py), which binds paths, judges policy and keeps the flags.
"""

from __future__ import annotations

import json

from harnesscheck.backends.audit import Auditor, AuditReader

#: deepseek's 0.2.1rc2 sdk-profile built-ins (what the runtime offers with no patch).
_DSH_READ_TOOLS = frozenset({"read", "read_image", "glob", "grep"})

_DSH_WRITE_TOOLS = frozenset({"write", "edit"})

_DSH_SHELL_TOOLS = frozenset({"bash", "workflow", "job_kill", "job_list", "job_output"})

_DSH_OTHER_NATIVE = frozenset(
    {
        "web_fetch",
        "web_search",
        "subagent",
        "subagent_fork",
        "skill",
        "todo_write",
        "create_goal",
        "get_goal",
        "update_goal",
        "exit_plan_mode",
        "send_message",
        "interrupt_agent",
        "list_agents",
        "working_directory",
        "list_mcp_resources",
        "list_mcp_resource_templates",
        "read_mcp_resource",
    }
)


def read(auditor: Auditor, ev: dict) -> None:
    event = (ev.get("params") or {}).get("event") if isinstance(ev.get("params"), dict) else None
    if not isinstance(event, dict) or event.get("type") != "tool/call":
        return
    data = event.get("data") if isinstance(event.get("data"), dict) else {}
    if not auditor._new_id(data.get("callId"), data.get("name"), data.get("arguments")):
        return
    name = str(data.get("name") or "")
    if name.startswith("mcp__"):
        server = name[len("mcp__") :].split("__", 1)[0]
        auditor.mcp_call(server, f"deepseek MCP call to server {server!r}")
        return
    try:
        args = json.loads(data.get("arguments") or "{}")
    except (TypeError, ValueError):
        args = {}
    auditor._native_used(
        name,
        args,
        shell=name in _DSH_SHELL_TOOLS,
        write=name in _DSH_WRITE_TOOLS,
        known=name in _DSH_READ_TOOLS | _DSH_WRITE_TOOLS | _DSH_SHELL_TOOLS | _DSH_OTHER_NATIVE,
    )


#: This CLI's event-log reader, named by its kit profile (`audit_reader`), found by
#: backends/audit.py `reader_for` through the registry.
READER = AuditReader(
    name="deepseek",
    markers=(b"tool/call",),
    read=read,
)
