"""DeepSeek Harness's kit profile (backends/_kit_profile.py): what the conformance kit knows of
the deepseek SDK and its dsh runtime.

Requirements kept here: the facts its fixtures state (`assistant/message` usage inside the
runtime's JSON-RPC notifications), its stall text, its patch file (a Cordis patch list whose
inserted MCP-client entries are the servers), the tools the fake runtime offers (the sdk
profile's tool plugins the patch leaves on, plus what its MCP servers listed), and the
launcher the loopback level starts an SDK directory through.
"""

from __future__ import annotations

import json
from pathlib import Path

from harnesscheck.backends._kit_profile import KitProfile, first_text_before_hang
from harnesscheck.backends.deepseek.audit import READER
from harnesscheck.backends.deepseek.doctor import DOCTOR, PIP_RUNTIME
from harnesscheck.core.contracts import Usage


def _runtime_event(event: dict) -> dict | None:
    params = event.get("params")
    ev = params.get("event") if isinstance(params, dict) else None
    return ev if isinstance(ev, dict) else None


def fixture_facts(events: list[dict], values, facts) -> None:
    for event in events:
        ev = _runtime_event(event)
        if ev is not None and ev.get("type") == "assistant/message" and isinstance((ev.get("data") or {}).get("usage"), dict):
            u = ev["data"]["usage"]
            turn = Usage(input=int(u.get("inputTokens", 0)), output=int(u.get("outputTokens", 0)))
            facts.usage = turn if facts.usage is None else facts.usage + turn


def _assistant_text(event: dict) -> str | None:
    ev = _runtime_event(event)
    if ev is None or ev.get("type") != "assistant/message":
        return None
    content = ((ev.get("data") or {}).get("message") or {}).get("content") or []
    return "".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")


def stall_text(scenario: dict) -> str | None:
    return first_text_before_hang(scenario, _assistant_text)


def patch_file(path: Path) -> dict | None:
    """The driver's `dsh-patch.yml` (JSON): its inserted MCP-client entries."""
    if path.name != "dsh-patch.yml":
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if isinstance(data, list):
        return {
            str(e["config"].get("serverName")): dict(e["config"])
            for p in data
            if isinstance(p, dict)
            for e in p.get("insert") or []
            if isinstance(e, dict) and isinstance(e.get("config"), dict) and e.get("name") == "@deepseek-ai/dsh-mcp-client"
        }
    return dict(data.get("mcpServers") or {}) if isinstance(data, dict) else {}


#: The deepseek 0.2.1rc2 `sdk` profile's tool plugins and the tools each offers, as the real
#: runtime offered them at the wire with no patch (doc/SPEC-deepseek.md): the offline level's
#: model of the composition, so a patch that leaves one on is seen offering its tools.
DSH_PLUGIN_TOOLS: dict[str, tuple[str, ...]] = {
    "tool-bash": ("bash",),
    "tool-jobs": ("job_kill", "job_list", "job_output"),
    "tool-fs": ("read", "read_image", "write", "edit"),
    "tool-fs-search": ("glob", "grep"),
    "tool-skill": ("skill",),
    "plan-mode": ("exit_plan_mode",),
    "tool-subagent-control": ("interrupt_agent", "send_message"),
    "tool-subagent-list-agents": ("list_agents",),
    "tool-subagent": ("subagent",),
    "tool-subagent-fork": ("subagent_fork",),
    "tool-workflow": ("workflow",),
    "tool-todo": ("todo_write",),
    "tool-goal": ("create_goal", "get_goal", "update_goal"),
    "tool-web": ("web_fetch", "web_search"),
    "tool-working-directory": ("working_directory",),
    "mcp-resources": ("list_mcp_resource_templates", "list_mcp_resources", "read_mcp_resource"),
}


def dsh_offered(run, servers: dict | None = None) -> list[str] | None:
    """What the fake deepseek runtime offers: the tools its MCP servers listed (bridge tools by
    their bare name, another server's as `mcp__<server>__<tool>`), plus `builtin:<tool>` for every
    tool plugin the patches in the driver request do not disable. None before any session ran."""
    children = [c for c in run.children if c.get("mcp_configs") is not None]
    if not children:
        return None
    disabled: set[str] = set()
    for content in (children[-1].get("mcp_configs") or {}).values():
        try:
            patches = json.loads(content)
        except ValueError:
            continue
        for p in patches if isinstance(patches, list) else []:
            if isinstance(p, dict) and p.get("id") and p.get("disabled") is True:
                disabled.add(str(p["id"]))
    offered = [f"builtin:{t}" for plugin, tools in DSH_PLUGIN_TOOLS.items() if plugin not in disabled for t in tools]
    record = getattr(run, "record_path", None)
    for rec in _record_lines(record):
        if rec.get("kind") == "mcp_connected" and rec.get("pid") == children[-1].get("ns_pid", children[-1].get("pid")):
            name = rec.get("name")
            offered += [t if name == "bridge" else f"mcp__{name}__{t}" for t in rec.get("tools") or []]
    return offered


def _launcher(sdk: Path) -> Path:
    from harnesscheck.backends.deepseek import ensure_launcher

    return ensure_launcher(sdk)


def _record_lines(path) -> list[dict]:
    out = []
    try:
        text = Path(path).read_text(encoding="utf-8") if path else ""
    except OSError:
        return out
    for line in text.split("\n"):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def loopback_builtin_read(path: str) -> tuple[str, dict]:
    return "bash", {"command": f"cat {path}"}


PROFILE = KitProfile(
    audit_reader=READER,
    fake_name="deepseek",
    fixture_facts=fixture_facts,
    stall_text=stall_text,
    loopback_builtin_read=loopback_builtin_read,
    mcp_config_file=patch_file,
    tools_offered=dsh_offered,
    sdk_launcher=_launcher,  # an SDK dir: the wrapper execs the driver's launcher beside that SDK
    doctor=DOCTOR,
    pip_runtime=PIP_RUNTIME,
)
