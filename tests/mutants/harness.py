"""Known-bad CLI harnesses, each the claude-code transport with one defect (see __init__.py)."""

from __future__ import annotations

import os
import subprocess
import threading
import time

from harnesscheck.providers.claude_code import ClaudeCodeTransport, ClaudeStreamParser
from tests.mutants import mutant_spec

M = "tests.mutants.harness"


class PassesOsEnvironThrough(ClaudeCodeTransport):
    """Hands the CLI the host's whole environment (as subprocess does by default)."""

    def invocation(self, ctx, request, cli, *, tool_less):
        inv = super().invocation(ctx, request, cli, tool_less=tool_less)
        inv.injections.update({k: v for k, v in self.parent_env.items() if k not in inv.injections})
        return inv


class LeaksTheApiKeyInArgv(ClaudeCodeTransport):
    """Passes the API key as a command-line flag, visible to every `ps`."""

    def invocation(self, ctx, request, cli, *, tool_less):
        inv = super().invocation(ctx, request, cli, tool_less=tool_less)
        key = self.parent_env.get("ANTHROPIC_API_KEY", "")
        inv.argv[1:1] = ["--settings", f'{{"env": {{"ANTHROPIC_API_KEY": "{key}"}}}}']
        return inv


class _TrustingParser(ClaudeStreamParser):
    def outcome(self, result):
        if self.result is not None and self.result.get("subtype") == "success":
            self.result = {**self.result, "is_error": False}
            self.early = None
        return super().outcome(result)


class TrustsSubtypeSuccess(ClaudeCodeTransport):
    """Believes `subtype: success` and never reads `is_error`."""

    def make_parser(self, ctx, request, *, tool_less, on_text):
        parser = super().make_parser(ctx, request, tool_less=tool_less, on_text=on_text)
        parser.__class__ = _TrustingParser
        return parser


class _BlindInitParser(ClaudeStreamParser):
    def _init(self, event):
        servers = [{**s, "status": "connected"} for s in event.get("mcp_servers") or [] if isinstance(s, dict)]
        tools = list(event.get("tools") or []) + list(self.expected_tools if hasattr(self, "expected_tools") else [])
        return super()._init({**event, "mcp_servers": servers or [{"name": "bridge", "status": "connected"}], "tools": tools})


class RunsOnWhenTheBridgeFailed(ClaudeCodeTransport):
    """Ignores the MCP status in system/init: a session without its tools runs on."""

    def make_parser(self, ctx, request, *, tool_less, on_text):
        parser = super().make_parser(ctx, request, tool_less=tool_less, on_text=on_text)
        parser.__class__ = _BlindInitParser
        return parser


class DropsBridgeRefusals(ClaudeCodeTransport):
    """Folds the bridge's call count into the outcome but drops its refusals."""

    def _finish(self, outcome, ctx, result, info, redact):
        return super()._finish(outcome, ctx, result, info, redact).model_copy(update={"refusals": []})


_RUNNER_LOCK = threading.Lock()


def _naive_run_process(argv, *, env, cwd, on_line, timeout_s, stdin_bytes=None, cancel=None, **_ignored):
    """subprocess.Popen + proc.kill() on the deadline: the CLI dies, its children live on."""
    from harnesscheck.process import Ending, LineAction, ProcessResult

    started = time.monotonic()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    proc.stdin.write(stdin_bytes or b"")
    proc.stdin.close()
    ending = [Ending.exited]

    def read():
        for raw in proc.stdout:
            if on_line(raw.decode("utf-8", "replace").rstrip("\n")) is LineAction.STOP:
                ending[0] = Ending.early_stop
                proc.kill()
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        ending[0] = Ending.deadline
        proc.kill()  # the direct child only
        proc.wait()
    reader.join(timeout=1.0)  # grandchildren hold the pipe: give up on them
    return ProcessResult(ending=ending[0], exit_code=proc.returncode if proc.returncode >= 0 else None,
                         signal=-proc.returncode if proc.returncode < 0 else None, stderr_tail="",
                         duration_s=time.monotonic() - started)


class KillsOnlyTheDirectChild(ClaudeCodeTransport):
    """Runs the CLI with plain subprocess and kills only the CLI itself on timeout."""

    def _run(self, request, **kwargs):
        import harnesscheck.process as process

        with _RUNNER_LOCK:
            real = process.run_process
            process.run_process = _naive_run_process
            try:
                return super()._run(request, **kwargs)
            finally:
                process.run_process = real


class LeavesBuiltinToolsOn(ClaudeCodeTransport):
    """Forgets `--tools ""`: the vendor's Bash, Read and Edit stay available to the model."""

    def invocation(self, ctx, request, cli, *, tool_less):
        inv = super().invocation(ctx, request, cli, tool_less=tool_less)
        if "--tools" in inv.argv:
            i = inv.argv.index("--tools")
            del inv.argv[i:i + 2]
        return inv


class IgnoresTheCliVersion(ClaudeCodeTransport):
    """Runs whatever binary it finds, whatever its version."""

    def __init__(self, spec, settings=None, **kwargs):
        super().__init__(spec, settings, **kwargs)
        self.check_version = False


passes_os_environ_through = mutant_spec("claude-code", M, PassesOsEnvironThrough)
leaks_the_api_key_in_argv = mutant_spec("claude-code", M, LeaksTheApiKeyInArgv)
trusts_subtype_success = mutant_spec("claude-code", M, TrustsSubtypeSuccess)
runs_on_when_the_bridge_failed = mutant_spec("claude-code", M, RunsOnWhenTheBridgeFailed)
drops_bridge_refusals = mutant_spec("claude-code", M, DropsBridgeRefusals)
kills_only_the_direct_child = mutant_spec("claude-code", M, KillsOnlyTheDirectChild)
leaves_builtin_tools_on = mutant_spec("claude-code", M, LeavesBuiltinToolsOn)
ignores_the_cli_version = mutant_spec("claude-code", M, IgnoresTheCliVersion)
_ = os
