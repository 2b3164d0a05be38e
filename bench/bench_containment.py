"""100 hostile sessions, each trying an escape, then a timeout or a SIGKILLed host: how many
processes are left behind (target 0).

Each session runs tests/proc_scripts/escape.py MODE (setsid + env -i, double fork,
fork-hopping, non-dumpable, overwritten environ, ssh-agent, SIGSTOP of the supervisor and
guard, SIGKILL of the supervisor) through run_process in a small host process; every escape is
tried both ways: a timeout, and a host SIGKILLed once the escape is in place. Every
process an escape starts records its pid first; exec'd sleeps carry a per-session token on
their command line. Bounded: each session has a 60 s budget, the whole run stops by itself.

    .venv/bin/python bench/bench_containment.py [N]             the hostile sessions (guards)
    .venv/bin/python bench/bench_containment.py --sandbox [N]   the same, each in a bwrap sandbox
    .venv/bin/python bench/bench_containment.py --cost [N]      the sandbox's own cost per session

In a sandbox the pids an escape records are its namespace's: what is left is counted by the
per-session token on the command lines of the host's /proc (and the namespace's init).

`--cost`: N spawns of a bare process (/bin/true) through run_process, and N sessions of the fake
claude through the claude-code transport (tool call through the bridge relay), each sandboxed
and not, interleaved; medians and the ratio. Figures from a loaded machine are not final.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ESCAPE = ROOT / "tests" / "proc_scripts" / "escape.py"
MODES = ["setsid-env-i", "double-fork", "fork-hop", "nondumpable", "overwrite-env", "stop-supervisor", "kill-supervisor"]
if shutil.which("ssh-agent"):
    MODES.append("ssh-agent")

HOST = textwrap.dedent(
    """
    import os, sys
    from harnesscheck.contain.process import run_process
    from harnesscheck.contain import sandbox
    out, timeout, argv = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
    box = None
    if os.environ.get("BENCH_SANDBOX") == "1":
        box = sandbox.Sandbox(read_only=(*sandbox.python_paths(), os.path.dirname(argv[1])), writable=(out,), required=True)
    run_process(argv, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, cwd=out,
                on_line=lambda line: open(os.path.join(out, "ready"), "w").close(),
                timeout_s=timeout, term_grace_s=0.2, sandbox=box)
    open(os.path.join(out, "done"), "w").close()
    """
)


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :][:1] not in (b"Z", b"X")


def by_token(tok: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if tok.encode() in Path(f"/proc/{entry}/cmdline").read_bytes() and alive(int(entry)):
                    found.append(int(entry))
            except OSError:
                pass
    return found


def wait_for(path: Path, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while not path.exists():
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    return True


def session(base: Path, i: int, sandboxed: bool = False) -> tuple[str, str, list[int]]:
    mode = MODES[i % len(MODES)]
    ending = "timeout" if (i // len(MODES)) % 2 == 0 else "host-killed"  # each escape gets both
    out = base / f"s{i}"
    out.mkdir()
    (out / "host.py").write_text(HOST)
    tok = f"97.{i:06d}{os.getpid() % 1000:03d}"
    argv = [sys.executable, str(ESCAPE), mode, str(out / "pids"), tok]
    timeout = "2.0" if ending == "timeout" else "600"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), BENCH_SANDBOX="1" if sandboxed else "0")
    host = subprocess.Popen(
        [sys.executable, str(out / "host.py"), str(out), timeout, *argv], env=env, cwd=out, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        if ending == "timeout":
            wait_for(out / "done", 60)
        else:
            wait_for(out / "ready", 60)
            time.sleep(0.1)
            host.kill()
        host.wait(timeout=60)
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()
    pids = [int(x) for x in (out / "pids").read_text().split()] if (out / "pids").exists() else []
    if sandboxed:
        pids = []  # namespace pids: the token on the host's command lines tells what is left
    end = time.monotonic() + 10  # SIGKILL is asynchronous; a bound, not a measure
    left = [p for p in pids if alive(p)] + by_token(tok)
    while left and time.monotonic() < end:
        time.sleep(0.05)
        left = [p for p in pids if alive(p)] + by_token(tok)
    for pid in left:  # clean up after ourselves, after counting
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return mode, ending, sorted(set(left))


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def cost(n: int) -> int:
    """The sandbox's own cost per session, side by side with the unsandboxed path."""
    sys.path.insert(0, str(ROOT / "src"))
    from harnesscheck.backends._harness import warm_up
    from harnesscheck.backends.claude_code import ClaudeCodeTransport
    from harnesscheck.backends.registry import get_spec
    from harnesscheck.contain import sandbox
    from harnesscheck.contain.process import run_process
    from harnesscheck.core.config import Settings
    from harnesscheck.core.contracts import AgentSessionRequest
    from harnesscheck.core.scope import ToolScope
    from harnesscheck.testing.fakes import install_fake_cli

    state = sandbox.status()
    if not state.available:
        print(f"no sandbox here: {state.reason}")
        return 2
    warm_up()
    base = Path(tempfile.mkdtemp(prefix="bench-sandbox-cost-"))
    spawn: dict[str, list[float]] = {"guards": [], "bwrap": []}
    sessions: dict[str, list[float]] = {"guards": [], "bwrap": []}
    try:
        box = sandbox.Sandbox(writable=(str(base),))
        root = base / "wt"
        root.mkdir()
        (root / "README.md").write_text("hello\n")
        fake = install_fake_cli("claude", "tool_calls", base / "bin")
        env = {"PATH": "/usr/bin:/bin", "HOME": str(base / "no-home"), "LANG": "C.UTF-8"}
        transports = {
            mode: ClaudeCodeTransport(get_spec("claude-code"), Settings(sandbox="off" if mode == "guards" else "require"), cli_path=fake.path, parent_env=env)
            for mode in sessions
        }
        for i in range(n):
            for mode in ("guards", "bwrap") if i % 2 == 0 else ("bwrap", "guards"):
                t0 = time.perf_counter()
                run_process(
                    ["/bin/true"], env={"PATH": "/usr/bin:/bin"}, cwd=base, on_line=lambda _l: None, timeout_s=60, sandbox=box if mode == "bwrap" else None
                )
                spawn[mode].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                out = transports[mode].run_session(AgentSessionRequest(prompt="hi", scope=ToolScope(root=root), timeout_s=60, run_dir=base / f"run-{mode}-{i}"))
                sessions[mode].append(time.perf_counter() - t0)
                assert out.ok and out.containment == mode, (out.status, out.message, out.containment)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    for name, data in (("bare spawn (/bin/true)", spawn), ("fake claude session (one bridge call)", sessions)):
        g, b = _median(data["guards"]) * 1000, _median(data["bwrap"]) * 1000
        print(f"{name}: guards {g:.1f} ms, bwrap {b:.1f} ms (median of {n}): +{b - g:.1f} ms, ratio {b / g:.2f}")
    return 0


def main() -> int:
    args = sys.argv[1:]
    if args[:1] == ["--cost"]:
        return cost(int(args[1]) if len(args) > 1 else 20)
    sandboxed = args[:1] == ["--sandbox"]
    if sandboxed:
        args = args[1:]
        sys.path.insert(0, str(ROOT / "src"))
        from harnesscheck.contain import sandbox

        if not sandbox.status().available:
            print(f"no sandbox here: {sandbox.status().reason}")
            return 2
    n = int(args[0]) if args else 100
    base = Path(tempfile.mkdtemp(prefix="bench-containment-"))
    started = time.monotonic()
    results = []
    try:
        for i in range(n):
            results.append(session(base, i, sandboxed))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    left = sum(len(r[2]) for r in results)
    by_mode: dict[str, int] = {}
    for mode, ending, pids in results:
        by_mode[f"{mode}/{ending}"] = by_mode.get(f"{mode}/{ending}", 0) + len(pids)
    print(json.dumps(by_mode, indent=1))
    how = "sandboxed " if sandboxed else ""
    print(f"{n} {how}hostile sessions in {time.monotonic() - started:.0f} s: {left} processes left behind (target 0)")
    return 0 if left == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
