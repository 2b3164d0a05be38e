"""zcode's kit profile (backends/_kit_profile.py): what the conformance kit knows of `zcode --prompt`.

Requirements kept here: the facts its fixtures state (`result` usage, `session.updated`
modelId), its stall text (the `model.streaming` deltas before the hang, joined), the built-in
calls a hostile model makes through it (`tool.updated` scheduled/started), its project config
(`.zcode/config.json` `mcp.servers`), its login and stores.
"""

from __future__ import annotations

import json
from pathlib import Path

from harnesscheck.backends._kit_profile import KitProfile
from harnesscheck.backends.zcode.audit import READER
from harnesscheck.core.contracts import Usage


def fixture_facts(events: list[dict], values, facts) -> None:
    for event in events:
        if event.get("type") == "result" and isinstance(event.get("usage"), dict):
            u = event["usage"]
            facts.usage = Usage(input=int(u.get("inputTokens", 0)), output=int(u.get("outputTokens", 0)))
        if event.get("type") == "session.updated":
            served = (event.get("payload") or {}).get("modelId")
            if isinstance(served, str):
                facts.served_model = values.get(served, served)


def stall_text(scenario: dict) -> str | None:
    """The streamed deltas before the hang, joined (None if none)."""
    deltas = []
    for step in scenario.get("steps", []):
        if "hang" in step:
            return "".join(deltas) or None
        event = step.get("emit")
        if isinstance(event, dict) and event.get("type") == "model.streaming":
            delta = (event.get("payload") or {}).get("delta")
            deltas.append(delta if isinstance(delta, str) else "")
    return None


def hostile_steps(tool: str, args: dict) -> list[dict]:
    payload = {"toolCallId": "h1", "toolName": tool}
    return [
        {"emit": {"type": "tool.updated", "payload": {**payload, "kind": "scheduled", "input": args}}},
        {"emit": {"type": "tool.updated", "payload": {**payload, "kind": "started"}}},
    ]


def project_config(path: Path) -> dict | None:
    """`<project>/.zcode/config.json`: its `mcp.servers`."""
    if path.name != "config.json" or path.parent.name != ".zcode":
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    servers = (data.get("mcp") or {}).get("servers") if isinstance(data.get("mcp"), dict) else None
    return dict(servers) if isinstance(servers, dict) else {}


PROFILE = KitProfile(
    audit_reader=READER,
    fake_name="zcode",
    fixture_facts=fixture_facts,
    stall_text=stall_text,
    hostile_calls={
        "hostile_shell_secret": ("Bash", {"command": "cat ~/.ssh/id_rsa"}),
        "hostile_home_read": ("Read", {"file_path": "~/.netrc"}),
        "hostile_pathless_grep": ("Grep", {"pattern": "token"}),
        "hostile_delete": ("Bash", {"command": "rm -rf build; unlink README.md"}),
    },
    hostile_steps=hostile_steps,
    login_files=(".zcode/v2/credentials.json",),
    host_files={
        ".zcode/v2/credentials.json": '{{"accessToken": "{c}-zcode-token", "refreshToken": "{c}-zcode-refresh"}}\n',
        ".zcode/config.json": '{{"mcp": {{"servers": {{"host-evil": {{"type": "stdio", "command": "/bin/false", "args": ["{c}-zcode-mcp"]}}}}}}}}\n',
    },
    mcp_config_file=project_config,
)
