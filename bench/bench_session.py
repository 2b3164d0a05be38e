"""run_session over the fake claude CLI vs exec of the same fake alone (target < 15% overhead).

Side by side, interleaved call by call in rounds, medians of the round means compared:

- bare: `subprocess.run` of the installed fake with the argv a session would use, the prompt
        on stdin, stdout captured (what any caller pays to run the CLI at all);
- session: `ClaudeCodeTransport.run_session(...)`: run dir, scratch cwd, bridge spec, MCP
        config, per-run config homes, child env, session slot, run_process (process group,
        framing, terminal detection, tree teardown), parser, trace fold, outcome.

A third column, `run_process` alone on the same argv/env, splits the overhead into the
process runner's share (group, guard registration, framing, teardown) and the transport's
own share. These are steady-state numbers: the host's one guard process (_procguard.py) is
already running. What a fresh host pays once to start it is measured apart, in fresh
interpreters: the first run_process call vs the next ones in the same process.

The scenario is fixtures/claude/tool_calls.json (9 stream lines). The fake exits right after
its result line, so no linger time is counted.

    .venv/bin/python bench/bench_session.py
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from harnesscheck.backends.claude_code import ClaudeCodeTransport
from harnesscheck.backends.registry import get_spec
from harnesscheck.core.contracts import AgentSessionRequest
from harnesscheck.core.scope import ToolScope
from harnesscheck.testing.fakes import install_fake_cli

TARGET = 0.15
ROUNDS = 9
CALLS_PER_ROUND = 5
SCENARIO = "tool_calls"
FRESH_HOSTS = 9

_FRESH_HOST = textwrap.dedent(
    """
    import json, sys, time
    from harnesscheck.contain.process import run_process
    argv, env, cwd = json.loads(sys.argv[1])

    def once():
        start = time.perf_counter()
        result = run_process(argv, env=env, cwd=cwd, on_line=lambda line: None, timeout_s=60,
                             stdin_bytes=b"Summarize README.md")
        assert result.exit_code == 0
        return time.perf_counter() - start

    first = once()  # starts this process's guard
    steady = sorted(once() for _ in range(3))[1]
    print(json.dumps([first, steady]))
    """
)


def first_session_cost(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Medians over fresh host processes of (first run_process call, a later one)."""
    firsts, steadies = [], []
    for _ in range(FRESH_HOSTS):
        out = subprocess.run([sys.executable, "-c", _FRESH_HOST, json.dumps([argv, env, str(cwd)])], capture_output=True, text=True, timeout=120, check=True)
        first, steady = json.loads(out.stdout)
        firsts.append(first)
        steadies.append(steady)
    return statistics.median(firsts), statistics.median(steadies)


def main() -> int:
    base = Path(tempfile.mkdtemp(prefix="bench-session-"))
    try:
        root = base / "worktree"
        root.mkdir()
        (root / "README.md").write_text("# Project\nhello\n")
        fake = install_fake_cli("claude", SCENARIO, base / "bin")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(base / "home"), "LANG": "C.UTF-8"}
        transport = ClaudeCodeTransport(get_spec("claude-code"), cli_path=fake.path, parent_env=env, link_credentials=False)
        counter = iter(range(10**9))

        def session() -> None:
            run_dir = base / "runs" / str(next(counter))
            request = AgentSessionRequest(prompt="Summarize README.md", scope=ToolScope(root=root), timeout_s=60, run_dir=run_dir)
            outcome = transport.run_session(request)
            assert outcome.ok, outcome.message

        session()  # warm-up: CLI probe, bridge interpreter check, imports
        rec = fake.last()
        argv = rec["argv"]
        child_env = rec["env"]
        cwd = base / "bare-cwd"
        cwd.mkdir()

        def bare() -> None:
            proc = subprocess.run(argv, input=b"Summarize README.md", capture_output=True, env=child_env, cwd=cwd, timeout=60)
            assert proc.returncode == 0 and b'"type":"result"' in proc.stdout

        def runner() -> None:
            from harnesscheck.contain.process import run_process

            result = run_process(argv, env=child_env, cwd=cwd, on_line=lambda _l: None, timeout_s=60, stdin_bytes=b"Summarize README.md")
            assert result.exit_code == 0

        bare()
        runner()
        kinds = {"bare": bare, "runner": runner, "session": session}
        rounds: dict[str, list[float]] = {k: [] for k in kinds}
        for _ in range(ROUNDS):
            # Interleaved call by call (rotating order), so load swings on this shared machine
            # hit all three alike; each round yields one mean per kind.
            spent = dict.fromkeys(kinds, 0.0)
            for i in range(CALLS_PER_ROUND):
                names = list(kinds)
                for name in names[i % 3 :] + names[: i % 3]:
                    start = time.perf_counter()
                    kinds[name]()
                    spent[name] += time.perf_counter() - start
            for name in kinds:
                rounds[name].append(spent[name] / CALLS_PER_ROUND)
        t_bare, t_runner, t_session = rounds["bare"], rounds["runner"], rounds["session"]
        paired = statistics.median(s / b for s, b in zip(t_session, t_bare)) - 1
        # The transport's own work with the process stubbed out (set-up, env, spec, parse, fold).
        import harnesscheck.contain.process as process_module

        real_run_process = process_module.run_process

        def no_process(argv, **kwargs):
            return process_module.ProcessResult(ending=process_module.Ending.exited, exit_code=0, signal=None, stderr_tail="", duration_s=0.0)

        process_module.run_process = no_process
        try:
            start = time.perf_counter()
            for _ in range(50):
                try:
                    session()
                except AssertionError:
                    pass  # no result event without a process: the outcome is an error, as it should be
            t_setup = (time.perf_counter() - start) / 50
        finally:
            process_module.run_process = real_run_process
        mb, ms, mr = statistics.median(t_bare), statistics.median(t_session), statistics.median(t_runner)
        first, steady = first_session_cost(argv, child_env, cwd)
        overhead = ms / mb - 1
        verdict = "PASS" if overhead < TARGET else "MISS"
        print(f"exec of the fake alone: {mb * 1000:.1f} ms/call (median of {ROUNDS} rounds x {CALLS_PER_ROUND})")
        print(f"run_process alone on the same argv: {mr * 1000:.1f} ms/call ({(mr / mb - 1) * 100:+.1f}% over exec)")
        print(f"run_session over the fake: {ms * 1000:.1f} ms/call (transport's own share over run_process: {(ms - mr) * 1000:+.1f} ms)")
        print(f"transport work alone (process stubbed out): {t_setup * 1000:.1f} ms/session")
        print(f"run_session overhead: {overhead * 100:+.1f}%   target < {TARGET * 100:.0f}%   {verdict}   (steady state: the host's guard already runs)")
        print(f"  paired check: median over rounds of (session / exec) - 1 = {paired * 100:+.1f}%")
        print(
            f"once per host process: first run_process in a fresh host {first * 1000:.1f} ms vs "
            f"{steady * 1000:.1f} ms later ({(first - steady) * 1000:+.1f} ms: guard start and other "
            f"first-call costs; median of {FRESH_HOSTS} fresh hosts)"
        )
        return 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
