"""`harnesscheck run` end to end (a real subprocess over the fake CLIs) and the run report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harnesscheck.apps.report import ReportFacts, render_markdown, verdict_line, write_report
from harnesscheck.backends.registry import get_spec
from harnesscheck.core.contracts import AgentOutcome, AuditFlag, AuditVerdict, Cost, CostSource, OutcomeStatus, Refusal
from harnesscheck.testing.fakes import install_fake_cli

HARNESSCHECK = [sys.executable, "-c", "from harnesscheck.apps.cli import main; main()"]


def run_cli(tmp_path, *args, timeout=120):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_")}
    env["HOME"] = str(tmp_path / "home")
    env["TMPDIR"] = str(tmp_path / "tmp")  # the default run dir goes here, not into the machine's /tmp
    (tmp_path / "home").mkdir(exist_ok=True)
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return subprocess.run([*HARNESSCHECK, "run", *args], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=timeout, stdin=subprocess.DEVNULL)


def worktree(tmp_path) -> Path:
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / "README.md").write_text("# Project\n")
    return wt


@pytest.mark.parametrize(
    ("backend", "cli", "text"),
    [
        ("codex", "codex", "The answer is 42."),
        ("cursor", "cursor-agent", "Hi. What would you like to work on?"),
    ],
)
def test_run_json_end_to_end(tmp_path, backend, cli, text):
    fake = install_fake_cli(cli, "success", tmp_path / "bin")
    run_dir = tmp_path / "run"
    proc = run_cli(
        tmp_path, "--backend", backend, "--cli", str(fake.path), "--root", str(worktree(tmp_path)), "--prompt", "hi", "--json", "--run-dir", str(run_dir)
    )
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
    assert report.parent.parent.resolve() == (tmp_path / "tmp").resolve()  # a fresh dir in the temp dir


def test_backend_failure_exits_1(tmp_path):
    fake = install_fake_cli("codex", "usage_limit", tmp_path / "bin")
    proc = run_cli(
        tmp_path,
        "--backend",
        "codex",
        "--cli",
        str(fake.path),
        "--root",
        str(worktree(tmp_path)),
        "--prompt",
        "hi",
        "--json",
        "--run-dir",
        str(tmp_path / "run"),
    )
    assert proc.returncode == 1
    out = AgentOutcome.model_validate_json(proc.stdout)
    assert out.status is OutcomeStatus.blocked and out.error_class.value == "quota"
    assert "blocked (quota)" in (tmp_path / "run" / "RUN_REPORT.md").read_text()


def test_flagged_audit_exits_1(tmp_path):
    fake = install_fake_cli("cursor-agent", "native_tool_use", tmp_path / "bin")
    proc = run_cli(
        tmp_path,
        "--backend",
        "cursor",
        "--cli",
        str(fake.path),
        "--root",
        str(worktree(tmp_path)),
        "--prompt",
        "hi",
        "--json",
        "--run-dir",
        str(tmp_path / "run"),
    )
    assert proc.returncode == 1, proc.stderr
    out = AgentOutcome.model_validate_json(proc.stdout)
    assert out.status.value == "blocked" and out.error_class.value == "policy_violation"  # the audit decides (cursor)
    assert out.audit is not None and not out.audit.clean
    assert "audit: FLAGGED" in proc.stderr
    assert "FLAGGED" in (tmp_path / "run" / "RUN_REPORT.md").read_text()


def test_usage_errors_exit_2(tmp_path):
    wt = worktree(tmp_path)
    assert run_cli(tmp_path, "--backend", "nope", "--root", str(wt), "--prompt", "hi").returncode == 2
    assert run_cli(tmp_path, "--backend", "codex", "--root", str(tmp_path / "missing"), "--prompt", "hi").returncode == 2
    proc = run_cli(tmp_path, "--backend", "codex", "--root", str(wt), "--prompt", "hi", "--run-dir", str(wt / "run"))
    assert proc.returncode == 2 and "inside the worktree" in proc.stderr


def test_missing_cli_exits_3_with_the_fix(tmp_path):
    proc = run_cli(tmp_path, "--backend", "codex", "--cli", str(tmp_path / "no-such-codex"), "--root", str(worktree(tmp_path)), "--prompt", "hi")
    assert proc.returncode == 3
    assert "not found" in proc.stderr and "fix:" in proc.stderr
    assert list((tmp_path / "tmp").iterdir()) == [], "the session never started: no empty run dir is left behind"


def test_env_selects_the_cli_when_no_option(tmp_path):
    fake = install_fake_cli("cursor-agent", "success", tmp_path / "bin")
    env_cli = {"HARNESS_BACKEND_CLI": str(fake.path)}
    (tmp_path / "tmp").mkdir()  # the run dir it keeps (with its report) stays in tmp_path
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_")} | env_cli | {"HOME": str(tmp_path), "TMPDIR": str(tmp_path / "tmp")}
    proc = subprocess.run(
        [*HARNESSCHECK, "run", "--backend", "cursor", "--root", str(worktree(tmp_path)), "--prompt", "hi", "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    assert fake.records(), "HARNESS_BACKEND_CLI was not used"
    assert any(p.name.startswith("harnesscheck-run-cursor-") for p in (tmp_path / "tmp").iterdir())


def test_backend_selection_precedence_option_then_env_then_dotenv(tmp_path):
    """runner.py's contract (issue 18 item 4): --backend, else HARNESS_BACKEND from the
    environment, else from ./.env; with none of them a usage error printing the .env line."""
    claude = install_fake_cli("claude", "success", tmp_path / "bin-claude")
    codex = install_fake_cli("codex", "success", tmp_path / "bin-codex")
    wt = worktree(tmp_path)
    base = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_")} | {"HOME": str(tmp_path), "TMPDIR": str(tmp_path)}

    def run(*args, **env):
        return subprocess.run(
            [*HARNESSCHECK, "run", "--root", str(wt), "--prompt", "hi", "--json", *args],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=base | env,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )

    (tmp_path / ".env").write_text(f"HARNESS_BACKEND=claude-code\nHARNESS_BACKEND_CLI={claude.path}\n")
    proc = run()
    assert proc.returncode == 0, proc.stderr
    assert AgentOutcome.model_validate_json(proc.stdout).backend == "claude-code" and claude.records()
    proc = run(HARNESS_BACKEND="codex", HARNESS_BACKEND_CLI=str(codex.path))
    assert proc.returncode == 0 and AgentOutcome.model_validate_json(proc.stdout).backend == "codex", "the environment wins over .env"
    proc = run("--backend", "codex", "--cli", str(codex.path), HARNESS_BACKEND="claude-code")
    assert proc.returncode == 0 and AgentOutcome.model_validate_json(proc.stdout).backend == "codex", "--backend wins"
    (tmp_path / ".env").unlink()
    proc = run()
    assert proc.returncode == 2 and "no backend selected" in proc.stderr and "HARNESS_BACKEND=" in proc.stderr


# ---------------------------------------------------------------------------------------
# The report itself


def test_report_is_redacted_and_tells_cost_sources(tmp_path, monkeypatch):
    secret = "sk-proj-canary0123456789abcdefghijkl"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    outcome = AgentOutcome(
        status=OutcomeStatus.error,
        message=f"401 Incorrect API key provided: {secret}",
        text=f"echo {secret}",
        stderr_tail=f"Authorization: Bearer {secret}\n",
        cost=Cost(usd=0.42, source=CostSource.subscription),
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
    from harnesscheck.core.paths import fake_clis_dir

    proc = run_cli(tmp_path, "--backend", backend, "--cli", str(fake_clis_dir() / cli), "--root", str(worktree(tmp_path)), "--prompt", "hi", "--json")
    assert proc.returncode == 0, proc.stderr
    assert AgentOutcome.model_validate_json(proc.stdout).ok


# ---------------------------------------------------------------------------------------
# Retrying transient errors (deterministic: the sleep and the jitter are injected)

from harnesscheck.apps.runner import RetryPolicy, run_command  # noqa: E402
from harnesscheck.core.contracts import ErrorClass  # noqa: E402


def _failed(cls, *, retryable=True, retry_after=None, status=OutcomeStatus.error, tool_calls=0):
    return AgentOutcome(status=status, error_class=cls, retryable=retryable, retry_after_s=retry_after, tool_calls=tool_calls)


HALF = lambda: 0.5  # noqa: E731 - jitter pinned to the middle: delay = backoff * 0.75


def test_policy_retries_only_transient_classes_with_backoff():
    policy = RetryPolicy(retries=3, max_wait_s=100, base_delay_s=2, max_delay_s=30)
    for cls in (ErrorClass.overloaded, ErrorClass.rate_limit, ErrorClass.server_error, ErrorClass.network):
        assert policy.decide(_failed(cls), 1, 0, read_only=True, rng=HALF)[0] == 1.5
    assert [policy.decide(_failed(ErrorClass.overloaded), n, 0, read_only=True, rng=HALF)[0] for n in (1, 2, 3)] == [1.5, 3.0, 6.0]
    assert policy.decide(_failed(ErrorClass.overloaded), 4, 0, read_only=True, rng=HALF) == (None, "no retries left (3 allowed)")
    capped = RetryPolicy(retries=10, max_wait_s=1000, base_delay_s=2, max_delay_s=30)
    assert capped.decide(_failed(ErrorClass.overloaded), 8, 0, read_only=True, rng=lambda: 1.0)[0] == 30


def test_policy_never_retries_auth_blocking_or_spent_budgets():
    policy = RetryPolicy(retries=5)
    never = [
        _failed(ErrorClass.auth, status=OutcomeStatus.blocked),
        _failed(ErrorClass.auth),  # even if a transport called an auth error retryable: no lockout
        _failed(ErrorClass.quota, status=OutcomeStatus.blocked),
        _failed(ErrorClass.policy_violation),
        _failed(ErrorClass.timeout),
        _failed(ErrorClass.cli_crash),
        _failed(ErrorClass.invalid_request, retryable=False),
        _failed(ErrorClass.overloaded, retryable=False),  # the transport's own verdict counts
        _failed(ErrorClass.overloaded, status=OutcomeStatus.cancelled),
        AgentOutcome(status=OutcomeStatus.ok),
        AgentOutcome(status=OutcomeStatus.truncated, error_class=ErrorClass.max_turns),
    ]
    for outcome in never:
        delay, why = policy.decide(outcome, 1, 0, read_only=True, rng=HALF)
        assert delay is None and why, outcome


def test_policy_honours_retry_after_within_the_wait_budget():
    policy = RetryPolicy(retries=3, max_wait_s=60, base_delay_s=2)
    assert policy.decide(_failed(ErrorClass.rate_limit, retry_after=20.0), 1, 0, read_only=True, rng=HALF)[0] == 20.0
    assert policy.decide(_failed(ErrorClass.rate_limit, retry_after=0.1), 1, 0, read_only=True, rng=HALF)[0] == 1.5
    delay, why = policy.decide(_failed(ErrorClass.rate_limit, retry_after=50.0), 2, 20.0, read_only=True, rng=HALF)
    assert delay is None and "retry wait budget" in why, "never sleep past the total budget"


def test_policy_does_not_rerun_a_writable_session_that_called_tools():
    policy = RetryPolicy(retries=2)
    busy = _failed(ErrorClass.overloaded, tool_calls=2)
    assert policy.decide(busy, 1, 0, read_only=True, rng=HALF)[0] == 1.5
    delay, why = policy.decide(busy, 1, 0, read_only=False, rng=HALF)
    assert delay is None and "twice" in why


def _flaky_cli(tmp_path, cli: str, first: list[str], then: str):
    """A `cli` that answers its invocations with the scenarios in `first`, then `then` forever
    (the version probe always goes to `then`)."""
    targets = {}
    for name in {*first, then}:
        targets[name] = str(install_fake_cli(cli, name, tmp_path / f"fake-{name}").path)
    wrapper = tmp_path / "flaky" / cli
    wrapper.parent.mkdir()
    wrapper.write_text(
        f"#!{sys.executable} -I\n"
        "import os, sys\n"
        f"first, then, targets = {first!r}, {then!r}, {targets!r}\n"
        f"counter = {str(tmp_path / 'flaky' / 'count')!r}\n"
        "if '--version' in sys.argv:\n"
        "    target = targets[then]\n"
        "else:\n"
        "    n = len(open(counter).read()) if os.path.exists(counter) else 0\n"
        "    open(counter, 'a').write('x')\n"
        "    target = targets[first[n]] if n < len(first) else targets[then]\n"
        "os.execv(target, [target, *sys.argv[1:]])\n"
    )
    wrapper.chmod(0o755)
    return wrapper, (lambda: len((tmp_path / "flaky" / "count").read_text()) if (tmp_path / "flaky" / "count").exists() else 0)


@pytest.fixture
def guards_only(monkeypatch):
    """For _flaky_cli: it counts in a file beside itself and execs fakes elsewhere, host paths a
    session's sandbox does not bind; these sessions run with the guards (retries are judged)."""
    monkeypatch.setenv("HARNESS_BACKEND_SANDBOX", "off")


@pytest.fixture
def clean_env(tmp_path, monkeypatch):
    for key in [k for k in os.environ if k.startswith("HARNESS_")]:
        monkeypatch.delenv(key)
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)


def _run_in_process(tmp_path, cli, wrapper, policy, **kw):
    sleeps: list[float] = []
    code = run_command(
        backend=cli,
        root=worktree(tmp_path),
        prompt="hi",
        cli=wrapper,
        run_dir=tmp_path / "run",
        as_json=True,
        retry=policy,
        sleep=sleeps.append,
        rng=HALF,
        **kw,
    )
    return code, sleeps, json.loads((tmp_path / "run" / "RUN_REPORT.json").read_text())


def test_run_retries_a_transient_529_and_records_every_attempt(tmp_path, clean_env, guards_only, capsys):
    wrapper, calls = _flaky_cli(tmp_path, "codex", ["overloaded_529"], "success")
    code, sleeps, report = _run_in_process(tmp_path, "codex", wrapper, RetryPolicy(retries=2))
    assert code == 0, capsys.readouterr().err
    assert calls() == 2 and sleeps == [1.5]
    first, second = report["facts"]["attempts"]
    assert (first["status"], first["error_class"], first["retried"], first["wait_s"]) == ("error", "overloaded", True, 1.5)
    assert (second["status"], second["retried"], second["run_dir"]) == ("ok", False, str(tmp_path / "run" / "attempt-2"))
    assert report["outcome"]["status"] == "ok"
    assert "retrying in 1.5 s (attempt 2 of 3)" in capsys.readouterr().err
    md = (tmp_path / "run" / "RUN_REPORT.md").read_text()
    assert "## Attempts" in md and "- 1: error (overloaded), retried after 1.5 s — overloaded is transient" in md


def test_run_gives_up_after_the_bounded_attempts(tmp_path, clean_env, guards_only):
    wrapper, calls = _flaky_cli(tmp_path, "codex", [], "rate_limit_429")
    code, sleeps, report = _run_in_process(tmp_path, "codex", wrapper, RetryPolicy(retries=2, max_wait_s=100))
    assert code == 1 and calls() == 3 and sleeps == [1.5, 3.0]
    assert [a["retried"] for a in report["facts"]["attempts"]] == [True, True, False]
    assert report["facts"]["attempts"][-1]["why"] == "no retries left (2 allowed)"


def test_run_never_retries_auth(tmp_path, clean_env, guards_only):
    wrapper, calls = _flaky_cli(tmp_path, "codex", [], "auth_401")
    code, sleeps, report = _run_in_process(tmp_path, "codex", wrapper, RetryPolicy(retries=5))
    assert code == 1 and calls() == 1 and sleeps == []
    (only,) = report["facts"]["attempts"]
    assert only["error_class"] == "auth" and not only["retried"] and "final" in only["why"]


def test_cli_retries_option_disables_and_validates(tmp_path):
    fake = install_fake_cli("codex", "overloaded_529", tmp_path / "bin")
    proc = run_cli(
        tmp_path,
        "--backend",
        "codex",
        "--cli",
        str(fake.path),
        "--root",
        str(worktree(tmp_path)),
        "--prompt",
        "hi",
        "--json",
        "--run-dir",
        str(tmp_path / "run"),
        "--retries",
        "0",
    )
    assert proc.returncode == 1 and len(fake.records()) == 1
    (only,) = json.loads((tmp_path / "run" / "RUN_REPORT.json").read_text())["facts"]["attempts"]
    assert only["why"] == "no retries left (0 allowed)"
    bad = run_cli(tmp_path, "--backend", "codex", "--cli", str(fake.path), "--root", str(tmp_path / "wt"), "--prompt", "hi", "--retries", "-1")
    assert bad.returncode == 2 and "--retries" in bad.stderr
