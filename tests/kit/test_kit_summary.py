"""`harnesscheck verify` for people and for CI (issue 32, items 1, 3, 5): a terminal summary
(rich, not raw Markdown) with each failing cell's severity, fix and a rerun that works for a
`module:attr` backend; the slowest cells; `--json` on stdout; `--last-failed`."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

from harnesscheck.kit.matrix import combine
from harnesscheck.kit.results import BackendInfo, CellResult, Report, write_json
from harnesscheck.kit.summary import console_for, last_failed, print_summary

REPO = Path(__file__).resolve().parents[2]
EXE = str(Path(sys.executable).with_name("harnesscheck"))


def _report() -> Report:
    return Report(
        kit_version="0.1.0",
        catalog_hash="h",
        levels=["offline"],
        started_at="2026-12-01T00:00:00+00:00",
        backends=[BackendInfo(id="hurried", kind="harness")],
        cells=[
            CellResult(
                check="env.provider-keys-stripped",
                backend="hurried",
                level="offline",
                outcome="failed",
                message="parent variables reached the child: ['ANTHROPIC_API_KEY']",
                duration_s=0.4,
            ),
            CellResult(
                check="time.cancel-ends-session",
                backend="hurried",
                level="offline",
                outcome="failed",
                message="status truncated after cancel",
                duration_s=120.0,
            ),
            CellResult(check="scope.dotdot-refused", backend="hurried", level="offline", outcome="passed", duration_s=0.2),
            CellResult(
                check="usage.vendor-cost-reported",
                backend="hurried",
                level="offline",
                outcome="skipped",
                reason="unsupported-by-backend",
                message="no cost_reporting",
            ),
        ],
    )


def test_the_summary_is_for_a_terminal_and_names_fix_rerun_and_slowest(tmp_path: Path) -> None:
    out = io.StringIO()
    report = _report()
    print_summary(console_for(out), combine([report]), report, tmp_path / "conformance-report.json", {"hurried": "mine.backend:spec"})
    text = out.getvalue()
    assert "# Backend verification matrix" not in text and "|---|" not in text and "[1]" not in text, "no raw Markdown"
    assert "❌ 2 checks fail." in text
    lines = text.splitlines()
    first = next(n for n, line in enumerate(lines) if "env.provider-keys-stripped on hurried" in line)
    assert lines[first].startswith("critical ") and "fix: Build the child env with harnesscheck.contain.envpolicy.build_child_env" in lines[first + 1]
    assert lines[first + 2].strip() == ("rerun: harnesscheck verify --backend mine.backend:spec --level offline --check env.provider-keys-stripped")
    assert "slowest cells: time.cancel-ends-session on hurried@offline 120 s" in text
    assert "1 (1 unsupported-by-backend)" in text


def test_last_failed_reads_the_previous_report(tmp_path: Path) -> None:
    assert last_failed(tmp_path)[:2] == ([], [])
    write_json(_report(), tmp_path / "conformance-report.json")
    backends, checks, note = last_failed(tmp_path)
    assert backends == ["hurried"] and checks == ["env.provider-keys-stripped", "time.cancel-ends-session"]
    assert "rerunning 2 check(s)" in note


def test_verify_json_puts_the_report_on_stdout_and_last_failed_reruns_only_the_failures(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARNESS_", "PYTEST_"))}
    base = [EXE, "verify", "--backend", "tests.foreign.hurried:spec", "--level", "offline", "-n", "0", "--ratchet", "none", "--report", str(tmp_path / "r")]
    first = subprocess.run(
        [*base, "--check", "env.provider-keys-stripped", "--check", "scope.dotdot-refused", "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert first.returncode == 1, first.stderr
    report = json.loads(first.stdout)  # stdout is the report and nothing else
    assert {(c["check"], c["outcome"]) for c in report["cells"]} == {("env.provider-keys-stripped", "failed"), ("scope.dotdot-refused", "passed")}
    assert "fix: Build the child env" in first.stderr
    again = subprocess.run([*base, "--last-failed", "--json"], capture_output=True, text=True, cwd=REPO, env=env, timeout=300, stdin=subprocess.DEVNULL)
    assert again.returncode == 1, again.stderr
    assert [c["check"] for c in json.loads(again.stdout)["cells"]] == ["env.provider-keys-stripped"]
    assert "--last-failed: rerunning 1 check(s) that failed on hurried" in again.stderr


def test_help_texts_name_every_pinned_cli_and_show_no_python_types() -> None:
    from harnesscheck.loopback.install import pinned_clis
    from harnesscheck.loopback.record import _recordable_backends

    env = {**os.environ, "COLUMNS": "200"}
    helps = {
        c: subprocess.run([EXE, c, "--help"], capture_output=True, text=True, env=env, timeout=60).stdout
        for c in ("verify", "run", "install-clis", "record", "drift", "doctor", "matrix")
    }
    for name, text in helps.items():
        options = [line for line in text.splitlines() if line.lstrip().startswith("-")]
        assert not [line for line in options if "<" in line.split("  ")[0]], f"{name} --help shows a Python type: {options}"
    for cli in pinned_clis():
        assert cli.backend in helps["install-clis"], cli.backend
        if not cli.backend.startswith("acp-"):  # drift compares a CLI's recordings; ACP agents have none
            assert cli.backend in helps["drift"], cli.backend
    for cli in _recordable_backends():
        assert cli.backend in helps["record"], cli.backend


def test_the_ci_workflow_shards_every_column_and_merges_with_harnesscheck_matrix() -> None:
    """.github/workflows/harnesscheck.yml (not run here): one job per backend and level for
    every default column that can run (offline: all; loopback: those with a pinned CLI), the
    CLIs cached by their pins, the reports merged by `harnesscheck matrix`."""
    import re

    from harnesscheck.backends.registry import default_backend_ids, get_spec
    from harnesscheck.kit.levels import level_available

    text = (REPO / ".github" / "workflows" / "harnesscheck.yml").read_text(encoding="utf-8")
    jobs = set(re.findall(r'- \{ backend: "?([^",]+)"?, level: (\w+)', text))
    wanted = {("api" if b.startswith("api/") else b, "offline") for b in default_backend_ids() if "==" not in b}
    wanted |= {(b, "loopback") for b in default_backend_ids() if level_available(get_spec(b), "loopback")[0]}
    assert wanted <= jobs, sorted(wanted - jobs)
    for cli in set(re.findall(r'cli: "?([^",}\s]+)"?', text)) - {"${{"}:
        assert get_spec(cli).pinned_version, f"{cli}: a cached CLI has a pin"
    assert "actions/cache@v4" in text and "steps.pin.outputs.key" in text
    assert "harnesscheck matrix reports/*/conformance-report.json" in text and "--json" in text
    assert "secrets." not in text, "no job needs a secret"
