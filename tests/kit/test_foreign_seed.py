"""Adopting a foreign implementation without shims: the seed project's provider layer
(JiusiServe/InferMatrixCopilot, `src/infermatrix_copilot/providers/`), through the binding in
tests/foreign/seed_binding.py, judged by the whole offline suite (issue 19).

The seed is not published on a package registry, so this test runs only against a local
checkout and is skipped otherwise. How it was run (2026-12-01 and again 2026-12-02, seed main@3e0739c):

    git clone <the seed's repository> /tmp/seed          # or any mirror of it
    python3 -m venv /tmp/seed-venv                        # the seed's own dependencies, apart:
    /tmp/seed-venv/bin/pip install pydantic-settings pyyaml rich openai "mcp<2" pytest pytest-xdist typer \
        Jinja2 packaging httpx anthropic hypothesis respx syrupy   # harnesscheck's other dependencies
    /tmp/seed-venv/bin/pip install --no-deps -e <this checkout>   # it asks for mcp 2, the seed for 1.x
    HC_SEED_SRC=/tmp/seed/src HC_SEED_PYTHON=/tmp/seed-venv/bin/python pytest tests/kit/test_foreign_seed.py

(`mcp<2`: the seed's tool bridge is written for the 1.x SDK; its MCP config starts the bridge
with the test's own interpreter, so the suite runs under that interpreter.)

Every failing cell must be one of the seed's real defects (SEED_DEFECTS, each checked in its
code and reproduced by tests/mutants/foreign.py where it lives in the transport), and every
defect listed must fail: no false fail, no false pass.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: check id -> the seed claude-code transport's real defect behind its failure.
SEED_DEFECTS: dict[str, str] = {
    "env.worktree-not-cwd": "runs claude in the PR worktree (cwd = scope.root): its CLAUDE.md/.mcp.json/.env configure the CLI",
    "env.host-credentials-unreachable": "sanitized_env keeps the host HOME: ~/.ssh, ~/.config/gh, ~/.codex are in the CLI's reach",
    "audit.only-scope-tools-offered": "--allowedTools mcp__infermatrix-tools allows every tool of its bridge, which registers doc, repo-map and history tools beyond the scope",  # noqa: E501
    "bridge.failed-load-ends-session": "no bridge readiness: a failed MCP server is never noticed (json output hides system/init)",
    "errors.auth-blocks": "no error taxonomy: a 401 is not classified (the session waits out the CLI)",
    "errors.context-overflow": "no error taxonomy: is_error results are returned as ok text",
    "errors.crash-without-result": "exit code ignored: a crash with no result is ok with empty text",
    "errors.model-unavailable": "no error taxonomy",
    "errors.not-logged-in-blocks": "no error taxonomy: 'Not logged in' is ok text",
    "errors.overloaded-retryable": "no error taxonomy: a 529 retry ladder ends in a timeout",
    "errors.quota-not-retryable": "no error taxonomy",
    "errors.rate-limit-retryable": "no error taxonomy",
    "parse.exit0-is-error": "is_error is only traced, never read: an error result is ok",
    "parse.truncated-last-line": "an unparsable result becomes {} and an ok outcome",
    "scope.fifo-refused": "the seed's tools.dispatch opens a FIFO and blocks (its bridge has no file-type check)",
    "scope.hardlink-write-refused": "write containment by realpath only: a hard link to an outside file is written through",
    "selection.cli-missing-typed-error": "a missing CLI path raises FileNotFoundError from subprocess, not a typed error naming the path",
    "selection.flag-values-validated": "the model name goes into argv unchecked (--model <anything>)",
    "selection.huge-system-prompt-not-in-argv": "--system-prompt puts the whole system prompt in argv (E2BIG at 200 KB)",
    "time.cancel-ends-session": "no cancellation: the host's cancel is never read",
    "time.linger-after-result": "subprocess.run waits for the CLI to exit: a CLI lingering after its result is waited out",
    "time.max-turns-truncates": "reads stop_reason == 'max_turns'; claude reports subtype error_max_turns",
    "time.no-survivors-after-timeout": "subprocess.run(timeout=) kills only the direct child: grandchildren and the bridge survive",
    "time.timeout-truncates": "a timeout is truncated with no error_class and the partial text lost (json output)",
    "usage.cost-never-fabricated": "declares cost_reporting, but run_session's outcome carries no cost",
    "usage.vendor-cost-reported": "declares cost_reporting, but run_session's outcome carries no cost",
    # found by the checks added since (issues 17 and 19), each read in the seed's code (2026-12-02, main@3e0739c):
    "bridge.answers-every-request": "its bridge (the mcp 1.x stdio server) answers nothing to a line that is not JSON: "
    "JSON-RPC 2.0 requires a parse error (-32700, id null); a client waits on it",
    "bridge.slow-start-not-toolless": "no bridge readiness: with a bridge still pending the turn runs tool-less and the session ends ok",
    "env.planted-files-not-loaded": "runs claude in the worktree (cwd = scope.root) with the default setting sources: the "
    "CLAUDE.md / CLAUDE.local.md planted there and in its parents are loaded",
    "env.run-dir-outside-worktree": "nothing checks where the run dir is: one inside the worktree is accepted, so the model can rewrite its own bridge trace",
    "env.session-files-redacted": "its bridge traces each call's path argument verbatim, unredacted: a host secret the model "
    "passes (GITHUB_TOKEN's value) lands in bridge_trace.jsonl",
    "parse.brace-noise-skipped": "json output parsed as one document: a stdout line starting with '{' that is no event "
    "makes the result {} and the outcome ok with empty text",
    "scope.hardlink-read-contained": "read containment by realpath only: a hard link to an outside file is read through",
    "scope.swap-race-contained": "its tools check the realpath, then open by name: a directory swapped for a symlink "
    "between the two serves the outside file (23 of 200 raced reads here)",
}

pytestmark = pytest.mark.skipif(not os.environ.get("HC_SEED_SRC"), reason="HC_SEED_SRC names no checkout of the seed project")


def test_the_seed_fails_only_its_real_defects(tmp_path):
    report = tmp_path / "report.json"
    python = os.environ.get("HC_SEED_PYTHON", sys.executable)
    proc = subprocess.run(
        [
            python,
            "-m",
            "pytest",
            "conformance",
            "-m",
            "conformance",
            "--hc-backend",
            "tests.foreign.seed_binding:claude",
            "--level",
            "offline",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            "--hc-report",
            str(report),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert report.is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    cells = json.loads(report.read_text())["cells"]
    failing = {c["check"]: c.get("message", "") for c in cells if c["outcome"] in ("failed", "error")}
    false_fails = {k: v[:300] for k, v in failing.items() if k not in SEED_DEFECTS}
    assert not false_fails, f"cells that fail for no defect of the seed (kit assumptions): {false_fails}"
    budget = {c["check"] for c in cells if c["outcome"] == "skipped" and "budget" in (c.get("reason") or "")}
    missed = sorted(set(SEED_DEFECTS) - set(failing) - budget)
    assert not missed, f"known seed defects no check caught: {missed}"
