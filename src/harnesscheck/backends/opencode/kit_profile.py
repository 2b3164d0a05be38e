"""opencode's kit profile (backends/_kit_profile.py): what the conformance kit knows of `opencode run`.

Requirements kept here: the facts its fixtures state (`step_finish` tokens, and the cost as
the opencode parser prices it), its stall text, the config it is given through its
environment (`$OPENCODE_CONFIG`, `$OPENCODE_CONFIG_CONTENT`: `mcp` local servers, `tools`
switched off) and what it offers from it, and its login file.
"""

from __future__ import annotations

import json
from pathlib import Path

from harnesscheck.backends._kit_profile import KitProfile, first_text_before_hang
from harnesscheck.backends._setup_profile import NpmRuntimeDeps
from harnesscheck.backends.opencode import PLUGIN_DEPS_DIR, PLUGIN_PACKAGE, plugin_deps_ready
from harnesscheck.backends.opencode.audit import READER
from harnesscheck.core.contracts import Usage


def fixture_facts(events: list[dict], values, facts) -> None:
    from harnesscheck.backends.opencode import priced_cost

    for event in events:
        if event.get("type") == "step_finish" and isinstance((event.get("part") or {}).get("tokens"), dict):
            t = event["part"]["tokens"]
            cache = t.get("cache") or {}
            step = Usage(
                input=int(t.get("input", 0)), output=int(t.get("output", 0)), cache_read=int(cache.get("read", 0)), cache_write=int(cache.get("write", 0))
            )
            facts.usage = step if facts.usage is None else facts.usage + step
            cost = priced_cost(event["part"])  # 0 for a step with tokens: opencode had no price, no figure
            if cost is not None:
                facts.cost_usd = (facts.cost_usd or 0.0) + cost


def _text_part(event: dict) -> str | None:
    return str((event.get("part") or {}).get("text", "")) if event.get("type") == "text" else None


def stall_text(scenario: dict) -> str | None:
    return first_text_before_hang(scenario, _text_part)


def configs(children: list[dict]) -> list[dict]:
    """The opencode configs the CLI was given: `$OPENCODE_CONFIG` (a file), `$OPENCODE_CONFIG_CONTENT`."""
    out = []
    for child in children:
        env = child.get("env") or {}
        texts = [env.get("OPENCODE_CONFIG_CONTENT") or ""]
        if env.get("OPENCODE_CONFIG"):
            try:
                texts.append(Path(env["OPENCODE_CONFIG"]).read_text(encoding="utf-8"))
            except OSError:
                pass
        for text in texts:
            try:
                config = json.loads(text) if text.strip() else None
            except ValueError:
                config = None
            if isinstance(config, dict):
                out.append(config)
    return out


def env_servers(children: list[dict]) -> dict:
    """The `mcp` local servers of the configs given through the environment."""
    servers: dict[str, dict] = {}
    for config in configs(children):
        for name, entry in (config.get("mcp") or {}).items():
            if isinstance(entry, dict) and entry.get("type") == "local" and entry.get("command"):
                cmd = [str(a) for a in entry["command"]]
                servers[name] = {"command": cmd[0], "args": cmd[1:], "env": entry.get("environment") or {}}
    return servers


def tools_offered(run, servers: dict) -> list[str] | None:
    """The tools the bridge listed to the CLI (its own trace), every other MCP server configured
    (as `mcp:<name>`), and each built-in opencode 1.18.33 offers by default that the config
    does not switch off (`"tools": {name: false}`), as `builtin:<name>`."""
    from harnesscheck.backends.opencode import BUILTIN_TOOLS

    given = configs(run.children)
    if not given and not run.children:
        return None
    off: set[str] = set()
    for config in given:
        off.update(name for name, on in (config.get("tools") or {}).items() if on is False)
    offered = [f"builtin:{name}" for name in BUILTIN_TOOLS if name not in off]
    listed: dict[str, None] = {}
    for rec in run.trace:  # what the bridge listed to the CLI: the MCP tools the model got
        if rec.get("event") == "bridge_listed":
            listed.update(dict.fromkeys(str(t) for t in rec.get("tools") or []))
    foreign = [f"mcp:{name}" for name in servers if name != "bridge"]
    return offered + foreign + list(listed)


def loopback_builtin_read(path: str) -> tuple[str, dict]:
    return "read", {"filePath": path}


def stdout_cost(event: dict) -> float | None:
    """A `step_finish` line's priced cost (summed over the run's steps; 0 with tokens is no price)."""
    from harnesscheck.backends.opencode import priced_cost

    if event.get("type") == "step_finish" and isinstance(event.get("part"), dict):
        return priced_cost(event["part"])
    return None


PROFILE = KitProfile(
    audit_reader=READER,
    fake_name="opencode",
    fixture_facts=fixture_facts,
    stall_text=stall_text,
    loopback_builtin_read=loopback_builtin_read,
    stdout_cost=stdout_cost,
    login_files=(".local/share/opencode/auth.json",),
    mcp_config_env=env_servers,
    tools_offered=tools_offered,
    # install-clis pre-installs the plugin package opencode would fetch into its config dir
    npm_runtime_deps=NpmRuntimeDeps(dirname=PLUGIN_DEPS_DIR, package=PLUGIN_PACKAGE, ready=plugin_deps_ready),
)
