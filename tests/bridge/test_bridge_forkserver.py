"""The bridge forkserver and its relay (bridge/forkserver.py, bridge/_bridgerelay.py): a real
MCP stdio client through the relay command, scopes and traces per session, refusals, and
the process tree (relay killed, session released, host killed, no fd leaked)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import anyio
import pytest

from harnesscheck.bridge import forkserver, forkserver_child, forkserver_process
from harnesscheck.bridge.spec import BridgeSpec, bridge_env, summarize_trace, write_spec
from harnesscheck.choke.dispatch import dispatch, tool_definitions
from harnesscheck.core.scope import ToolScope

pytestmark = pytest.mark.skipif(not forkserver.enabled(), reason="the forkserver needs Linux (SCM_RIGHTS, /proc)")

#: Upper bounds only (a loaded 2-core box); nothing here asserts speed.
BOUND_S = 60.0
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}


def _alive(pid: int) -> bool:
    """Running (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(pids, bound_s: float = BOUND_S) -> list[int]:
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.02)
    return [p for p in pids if _alive(p)]


def _make_spec(base: Path, name: str, *, read_only: bool = True, parent_pid: int | None = None) -> tuple[Path, Path]:
    root = base / f"wt-{name}"
    (root / "src").mkdir(parents=True)
    (root / "src" / "own.txt").write_text(f"this is {name}\n")
    run = base / f"run-{name}"
    spec = BridgeSpec(
        scope=ToolScope(root=root, read_only=read_only),
        run_dir=run,
        trace_path=run / "bridge-trace.jsonl",
        session_id=f"sess-{name}",
        parent_pid=parent_pid if parent_pid is not None else os.getpid(),
    )
    return write_spec(spec, run / "bridge-spec.json"), root


def _text(result) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


async def _client_session(argv: list[str], env: dict[str, str], cwd: Path, calls):
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=argv[0], args=argv[1:], env=env or None, cwd=str(cwd))
    with anyio.fail_after(BOUND_S):
        async with Client(stdio_client(params, errlog=sys.stderr), mode="legacy") as client:
            listed = await client.list_tools()
            results = [await client.call_tool(name, args) for name, args in calls]
    return listed, results


def _line(msg: dict) -> bytes:
    return json.dumps(msg).encode() + b"\n"


def _start_raw(argv: list[str], **kwargs) -> subprocess.Popen:
    """The relay as a CLI starts it, answered `initialize` (the bridge child is up)."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)
    assert proc.stdin and proc.stdout
    proc.stdin.write(_line(INIT))
    proc.stdin.flush()
    reply = json.loads(proc.stdout.readline())
    assert reply.get("id") == 1 and "result" in reply, reply
    return proc


def _children_of(spec_path: Path) -> list[int]:
    server = forkserver.get_forkserver()
    assert server is not None
    return server.children().get(str(spec_path.absolute()), [])


@pytest.fixture
def relay_for(tmp_path: Path):
    """relay_for(spec_path) -> (argv, env); every spec is released at teardown."""
    specs: list[Path] = []

    def make(spec_path: Path, *, bind: bool = True):
        cmd = forkserver.relay_command(spec_path)
        assert cmd is not None, "the forkserver did not start"
        specs.append(spec_path)
        if bind:  # the relays these tests start are this process's children, as a CLI's are its
            assert forkserver.bind_session(spec_path, os.getpid())
        return cmd

    yield make
    for spec in specs:
        forkserver.release_session(spec)


# ---------------------------------------------------------------------------------------
# Serving through the relay


def test_sdk_client_through_relay_lists_reads_and_refuses(tmp_path: Path, relay_for) -> None:
    spec_path, root = _make_spec(tmp_path, "a")
    argv, env = relay_for(spec_path)
    assert Path(argv[3]).name == "_bridgerelay.pyc" and argv[1:3] == ["-I", "-S"]  # compiled: see below
    calls = [("read_file", {"path": "src/own.txt"}), ("read_file", {"path": "../run-a/bridge-spec.json"})]
    listed, results = anyio.run(_client_session, argv, env, tmp_path, calls)

    scope = BridgeSpec.model_validate_json(spec_path.read_text()).scope
    assert [t.name for t in listed.tools] == [d.name for d in tool_definitions(scope)]
    assert not results[0].is_error and _text(results[0]) == "this is a\n"
    expected = dispatch("read_file", {"path": "../run-a/bridge-spec.json"}, scope)
    assert results[1].is_error and not expected.ok
    assert _text(results[1]) == expected.text and _text(results[1]).startswith(f"refused: {expected.code}:")

    trace = [json.loads(x) for x in (tmp_path / "run-a" / "bridge-trace.jsonl").read_text().splitlines()]
    start = [r for r in trace if r["event"] == "bridge_start"]
    assert len(start) == 1 and start[0]["mode"] == "forkserver" and start[0]["session"] == "sess-a"
    summary = summarize_trace(tmp_path / "run-a" / "bridge-trace.jsonl", "sess-a")
    assert summary.listed and summary.tool_calls == 2 and [r.code for r in summary.refusals] == [expected.code]
    # stdin EOF ended the child; the forkserver reaped it.
    deadline = time.monotonic() + BOUND_S
    while _children_of(spec_path) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _children_of(spec_path) == []
    stops = [r for r in (json.loads(x) for x in (tmp_path / "run-a" / "bridge-trace.jsonl").read_text().splitlines()) if r["event"] == "bridge_stop"]
    assert [r["reason"] for r in stops] == ["eof"]  # once: the relay leaving after it is not a second stop


def test_two_sessions_concurrently_get_their_own_scope_and_trace(tmp_path: Path, relay_for) -> None:
    spec_a, _ = _make_spec(tmp_path, "a", read_only=True)
    spec_b, root_b = _make_spec(tmp_path, "b", read_only=False)
    argv_a, env_a = relay_for(spec_a)
    argv_b, env_b = relay_for(spec_b)
    out: dict[str, tuple] = {}

    async def both():
        async def one(key, argv, env, calls):
            out[key] = await _client_session(argv, env, tmp_path, calls)

        async with anyio.create_task_group() as tg:
            tg.start_soon(one, "a", argv_a, env_a, [("read_file", {"path": "src/own.txt"}), ("write_file", {"path": "x.txt", "content": "no"})])
            tg.start_soon(one, "b", argv_b, env_b, [("read_file", {"path": "src/own.txt"}), ("write_file", {"path": "x.txt", "content": "yes"})])

    anyio.run(both)
    names_a = [t.name for t in out["a"][0].tools]
    names_b = [t.name for t in out["b"][0].tools]
    assert "write_file" not in names_a and "write_file" in names_b
    assert _text(out["a"][1][0]) == "this is a\n" and _text(out["b"][1][0]) == "this is b\n"
    assert out["a"][1][1].is_error and not out["b"][1][1].is_error
    assert (root_b / "x.txt").read_text() == "yes" and not (tmp_path / "wt-a" / "x.txt").exists()
    for name in ("a", "b"):
        recs = [json.loads(x) for x in (tmp_path / f"run-{name}" / "bridge-trace.jsonl").read_text().splitlines()]
        assert recs and {r["session"] for r in recs} == {f"sess-{name}"}


# ---------------------------------------------------------------------------------------
# Refusals: only what the host registered, as written, for the session that claimed it


def _spawn_with_init(argv: list[str]) -> subprocess.Popen:
    """The relay as a CLI starts it, `initialize` already in its stdin; not waited for."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin
    proc.stdin.write(_line(INIT))
    proc.stdin.flush()
    return proc


def _run_relay(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, input=_line(INIT), capture_output=True, timeout=BOUND_S, **kwargs)


def test_unregistered_changed_and_released_specs_are_refused(tmp_path: Path, relay_for) -> None:
    spec_path, _ = _make_spec(tmp_path, "a")
    argv, _ = relay_for(spec_path)

    other, _ = _make_spec(tmp_path, "wide", read_only=False)  # never registered
    res = _run_relay([*argv[:4], argv[4], str(other)])
    assert res.returncode == 2 and res.stdout == b"" and b"refused: not-registered" in res.stderr

    original = spec_path.read_bytes()
    widened = json.loads(original)
    widened["scope"]["read_only"] = False
    spec_path.write_text(json.dumps(widened))  # a model with a shell widening its own spec
    res = _run_relay(argv)
    assert res.returncode == 2 and res.stdout == b"" and b"refused: spec-changed" in res.stderr

    spec_path.write_bytes(original)
    res = _run_relay(argv)  # as registered: served (stdin EOF after initialize ends it)
    assert res.returncode == 0 and b'"id": 1' in res.stdout.replace(b'"id":1', b'"id": 1')

    forkserver.release_session(spec_path)
    res = _run_relay(argv)
    assert res.returncode == 2 and b"refused: not-registered" in res.stderr


def test_a_spec_is_served_only_to_the_process_tree_it_is_bound_to(tmp_path: Path, relay_for) -> None:
    spec_path, _ = _make_spec(tmp_path, "a")
    other_cli = subprocess.Popen(["sleep", "60"])  # another session's CLI
    try:
        argv, _ = relay_for(spec_path, bind=False)
        assert forkserver.bind_session(spec_path, other_cli.pid)
        res = _run_relay(argv)  # not started by that CLI: refused, even as the first relay
        assert res.returncode == 2 and b"refused: wrong-process" in res.stderr, _registration_state(spec_path, res)
        with pytest.raises(forkserver.ForkServerError, match="already bound"):
            forkserver.get_forkserver().bind(spec_path.absolute(), os.getpid())  # a spec binds once
    finally:
        other_cli.kill()
        other_cli.wait()
    mine, _ = _make_spec(tmp_path, "b")
    argv, _ = relay_for(mine)  # bound to this process: its children are served
    first = _start_raw(argv)
    try:
        res = _run_relay(argv, start_new_session=True)  # a child that setsid's (Python MCP clients do)
        assert res.returncode == 0
    finally:
        first.stdin.close()
        first.wait(timeout=BOUND_S)


#: The forkserver's loop driven by hand in a child process (its __init__ hardens and signals
#: the process it runs in): a relay whose registration was sent before it started must never be
#: judged before that registration is read.
_ONE_ACCEPT_PER_ROUND = """
import json, os, socket, subprocess, sys
from pathlib import Path
from harnesscheck.bridge.forkserver import _listening
from harnesscheck.bridge.forkserver_process import _Server

base, spec = Path(sys.argv[1]), sys.argv[2]
host, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
server = _Server(child, base, None, _listening(str(base / "fs.sock")))

def relay(path):
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    conn.connect(str(base / "fs.sock"))
    r, w = os.pipe()
    socket.send_fds(conn, [b"spec\\0" + path.encode()], [r, w])
    os.close(r)
    os.close(w)
    conn.setblocking(False)
    return conn

def answer(conn):
    try:
        return conn.recv(4096).decode()
    except BlockingIOError:
        return None

other_cli = subprocess.Popen(["sleep", "60"])
try:
    early = relay(str(base / "released-spec.json"))  # a relay of a session already released
    # The host registers and binds the next session, then its CLI starts the relay:
    host.sendall(json.dumps({"op": "register", "spec": spec, "content": Path(spec).read_text(), "id": 1}).encode())
    host.sendall(json.dumps({"op": "bind", "spec": spec, "pid": other_cli.pid, "id": 2}).encode())
    late = relay(spec)
    server._on_connect()  # the round the selector woke for `early`, its control drained before
    first = [answer(early), answer(late)]
    server._drain_control()  # the next round: the control channel first
    server._on_connect()
    print(json.dumps({"first": first, "then": answer(late)}))
finally:
    other_cli.kill()
"""


def test_a_relay_is_never_judged_before_its_registration_is_read(tmp_path: Path) -> None:
    """The forkserver accepts one connection per wake-up. A second accept in the same round
    took a relay that connected after that round's control drain, and refused it
    `not-registered` while its registration sat unread (it failed
    test_a_spec_is_served_only_to_the_process_tree_it_is_bound_to under load)."""
    spec_path, _ = _make_spec(tmp_path, "a")
    base = tmp_path / "fs"
    base.mkdir()
    res = subprocess.run(
        [sys.executable, "-c", _ONE_ACCEPT_PER_ROUND, str(base), str(spec_path.absolute())],
        capture_output=True,
        timeout=BOUND_S,
    )
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    seen = json.loads(res.stdout.decode().strip().splitlines()[-1])
    early, late = seen["first"]
    assert early is not None and early.startswith("refused not-registered"), seen
    assert late is None, f"a relay was judged in the round that had not read its registration: {seen}"
    assert seen["then"] is not None and seen["then"].startswith("refused wrong-process"), seen


def _registration_state(spec_path: Path, res: subprocess.CompletedProcess) -> str:
    """What a failed refusal assertion needs to be explained afterwards (it failed once under
    load with "not-registered"): the relay's answer and whether the forkserver holds the spec
    now, i.e. whether the registration was lost or only not read yet when the relay asked."""
    server = forkserver.get_forkserver()
    try:
        held = str(spec_path.absolute()) in (server.children() if server is not None else {})
    except forkserver.ForkServerError as exc:
        held = f"unknown ({exc})"
    return f"relay exit {res.returncode}, stderr {res.stderr[-300:]!r}; forkserver pid {getattr(server, 'pid', None)} holds the spec now: {held}"


def test_a_relay_before_the_binding_is_held_then_served_to_the_bound_session(tmp_path: Path, relay_for) -> None:
    spec_path, _ = _make_spec(tmp_path, "a")
    argv, _ = relay_for(spec_path, bind=False)  # registered; the CLI has not been spawned yet
    early = _spawn_with_init(argv)  # the CLI's relay, faster than the host's binding
    try:
        time.sleep(0.3)  # it connected and is held (not served, not refused)
        assert early.poll() is None and _children_of(spec_path) == []
        assert forkserver.bind_session(spec_path, os.getpid())  # its CLI (here: us): served now
        assert json.loads(early.stdout.readline()).get("id") == 1
    finally:
        early.stdin.close()
        early.wait(timeout=BOUND_S)


def test_held_relays_are_refused_when_the_binding_goes_to_another_process_or_never_comes(tmp_path: Path, relay_for) -> None:
    spec_path, _ = _make_spec(tmp_path, "a")
    argv, _ = relay_for(spec_path, bind=False)
    squatter = _spawn_with_init(argv)  # connected before the CLI existed, not started by it
    cli = subprocess.Popen(["sleep", "60"])
    try:
        time.sleep(0.3)
        assert forkserver.bind_session(spec_path, cli.pid)
        assert squatter.wait(timeout=BOUND_S) == 2
        assert b"refused: wrong-process" in squatter.stderr.read()
    finally:
        cli.kill()
        cli.wait()
        if squatter.poll() is None:
            squatter.kill()
    other, _ = _make_spec(tmp_path, "b")
    argv, _ = relay_for(other, bind=False)
    orphan = _spawn_with_init(argv)
    time.sleep(0.3)
    forkserver.release_session(other)  # the session ended (its CLI never started)
    assert orphan.wait(timeout=BOUND_S) == 2
    assert b"refused: not-registered" in orphan.stderr.read()


def _squat(sock_path: str, spec_path: Path, fds: list[int]):
    """A relay of an outsider: a short-lived process connects (so SO_PEERCRED names it) and
    sends `fds`, then exits; the returned socket (the same connection) stays open here.
    Returns (connection, the exited process's pid)."""
    import socket

    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    code = textwrap.dedent(f"""
        import socket, sys
        conn = socket.socket(fileno={conn.fileno()})
        conn.connect({sock_path!r})
        socket.send_fds(conn, [b"spec\\0" + {str(spec_path).encode()!r}], {fds!r})
    """)
    squatter = subprocess.Popen([sys.executable, "-I", "-c", code], pass_fds=[conn.fileno(), *fds])
    assert squatter.wait(timeout=BOUND_S) == 0
    return conn, squatter.pid


def test_a_held_relay_whose_pid_went_to_the_cli_is_refused(tmp_path: Path, relay_for) -> None:
    """SO_PEERCRED's pid is only a number from connect() time. A relay held before the binding
    can exit while it waits (its connection kept open elsewhere) and its pid be handed to the
    CLI the host then spawns (pids wrap: 32768 by default). Binding the spec to that pid must
    not serve the outsider's pipes. The test binds to the exited relay's pid, as a reuse would."""
    spec_path, _ = _make_spec(tmp_path, "a", read_only=False)
    argv, _ = relay_for(spec_path, bind=False)
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    conn, squatter_pid = _squat(argv[4], spec_path, [in_r, out_w, 2])
    os.close(in_r)
    os.close(out_w)
    try:
        time.sleep(0.3)  # held: registered, not bound
        assert forkserver.bind_session(spec_path, squatter_pid)
        try:  # served, the outsider's bridge would answer this and end at EOF
            os.write(in_w, _line(INIT))
        except BrokenPipeError:  # refused: the forkserver closed the only read end
            pass
        os.close(in_w)
        in_w = -1
        conn.settimeout(BOUND_S)
        reply = conn.recv(4096)
        assert reply.startswith(b"refused wrong-process"), reply
        assert _children_of(spec_path) == []
        res = _run_relay(argv)  # a live relay of the bound process is still refused (another tree)
        assert res.returncode == 2 and b"refused: wrong-process" in res.stderr
        server = forkserver.get_forkserver()
        assert not [t for t in _fd_targets(server.pid).values() if "pidfd" in t]  # peers' pidfds closed
    finally:
        conn.close()
        os.close(out_r)
        if in_w >= 0:
            os.close(in_w)


@pytest.mark.parametrize("peer_pidfd", [True, False], ids=["SO_PEERPIDFD", "pidfd_open-fallback"])
def test_a_peer_that_exited_is_seen_as_ended(tmp_path: Path, monkeypatch, peer_pidfd: bool) -> None:
    """`_Peer` (the relay behind a connection) runs while its process does, with the kernel's
    SO_PEERPIDFD and with the fallback older kernels get."""
    import socket

    if not peer_pidfd:
        monkeypatch.setattr(forkserver_child, "_SO_PEERPIDFD", None)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(str(tmp_path / "l.sock"))
    listener.listen()
    r, w = os.pipe()
    kept, pid = _squat(str(tmp_path / "l.sock"), tmp_path / "spec.json", [r, w, 2])
    served, _ = listener.accept()
    live_end, live_peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    gone, here = forkserver_child._Peer.of(served), forkserver_child._Peer.of(live_end)
    try:
        assert gone.pid == pid and not gone.running()
        assert here.pid == os.getpid() and here.running()
    finally:
        for peer in (gone, here):
            peer.close()
        for sock in (kept, served, live_end, live_peer, listener):
            sock.close()
        os.close(r)
        os.close(w)


def test_once_the_bound_cli_exited_a_process_with_its_pid_is_refused(tmp_path: Path) -> None:
    """The host reaps its CLI before it releases the session (the exit drain, the tree's
    teardown): meanwhile the CLI's pid is free and may go to any process. The forkserver's own
    check (its `bind` and `_check`, run here in-process) must not take a process with that pid
    for the CLI. The reuse is modelled by pointing the binding's pid at a live stand-in."""
    from types import SimpleNamespace

    spec_path, _ = _make_spec(tmp_path, "a", read_only=False)
    key = str(spec_path.absolute())
    content = spec_path.read_bytes()
    state = SimpleNamespace(registrations={}, awaiting={})
    state.registrations[key] = forkserver_child._Registration(content=content, spec=BridgeSpec.model_validate_json(content))
    cli = subprocess.Popen(["sleep", "60"])
    assert forkserver_process._Server._handle(state, {"op": "bind", "spec": key, "pid": cli.pid}) == {"ok": True}
    cli.kill()
    cli.wait()  # exited and reaped: its pid is free
    impostor = subprocess.Popen(["sleep", "60"])
    peer = forkserver_child._Peer(impostor.pid, os.getuid(), os.pidfd_open(impostor.pid))
    try:
        state.registrations[key].bound_pid = impostor.pid  # as if the impostor had been given the CLI's pid
        refusal = forkserver_process._Server._check(state, b"spec\0" + key.encode(), [0, 1, 2], peer)
        assert isinstance(refusal, str) and refusal.startswith("wrong-process"), refusal
    finally:
        peer.close()
        impostor.kill()
        impostor.wait()
        state.registrations[key].close()


@pytest.fixture
def gated_forkserver(tmp_path: Path, monkeypatch):
    """A fresh forkserver of this host whose interpreter does not start until the test
    opens the gate (`gate.touch()`): a forkserver still starting, for as long as it takes."""
    gate = tmp_path / "gate"
    real_popen = subprocess.Popen

    class Gated(real_popen):  # a class still, as `subprocess.Popen[bytes]` annotations need
        def __init__(self, argv, *args, **kwargs):
            if "harnesscheck.bridge.forkserver_process" in argv:
                wait = f'while [ ! -e "{gate}" ]; do sleep 0.02; done; exec "$@"'
                argv = ["/bin/sh", "-c", wait, "sh", *argv]
            super().__init__(argv, *args, **kwargs)

    forkserver.shutdown()
    monkeypatch.setattr(subprocess, "Popen", Gated)
    yield gate
    monkeypatch.setattr(subprocess, "Popen", real_popen)
    gate.touch()
    forkserver.shutdown()


def test_a_relay_waits_for_a_forkserver_still_starting(tmp_path: Path, gated_forkserver) -> None:
    """The forkserver is not on the session's critical path: the relay command is there at
    once (the socket bound by the host), the CLI's relay connects while the forkserver has
    not even started its interpreter, and is served when it is up; the host never waited."""
    spec_path, _ = _make_spec(tmp_path, "a")
    argv, _ = forkserver.relay_command(spec_path) or pytest.fail("no relay command")
    server = forkserver.get_forkserver()
    assert forkserver.bind_session(spec_path, os.getpid())
    relay = _spawn_with_init(argv)  # the CLI's relay, before the forkserver runs any Python
    try:
        time.sleep(0.3)
        assert relay.poll() is None, relay.stderr.read()  # waiting in the backlog, not fallen back
        assert not server.ready and Path(f"/proc/{server.pid}/exe").resolve().name != Path(sys.executable).resolve().name
        gated_forkserver.touch()
        reply = json.loads(relay.stdout.readline())
        assert reply.get("id") == 1 and "result" in reply, reply
        start = json.loads((tmp_path / "run-a" / "bridge-trace.jsonl").read_text().splitlines()[0])
        assert start.get("mode") == "forkserver"  # served by the forkserver, not the fallback
    finally:
        relay.stdin.close()
        relay.wait(timeout=BOUND_S)
        forkserver.release_session(spec_path)


def test_a_forkserver_that_cannot_start_leaves_the_sessions_the_stdio_bridge(tmp_path: Path, gated_forkserver, monkeypatch) -> None:
    """Started without waiting, a forkserver that ends at its start (exit 1: an import failed)
    is noticed by the relay (connection refused: it runs the pinned full bridge, so the
    session still gets its tools) and remembered by the host: later sessions get the stdio
    bridge, as before the forkserver."""
    monkeypatch.setattr(forkserver, "_failed", None)
    gated = subprocess.Popen
    fail = f'while [ ! -e "{gated_forkserver}" ]; do sleep 0.02; done; exit 1'

    class Failing(gated):
        def __init__(self, argv, *args, **kwargs):
            super().__init__(["/bin/sh", "-c", fail] if "harnesscheck.bridge.forkserver_process" in argv else argv, *args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", Failing)
    spec_path, _ = _make_spec(tmp_path, "a")
    argv, env = forkserver.relay_command(spec_path) or pytest.fail("no relay command")
    gated_forkserver.touch()
    assert forkserver.get_forkserver().proc.wait(timeout=BOUND_S) == 1
    monkeypatch.setattr(subprocess, "Popen", gated)
    listed, results = anyio.run(_client_session, argv, env, tmp_path, [("read_file", {"path": "src/own.txt"})])
    assert listed.tools and _text(results[0]) == "this is a\n"
    start = json.loads((tmp_path / "run-a" / "bridge-trace.jsonl").read_text().splitlines()[0])
    assert start["event"] == "bridge_start" and "mode" not in start  # the stdio bridge itself
    forkserver.release_session(spec_path)
    other, _ = _make_spec(tmp_path, "b")
    assert forkserver.relay_command(other) is None  # remembered: the stdio bridge from now on


def test_warm_up_returns_when_the_forkserver_is_ready(tmp_path: Path, gated_forkserver) -> None:
    """`harnesscheck.warm_up()` at a host's start: it waits for the forkserver's `ready`
    (its imports done), so the host's first session does not; without `wait` it only starts
    it. Judged on a forkserver held at its start until the gate opens."""
    import harnesscheck

    assert harnesscheck.warm_up(wait=False) is True
    server = forkserver.get_forkserver()
    assert not server.ready  # started, not waited for: the interpreter is held at the gate
    assert harnesscheck.warm_up(timeout_s=0.3) is False  # not ready within the bound: said so
    gated_forkserver.touch()
    assert harnesscheck.warm_up(timeout_s=BOUND_S) is True
    assert forkserver.get_forkserver() is server and server.ready


def test_warm_up_says_false_where_the_forkserver_cannot_run(monkeypatch) -> None:
    import harnesscheck

    monkeypatch.setenv(forkserver.DISABLE_VAR, "0")
    assert harnesscheck.warm_up() is False


def test_unreachable_forkserver_falls_back_to_the_full_bridge(tmp_path: Path) -> None:
    from harnesscheck.bridge.spec import bridge_argv

    spec_path, _ = _make_spec(tmp_path, "a")
    relay = str(forkserver.RELAY_PATH)
    argv = [sys.executable, "-I", "-S", relay, str(tmp_path / "no.sock"), str(spec_path), "--", *bridge_argv(spec_path)]
    listed, results = anyio.run(_client_session, argv, bridge_env(), tmp_path, [("read_file", {"path": "src/own.txt"})])
    assert [t.name for t in listed.tools] == ["read_file", "list_dir", "grep"]
    assert _text(results[0]) == "this is a\n"
    start = [json.loads(x) for x in (tmp_path / "run-a" / "bridge-trace.jsonl").read_text().splitlines()][0]
    assert start["event"] == "bridge_start" and "mode" not in start  # the stdio bridge itself

    res = _run_relay(argv[:6])  # no fallback given: loud failure
    assert res.returncode == 3 and b"unreachable" in res.stderr


def test_fallback_refuses_a_spec_rewritten_after_registration(tmp_path: Path, relay_for) -> None:
    """The review's attack: widen the registered spec (root /, writable), then make the
    forkserver unreachable so the relay falls back to the full bridge. The fallback is
    pinned to the registered bytes' sha256 and refuses; stdout stays empty."""
    from harnesscheck.bridge.spec import spec_sha256

    spec_path, root = _make_spec(tmp_path, "a")
    original = spec_path.read_bytes()
    argv, env = relay_for(spec_path)
    rest = argv[argv.index("--") + 1 :]
    assert rest[rest.index("--spec-sha256") + 1] == spec_sha256(original)
    assert rest[-2:] == ["--spec", str(spec_path)]

    widened = json.loads(original)
    widened["scope"]["root"] = "/"
    widened["scope"]["read_only"] = False
    spec_path.write_text(json.dumps(widened))
    unreachable = [*argv[:4], str(tmp_path / "gone.sock"), *argv[5:]]  # as if the socket was unlinked
    res = _run_relay(unreachable, env={**os.environ, **env})
    assert res.returncode == 2 and res.stdout == b"", res
    assert b"unreachable" in res.stderr and b"sha256 differs" in res.stderr
    assert not (tmp_path / "run-a" / "bridge-trace.jsonl").exists() or b"bridge_start" not in (tmp_path / "run-a" / "bridge-trace.jsonl").read_bytes()

    spec_path.write_bytes(original)  # the honest fallback: the registered bytes are served
    listed, results = anyio.run(_client_session, unreachable, env, tmp_path, [("read_file", {"path": "src/own.txt"})])
    assert [t.name for t in listed.tools] == ["read_file", "list_dir", "grep"]
    assert _text(results[0]) == "this is a\n"


def test_disabled_by_env_gives_no_relay(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(forkserver.DISABLE_VAR, "0")
    spec_path, _ = _make_spec(tmp_path, "a")
    assert forkserver.relay_command(spec_path) is None
    from harnesscheck.backends._harness import bridge_command
    from harnesscheck.bridge.spec import spec_sha256

    argv, _ = bridge_command(spec_path)  # the full bridge, pinned to the bytes written now
    assert argv[-4:] == ["--spec-sha256", spec_sha256(spec_path.read_bytes()), "--spec", str(spec_path)]


# ---------------------------------------------------------------------------------------
# Idle connections do not stall the loop

#: Generous upper bound for "promptly" (the review measured 80 s with 18 idle connections).
PROMPT_S = 10.0


def _idle_connections(n: int) -> list:
    import socket

    server = forkserver.get_forkserver()
    assert server is not None
    conns = []
    for _ in range(n):
        c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        c.connect(server.socket_path)
        conns.append(c)
    return conns


def test_idle_connections_do_not_stall_registrations_or_relays(tmp_path: Path, relay_for) -> None:
    spec_a, _ = _make_spec(tmp_path, "a")
    argv_a, _ = relay_for(spec_a)
    idle = _idle_connections(20)  # a same-uid process holding connections open, silent
    try:
        spec_b, _ = _make_spec(tmp_path, "b")
        t0 = time.monotonic()
        argv_b, env_b = relay_for(spec_b)
        assert time.monotonic() - t0 < PROMPT_S, "a registration waited on idle connections"
        assert Path(argv_b[3]).name == "_bridgerelay.pyc"
        idle += _idle_connections(20)  # more than MAX_PENDING in all: the oldest are dropped
        t0 = time.monotonic()
        relay = _start_raw(argv_a)
        assert time.monotonic() - t0 < PROMPT_S, "a relay waited on idle connections"
        relay.stdin.close()
        assert relay.wait(timeout=BOUND_S) == 0
        assert anyio.run(_client_session, argv_b, env_b, tmp_path, [])[0].tools
    finally:
        for c in idle:
            c.close()


def test_an_idle_connection_times_out_with_a_refusal(relay_for, tmp_path: Path) -> None:
    relay_for(_make_spec(tmp_path, "a")[0])  # the forkserver runs
    (idle,) = _idle_connections(1)
    try:
        idle.settimeout(BOUND_S)
        t0 = time.monotonic()
        reply = idle.recv(4096)
        assert reply.startswith(b"refused timeout"), reply
        assert time.monotonic() - t0 >= forkserver.PENDING_TIMEOUT_S - 1.0  # the deadline, not at once
    finally:
        idle.close()


def test_accept_failures_do_not_end_the_loop(tmp_path: Path, relay_for) -> None:
    """Out of fds (EMFILE) while connections pile up: the loop pauses accepting, survives,
    and serves relays once fds are free again."""
    import resource

    spec_a, _ = _make_spec(tmp_path, "a")
    argv, env = relay_for(spec_a)
    server = forkserver.get_forkserver()
    limits = resource.prlimit(server.pid, resource.RLIMIT_NOFILE)
    open_now = len(os.listdir(f"/proc/{server.pid}/fd"))
    resource.prlimit(server.pid, resource.RLIMIT_NOFILE, (open_now + 2, limits[1]))
    idle = []
    try:
        idle = _idle_connections(12)
        log = Path(server.dir) / "forkserver.log"
        deadline = time.monotonic() + BOUND_S
        while b"accept failed" not in log.read_bytes() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert b"accept failed" in log.read_bytes()
    finally:
        resource.prlimit(server.pid, resource.RLIMIT_NOFILE, limits)  # children inherit it
        for c in idle:
            c.close()
    assert server.alive()
    spec_b, _ = _make_spec(tmp_path, "b")
    argv_b, env_b = relay_for(spec_b)
    assert anyio.run(_client_session, argv_b, env_b, tmp_path, [])[0].tools


# ---------------------------------------------------------------------------------------
# The process tree


def test_killing_the_relay_ends_the_child(tmp_path: Path, relay_for) -> None:
    spec_path, _ = _make_spec(tmp_path, "a")
    argv, _ = relay_for(spec_path)
    relay = _start_raw(argv)
    children = _children_of(spec_path)
    assert len(children) == 1 and _alive(children[0])
    relay.kill()  # what the CLI's group teardown does; its stdin pipe stays open here
    relay.wait(timeout=BOUND_S)
    try:
        assert _wait_gone(children) == []
        stops = [json.loads(x) for x in (tmp_path / "run-a" / "bridge-trace.jsonl").read_text().splitlines()]
        assert any(r["event"] == "bridge_stop" and r["reason"] == "relay_gone" for r in stops)
    finally:
        relay.stdin.close()


def test_release_kills_and_reaps_a_live_child(tmp_path: Path, relay_for) -> None:
    spec_path, _ = _make_spec(tmp_path, "a")
    argv, _ = relay_for(spec_path)
    relay = _start_raw(argv)
    try:
        children = _children_of(spec_path)
        assert len(children) == 1
        killed = forkserver.release_session(spec_path)
        assert killed == children
        assert not Path(f"/proc/{children[0]}").exists()  # killed and reaped before release returned
        assert relay.wait(timeout=BOUND_S) == 128 + signal.SIGKILL  # the relay mirrors the child's end
    finally:
        relay.stdin.close()
        if relay.poll() is None:
            relay.kill()
            relay.wait()


HOST_SCRIPT = textwrap.dedent(
    """
    import json, os, subprocess, sys, time
    from pathlib import Path
    from harnesscheck.bridge import forkserver
    spec = Path(sys.argv[1])
    argv, env = forkserver.relay_command(spec)
    forkserver.bind_session(spec, os.getpid())
    relay = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    relay.stdin.write(json.dumps(%r).encode() + b"\\n"); relay.stdin.flush()
    relay.stdout.readline()
    server = forkserver.get_forkserver()
    kids = server.children()[str(spec)]
    print(json.dumps({"forkserver": server.pid, "children": kids, "relay": relay.pid, "spare": server.spare()}), flush=True)
    time.sleep(1000)
    """
) % (INIT,)


def test_host_death_ends_forkserver_and_children(tmp_path: Path) -> None:
    spec_path, _ = _make_spec(tmp_path, "a", parent_pid=None)
    script = tmp_path / "host.py"
    script.write_text(HOST_SCRIPT)
    host = subprocess.Popen([sys.executable, str(script), str(spec_path)], stdout=subprocess.PIPE, env=os.environ.copy())
    try:
        info = json.loads(host.stdout.readline())
        pids = [info["forkserver"], *info["children"], info["relay"], info["spare"]]
        assert len(info["children"]) == 1 and all(_alive(p) for p in pids)
        host.kill()
        host.wait(timeout=BOUND_S)
        assert _wait_gone(pids) == []
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()


def _fd_targets(pid: int) -> dict[int, str]:
    out = {}
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            out[int(name)] = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            pass
    return out


def test_no_fd_leaks_into_a_child(tmp_path: Path, relay_for) -> None:
    spec_a, _ = _make_spec(tmp_path, "a")
    spec_b, _ = _make_spec(tmp_path, "b")
    relay_a = _start_raw(relay_for(spec_a)[0])
    relay_b = _start_raw(relay_for(spec_b)[0])
    try:
        (child_a,), (child_b,) = _children_of(spec_a), _children_of(spec_b)
        server = forkserver.get_forkserver()
        fs = {t for t in _fd_targets(server.pid).values() if t.startswith(("socket:", "pipe:"))}
        mine_a = {t for t in _fd_targets(child_a).values() if t.startswith(("socket:", "pipe:"))}
        fds_b = _fd_targets(child_b)
        mine_b = {t for t in fds_b.values() if t.startswith(("socket:", "pipe:"))}
        # The only thing a child shares with the forkserver is its own relay connection: not
        # the listening socket, the control channel, the wake-up pipe or another's connection.
        assert len(mine_b & fs) == 1 and len(mine_a & fs) == 1 and (mine_a & fs) != (mine_b & fs)
        assert not (mine_a & mine_b), "two sessions' bridges share a pipe or socket"
        # fd 0/1/2 are the relay's stdin, stdout (now /dev/null and stderr: the protocol moved
        # to private fds) and stderr; nothing from the host's or forkserver's files.
        relay_b_pipes = {os.readlink(f"/proc/{relay_b.pid}/fd/{n}") for n in ("2",)}
        assert fds_b[0] == "/dev/null" and fds_b[2] in relay_b_pipes | {"/dev/null"}
        assert not any(t.endswith(("forkserver.log", "bridge.sock")) for t in fds_b.values())
        assert not any("pidfd" in t for t in fds_b.values())  # the forkserver's pidfds of relays and CLIs
    finally:
        for relay in (relay_a, relay_b):
            relay.stdin.close()
            relay.wait(timeout=BOUND_S)


# ---------------------------------------------------------------------------------------
# Through a transport: the session's bridge child is gone when run_session returns


@pytest.mark.parametrize("ending", ["exit", "deadline"])
def test_transport_session_leaves_no_bridge_child(tmp_path: Path, ending: str) -> None:
    from harnesscheck.backends.claude_code import ClaudeCodeTransport
    from harnesscheck.backends.registry import get_spec
    from harnesscheck.core.contracts import AgentSessionRequest
    from harnesscheck.testing.fakes import install_fake_cli, load_fixture

    root = tmp_path / "wt"
    root.mkdir()
    (root / "README.md").write_text("hi\n")
    scenario = load_fixture("claude", "success" if ending == "exit" else "timeout_mid_stream")
    scenario["mcp"] = "connect"
    if ending == "deadline":
        scenario["steps"] = [s for s in scenario["steps"] if "spawn" not in s]
    fake = install_fake_cli("claude", scenario, tmp_path / "bin")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path / "no-home"), "LANG": "C.UTF-8"}
    transport = ClaudeCodeTransport(get_spec("claude-code"), cli_path=fake.path, parent_env=env, linger_s=0.3, term_grace_s=0.5)
    request = AgentSessionRequest(prompt="hi", scope=ToolScope(root=root), timeout_s=3.0 if ending == "deadline" else 60.0, run_dir=tmp_path / "run")
    outcome = transport.run_session(request)
    trace = [json.loads(x) for x in (tmp_path / "run" / "bridge-trace.jsonl").read_text().splitlines()]
    starts = [r for r in trace if r["event"] == "bridge_start"]
    assert starts and all(r.get("mode") == "forkserver" for r in starts), outcome
    assert [p for p in (r["pid"] for r in starts) if _alive(p)] == []  # no grace: gone on return
    assert _children_of(tmp_path / "run" / "bridge-spec.json") == []


def test_the_plain_path_serves_a_session_with_the_stdio_bridge(tmp_path: Path, monkeypatch) -> None:
    """Without the forkserver (HARNESSCHECK_BRIDGE_FORKSERVER=0, or where it cannot run) a
    session is what it was before it: the CLI starts the full stdio bridge itself, pinned to
    the spec's bytes, in its own process group, and it is gone when the session is."""
    from harnesscheck.backends.claude_code import ClaudeCodeTransport
    from harnesscheck.backends.registry import get_spec
    from harnesscheck.core.contracts import AgentSessionRequest
    from harnesscheck.testing.fakes import install_fake_cli, load_fixture

    monkeypatch.setenv(forkserver.DISABLE_VAR, "0")
    root = tmp_path / "wt"
    root.mkdir()
    (root / "README.md").write_text("hi\n")
    scenario = load_fixture("claude", "success")
    scenario["mcp"] = "connect"
    scenario["mcp_timeout"] = BOUND_S  # a cold stdio bridge imports mcp: an upper bound only
    fake = install_fake_cli("claude", scenario, tmp_path / "bin")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path / "no-home"), "LANG": "C.UTF-8"}
    transport = ClaudeCodeTransport(get_spec("claude-code"), cli_path=fake.path, parent_env=env, linger_s=0.3, term_grace_s=0.5)
    outcome = transport.run_session(AgentSessionRequest(prompt="hi", scope=ToolScope(root=root), timeout_s=60.0, run_dir=tmp_path / "run"))
    assert outcome.ok, outcome
    config = json.loads((tmp_path / "run" / "claude-mcp.json").read_text())["mcpServers"]["bridge"]
    assert config["args"][:2] == ["-I", "-m"] and "--spec-sha256" in config["args"], config  # no relay
    trace = [json.loads(x) for x in (tmp_path / "run" / "bridge-trace.jsonl").read_text().splitlines()]
    starts = [r for r in trace if r["event"] == "bridge_start"]
    assert starts and all("mode" not in r for r in starts)  # the stdio bridge itself
    assert _wait_gone([r["pid"] for r in starts]) == []


# ---------------------------------------------------------------------------------------
# One forkserver per host process: again after it died, a new one in a forked host


def test_a_dead_forkserver_is_replaced(tmp_path: Path, relay_for) -> None:
    spec_a, _ = _make_spec(tmp_path, "a")
    relay_for(spec_a)
    old = forkserver.get_forkserver()
    os.kill(old.pid, signal.SIGKILL)
    old.proc.wait(timeout=BOUND_S)
    spec_b, _ = _make_spec(tmp_path, "b")
    argv, env = relay_for(spec_b)
    new = forkserver.get_forkserver()
    assert new is not old and new.pid != old.pid and _alive(new.pid)
    listed, _ = anyio.run(_client_session, argv, env, tmp_path, [])
    assert listed.tools


FORK_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    from harnesscheck.bridge import forkserver
    parent_fs = forkserver.get_forkserver().pid
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        child_fs = forkserver.get_forkserver()
        os.write(w, json.dumps({"child_fs": child_fs.pid, "socket": child_fs.socket_path}).encode())
        forkserver.shutdown()
        os._exit(0)
    os.close(w)
    got = json.loads(os.read(r, 4096))
    os.waitpid(pid, 0)
    got["parent_fs"] = parent_fs
    got["parent_fs_alive"] = forkserver.get_forkserver().pid == parent_fs and forkserver.get_forkserver().alive()
    got["parent_socket"] = forkserver.get_forkserver().socket_path
    print(json.dumps(got))
    """
)


def test_a_forked_host_gets_its_own_forkserver(tmp_path: Path) -> None:
    script = tmp_path / "fork.py"
    script.write_text(FORK_SCRIPT)
    res = subprocess.run([sys.executable, str(script)], capture_output=True, timeout=BOUND_S * 2, text=True)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert got["child_fs"] != got["parent_fs"] and got["socket"] != got["parent_socket"]
    assert got["parent_fs_alive"]  # the child dropped its copy of the control end, nothing more


def test_a_forkserver_that_lost_its_socket_is_retired_not_killed(tmp_path: Path, relay_for) -> None:
    spec_a, _ = _make_spec(tmp_path, "a")
    relay_a = _start_raw(relay_for(spec_a)[0])
    try:
        old = forkserver.get_forkserver()
        (child_a,) = _children_of(spec_a)
        os.unlink(old.socket_path)  # a temp cleaner
        spec_b, _ = _make_spec(tmp_path, "b")
        argv_b, env_b = relay_for(spec_b)
        new = forkserver.get_forkserver()
        assert new is not old and new.socket_path in argv_b
        assert old.running() and _alive(child_a), "a live session's bridge died with the socket"
        assert anyio.run(_client_session, argv_b, env_b, tmp_path, [])[0].tools
        assert forkserver.release_session(spec_a) == [child_a]
        assert old.proc.wait(timeout=BOUND_S) is not None and not old.running()  # closed with its last session
    finally:
        relay_a.stdin.close()
        relay_a.wait(timeout=BOUND_S)


def test_the_relay_runs_compiled_from_the_forkservers_private_directory(tmp_path: Path, relay_for) -> None:
    spec_a, _ = _make_spec(tmp_path, "a")
    argv, env = relay_for(spec_a)
    server = forkserver.get_forkserver()
    script = Path(argv[3])
    assert script.parent == server.dir and script.read_bytes()[:4] == importlib.util.MAGIC_NUMBER
    assert (server.dir.stat().st_mode & 0o077) == 0  # 0700: only our uid reaches it
    assert anyio.run(_client_session, argv, env, tmp_path, [])[0].tools
    # Nowhere to write it: the relay's source, as before.
    (tmp_path / "a-file").write_text("")
    assert forkserver.compile_relay(tmp_path / "a-file" / "sub") == str(forkserver.RELAY_PATH)


def test_a_forkserver_whose_compiled_relay_vanished_is_replaced(tmp_path: Path, relay_for) -> None:
    spec_a, _ = _make_spec(tmp_path, "a")
    relay_for(spec_a)
    old = forkserver.get_forkserver()
    os.unlink(old.relay_script)  # a temp cleaner
    assert not old.alive()
    spec_b, _ = _make_spec(tmp_path, "b")
    argv_b, env_b = relay_for(spec_b)
    new = forkserver.get_forkserver()
    assert new is not old and Path(argv_b[3]).exists()
    assert anyio.run(_client_session, argv_b, env_b, tmp_path, [])[0].tools


def test_a_spare_whose_rehearsal_fails_still_serves(tmp_path: Path, relay_for) -> None:
    """The rehearsal is only a speed-up: without its directory (its call is then refused,
    or it fails and says so in the forkserver's log) a spare serves its session all the same."""
    import shutil

    server = forkserver.get_forkserver() or pytest.fail("the forkserver did not start")
    spec_a, _ = _make_spec(tmp_path, "a")
    argv, env = relay_for(spec_a)
    shutil.rmtree(server.dir / "rehearsal")
    first = server.spare()
    os.kill(first, signal.SIGKILL)  # rehearsed before the removal: replace it
    assert _wait_gone([first]) == []
    for _ in range(2):  # a child forked for the relay, then a spare forked after the removal
        listed, results = anyio.run(_client_session, argv, env, tmp_path, [("read_file", {"path": "src/own.txt"})])
        assert listed.tools and _text(results[0]) == "this is a\n"
    assert server.spare() is not None


def test_sigterm_to_the_forkserver_ends_its_children_and_directory(tmp_path: Path, relay_for) -> None:
    spec_a, _ = _make_spec(tmp_path, "a")
    relay = _start_raw(relay_for(spec_a)[0])
    try:
        server = forkserver.get_forkserver()
        (child,) = _children_of(spec_a)
        spare = server.spare()
        assert spare is not None and _alive(spare)
        os.kill(server.pid, signal.SIGTERM)
        assert server.proc.wait(timeout=BOUND_S) == 0  # ended as asked, not crashed
        assert _wait_gone([child, spare]) == []
        assert not server.dir.exists()
        assert relay.wait(timeout=BOUND_S) == 128 + signal.SIGKILL
    finally:
        relay.stdin.close()
        if relay.poll() is None:
            relay.kill()
            relay.wait()


# ---------------------------------------------------------------------------------------
# The spare child: forked ahead, handed the next session


def test_the_spare_child_gets_the_next_session_and_holds_nothing_before(tmp_path: Path, relay_for) -> None:
    server = forkserver.get_forkserver() or pytest.fail("the forkserver did not start")
    spec_a, _ = _make_spec(tmp_path, "a")
    argv, _env = relay_for(spec_a)
    spare = server.spare()
    assert spare is not None and _alive(spare)
    # Waiting, it holds its standard fds and its end of the hand-off pair, nothing else: not
    # the listening socket, the control channel, another session's connection or pipes.
    held = _fd_targets(spare)
    (extra,) = [fd for fd in held if fd > 2]
    assert held[extra].startswith("socket:") and held[extra] not in set(_fd_targets(server.pid).values())
    assert not any(t.endswith("bridge.sock") or t.startswith("pipe:") for t in held.values())
    relay = _start_raw(argv)
    try:
        assert _children_of(spec_a) == [spare]  # the session went to the waiting child
        after = server.spare()
        assert after is not None and after != spare and _alive(after)  # and the next one waits
    finally:
        relay.stdin.close()
        assert relay.wait(timeout=BOUND_S) == 0
    summary = summarize_trace(tmp_path / "run-a" / "bridge-trace.jsonl")
    assert summary.started and summary.listed is False


def test_a_dead_spare_is_replaced_and_the_relay_still_served(tmp_path: Path, relay_for) -> None:
    server = forkserver.get_forkserver() or pytest.fail("the forkserver did not start")
    spec_a, _ = _make_spec(tmp_path, "a")
    argv, env = relay_for(spec_a)
    spare = server.spare()
    assert spare is not None
    pidfd = os.pidfd_open(spare)
    os.kill(spare, signal.SIGKILL)
    # Gone means every thread gone (a spare killed mid-hand-off is the next test's case).
    try:
        assert select.select([pidfd], [], [], BOUND_S)[0], "the killed spare did not exit"
    finally:
        os.close(pidfd)
    listed, results = anyio.run(_client_session, argv, env, tmp_path, [("read_file", {"path": "src/own.txt"})])
    assert listed.tools and _text(results[0]) == "this is a\n"
    replacement = server.spare()
    assert replacement is not None and replacement != spare and _alive(replacement)


def test_a_spare_killed_during_its_hand_off_leaves_the_session_to_a_fresh_child(tmp_path: Path, relay_for) -> None:
    """The spare is stopped, so the hand-off is sent to it (its socket is open) but never taken,
    then killed: the forkserver forks a child afresh for that relay, which gets its answer."""
    server = forkserver.get_forkserver() or pytest.fail("the forkserver did not start")
    spec_a, _ = _make_spec(tmp_path, "a")
    argv, _env = relay_for(spec_a)
    spare = server.spare()
    assert spare is not None
    os.kill(spare, signal.SIGSTOP)
    relay = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        relay.stdin.write(_line(INIT))
        relay.stdin.flush()
        deadline = time.monotonic() + BOUND_S
        while spare not in _children_of(spec_a) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert spare in _children_of(spec_a), "the session was not handed to the stopped spare"
        os.kill(spare, signal.SIGKILL)
        assert select.select([relay.stdout], [], [], BOUND_S)[0], "the relay got no answer"
        reply = json.loads(relay.stdout.readline() or b"null")
        assert reply and reply.get("id") == 1 and "result" in reply, reply
        kids = _children_of(spec_a)
        assert len(kids) == 1 and spare not in kids
        starts = [json.loads(x) for x in (tmp_path / "run-a" / "bridge-trace.jsonl").read_text().splitlines() if '"bridge_start"' in x]
        assert [r["pid"] for r in starts] == kids  # one bridge served it: the fresh child
    finally:
        if _alive(spare):
            os.kill(spare, signal.SIGKILL)
        relay.stdin.close()
        relay.wait(timeout=BOUND_S)


def test_a_child_killed_after_it_took_its_session_is_not_served_twice(tmp_path: Path, relay_for) -> None:
    """Once the spare said `taken` (its answer reached the relay), its death ends the session
    loudly (the relay exits 128+9) and nothing is forked for it; no copy of the relay's fds stays."""
    server = forkserver.get_forkserver() or pytest.fail("the forkserver did not start")
    spec_a, _ = _make_spec(tmp_path, "a")
    argv, _env = relay_for(spec_a)
    assert server.spare() is not None
    before = len(os.listdir(f"/proc/{server.pid}/fd"))
    relay = _start_raw(argv)  # answered: the spare took the session and serves it
    (child,) = _children_of(spec_a)
    os.kill(child, signal.SIGKILL)
    assert relay.wait(timeout=BOUND_S) == 128 + signal.SIGKILL
    deadline = time.monotonic() + BOUND_S
    while _children_of(spec_a) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _children_of(spec_a) == []
    starts = [x for x in (tmp_path / "run-a" / "bridge-trace.jsonl").read_text().splitlines() if '"bridge_start"' in x]
    assert len(starts) == 1
    server.spare()  # the next spare is forked and waits: the loop is between sessions
    assert len(os.listdir(f"/proc/{server.pid}/fd")) <= before


def test_a_session_whose_calls_outlive_it_is_marked_so_its_child_exits_at_once(monkeypatch):
    """Drain bound passed with a call still pending: the child must not linger (its fds are closed
    under the still-running call thread, whose numbers could be reused)."""
    import anyio

    from harnesscheck.bridge import server

    monkeypatch.setattr(server, "_CALLS_OUTLIVED_SESSION", False)
    drained = server.Inflight()
    anyio.run(drained.drained, 0.01)
    assert not server.calls_outlived_session()
    stuck = server.Inflight()
    stuck.pending.add(7)
    anyio.run(stuck.drained, 0.01)
    assert server.calls_outlived_session()


def test_the_exit_report_does_not_wait_for_the_relay_when_calls_outlived_the_session():
    import socket as socket_mod

    from harnesscheck.bridge import server

    ours, theirs = socket_mod.socketpair(socket_mod.AF_UNIX, socket_mod.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:  # the child closes every other fd, as a bridge child does
        try:
            ours.close()
            forkserver_child.RELAY_EXIT_WAIT_S = 60.0  # would hold the child a minute if it waited
            server._CALLS_OUTLIVED_SESSION = True
            forkserver_child._report_exit(theirs, 3)
        finally:
            os._exit(0)
    theirs.close()
    reaped = False
    try:
        assert ours.recv(64) == b"exit 3"
        deadline = time.monotonic() + 20  # the relay's end stays open all along
        while not reaped and time.monotonic() < deadline:
            reaped = os.waitpid(pid, os.WNOHANG) != (0, 0)
            time.sleep(0.01)
    finally:
        if not reaped:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        ours.close()
    assert reaped, "the child waited for the relay although calls outlived the session"


# ---------------------------------------------------------------------------------------
# Hardening (issue 30): non-dumpable, replaced when stopped, ends with its host while stopped,
# and the relay checks its peer.


def test_the_forkserver_is_not_dumpable(tmp_path: Path, relay_for) -> None:
    spec, _ = _make_spec(tmp_path, "a")
    relay_for(spec)
    server = forkserver.get_forkserver()
    assert server is not None and server.await_ready(BOUND_S)
    assert server.dumpable() == 0  # PR_SET_DUMPABLE 0: no same-uid /proc read, ptrace or pidfd_getfd


def test_a_stopped_forkserver_is_replaced_and_never_waited_for(tmp_path: Path, relay_for) -> None:
    spec_a, _ = _make_spec(tmp_path, "a")
    relay_for(spec_a)
    old = forkserver.get_forkserver()
    assert old is not None and old.await_ready(BOUND_S)
    os.kill(old.pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + BOUND_S
        while not old.stopped() and time.monotonic() < deadline:  # the stop is asynchronous
            time.sleep(0.01)
        assert old.stopped()
        with pytest.raises(forkserver.ForkServerError, match="stopped"):
            old.request({"op": "children"})  # fails at once: never the 30 s control timeout
        spec_b, _ = _make_spec(tmp_path, "b")
        argv, env = relay_for(spec_b)
        new = forkserver.get_forkserver()
        assert new is not old and _alive(new.pid)
        listed, _ = anyio.run(_client_session, argv, env, tmp_path, [])
        assert listed.tools
        assert forkserver.release_session(spec_a) == []  # the stopped one is not asked
        assert _wait_gone([old.pid]) == []  # killed: a stopped one holds the root and trace fds
    finally:
        with contextlib.suppress(OSError):
            os.kill(old.pid, signal.SIGCONT)


def test_a_stopped_forkserver_ends_with_its_host(tmp_path: Path) -> None:
    spec_path, _ = _make_spec(tmp_path, "a", parent_pid=None)
    script = tmp_path / "host.py"
    script.write_text(HOST_SCRIPT)
    host = subprocess.Popen([sys.executable, str(script), str(spec_path)], stdout=subprocess.PIPE, env=os.environ.copy())
    try:
        info = json.loads(host.stdout.readline())
        pids = [info["forkserver"], *info["children"], info["relay"], info["spare"]]
        os.kill(info["forkserver"], signal.SIGSTOP)
        host.kill()
        host.wait(timeout=BOUND_S)
        assert _wait_gone(pids) == []  # SIGCONT on the control channel's hang-up, then its EOF
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()


def test_the_relay_refuses_a_server_of_another_user(tmp_path: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("needs root to run a server as another uid")
    import shutil
    import socket as socketmod
    import tempfile

    sockdir = tempfile.mkdtemp(prefix="hc-peer-", dir="/tmp")
    os.chmod(sockdir, 0o777)
    path = os.path.join(sockdir, "fake.sock")
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # a server of uid 65534 at the relay's path
        try:
            os.close(ready_r)
            os.setgid(65534)
            os.setuid(65534)
            srv = socketmod.socket(socketmod.AF_UNIX, socketmod.SOCK_SEQPACKET)
            srv.bind(path)
            os.chmod(path, 0o777)
            srv.listen(1)
            os.write(ready_w, b"1")
            conn, _ = srv.accept()
            got = conn.recvmsg(4096, 256)
            os._exit(7 if got[1] else 0)  # 7: the relay handed its fds over
        except BaseException:
            os._exit(3)
    os.close(ready_w)
    assert os.read(ready_r, 1) == b"1"
    relay = [sys.executable, "-I", "-S", str(forkserver.RELAY_PATH), path, str(tmp_path / "spec.json")]
    done = subprocess.run(relay, stdin=subprocess.DEVNULL, capture_output=True, timeout=BOUND_S)
    os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    shutil.rmtree(sockdir, ignore_errors=True)
    assert done.returncode == 2 and b"not this user's" in done.stderr, done
    assert not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 7)
