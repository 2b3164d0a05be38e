"""Claude Code's kit profile (backends/_kit_profile.py): what the conformance kit knows of `claude`.

Requirements kept here: the facts a fixture of `claude -p --output-format stream-json` states
(the `result` event's cost and per-model usage, the main chain's served model), the text it
shows before a stall, the `--allowedTools` / `--tools` argv as the tools it offers, its login
and credential stores, and how a live run finds the user's login. Nothing here runs the CLI.
"""

from __future__ import annotations

import os
from pathlib import Path

from harnesscheck.backends._kit_profile import (
    KitProfile,
    assistant_text,
    first_text_before_hang,
    mcp_servers_json,
    repeat_assistant_events,
)
from harnesscheck.backends.claude_code.audit import READER
from harnesscheck.backends.claude_code.doctor import DOCTOR
from harnesscheck.backends.claude_code.recording import RECORDING
from harnesscheck.core.contracts import Usage


def fixture_facts(events: list[dict], values, facts) -> None:
    """The `result` event's vendor cost and the main model's usage (other models in
    `modelUsage` are helpers), and the model of the main chain's assistant messages."""
    for event in events:
        if event.get("type") == "result":
            cost = event.get("total_cost_usd", event.get("cost_usd"))
            if isinstance(cost, (int, float)):
                facts.cost_usd = float(cost)
            main = values["{{model}}"]
            helpers = []
            for key, mu in (event.get("modelUsage") or {}).items():
                key = values.get(key, key)
                if key.split("[", 1)[0] == values["{{model_base}}"]:
                    facts.usage = Usage(input=int(mu.get("inputTokens", 0)), output=int(mu.get("outputTokens", 0)))
                elif main:
                    helpers.append(key)
            facts.helper_models = tuple(helpers)
        if event.get("type") == "assistant" and event.get("parent_tool_use_id") is None:
            served = (event.get("message") or {}).get("model")
            if isinstance(served, str):
                facts.served_model = values.get(served, served)


def stall_text(scenario: dict) -> str | None:
    return first_text_before_hang(scenario, assistant_text)


def tools_offered(run, servers: dict) -> list[str] | None:
    """The exact --allowedTools list, mapped back from mcp__<server>__<tool> for the MCP servers
    the backend configured (any name); a built-in or a whole server (`mcp__<server>`) allowed is
    reported as it is, and the built-ins `--tools` leaves on (all of them without `--tools`)."""
    prefixes = [f"mcp__{name}__" for name in servers] or ["mcp__bridge__"]

    def bridged(tool: str) -> str | None:
        return next((tool[len(p) :] for p in prefixes if tool.startswith(p)), None)

    for child in run.children:
        argv = child.get("argv", [])
        if "--allowedTools" in argv:
            value = argv[argv.index("--allowedTools") + 1]
            tools = [t for t in value.split(",") if t]
            if any(bridged(t) is None for t in tools):
                return tools  # a built-in (or every tool of a server) was allowed: report it as offered
            tools_flag = argv[argv.index("--tools") + 1] if "--tools" in argv else None
            if tools_flag not in ("", None) and tools_flag.strip():
                return tools + [f"builtin:{t}" for t in tools_flag.split(",") if t]
            if "--tools" not in argv:
                return tools + ["builtin:*"]
            return [bridged(t) for t in tools]
    return None


def mcp_json(path: Path) -> dict | None:
    """`--mcp-config` files (`*mcp.json`): their `mcpServers`."""
    return mcp_servers_json(path) if path.name.endswith("mcp.json") else None


def live_login_missing(home: Path) -> str | None:
    if os.environ.get("CLAUDE_CODE_OAUTH_TOKEN"):
        return None
    config = Path(os.environ.get("CLAUDE_CONFIG_DIR") or home / ".claude")
    cred = config / ".credentials.json"
    return None if cred.is_file() else f"no Claude login: neither CLAUDE_CODE_OAUTH_TOKEN nor {cred} (run `claude /login`)"


def loopback_builtin_read(path: str) -> tuple[str, dict]:
    return "Read", {"file_path": path}


def stdout_cost(event: dict) -> float | None:
    """The `result` line's `total_cost_usd`: the CLI's own figure for the run."""
    cost = event.get("total_cost_usd") if event.get("type") == "result" else None
    return float(cost) if isinstance(cost, (int, float)) else None


PROFILE = KitProfile(
    audit_reader=READER,
    fake_name="claude",
    repeat_usage_events=repeat_assistant_events,  # stream-json prints a message's event once per content block
    fixture_facts=fixture_facts,
    stall_text=stall_text,
    login_files=(".claude/.credentials.json",),
    host_files={
        ".claude/.credentials.json": '{{"claudeAiOauth": {{"accessToken": "{c}-claude-oauth", "refreshToken": "{c}-refresh"}}}}\n',
        ".claude.json": '{{"oauthAccount": {{"emailAddress": "user@example.invalid"}}, "userID": "{c}-claude-user"}}\n',
        ".claude/settings.json": '{{"env": {{"ANTHROPIC_BASE_URL": "http://127.0.0.1:9/{c}-settings"}}}}\n',
    },
    config_home_env={"CLAUDE_CONFIG_DIR": ".claude"},
    credential_env=("CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_OAUTH_TOKEN"),
    # the subscription token the `claude` CLI reads: handed over as an explicit, traced injection
    permitted_injections=frozenset({"CLAUDE_CODE_OAUTH_TOKEN"}),
    mcp_config_file=mcp_json,
    tools_offered=tools_offered,
    loopback_builtin_read=loopback_builtin_read,
    wire_cache_write=True,  # Anthropic Messages: cache_creation_input_tokens
    stdout_cost=stdout_cost,
    tool_errors_at_wire=True,  # the Messages wire: `tool_result` with `is_error`, named by its `tool_use`
    live_login_missing=live_login_missing,
    doctor=DOCTOR,
    recording=RECORDING,
)
