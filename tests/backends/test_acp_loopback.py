"""Real ACP agents through their shipped profiles and the ACP transport, against the scripted model
servers on 127.0.0.1 (the pinned gemini and opencode CLIs: `gemini --acp`, `opencode acp`).

Skipped with the reason when the pinned CLI is not installed (`harnesscheck install-clis`)."""

from __future__ import annotations

import json
import os

import pytest

from harnesscheck.backends.acp import AcpEvidence, AcpTransport, builtin_profile
from harnesscheck.backends.loopback_endpoint import LoopbackEndpoint
from harnesscheck.backends.registry import get_spec
from harnesscheck.core.config import Settings
from harnesscheck.core.contracts import AgentSessionRequest, CliNotFound, ErrorClass, OutcomeStatus
from harnesscheck.core.scope import ToolScope
from harnesscheck.loopback.scenario import Scenario, ToolCall, Turn
from harnesscheck.loopback.server import ScriptedModelServer

pytestmark = pytest.mark.loopback

AGENTS = ["gemini", "opencode"]


def _session(name, turns, tmp_path, timeout_s=120.0):
    server = ScriptedModelServer(Scenario(name="acp", turns=turns)).start()
    try:
        transport = AcpTransport(get_spec(f"acp-{name}"), Settings(), profile=builtin_profile(name), loopback=LoopbackEndpoint(base_url=server.base_url))
        try:
            transport.cli()
        except CliNotFound as exc:
            pytest.skip(f"the pinned {name} is not installed (harnesscheck install-clis --backend {name}): {exc}")
        root = tmp_path / "root"
        root.mkdir()
        (root / "hello.txt").write_text("hello from the acp worktree\n")
        ev = AcpEvidence()
        ev.npm_seen = []
        run_dir = tmp_path / "run"

        def observer(direction, message, evidence):
            # os.walk, not Path.rglob: the agent creates and removes files (lock files) while we
            # look, and os.walk skips a folder that vanished where rglob raises
            for folder, dirs, _files in os.walk(run_dir):
                evidence.npm_seen.extend(os.path.relpath(os.path.join(folder, ".npm"), run_dir) for d in dirs if d == ".npm")

        outcome = transport.run_session(
            AgentSessionRequest(prompt="Read hello.txt.", scope=ToolScope(name="t", root=root), timeout_s=timeout_s, run_dir=run_dir),
            evidence=ev,
            observer=observer,
        )
        return outcome, ev, list(server.requests)
    finally:
        server.stop()


@pytest.mark.parametrize("name", AGENTS)
def test_a_bridge_read_reaches_the_model(name, tmp_path):
    outcome, ev, requests = _session(name, [Turn(tool_calls=[ToolCall("read_file", {"path": "hello.txt"})]), Turn(text="the file says hello")], tmp_path)
    assert outcome.status is OutcomeStatus.ok, (outcome.status, outcome.error_class, outcome.message, outcome.stderr_tail[-500:])
    assert ev.stop_reason == "end_turn" and "the file says hello" in outcome.text
    assert "read_file" in outcome.tools_used and outcome.tool_calls >= 1, "the bridge's trace holds the read"
    assert any("hello from the acp worktree" in json.dumps(r.body) for r in requests), "the read's result never reached the model"
    # nothing fetched from a registry at start (opencode installs its plugin package into its
    # config dir, before it starts its MCP servers, unless the profile's home_from gives it the
    # pre-fill install-clis made): looked for at each agent message, while the HOME exists
    assert not ev.npm_seen, f"the agent ran npm in its HOME: {ev.npm_seen[:3]}"


@pytest.mark.parametrize("name", AGENTS)
def test_a_401_ends_typed(name, tmp_path):
    outcome, ev, _ = _session(name, [Turn(status=401, error_type="authentication_error", error_message="invalid x-api-key")], tmp_path, timeout_s=90)
    assert (outcome.status, outcome.error_class) == (OutcomeStatus.blocked, ErrorClass.auth), (outcome.status, outcome.error_class, outcome.message)
    assert ev.prompt_error is not None, "the agent answered the prompt with an error"
