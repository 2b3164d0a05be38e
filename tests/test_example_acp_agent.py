"""The TypeScript-SDK example ACP agent (examples/acp-agent-ts) is judged by the one command
doc/AUTHORS.md names, with no Python of its author's: its acp.* cells at loopback, against the
scripted model server. Skipped, with the reason, where its packages are not installed
(`npm ci --ignore-scripts --prefix examples/acp-agent-ts`; .ci/run does it)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "acp-agent-ts"
CHECKS = ["acp.stdout-only-jsonrpc", "acp.exits-on-stdin-close", "acp.auth-failure-answered", "audit.builtins-off-at-wire"]

pytestmark = pytest.mark.loopback


def test_the_example_agent_passes_its_acp_cells(tmp_path):
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    if not (EXAMPLE / "node_modules" / "@agentclientprotocol" / "sdk").is_dir():
        pytest.skip("the example's packages are not installed: npm ci --ignore-scripts --prefix examples/acp-agent-ts")
    argv = [
        sys.executable,
        "-m",
        "harnesscheck",
        "verify",
        "--backend",
        f"acp:--hc-builtins-off node {EXAMPLE / 'agent.js'}",
        "--level",
        "loopback",
        "-n",
        "0",
        "--report",
        str(tmp_path / "report"),
        "--ratchet",
        "none",
    ]
    for check in CHECKS:
        argv += ["--check", check]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=280)
    report = json.loads((tmp_path / "report" / "conformance-report.json").read_text())
    outcomes = {c["check"]: c["outcome"] for c in report["cells"]}
    assert outcomes == {c: "passed" for c in CHECKS}, (outcomes, proc.stdout[-2000:])
