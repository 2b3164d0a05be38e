"""Gemini CLI's kit profile (backends/_kit_profile.py): what the conformance kit knows of `gemini -p`.

Requirements kept here: the facts its fixtures state (the `result` stats: usage with the
cached part apart, the served model when one model served), its stall text, its
`.gemini/settings.json` (`mcpServers`; `tools.core` as the tools it offers), and the stores
and variables of its real users.
"""

from __future__ import annotations

import json
from pathlib import Path

from harnesscheck.backends._kit_profile import KitProfile, first_text_before_hang, mcp_servers_json
from harnesscheck.backends.gemini.audit import READER
from harnesscheck.backends.gemini.recording import RECORDING
from harnesscheck.core.contracts import Usage


def fixture_facts(events: list[dict], values, facts) -> None:
    for event in events:
        if event.get("type") == "result" and isinstance(event.get("stats"), dict):
            st = event["stats"]
            cached = int(st.get("cached", 0) or 0)
            uncached = int(st["input"]) if "input" in st else max(0, int(st.get("input_tokens", 0)) - cached)
            facts.usage = Usage(input=uncached, output=int(st.get("output_tokens", 0)), cache_read=cached)
            served_keys = [values.get(k, k) for k in (st.get("models") or {})]
            if len(served_keys) == 1:
                facts.served_model = served_keys[0]


def _assistant_message(event: dict) -> str | None:
    if event.get("type") == "message" and event.get("role") == "assistant":
        return str(event.get("content", ""))
    return None


def stall_text(scenario: dict) -> str | None:
    return first_text_before_hang(scenario, _assistant_message)


def tools_offered(run, servers: dict) -> list[str] | None:
    """What its settings.json `tools.core` lets through. No `tools.core`: every built-in
    (`builtin:*`); a listed name that is not `mcp_<server>_<tool>` of a configured server: that
    built-in; the configured servers' tools as the scope names them. None when no settings
    were recorded."""
    for child in run.children:
        for path, content in (child.get("mcp_configs") or {}).items():
            if not str(path).endswith("settings.json"):
                continue
            try:
                settings = json.loads(content)
            except ValueError:
                continue
            core = (settings.get("tools") or {}).get("core")
            configured = list(settings.get("mcpServers") or {})
            offered: list[str] = []
            for tool in core if isinstance(core, list) else []:
                server = next((s for s in configured if str(tool).startswith(f"mcp_{s}_")), None)
                if server is not None:
                    offered.append(str(tool)[len(f"mcp_{server}_") :])
                else:
                    offered.append(f"builtin:{tool}")
            if not isinstance(core, list):
                offered.append("builtin:*")
            return offered
    return None


def settings_file(path: Path) -> dict | None:
    """`.gemini/settings.json` (HOME's and the project's): its `mcpServers`."""
    if path.name != "settings.json" or path.parent.name != ".gemini":
        return None
    return mcp_servers_json(path)


def loopback_builtin_read(path: str) -> tuple[str, dict]:
    return "run_shell_command", {"command": f"cat {path}"}


PROFILE = KitProfile(
    audit_reader=READER,
    fake_name="gemini",
    fixture_facts=fixture_facts,
    stall_text=stall_text,
    loopback_builtin_read=loopback_builtin_read,
    host_files={
        ".gemini/oauth_creds.json": '{{"access_token": "{c}-gemini-oauth", "refresh_token": "{c}-gemini-refresh"}}\n',
        ".gemini/settings.json": '{{"mcpServers": {{"host-evil": {{"command": "/bin/false", "args": ["{c}-gemini-settings"]}}}}}}\n',
    },
    host_env={
        "GEMINI_API_KEY": "{c}-host-gemini-key",
        "GOOGLE_GEMINI_BASE_URL": "http://127.0.0.1:9/{c}-host-gemini-base-url",
    },
    credential_env=("GEMINI_API_KEY",),
    mcp_config_file=settings_file,
    tools_offered=tools_offered,
    recording=RECORDING,
)
