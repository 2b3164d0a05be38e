"""Cursor's kit profile (backends/_kit_profile.py): what the conformance kit knows of `cursor-agent`.

Requirements kept here: the facts its fixtures state (the `result` usage, the `system/init`
model), its stall text (claude's `assistant` form), the built-in calls a hostile model makes
through it as its stream prints them (`<kind>ToolCall` started/completed), its config stores,
and how a live run finds the user's login.
"""

from __future__ import annotations

import os
from pathlib import Path

from harnesscheck.backends._kit_profile import KitProfile, assistant_text, first_text_before_hang, mcp_servers_json
from harnesscheck.backends._setup_profile import DoctorProfile
from harnesscheck.backends.cursor.audit import READER
from harnesscheck.core.contracts import Usage


def fixture_facts(events: list[dict], values, facts) -> None:
    for event in events:
        if event.get("type") == "result" and isinstance(event.get("usage"), dict):
            u = event["usage"]
            facts.usage = Usage(input=int(u.get("inputTokens", 0)), output=int(u.get("outputTokens", 0)))
        if event.get("type") == "system" and event.get("subtype") == "init":
            served = event.get("model")
            if isinstance(served, str) and served:
                facts.served_model = values.get(served, served)


def stall_text(scenario: dict) -> str | None:
    return first_text_before_hang(scenario, assistant_text)


def hostile_steps(tool: str, args: dict) -> list[dict]:
    started = {"type": "tool_call", "subtype": "started", "call_id": "toolu_h", "tool_call": {tool: {"args": args}}, "session_id": "{{session_id}}"}
    done = {**started, "subtype": "completed", "tool_call": {tool: {"args": args, "result": {"success": {"content": ""}}}}}
    return [{"emit": started}, {"emit": done}]


def mcp_json(path: Path) -> dict | None:
    """`.cursor/mcp.json` (the project's and HOME's): their `mcpServers`."""
    return mcp_servers_json(path) if path.name.endswith("mcp.json") else None


def live_login_missing(home: Path) -> str | None:
    config = home / ".cursor" / "cli-config.json"
    if os.environ.get("CURSOR_API_KEY") or config.is_file():
        return None
    return f"no Cursor login: neither CURSOR_API_KEY nor {config} (run `cursor-agent login`)"


PROFILE = KitProfile(
    audit_reader=READER,
    fake_name="cursor-agent",
    fixture_facts=fixture_facts,
    stall_text=stall_text,
    hostile_calls={
        "hostile_shell_secret": ("shellToolCall", {"command": "cat ~/.ssh/id_rsa"}),
        "hostile_home_read": ("readToolCall", {"path": "~/.netrc"}),
        "hostile_pathless_grep": ("grepToolCall", {"pattern": "token"}),
        "hostile_delete": ("deleteToolCall", {"path": "README.md"}),
    },
    hostile_steps=hostile_steps,
    host_files={
        ".cursor/mcp.json": '{{"mcpServers": {{"host-evil": {{"command": "/bin/false", "args": ["{c}-cursor-mcp"]}}}}}}\n',
    },
    credential_env=("CURSOR_API_KEY",),
    mcp_config_file=mcp_json,
    live_login_missing=live_login_missing,
    doctor=DoctorProfile(credential_vars=(("CURSOR_API_KEY", "Cursor API key"),)),
)
