"""The post-run audit's reader of gemini's event log (gemini -p --output-format stream-json).

Contract: doc/SPEC-audit.md. `read(auditor, event)` is called for each JSON event of the log
that holds one of READER.markers; it classifies every tool call the CLI shows (bridge, foreign
MCP server, built-in: read, write, shell, other, unknown) and reports it through the shared
`Auditor` (backends/audit.py), which binds paths, judges policy and keeps the flags.
"""

from __future__ import annotations

from harnesscheck.backends.audit import BRIDGE_SERVER, MAX_TRACKED_IDS, Auditor, AuditReader

#: gemini-cli 0.61.0 built-ins (tool names as its stream-json `tool_use.tool_name` gives them).
_GEMINI_READ_TOOLS = frozenset(
    {
        "read_file",
        "read_many_files",
        "list_directory",
        "glob",
        "grep_search",
        "search_file_content",
        "read_mcp_resource",
        "list_mcp_resources",
        "list_background_processes",
        "read_background_output",
    }
)

_GEMINI_WRITE_TOOLS = frozenset({"write_file", "replace", "edit", "save_memory", "write_todos"})

_GEMINI_SHELL_TOOLS = frozenset({"run_shell_command"})

_GEMINI_OTHER_NATIVE = frozenset(
    {
        "google_web_search",
        "web_fetch",
        "update_topic",
        "enter_plan_mode",
        "exit_plan_mode",
        "invoke_agent",
        "activate_skill",
        "ask_user",
        "codebase_investigator",
        "cli_help",
    }
)

#: `tool_result.error.type` values with which gemini-cli refused a call without running it.
_GEMINI_REFUSED_TYPES = frozenset({"tool_not_registered", "invalid_tool_params"})


def read(auditor: Auditor, ev: dict) -> None:
    """`tool_use{tool_name, tool_id, parameters}` / `tool_result{tool_id, status, error}`:
    `mcp_bridge_<tool>` is a bridge call, `mcp_<other>_...` a foreign MCP tool, anything
    else a built-in, judged when its result says whether the CLI refused it."""
    kind = str(ev.get("type", ""))
    if kind == "tool_use":
        call_id = ev.get("tool_id")
        if not auditor._new_id(call_id if isinstance(call_id, str) else None, ev.get("tool_name"), ev.get("parameters")):
            return
        name = str(ev.get("tool_name") or "")
        if not name:
            auditor.flag("unknown_tool_event", "gemini tool_use without a tool_name")
            return
        if name.startswith(f"mcp_{BRIDGE_SERVER}_"):
            auditor.bridge_tool_uses += 1
            return
        if name.startswith("mcp_"):
            auditor.flag("foreign_mcp_tool", name)
            return
        args = ev.get("parameters")
        known = name in _GEMINI_READ_TOOLS | _GEMINI_WRITE_TOOLS | _GEMINI_SHELL_TOOLS | _GEMINI_OTHER_NATIVE
        if isinstance(call_id, str) and len(auditor._pending_native) < MAX_TRACKED_IDS:
            auditor._settle_reused(call_id)
            auditor._pending_native[call_id] = name
            auditor._pending_args[call_id] = (args, known)
            return
        auditor._native_used(name, args, shell=name in _GEMINI_SHELL_TOOLS, write=name in _GEMINI_WRITE_TOOLS, known=known)
    elif kind == "tool_result":
        call_id = ev.get("tool_id")
        name = auditor._pending_native.pop(call_id, None) if isinstance(call_id, str) else None
        if name is None:
            return
        args, known = auditor._pending_args.pop(call_id, (None, False))
        error = ev.get("error") if isinstance(ev.get("error"), dict) else {}
        if ev.get("status") == "error" and error.get("type") in _GEMINI_REFUSED_TYPES:
            auditor.flag("native_tool_refused_by_cli", name)
            return
        auditor._native_used(name, args, shell=name in _GEMINI_SHELL_TOOLS, write=name in _GEMINI_WRITE_TOOLS, known=known)
    elif "tool" in kind:
        auditor.flag("unknown_tool_event", f"gemini event type {kind!r}")


#: This CLI's event-log reader, named by its kit profile (`audit_reader`), found by
#: backends/audit.py `reader_for` through the registry.
READER = AuditReader(
    name="gemini",
    markers=(b"tool",),
    read=read,
    pending_shell_tools=_GEMINI_SHELL_TOOLS,
    pending_write_tools=_GEMINI_WRITE_TOOLS,
)
