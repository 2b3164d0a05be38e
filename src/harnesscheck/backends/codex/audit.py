"""The post-run audit's reader of codex's event log (codex exec --json).

Contract: doc/SPEC-audit.md. `read(auditor, event)` is called for each JSON event of the log
that holds one of READER.markers; it classifies every tool call the CLI shows (bridge, foreign
MCP server, built-in: read, write, shell, other, unknown) and reports it through the shared
`Auditor` (backends/audit.py), which binds paths, judges policy and keeps the flags.
"""

from __future__ import annotations

from harnesscheck.backends.audit import Auditor, AuditReader


def read(auditor: Auditor, ev: dict) -> None:
    kind = str(ev.get("type", ""))
    if not kind.startswith("item."):
        if "tool" in kind or "exec" in kind or "patch" in kind:
            auditor.flag("unknown_tool_event", f"codex event type {kind!r}")
        return
    item = ev.get("item")
    if not isinstance(item, dict):
        return
    itype = str(item.get("type", ""))
    if itype in ("agent_message", "reasoning", "todo_list", "plan", "error"):
        return
    status = item.get("status")
    if itype == "mcp_tool_call":
        if not auditor._new_id(item.get("id"), itype, item.get("server"), item.get("tool")):
            return
        auditor.mcp_call(item.get("server"), f"{item.get('server')}.{item.get('tool')}")
        return
    if itype == "command_execution":
        # a declined command is seen first as started (in_progress) in some builds:
        # only the completed item tells; so judge on item.completed when present.
        if kind != "item.completed" and status != "declined":
            auditor.started_items.setdefault(str(item.get("id")), itype)
            return
        if not auditor._new_id(item.get("id"), itype, item.get("command")):
            return
        auditor.started_items.pop(str(item.get("id")), None)
        if status == "declined":
            auditor.flag("native_tool_refused_by_cli", f"command_execution: {str(item.get('command'))[:200]}")
            return
        auditor._native_used("command_execution", {"command": item.get("command")}, shell=True, write=False, known=True)
        return
    if itype == "file_change":
        if not auditor._new_id(item.get("id"), itype):
            return
        changes = item.get("changes") if isinstance(item.get("changes"), list) else []
        auditor._native_used("file_change", None, shell=False, write=True, known=True)
        for ch in changes[:1000]:
            if isinstance(ch, dict) and isinstance(ch.get("path"), str):
                auditor._paths("file_change", {"path": ch["path"]})
        return
    if itype in ("web_search", "collab_tool_call", "image_view", "view_image"):
        if not auditor._new_id(item.get("id"), itype):
            return
        auditor._native_used(itype, None, shell=False, write=False, known=True)
        return
    if not auditor._new_id(item.get("id"), itype):
        return
    auditor.flag("unknown_tool_event", f"codex item type {itype!r}")


def finish(auditor: Auditor) -> None:
    """At the end of the log: a command item seen started and never completed is judged as run
    (fail closed: the log may be truncated)."""
    for item_id in auditor.started_items:
        auditor._native_used("command_execution", None, shell=True, write=False, known=True)
    auditor.started_items.clear()


#: This CLI's event-log reader, named by its kit profile (`audit_reader`), found by
#: backends/audit.py `reader_for` through the registry.
READER = AuditReader(
    name="codex",
    markers=(b'"item.', b"tool", b"exec", b"patch"),
    read=read,
    finish=finish,
)
