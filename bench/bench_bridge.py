"""Bridge benchmarks, each beside its floor measured in the same run.

    .venv/bin/python bench/bench_bridge.py [--runs N]

1. Cold start: spawn `python -I -m harnesscheck.bridge --spec F` (exactly the argv a
   transport writes into the CLI's MCP config) -> `initialize` answered -> `tools/list`
   answered, over raw JSON-RPC lines on pipes as a CLI does it (protocol 2025-06-18).
   Floor: spawn -> exit of `python -c "import mcp"` (the import the SDK cannot avoid).
   Runs alternate bridge / floor so machine noise hits both alike.
   Targets: median <= 1.3x the floor median, and < 1.5 s.
2. Tool-call round trip over stdio (read_file of a small file): median < 5 ms.
3. In-process dispatch (the same read_file): median < 1 ms.
4. Shared mode (bridge/shared.py, one HTTP server in the host): add_session -> initialize
   -> tools/list answered over streamable HTTP, per session; and its tool call round trip.
5. Forkserver (bridge/forkserver.py): the relay command a transport writes when the
   forkserver runs (`python -I -S _bridgerelay.py SOCKET SPEC -- ...`), spawn -> tools/list,
   measured in the same loop as the full stdio bridge (runs alternate), with the ratio; the
   one-off forkserver start per host; its tool call round trip.
6. Whole session through the forkserver, as the fake CLI's MCP client runs one: relay spawn
   -> `initialize` answered -> `notifications/initialized` -> one `tools/call` answered ->
   stdin closed -> relay exit (woken by a pidfd, no poll), median of `--sessions` (30).
   Floor: spawn -> exit of `python -I -S -c pass` (the relay's interpreter start), measured
   alternately in the same loop; target: whole session <= 1.4x that floor. Before each
   measurement the bench waits for the forkserver's next spare (`spare()`), as a host's
   next registration lets it be ready before a CLI's relay comes.
   `--session-only` runs just this one (quick before/after comparisons).
7. Memory per message (`--memory`): the stdio bridge's peak RSS (VmHWM) after `initialize`,
   then after one 60 MiB request line of each shape (a write_file whose content is a 60 MiB
   string; a tools/call whose arguments hold a 60 MiB array of small numbers; the same
   array 30 MiB long, under the old 64 MiB line bound), each in a fresh bridge, and whether
   a tools/list sent after it is still answered. Target: peak RSS < 256 MiB for every shape.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harnesscheck.bridge.spec import BridgeSpec, bridge_argv, bridge_env, write_spec
from harnesscheck.choke.dispatch import dispatch
from harnesscheck.core.scope import ToolScope

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}},
}


def line(msg: dict) -> bytes:
    return json.dumps(msg).encode() + b"\n"


def read_reply(stream, want_id: int) -> dict:
    while True:
        raw = stream.readline()
        if not raw:
            raise RuntimeError("bridge closed its stdout")
        msg = json.loads(raw)
        if msg.get("id") == want_id:
            return msg


def env_for_child() -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/"), **bridge_env()}


def spawn_initialized(argv: list[str]) -> tuple[subprocess.Popen, float, float]:
    """The bridge started as a CLI starts it, `initialize` answered: (proc, start, seconds to it)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env_for_child())
    assert proc.stdin and proc.stdout
    proc.stdin.write(line(INIT))
    proc.stdin.flush()
    read_reply(proc.stdout, 1)
    return proc, start, time.perf_counter() - start


def cold_start(argv: list[str]) -> tuple[float, float]:
    """(seconds to initialize answered, seconds to tools/list answered) from spawn."""
    proc, start, t_init = spawn_initialized(argv)
    assert proc.stdin and proc.stdout
    proc.stdin.write(line({"jsonrpc": "2.0", "method": "notifications/initialized"}))
    proc.stdin.write(line({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
    proc.stdin.flush()
    tools = read_reply(proc.stdout, 2)
    t_list = time.perf_counter() - start
    assert tools["result"]["tools"], tools
    proc.stdin.close()
    proc.wait(timeout=30)
    return t_init, t_list


def floor(code: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=env_for_child())
    return time.perf_counter() - start


def stdio_round_trips(argv: list[str], n: int) -> list[float]:
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env_for_child())
    assert proc.stdin and proc.stdout
    proc.stdin.write(line(INIT) + line({"jsonrpc": "2.0", "method": "notifications/initialized"}))
    proc.stdin.flush()
    read_reply(proc.stdout, 1)
    times = []
    for i in range(n):
        call = {"jsonrpc": "2.0", "id": 10 + i, "method": "tools/call", "params": {"name": "read_file", "arguments": {"path": "hello.txt"}}}
        start = time.perf_counter()
        proc.stdin.write(line(call))
        proc.stdin.flush()
        reply = read_reply(proc.stdout, 10 + i)
        times.append(time.perf_counter() - start)
        assert reply["result"]["isError"] is False
    proc.stdin.close()
    proc.wait(timeout=30)
    return times


def wait_exit(proc: subprocess.Popen, timeout: float = 30.0) -> None:
    """Wait for `proc` to exit, woken the moment it does (a pidfd; Popen.wait polls)."""
    import select

    pidfd = os.pidfd_open(proc.pid)
    try:
        if not select.select([pidfd], [], [], timeout)[0]:
            raise subprocess.TimeoutExpired(proc.args, timeout)
    finally:
        os.close(pidfd)
    proc.wait()


def whole_session(argv: list[str]) -> tuple[float, float, float]:
    """One session as the fake CLI runs it: (to initialize, to the call's answer, to the
    relay's exit after stdin EOF), seconds from spawn."""
    proc, start, t_init = spawn_initialized(argv)
    assert proc.stdin and proc.stdout
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "read_file", "arguments": {"path": "hello.txt"}}}
    proc.stdin.write(line({"jsonrpc": "2.0", "method": "notifications/initialized"}) + line(call))
    proc.stdin.flush()
    reply = read_reply(proc.stdout, 2)
    t_call = time.perf_counter() - start
    assert reply["result"]["isError"] is False, reply
    proc.stdin.close()
    wait_exit(proc)
    t_exit = time.perf_counter() - start
    assert proc.returncode == 0, proc.returncode
    proc.stdout.close()
    return t_init, t_call, t_exit


def bare_relay_floor() -> float:
    """Spawn -> exit of `python -I -S -c pass`: the interpreter start the relay cannot avoid
    (woken by a pidfd, as the session's relay exit is)."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", "pass"], stdin=subprocess.DEVNULL, env=env_for_child())
    wait_exit(proc)
    return time.perf_counter() - start


def report_sessions(relay_argv: list[str], n: int) -> None:
    from harnesscheck.bridge import forkserver

    server = forkserver.get_forkserver()

    def settle() -> None:
        """Until the forkserver's next spare is forked and has rehearsed (a host's next
        registration gives it that time before the CLI's relay comes): neither measurement
        then pays for the previous session's clean-up running beside it."""
        if server is not None:
            server.spare()

    whole_session(relay_argv)  # warm-up
    bare_relay_floor()
    runs, floors = [], []
    for _ in range(n):  # alternating, so machine noise hits both alike
        settle()
        runs.append(whole_session(relay_argv))
        settle()
        floors.append(bare_relay_floor())
    for i, label in enumerate(("spawn -> initialize", "spawn -> tools/call answered", "spawn -> EOF -> relay exit")):
        vals = sorted(r[i] * 1000 for r in runs)
        print(f"whole session {label:30s} median {statistics.median(vals):6.1f} ms  (min {vals[0]:.1f}, max {vals[-1]:.1f}, n={n})")
    floor_ms = sorted(f * 1000 for f in floors)
    exit_med = statistics.median(r[2] * 1000 for r in runs)
    ratio = exit_med / statistics.median(floor_ms)
    print(f"floor: python -I -S -c pass                 median {statistics.median(floor_ms):6.1f} ms  (min {floor_ms[0]:.1f}, max {floor_ms[-1]:.1f}, n={n})")
    print(f"whole session / floor                       {ratio:6.3f}x  target <= 1.40x   {verdict(ratio <= 1.4)}")
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    if load is not None:
        print(f"load average                                {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


def _http_rpc(client, url: str, msg: dict, session: str | None) -> tuple[dict | None, str | None]:
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    if session:
        headers["mcp-session-id"] = session
        headers["mcp-protocol-version"] = "2025-06-18"
    r = client.post(url, content=json.dumps(msg), headers=headers)
    r.raise_for_status()
    session = r.headers.get("mcp-session-id", session)
    if "id" not in msg:
        return None, session
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        for raw in r.text.splitlines():
            if raw.startswith("data:"):
                data = json.loads(raw[5:])
                if data.get("id") == msg["id"]:
                    return data, session
        raise RuntimeError("no answer in the event stream")
    return r.json(), session


def shared_mode(root: Path, base: Path, n: int) -> tuple[list[float], list[float]]:
    import httpx

    from harnesscheck.bridge.shared import SharedBridge

    starts, trips = [], []
    with SharedBridge() as shared, httpx.Client() as client:
        for i in range(n):
            spec = BridgeSpec(scope=ToolScope(root=root), run_dir=base, trace_path=base / f"shared-{i}.jsonl", session_id=f"shared-{i}")
            start = time.perf_counter()
            url = shared.add_session(spec)
            _, sid = _http_rpc(client, url, INIT, None)
            _http_rpc(client, url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, sid)
            tools, _ = _http_rpc(client, url, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, sid)
            starts.append(time.perf_counter() - start)
            assert tools and tools["result"]["tools"]
            for j in range(20):
                call = {"jsonrpc": "2.0", "id": 10 + j, "method": "tools/call", "params": {"name": "read_file", "arguments": {"path": "hello.txt"}}}
                t0 = time.perf_counter()
                reply, _ = _http_rpc(client, url, call, sid)
                trips.append(time.perf_counter() - t0)
                assert reply and reply["result"]["isError"] is False
            shared.remove_session(spec.session_id)
    return starts, trips


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def _vm_hwm_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for row in fh:
            if row.startswith("VmHWM:"):
                return int(row.split()[1])
    return 0


def peak_rss(argv: list[str], payload: bytes) -> tuple[int, int, bool]:
    """(VmHWM KiB after initialize, VmHWM KiB after `payload` and a tools/list, whether the
    tools/list was answered and the bridge still runs)."""
    import threading

    proc, _, _ = spawn_initialized(argv)
    assert proc.stdin and proc.stdout
    proc.stdin.write(line({"jsonrpc": "2.0", "method": "notifications/initialized"}))
    proc.stdin.flush()
    base = _vm_hwm_kib(proc.pid)

    def feed() -> None:
        try:
            proc.stdin.write(payload + b"\n")
            proc.stdin.write(line({"jsonrpc": "2.0", "id": "after", "method": "tools/list"}))
            proc.stdin.flush()
        except OSError:
            pass

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    answered = False
    try:
        while True:
            raw = proc.stdout.readline()
            if not raw:
                break
            if json.loads(raw).get("id") == "after":
                answered = True
                break
        peak = _vm_hwm_kib(proc.pid) if proc.poll() is None else 0
    finally:
        writer.join(60)
        try:
            proc.stdin.close()
        except OSError:
            pass
        proc.kill()
        proc.wait(timeout=30)
    return base, peak, answered and peak > 0


def report_memory(argv: list[str]) -> None:
    mib = 1 << 20
    head = b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"write_file","arguments":{"path":"x.txt","content":'
    shapes = {
        "60 MiB string content": head + b'"' + b"a" * (60 * mib) + b'"}}}',
        "60 MiB array of numbers": head + b"[" + b"0," * (30 * mib) + b"0]}}}",
        "30 MiB array of numbers": head + b"[" + b"0," * (15 * mib) + b"0]}}}",
    }
    for label, payload in shapes.items():
        base, peak, ok = peak_rss(argv, payload)
        print(
            f"memory: {label:26s} peak RSS {peak / 1024:7.1f} MiB (after initialize {base / 1024:.1f} MiB); "
            f"bridge alive and answering: {ok}   target < 256 MiB   {verdict(ok and peak < 256 * 1024)}"
        )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--sessions", type=int, default=30, help="whole sessions through the forkserver")
    ap.add_argument("--session-only", action="store_true", help="only the whole-session measurement")
    ap.add_argument("--memory", action="store_true", help="only the peak-RSS-per-message measurement")
    ns = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-bridge-") as tmp:
        base = Path(tmp).resolve()
        root = base / "root"
        root.mkdir()
        (root / "hello.txt").write_text("hello\n")
        spec = BridgeSpec(scope=ToolScope(root=root), run_dir=base, trace_path=base / "trace.jsonl", session_id="bench")
        argv = bridge_argv(write_spec(spec, base / "spec.json"))
        if ns.memory:
            report_memory(argv)
            return 0

        from harnesscheck.bridge import forkserver

        t0 = time.perf_counter()
        relayed = forkserver.relay_command(base / "spec.json")
        fs_start = time.perf_counter() - t0
        if relayed is None:
            raise SystemExit("the bridge forkserver cannot run here (see stderr); nothing to compare")
        forkserver.bind_session(base / "spec.json", os.getpid())  # the relays are our children
        forkserver.get_forkserver().children()  # a request that waits: `ready` first
        fs_ready = time.perf_counter() - t0
        relay_argv = relayed[0]
        print(
            f"forkserver start (once per host): relay command in {fs_start * 1000:.1f} ms (the host does not wait), "
            f"ready after {fs_ready * 1000:7.1f} ms (relays wait in its backlog meanwhile)"
        )
        report_sessions(relay_argv, ns.sessions)
        if ns.session_only:
            forkserver.release_session(base / "spec.json")
            return 0

        floor("import mcp")  # warm the page cache for both sides
        cold_start(argv)
        cold_start(relay_argv)
        inits, lists, floors, passes, relay_lists = [], [], [], [], []
        for _ in range(ns.runs):
            t_init, t_list = cold_start(argv)
            inits.append(t_init)
            lists.append(t_list)
            relay_lists.append(cold_start(relay_argv)[1])
            floors.append(floor("import mcp"))
            passes.append(floor("pass"))
        f_med, l_med, i_med = statistics.median(floors), statistics.median(lists), statistics.median(inits)
        ratio = l_med / f_med
        print(f"python -c pass                   median {statistics.median(passes) * 1000:7.1f} ms")
        print(f"floor: python -c 'import mcp'    median {f_med * 1000:7.1f} ms  (min {min(floors) * 1000:.1f})")
        print(f"bridge spawn -> initialize       median {i_med * 1000:7.1f} ms  (min {min(inits) * 1000:.1f})")
        print(f"bridge spawn -> tools/list       median {l_med * 1000:7.1f} ms  (min {min(lists) * 1000:.1f}, max {max(lists) * 1000:.1f})")
        print(f"cold start / floor               {ratio:.2f}x   target <= 1.30x   {verdict(ratio <= 1.3)}")
        print(f"cold start absolute              {l_med:.2f} s   target < 1.5 s   {verdict(l_med < 1.5)}")
        print(f"margin to claude's ~5 s MCP connect limit: {5.0 / max(lists):.1f}x at the worst run")

        r_med = statistics.median(relay_lists)
        print(f"relay spawn -> tools/list        median {r_med * 1000:7.1f} ms  (min {min(relay_lists) * 1000:.1f}, max {max(relay_lists) * 1000:.1f})")
        print(f"full stdio bridge / relay        {l_med / r_med:.1f}x faster to the first tools/list (same runs, alternating)")

        relay_trips = stdio_round_trips(relay_argv, 300)
        print(f"relay tool call round trip       median {statistics.median(relay_trips) * 1000:7.3f} ms")
        forkserver.release_session(base / "spec.json")

        trips = stdio_round_trips(argv, 300)
        rt = statistics.median(trips) * 1000
        p95 = sorted(trips)[int(len(trips) * 0.95)] * 1000
        print(f"stdio tool call round trip       median {rt:7.3f} ms  p95 {p95:.3f} ms   target < 5 ms   {verdict(rt < 5)}")

        scope = ToolScope(root=root)
        for _ in range(200):
            dispatch("read_file", {"path": "hello.txt"}, scope)
        local = []
        for _ in range(2000):
            start = time.perf_counter()
            dispatch("read_file", {"path": "hello.txt"}, scope)
            local.append(time.perf_counter() - start)
        ip = statistics.median(local) * 1000
        print(f"in-process dispatch read_file    median {ip:7.3f} ms   target < 1 ms   {verdict(ip < 1)}")

        starts, trips = shared_mode(root, base, ns.runs)
        print(
            f"shared mode add -> tools/list    median {statistics.median(starts) * 1000:7.1f} ms  (max {max(starts) * 1000:.1f})"
            f"   vs per-session process {l_med * 1000:.1f} ms"
        )
        print(f"shared mode tool call round trip median {statistics.median(trips) * 1000:7.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
