"""100 hostile sessions, each trying an escape, then a timeout or a SIGKILLed host: how many
processes are left behind (target 0).

Each session runs tests/proc_scripts/escape.py MODE (setsid + env -i, double fork,
fork-hopping, non-dumpable, overwritten environ, ssh-agent, SIGSTOP of the supervisor and
guard, SIGKILL of the supervisor) through run_process in a small host process; every escape is
tried both ways: a timeout, and a host SIGKILLed once the escape is in place. Every
process an escape starts records its pid first; exec'd sleeps carry a per-session token on
their command line. Bounded: each session has a 60 s budget, the whole run stops by itself.

    .venv/bin/python bench/bench_containment.py [N]
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
    from harnesscheck.process import run_process
    out, timeout, argv = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
    run_process(argv, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, cwd=out,
                on_line=lambda line: open(os.path.join(out, "ready"), "w").close(),
                timeout_s=timeout, term_grace_s=0.2)
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


def session(base: Path, i: int) -> tuple[str, str, list[int]]:
    mode = MODES[i % len(MODES)]
    ending = "timeout" if (i // len(MODES)) % 2 == 0 else "host-killed"  # each escape gets both
    out = base / f"s{i}"
    out.mkdir()
    (out / "host.py").write_text(HOST)
    tok = f"97.{i:06d}{os.getpid() % 1000:03d}"
    argv = [sys.executable, str(ESCAPE), mode, str(out / "pids"), tok]
    timeout = "2.0" if ending == "timeout" else "600"
    host = subprocess.Popen([sys.executable, str(out / "host.py"), str(out), timeout, *argv],
                            env=dict(os.environ, PYTHONPATH=str(ROOT / "src")), cwd=out,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    base = Path(tempfile.mkdtemp(prefix="bench-containment-"))
    started = time.monotonic()
    results = []
    try:
        for i in range(n):
            results.append(session(base, i))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    left = sum(len(r[2]) for r in results)
    by_mode: dict[str, int] = {}
    for mode, ending, pids in results:
        by_mode[f"{mode}/{ending}"] = by_mode.get(f"{mode}/{ending}", 0) + len(pids)
    print(json.dumps(by_mode, indent=1))
    print(f"{n} hostile sessions in {time.monotonic() - started:.0f} s: {left} processes left behind (target 0)")
    return 0 if left == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
