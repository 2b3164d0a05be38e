"""Host secrets never stay verbatim in a session's files (issue 17 finding 7).

The bridge child redacts only with its own, scrubbed env, so a host secret the model uses as
a tool argument (a token read from the worktree's .env, GITHUB_TOKEN, NPM_TOKEN) landed in
bridge-trace.jsonl; the CLI's event log keeps every stdout line verbatim. The transport
redacts every file the session wrote, after the fact, with the host's secret values (its
parent env, the values it injected, this process's env), and the outcome the report is
written from.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from claude_steps import SID, claude_bridge_scenario

from harnesscheck.apps.report import ReportFacts, write_report
from harnesscheck.backends.claude_code import ClaudeCodeTransport
from harnesscheck.backends.registry import get_spec
from harnesscheck.core.contracts import AgentSessionRequest, OutcomeStatus
from harnesscheck.core.scope import ToolScope
from harnesscheck.testing.fakes import install_fake_cli

#: Plain values (no token format): only redaction by the host's own values catches them.
GITHUB = "plain-github-value-0123456789"
NPM = "plain-npm-value-9876543210"
ODD = 'quote"and\\back-value-31337'  # JSON-escaped in the files: redacted in that form too


def _all_bytes(directory: Path) -> dict[str, bytes]:
    out = {}
    for dirpath, _, names in os.walk(directory):
        for name in names:
            path = Path(dirpath, name)
            if path.is_file() and not path.is_symlink():
                out[str(path.relative_to(directory))] = path.read_bytes()
    return out


def _needles(value: str) -> list[bytes]:
    return [value.encode(), json.dumps(value)[1:-1].encode()]


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    root = tmp_path / "worktree"
    root.mkdir()
    (root / ".env").write_text(f"GITHUB_TOKEN={GITHUB}\n")
    (root / "README.md").write_text("# Project\n")
    return root


def test_every_session_file_and_the_report_are_redacted_with_the_hosts_secrets(worktree: Path, tmp_path: Path) -> None:
    calls = [
        ("read_file", {"path": GITHUB}),  # refused not_found: the path is traced as given
        ("read_file", {"path": f"../{NPM}"}),  # refused: path and detail
        ("list_dir", {"path": f"sub/{ODD}"}),
        ("write_file", {"path": f"notes-{GITHUB}.txt", "content": "x"}),  # allowed: the path is traced
        ("grep", {"pattern": NPM, "path": "."}),
    ]
    scenario = claude_bridge_scenario(
        calls,
        [
            {
                "emit": {
                    "type": "result",
                    "subtype": "success",
                    "is_error": False,
                    "num_turns": len(calls) + 1,
                    "result": f"the token is {GITHUB} and {NPM}",
                    "session_id": SID,
                    "total_cost_usd": 0.01,
                }
            },
        ],
    )
    fake = install_fake_cli("claude", scenario, tmp_path / "bin")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path / "no-home"),
        "LANG": "C.UTF-8",
        "GITHUB_TOKEN": GITHUB,
        "NPM_TOKEN": NPM,
        "ODD_SECRET": ODD,
    }
    assert not any(v in os.environ.values() for v in (GITHUB, NPM, ODD))  # only the transport knows them
    transport = ClaudeCodeTransport(get_spec("claude-code"), cli_path=fake.path, parent_env=env, linger_s=0.3, term_grace_s=0.5)
    run_dir = tmp_path / "run"
    outcome = transport.run_session(AgentSessionRequest(prompt="go", scope=ToolScope(root=worktree, read_only=False), timeout_s=90, run_dir=run_dir))
    assert outcome.status is OutcomeStatus.ok, outcome.message
    assert outcome.tool_calls == len(calls) and len(outcome.refusals) == 3
    facts = ReportFacts.from_spec(
        get_spec("claude-code"),
        cli_version="2.1.197",
        cli_path=None,
        root=str(worktree),
        read_only=False,
        requested_model=None,
        timeout_s=90,
        started_at="2026-12-01T00:00:00+00:00",
        run_dir=str(run_dir),
        attempts=[],
    )
    write_report(run_dir, facts, outcome)
    files = _all_bytes(run_dir)
    assert {"bridge-trace.jsonl", "session-trace.jsonl", "RUN_REPORT.md", "RUN_REPORT.json"} <= set(files)
    for name, data in files.items():
        for secret in (GITHUB, NPM, ODD):
            for needle in _needles(secret):
                assert needle not in data, f"{name} holds a host secret verbatim"
    assert b"[REDACTED]" in files["bridge-trace.jsonl"]
    for name in ("bridge-trace.jsonl", "session-trace.jsonl"):
        for line in files[name].split(b"\n"):
            if line.strip():
                json.loads(line)  # still one JSON record per line
    dumped = outcome.model_dump_json()
    assert GITHUB not in dumped and NPM not in dumped and "[REDACTED]" in outcome.text
    assert (worktree / "notes-[REDACTED].txt").exists() is False  # redaction is of the record, not the file name
    assert (worktree / f"notes-{GITHUB}.txt").exists()


def test_redact_files_rewrites_only_files_holding_a_secret_and_never_follows_links(tmp_path: Path) -> None:
    from harnesscheck.contain.rundir import redact_files

    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    (run / "a.jsonl").write_text(json.dumps({"path": GITHUB, "odd": ODD}) + "\n" + json.dumps({"ok": 1}) + "\n")
    (run / "b.jsonl").write_text('{"clean": true}\n')
    victim = tmp_path / "victim.txt"
    victim.write_text(f"victim holds {GITHUB}\n")
    os.symlink(victim, run / "c.jsonl")
    before_b = os.stat(run / "b.jsonl").st_ino
    changed = redact_files(run, ["a.jsonl", "b.jsonl", "c.jsonl", "missing.jsonl"], {GITHUB, ODD, "short"})
    assert changed == ["a.jsonl"]
    text = (run / "a.jsonl").read_text()
    assert GITHUB not in text and json.dumps(ODD)[1:-1] not in text and text.count("[REDACTED]") == 2
    assert [json.loads(x) for x in text.split("\n") if x] == [{"path": "[REDACTED]", "odd": "[REDACTED]"}, {"ok": 1}]
    assert os.stat(run / "b.jsonl").st_ino == before_b  # untouched: nothing to redact
    assert victim.read_text() == f"victim holds {GITHUB}\n"
    assert sorted(p.name for p in run.iterdir()) == ["a.jsonl", "b.jsonl", "c.jsonl"]  # no temp file left


def test_replace_values_is_exact_and_longest_first() -> None:
    from harnesscheck.contain.envpolicy import replace_values

    assert replace_values({"a": [f"x{GITHUB}y", 3]}, {GITHUB, GITHUB[:10]}) == {"a": ["x[REDACTED]y", 3]}
    assert replace_values("token: looks-like-a-credential-but-unknown", {GITHUB}) == "token: looks-like-a-credential-but-unknown"
