"""Tool bridge readiness (harness-anchors G1–G8): a harness session never proceeds toolless, and
the CLI is configured with exactly one MCP server, the bridge, by absolute interpreter path."""

from __future__ import annotations

import json
import os

from harnesscheck.contracts import Capability as C
from harnesscheck.contracts import ErrorClass as E
from harnesscheck.contracts import Kind, OutcomeStatus
from harnesscheck.kit.catalog import check


@check("bridge.failed-load-ends-session", requires=[C.mcp_tools], kinds=[Kind.harness], incident=["G2", "I6"])
def test_failed_load_ends_session(but):
    """When the CLI reports the bridge failed to load, the session ends mcp_unavailable — never runs on toolless."""
    run = but.run("mcp_failed")
    o = run.outcome
    assert o.status != OutcomeStatus.ok, f"the session ran on without its tools: {o.text!r}"
    assert o.error_class == E.mcp_unavailable, f"error_class {o.error_class}"


@check("bridge.slow-start-not-toolless", requires=[C.mcp_tools], kinds=[Kind.harness], incident="G1", paced=True)
def test_slow_start_not_toolless(but):
    """A bridge slow to start either is waited for or errors: the session is never ok without its tools."""
    run = but.run("mcp_slow", timeout_s=120)
    o = run.outcome
    assert o.status == OutcomeStatus.ok or o.error_class == E.mcp_unavailable, f"{o.status}/{o.error_class}"
    if o.status == OutcomeStatus.ok:
        assert but.bridge_loaded(run), (
            "the session ended ok, but the bridge's own trace shows no client ever listed its tools: "
            "it ran without them (a slow bridge was not waited for)"
        )


@check("bridge.only-bridge-configured", requires=[C.mcp_tools], kinds=[Kind.harness], incident=["B3", "G6", "G8", "A11"])
def test_only_bridge_configured(but):
    """The CLI's MCP config names exactly one server, the host's tool bridge (whatever it is called),
    started by an absolute interpreter, with no secrets."""
    canaries = but.parent_env_canaries()
    run = but.run("success", parent_env=canaries)
    configs = but.mcp_servers(run)
    assert configs, "no MCP configuration reached the CLI"
    assert len(configs) == 1, f"MCP servers configured: {sorted(configs)}: the CLI must get exactly one, the bridge"
    (name, server), = configs.items()
    command = server.get("command", "")
    assert os.path.isabs(command), f"bridge {name!r} command {command!r} is not an absolute path"
    blob = json.dumps(server)
    assert not [k for k, v in canaries.items() if v in blob], "a secret was written into the MCP config"
