"""A backend written the hurried way (issue 32, "Done when"): the test fixture whose failing
cells show what a newcomer is told to fix.

What a newcomer writes in a quarter of an hour, from the README and nothing else (the
newcomer report's `quickclaude`): `subprocess.run` of `claude -p --output-format json` with

- `env=os.environ.copy()`: every provider key, nesting variable and the host's HOME pass through;
- `cwd=scope.root`: the CLI runs in the worktree;
- `subprocess.run(timeout=...)`: no process group, so a timeout kills only the direct child;
- the exit code trusted: 0 is ok, whatever the result event says.

Run it: `harnesscheck verify --backend tests.foreign.hurried:spec --level offline`
(from the checkout's root) or `pytest -m conformance --hc-backend tests.foreign.hurried:spec`.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

from harnesscheck.core.contracts import AgentOutcome, CapabilityUnsupported, Kind, OutcomeStatus, ProviderSpec
from harnesscheck.core.contracts import Capability as C


class HurriedClaude:
    #: False: the bridge's trace goes to a temp dir outside the run dir (a backend that keeps
    #: no trace, which doc/AUTHORS.md calls optional), made beside the worktree so the cell's
    #: own temp dir holds it and it goes with it (in the system temp dir it outlived each run)
    trace_in_run_dir = True

    def __init__(self, spec: ProviderSpec, settings):
        self.spec, self.settings = spec, settings

    def run_session(self, request, *, cancel=None, on_text=None) -> AgentOutcome:
        from harnesscheck.bridge.spec import BridgeSpec, bridge_argv, bridge_env, write_spec

        run_dir = Path(request.run_dir or tempfile.mkdtemp())
        run_dir.mkdir(parents=True, exist_ok=True)
        trace = run_dir / "bridge.jsonl" if self.trace_in_run_dir else Path(tempfile.mkdtemp(dir=Path(request.scope.root).parent)) / "bridge.jsonl"
        bridge = BridgeSpec(scope=request.scope, run_dir=run_dir, trace_path=trace, session_id=request.session_id or "hurried")
        argv = bridge_argv(write_spec(bridge, run_dir / "bridge-spec.json"))
        mcp = json.dumps({"mcpServers": {"ws": {"command": argv[0], "args": argv[1:], "env": bridge_env()}}})
        cmd = [
            str(self.settings.cli or "claude"),
            "-p",
            request.prompt,
            "--output-format",
            "json",
            "--mcp-config",
            mcp,
            "--allowedTools",
            "mcp__ws",
            "--max-turns",
            str(request.max_iters),
        ]
        try:
            proc = subprocess.run(cmd, env=os.environ.copy(), cwd=str(request.scope.root), capture_output=True, text=True, timeout=request.timeout_s)
        except subprocess.TimeoutExpired:
            return AgentOutcome(status=OutcomeStatus.truncated, text="", backend=self.spec.id)
        if proc.returncode != 0:
            return AgentOutcome(status=OutcomeStatus.error, text=proc.stderr[-500:], backend=self.spec.id)
        last = (proc.stdout.strip().splitlines() or ["{}"])[-1]
        data = json.loads(last)
        return AgentOutcome(status=OutcomeStatus.ok, text=str(data.get("result") or ""), backend=self.spec.id)

    def complete(self, prompt, *, system=None, model=None, tools=None, timeout_s=None) -> AgentOutcome:
        if tools:
            raise CapabilityUnsupported(self.spec.id, "tools in a one-shot completion")
        return AgentOutcome(status=OutcomeStatus.ok, text="", backend=self.spec.id)


def spec() -> ProviderSpec:
    return ProviderSpec(
        id="hurried",
        kind=Kind.harness,
        label="a backend written the hurried way",
        factory="tests.foreign.hurried:HurriedClaude",
        cli_name="claude",
        capabilities=frozenset({C.mcp_tools, C.cancellation, C.max_turns}),
    )


class TracelessClaude(HurriedClaude):
    trace_in_run_dir = False


def traceless() -> ProviderSpec:
    """The hurried backend keeping no trace in its run dir."""
    return spec().model_copy(update={"id": "traceless", "factory": "tests.foreign.hurried:TracelessClaude"})


def helper() -> int:
    """Not a spec: `--backend tests.foreign.hurried:helper` is a usage error."""
    return 1


def broken_factory() -> ProviderSpec:
    """A spec whose factory does not import: one usage error, not a failed cell per check."""
    return ProviderSpec(id="broken-factory", kind=Kind.harness, label="broken", factory="nowhere_at_all:Nothing", cli_name="claude")
