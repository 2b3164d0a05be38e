"""The policy's process limit (issue 31 item 3; doc/SPEC-policy.md, process.run_process
max_processes): a CLI whose tree holds more processes at once than `limits.processes` is
ended, typed truncated / budget, in its sandbox and under the process guard alone, and
nothing of its tree is left; where the tree cannot be counted whole the outcome says the
limit was not enforced. Time is only ever an upper bound."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harnesscheck.contain import process, sandbox
from harnesscheck.core.config import Settings
from harnesscheck.core.contracts import AgentSessionRequest, ErrorClass, OutcomeStatus
from harnesscheck.core.policy import Limits, Policy
from harnesscheck.core.scope import ToolScope

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="counting a tree needs Linux /proc")


def _forking_session(tmp_path: Path, *, mode: str, limit: int, spawns: int, timeout_s: float = 120.0):
    """A fake claude that starts `spawns` sleepers (the last one setsid, out of its group),
    then stalls: only the limit (or the deadline) ends it."""
    from harnesscheck.backends.claude_code import ClaudeCodeTransport
    from harnesscheck.backends.registry import get_spec
    from harnesscheck.testing.fakes import install_fake_cli, load_fixture

    scenario = load_fixture("claude", "timeout_mid_stream")
    forks = [{"spawn": "sleep 1000"} for _ in range(spawns - 1)] + [{"spawn": "sleep 1000", "setsid": True}]
    scenario["steps"] = [*forks, *scenario["steps"]]
    root = tmp_path / "worktree"
    root.mkdir()
    (root / "README.md").write_text("hello\n")
    fake = install_fake_cli("claude", scenario, tmp_path / "bin")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "no-home"), "LANG": "C.UTF-8"}
    transport = ClaudeCodeTransport(get_spec("claude-code"), Settings(sandbox=mode), cli_path=fake.path, parent_env=env)
    request = AgentSessionRequest(
        prompt="Summarize README.md", scope=ToolScope(root=root), timeout_s=timeout_s, run_dir=tmp_path / "run", policy=Policy(limits=Limits(processes=limit))
    )
    return transport.run_session(request), fake


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


MODES = ["off", pytest.param("require", marks=pytest.mark.skipif(not sandbox.status().available, reason=f"no sandbox here: {sandbox.status().reason}"))]


@pytest.mark.parametrize("mode", MODES)
def test_a_cli_that_forks_past_the_process_limit_ends_the_session_typed(tmp_path, mode):
    outcome, fake = _forking_session(tmp_path, mode=mode, limit=3, spawns=4)
    assert outcome.status is OutcomeStatus.truncated and outcome.error_class is ErrorClass.budget, outcome.message
    assert "processes limit" in outcome.message
    assert outcome.containment == ("bwrap" if mode == "require" else "guards")
    spawned = [g["pid"] for rec in fake.records() for g in rec["grandchildren"]]
    assert spawned, "the fake recorded no child"
    assert not [p for p in spawned if _alive(p)], "a process of the tree outlived the session"


@pytest.mark.parametrize("mode", MODES)
def test_a_tree_within_the_limit_runs_on(tmp_path, mode):
    """Four sleepers, the CLI and its MCP relay are within 10: the session runs to its deadline."""
    outcome, _ = _forking_session(tmp_path, mode=mode, limit=10, spawns=4, timeout_s=3.0)
    assert outcome.error_class is ErrorClass.timeout, (outcome.status, outcome.error_class, outcome.message)


def test_where_the_tree_cannot_be_counted_the_outcome_says_the_limit_was_not_enforced(tmp_path, monkeypatch):
    """No process guard and no sandbox: an escapee leaves the tree unseen, so the limit is not
    enforced, and the outcome says so (never a silent 'unlimited')."""
    monkeypatch.setattr(process, "_use_guard", lambda: False)
    outcome, _ = _forking_session(tmp_path, mode="off", limit=3, spawns=1, timeout_s=3.0)
    assert outcome.error_class is ErrorClass.timeout
    assert "processes limit is not enforced" in outcome.message
