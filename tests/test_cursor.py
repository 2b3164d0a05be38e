"""Cursor transport: the pure parser over every fixture (snapshots, any chunking), the
argv/config builder, and sessions through the fake `cursor-agent` (argv, env, cwd, stdin,
per-run HOME, linger after result, timeouts, worktree and home config that must not reach it)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from harnesscheck.contracts import CostSource, ErrorClass, ModelVerdict, OutcomeStatus
from harnesscheck.paths import fixtures_dir
from harnesscheck.process import LineAction
from harnesscheck.providers.cursor import CursorParser

from _replay import build, run_parser

SCENARIOS = sorted(p.stem for p in (fixtures_dir() / "cursor").glob("*.json"))
SMALL = [s for s in SCENARIOS if s != "oversize_line"]


def replay_outcome(scenario: str, model: str | None = None, cuts=None):
    return run_parser(CursorParser(requested_model=model), build("cursor-agent", scenario, model), cuts)


def test_every_fixture_has_provenance():
    for name in SCENARIOS:
        prov = json.loads((fixtures_dir() / "cursor" / f"{name}.json").read_text())["provenance"]
        assert prov["cli"] == "cursor-agent" and prov["cli_version"] and prov["date"]
        assert prov["source"].startswith("reference:"), name  # nothing cursor-related is observed here


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_outcome_snapshot(scenario, snapshot):
    assert replay_outcome(scenario).model_dump(mode="json") == snapshot


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
@pytest.mark.parametrize("scenario", SMALL)
def test_any_chunking_gives_the_same_outcome(scenario, data):
    replay = build("cursor-agent", scenario)
    cuts = data.draw(st.lists(st.integers(0, len(replay.stdout)), max_size=40))
    whole = run_parser(CursorParser(), replay).model_dump()
    assert run_parser(CursorParser(), replay, cuts).model_dump() == whole


@pytest.mark.parametrize(
    ("scenario", "status", "cls"),
    [
        ("success", OutcomeStatus.ok, None),
        ("tool_calls", OutcomeStatus.ok, None),
        ("not_logged_in", OutcomeStatus.blocked, ErrorClass.auth),
        ("auth_401", OutcomeStatus.blocked, ErrorClass.auth),
        ("usage_limit", OutcomeStatus.blocked, ErrorClass.quota),
        ("rate_limit_429", OutcomeStatus.error, ErrorClass.rate_limit),
        ("overloaded_529", OutcomeStatus.error, ErrorClass.overloaded),
        ("context_overflow", OutcomeStatus.error, ErrorClass.context_overflow),
        ("model_not_found", OutcomeStatus.error, ErrorClass.model_unavailable),
        ("malformed_line", OutcomeStatus.error, ErrorClass.protocol),
        ("truncated_last_line", OutcomeStatus.error, ErrorClass.protocol),
        ("exit0_is_error", OutcomeStatus.error, ErrorClass.overloaded),
        ("crash_no_result", OutcomeStatus.error, ErrorClass.cli_crash),
        ("timeout_mid_stream", OutcomeStatus.truncated, ErrorClass.timeout),
        ("linger_after_result", OutcomeStatus.ok, None),
        ("api_key_source", OutcomeStatus.blocked, ErrorClass.policy_violation),
        ("unknown_events", OutcomeStatus.ok, None),
        ("oversize_line", OutcomeStatus.ok, None),
    ],
)
def test_classification(scenario, status, cls):
    out = replay_outcome(scenario)
    assert (out.status, out.error_class) == (status, cls), out.message


def test_result_text_and_usage():
    out = replay_outcome("tool_calls")
    assert out.text.endswith("README.md and src/.") and out.tools_used == ["list_dir", "read_file"]
    assert (out.usage.input, out.usage.output, out.usage.cache_read) == (2400, 80, 1800)
    assert out.cost.usd is None and out.auth_source == "login"


def test_is_error_wins_over_subtype_and_exit_code():
    out = replay_outcome("exit0_is_error")
    assert out.exit_code == 0 and out.terminal_event_seen and not out.ok


def test_native_tools_are_recorded_for_the_audit():
    out = replay_outcome("native_tool_use")
    assert out.native_tool_calls == ["read", "write", "shell", "mcp:repo-shipped/search", "function:browser_navigate"]
    assert out.tool_calls == 0


def test_display_model_verdict():
    assert replay_outcome("served_model_mismatch", model="claude-4-sonnet").model_verdict is ModelVerdict.mismatch
    assert replay_outcome("success", model="claude-4-sonnet").model_verdict is ModelVerdict.match
    assert replay_outcome("success").model_verdict is ModelVerdict.unverified


def test_partial_output_is_not_double_counted():
    parser = CursorParser()
    for text in ("Hi", " there"):
        parser.feed(json.dumps({"type": "assistant", "timestamp_ms": 1, "message": {"content": [{"type": "text", "text": text}]}}))
    parser.feed(json.dumps({"type": "assistant", "message": {"content": [{"type": "text", "text": "Hi there"}]}}))
    assert parser.partial_text() == "Hi there"


def test_reported_cost_is_subscription_not_billed():
    parser = CursorParser()
    assert parser.feed(json.dumps({"type": "result", "subtype": "success", "is_error": False, "result": "x", "usage": {"inputTokens": 1, "totalCost": 0.25}})) is LineAction.TERMINAL
    from harnesscheck.process import Ending, ProcessResult

    out = parser.outcome(ProcessResult(Ending.exited, 0, None, "", 0.0))
    assert out.cost.usd == 0.25 and out.cost.source is CostSource.subscription


def test_api_key_source_stops_at_init():
    parser = CursorParser()
    line = json.dumps({"type": "system", "subtype": "init", "apiKeySource": "flag", "model": "Auto"})
    assert parser.feed(line) is LineAction.STOP and parser.early is ErrorClass.policy_violation
