"""Helpers for the kit's self-tests: run the conformance suite in a child pytest, read its report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_suite(tmp_path: Path, *args: str, files: tuple[str, ...] = ("conformance",), timeout: float = 900) -> tuple[int, dict | None, str]:
    """(exit code, JSON report or None, combined output) of `pytest <files> <args>` with the kit plugin."""
    report = tmp_path / f"report-{len(list(tmp_path.glob('report-*.json')))}.json"
    # The kit's self-tests pin offline semantics unless a test names its level: the default
    # levels also include loopback wherever the pinned real CLIs are installed.
    named = any(a == "--level" or a.startswith("--level=") for a in args) or "live" in args
    level = () if named else ("--level", "offline")
    cmd = [sys.executable, "-m", "pytest", *files, "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
           "--hc-report", str(report), *level, *args]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT"))}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    data = json.loads(report.read_text()) if report.is_file() else None
    return proc.returncode, data, proc.stdout + proc.stderr


def failing(report: dict) -> dict[str, set[str]]:
    """backend -> ids of checks that failed or errored."""
    out: dict[str, set[str]] = {}
    for cell in report["cells"]:
        if cell["outcome"] in ("failed", "error"):
            out.setdefault(cell["backend"], set()).add(cell["check"])
    return out


def cells(report: dict, backend: str) -> dict[str, dict]:
    return {c["check"]: c for c in report["cells"] if c["backend"] == backend}
