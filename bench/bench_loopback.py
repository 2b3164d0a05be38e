"""Loopback session overhead: `run_session` through the real claude binary (transport, env
policy, bridge spec, parser, process runner, bridge fold) vs the same binary invoked by
hand with the same argv, env, cwd and stdin, side by side against the same scripted
server. Target: median overhead under 15%.

    .venv/bin/python bench/bench_loopback.py [rounds]

Rounds alternate (A, B, A, B, ...) so machine noise hits both sides alike. Each A builds
a fresh session (run dir, bridge spec, config home) as a host would; B replays the argv
captured from one A run, with a fresh empty config home and HOME per round too. Both start the bridge the same way (the CLI spawns it from the
same MCP config). Needs `harnesscheck install-clis`; prints SKIP otherwise.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET = 0.15


def main(rounds: int) -> int:
    from harnesscheck.backends.loopback_endpoint import LoopbackEndpoint
    from harnesscheck.backends.registry import get_spec
    from harnesscheck.contain import process
    from harnesscheck.core.config import Settings
    from harnesscheck.core.contracts import AgentSessionRequest, OutcomeStatus
    from harnesscheck.core.scope import ToolScope
    from harnesscheck.loopback.adapter import loopback_transport
    from harnesscheck.loopback.clis import require_pinned_cli
    from harnesscheck.loopback.scenario import named_scenario
    from harnesscheck.loopback.server import ScriptedModelServer

    binary, why = require_pinned_cli("claude-code")
    if binary is None:
        print(f"loopback session overhead: SKIP ({why})")
        return 0
    spec = get_spec("claude-code")
    base = Path(tempfile.mkdtemp(prefix="bench-loopback-"))
    root = base / "work"
    root.mkdir()
    (root / "README.md").write_text("hello\n")
    captured: dict = {}
    real_run_process = process.run_process

    def capture(argv, **kwargs):
        captured.update(argv=list(argv), env=dict(kwargs["env"]), cwd=kwargs["cwd"], stdin=kwargs.get("stdin_bytes") or b"")
        return real_run_process(argv, **kwargs)

    a_times: list[float] = []
    b_times: list[float] = []
    with ScriptedModelServer(named_scenario("success")) as srv:
        transport = loopback_transport(spec, Settings(backend=spec.id), cli_path=binary.path, endpoint=LoopbackEndpoint(srv.base_url))

        def run_a(i: int) -> float:
            request = AgentSessionRequest(prompt="Say hello.", scope=ToolScope(name="b", root=root, read_only=True), run_dir=base / f"run{i}", timeout_s=120)
            start = time.perf_counter()
            outcome = transport.run_session(request)
            elapsed = time.perf_counter() - start
            if outcome.status is not OutcomeStatus.ok:
                raise SystemExit(f"run_session failed: {outcome.status}/{outcome.error_class}: {outcome.message}")
            return elapsed

        process.run_process = capture
        try:
            run_a(-1)  # warm-up, and the argv B replays
        finally:
            process.run_process = real_run_process

        def run_b(i: int) -> float:
            # a fresh, empty config home and HOME per round, as every A round gets
            env = dict(captured["env"])
            for name in ("CLAUDE_CONFIG_DIR", "HOME"):
                fresh = base / f"hand{i}" / name.lower()
                fresh.mkdir(parents=True, mode=0o700)
                env[name] = str(fresh)
            start = time.perf_counter()
            proc = subprocess.run(
                captured["argv"],
                env=env,
                cwd=captured["cwd"],
                input=captured["stdin"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                timeout=120,
                start_new_session=True,
            )
            elapsed = time.perf_counter() - start
            if proc.returncode != 0 or b'"type":"result"' not in proc.stdout:
                raise SystemExit(f"hand run failed: exit {proc.returncode}")
            return elapsed

        run_b(-1)  # warm-up
        for i in range(rounds):
            a_times.append(run_a(i))
            b_times.append(run_b(i))
    a, b = statistics.median(a_times), statistics.median(b_times)
    overhead = a / b - 1
    verdict = "PASS" if overhead < TARGET else "MISS"
    print(f"claude {binary.version}, {rounds} rounds, side by side")
    print(f"  run_session (transport):   median {a * 1000:.0f} ms  (min {min(a_times) * 1000:.0f})")
    print(f"  same argv by hand:         median {b * 1000:.0f} ms  (min {min(b_times) * 1000:.0f})")
    print(f"  overhead on the fastest rounds: {(min(a_times) / min(b_times) - 1) * 100:+.1f}% (less noise-sensitive)")
    print(f"loopback session overhead {overhead * 100:+.1f}%  target < {TARGET * 100:.0f}%  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 8))
