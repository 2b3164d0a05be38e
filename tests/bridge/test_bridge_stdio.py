"""The real bridge process over stdio: the SDK's stdio client against
`python -m harnesscheck.bridge --spec` and `harnesscheck bridge --root`; stdout purity,
environment scrubbing and the exfiltration guard, EOF exit and parent-death exit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import anyio
import pytest

from harnesscheck.bridge.spec import BridgeSpec, bridge_argv, bridge_env, summarize_trace, write_spec
from harnesscheck.core.scope import ToolScope

#: Upper bound for one bridge start-up on a loaded 2-core box (never a speed assertion).
START_BOUND_S = 60.0
CANARY_KEY = "sk-ant-api03-CANARY-parent-env-0123456789"
CANARY_TOKEN = "oauth-CANARY-token-0123456789abcdef"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="stdio process tests need Linux /proc")


@pytest.fixture
def setup(tmp_path: Path):
    base = tmp_path
    root = base / "wt"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("alpha = 1\n")
    (base / ".env").write_text(f"ANTHROPIC_API_KEY={CANARY_KEY}\n")
    spec = BridgeSpec(
        scope=ToolScope(root=root, read_only=False),
        run_dir=base / "run",
        trace_path=base / "run" / "bridge-s1.jsonl",
        session_id="s1",
    )
    spec_path = write_spec(spec, base / "run" / "bridge-spec.json")
    return base, root, spec, spec_path


def _canary_env() -> dict[str, str]:
    """What a real CLI hands its MCP servers: its whole env, keys included."""
    return {
        **bridge_env(),
        "ANTHROPIC_API_KEY": CANARY_KEY,
        "CLAUDE_CODE_OAUTH_TOKEN": CANARY_TOKEN,
        "CLAUDECODE": "1",
        "MY_SERVICE_PASSWORD": CANARY_TOKEN,
    }


def _text(result) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


async def _session(command: str, args: list[str], env: dict[str, str], cwd: Path, calls, errlog):
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=command, args=args, env=env, cwd=str(cwd))
    with anyio.fail_after(START_BOUND_S + 10 * len(calls)):
        async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
            listed = await client.list_tools()
            results = [await client.call_tool(name, a) for name, a in calls]
    return listed, results


def test_sdk_stdio_client_against_python_m_bridge(setup, tmp_path: Path) -> None:
    base, root, spec, spec_path = setup
    argv = bridge_argv(spec_path)
    calls = [
        ("read_file", {"path": "src/a.py"}),
        ("write_file", {"path": "src/b.py", "content": "beta = 2\n"}),
        ("read_file", {"path": "../.env"}),
        ("read_file", {"path": "/proc/self/environ"}),
        ("read_file", {"path": "/proc/self/root/etc/hostname"}),
        ("read_file", {"path": "../../../../proc/self/environ"}),
        ("list_dir", {"path": "/sys"}),
        ("read_file", {"path": "/dev/stdin"}),
        ("grep", {"pattern": "CANARY", "path": "."}),
    ]
    with open(tmp_path / "stderr.txt", "w+") as errlog:
        listed, results = anyio.run(_session, argv[0], argv[1:], _canary_env(), root, calls, errlog)
    assert [t.name for t in listed.tools] == ["read_file", "list_dir", "grep", "write_file", "edit_file"]
    assert not results[0].is_error and _text(results[0]) == "alpha = 1\n"
    assert not results[1].is_error and (root / "src" / "b.py").read_text() == "beta = 2\n"
    for result in results[2:8]:
        assert result.is_error and _text(result).startswith("refused: "), _text(result)
    for result in results:
        assert CANARY_KEY not in _text(result) and CANARY_TOKEN not in _text(result)
    records = [json.loads(x) for x in spec.trace_path.read_text().splitlines()]
    assert records[0]["event"] == "bridge_start" and records[-1] == {**records[-1], "event": "bridge_stop", "reason": "eof"}
    assert all(r["session"] == "s1" for r in records)
    summary = summarize_trace(spec.trace_path, session_id="s1")
    assert summary.tool_calls == len(calls) and summary.writes == ["src/b.py"]
    refused_paths = {r["path"] for r in records if r.get("decision") == "refuse"}
    assert {"../.env", "/proc/self/environ"} <= refused_paths
    assert CANARY_KEY not in spec.trace_path.read_text()


def test_harnesscheck_bridge_root_shortcut(tmp_path: Path) -> None:
    root = tmp_path / "wt"
    root.mkdir()
    (root / "hello.txt").write_text("hello\n")
    trace = tmp_path / "t.jsonl"
    exe = Path(sys.executable).parent / "harnesscheck"
    calls = [("read_file", {"path": "hello.txt"}), ("write_file", {"path": "x", "content": "y"})]
    with open(tmp_path / "stderr.txt", "w+") as errlog:
        listed, results = anyio.run(_session, str(exe), ["bridge", "--root", str(root), "--read-only", "--trace", str(trace)], {}, tmp_path, calls, errlog)
    assert [t.name for t in listed.tools] == ["read_file", "list_dir", "grep"]
    assert _text(results[0]) == "hello\n"
    assert results[1].is_error and _text(results[1]).startswith("refused: read_only: ")
    summary = summarize_trace(trace)
    assert summary.started and summary.tool_calls == 2


# ---- process-level guarantees -----------------------------------------------------------

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def _frame(*msgs: dict) -> bytes:
    return b"".join(json.dumps(m).encode() + b"\n" for m in msgs)


def _call(i: int, name: str, args: dict) -> dict:
    return {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": name, "arguments": args}}


def _read_responses(stream, count: int, deadline: float) -> list[dict]:
    """Read `count` JSON-RPC lines; every line on the protocol stream must be JSON-RPC."""
    out = []
    while len(out) < count:
        assert time.monotonic() < deadline, "bridge did not answer in time"
        line = stream.readline()
        assert line, "protocol stream closed early"
        msg = json.loads(line)  # anything else on stdout is a corrupted stream
        assert msg.get("jsonrpc") == "2.0", line
        if "id" in msg:
            out.append(msg)
    return out


def _driver(tmp_path: Path, spec_path: Path, prelude: str) -> list[str]:
    """A test-only launcher: run `prelude` inside the bridge process, then the real entry
    point. Production code has no hook for this; the launcher is the test's own code."""
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(prelude) + "\nimport sys\nfrom harnesscheck.bridge.__main__ import main\nsys.exit(main(['--spec', sys.argv[1]]))\n")
    return [sys.executable, str(script), str(spec_path)]


def test_prints_after_startup_go_to_stderr_and_never_break_the_session(setup, tmp_path: Path) -> None:
    """print(), a raw write to fd 1 and a child process writing to its stdout, all from
    inside the bridge during a tool call, end up on stderr; the stream stays pure."""
    base, root, spec, spec_path = setup
    prelude = """
        import os, subprocess, harnesscheck.choke.dispatch as d
        _real = d.dispatch
        def noisy(*a, **k):
            print("NOISE-print")
            os.write(1, b"NOISE-fd1\\n")
            subprocess.run(["echo", "NOISE-child"])
            return _real(*a, **k)
        d.dispatch = noisy
    """
    argv = _driver(tmp_path, spec_path, prelude)
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=root)
    try:
        proc.stdin.write(_frame(INIT, INITIALIZED, _call(2, "read_file", {"path": "src/a.py"}), _call(3, "list_dir", {"path": "."})))
        proc.stdin.flush()
        responses = _read_responses(proc.stdout, 3, time.monotonic() + START_BOUND_S)
        proc.stdin.close()
        assert proc.wait(timeout=START_BOUND_S) == 0
        rest = proc.stdout.read()
        stderr = proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
    by_id = {r["id"]: r for r in responses}  # concurrent calls may answer in any order
    assert by_id[2]["result"]["content"][0]["text"] == "alpha = 1\n"
    assert by_id[3]["result"]["isError"] is False
    assert rest == b""
    for noise in ("NOISE-print", "NOISE-fd1", "NOISE-child"):
        assert stderr.count(noise) == 2, (noise, stderr)


def test_bridge_scrubs_its_own_environment(setup, tmp_path: Path) -> None:
    """The bridge's os.environ holds no provider key after start-up (observed: the CLIs
    hand their whole env to MCP servers). /proc/<pid>/environ keeps the exec-time env (the
    kernel's copy cannot be changed), which is why dispatch never serves /proc at all."""
    base, root, spec, spec_path = setup
    dump = tmp_path / "env-after.json"
    prelude = f"""
        import json, os, harnesscheck.choke.dispatch as d
        _real = d.dispatch
        def spy(*a, **k):
            open({str(dump)!r}, "w").write(json.dumps(dict(os.environ)))
            return _real(*a, **k)
        d.dispatch = spy
    """
    argv = _driver(tmp_path, spec_path, prelude)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), **_canary_env(), "HARNESSCHECK_RUN": "run-marker-1"}
    proc = subprocess.run(
        argv,
        input=_frame(INIT, INITIALIZED, _call(2, "read_file", {"path": "/proc/self/environ"})),
        capture_output=True,
        env=env,
        cwd=root,
        timeout=START_BOUND_S,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    after = json.loads(dump.read_text())
    assert not {"ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "CLAUDECODE", "MY_SERVICE_PASSWORD"} & set(after)
    assert after["HARNESSCHECK_RUN"] == "run-marker-1"  # the orphan sweep's marker survives
    assert set(after) - {"PATH", "HOME", "HARNESSCHECK_RUN"} <= {"LC_CTYPE"}  # LC_CTYPE: Python's locale coercion
    assert not any(CANARY_KEY in v or CANARY_TOKEN in v for v in after.values())
    assert CANARY_KEY not in proc.stdout.decode() and CANARY_TOKEN not in proc.stdout.decode()
    reply = [json.loads(x) for x in proc.stdout.decode().splitlines()][-1]
    assert reply["result"]["isError"] is True


def test_bridge_reads_no_dotenv_and_no_modules_from_its_cwd(setup, tmp_path: Path) -> None:
    """A worktree cannot reconfigure or hijack the bridge: a .env in the cwd is ignored and
    a module named like one the bridge imports, placed in the cwd, is never imported."""
    base, root, spec, spec_path = setup
    (root / ".env").write_text("HARNESS_BACKEND=api\nPYTHONPATH=.\n")
    (root / "anyio.py").write_text("raise SystemExit('hijacked anyio')\n")
    (root / "harnesscheck").mkdir()
    (root / "harnesscheck" / "__init__.py").write_text("raise SystemExit('hijacked harnesscheck')\n")
    argv = bridge_argv(spec_path)
    proc = subprocess.run(
        argv,
        input=_frame(INIT, INITIALIZED, _call(2, "read_file", {"path": "src/a.py"})),
        capture_output=True,
        env=bridge_env() or None,
        cwd=root,
        timeout=START_BOUND_S,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    assert b"hijacked" not in proc.stderr
    reply = [json.loads(x) for x in proc.stdout.decode().splitlines()][-1]
    assert reply["result"]["content"][0]["text"] == "alpha = 1\n", reply


def test_bad_spec_exits_2_with_a_message_and_no_protocol_output(tmp_path: Path) -> None:
    bad = tmp_path / "spec.json"
    bad.write_text('{"version": 1}')
    proc = subprocess.run(bridge_argv(bad), input=b"", capture_output=True, env=bridge_env() or None, timeout=START_BOUND_S)
    assert proc.returncode == 2
    assert proc.stdout == b""
    assert b"invalid bridge spec" in proc.stderr


def test_spec_sha256_pins_the_spec_bytes(setup) -> None:
    """`--spec-sha256`: a spec whose bytes differ is refused (exit 2, stderr says why, stdout
    untouched, nothing served); the matching spec is served; a malformed digest is refused."""
    from harnesscheck.bridge.spec import spec_sha256

    base, root, spec, spec_path = setup
    pin = spec_sha256(spec_path.read_bytes())
    request = _frame(INIT, INITIALIZED, _call(2, "read_file", {"path": "src/a.py"}))
    ok = subprocess.run(bridge_argv(spec_path, spec_sha256=pin), input=request, capture_output=True, env=bridge_env() or None, timeout=START_BOUND_S)
    assert ok.returncode == 0, ok.stderr.decode()
    assert json.loads(ok.stdout.decode().splitlines()[-1])["result"]["content"][0]["text"] == "alpha = 1\n"

    widened = json.loads(spec_path.read_text())
    widened["scope"]["root"] = "/"
    spec_path.write_text(json.dumps(widened))
    for digest in (pin, "not-a-digest", "\u00e9" * 64):
        bad = subprocess.run(bridge_argv(spec_path, spec_sha256=digest), input=request, capture_output=True, env=bridge_env() or None, timeout=START_BOUND_S)
        assert bad.returncode == 2 and bad.stdout == b"", bad
        assert b"sha256 differs" in bad.stderr
    # without the pin (direct use, `harnesscheck bridge`-style): served as the file says now
    unpinned = subprocess.run(bridge_argv(spec_path), input=request, capture_output=True, env=bridge_env() or None, timeout=START_BOUND_S)
    assert unpinned.returncode == 0, unpinned.stderr.decode()


def test_exits_on_stdin_eof_after_answering_calls_in_flight(setup) -> None:
    base, root, spec, spec_path = setup
    proc = subprocess.Popen(bridge_argv(spec_path), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=bridge_env() or None)
    try:
        proc.stdin.write(_frame(INIT, INITIALIZED, _call(2, "grep", {"pattern": "alpha", "path": "."}), _call(3, "read_file", {"path": "src/a.py"})))
        proc.stdin.close()  # EOF right behind the calls
        assert proc.wait(timeout=START_BOUND_S) == 0
        replies = {m["id"]: m for m in map(json.loads, proc.stdout.read().decode().splitlines())}
    finally:
        if proc.poll() is None:
            proc.kill()
    assert set(replies) == {1, 2, 3}
    assert replies[3]["result"]["content"][0]["text"] == "alpha = 1\n"
    assert summarize_trace(spec.trace_path).tool_calls == 2


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def _wait_gone(pid: int, bound_s: float) -> bool:
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.05)
    return False


def test_exits_when_its_parent_dies_even_with_stdin_open(setup, tmp_path: Path) -> None:
    """An intermediate parent spawns the bridge and is SIGKILLed; the test keeps the
    bridge's stdin pipe open, so only parent-death detection can end it."""
    base, root, spec, spec_path = setup
    r_fd, w_fd = os.pipe()
    pid_file = tmp_path / "bridge.pid"
    launcher = textwrap.dedent(f"""
        import os, subprocess, sys, time
        p = subprocess.Popen({bridge_argv(spec_path)!r}, stdin={r_fd}, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, pass_fds=({r_fd},))
        open({str(pid_file)!r}, "w").write(str(p.pid))
        time.sleep(600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", launcher], pass_fds=(r_fd,), env={**os.environ, **bridge_env()})
    os.close(r_fd)
    bridge_pid = None
    try:
        deadline = time.monotonic() + START_BOUND_S
        while time.monotonic() < deadline and not (pid_file.exists() and pid_file.read_text()):
            time.sleep(0.05)
        bridge_pid = int(pid_file.read_text())
        deadline = time.monotonic() + START_BOUND_S  # wait until it has started serving
        while time.monotonic() < deadline and not summarize_trace(spec.trace_path).started:
            time.sleep(0.05)
        assert summarize_trace(spec.trace_path).started
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        assert _wait_gone(bridge_pid, 30), "bridge survived its parent"
    finally:
        os.close(w_fd)
        if bridge_pid and not _gone(bridge_pid):
            os.kill(bridge_pid, signal.SIGKILL)
        if parent.poll() is None:
            parent.kill()


def test_exits_when_the_spec_host_pid_dies(setup, tmp_path: Path) -> None:
    """The spec's parent_pid (the host) dying ends the bridge, even though its direct
    parent lives on and stdin stays open."""
    base, root, _, _ = setup
    host = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    spec = BridgeSpec(scope=ToolScope(root=root), run_dir=base / "run", trace_path=base / "run" / "host.jsonl", session_id="h1", parent_pid=host.pid)
    spec_path = write_spec(spec, base / "run" / "host-spec.json")
    proc = subprocess.Popen(bridge_argv(spec_path), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=bridge_env() or None)
    try:
        proc.stdin.write(_frame(INIT))
        proc.stdin.flush()
        _read_responses(proc.stdout, 1, time.monotonic() + START_BOUND_S)
        host.kill()
        host.wait(timeout=10)
        assert proc.wait(timeout=30) == 0
        last = [json.loads(x) for x in spec.trace_path.read_text().splitlines()][-1]
        assert last["event"] == "bridge_stop" and last["reason"] == "host_died"
    finally:
        if proc.poll() is None:
            proc.kill()
        if host.poll() is None:
            host.kill()


def test_survives_the_death_of_the_thread_that_spawned_it(setup, tmp_path: Path) -> None:
    """PR_SET_PDEATHSIG fires when the spawning *thread* exits. A multi-threaded CLI may
    spawn from a short-lived thread; the bridge must keep serving while the process lives."""
    base, root, spec, spec_path = setup
    r_fd, w_fd = os.pipe()
    pid_file = tmp_path / "bridge.pid"
    launcher = textwrap.dedent(f"""
        import os, subprocess, threading, time
        trace = {str(spec.trace_path)!r}
        def spawn():
            p = subprocess.Popen({bridge_argv(spec_path)!r}, stdin={r_fd}, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, pass_fds=({r_fd},))
            open({str(pid_file)!r}, "w").write(str(p.pid))
            # live until the bridge has armed its parent-death signal (bridge_start comes after)
            while not (os.path.exists(trace) and "bridge_start" in open(trace).read()):
                time.sleep(0.02)
        t = threading.Thread(target=spawn)
        t.start()
        t.join()  # the spawning thread is gone; the process lives on
        time.sleep(600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", launcher], pass_fds=(r_fd,), env={**os.environ, **bridge_env()})
    os.close(r_fd)
    bridge_pid = None
    try:
        deadline = time.monotonic() + START_BOUND_S
        # the pid file too: the launcher's thread writes it after Popen returns, and on a loaded
        # machine it may not have run yet when the bridge has already started
        while time.monotonic() < deadline and not (summarize_trace(spec.trace_path).started and pid_file.exists() and pid_file.read_text()):
            time.sleep(0.05)
        bridge_pid = int(pid_file.read_text())
        time.sleep(1.5)  # several watchdog periods after the spawning thread ended
        assert not _gone(bridge_pid), "bridge died with its parent's thread, not its parent"
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        assert _wait_gone(bridge_pid, 30), "bridge survived its parent"
    finally:
        os.close(w_fd)
        if bridge_pid and not _gone(bridge_pid):
            os.kill(bridge_pid, signal.SIGKILL)
        if parent.poll() is None:
            parent.kill()


def test_inflight_counts_calls_on_the_wire() -> None:
    """A tools/call is pending from delivery until its response is sent, or the client cancels
    it; other requests and notifications never hold the bridge open at EOF."""
    from mcp import types
    from mcp.shared.message import SessionMessage

    from harnesscheck.bridge.server import Inflight

    def msg(obj: dict) -> SessionMessage:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(json.dumps({"jsonrpc": "2.0", **obj}), by_name=False))

    inflight = Inflight()
    inflight.received(msg({"id": 1, "method": "tools/list"}))
    inflight.received(msg({"method": "notifications/initialized"}))
    assert inflight.pending == set()
    inflight.received(msg({"id": 5, "method": "tools/call", "params": {"name": "read_file", "arguments": {}}}))
    inflight.received(msg({"id": 6, "method": "tools/call", "params": {"name": "grep", "arguments": {}}}))
    assert inflight.pending == {5, 6}
    inflight.answered(msg({"id": 5, "result": {"content": []}}))
    inflight.received(msg({"method": "notifications/cancelled", "params": {"requestId": 6}}))
    assert inflight.pending == set()


# ---------------------------------------------------------------------------------------
# The thread-free protocol streams (pipes and sockets) and the dispatch thread


def test_pipe_lines_reassemble_split_lines_and_keep_a_last_unterminated_one() -> None:
    from harnesscheck.bridge.server import _PipeLines

    big = "x" * 200_000  # more than one read and more than a pipe's buffer
    r, w = os.pipe()

    def feed() -> None:
        for part in (b'{"a":', b' 1}\n{"b"', b": 2}\n\n", big.encode() + b"\n", b"caf\xc3", b"\xa9 \xff", b"tail"):
            os.write(w, part)
            time.sleep(0.01)
        os.close(w)

    async def read_all() -> list[str]:
        import threading

        threading.Thread(target=feed, daemon=True).start()
        return [line async for line in _PipeLines(r)]

    try:
        lines = anyio.run(read_all)
    finally:
        os.close(r)
    assert lines == ['{"a": 1}\n', '{"b": 2}\n', "\n", big + "\n", "café \ufffdtail"]


def test_pipe_lines_never_buffer_a_request_line_without_bound(monkeypatch) -> None:
    """A peer that sends no newline is not buffered without bound: past the limit the line
    is given up (`OVERSIZE`, answered with an error by the transport) and its bytes are
    dropped unread up to the next newline (test_bridge_protocol.py: the session goes on)."""
    from harnesscheck.bridge import server

    monkeypatch.setattr(server, "MAX_REQUEST_LINE_BYTES", 100_000)
    r, w = os.pipe()

    def feed() -> None:
        os.write(w, b'{"ok": 1}\n')
        try:
            for _ in range(10):  # 640 KB, no newline
                os.write(w, b"x" * 65536)
        finally:
            os.close(w)

    async def read_all() -> list[str]:
        import threading

        threading.Thread(target=feed, daemon=True).start()
        lines = server._PipeLines(r)
        out = []
        async for line in lines:
            out.append(line)
            assert len(lines._buf) <= server.MAX_REQUEST_LINE_BYTES + 65536
        return out

    try:
        lines = anyio.run(read_all)
    finally:
        os.close(r)
    assert lines == ['{"ok": 1}\n', server.OVERSIZE]


def test_pipe_writer_never_blocks_the_event_loop_on_a_full_pipe() -> None:
    """A message larger than the pipe, read slowly: it arrives whole and in order, and the
    event loop keeps running while the writer waits for room."""
    from harnesscheck.bridge.server import _PipeWriter

    text = "".join(f"{i:07d}é\n" for i in range(40_000))  # ~360 KB, several pipe buffers
    import threading

    r, w = os.pipe()
    received = bytearray()
    ticked = threading.Event()  # the loop ran 5 times while the writer waited on the full pipe

    def drain() -> None:
        # the writer meets a full pipe first; reading starts once the loop has ticked (bounded:
        # a writer that blocks the loop never lets it tick, and the assert below fails), not
        # after a fixed 0.2 s a loaded machine may spend before the loop ticks 5 times
        ticked.wait(START_BOUND_S)
        while chunk := os.read(r, 4096):
            received.extend(chunk)

    async def go() -> int:
        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                if ticks >= 5:
                    ticked.set()
                await anyio.sleep(0.01)

        async with anyio.create_task_group() as tg:
            tg.start_soon(ticker)
            writer = _PipeWriter(w)
            await writer.write(text)
            await writer.flush()
            tg.cancel_scope.cancel()
        os.close(w)
        await anyio.to_thread.run_sync(reader.join, START_BOUND_S)
        return ticks

    try:
        ticks = anyio.run(go)
    finally:
        os.close(r)
    assert received.decode() == text
    assert ticks >= 5, "the event loop stalled while the pipe was full"


def test_in_thread_returns_raises_and_runs_to_its_end_when_cancelled() -> None:
    from harnesscheck.bridge.server import _in_thread

    finished = []

    def slow() -> str:
        time.sleep(0.2)
        finished.append(True)
        return "done"

    def boom() -> None:
        raise LookupError("x")

    async def go():
        assert await _in_thread(lambda a, b: a + b, 2, 3) == 5
        with pytest.raises(LookupError):
            await _in_thread(boom)
        with anyio.move_on_after(0.01) as scope:  # like anyio.to_thread.run_sync: not abandoned
            result = await _in_thread(slow)
        assert scope.cancel_called and finished == [True] and result == "done"

    anyio.run(go)


def _raw_session(setup, stdin, stdout) -> subprocess.Popen:
    base, root, spec, spec_path = setup
    return subprocess.Popen(bridge_argv(spec_path), stdin=stdin, stdout=stdout, stderr=subprocess.DEVNULL, env=bridge_env() or None)


def test_serves_over_a_socketpair_like_libuv_children(setup) -> None:
    """Node CLIs (libuv) give a child Unix sockets, not pipes, for stdin and stdout."""
    import socket

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    proc = _raw_session(setup, theirs.fileno(), theirs.fileno())
    theirs.close()
    try:
        ours.sendall(_frame(INIT, INITIALIZED, _call(2, "read_file", {"path": "src/a.py"})))
        ours.shutdown(socket.SHUT_WR)  # EOF right behind the call
        stream = ours.makefile("rb")
        replies = _read_responses(stream, 2, time.monotonic() + START_BOUND_S)
        assert proc.wait(timeout=START_BOUND_S) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        ours.close()
    assert replies[1]["id"] == 2 and replies[1]["result"]["content"][0]["text"] == "alpha = 1\n"


def test_serves_from_regular_files_through_the_sdk_streams(setup, tmp_path: Path) -> None:
    """Not a pipe or socket (a file, a terminal): the SDK's thread-backed streams serve it."""
    requests = tmp_path / "requests.jsonl"
    requests.write_bytes(_frame(INIT, INITIALIZED, _call(2, "read_file", {"path": "src/a.py"})))
    answers = tmp_path / "answers.jsonl"
    with open(requests, "rb") as stdin, open(answers, "wb") as stdout:
        proc = _raw_session(setup, stdin, stdout)
        assert proc.wait(timeout=START_BOUND_S) == 0
    replies = [json.loads(line) for line in answers.read_text().splitlines()]
    assert [m.get("id") for m in replies] == [1, 2]
    assert replies[1]["result"]["content"][0]["text"] == "alpha = 1\n"


def test_call_threads_reuse_an_idle_thread_and_end_on_close() -> None:
    import threading

    from harnesscheck.bridge.server import _CallThreads

    pool = _CallThreads()
    pool.IDLE_S = 3600.0  # only close() can end an idle thread within the test's bounds
    seen: list[int] = []  # native thread ids

    def run_one() -> None:
        done = threading.Event()
        pool.submit(lambda: (seen.append(threading.get_native_id()), done.set()))
        assert done.wait(START_BOUND_S)

    def wait_for(condition) -> bool:
        deadline = time.monotonic() + START_BOUND_S
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.001)
        return condition()

    run_one()
    assert wait_for(lambda: pool._idle)  # the first thread goes idle...
    run_one()
    assert len(seen) == 2 and seen[0] == seen[1], "an idle thread should take the next call"
    assert wait_for(lambda: pool._idle)
    pool.close()  # ...and ends at once when closed, not after IDLE_S
    assert wait_for(lambda: not os.path.exists(f"/proc/self/task/{seen[0]}")), "close() left an idle thread running"


def test_ends_after_eof_even_when_the_client_never_reads_its_answers(tmp_path: Path, monkeypatch) -> None:
    """A client that sends calls with large answers, closes stdin and never reads: the writer
    meets a full pipe. The bridge still ends, within the drain bound plus WRITE_GRACE_S (it
    used to wait on the pipe for good, past the documented 30 s drain bound)."""
    from harnesscheck.bridge import server

    monkeypatch.setattr(server, "WRITE_GRACE_S", 0.5, raising=False)

    class QuickDrain(server.Inflight):
        async def drained(self, timeout_s: float = 0.5) -> None:
            await super().drained(timeout_s)

    (tmp_path / "big.txt").write_text("x" * 200_000 + "\n")  # one answer is more than a pipe holds
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
    }
    calls = [_call(i, "read_file", {"path": "big.txt"}) for i in range(1, 6)]
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    os.write(in_w, _frame(init, {"jsonrpc": "2.0", "method": "notifications/initialized"}, *calls))
    os.close(in_w)
    inflight = QuickDrain()
    bridge = server.build_server(ToolScope(root=tmp_path, read_only=True), inflight=inflight)

    async def go() -> None:
        with anyio.fail_after(START_BOUND_S):
            await server.serve_stdio(bridge, in_r, out_w, inflight)

    try:
        anyio.run(go)  # TimeoutError before the fix
    finally:
        for fd in (in_r, out_r, out_w):
            os.close(fd)
