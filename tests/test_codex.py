"""Codex transport: the pure parser over every fixture (snapshots, any chunking), the
config/argv builder, and sessions through the fake `codex` (argv, env, cwd, stdin, CODEX_HOME,
timeouts, lingering processes, worktree and home config that must not reach the CLI)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from harnesscheck.contracts import ErrorClass, ModelVerdict, OutcomeStatus
from harnesscheck.paths import fixtures_dir
from harnesscheck.providers.codex import CodexParser
from harnesscheck.providers._errortext import classify_text

from _replay import build, run_parser

SCENARIOS = sorted(p.stem for p in (fixtures_dir() / "codex").glob("*.json"))
SMALL = [s for s in SCENARIOS if s != "oversize_line"]


def replay_outcome(scenario: str, model: str | None = None, cuts=None):
    return run_parser(CodexParser(requested_model=model), build("codex", scenario, model), cuts)


def test_every_fixture_has_provenance():
    import json

    for name in SCENARIOS:
        doc = json.loads((fixtures_dir() / "codex" / f"{name}.json").read_text())
        prov = doc["provenance"]
        assert prov["cli"] == "codex" and prov["cli_version"] == "0.171.0" and prov["date"]
        assert prov["source"] == "observed-here" or prov["source"].startswith("reference:"), name


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_outcome_snapshot(scenario, snapshot):
    assert replay_outcome(scenario).model_dump(mode="json") == snapshot


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
@pytest.mark.parametrize("scenario", SMALL)
def test_any_chunking_gives_the_same_outcome(scenario, data):
    replay = build("codex", scenario)
    cuts = data.draw(st.lists(st.integers(0, len(replay.stdout)), max_size=40))
    whole = run_parser(CodexParser(), replay).model_dump()
    assert run_parser(CodexParser(), replay, cuts).model_dump() == whole


def test_byte_by_byte_framing_of_success():
    replay = build("codex", "success")
    cuts = list(range(1, len(replay.stdout)))
    assert run_parser(CodexParser(), replay, cuts) == run_parser(CodexParser(), replay)


def test_warning_items_are_not_failures():
    out = replay_outcome("success")
    assert out.ok and out.text == "Hello from the scripted model."
    assert out.error_class is None and "Model metadata" in out.message


@pytest.mark.parametrize(
    ("scenario", "status", "cls"),
    [
        ("not_logged_in", OutcomeStatus.blocked, ErrorClass.auth),
        ("auth_401", OutcomeStatus.blocked, ErrorClass.auth),
        ("usage_limit", OutcomeStatus.blocked, ErrorClass.quota),
        ("rate_limit_429", OutcomeStatus.error, ErrorClass.rate_limit),
        ("overloaded_529", OutcomeStatus.error, ErrorClass.overloaded),
        ("context_overflow", OutcomeStatus.error, ErrorClass.context_overflow),
        ("model_not_found", OutcomeStatus.error, ErrorClass.model_unavailable),
        ("malformed_line", OutcomeStatus.error, ErrorClass.protocol),
        ("truncated_last_line", OutcomeStatus.error, ErrorClass.protocol),
        ("mcp_failed", OutcomeStatus.blocked, ErrorClass.mcp_unavailable),
        ("exit0_is_error", OutcomeStatus.error, ErrorClass.overloaded),
        ("crash_no_result", OutcomeStatus.error, ErrorClass.cli_crash),
        ("timeout_mid_stream", OutcomeStatus.truncated, ErrorClass.timeout),
        ("linger_after_result", OutcomeStatus.ok, None),
        ("unknown_events", OutcomeStatus.ok, None),
        ("oversize_line", OutcomeStatus.ok, None),
    ],
)
def test_classification(scenario, status, cls):
    out = replay_outcome(scenario)
    assert (out.status, out.error_class) == (status, cls), out.message


def test_auth_stops_at_the_first_401_reconnect():
    parser = CodexParser()
    replay = build("codex", "not_logged_in")
    out = run_parser(parser, replay)
    assert len(parser.errors) == 1 and parser.errors[0].startswith("Reconnecting... 1/5")
    assert out.retryable is False and not out.terminal_event_seen


def test_retryable_flags():
    assert replay_outcome("rate_limit_429").retryable
    assert replay_outcome("overloaded_529").retryable
    assert not replay_outcome("usage_limit").retryable
    assert replay_outcome("timeout_mid_stream").retryable


def test_usage_from_turn_completed():
    u = replay_outcome("native_tool_use").usage
    # 34172 input of which 27136 cached; reasoning is a part of output, reported apart
    assert (u.input, u.cache_read, u.cache_write, u.output, u.reasoning) == (7036, 27136, 0, 163, 26)


def test_no_model_id_means_unverified_and_no_cost():
    out = replay_outcome("success", model="gpt-5.5-codex")
    assert out.served_model is None and out.model_verdict is ModelVerdict.unverified
    assert out.cost.usd is None and out.cost.source.value == "none"


def test_reroute_is_a_served_model_mismatch():
    out = replay_outcome("served_model_mismatch", model="gpt-5.5-codex")
    assert out.served_model == "gpt-5.4-mini" and out.model_verdict is ModelVerdict.mismatch
    assert out.ok


def test_native_and_bridge_calls_are_told_apart():
    out = replay_outcome("native_tool_use")
    assert out.native_tool_calls == ["file_change", "command_execution", "web_search", "command_execution"]
    assert out.tool_calls == 0
    tools = replay_outcome("tool_calls")
    assert tools.tools_used == ["list_dir", "read_file"] and tools.tool_calls == 2 and not tools.native_tool_calls


def test_timeout_keeps_partial_text():
    out = replay_outcome("timeout_mid_stream")
    assert out.text == "Looking at the tree first." and out.cost.partial


def test_foreign_mcp_server_is_native():
    parser = CodexParser()
    parser.feed('{"type":"item.started","item":{"id":"i","type":"mcp_tool_call","server":"evil","tool":"x","arguments":{}}}')
    parser.feed('{"type":"item.completed","item":{"id":"i","type":"mcp_tool_call","server":"evil","tool":"x","arguments":{}}}')
    assert parser.native == ["mcp:evil/x"] and parser.bridge_tools == []


def test_bridge_mcp_warning_stops():
    from harnesscheck.process import LineAction

    parser = CodexParser()
    action = parser.feed('{"type":"item.completed","item":{"id":"item_0","type":"error","message":"MCP client for `bridge` failed to start: program not found"}}')
    assert action is LineAction.STOP and parser.early is ErrorClass.mcp_unavailable
    other = CodexParser()
    assert other.feed('{"type":"item.completed","item":{"id":"item_0","type":"error","message":"MCP client for `docs` failed to start"}}') is None


def test_events_after_the_terminal_event_change_nothing():
    parser = CodexParser()
    for line in build("codex", "success").stdout.decode().splitlines():
        parser.feed(line)
    parser.feed('{"type":"turn.failed","error":{"message":"401 Unauthorized"}}')
    assert parser.terminal == "completed"


@pytest.mark.parametrize(
    ("text", "cls"),
    [
        ("Reconnecting... 2/5 (unexpected status 401 Unauthorized: Missing bearer)", ErrorClass.auth),
        ("exceeded retry limit, last status: 429 Too Many Requests", ErrorClass.rate_limit),
        ("You've hit your usage limit. Visit the settings to purchase more credits", ErrorClass.quota),
        ("Quota exceeded. Check your plan and billing details.", ErrorClass.quota),
        ("stream disconnected before completion: You have no credits remaining", ErrorClass.quota),
        ("Codex ran out of room in the model's context window.", ErrorClass.context_overflow),
        ('{"error":{"code":"context_length_exceeded"}}', ErrorClass.context_overflow),
        ("unexpected status 500 Internal Server Error", ErrorClass.server_error),
        ("Selected model is at capacity. Please try a different model.", ErrorClass.overloaded),
        ("Reconnecting... waiting for network", ErrorClass.network),
        ("required MCP servers failed to initialize: bridge: timed out", ErrorClass.mcp_unavailable),
        ("shared rollout token budget exhausted", ErrorClass.budget),
        ("Model metadata for `x` not found. Defaulting to fallback metadata", None),
        ("something odd", None),
    ],
)
def test_message_classes(text, cls):
    assert classify_text(text) is cls
