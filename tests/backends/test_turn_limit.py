"""The policy's turns limit on a harness CLI (doc/SPEC-policy.md): a CLI with a turn cap of its own
gets the limit as that cap; one without, whose stream shows where its model turns begin, is
stopped when a turn past the limit begins; either way the session ends truncated/budget."""

from __future__ import annotations

import json

import pytest
from _replay import hostile_worktree, parent_env

from harnesscheck.backends._harness import _policy_turn_cap, _TurnLimit
from harnesscheck.backends.registry import build_transport, get_spec
from harnesscheck.core.config import Settings
from harnesscheck.core.contracts import AgentSessionRequest, ErrorClass, OutcomeStatus
from harnesscheck.core.policy import Limits, Policy
from harnesscheck.core.scope import ToolScope
from harnesscheck.testing.fakes import install_fake_cli, load_fixture


def turns_of(cli: str, backend: str, scenario: str = "tool_calls") -> int:
    """How many model turns the transport's turn_event counts in a recorded stream."""
    transport = build_transport(get_spec(backend), Settings(backend=backend))
    counter = _TurnLimit(10_000, transport.turn_event)
    for step in load_fixture(cli, scenario)["steps"]:
        if isinstance(step.get("emit"), dict):
            counter.see(json.dumps(step["emit"]))
    return counter.turns


@pytest.mark.parametrize(
    ("cli", "backend", "turns"),
    [
        ("opencode", "opencode", 3),  # one step_start per model request
        ("cursor", "cursor", 3),  # assistant, tool, assistant, tool, assistant
        ("gemini", "gemini", 2),
        ("codex", "codex", 2),
    ],
)
def test_each_cli_stream_shows_its_model_turns(cli, backend, turns):
    assert turns_of(cli, backend) == turns


def test_the_counter_begins_a_turn_at_the_first_output_after_a_result_only():
    kinds = iter(["output", "output", "result", "result", "output", None, "result", "output"])
    counter = _TurnLimit(2, lambda event: next(kinds))
    seen = [counter.see("{}") for _ in range(8)]
    assert counter.turns == 3 and seen == [False] * 7 + [True]


def test_a_call_reported_already_done_is_output_and_result():
    """An ACP agent may report a tool call once, already completed: that is the model's output
    and the tool's result, so the next output begins a turn (counted late otherwise)."""
    from harnesscheck.backends.acp import AcpTransport, builtin_profile

    transport = AcpTransport(get_spec("acp-fake"), Settings(), profile=builtin_profile("fake"))

    def update(kind, **fields):
        return json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s", "update": {"sessionUpdate": kind, **fields}}})

    counter = _TurnLimit(10_000, transport.turn_event)
    for line in (
        update("agent_message_chunk", content={"type": "text", "text": "reading"}),
        update("tool_call", toolCallId="a", title="read_file", status="completed"),
        update("agent_thought_chunk", content={"type": "text", "text": "then"}),
        update("tool_call", toolCallId="b", title="list_dir", status="pending"),
        update("tool_call_update", toolCallId="b", status="in_progress"),
        update("tool_call_update", toolCallId="b", status="failed"),
        update("agent_message_chunk", content={"type": "text", "text": "done"}),
        json.dumps({"jsonrpc": "2.0", "id": 3, "result": {"stopReason": "end_turn"}}),
    ):
        counter.see(line)
    assert counter.turns == 3


def test_a_cli_with_its_own_cap_gets_the_tighter_limit_as_that_cap(tmp_path):
    policy = Policy(limits=Limits(turns=2))
    request = AgentSessionRequest(prompt="x", scope=ToolScope(root=tmp_path), max_iters=8, policy=policy)
    capped, applied = _policy_turn_cap(request, get_spec("claude-code"))
    assert applied and capped.max_iters == 2
    loose = request.model_copy(update={"max_iters": 1})
    assert _policy_turn_cap(loose, get_spec("claude-code")) == (loose, False)
    assert _policy_turn_cap(request, get_spec("opencode"))[1] is False  # no cap of its own: counted instead


def test_a_cli_without_a_cap_is_stopped_at_the_turn_past_the_limit(tmp_path):
    wt = hostile_worktree(tmp_path)
    fake = install_fake_cli("opencode", "tool_calls", tmp_path / "bin")
    transport = build_transport(get_spec("opencode"), Settings(backend="opencode"))
    transport = type(transport)(get_spec("opencode"), Settings(), cli_path=fake.path, parent_env=parent_env(tmp_path / "home"), linger_s=0.5, term_grace_s=1.0)

    def run(turns):
        request = AgentSessionRequest(
            prompt="hi", scope=ToolScope(root=wt), timeout_s=60, run_dir=tmp_path / f"run{turns}", policy=Policy(limits=Limits(turns=turns))
        )
        return transport.run_session(request)

    stopped = run(1)
    assert (stopped.status, stopped.error_class) == (OutcomeStatus.truncated, ErrorClass.budget), stopped.message
    # the second turn's call may already be on its way when its step_start is read: at most that one
    assert "turns limit (1)" in stopped.message and stopped.tool_calls <= 2
    assert run(3).status is OutcomeStatus.ok  # three model turns fit a limit of three
