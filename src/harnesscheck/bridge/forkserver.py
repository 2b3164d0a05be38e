"""Bridge forkserver: one pre-imported bridge process per host that forks a stdio bridge per
session, so a CLI's MCP server answers in tens of milliseconds instead of ~0.7 s of imports.

Three modules: this one is the host side (what a transport calls, and the helpers both sides
share); the forkserver process's loop, `main` and the template are bridge/forkserver_process.py;
the relay checks, a served child and the spare are bridge/forkserver_child.py.

Contract (doc/SPEC-bridge.md, "Forkserver"):

Host side (imported by the transports; nothing heavy at import):
- `relay_command(spec_path) -> (argv, env) | None`: start the forkserver lazily (once per
  host process, thread-safe; again after a fork of the host or when it died; never waited
  for: the host binds its socket, so a relay connects at once and waits in the backlog while
  the forkserver imports), register the spec (sent, not waited for), and return the relay
  command for the CLI's MCP config:
  `<python> -I -S <its dir>/_bridgerelay.pyc SOCKET SPEC -- <full stdio bridge argv>` (the
  relay compiled at the forkserver's start; its source `_bridgerelay.py` if that failed).
  None when the forkserver cannot run here (not Linux, disabled with
  `HARNESSCHECK_BRIDGE_FORKSERVER=0`, failed to start): the caller uses the full bridge.
- `bind_session(spec_path, cli_pid)`: right after the CLI's spawn (`run_process` on_spawn;
  sent, not waited for: the host writes the CLI's stdin next): only the CLI and processes it
  started (its descendants) may have the bridge. The forkserver reads its whole control
  channel before its socket, and accepts one connection per round, so registration and
  binding come before the relay they admit.
- `release_session(spec_path)`: kill (after a 0.25 s grace, SIGKILL to the whole process
  group) and reap every bridge child of that spec, synchronously, and forget the
  registration. Returns the pids that had to be killed. Idempotent.

The forkserver process (forkserver_process.py, forkserver_child.py):
- Started with the env policy's child env (the same scrubbing the bridge applies to
  itself), in its own session, cwd its private directory: a fresh `mkdtemp` (0700, random
  name) holding the listening socket (0600). It pre-imports `mcp` and the server module,
  then is single-threaded for good (checked before every fork). Its loop never blocks on a
  relay connection: requests are read only when readable; a silent connection waits at most
  PENDING_TIMEOUT_S, at most MAX_PENDING at once (the oldest dropped); accept() failures
  (EMFILE...) pause accepting briefly instead of ending or spinning the loop.
- Control channel: a SOCK_SEQPACKET socketpair; the host's end is non-inheritable and
  closed in a forked copy of the host. EOF on it (the host died) kills every child and
  ends the forkserver.
- Registration binds a spec path to the exact bytes the host wrote. A relay is served only
  when: its peer uid is ours; the path is registered; the file's current bytes equal the
  registered bytes (read non-blocking, regular files only); and the relay descends from the
  process the host bound the spec to (the CLI; its parent chain in /proc, so an MCP client
  that starts its servers with setsid, as the Python SDK does, is still recognised), both of
  them still running (pidfds: a pid freed by an exited relay or CLI may be reused). A relay
  that comes before the binding is held (bounded like pending connections) and answered
  when it arrives; one never bound is refused `not-bound`. The child serves the registered spec, never a re-read one. Nothing secret is
  involved: the registration is a fact held by the host and the forkserver, not a token a
  caller could copy.
- A served child: own process group; received fds dup2'd onto 0/1/2; every other fd
  closed; the forkserver's signal set-up undone; then `server._prepare()`'s steps and
  `server.serve_spec(...)`, the same code path as `python -m harnesscheck.bridge`. It ends
  on stdin EOF, when the relay's connection closes, when the forkserver dies (parent-death
  signal) or the host dies (the spec's parent_pid watch). Its exit status goes to the relay.
- Template (`start_template`, used by `harnesscheck verify` before its pytest child, else by
  the kit's xdist controller for its workers): one
  process pre-imports and warms up as a forkserver does, then forks a ready forkserver for
  each host that asks (`use_template(path)` in that host), instead of each host starting
  its own (~0.7 s of CPU each for the imports). The host keeps everything that makes the
  forkserver its own: it makes the private directory and the control socketpair, sends its
  end of the pair (SCM_RIGHTS) and its env over the template's socket (0600, in a 0700
  directory; the peer's uid must be ours; the directory must be ours and 0700), and the
  forked forkserver then runs exactly as a fresh one (own session, cwd, env, log; `ready`
  with its pid on the control channel). Not the host's child: the host watches it through
  a pidfd. No template, a dead one or any failure: the host starts its own, as before. The
  template ends on EOF on its own control channel (its starter died or closed it); the
  forkservers it forked end with their hosts, as any does.
- Usually the child is the spare, forked ahead: it rehearses a throw-away session
  (`server.rehearse`, so a session's pages are its own, not copy-on-write faults), parks
  two threads, says `ready` and waits for a session. The next spare is forked when that
  session's child ends, when the host registers or releases a spec, or SPARE_DELAY_S after
  the hand-over.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

#: Set to 0/false/no/off to always start the full stdio bridge (debugging, benchmarks).
DISABLE_VAR = "HARNESSCHECK_BRIDGE_FORKSERVER"
RELAY_PATH = Path(__file__).resolve().parent / "_bridgerelay.py"
SOCKET_NAME = "bridge.sock"
TEMPLATE_SOCKET_NAME = "template.sock"
START_TIMEOUT_S = 60.0
CONTROL_TIMEOUT_S = 30.0
REAP_TIMEOUT_S = 10.0
#: On release, children still running get this long to end by themselves (stdin EOF or
#: relay gone: they write their `bridge_stop` record) before SIGKILL.
RELEASE_GRACE_S = 0.25
MAX_MESSAGE = 1 << 20
#: A relay sends its request right after connecting. An accepted connection that has not
#: sent one waits (in the selector, never blocking the loop) at most this long...
PENDING_TIMEOUT_S = 5.0
#: ...and at most this many wait at once: beyond it the oldest is dropped.
MAX_PENDING = 32
#: accept() failed (EMFILE, ENFILE, ENOBUFS...): stop accepting this long, not busy-loop.
ACCEPT_PAUSE_S = 0.1
#: After a session went to the spare, its replacement is forked once that session's child
#: ends, the host registers or releases a spec, or at the latest this long after: not at
#: once, where the fork (and the new spare's rehearsal) would take the CPU the session
#: starts on. (A `bind` may hand a held relay its spare: it forks nothing at once.)
SPARE_DELAY_S = 0.2
#: A child that reported its exit to its relay waits at most this for the relay to exit.
RELAY_EXIT_WAIT_S = 1.0
#: The warm-up session's dispatch thread ends right after it; wait at most this for it.
WARM_UP_TIMEOUT_S = 10.0
#: AF_UNIX path limit on Linux is 108 bytes including the NUL.
MAX_SOCKET_PATH = 100


# =======================================================================================
# Host side


class ForkServerError(RuntimeError):
    """The forkserver could not start or answer."""


def compile_relay(directory: Path, source: Path = RELAY_PATH) -> str:
    """What the relay command runs: the relay compiled into `directory` (the forkserver's
    private one), where that works. A script named on the command line is compiled on every
    start and never cached (~1 ms of the relay's ~9 ms); a .pyc given instead is only
    unmarshalled. Written fresh by this interpreter (the one the relay runs on) at each
    forkserver start, so it is never stale; nothing is written next to the source. Anything
    failing: the source itself, as before."""
    import py_compile

    target = Path(directory) / (Path(source).stem + ".pyc")
    try:
        py_compile.compile(str(source), cfile=str(target), doraise=True, optimize=0, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    except (OSError, py_compile.PyCompileError) as exc:
        sys.stderr.write(f"harnesscheck: bridge relay not compiled, running its source: {exc}\n")
        return str(source)
    return str(target)


def _private_dir(longest: str) -> Path:
    """A fresh private directory (mkdtemp: 0700, random name) short enough for a socket
    named `longest` in it."""
    directory = Path(tempfile.mkdtemp(prefix="harnesscheck-bridge-fs-"))
    if len(str(directory / longest)) > MAX_SOCKET_PATH:
        shutil.rmtree(directory, ignore_errors=True)
        directory = Path(tempfile.mkdtemp(prefix="hc-fs-", dir="/tmp"))
    return directory


def env_digest(environ) -> str:
    """sha256 of an environment's items, sorted: what a forkserver runs with, comparable."""
    import hashlib

    return hashlib.sha256(json.dumps(sorted(environ.items())).encode()).hexdigest()


def _child_env() -> dict[str, str]:
    """The env a forkserver (or template) runs with: the bridge's own policy."""
    from harnesscheck.bridge.spec import bridge_env
    from harnesscheck.contain.envpolicy import build_child_env

    return build_child_env(dict(os.environ), injections=bridge_env())


def _launch(env: dict[str, str], directory: Path, log_name: str, *, listener: socket.socket | None = None, template: bool = False) -> tuple[socket.socket, Any]:
    """`python -m harnesscheck.bridge.forkserver_process` as this process's child, in its own session,
    cwd and log in `directory`, serving on `listener` (bound by the caller, so a relay may
    connect at once and wait in its backlog while the imports run; a template when
    `template`): (host end of its control pair, Popen). The host end is non-inheritable (PEP
    446): no CLI ever holds it."""
    import subprocess

    from harnesscheck.bridge.spec import _importable_isolated, _interpreter

    exe = _interpreter()
    flags = ["-I"] if _importable_isolated(exe) else ["-P", "-s"]
    host_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    passed = [child_end, *([listener] if listener is not None else [])]
    listen = ["--template" if template else "--listen-fd", str(listener.fileno())] if listener is not None else []
    try:
        with open(directory / log_name, "wb") as log:
            for sock in passed:
                sock.set_inheritable(True)
            proc = subprocess.Popen(
                [exe, *flags, "-m", "harnesscheck.bridge.forkserver_process", *listen, "--control-fd", str(child_end.fileno()), "--dir", str(directory)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=env,
                cwd=str(directory),
                pass_fds=tuple(sock.fileno() for sock in passed),
                start_new_session=True,
            )
    except OSError:
        host_end.close()
        raise
    finally:
        child_end.close()
    return host_end, proc


def _listening(path: str) -> socket.socket:
    """A SEQPACKET socket listening at `path`, created 0600."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    old_umask = os.umask(0o177)
    try:
        listener.bind(path)
    except OSError:
        listener.close()
        raise
    finally:
        os.umask(old_umask)
    listener.listen(64)
    return listener


def _stop(control: socket.socket, proc: Any, directory: Path) -> None:
    """EOF on `control` (the process ends on it), then reap `proc` (SIGKILL after
    REAP_TIMEOUT_S: it must not outlive us) and remove `directory`."""
    try:
        control.close()
    except OSError:
        pass
    try:
        proc.wait(timeout=REAP_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - last resort
        proc.kill()
        proc.wait()
    shutil.rmtree(directory, ignore_errors=True)


class _Adopted:
    """The Popen calls ForkServer makes, for a forkserver that is not our child (a template
    forked it and reaps it): watched and killed through a pidfd, never waited for."""

    def __init__(self, pid: int, pidfd: int):
        self.pid = pid
        self._pidfd = pidfd

    def poll(self) -> int | None:
        import select

        return 0 if self._pidfd < 0 or select.select([self._pidfd], [], [], 0)[0] else None

    def wait(self, timeout: float | None = None) -> int:
        import select
        import subprocess

        if self._pidfd >= 0 and not select.select([self._pidfd], [], [], timeout)[0]:
            raise subprocess.TimeoutExpired("bridge forkserver", timeout or 0)
        self._close()
        return 0

    def kill(self) -> None:
        if self._pidfd >= 0:
            try:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            except OSError:
                pass

    def _close(self) -> None:
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1


def _fork_from_template(path: str, directory: Path, env: dict[str, str]) -> tuple[socket.socket, _Adopted] | None:
    """A forkserver forked for this host by the template at `path`: (host end of its control
    pair, its handle). None (noted on stderr) when no template answers; the caller then
    starts its own (in another directory: a template that answers too late forks into this
    one). The template replies once its imports are done (START_TIMEOUT_S)."""
    if not hasattr(os, "pidfd_open"):
        return None
    host_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pidfds: list[int] = []
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as conn:
            conn.settimeout(START_TIMEOUT_S)
            conn.connect(path)
            if _peer_cred(conn)[1] != os.getuid():  # the env goes nowhere but a process of ours
                raise ForkServerError(f"the template at {path} is not this user's")
            request = json.dumps({"dir": str(directory), "env": env}).encode()
            socket.send_fds(conn, [request], [child_end.fileno()])
            child_end.close()  # the forked forkserver holds the only other copy
            raw, pidfds, _flags, _addr = socket.recv_fds(conn, MAX_MESSAGE, 1)
        for fd in pidfds:
            os.set_inheritable(fd, False)  # SCM_RIGHTS fds come without close-on-exec
        reply = json.loads(raw or b"{}")
        pid = reply.get("pid") if isinstance(reply, dict) else None
        if not isinstance(pid, int) or pid <= 0 or len(pidfds) != 1:
            raise ForkServerError(f"the template refused: {reply.get('error', reply) if isinstance(reply, dict) else reply!r}")
        # The template, its parent, opened the pidfd before it could reap it: never another
        # process that got the pid after the forkserver died.
        adopted = _Adopted(pid, pidfds.pop())
        return host_end, adopted
    except (OSError, ValueError, ForkServerError) as exc:
        host_end.close()
        child_end.close()
        sys.stderr.write(f"harnesscheck: bridge forkserver template unusable, starting a forkserver: {exc}\n")
        return None
    finally:
        _close_fds(pidfds)  # any not adopted


class ForkServer:
    """The host's handle on one forkserver process: start, register, release, close.

    Started without waiting: a fresh forkserver's socket is bound here before it starts, so a
    relay connects at once and waits in the backlog until the imports are done (~0.5 s, in
    parallel with the CLI's own start: a CLI starts its MCP servers only after its own
    start-up). `register` and `bind` are sent without waiting for their replies (the
    forkserver reads its control channel before its socket, so a relay never comes before
    its registration; a refused request refuses its relay: loud, never wider); the first
    request that waits (`release`, diagnostics) reads `ready` and those replies on the way."""

    def __init__(self) -> None:
        self.owner_pid = os.getpid()
        self._lock = threading.Lock()
        self._next_id = 0
        self.ready = False  # `ready` read on the control channel
        self.env = _child_env()
        started = None
        if _template is not None:
            self._use_dir(_private_dir(SOCKET_NAME))
            started = _fork_from_template(_template, self.dir, self.env)
            if started is None:
                shutil.rmtree(self.dir, ignore_errors=True)
        try:
            if started is None:
                self._use_dir(_private_dir(SOCKET_NAME))
                listener = _listening(self.socket_path)
                try:
                    started = _launch(self.env, self.dir, "forkserver.log", listener=listener)
                finally:
                    listener.close()  # the forkserver's copy is the only one: it gone, relays fall back
            self._control, self.proc = started
        except OSError as exc:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise ForkServerError(f"cannot start the bridge forkserver: {exc}") from None
        self.pid = self.proc.pid
        if isinstance(self.proc, _Adopted):
            # Forked by a warm template: ready in milliseconds, but it binds its own socket,
            # which a relay must find.
            with self._lock:
                self._await_ready(time.monotonic() + START_TIMEOUT_S)

    def _use_dir(self, directory: Path) -> None:
        self.dir = directory
        self.socket_path = str(directory / SOCKET_NAME)
        self.relay_script = compile_relay(directory)

    # -- requests -------------------------------------------------------------------------

    def _receive(self, timeout_s: float) -> dict:
        self._control.settimeout(timeout_s)
        try:
            raw = self._control.recv(MAX_MESSAGE)
        except (OSError, TimeoutError) as exc:
            raise ForkServerError(f"no answer from the bridge forkserver: {exc}") from None
        if not raw:
            detail = ""
            try:
                detail = (self.dir / "forkserver.log").read_text(errors="replace")[-2000:]
            except OSError:
                pass
            raise ForkServerError(f"the bridge forkserver exited{': ' + detail if detail else ''}")
        reply = json.loads(raw)
        if not self.ready:  # the first message of all is `ready`
            if reply.get("ready") is not True or reply.get("pid") != self.proc.pid:
                raise ForkServerError(f"the bridge forkserver did not start: {reply}")
            self.ready = True
            return {}
        return reply

    def await_ready(self, timeout_s: float) -> bool:
        """True once the forkserver said `ready` (its imports done); False when it has not
        within `timeout_s` (it goes on starting: nothing is closed); ForkServerError when it
        ended instead."""
        import select

        with self._lock:
            if not self.ready:
                readable, _, _ = select.select([self._control], [], [], max(0.0, timeout_s))
                if not readable:
                    return False
                self._await_ready(time.monotonic() + CONTROL_TIMEOUT_S)
            return True

    def _await_ready(self, deadline: float) -> None:
        try:
            while not self.ready:
                self._receive(max(0.0, deadline - time.monotonic()))
        except ForkServerError:
            self.close()
            raise

    def _send(self, message: dict) -> int:
        self._next_id += 1
        try:
            self._control.sendall(json.dumps({**message, "id": self._next_id}).encode())
        except OSError as exc:
            raise ForkServerError(f"the bridge forkserver is gone: {exc}") from None
        return self._next_id

    def request(self, message: dict, timeout_s: float = CONTROL_TIMEOUT_S) -> dict:
        """Send one request and return its reply. Requests carry an id, so a late reply to a
        request that timed out, or one sent without waiting (`post`), is skipped rather than
        taken for this one's (a refusal among them is noted on stderr)."""
        if self.stopped():
            raise ForkServerError("the bridge forkserver is stopped (SIGSTOP): it is replaced, not waited for")
        with self._lock:
            rid = self._send(message)
            deadline = time.monotonic() + (START_TIMEOUT_S if not self.ready else 0) + timeout_s
            while True:
                reply = self._receive(max(0.0, deadline - time.monotonic()))
                if reply.get("id") == rid:
                    return reply
                if reply and not reply.get("ok", True):
                    sys.stderr.write(f"harnesscheck: the bridge forkserver refused a request: {reply.get('error')}\n")

    def post(self, message: dict) -> None:
        """Send one request without waiting for its reply (read by the next `request`)."""
        with self._lock:
            self._send(message)

    def register(self, spec_path: Path, content: bytes) -> None:
        self.post({"op": "register", "spec": str(spec_path), "content": content.decode("utf-8")})

    def bind(self, spec_path: Path, cli_pid: int, *, wait: bool = True) -> None:
        """Bind the spec to the CLI. `wait=False` (right after the spawn: the host must not stall
        there, it has the CLI's stdin to write) sends it only; a refusal then refuses the relay."""
        message = {"op": "bind", "spec": str(spec_path), "pid": int(cli_pid)}
        if not wait:
            self.post(message)
            return
        reply = self.request(message)
        if not reply.get("ok"):
            raise ForkServerError(f"the bridge forkserver refused the binding: {reply.get('error')}")

    def release(self, spec_path: Path) -> list[int]:
        """Kill and reap this spec's bridge children; forget the registration."""
        reply = self.request({"op": "release", "spec": str(spec_path)}, timeout_s=CONTROL_TIMEOUT_S + REAP_TIMEOUT_S)
        return list(reply.get("killed") or [])

    def children(self) -> dict[str, list[int]]:
        """{spec path: live child pids} (tests, diagnostics)."""
        return dict(self.request({"op": "children"}).get("children") or {})

    def environ_digest(self) -> str:
        """env_digest of the forkserver's os.environ (tests, diagnostics)."""
        return str(self.request({"op": "environ"}).get("env_sha256"))

    def dumpable(self) -> int | None:
        """The forkserver's PR_GET_DUMPABLE, as it reports it (tests, diagnostics): 0."""
        return self.request({"op": "environ"}).get("dumpable")

    def spare(self) -> int | None:
        """The pid of the child forked ahead for the next relay, if one waits (tests,
        diagnostics). One still rehearsing is waited for (bounded): then it only waits."""
        return self.request({"op": "children"}).get("spare")

    def running(self) -> bool:
        """Ours (not a forked copy's inherited handle) and still running."""
        return os.getpid() == self.owner_pid and self.proc.poll() is None

    def alive(self) -> bool:
        """Running, not stopped, and reachable: its socket (and the compiled relay beside it)
        are still there (a temp cleaner may remove them)."""
        return self.running() and not self.stopped() and os.path.exists(self.socket_path) and os.path.exists(self.relay_script)

    def stopped(self) -> bool:
        """Stopped or traced (state T/t: a same-uid process sent SIGSTOP): it serves nobody
        until continued, so it is replaced, never waited for."""
        try:
            with open(f"/proc/{self.pid}/stat", "rb") as fh:
                data = fh.read()
        except OSError:
            return False
        return data[data.rfind(b")") + 2 :][:1] in (b"T", b"t")

    def kill(self) -> None:
        """SIGKILL it (a stopped one cannot end by itself); its children die with it."""
        import subprocess

        if os.getpid() == self.owner_pid:
            try:
                self.proc.kill()
                self.proc.wait(timeout=REAP_TIMEOUT_S)  # reaped: then closed (its directory goes) as a dead one is
            except (OSError, subprocess.TimeoutExpired):
                pass

    def relay_argv(self, spec_path: Path, content: bytes) -> list[str]:
        """The relay command; its fallback (the full stdio bridge) is pinned to the sha256 of
        `content`, the exact bytes registered, so it refuses a spec rewritten since."""
        from harnesscheck.bridge.spec import _interpreter, bridge_argv, spec_sha256

        spec = str(Path(spec_path).absolute())
        fallback = bridge_argv(Path(spec), spec_sha256=spec_sha256(content))
        return [_interpreter(), "-I", "-S", self.relay_script, self.socket_path, spec, "--", *fallback]

    def close(self) -> None:
        """End the forkserver (it kills its children) and remove its directory."""
        if os.getpid() == self.owner_pid:
            _stop(self._control, self.proc, self.dir)
        else:
            self._forget_after_fork()

    def _forget_after_fork(self) -> None:
        """In a forked copy of the host: drop our copy of the control end, so the real host's
        death still reads as EOF in the forkserver."""
        try:
            self._control.close()
        except OSError:
            pass


_lock = threading.Lock()
_server: ForkServer | None = None
_failed: str | None = None
_registered: dict[str, "ForkServer"] = {}  # spec path -> the forkserver it is registered with


def _after_fork_in_child() -> None:
    global _server, _lock, _failed
    for server in {id(s): s for s in [*_registered.values(), *([_server] if _server else [])]}.values():
        server._forget_after_fork()
    _server = None
    _failed = None
    _registered.clear()
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


_template: str | None = None  # socket path of the template this host's forkserver is forked by


def use_template(socket_path: str | None) -> None:
    """From now on this host's forkserver is forked by the template listening at
    `socket_path` (see start_template), not started fresh; None: start its own again."""
    global _template
    _template = socket_path


class Template:
    """The starter's handle on a forkserver template (start_template)."""

    def __init__(self, proc: Any, control: socket.socket, directory: Path):
        self.proc = proc
        self._control = control
        self.dir = directory
        self.socket_path = str(directory / TEMPLATE_SOCKET_NAME)

    def close(self) -> None:
        """End the template (EOF on its control channel) and remove its directory. The
        forkservers it forked are their hosts': they end with them."""
        _stop(self._control, self.proc, self.dir)


def start_template() -> Template | None:
    """Start a forkserver template (not waiting for its imports: hosts that ask early wait in
    its socket's backlog). None when forkservers cannot run here or it could not start."""
    if not enabled() or not hasattr(os, "pidfd_open"):
        return None
    directory = _private_dir(TEMPLATE_SOCKET_NAME)
    try:
        # Bound and listening here, so a host may ask at once: it waits in the backlog until
        # the template's imports are done.
        listener = _listening(str(directory / TEMPLATE_SOCKET_NAME))
        try:
            host_end, proc = _launch(_child_env(), directory, "template.log", listener=listener, template=True)
        finally:
            listener.close()
    except OSError as exc:
        shutil.rmtree(directory, ignore_errors=True)
        sys.stderr.write(f"harnesscheck: bridge forkserver template not started: {exc}\n")
        return None
    return Template(proc, host_end, directory)


def enabled() -> bool:
    if not sys.platform.startswith("linux") or not hasattr(socket, "SOCK_SEQPACKET"):
        return False
    return os.environ.get(DISABLE_VAR, "1").strip().lower() not in ("0", "false", "no", "off")


def get_forkserver() -> ForkServer | None:
    """This host's forkserver, started on first use (None when it cannot run here).

    One that died is replaced; one that runs but lost its socket is replaced too, and kept
    (retired) until the sessions registered with it are released, so their bridges live on."""
    global _server, _failed
    if not enabled():
        return None
    with _lock:
        if _server is not None and not _server.alive():
            old, _server = _server, None
            if old.running() and old.stopped():
                old.kill()  # a stopped forkserver would stall every session registered with it
            code = old.proc.poll()
            if not old.ready and code is not None and code > 0:  # it said it cannot start
                _failed = f"the bridge forkserver ended at its start (exit {code}); see {old.dir}/forkserver.log"
            if old.running() and old in _registered.values():
                pass  # retired: closed by the last release_session of its sessions
            elif os.getpid() == old.owner_pid:
                old.close()
        if _server is None:
            if _failed is not None:
                return None
            try:
                _server = ForkServer()
            except ForkServerError as exc:
                _failed = str(exc)
                sys.stderr.write(f"harnesscheck: bridge forkserver unavailable, using the stdio bridge: {exc}\n")
                return None
        return _server


def relay_command(spec_path: Path) -> tuple[list[str], dict[str, str]] | None:
    """Register `spec_path` (as written now) with this host's forkserver and return the relay
    (argv, env) for the CLI's MCP config; None: use the full stdio bridge."""
    from harnesscheck.bridge.spec import bridge_env

    server = get_forkserver()
    if server is None:
        return None
    spec_path = Path(spec_path).absolute()
    try:
        content = spec_path.read_bytes()
        server.register(spec_path, content)
    except (OSError, UnicodeDecodeError, ForkServerError) as exc:
        sys.stderr.write(f"harnesscheck: bridge forkserver registration failed, using the stdio bridge: {exc}\n")
        return None
    with _lock:
        _registered[str(spec_path)] = server
    return server.relay_argv(spec_path, content), bridge_env()


def relay_binds(spec_path: Path | None) -> list[str] | None:
    """What a sandboxed CLI needs of this host's forkserver to reach `spec_path`'s bridge:
    the listening socket and the compiled relay (doc/SPEC-sandbox.md); the relay's interpreter
    is the host's (sandbox.python_paths). None when the spec is not registered with a running
    forkserver: the full stdio bridge would then run inside the sandbox, where the worktree
    is not mounted."""
    if spec_path is None:
        return None
    key = str(Path(spec_path).absolute())
    with _lock:
        server = _registered.get(key)
    if server is None or not server.running():
        return None
    return [server.socket_path, server.relay_script]


def bind_session(spec_path: Path | None, cli_pid: int) -> bool:
    """Right after the CLI started: only the CLI and the processes it started may have this
    spec's bridge; relays that came first were held until now. False
    (and a note on stderr) when it could not be bound: the relay is then refused, so the
    session fails loudly instead of running on with a bridge anyone could claim. A spec not
    registered here (the stdio bridge) needs no binding: True."""
    if spec_path is None:
        return True
    key = str(Path(spec_path).absolute())
    with _lock:
        server = _registered.get(key)
    if server is None:
        return True
    try:
        server.bind(Path(key), cli_pid, wait=False)
    except ForkServerError as exc:
        sys.stderr.write(f"harnesscheck: bridge forkserver binding failed: {exc}\n")
        return False
    return True


def release_session(spec_path: Path | None) -> list[int]:
    """After a session (any ending): kill and reap its bridge children, unregister its spec.
    Returns the pids killed. A spec never registered here is a no-op."""
    if spec_path is None:
        return []
    key = str(Path(spec_path).absolute())
    with _lock:
        server = _registered.pop(key, None)
        retired_and_done = server is not None and server is not _server and server not in _registered.values()
    if server is None or not server.running():
        return []  # never registered here, or its forkserver died (children die with it)
    try:
        return server.release(Path(key))
    except ForkServerError as exc:
        sys.stderr.write(f"harnesscheck: bridge forkserver release failed: {exc}\n")
        return []
    finally:
        if retired_and_done:
            server.close()


def shutdown() -> None:
    """Stop this host's forkserver(s) now (they also stop when the host exits)."""
    global _server
    with _lock:
        servers = {id(s): s for s in [*_registered.values(), *([_server] if _server else [])]}
        for server in servers.values():
            if os.getpid() == server.owner_pid:
                server.close()
        _server = None
        _registered.clear()


# =======================================================================================
# Helpers the host and the forkserver process share (forkserver_child.py, forkserver_process.py)


def _close_fds(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _peer_cred(conn: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the connected relay (SO_PEERCRED)."""
    import struct

    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", raw)
    return pid, uid
