"""Contracts: JSON round-trips, the exported schema, verdicts and typed errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harnesscheck.core.contracts import (
    AgentOutcome,
    AgentSessionRequest,
    AuditFlag,
    AuditVerdict,
    CliNotFound,
    CliVersionUnsupported,
    Cost,
    CostSource,
    ErrorClass,
    ModelVerdict,
    OutcomeStatus,
    Refusal,
    SelectionMissing,
    UnknownBackend,
    Usage,
    model_verdict,
    outcome_schema_json,
)
from harnesscheck.core.scope import ToolScope

REPO = Path(__file__).resolve().parents[2]


def full_outcome() -> AgentOutcome:
    return AgentOutcome(
        status=OutcomeStatus.truncated,
        error_class=ErrorClass.timeout,
        retryable=True,
        message="deadline",
        text="partial",
        iterations=3,
        tool_calls=2,
        tools_used=["read_file"],
        refusals=[Refusal(tool="read_file", code="path_outside_scope", detail="../x")],
        native_tool_calls=["Bash"],
        usage=Usage(input=10, output=5, cache_read=3, cache_write=2, reasoning=1),
        helper_usage={"claude-haiku-4-5": Usage(input=1)},
        cost=Cost(usd=0.01, source=CostSource.subscription, partial=True),
        requested_model="m",
        served_model="m-2026",
        model_verdict=ModelVerdict.match,
        auth_source="none",
        session_id="s",
        exit_code=None,
        signal=15,
        duration_s=1.5,
        terminal_event_seen=False,
        orphan_suspected=True,
        audit=AuditVerdict(clean=False, flags=[AuditFlag(code="native_tool_use", detail="Bash")]),
        backend="claude-code",
        cli_version="2.1.197",
    )


def test_outcome_json_round_trip() -> None:
    outcome = full_outcome()
    again = AgentOutcome.model_validate_json(outcome.model_dump_json())
    assert again == outcome


def test_request_round_trip(tmp_path: Path) -> None:
    req = AgentSessionRequest(prompt="p", scope=ToolScope(root=tmp_path), system="s", timeout_s=3)
    assert AgentSessionRequest.model_validate_json(req.model_dump_json()) == req


def test_outcome_rejects_unknown_fields() -> None:
    with pytest.raises(ValueError):
        AgentOutcome.model_validate({"status": "ok", "api_key": "x"})


def test_exported_schema_is_current() -> None:
    """doc/agent-outcome.schema.json is generated from the model; regenerate with
    `harnesscheck schema > doc/agent-outcome.schema.json`."""
    committed = (REPO / "doc" / "agent-outcome.schema.json").read_text()
    assert committed == outcome_schema_json()


def test_schema_lists_every_status_and_error_class() -> None:
    schema = json.loads(outcome_schema_json())
    text = json.dumps(schema)
    for value in list(OutcomeStatus) + list(ErrorClass):
        assert f'"{value.value}"' in text


@pytest.mark.parametrize(
    ("requested", "served", "verdict"),
    [
        ("claude-opus-4-8", "claude-opus-4-8", "match"),
        ("claude-opus-4-8[1m]", "claude-opus-4-8", "match"),
        ("gpt-5", "gpt-5-2026-01-01", "match"),
        ("claude-opus-4-8", "claude-haiku-4-5", "mismatch"),
        ("gpt-5", "gpt-50", "mismatch"),
        (None, "x", "unverified"),
        ("x", None, "unverified"),
    ],
)
def test_model_verdict(requested, served, verdict) -> None:
    assert model_verdict(requested, served) == verdict


@given(st.builds(Usage, input=st.integers(0, 10**9), output=st.integers(0, 10**9)))
def test_usage_addition_is_fieldwise(u: Usage) -> None:
    total = u + u
    assert total.input == 2 * u.input and total.output == 2 * u.output


def test_errors_name_the_fix() -> None:
    e = UnknownBackend("nope", ["fake", "api"])
    assert "api, fake" in str(e) and "nope" in str(e)
    e = SelectionMissing(["api", "fake"])
    assert "HARNESS_BACKEND=api" in str(e)
    e = CliNotFound("codex", "codex", ["/a/codex", "/b/codex"], "@openai/codex")
    assert "/a/codex" in str(e) and "/b/codex" in str(e) and "HARNESS_BACKEND_CLI" in str(e)
    e = CliVersionUnsupported("claude-code", "1.0.0", ">=2.1.0,<3.0.0")
    assert "1.0.0" in str(e) and ">=2.1.0,<3.0.0" in str(e)
