"""Preflight (harnesscheck.apps.preflight): what a backend will and will not do for one request,
typed, before any side effect; `harnesscheck run --preflight` shows it and exits 0 or 3."""

from __future__ import annotations

from pathlib import Path

from harnesscheck.apps.preflight import preflight
from harnesscheck.backends.registry import get_spec, resolve_provider
from harnesscheck.core.config import Settings
from harnesscheck.core.contracts import AgentSessionRequest, Capability
from harnesscheck.core.policy import Limits, Policy, Rule, ToolKind, Verdict
from harnesscheck.core.scope import ToolScope

ASK_WRITES = Policy(rules=(Rule(decision=Verdict.APPROVAL_REQUIRED, kinds=(ToolKind.WRITE,)),), limits=Limits(turns=5))


def request(tmp_path: Path, **kw) -> AgentSessionRequest:
    return AgentSessionRequest(prompt="hi", scope=ToolScope(root=tmp_path), **kw)


def topics(pf) -> dict[str, str]:
    return {i.topic: i.status for i in pf.items}


def test_a_host_loop_backend_applies_the_policy_and_warns_of_a_missing_approver(tmp_path):
    spec = get_spec("fake")
    pf = preflight(spec, Settings(), request(tmp_path, policy=ASK_WRITES), transport=resolve_provider(Settings(backend="fake")))
    assert pf.ok and topics(pf) == {"policy": "ok", "approvals": "warn", "limits": "ok"}
    with_approver = preflight(spec, Settings(), request(tmp_path, policy=ASK_WRITES, approver=lambda r: True))
    assert "approvals" not in topics(with_approver)


def test_a_backend_that_does_not_apply_the_host_policy_fails_the_preflight(tmp_path):
    spec = get_spec("fake").model_copy(update={"capabilities": get_spec("fake").capabilities - {Capability.host_policy}})
    pf = preflight(spec, Settings(), request(tmp_path, policy=ASK_WRITES))
    assert not pf.ok and topics(pf)["policy"] == "fail"
    assert "host_policy" in pf.lines()[0] and "fix:" in pf.lines()[0]
    assert preflight(spec, Settings(), request(tmp_path)).ok, "without a policy there is nothing to refuse"


def test_a_harness_cannot_reach_the_approver_and_says_so(tmp_path):
    pf = preflight(get_spec("codex"), Settings(cli=tmp_path / "no-codex"), request(tmp_path, policy=ASK_WRITES))
    assert topics(pf)["approvals"] == "warn" and topics(pf)["binary"] == "fail" and not pf.ok


def test_run_preflight_starts_nothing_and_exits_by_the_verdict(tmp_path, capsys, monkeypatch):
    from harnesscheck.apps.runner import run_command

    monkeypatch.chdir(tmp_path)
    (tmp_path / "wt").mkdir()
    assert run_command(backend="fake", root=tmp_path / "wt", prompt="hi", preflight_only=True) == 0
    assert "fake: preflight ok" in capsys.readouterr().out
    code = run_command(backend="codex", root=tmp_path / "wt", prompt="hi", preflight_only=True, cli=tmp_path / "none")
    assert code == 3 and "preflight FAILED" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wt"], "a preflight writes nothing"


def test_the_processes_limit_is_said_enforced_only_where_the_tree_can_be_counted(tmp_path, monkeypatch):
    from harnesscheck.contain import process, sandbox

    limited = Policy(limits=Limits(processes=8))
    details = lambda pf: [i for i in pf.items if i.topic == "limits" and ("processes:" in i.detail or "processes limit" in i.detail)]  # noqa: E731
    [item] = details(preflight(get_spec("codex"), Settings(cli=tmp_path / "no-codex"), request(tmp_path, policy=limited)))
    assert item.status == ("ok" if process._use_guard() or sandbox.status().available else "warn")
    monkeypatch.setattr(process, "_use_guard", lambda: False)
    monkeypatch.setattr(sandbox, "status", lambda: sandbox.SandboxStatus(False, None, False, "not Linux"))
    [item] = details(preflight(get_spec("codex"), Settings(cli=tmp_path / "no-codex"), request(tmp_path, policy=limited)))
    assert item.status == "warn" and "not enforced" in item.detail and item.fix
    [item] = details(preflight(get_spec("fake"), Settings(), request(tmp_path, policy=limited)))
    assert item.status == "warn" and "not enforced" in item.detail
