"""A foreign-style claude backend: an independent miniature (written here, not copied) of the
transport defects the seed project's claude-code provider showed under the suite (issue 19).

It is deliberately *not* built on harnesscheck's providers, so the suite judges it the way it
judges any backend it did not write: a bridge under another name (`infermatrix-tools`, here
harnesscheck's own bridge started under that name), `claude -p --output-format json` (one
result object), a server-wide `--allowedTools mcp__<server>`. Its defects, each failing at
least one check (tests/mutants/__init__.py lists them exactly):

- the CLI runs in the worktree, with the host's HOME and an allow-listed host env
  (env.worktree-not-cwd, env.host-credentials-unreachable);
- `subprocess.run(timeout=...)`: only the direct child is killed; the CLI's result decides
  nothing but the text, `is_error` and `subtype` are ignored, there is no error taxonomy;
  the turn cap is read from `stop_reason` (time.*, errors.*, parse.exit0-is-error);
- the system prompt and the model go straight into argv (selection.*);
- no cancellation, no bridge readiness, no cost in the outcome.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

from harnesscheck.core.contracts import AgentOutcome, CapabilityUnsupported, Kind, OutcomeStatus, ProviderSpec, Usage
from harnesscheck.core.contracts import Capability as C

SERVER = "infermatrix-tools"
DENY = "Bash,Read,Write,Edit,Glob,Grep,WebFetch,WebSearch,NotebookEdit,Task,TodoWrite"
KEEP = {"PATH", "HOME", "TERM", "LANG", "USER", "LOGNAME", "SHELL", "TMPDIR"}


class SeedStyleClaude:
    """Drives claude like the seed's provider: json output, worktree cwd, run(timeout=...)."""

    def __init__(self, spec: ProviderSpec, settings):
        self.spec, self.settings = spec, settings

    def _bridge_config(self, request, run_dir: Path) -> Path:
        from harnesscheck.bridge.spec import BridgeSpec, bridge_argv, bridge_env, write_spec

        spec = BridgeSpec(scope=request.scope, run_dir=run_dir, trace_path=run_dir / "mini-bridge.jsonl", session_id=request.session_id or "mini")
        spec_path = write_spec(spec, run_dir / "mini-bridge-spec.json")
        argv = bridge_argv(spec_path)
        config = run_dir / "mini.mcp.json"
        config.write_text(json.dumps({"mcpServers": {SERVER: {"command": argv[0], "args": argv[1:], "env": bridge_env()}}}))
        return config

    def run_session(self, request, *, cancel=None, on_text=None) -> AgentOutcome:
        run_dir = Path(request.run_dir or tempfile.mkdtemp())
        run_dir.mkdir(parents=True, exist_ok=True)
        cmd = [str(self.settings.cli or "claude"), "-p", "--output-format", "json", "--max-turns", str(request.max_iters), "--disallowedTools", DENY]
        if request.system:
            cmd += ["--system-prompt", request.system]
        if request.model:
            cmd += ["--model", request.model]
        cmd += ["--mcp-config", str(self._bridge_config(request, run_dir)), "--strict-mcp-config", "--allowedTools", f"mcp__{SERVER}"]
        env = {k: v for k, v in os.environ.items() if k in KEEP or k.startswith(("LC_", "XDG_"))}
        timed_out = False
        try:
            proc = subprocess.run(
                cmd, input=request.prompt, cwd=str(request.scope.root), env=env, capture_output=True, text=True, errors="replace", timeout=request.timeout_s
            )
            stdout = proc.stdout
        except subprocess.TimeoutExpired as exc:
            stdout = (exc.stdout or b"").decode("utf-8", "replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            timed_out = True
        start = stdout.find("{")
        try:
            data = json.loads(stdout[start:]) if start >= 0 else {}
        except ValueError:
            data = {}
        data = data if isinstance(data, dict) else {}
        calls = 0
        trace = run_dir / "mini-bridge.jsonl"
        tools: list[str] = []
        if trace.is_file():
            for line in trace.read_text().splitlines():
                rec = json.loads(line)
                if rec.get("event") == "tool":
                    calls += 1
                    tools.append(str(rec.get("tool")))
        usage = data.get("usage") or {}
        return AgentOutcome(
            status=OutcomeStatus.truncated if timed_out or data.get("stop_reason") == "max_turns" else OutcomeStatus.ok,
            text=str(data.get("result") or ""),
            iterations=int(data.get("num_turns") or 0),
            tool_calls=calls,
            tools_used=tools,
            usage=Usage(input=int(usage.get("input_tokens") or 0), output=int(usage.get("output_tokens") or 0)),
            backend=self.spec.id,
        )

    def complete(self, prompt, *, system=None, model=None, tools=None, timeout_s=None) -> AgentOutcome:
        if tools:
            raise CapabilityUnsupported(self.spec.id, "tools in a one-shot completion")
        return AgentOutcome(status=OutcomeStatus.ok, text="", backend=self.spec.id)


seed_style_claude = ProviderSpec(
    id="mutant-SeedStyleClaude",
    kind=Kind.harness,
    label="mutant: a seed-style claude backend (not built on harnesscheck)",
    factory="tests.mutants.foreign:SeedStyleClaude",
    cli_name="claude",
    capabilities=frozenset({C.mcp_tools, C.builtin_tools_off, C.max_turns, C.system_prompt, C.usage_reporting, C.cost_reporting}),
)
