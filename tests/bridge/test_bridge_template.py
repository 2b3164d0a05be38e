"""The bridge forkserver template (bridge/forkserver.py, "Template"): a host told of a template
gets a forkserver forked by it that is its own exactly as a fresh one is (env, cwd, session,
log, control channel, sessions served, death with the host); a template that is gone or a
request it cannot serve leaves the host starting its own; nothing of the template leaks into
the forkserver."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import anyio
import pytest
from test_bridge_forkserver import BOUND_S, _alive, _client_session, _fd_targets, _make_spec, _text, _wait_gone

from harnesscheck.bridge import forkserver, forkserver_child, forkserver_process
from harnesscheck.bridge.spec import bridge_env
from harnesscheck.contain.envpolicy import build_child_env

pytestmark = pytest.mark.skipif(not forkserver.enabled() or not hasattr(os, "pidfd_open"), reason="the template needs Linux (SCM_RIGHTS, pidfds)")


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])


def _sid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[3])


def _environ(pid: int) -> dict[str, str]:
    """The env `pid` started with. Popen returns once the exec is committed (its close-on-exec
    pipe closes), a moment before the kernel records where the new env lies: until then
    /proc/<pid>/environ reads empty, so an empty read is tried again (bounded)."""
    deadline = time.monotonic() + BOUND_S
    while True:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            raw = fh.read()
        if raw or time.monotonic() >= deadline:
            break
        time.sleep(0.01)
    pairs = [item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item]
    return {os.fsdecode(k): os.fsdecode(v) for k, v in pairs}


@pytest.fixture
def template(monkeypatch):
    """A template (started with an env this host's forkserver must not get), and this
    process's forkserver forked by it; both gone at teardown."""
    with monkeypatch.context() as env:
        env.setenv("LC_HC_ONLY_THE_TEMPLATE", "1")
        started = forkserver.start_template()
    assert started is not None
    assert _environ(started.proc.pid).get("LC_HC_ONLY_THE_TEMPLATE") == "1"
    forkserver.shutdown()  # a forkserver an earlier test left to this process is not the template's
    forkserver.use_template(started.socket_path)
    try:
        yield started
    finally:
        forkserver.use_template(None)
        forkserver.shutdown()
        started.close()


def test_the_host_gets_a_forkserver_forked_by_the_template_that_serves_as_a_fresh_one(tmp_path: Path, template) -> None:
    spec_path, _ = _make_spec(tmp_path, "a")
    argv, env = forkserver.relay_command(spec_path)
    assert forkserver.bind_session(spec_path, os.getpid())
    server = forkserver.get_forkserver()
    try:
        assert isinstance(server.proc, forkserver._Adopted) and _ppid(server.pid) == template.proc.pid
        assert not os.get_inheritable(server.proc._pidfd)  # received over SCM_RIGHTS: made close-on-exec
        # its own, as a fresh one is: its session, its private directory, this host's child env
        assert _sid(server.pid) == server.pid
        assert os.readlink(f"/proc/{server.pid}/cwd") == str(server.dir)
        # (its /proc environ is the template's start-up env: the digest comes from its os.environ)
        assert server.environ_digest() == forkserver.env_digest(build_child_env(dict(os.environ), injections=bridge_env()))
        assert os.readlink(f"/proc/{server.pid}/fd/2") == str(server.dir / "forkserver.log")
        listed, results = anyio.run(_client_session, argv, env, tmp_path, [("read_file", {"path": "src/own.txt"})])
        assert "read_file" in [t.name for t in listed.tools] and _text(results[0]) == "this is a\n"
    finally:
        forkserver.release_session(spec_path)


def test_nothing_of_the_template_is_open_in_the_forkserver_it_forks(template) -> None:
    server = forkserver.get_forkserver()
    _settled_fd_count(template.proc.pid)  # the request's fds (this forkserver's control end among them) closed
    forked, of_template = _fd_targets(server.pid), set(_fd_targets(template.proc.pid).values())
    # its stdio and its own files and sockets only: not the template's listener, control
    # channel or log (a socket or pipe open in both is one the template handed down)
    assert forked[0] == forked[1] == "/dev/null" and forked[2] == str(server.dir / "forkserver.log")
    assert not {t for t in forked.values() if t.startswith(("socket:", "pipe:"))} & of_template
    assert not any(str(template.dir) in target for target in forked.values())


def test_the_forked_forkserver_and_its_children_end_with_their_host_not_with_the_template(tmp_path: Path) -> None:
    template = forkserver.start_template()
    assert template is not None
    spec_path, _ = _make_spec(tmp_path, "a", parent_pid=None)
    host_script = tmp_path / "host.py"
    host_script.write_text(
        textwrap.dedent(
            """
        import json, os, sys, time
        from pathlib import Path
        from harnesscheck.bridge import forkserver
        forkserver.use_template(sys.argv[2])
        spec = Path(sys.argv[1])
        forkserver.relay_command(spec)
        server = forkserver.get_forkserver()
        print(json.dumps({"forkserver": server.pid, "spare": server.spare()}), flush=True)
        time.sleep(1000)
        """
        )
    )
    host = subprocess.Popen([sys.executable, str(host_script), str(spec_path), template.socket_path], stdout=subprocess.PIPE)
    try:
        info = json.loads(host.stdout.readline())
        assert _ppid(info["forkserver"]) == template.proc.pid and _alive(info["spare"])
        host.kill()
        host.wait(timeout=BOUND_S)
        assert _wait_gone([info["forkserver"], info["spare"]]) == []
        assert template.proc.poll() is None  # the template serves the next host
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()
        template.close()
    assert template.proc.poll() is not None and not template.dir.exists()


def test_a_host_whose_template_is_gone_starts_its_own_forkserver(tmp_path: Path, capfd) -> None:
    template = forkserver.start_template()
    assert template is not None
    path = template.socket_path
    template.close()
    forkserver.shutdown()
    forkserver.use_template(path)
    try:
        spec_path, _ = _make_spec(tmp_path, "a")
        assert forkserver.relay_command(spec_path) is not None
        server = forkserver.get_forkserver()
        assert not isinstance(server.proc, forkserver._Adopted) and _ppid(server.pid) == os.getpid()
        assert "template unusable" in capfd.readouterr().err
        forkserver.release_session(spec_path)
    finally:
        forkserver.use_template(None)
        forkserver.shutdown()


def _private(tmp_path: Path, name: str) -> Path:
    """A private directory of ours (0700), as a host's mkdtemp makes."""
    directory = tmp_path / name
    directory.mkdir(mode=0o700)
    directory.chmod(0o700)
    return directory


def _ask(path: str, message: bytes, fds: list[int]) -> dict:
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as conn:
        conn.settimeout(BOUND_S)
        conn.connect(path)
        socket.send_fds(conn, [message], fds)
        return json.loads(conn.recv(forkserver.MAX_MESSAGE) or b"{}")


def test_the_template_forks_nothing_for_a_request_it_cannot_serve(tmp_path: Path) -> None:
    template = forkserver.start_template()
    assert template is not None
    private = _private(tmp_path, "private")
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    link = tmp_path / "link"
    link.symlink_to(private)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    stream_a, stream_b = socket.socketpair()
    read_end, write_end = os.pipe()

    def request(directory, env=None) -> bytes:
        return json.dumps({"dir": str(directory), "env": {"A": "b"} if env is None else env}).encode()

    try:
        refusals = [
            _ask(template.socket_path, request(private), []),  # no fd
            _ask(template.socket_path, request(private), [theirs.fileno(), read_end]),  # two
            _ask(template.socket_path, request(private), [read_end]),  # a pipe
            _ask(template.socket_path, request(private), [stream_b.fileno()]),  # a stream socket
            _ask(template.socket_path, request(shared), [theirs.fileno()]),  # others may enter
            _ask(template.socket_path, request(link), [theirs.fileno()]),  # a link to a private one
            _ask(template.socket_path, request("relative"), [theirs.fileno()]),
            _ask(template.socket_path, request(private, {"A": 1}), [theirs.fileno()]),
            _ask(template.socket_path, request(private, {"A=B": "x"}), [theirs.fileno()]),  # no env holds these
            _ask(template.socket_path, request(private, {"A": "x\0y"}), [theirs.fileno()]),
            _ask(template.socket_path, request(private, {"": "x"}), [theirs.fileno()]),
            _ask(template.socket_path, request(private, {"A": "\ud800"}), [theirs.fileno()]),
            _ask(template.socket_path, b"not json", [theirs.fileno()]),
        ]
        assert all("pid" not in r and r.get("error") for r in refusals), refusals
        # and it still serves a good one: a forkserver that says ready on the pair it was given
        reply = _ask(template.socket_path, request(private, build_child_env(dict(os.environ), injections=bridge_env())), [theirs.fileno()])
        theirs.close()
        ours.settimeout(BOUND_S)
        ready = json.loads(ours.recv(forkserver.MAX_MESSAGE))
        assert ready == {"ready": True, "pid": reply["pid"]}
        ours.close()  # its host's EOF ends it
        assert _wait_gone([reply["pid"]]) == []
    finally:
        for sock in (ours, theirs, stream_a, stream_b):
            sock.close()
        for fd in (read_end, write_end):
            os.close(fd)
        template.close()


def _valid_request(directory: Path) -> bytes:
    return json.dumps({"dir": str(directory), "env": {"A": "b"}}).encode()


@pytest.mark.parametrize("peer_uid", ["ours", "another"])
def test_the_template_serves_only_its_own_uid(peer_uid: str, monkeypatch, tmp_path: Path) -> None:
    """The peer check, in process (no second user here): a valid request from another uid is
    refused and nothing is forked; the same request from ours is forked."""
    forked = []
    uid = os.getuid() if peer_uid == "ours" else os.getuid() + 1
    monkeypatch.setattr(forkserver_process, "_peer_cred", lambda conn: (1, uid))
    for module in (forkserver_process, forkserver_child):  # this test process has threads; a template has one
        monkeypatch.setattr(module, "_thread_count", lambda: 1)
    monkeypatch.setattr(forkserver.os, "fork", lambda: forked.append(1) or 1 / 0)  # stop right there
    host, template_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with host, template_end, ours, theirs:
        socket.send_fds(host, [_valid_request(_private(tmp_path, "d"))], [theirs.fileno()])
        forkserver_process._Template(control=None, listener=None)._serve_host(template_end)
        host.settimeout(BOUND_S)
        reply = json.loads(host.recv(forkserver.MAX_MESSAGE))
    if peer_uid == "ours":
        assert forked == [1] and reply == {"error": "ZeroDivisionError"}
    else:
        assert forked == [] and reply == {"error": "not our uid"}


def _fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _settled_fd_count(pid: int) -> int:
    """The template's fd count once a request it answered has closed its fds (they close just
    after the reply); a leaked fd never goes."""
    deadline = time.monotonic() + 10
    last = _fd_count(pid)
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = _fd_count(pid)
        if now == last:
            return now
        last = now
    return last


def test_a_hostile_request_neither_ends_the_template_nor_leaks_its_fds(tmp_path: Path) -> None:
    template = forkserver.start_template()
    assert template is not None
    theirs_pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET) for _ in range(2)]
    try:
        ours, theirs = theirs_pairs[0]
        # a first good request: the template's imports are done and its fds settled
        first = _ask(template.socket_path, _valid_request(_private(tmp_path, "first")), [theirs.fileno()])
        assert first.get("pid")
        before = _settled_fd_count(template.proc.pid)
        # deep JSON (RecursionError in json.loads), then pipes instead of sockets, five times
        assert _ask(template.socket_path, b"[" * 200_000, [theirs.fileno()]).get("error")
        for n in range(5):
            read_end, write_end = os.pipe()
            try:
                assert _ask(template.socket_path, _valid_request(_private(tmp_path, f"p{n}")), [read_end]).get("error")
            finally:
                os.close(read_end)
                os.close(write_end)
        assert _settled_fd_count(template.proc.pid) == before
        # still serving
        ours, theirs = theirs_pairs[1]
        reply = _ask(template.socket_path, _valid_request(_private(tmp_path, "last")), [theirs.fileno()])
        assert reply.get("pid") and template.proc.poll() is None
    finally:
        for pair in theirs_pairs:
            for sock in pair:
                sock.close()
        template.close()


def test_a_template_whose_starter_died_ends_and_removes_its_directory(tmp_path: Path) -> None:
    starter = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
            import json, time
            from harnesscheck.bridge import forkserver
            t = forkserver.start_template()
            print(json.dumps({"pid": t.proc.pid, "dir": str(t.dir)}), flush=True)
            time.sleep(1000)
            """
            ),
        ],
        stdout=subprocess.PIPE,
    )
    try:
        info = json.loads(starter.stdout.readline())
        assert _alive(info["pid"]) and Path(info["dir"]).is_dir()
        starter.kill()
        starter.wait(timeout=BOUND_S)
        assert _wait_gone([info["pid"]]) == []
        deadline = time.monotonic() + BOUND_S
        while Path(info["dir"]).exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not Path(info["dir"]).exists()
    finally:
        if starter.poll() is None:
            starter.kill()
            starter.wait()


def test_the_kit_shares_one_template_among_xdist_workers(monkeypatch) -> None:
    from types import SimpleNamespace

    from harnesscheck.backends.registry import BUILTIN_SPECS
    from harnesscheck.core.paths import conformance_dir
    from harnesscheck.kit import plugin

    started, used = [], []
    fake = SimpleNamespace(socket_path="/x/template.sock", close=lambda: started.append("closed"))
    monkeypatch.setattr(forkserver, "start_template", lambda: started.append("started") or fake)
    monkeypatch.setattr(forkserver, "use_template", used.append)

    monkeypatch.setattr(plugin, "_backends", lambda config: [BUILTIN_SPECS[b] for b in config.backends])

    def controller(backends, args=None, dist="load", given=None):
        return SimpleNamespace(
            option=SimpleNamespace(dist=dist, tx=["popen"] * 2),
            args=args or [str(conformance_dir())],
            stash={},
            backends=backends,
            getoption=lambda name: given,
        )

    config = controller(["codex", "api"])
    plugin._share_one_bridge_template(config)
    node = SimpleNamespace(config=config, gateway=SimpleNamespace(id="gw1"), workerinput={})
    monkeypatch.setattr(plugin, "_pinned_suffixes", lambda config: ())
    plugin.pytest_configure_node(node)
    assert started == ["started"] and node.workerinput[plugin.BRIDGE_TEMPLATE] == fake.socket_path
    worker = SimpleNamespace(option=SimpleNamespace(dist="no"), workerinput=node.workerinput, stash={}, getoption=lambda name: None)
    plugin._share_one_bridge_template(worker)
    assert used == [fake.socket_path]
    # no template: no harness cells, a serial run, --dist load without workers (in-process),
    # other tests mixed in
    in_process = controller(["codex"])
    in_process.option.tx = []
    collecting = controller(["codex"])
    collecting.option.collectonly = True
    for config in (controller(["api", "fake"]), controller(["codex"], dist="no"), in_process, collecting, controller(["codex"], args=["tests"])):
        plugin._share_one_bridge_template(config)
    assert started == ["started"]


def test_a_template_given_to_the_run_is_used_and_passed_on_never_started_or_ended(monkeypatch) -> None:
    """--hc-bridge-template (harnesscheck verify starts one before pytest): the controller
    passes it to every worker and starts none; a serial run's host uses it; the run's end
    leaves it to its starter."""
    from types import SimpleNamespace

    from harnesscheck.backends.registry import BUILTIN_SPECS
    from harnesscheck.core.paths import conformance_dir
    from harnesscheck.kit import plugin

    started, used = [], []
    monkeypatch.setattr(forkserver, "start_template", lambda: started.append("started"))
    monkeypatch.setattr(forkserver, "use_template", used.append)
    monkeypatch.setattr(plugin, "_backends", lambda config: [BUILTIN_SPECS["codex"]])
    monkeypatch.setattr(plugin, "_pinned_suffixes", lambda config: ())
    given = "/run/given/template.sock"
    options = {"--hc-bridge-template": given, "--hc-exit-fast": False, "hc_bridge_template": given, "hc_exit_fast": False}
    for dist, tx in (("load", ["popen"] * 2), ("no", [])):
        config = SimpleNamespace(
            option=SimpleNamespace(dist=dist, tx=tx), args=[str(conformance_dir())], stash={}, getoption=lambda name, default=None: options.get(name, default)
        )
        plugin._share_one_bridge_template(config)
        node = SimpleNamespace(config=config, gateway=SimpleNamespace(id="gw0"), workerinput={})
        plugin.pytest_configure_node(node)
        assert node.workerinput[plugin.BRIDGE_TEMPLATE] == given
        plugin.pytest_unconfigure(config)  # nothing to end: not this run's
    assert started == [] and used == [given, given]


def test_verify_starts_a_template_for_a_run_with_harness_backends_only() -> None:
    from harnesscheck.kit.verify import bridge_template, pytest_args

    with bridge_template(["api", "fake"]) as none:
        assert none is None
    with bridge_template(["api", "codex"]) as path:
        assert path is not None and Path(path).is_socket()
        args = pytest_args(["api", "codex"], ["offline"], Path("/r"), None, "3", path)
        assert args[args.index("--hc-bridge-template") + 1] == path
        reply = _ask(path, b"{}", [])  # the template answers (and refuses what is no request)
        assert reply.get("error")
    assert not Path(path).exists()
    assert "--hc-bridge-template" not in pytest_args(["codex"], ["offline"], Path("/r"), None, "3")


def test_a_host_sends_nothing_to_a_template_of_another_uid(monkeypatch, tmp_path: Path, capfd) -> None:
    """The host's own peer check, in process (no second user here): its env and control fd
    go to no process but one of its uid."""
    path = str(_private(tmp_path, "t") / "template.sock")
    monkeypatch.setattr(forkserver, "_peer_cred", lambda conn: (1, os.getuid() + 1))
    monkeypatch.setattr(forkserver, "START_TIMEOUT_S", 2.0)  # without the check: fails in 2 s, not 60
    with forkserver._listening(path) as listener:
        assert forkserver._fork_from_template(path, _private(tmp_path, "d"), {"A": "b"}) is None
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(BOUND_S)
            assert conn.recv(forkserver.MAX_MESSAGE) == b""  # closed, nothing sent
    assert "is not this user's" in capfd.readouterr().err


def test_a_forkserver_whose_host_left_before_it_was_ready_removes_its_directory() -> None:
    directory = forkserver._private_dir(forkserver.SOCKET_NAME)
    host_end, proc = forkserver._launch(forkserver._child_env(), directory, "forkserver.log")
    host_end.close()  # gone before `ready`: the forkserver's send fails (EPIPE)
    assert proc.wait(timeout=forkserver.START_TIMEOUT_S) == 1
    assert not directory.exists()


def test_a_forked_forkserver_whose_host_left_before_it_was_ready_removes_its_directory(tmp_path: Path) -> None:
    """The host's end of the control pair is closed before the template even forks: the
    forked forkserver's `ready` fails (EPIPE), and it ends, its directory removed."""
    template = forkserver.start_template()
    assert template is not None
    directory = _private(tmp_path, "host-gone")
    host_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    host_end.close()
    try:
        reply = _ask(template.socket_path, _valid_request(directory), [child_end.fileno()])
        child_end.close()
        assert reply.get("pid")
        assert _wait_gone([reply["pid"]]) == []
        deadline = time.monotonic() + BOUND_S
        while directory.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not directory.exists()
    finally:
        template.close()
