"""`harnesscheck run` end to end (a real subprocess over the fake CLIs) and the run report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harnesscheck.contracts import AgentOutcome, AuditFlag, AuditVerdict, Cost, CostSource, OutcomeStatus, Refusal
from harnesscheck.fakes import install_fake_cli
from harnesscheck.registry import get_spec
from harnesscheck.report import ReportFacts, render_markdown, verdict_line, write_report

HARNESSCHECK = [sys.executable, "-c", "from harnesscheck.cli import main; main()"]


def run_cli(tmp_path, *args, timeout=120):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_")}
    env["HOME"] = str(tmp_path / "home")
    (tmp_path / "home").mkdir(exist_ok=True)
    return subprocess.run([*HARNESSCHECK, "run", *args], capture_output=True, text=True, cwd=tmp_path,
                          env=env, timeout=timeout, stdin=subprocess.DEVNULL)


def worktree(tmp_path) -> Path:
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / "README.md").write_text("# Project\n")
    return wt


@pytest.mark.parametrize(("backend", "cli", "text"), [
    ("codex", "codex", "Hello from the scripted model."),
    ("cursor", "cursor-agent", "Hi. What would you like to work on?"),
])
def test_run_json_end_to_end(tmp_path, backend, cli, text):
    fake = install_fake_cli(cli, "success", tmp_path / "bin")
    run_dir = tmp_path / "run"
    proc = run_cli(tmp_path, "--backend", backend, "--cli", str(fake.path), "--root", str(worktree(tmp_path)),
                   "--prompt", "hi", "--json", "--run-dir", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    out = AgentOutcome.model_validate_json(proc.stdout)
    assert out.ok and out.text == text and out.backend == backend and out.cli_version
    assert out.audit is not None and out.audit.clean
    report = json.loads((run_dir / "RUN_REPORT.json").read_text())
    assert report["outcome"]["text"] == text and report["facts"]["backend"] == backend
    assert report["verdict"].startswith(f"backend: {backend} — native tools possible, audit: clean")
    md = (run_dir / "RUN_REPORT.md").read_text()
    assert f"backend: {backend} — native tools possible, audit: clean" in md and "none (no dollar figure" in md
    assert fake.last()["stdin_type"] in ("pipe", "devnull")


def test_run_human_summary_and_default_run_dir(tmp_path):
    fake = install_fake_cli("codex", "success", tmp_path / "bin")
    proc = run_cli(tmp_path, "--backend", "codex", "--cli", str(fake.path), "--root", str(worktree(tmp_path)), "--prompt", "hi")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("codex: ok in ")
    report = Path(proc.stdout.strip().splitlines()[-1].removeprefix("report: "))
    assert report.name == "RUN_REPORT.md" and report.is_file()
    assert not report.resolve().is_relative_to((tmp_path / "wt").resolve())


def test_backend_failure_exits_1(tmp_path):
    fake = install_fake_cli("codex", "usage_limit", tmp_path / "bin")
    proc = run_cli(tmp_path, "--backend", "codex", "--cli", str(fake.path), "--root", str(worktree(tmp_path)),
                   "--prompt", "hi", "--json", "--run-dir", str(tmp_path / "run"))
    assert proc.returncode == 1
    out = AgentOutcome.model_validate_json(proc.stdout)
    assert out.status is OutcomeStatus.blocked and out.error_class.value == "quota"
    assert "blocked (quota)" in (tmp_path / "run" / "RUN_REPORT.md").read_text()


def test_flagged_audit_exits_1(tmp_path):
    fake = install_fake_cli("cursor-agent", "native_tool_use", tmp_path / "bin")
    proc = run_cli(tmp_path, "--backend", "cursor", "--cli", str(fake.path), "--root", str(worktree(tmp_path)),
                   "--prompt", "hi", "--json", "--run-dir", str(tmp_path / "run"))
    assert proc.returncode == 1, proc.stderr
    out = AgentOutcome.model_validate_json(proc.stdout)
    assert out.ok and out.audit is not None and not out.audit.clean
    assert "audit: FLAGGED" in proc.stderr
    assert "FLAGGED" in (tmp_path / "run" / "RUN_REPORT.md").read_text()


def test_usage_errors_exit_2(tmp_path):
    wt = worktree(tmp_path)
    assert run_cli(tmp_path, "--backend", "nope", "--root", str(wt), "--prompt", "hi").returncode == 2
    assert run_cli(tmp_path, "--backend", "codex", "--root", str(tmp_path / "missing"), "--prompt", "hi").returncode == 2
    proc = run_cli(tmp_path, "--backend", "codex", "--root", str(wt), "--prompt", "hi", "--run-dir", str(wt / "run"))
    assert proc.returncode == 2 and "inside the worktree" in proc.stderr


def test_missing_cli_exits_3_with_the_fix(tmp_path):
    proc = run_cli(tmp_path, "--backend", "codex", "--cli", str(tmp_path / "no-such-codex"), "--root",
                   str(worktree(tmp_path)), "--prompt", "hi")
    assert proc.returncode == 3
    assert "not found" in proc.stderr and "fix:" in proc.stderr


def test_env_selects_the_cli_when_no_option(tmp_path):
    fake = install_fake_cli("cursor-agent", "success", tmp_path / "bin")
    env_cli = {"HARNESS_BACKEND_CLI": str(fake.path)}
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_")} | env_cli | {"HOME": str(tmp_path)}
    proc = subprocess.run([*HARNESSCHECK, "run", "--backend", "cursor", "--root", str(worktree(tmp_path)), "--prompt", "hi", "--json"],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert fake.records(), "HARNESS_BACKEND_CLI was not used"


# ---------------------------------------------------------------------------------------
# The report itself


def test_report_is_redacted_and_tells_cost_sources(tmp_path, monkeypatch):
    secret = "sk-proj-canary0123456789abcdefghijkl"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    outcome = AgentOutcome(
        status=OutcomeStatus.error, message=f"401 Incorrect API key provided: {secret}", text=f"echo {secret}",
        stderr_tail=f"Authorization: Bearer {secret}\n", cost=Cost(usd=0.42, source=CostSource.subscription),
        refusals=[Refusal(tool="read_file", code="path_outside_scope", detail="../x")],
        audit=AuditVerdict(clean=False, flags=[AuditFlag(code="native_shell", detail="cat ~/.ssh/id")]),
    )
    facts = ReportFacts.from_spec(get_spec("cursor"), cli_version="2026.08.11", root="/w")
    md, js = write_report(tmp_path, facts, outcome)
    for path in (md, js):
        text = path.read_text()
        assert secret not in text
        assert path.stat().st_mode & 0o077 == 0
    text = md.read_text()
    assert "$0.4200 (source: subscription: reported by the CLI under a subscription, not billed)" in text
    assert "path_outside_scope" in text and "native_shell" in text
    assert verdict_line(facts, outcome).startswith("backend: cursor — native tools possible, audit: FLAGGED")


def test_report_never_invents_a_cost():
    facts = ReportFacts.from_spec(get_spec("codex"))
    text = render_markdown(facts, AgentOutcome(status=OutcomeStatus.ok, text="x"))
    assert "| cost | none (no dollar figure reported) |" in text
    assert "audit: not run" in text


@pytest.mark.parametrize(("backend", "cli"), [("codex", "codex"), ("cursor", "cursor-agent")])
def test_shipped_fakes_work_as_in_the_readme(tmp_path, backend, cli):
    from harnesscheck.paths import fake_clis_dir

    proc = run_cli(tmp_path, "--backend", backend, "--cli", str(fake_clis_dir() / cli), "--root", str(worktree(tmp_path)),
                   "--prompt", "hi", "--json")
    assert proc.returncode == 0, proc.stderr
    assert AgentOutcome.model_validate_json(proc.stdout).ok
