"""A refusal carries a useful, safe detail: the words the model read (tool, offending path as
given), redacted of secrets and bounded — in-process and through the bridge of a harness CLI."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest
from claude_steps import SID, claude_bridge_scenario

from harnesscheck.backends.claude_code import ClaudeCodeTransport
from harnesscheck.backends.registry import get_spec
from harnesscheck.bridge.spec import summarize_trace
from harnesscheck.choke.dispatch import TRACE_DETAIL_CHARS, dispatch, trace_detail
from harnesscheck.choke.trace import Trace
from harnesscheck.core.contracts import AgentOutcome, AgentSessionRequest, OutcomeStatus
from harnesscheck.core.scope import ToolScope
from harnesscheck.testing.fakes import install_fake_cli

PLAIN_SECRET = "plainvalue-0123456789-zz"  # no token format: only redaction by value catches it


@pytest.fixture
def worktree(tmp_path):
    root = tmp_path / "worktree"
    root.mkdir()
    (root / "README.md").write_text("# Project\nhello\n")
    (tmp_path / "secret.txt").write_text("TOP-SECRET-CANARY")
    return root


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_dispatch_traces_the_detail_the_model_reads(worktree, tmp_path):
    trace = Trace(tmp_path / "t.jsonl", session_id="s1")
    result = dispatch("read_file", {"path": "../secret.txt"}, ToolScope(root=worktree), trace, session_id="s1")
    trace.close()
    (rec,) = _records(tmp_path / "t.jsonl")
    assert rec["decision"] == "refuse" and rec["code"] == "path_outside_scope"
    assert rec["detail"] and rec["detail"] in result.text, "the traced detail is the one the model read"
    assert "'../secret.txt'" in rec["detail"]
    (refusal,) = summarize_trace(tmp_path / "t.jsonl", "s1").refusals
    assert (refusal.tool, refusal.code, refusal.detail) == ("read_file", "path_outside_scope", rec["detail"])


def test_unknown_tool_and_io_errors_carry_a_detail_too(worktree, tmp_path):
    trace = Trace(tmp_path / "t.jsonl")
    dispatch("rm_rf", {}, ToolScope(root=worktree), trace)
    dispatch("write_file", {"path": "x", "content": "y"}, ToolScope(root=worktree, read_only=True), trace)
    trace.close()
    unknown, read_only = _records(tmp_path / "t.jsonl")
    assert unknown["code"] == "unknown_tool" and "'rm_rf'" in unknown["detail"]
    assert read_only["code"] == "read_only" and "read-only" in read_only["detail"]


def test_traced_detail_is_redacted_before_it_is_bounded(worktree, tmp_path, monkeypatch):
    monkeypatch.setenv("MY_SERVICE_TOKEN", PLAIN_SECRET)
    trace = Trace(tmp_path / "t.jsonl")
    dispatch("read_file", {"path": f"../{PLAIN_SECRET}/x"}, ToolScope(root=worktree), trace)
    trace.close()
    (rec,) = _records(tmp_path / "t.jsonl")
    assert PLAIN_SECRET not in rec["detail"] and "[REDACTED]" in rec["detail"]
    # a secret straddling the bound is redacted whole, never cut into an unredactable prefix
    straddling = trace_detail("x" * (TRACE_DETAIL_CHARS - 10) + PLAIN_SECRET)
    assert len(straddling) <= TRACE_DETAIL_CHARS and PLAIN_SECRET[:8] not in straddling
    assert len(trace_detail("y" * 10_000)) == TRACE_DETAIL_CHARS


def test_harness_fold_redacts_again_with_the_runs_own_secrets(tmp_path):
    """The bridge child's env knows fewer secrets than the host's: the fold redacts again with
    the transport's parent env, and bounds, before a detail reaches AgentOutcome.refusals."""
    bridge_trace = tmp_path / "bridge-trace.jsonl"
    with open(bridge_trace, "w") as fh:
        fh.write(
            json.dumps(
                {
                    "event": "tool",
                    "session": "s1",
                    "tool": "read_file",
                    "decision": "refuse",
                    "code": "path_outside_scope",
                    "detail": f"'../{PLAIN_SECRET}' climbs above the scope root",
                }
            )
            + "\n"
        )
        fh.write(json.dumps({"event": "tool", "session": "s1", "tool": "grep", "decision": "refuse", "code": "bad_arguments", "detail": "z" * 5000}) + "\n")
    transport = ClaudeCodeTransport(
        get_spec("claude-code"), cli_path=tmp_path / "claude", parent_env={"PATH": "/usr/bin:/bin", "MY_SERVICE_TOKEN": PLAIN_SECRET}
    )
    outcome = AgentOutcome(status=OutcomeStatus.ok, backend="claude-code")
    ctx = SimpleNamespace(bridge_trace=bridge_trace, session_id="s1")
    result = SimpleNamespace(duration_s=0.1, exit_code=0, signal=None, orphan_suspected=False, stderr_tail="")
    done = transport._finish(outcome, ctx, result, SimpleNamespace(version="2.1.197"), lambda s: s)
    first, second = done.refusals
    assert first.code == "path_outside_scope" and PLAIN_SECRET not in first.detail and "[REDACTED]" in first.detail
    assert "climbs above the scope root" in first.detail
    assert len(second.detail) <= TRACE_DETAIL_CHARS


def _claude_bridge_scenario(calls):
    return claude_bridge_scenario(
        calls,
        [
            {
                "emit": {
                    "type": "result",
                    "subtype": "success",
                    "is_error": False,
                    "num_turns": len(calls) + 1,
                    "result": "done",
                    "session_id": SID,
                    "total_cost_usd": 0.01,
                }
            },
        ],
    )


def test_harness_refusals_through_the_real_bridge_name_the_path(worktree, tmp_path):
    scenario = _claude_bridge_scenario([("read_file", {"path": "../secret.txt"}), ("read_file", {"path": f"../{PLAIN_SECRET}"})])
    fake = install_fake_cli("claude", scenario, tmp_path / "bin")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path / "no-home"), "LANG": "C.UTF-8", "MY_SERVICE_TOKEN": PLAIN_SECRET}
    transport = ClaudeCodeTransport(get_spec("claude-code"), cli_path=fake.path, parent_env=env, linger_s=0.3, term_grace_s=0.5)
    outcome = transport.run_session(AgentSessionRequest(prompt="read", scope=ToolScope(root=worktree), timeout_s=90, run_dir=tmp_path / "run"))
    assert outcome.status is OutcomeStatus.ok, outcome.message
    first, second = outcome.refusals
    assert first.code == "path_outside_scope" and "'../secret.txt'" in first.detail and "climbs above" in first.detail
    assert PLAIN_SECRET not in second.detail and "[REDACTED]" in second.detail
    assert "TOP-SECRET-CANARY" not in outcome.model_dump_json()
