"""What a transport writes so a CLI starts the bridge, and how it tells the bridge is loaded.

Contract (doc/SPEC-bridge.md, "Readiness"): a harness session never proceeds toolless.
Pure functions, no I/O beyond reading the bridge trace, no heavy import:

- MCP config for each CLI, all naming the server `bridge` and starting it with
  `bridge_argv(spec_path)` plus `bridge_env()` (absolute interpreter, no secret);
- `claude_init_ready(init_event, scope)`: claude's `system/init` lists `bridge` with
  status `connected` and every `mcp__bridge__<tool>` of the scope;
- `codex_mcp_failure(stderr_text)`: codex with `required = true` exits non-zero at start
  and names the server on stderr when the bridge cannot start;
- `bridge_listed(trace_path, session_id)`: for every CLI (and the only signal cursor gives),
  the bridge's own trace says a client fetched its tool list. The cursor transport reads it
  after every session with tools and ends one whose bridge never listed them
  blocked/mcp_unavailable (backends/_harness.py `judge`, `readiness_from_trace`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harnesscheck.bridge.spec import SERVER_NAME, bridge_argv, bridge_env, summarize_trace

#: Seconds a CLI should wait for the bridge to answer initialize. A cold start measures
#: ~1 s here (bench/bench_bridge.py); the CLIs' defaults (claude -p ~5 s, codex 10 s) leave
#: too little margin on a loaded machine, so transports raise them.
STARTUP_TIMEOUT_S = 30
TOOL_TIMEOUT_S = 120


def server_entry(spec_path: Path) -> dict[str, Any]:
    """The stdio server entry shared by claude and cursor (`{"command", "args", "env"}`)."""
    argv = bridge_argv(spec_path)
    return {"type": "stdio", "command": argv[0], "args": argv[1:], "env": bridge_env()}


def claude_mcp_config(spec_path: Path | None = None, *, url: str | None = None) -> dict[str, Any]:
    """For `claude --mcp-config <file> --strict-mcp-config`: the stdio bridge for
    `spec_path`, or a shared-mode session `url` (bridge/shared.py)."""
    entry = {"type": "http", "url": url} if url else server_entry(_need(spec_path))
    return {"mcpServers": {SERVER_NAME: entry}}


def _need(spec_path: Path | None) -> Path:
    if spec_path is None:
        raise ValueError("give the bridge spec path (stdio) or the shared-mode url")
    return spec_path


def claude_env() -> dict[str, str]:
    """Env injections for claude -p so it waits for the bridge instead of racing it:
    blocking MCP connect and a raised connect timeout (cli-formats §1.A)."""
    return {"MCP_CONNECTION_NONBLOCKING": "false", "MCP_TIMEOUT": str(STARTUP_TIMEOUT_S * 1000)}


def claude_tool_names(tool_names) -> list[str]:
    """`mcp__bridge__<tool>` for `--allowedTools`, exactly (never a wildcard)."""
    return [f"mcp__{SERVER_NAME}__{name}" for name in tool_names]


def cursor_mcp_config(spec_path: Path | None = None, *, url: str | None = None) -> dict[str, Any]:
    """For `.cursor/mcp.json` / `$HOME/.cursor/mcp.json` (run with `--approve-mcps`)."""
    if url:
        return {"mcpServers": {SERVER_NAME: {"url": url}}}
    entry = server_entry(_need(spec_path))
    entry.pop("type")
    return {"mcpServers": {SERVER_NAME: entry}}


def _toml_str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def codex_mcp_toml(spec_path: Path | None = None, *, url: str | None = None) -> str:
    """The `[mcp_servers.bridge]` table for `$CODEX_HOME/config.toml`: required (codex
    refuses to start without it), a raised startup timeout, tools approved (else codex
    auto-cancels write tools under approval_policy=never)."""
    if url:
        entry: dict[str, Any] = {"env": {}}
        lines = [f"[mcp_servers.{SERVER_NAME}]", f"url = {_toml_str(url)}"]
    else:
        entry = server_entry(_need(spec_path))
        lines = [
            f"[mcp_servers.{SERVER_NAME}]",
            f"command = {_toml_str(entry['command'])}",
            "args = [" + ", ".join(_toml_str(a) for a in entry["args"]) + "]",
        ]
    lines += [
        "required = true",
        f"startup_timeout_sec = {STARTUP_TIMEOUT_S}",
        f"tool_timeout_sec = {TOOL_TIMEOUT_S}",
        'default_tools_approval_mode = "approve"',
    ]
    if entry["env"]:
        lines.append("env = { " + ", ".join(f"{_toml_str(k)} = {_toml_str(v)}" for k, v in entry["env"].items()) + " }")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Readiness:
    ready: bool
    reason: str = ""


def claude_init_ready(init_event: dict, tool_names) -> Readiness:
    """Is the bridge loaded, per claude's `system/init`? Needs `mcp_servers` to list
    `bridge` as `connected` and `tools` to hold every `mcp__bridge__<tool>` of the scope.
    (`pending` means the first turn would run toolless: not ready.)"""
    servers = init_event.get("mcp_servers")
    servers = servers if isinstance(servers, list) else []
    status = next((s.get("status") for s in servers if isinstance(s, dict) and s.get("name") == SERVER_NAME), None)
    if status is None:
        return Readiness(False, "bridge not among the CLI's MCP servers")
    if status != "connected":
        return Readiness(False, f"bridge status {status!r}")
    tools = init_event.get("tools")
    tools = set(tools) if isinstance(tools, list) else set()
    missing = [t for t in claude_tool_names(tool_names) if t not in tools]
    if missing:
        return Readiness(False, f"bridge tools missing: {', '.join(missing)}")
    return Readiness(True)


_CODEX_MCP_FAIL = re.compile(r"MCP server[s]? .*fail|failed to (start|initialize).*MCP|MCP client for", re.IGNORECASE)


def codex_mcp_failure(stderr_text: str) -> str | None:
    """The line where codex says the required bridge failed to start, or None."""
    for line in (stderr_text or "").splitlines():
        if SERVER_NAME in line and _CODEX_MCP_FAIL.search(line):
            return line.strip()[:300]
    return None


def bridge_listed(trace_path: Path, session_id: str | None = None) -> Readiness:
    """From the bridge's own trace: did a client fetch the tool list in this session?"""
    summary = summarize_trace(trace_path, session_id=session_id)
    if summary.listed:
        return Readiness(True)
    if summary.started:
        return Readiness(False, "the bridge started but no client listed its tools")
    return Readiness(False, "the bridge never started")
