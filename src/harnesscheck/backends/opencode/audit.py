"""The post-run audit's reader of opencode's event log (opencode run --format json).

Contract: doc/SPEC-audit.md. `read(auditor, event)` is called for each JSON event of the log
that holds one of READER.markers; it classifies every tool call the CLI shows (bridge, foreign
MCP server, built-in: read, write, shell, other, unknown) and reports it through the shared
`Auditor` (backends/audit.py), which binds paths, judges policy and keeps the flags.
"""

from __future__ import annotations

from harnesscheck.backends.audit import BRIDGE_SERVER, Auditor, AuditReader

#: opencode 1.18's built-ins (the 10 it offered by default at loopback, plus the ones other
#: configurations or builds register); an MCP tool is `<server>_<tool>` (bridge: `bridge_*`).
_OPENCODE_READ_TOOLS = frozenset({"read", "glob", "grep", "list", "lsp", "todoread", "todowrite"})

_OPENCODE_WRITE_TOOLS = frozenset({"edit", "write", "patch", "apply_patch", "multiedit"})

_OPENCODE_SHELL_TOOLS = frozenset({"bash"})

_OPENCODE_OTHER_NATIVE = frozenset({"webfetch", "websearch", "codesearch", "task", "skill", "question", "batch", "invalid"})


def read(auditor: Auditor, ev: dict) -> None:
    """`opencode run --format json`: a tool call is one `tool_use` event (on completion or
    error) whose `part.tool` is a built-in name or `<mcp server>_<tool>`."""
    kind = str(ev.get("type", ""))
    if kind != "tool_use":
        if "tool" in kind:
            auditor.flag("unknown_tool_event", f"opencode event type {kind!r}")
        return
    part = ev.get("part") if isinstance(ev.get("part"), dict) else {}
    name = str(part.get("tool") or "")
    if not name:
        auditor.flag("unknown_tool_event", "opencode tool_use without a tool")
        return
    state = part.get("state") if isinstance(part.get("state"), dict) else {}
    if not auditor._new_id(str(part.get("callID") or part.get("id") or "") or None, name, state.get("input")):
        return
    if name.startswith(BRIDGE_SERVER + "_"):
        auditor.bridge_tool_uses += 1
        return
    known = name in _OPENCODE_READ_TOOLS | _OPENCODE_WRITE_TOOLS | _OPENCODE_SHELL_TOOLS | _OPENCODE_OTHER_NATIVE
    if not known and "_" in name:
        auditor.flag("foreign_mcp_tool", f"opencode MCP-style tool {name!r} (not the {BRIDGE_SERVER} server)")
    auditor._native_used(name, state.get("input"), shell=name in _OPENCODE_SHELL_TOOLS, write=name in _OPENCODE_WRITE_TOOLS, known=known)


#: This CLI's event-log reader, named by its kit profile (`audit_reader`), found by
#: backends/audit.py `reader_for` through the registry.
READER = AuditReader(
    name="opencode",
    markers=(b"tool",),
    read=read,
)
