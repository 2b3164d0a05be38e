"""The post-run audit's reader of zcode's event log (zcode --prompt's JSONL events).

Contract: doc/SPEC-audit.md. `read(auditor, event)` is called for each JSON event of the log
that holds one of READER.markers; it classifies every tool call the CLI shows (bridge, foreign
MCP server, built-in: read, write, shell, other, unknown) and reports it through the shared
`Auditor` (backends/audit.py), which binds paths, judges policy and keeps the flags.
"""

from __future__ import annotations

from harnesscheck.backends.audit import Auditor, AuditReader, _glob_joined

#: zcode's built-ins (the seed's 0.16.9 denylist and read allowlist, review §1.5), classified.
_ZCODE_READ_TOOLS = frozenset(
    {
        "Read",
        "Grep",
        "Glob",
        "LS",
        "TodoRead",
        "TodoWrite",
        "TaskOutput",
        "ReadSessionContext",
        "ListWorkflowRuns",
        "GetWorkflowRun",
        "ListSavedWorkflows",
        "ListModels",
    }
)

_ZCODE_WRITE_TOOLS = frozenset({"Edit", "Write", "MultiEdit", "NotebookEdit", "CreateWorkflow", "AmendWorkflow", "SaveWorkflow"})

_ZCODE_SHELL_TOOLS = frozenset({"Bash", "EvalWorkflowSnippet"})

_ZCODE_OTHER_NATIVE = frozenset(
    {
        "Agent",
        "Skill",
        "ExitPlanMode",
        "EnterPlanMode",
        "AskUserQuestion",
        "SendMessage",
        "WebFetch",
        "WebSearch",
        "ResumeWorkflowRun",
        "ResolveWorkflowQuestion",
        "TaskStop",
    }
)


def read(auditor: Auditor, ev: dict) -> None:
    """`tool.updated` events (once per toolCallId, whatever its `kind`: a stream that skips
    `scheduled` is still audited); any other event type naming a tool is format drift."""
    kind = str(ev.get("type", ""))
    if kind != "tool.updated":
        if "tool" in kind:
            auditor.flag("unknown_tool_event", f"zcode event type {kind!r}")
        return
    payload = ev.get("payload")
    if not isinstance(payload, dict) or not isinstance(payload.get("toolName"), str):
        auditor.flag("unknown_tool_event", "zcode tool.updated without a toolName")
        return
    call_id = payload.get("toolCallId")
    if not auditor._new_id(str(call_id) if call_id is not None else None, payload["toolName"]):
        return
    name = payload["toolName"]
    args = payload.get("input")
    if name.startswith("mcp__"):
        auditor.mcp_call(name.split("__")[1] if name.count("__") >= 2 else "", name)
        return
    known = name in _ZCODE_READ_TOOLS | _ZCODE_WRITE_TOOLS | _ZCODE_SHELL_TOOLS | _ZCODE_OTHER_NATIVE
    if name == "Glob" and isinstance(args, dict):
        args = _glob_joined(args)
    auditor._native_used(name, args, shell=name in _ZCODE_SHELL_TOOLS, write=name in _ZCODE_WRITE_TOOLS, known=known)


#: This CLI's event-log reader, named by its kit profile (`audit_reader`), found by
#: backends/audit.py `reader_for` through the registry.
READER = AuditReader(
    name="zcode",
    markers=(b"tool",),
    read=read,
)
