"""The post-run audit's reader of claude's event log (claude -p --output-format stream-json).

Contract: doc/SPEC-audit.md. `read(auditor, event)` is called for each JSON event of the log
that holds one of READER.markers; it classifies every tool call the CLI shows (bridge, foreign
MCP server, built-in: read, write, shell, other, unknown) and reports it through the shared
`Auditor` (backends/audit.py), which binds paths, judges policy and keeps the flags.
"""

from __future__ import annotations

from typing import Any

from harnesscheck.backends.audit import BRIDGE_SERVER, MAX_TRACKED_IDS, Auditor, AuditReader

_CLAUDE_READ_TOOLS = frozenset({"Read", "Glob", "Grep", "LS", "NotebookRead", "TodoRead", "TodoWrite"})

_CLAUDE_WRITE_TOOLS = frozenset({"Write", "Edit", "MultiEdit", "NotebookEdit"})

_CLAUDE_SHELL_TOOLS = frozenset({"Bash", "BashOutput", "KillShell", "KillBash", "Monitor"})

_CLAUDE_OTHER_NATIVE = frozenset(
    {
        "WebFetch",
        "WebSearch",
        "Task",
        "Agent",
        "TaskOutput",
        "TaskStop",
        "Skill",
        "ExitPlanMode",
        "EnterPlanMode",
        "AskUserQuestion",
        "SlashCommand",
        "ToolSearch",
        "EnterWorktree",
    }
)

#: The CLI's own words refusing a disabled built-in, each seen in a recorded refusal
#: (fixtures/claude, fixtures/claude/drift/<version>.json; tests/loopback/test_loopback_drift_facts.py
#: fails on a marker no recording shows): claude 2.1.197 "Read exists but is not enabled in
#: this context", 2.1.332 "Read is disabled for this session".
_REFUSED_MARKERS = (
    "No such tool available",
    "is not enabled in this context",
    "is disabled for this session",
)


def read(auditor: Auditor, ev: dict) -> None:
    kind = ev.get("type")
    if kind == "system" and ev.get("subtype") == "init":
        tools = ev.get("tools") if isinstance(ev.get("tools"), list) else []
        native = [t for t in tools if isinstance(t, str) and not t.startswith("mcp__")]
        if native and auditor.facts.builtin_tools_off:
            auditor.flag("native_tools_offered", ", ".join(native[:30]))
        servers = ev.get("mcp_servers") if isinstance(ev.get("mcp_servers"), list) else []
        for srv in servers:
            name = srv.get("name") if isinstance(srv, dict) else None
            if name and name != BRIDGE_SERVER:
                auditor.flag("foreign_mcp_tool", f"MCP server {name!r} loaded ({srv.get('status')})")
        return
    message = ev.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return
    for block in content:
        if not isinstance(block, dict):
            continue
        btype = str(block.get("type", ""))
        if kind == "assistant" and btype in ("tool_use", "server_tool_use"):
            if not auditor._new_id(block.get("id"), block.get("name"), block.get("input")):
                continue
            _tool_use(auditor, str(block.get("name", "")), block.get("input"), block.get("id"), btype)
        elif kind == "user" and btype == "tool_result":
            _tool_result(auditor, block, ran=isinstance(ev.get("tool_use_result"), dict))
        elif "tool" in btype and btype not in ("tool_use", "tool_result", "server_tool_use"):
            auditor.flag("unknown_tool_event", f"claude content block type {btype!r}")


def _tool_use(auditor: Auditor, name: str, args: Any, call_id: Any, btype: str) -> None:
    if name.startswith("mcp__"):
        auditor.mcp_call(name.split("__")[1] if name.count("__") >= 2 else "", name)
        return
    if btype == "server_tool_use":
        auditor._native_used(name, args, shell=False, write=False, known=True)
        return
    known = name in _CLAUDE_READ_TOOLS | _CLAUDE_WRITE_TOOLS | _CLAUDE_SHELL_TOOLS | _CLAUDE_OTHER_NATIVE
    if isinstance(call_id, str) and len(auditor._pending_native) < MAX_TRACKED_IDS:
        auditor._settle_reused(call_id)
        auditor._pending_native[call_id] = name
        auditor._pending_args[call_id] = (args, known)
        return
    auditor._native_used(name, args, shell=name in _CLAUDE_SHELL_TOOLS, write=name in _CLAUDE_WRITE_TOOLS, known=known)


def _tool_result(auditor: Auditor, block: dict, ran: bool = False) -> None:
    """`ran`: the event carried the tool's structured result (claude's `tool_use_result`
    object: stdout, stderr, ...): the tool ran, whatever its text says."""
    call_id = block.get("tool_use_id")
    name = auditor._pending_native.pop(call_id, None) if isinstance(call_id, str) else None
    if name is None:
        return
    args, known = auditor._pending_args.pop(call_id, (None, False))
    if block.get("is_error") and _refused_by_claude(block.get("content"), name, ran):
        auditor.flag("native_tool_refused_by_cli", name)
        return
    auditor._native_used(name, args, shell=name in _CLAUDE_SHELL_TOOLS, write=name in _CLAUDE_WRITE_TOOLS, known=known)


def _refused_by_claude(content: Any, name: str, ran: bool) -> bool:
    """claude's own refusal of a disabled built-in, and nothing else: the whole result is its
    `<tool_use_error>` naming this very tool as unavailable, with one of its refusal phrases,
    and the event carries no structured result of a run. Text inside a tool's output (a Bash
    command that prints the phrase, a file that holds it) is never a refusal."""
    if ran:
        return False
    if isinstance(content, list):
        texts = [c.get("text") for c in content if isinstance(c, dict) and c.get("type", "text") == "text"]
        if len(texts) != 1 or not isinstance(texts[0], str):
            return False
        content = texts[0]
    if not isinstance(content, str) or len(content) > 1000:
        return False
    text = content.strip()
    if not (text.startswith("<tool_use_error>") and text.endswith("</tool_use_error>")):
        return False
    inner = text[len("<tool_use_error>") : -len("</tool_use_error>")].strip()
    if inner.startswith("Error: "):
        inner = inner[len("Error: ") :]
    if not inner.startswith(f"No such tool available: {name}"):
        return False
    return any(m in inner for m in _REFUSED_MARKERS)


#: This CLI's event-log reader, named by its kit profile (`audit_reader`), found by
#: backends/audit.py `reader_for` through the registry.
READER = AuditReader(
    name="claude",
    markers=(b"tool_", b'"init"'),
    read=read,
    pending_shell_tools=_CLAUDE_SHELL_TOOLS,
    pending_write_tools=_CLAUDE_WRITE_TOOLS,
)
