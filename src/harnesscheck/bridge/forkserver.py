"""Bridge forkserver: one pre-imported bridge process per host that forks a stdio bridge per
session, so a CLI's MCP server answers in tens of milliseconds instead of ~0.7 s of imports.

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
  channel before its socket, so registration and binding come before the relay they admit.
- `release_session(spec_path)`: kill (after a 0.25 s grace, SIGKILL to the whole process
  group) and reap every bridge child of that spec, synchronously, and forget the
  registration. Returns the pids that had to be killed. Idempotent.

The forkserver process:
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

import argparse
import gc
import hmac
import json
import os
import selectors
import shutil
import signal
import socket
import stat
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
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
        py_compile.compile(str(source), cfile=str(target), doraise=True, optimize=0,
                           invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
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


def _launch(env: dict[str, str], directory: Path, log_name: str, *,
            listener: socket.socket | None = None, template: bool = False) -> tuple[socket.socket, Any]:
    """`python -m harnesscheck.bridge.forkserver` as this process's child, in its own session,
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
                [exe, *flags, "-m", "harnesscheck.bridge.forkserver", *listen,
                 "--control-fd", str(child_end.fileno()), "--dir", str(directory)],
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
        return (self.running() and not self.stopped() and os.path.exists(self.socket_path)
                and os.path.exists(self.relay_script))

    def stopped(self) -> bool:
        """Stopped or traced (state T/t: a same-uid process sent SIGSTOP): it serves nobody
        until continued, so it is replaced, never waited for."""
        try:
            with open(f"/proc/{self.pid}/stat", "rb") as fh:
                data = fh.read()
        except OSError:
            return False
        return data[data.rfind(b")") + 2:][:1] in (b"T", b"t")

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
# The forkserver process


_UNBOUND = object()  # _check: registered, but the host has not bound it to a session yet


def _descends_from(pid: int, ancestor: int, max_depth: int = 64) -> bool:
    """`pid` is `ancestor` or one of its descendants (by the parent chain in /proc)."""
    for _ in range(max_depth):
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                pid = int(fh.read().rsplit(b")", 1)[1].split()[1])  # the comm may hold ")"
        except (OSError, ValueError, IndexError):
            return False
    return False


def _request_path(msg: bytes) -> str:
    return msg[5:].decode("utf-8", "surrogateescape")


def _dup_all(fds: list[int]) -> list[int]:
    """Copies of `fds` (close-on-exec), or [] when any copy fails (EMFILE): none leak."""
    copies: list[int] = []
    try:
        for fd in fds:
            copies.append(os.dup(fd))
    except OSError:
        _close_fds(copies)
        return []
    return copies


def _hung_up(conn: socket.socket) -> bool:
    """The peer of `conn` has closed its end (never blocks)."""
    import select

    poller = select.poll()
    poller.register(conn, select.POLLIN | getattr(select, "POLLRDHUP", 0))
    return any(ev & (select.POLLHUP | getattr(select, "POLLRDHUP", 0) | select.POLLERR) for _, ev in poller.poll(0))


def _close_fds(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


@dataclass
class _Registration:
    content: bytes
    spec: object  # BridgeSpec
    bound_pid: int | None = None  # the CLI, from the host's `bind`: relays must descend from it
    #: The CLI itself, held from the binding on: once it exited its pid may be reused (the host
    #: reaps it before it releases the session), and a process with that pid is not the CLI.
    bound: "_Peer | None" = None
    children: set[int] = field(default_factory=set)

    def cli_running(self) -> bool:
        return self.bound is None or self.bound.running()

    def close(self) -> None:
        if self.bound is not None:
            self.bound.close()


@dataclass
class _Awaiting:
    """A relay whose spec is registered but not yet bound to a session: held, not served."""

    conn: socket.socket
    msg: bytes
    fds: list[int]
    deadline: float
    peer: _Peer


@dataclass
class _Child:
    spec_path: str
    conn: socket.socket
    #: Our end of the hand-off pair of a child that was a spare, kept until it ends: closing
    #: it while the spare's b"ready" lies unread in it would reset the spare's end (ECONNRESET
    #: on its read of the session it was just sent).
    handoff: socket.socket | None = None
    #: Copies of the relay's stdio fds, kept until the spare says b"taken": a spare that dies
    #: before (killed mid-hand-off, its threads still exiting, so the send succeeded) leaves
    #: the session to a child forked afresh instead of losing it.
    fds: list[int] = field(default_factory=list)
    taken: bool = True
    hung_up: bool = False  # the spare's end of the hand-off pair is closed
    reg: "_Registration | None" = None  # the registration it was handed under (served again only under it)

    def forgo(self) -> None:
        """Never serve this session again (the forkserver is killing it): close our copies."""
        self.taken = True
        _close_fds(self.fds)
        self.fds = []

    def took(self) -> bool:
        """Whether the spare has said b"taken" (reads what is waiting; never blocks). Then
        the relay's fds are its own and our copies are closed."""
        if not self.taken and self.handoff is not None:
            while True:
                try:
                    msg = self.handoff.recv(16, socket.MSG_DONTWAIT)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    self.hung_up = True
                    break
                if msg == b"taken":
                    self.taken = True
                    break
                if not msg:
                    self.hung_up = True
                    break
        if self.taken and self.fds:
            _close_fds(self.fds)
            self.fds = []
        return self.taken

    def close(self) -> None:
        self.conn.close()
        if self.handoff is not None:
            self.handoff.close()
        _close_fds(self.fds)
        self.fds = []


@dataclass
class _Spare:
    """A child forked ahead of time, waiting on `handoff` for its session. It sends b"ready"
    there once its rehearsal is over and it only waits; a session handed over before that is
    served right after the rehearsal."""

    pid: int
    handoff: socket.socket
    ready: bool = False

    def waiting(self, bound_s: float) -> bool:
        """Wait (at most `bound_s`) until the spare has rehearsed and waits (tests and
        diagnostics only: this blocks the forkserver's loop). False: it did not say so."""
        if not self.ready:
            try:
                self.handoff.settimeout(bound_s)
                self.ready = self.handoff.recv(16) == b"ready"
            except OSError:
                pass
            finally:
                try:
                    self.handoff.settimeout(None)
                except OSError:
                    pass
        return self.ready


def _preimport() -> None:
    """Everything a bridge child needs, imported once here instead of in every child
    (`ctypes`, for the parent-death prctl, alone cost a child ~2 ms)."""
    import ctypes  # noqa: F401
    import select  # noqa: F401
    import stat  # noqa: F401

    import anyio
    import anyio._backends._asyncio  # noqa: F401 - anyio.run picks it at run time
    import mcp_types  # noqa: F401
    from mcp.server.lowlevel import Server  # noqa: F401
    from mcp.shared._context_streams import create_context_streams  # noqa: F401 - serve_stdio's streams
    from mcp.shared.message import SessionMessage  # noqa: F401

    import harnesscheck.bridge.server as server
    import harnesscheck.bridge.spec  # noqa: F401
    import harnesscheck.choke.dispatch  # noqa: F401
    import harnesscheck.choke.trace  # noqa: F401
    import harnesscheck.contain.envpolicy  # noqa: F401

    server._libc()  # the dlopen of the parent-death prctl, once
    del anyio


def _rehearsal_root(directory: Path) -> Path:
    """The scope root of the rehearsal sessions: a directory in the forkserver's private
    directory (0700) holding one small file, nothing else."""
    from harnesscheck.bridge.server import REHEARSAL_FILE

    root = (directory / "rehearsal").resolve()
    root.mkdir(mode=0o700)
    (root / REHEARSAL_FILE).write_text("rehearsal\n")
    return root


def _warm_up(root: Path) -> None:
    """One whole session served here, before any fork (`server.rehearse`). What the SDK,
    pydantic, anyio and asyncio build on first use (type adapters, ABC caches, lazy imports)
    is then built once per host, not once per child. Its one dispatch thread is told to end
    (the forkserver must be single-threaded before it forks)."""
    from harnesscheck.bridge import server

    try:
        server.rehearse(root)
    finally:
        server._CALL_THREADS.close()  # its dispatch thread ends instead of idling


def _thread_count() -> int:
    """Threads of this process as the kernel sees them (also threads `threading` does not list)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _wait_single_threaded(bound_s: float) -> bool:
    """Wait (at most `bound_s`) for threads that are ending, e.g. the warm-up's dispatch thread."""
    deadline = time.monotonic() + bound_s
    while _thread_count() != 1:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.001)
    return True


def _peer_cred(conn: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the connected relay (SO_PEERCRED)."""
    import struct

    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", raw)
    return pid, uid


#: SO_PEERPIDFD (Linux 6.5+): a pidfd for the process that connect()ed. Its value is 77 on the
#: architectures using the generic socket.h; elsewhere only Python's own constant is trusted.
_SO_PEERPIDFD = getattr(socket, "SO_PEERPIDFD", None) or (
    77 if os.uname().machine in ("x86_64", "i686", "i386", "aarch64", "armv7l", "riscv64", "s390x", "ppc64le") else None)


def _start_time(pid: int) -> bytes | None:
    """The process's start time (field 22 of /proc/<pid>/stat), None if there is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


@dataclass
class _Peer:
    """The relay process at the other end of a connection. SO_PEERCRED's pid is a number taken
    at connect(): the relay may have exited since and the number been given to another process
    (the CLI itself, say, spawned after a held relay connected). So the check also holds a
    pidfd: SO_PEERPIDFD (the connecting process itself, never a reuse of its pid), else
    `pidfd_open(pid)` as soon as the request is read (a pid reused before that is not seen),
    else the start time then; a relay is served only while that process still runs."""

    pid: int
    uid: int
    pidfd: int = -1
    start: bytes | None = None

    @classmethod
    def of(cls, conn: socket.socket) -> "_Peer":
        pid, uid = _peer_cred(conn)
        peer = cls(pid, uid)
        if _SO_PEERPIDFD is not None:
            try:
                peer.pidfd = conn.getsockopt(socket.SOL_SOCKET, _SO_PEERPIDFD)
            except OSError:  # ENOPROTOOPT: older kernel
                peer.pidfd = -1
        return peer._hold()

    @classmethod
    def of_pid(cls, pid: int) -> "_Peer":
        """The process that has `pid` now (the CLI, at its binding)."""
        return cls(pid, -1)._hold()

    def _hold(self) -> "_Peer":
        peer, pid = self, self.pid
        if peer.pidfd < 0 and pid > 0 and hasattr(os, "pidfd_open"):
            try:
                peer.pidfd = os.pidfd_open(pid)
            except OSError:  # ESRCH (gone: refused below), ENOSYS
                peer.pidfd = -1
        if peer.pidfd < 0:
            peer.start = _start_time(pid) if pid > 0 else None
        return peer

    def running(self) -> bool:
        """That process still runs (with a pidfd a zombie counts as ended)."""
        if self.pidfd >= 0:
            import select

            poller = select.poll()
            poller.register(self.pidfd, select.POLLIN)
            return not poller.poll(0)  # a pidfd polls readable once its process exited
        return self.start is not None and _start_time(self.pid) == self.start

    def close(self) -> None:
        if self.pidfd >= 0:
            try:
                os.close(self.pidfd)
            except OSError:
                pass
            self.pidfd = -1


def _read_regular(path: str, limit: int) -> bytes | None:
    """The file's bytes if it is a regular file no bigger than `limit` (never blocks on a
    FIFO, never follows a final symlink); None otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, limit + 1 - total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _close_fds_except(keep: tuple[int, ...]) -> None:
    """Close every fd above 2 but `keep`."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _await_session(handoff: socket.socket, known: dict[bytes, object] | None = None):
    """A spare child's wait for its session: (relay connection, stdio fds, spec). EOF (the
    forkserver ended or dropped this spare) or anything malformed ends the process.
    `known`: registered spec bytes -> the spec the forkserver validated from exactly those
    bytes (its registrations when this spare was forked), used instead of validating again."""
    from harnesscheck.bridge.spec import BridgeSpec

    while True:
        try:
            content, fds, _flags, _addr = socket.recv_fds(handoff, MAX_MESSAGE, 4, socket.MSG_CMSG_CLOEXEC)
            break
        except InterruptedError:
            continue
        except OSError:  # the forkserver dropped this spare (reset): as EOF
            os._exit(0)
    if len(fds) in (3, 4) and content:
        try:
            handoff.send(b"taken")  # from now on a death of ours is the session's end
        except OSError:
            pass
    handoff.close()
    if len(fds) not in (3, 4) or not content:
        os._exit(0)
    spec = (known or {}).get(content)
    if spec is None:
        spec = BridgeSpec.model_validate_json(content)  # the registered bytes, never a re-read
    return socket.socket(fileno=fds[0]), fds[1:], spec


def _report_exit(conn: socket.socket, code: int) -> None:
    """A child's last act: close every fd but the relay connection (so the CLI's pipes end
    now), then tell the relay its exit code itself. The relay exits at once instead of after
    this process's teardown and the forkserver's reap (~2-3 ms of a session); the
    forkserver's own status after the reap then finds the relay gone, which is fine."""
    try:
        keep = conn.fileno()
        os.closerange(0, keep)
        os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))
        conn.send(b"exit %d" % (code & 0xFF))
        # Then wait (bounded) until the relay has it and is gone: this process's teardown
        # (unmapping a forkserver-sized address space, ~1 ms) must not hold the CPU the
        # woken relay was queued on. A relay already gone reads as a hang-up at once. Not
        # when tool calls outlived the session: their threads run on, and the fds closed
        # above could be reused under them (a trace line landing in a file a call opened).
        from harnesscheck.bridge.server import calls_outlived_session

        if calls_outlived_session():
            return
        import select

        poller = select.poll()
        poller.register(keep, select.POLLRDHUP | select.POLLHUP)
        poller.poll(RELAY_EXIT_WAIT_S * 1000)
    except (OSError, ValueError):
        pass


def _status_text(status: int) -> bytes:
    if os.WIFSIGNALED(status):
        return b"signal %d" % os.WTERMSIG(status)
    return b"exit %d" % os.waitstatus_to_exitcode(status)


def _dumpable() -> int | None:
    """PR_GET_DUMPABLE of this process (diagnostics: the `environ` op)."""
    try:
        import ctypes

        return int(ctypes.CDLL(None, use_errno=True).prctl(3, 0, 0, 0, 0))
    except (ImportError, OSError, AttributeError):
        return None


def _harden_self(control: socket.socket) -> None:
    """A serving forkserver (fresh or forked by a template): non-dumpable (a same-uid process
    cannot read its memory, ptrace it or take its listening socket with pidfd_getfd; the
    bridge children it forks stay so), and woken by the kernel (SIGCONT) when its control
    channel becomes readable or hangs up: stopped by a same-uid process, it still sees its
    host's end close and ends with its bridges (the guard's wake_on_hangup, _procguard.py)."""
    try:
        import ctypes
        import fcntl

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
        fd = control.fileno()
        fcntl.fcntl(fd, fcntl.F_SETOWN, os.getpid())
        fcntl.fcntl(fd, getattr(fcntl, "F_SETSIG", 10), signal.SIGCONT)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_ASYNC)
    except (ImportError, OSError, AttributeError):
        pass


class _Server:
    """The forkserver's single-threaded loop: control requests, relay connections, reaping."""

    def __init__(self, control: socket.socket, directory: Path, rehearsal_root: Path | None = None,
                 listener: socket.socket | None = None):
        self.control = control
        self.dir = directory
        self.rehearsal_root = rehearsal_root  # a spare rehearses a session there while it waits
        self.registrations: dict[str, _Registration] = {}
        self.children: dict[int, _Child] = {}
        #: Accepted connections whose request has not arrived: fd -> (conn, deadline), oldest first.
        self.pending: dict[int, tuple[socket.socket, float]] = {}
        #: Relays waiting for their spec's `bind`: fd -> _Awaiting, oldest first (bounded like pending).
        self.awaiting: dict[int, _Awaiting] = {}
        self.accept_paused_until: float | None = None
        self.stopping = False
        self.spare: _Spare | None = None
        #: When to fork the next spare (None: not wanted now). See SPARE_DELAY_S.
        self.spare_due: float | None = None
        # The host binds it before starting us (relays wait in its backlog meanwhile); a
        # forkserver forked by the template binds its own.
        self.listener = listener if listener is not None else _listening(str(directory / SOCKET_NAME))
        self.listener.setblocking(False)
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        _harden_self(self.control)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.control, selectors.EVENT_READ, "control")
        self.selector.register(self.listener, selectors.EVENT_READ, "listener")
        self.selector.register(self.wake_r, selectors.EVENT_READ, "wake")

    # -- loop -----------------------------------------------------------------------------

    def run(self) -> None:
        try:
            self.control.sendall(json.dumps({"ready": True, "pid": os.getpid()}).encode())
        except OSError as exc:  # the host is gone before it heard `ready` (EPIPE): end as on its EOF
            _say(f"bridge forkserver: the host is gone: {type(exc).__name__}: {exc}\n")
            raise SystemExit(1) from None
        self._want_spare()  # after this round: relays already waiting are served first
        while True:
            events = self.selector.select(self._select_timeout())
            # The control channel first, all of it: a relay's registration and binding were
            # sent before its CLI started, so they are there by the time it connects.
            events.sort(key=lambda event: event[0].data != "control")
            for key, _ in events:
                if key.data == "control":
                    if not self._drain_control():
                        self._shutdown()
                        return
                elif key.data == "listener":
                    self._on_connect()
                elif key.data == "pending":
                    self._on_pending(key.fileobj)
                elif isinstance(key.data, tuple):  # ("handoff", pid): a spare's b"taken" or its end
                    self._on_handoff(key.data[1])
                else:
                    try:
                        while os.read(self.wake_r, 512):
                            pass
                    except BlockingIOError:
                        pass
            self._expire_pending()
            self._expire_awaiting()
            self._resume_accepting()
            self._reap(block=False)
            if self.spare_due is not None and time.monotonic() >= self.spare_due:
                self._fork_spare()

    def _want_spare(self, delay_s: float = 0.0) -> None:
        """Have the next spare forked `delay_s` from now (or earlier, if already due so)."""
        due = time.monotonic() + delay_s
        if self.spare is None and (self.spare_due is None or due < self.spare_due):
            self.spare_due = due

    def _select_timeout(self) -> float | None:
        """Until the next pending deadline, the end of an accept pause or the next spare's
        fork; None: no timer."""
        times = [deadline for _, deadline in self.pending.values()][:1]  # oldest first
        times += [waiting.deadline for waiting in self.awaiting.values()][:1]
        if self.accept_paused_until is not None:
            times.append(self.accept_paused_until)
        if self.spare_due is not None:
            times.append(self.spare_due)
        return max(0.0, min(times) - time.monotonic()) if times else None

    def _shutdown(self) -> None:
        """The host is gone (or asked): every child dies, the socket goes."""
        self.stopping = True  # no session is served again from here on
        self._drop_spare()
        for pid in list(self.children):
            self.children[pid].forgo()
            self._kill(pid)
        self._reap_all(list(self.children))
        for fd in list(self.pending):
            self._drop_pending(fd)
        for fd in list(self.awaiting):
            self._refuse_awaiting(fd, "not-registered: the forkserver is stopping")
        self.listener.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- control ----------------------------------------------------------------------------

    def _drain_control(self) -> bool:
        """Every request waiting on the control channel; False: the host is gone."""
        import select

        while self._on_control():
            if not select.select([self.control], [], [], 0)[0]:
                return True
        return False

    def _on_control(self) -> bool:
        try:
            raw = self.control.recv(MAX_MESSAGE)
        except OSError:
            return False
        if not raw:
            return False
        msg: dict = {}
        try:
            msg = json.loads(raw)
            reply = self._handle(msg)
        except Exception as exc:  # noqa: BLE001 - a bad request must not end the server
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        reply["id"] = msg.get("id") if isinstance(msg, dict) else None
        try:
            self.control.sendall(json.dumps(reply).encode())
        except OSError:
            return False
        if isinstance(msg, dict) and msg.get("op") in ("register", "release"):
            self._want_spare()  # the host is between sessions: fork it now (after the reply)
        return True

    def _handle(self, msg: dict) -> dict:
        from harnesscheck.bridge.spec import BridgeSpec

        op = msg.get("op")
        if op == "register":
            content = msg["content"].encode("utf-8")
            spec = BridgeSpec.model_validate_json(content)
            old = self.registrations.get(msg["spec"])
            if old is not None and old.children:
                return {"ok": False, "error": "spec path already registered with live children"}
            if old is not None:
                old.close()
            self.registrations[msg["spec"]] = _Registration(content=content, spec=spec)
            return {"ok": True}
        if op == "bind":
            reg = self.registrations.get(msg["spec"])
            if reg is None:
                return {"ok": False, "error": "not-registered"}
            cli_pid = int(msg["pid"])
            if reg.bound_pid not in (None, cli_pid):
                return {"ok": False, "error": "already bound to another process"}
            if reg.bound is None:
                reg.bound = _Peer.of_pid(cli_pid)
            reg.bound_pid = cli_pid
            for fd in [fd for fd, w in self.awaiting.items() if _request_path(w.msg) == msg["spec"]]:
                waiting = self.awaiting.pop(fd)
                self._answer(waiting.conn, waiting.msg, waiting.fds, waiting.peer)
            return {"ok": True}
        if op == "release":
            for fd in [fd for fd, w in self.awaiting.items() if _request_path(w.msg) == msg["spec"]]:
                self._refuse_awaiting(fd, "not-registered: the session ended before it was bound")
            reg = self.registrations.pop(msg["spec"], None)
            if reg is not None:
                reg.close()
            pids = sorted(reg.children) if reg is not None else []
            self._reap_all(pids, RELEASE_GRACE_S)  # a child that lost its stdin/relay ends on its own
            left = [pid for pid in pids if pid in self.children]
            for pid in left:
                self.children[pid].forgo()
                self._kill(pid)
            self._reap_all(left)
            return {"ok": True, "killed": left}
        if op == "children":
            for child in self.children.values():
                child.took()  # a b"taken" already sent is read first: the answer shows the settled fds
            if self.spare is None:
                self._fork_spare()  # asked about it: the one the next relay would get
            spare = self.spare
            return {"ok": True, "children": {p: sorted(r.children) for p, r in self.registrations.items()},
                    "spare": spare.pid if spare is not None and spare.waiting(WARM_UP_TIMEOUT_S) else None}
        if op == "environ":
            return {"ok": True, "env_sha256": env_digest(os.environ), "dumpable": _dumpable()}
        return {"ok": False, "error": f"unknown op {op!r}"}

    # -- relays -----------------------------------------------------------------------------

    def _on_connect(self) -> None:
        """Accept what is waiting, never blocking: a relay's request is usually there already
        and is served at once; otherwise the connection waits in the selector (bounded)."""
        for _ in range(64):
            try:
                conn, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:  # EMFILE, ENFILE, ENOBUFS...: keep the loop alive
                sys.stderr.write(f"bridge forkserver: accept failed ({exc.strerror or exc}); pausing accepts\n")
                sys.stderr.flush()
                if self.pending:
                    self._drop_pending(next(iter(self.pending)))  # frees an fd
                self._pause_accepting()
                return
            conn.setblocking(False)
            if not self._serve(conn):
                self.pending[conn.fileno()] = (conn, time.monotonic() + PENDING_TIMEOUT_S)
                self.selector.register(conn, selectors.EVENT_READ, "pending")
                while len(self.pending) > MAX_PENDING:
                    self._drop_pending(next(iter(self.pending)))

    def _on_pending(self, conn: socket.socket) -> None:
        fd = conn.fileno()
        entry = self.pending.pop(fd, None)
        if entry is None:
            return
        self.selector.unregister(conn)
        if not self._serve(conn):  # woken without a message: keep waiting, same deadline
            self.pending[fd] = entry
            self.selector.register(conn, selectors.EVENT_READ, "pending")

    def _drop_pending(self, fd: int) -> None:
        conn, _ = self.pending.pop(fd)
        try:
            self.selector.unregister(conn)
        except (KeyError, ValueError):
            pass
        try:
            conn.send(b"refused timeout: no request on this connection in time")
        except OSError:
            pass
        conn.close()

    def _expire_pending(self) -> None:
        now = time.monotonic()
        for fd, (_conn, deadline) in list(self.pending.items()):
            if deadline > now:
                break  # oldest first: the rest are later
            self._drop_pending(fd)

    def _pause_accepting(self) -> None:
        if self.accept_paused_until is None:
            self.selector.unregister(self.listener)
        self.accept_paused_until = time.monotonic() + ACCEPT_PAUSE_S

    def _resume_accepting(self) -> None:
        if self.accept_paused_until is not None and time.monotonic() >= self.accept_paused_until:
            self.accept_paused_until = None
            self.selector.register(self.listener, selectors.EVENT_READ, "listener")

    def _serve(self, conn: socket.socket) -> bool:
        """Read the relay's request without blocking and answer it (fork a child or refuse).
        False: nothing to read yet (the caller keeps the connection pending). True: handled;
        `conn` is now a child's, or closed."""
        fds: list[int] = []
        try:
            try:
                msg, fds, _flags, _addr = socket.recv_fds(conn, 65536, 3, socket.MSG_CMSG_CLOEXEC)
            except (BlockingIOError, InterruptedError):
                return False
            if not msg and not fds:
                conn.close()  # the peer closed without asking
                return True
            conn.setblocking(True)  # the status send to a child's relay (a few bytes) may wait
            fds, received = [], fds  # from here on _answer owns them (it closes them, or holds them)
            self._answer(conn, msg, received)
        except OSError:
            conn.close()
        except Exception as exc:  # noqa: BLE001 - one bad connection must not end the server
            sys.stderr.write(f"bridge forkserver: connection dropped: {type(exc).__name__}: {exc}\n")
            sys.stderr.flush()
            conn.close()
        finally:
            for fd in fds:
                try:
                    os.close(fd)
                except OSError:
                    pass
        return True

    def _answer(self, conn: socket.socket, msg: bytes, fds: list[int], peer: _Peer | None = None) -> None:
        """Fork this relay's child, refuse it, or hold it until its spec is bound. Takes
        ownership of `conn`, `fds` and `peer`: each is handed to a child, held, or closed."""
        hold = False
        try:
            if peer is None:
                peer = _Peer.of(conn)
            refusal = self._check(msg, fds, peer)
            if refusal is _UNBOUND:
                self.awaiting[conn.fileno()] = _Awaiting(conn, msg, fds, time.monotonic() + PENDING_TIMEOUT_S, peer)
                hold = True
                while len(self.awaiting) > MAX_PENDING:
                    self._refuse_awaiting(next(iter(self.awaiting)), "timeout: too many relays waiting for a binding")
            elif refusal is not None:
                peer.close()  # before the answer: once a relay reads it, nothing of it is held here
                _close_fds(fds)
                fds.clear()
                conn.send(b"refused " + refusal.encode())
                conn.close()
            else:
                self._fork(conn, _request_path(msg), fds)
        except OSError:
            conn.close()
        finally:
            if not hold:
                _close_fds(fds)
                if peer is not None:
                    peer.close()

    def _refuse_awaiting(self, fd: int, reason: str) -> None:
        waiting = self.awaiting.pop(fd)
        _close_fds(waiting.fds)  # before the answer: once a relay reads it, nothing of it is held here
        waiting.peer.close()
        try:
            waiting.conn.send(b"refused " + reason.encode())
        except OSError:
            pass
        waiting.conn.close()

    def _expire_awaiting(self) -> None:
        now = time.monotonic()
        for fd, waiting in list(self.awaiting.items()):
            if waiting.deadline > now:
                break  # oldest first
            self._refuse_awaiting(fd, "not-bound: the host never bound this spec to the CLI's session")

    def _check(self, msg: bytes, fds: list[int], peer: _Peer) -> str | object | None:
        """None when this relay may have a bridge; _UNBOUND when it must wait for its spec's
        binding; else the reason (no secret in it)."""
        if not msg.startswith(b"spec\0") or len(fds) not in (2, 3):
            return "bad-request: expected the spec path and fds 0, 1 (and 2)"
        uid = peer.uid
        if uid != os.getuid():
            return "wrong-user"
        path = msg[5:].decode("utf-8", "surrogateescape")
        reg = self.registrations.get(path)
        if reg is None:
            return "not-registered: no live session registered this spec"
        current = _read_regular(path, len(reg.content))
        if current is None or not hmac.compare_digest(current, reg.content):
            return "spec-changed: the spec file differs from what the host registered"
        if reg.bound_pid is None:
            return _UNBOUND
        # The relay and the CLI must both run before and after the walk: then neither pid was
        # given to another process while it was looked at.
        if not peer.running():
            return "wrong-process: the relay that connected has exited"
        if not reg.cli_running():
            return "wrong-process: the CLI this spec is bound to has exited"
        if not _descends_from(peer.pid, reg.bound_pid):
            return "wrong-process: this spec is served to its CLI and the processes it started only"
        if not (peer.running() and reg.cli_running()):
            return "wrong-process: the relay or the CLI exited while it was checked"
        return None

    def _fork(self, conn: socket.socket, path: str, fds: list[int]) -> None:
        """Start this relay's bridge child: hand the session to the spare child when there is
        one (no fork on the relay's path), else fork one now; then fork the next spare."""
        reg = self.registrations[path]
        copies = _dup_all(fds) if self.spare is not None else []  # before the hand-off: see _Child.fds
        spare = self._hand_to_spare(conn, fds, reg.content)
        if spare is None:
            _close_fds(copies)
            copies = []
        pid = spare.pid if spare is not None else None
        if pid is None:
            if _thread_count() != 1:  # never fork a multi-threaded process
                conn.send(b"refused internal: the forkserver is not single-threaded")
                conn.close()
                return
            pid = os.fork()
            if pid == 0:
                self._child(conn, None, fds, reg.spec)  # never returns
            try:
                os.setpgid(pid, pid)  # also done by the child: whichever runs first wins
            except OSError:
                pass
        reg.children.add(pid)
        if spare is None:
            self.spare_due = None  # forked on the spot: the next spare SPARE_DELAY_S from now
        if spare is not None and copies:
            self.children[pid] = _Child(path, conn, spare.handoff, fds=copies, taken=False, reg=reg)
            self.selector.register(spare.handoff, selectors.EVENT_READ, ("handoff", pid))  # for its b"taken"
        else:  # no copies (EMFILE): as before, a spare dying unconfirmed ends the session loudly
            self.children[pid] = _Child(path, conn, spare.handoff if spare is not None else None)
        self._want_spare(SPARE_DELAY_S)

    # -- spare child ------------------------------------------------------------------------

    def _fork_spare(self) -> None:
        """Fork the child for the next relay ahead of time. It closes everything it inherited
        but its end of a fresh socketpair and waits there for its session: the registered
        spec bytes, the relay connection and the relay's stdio fds. A fork of this process
        (mcp, pydantic imported) costs ~3 ms; so it is paid between sessions, not in one."""
        self.spare_due = None
        if self.spare is not None or _thread_count() != 1:
            return
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            pid = os.fork()
        except OSError as exc:
            ours.close()
            theirs.close()
            sys.stderr.write(f"bridge forkserver: cannot fork a spare child ({exc}); forking per relay\n")
            sys.stderr.flush()
            return
        if pid == 0:
            self._child(None, theirs, [], None)  # never returns
        theirs.close()
        try:
            os.setpgid(pid, pid)
        except OSError:
            pass
        self.spare = _Spare(pid, ours)

    def _hand_to_spare(self, conn: socket.socket, fds: list[int], content: bytes) -> _Spare | None:
        """Give this session to the spare child: the spare, or None (no spare, or it is gone)."""
        spare, self.spare = self.spare, None
        if spare is None:
            return None
        try:
            socket.send_fds(spare.handoff, [content], [conn.fileno(), *fds])
        except OSError:
            self._end_spare(spare)
            return None
        return spare

    def _drop_spare(self) -> None:
        spare, self.spare = self.spare, None
        if spare is not None:
            self._end_spare(spare)

    def _end_spare(self, spare: _Spare) -> None:
        """Kill and reap a spare that will not get a session."""
        self._kill(spare.pid)
        spare.handoff.close()
        try:
            os.waitpid(spare.pid, 0)
        except ChildProcessError:
            pass

    def _child(self, conn: socket.socket | None, handoff: socket.socket | None, fds: list[int], spec) -> None:
        """A bridge child, never returning: forked for `conn` (its relay's stdio `fds`, the
        registered `spec`), or a spare (`handoff`) that first waits for those."""
        code = 70
        try:
            os.setpgid(0, 0)
            signal.set_wakeup_fd(-1)
            for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
                signal.signal(sig, signal.SIG_DFL)
            signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as in any Python process
            self.selector.close()
            for other in self.children.values():
                other.close()
            for waiting, _ in self.pending.values():
                waiting.close()
            if self.spare is not None:
                self.spare.handoff.close()
            self.listener.close()
            self.control.close()
            os.close(self.wake_r)
            os.close(self.wake_w)
            from harnesscheck.bridge import server

            # `server._prepare()` in two halves: the parent and the environment now (a spare's
            # are the same when its session comes), the protocol fds once they are here.
            initial_ppid = os.getppid()
            server.scrub_environ()
            if handoff is not None:
                _close_fds_except((handoff.fileno(),))
                self._rehearse()
                try:
                    handoff.send(b"ready")
                except OSError:
                    pass  # the forkserver is gone: the wait below reads EOF and ends
                known = {reg.content: reg.spec for reg in self.registrations.values()}
                conn, fds, spec = _await_session(handoff, known)
            for target, fd in enumerate(fds):
                os.dup2(fd, target)  # inheritable, as a spawned bridge's stdio is
            if len(fds) == 2:
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, 2)
                os.close(null)
            keep = conn.fileno()
            _close_fds_except((keep,))
            fds.clear()
            sys.stderr = open(2, "w", closefd=False, errors="replace")  # noqa: SIM115
            sys.stdout = open(1, "w", closefd=False, errors="replace")  # noqa: SIM115
            proto = server.take_stdio()
            code = server.serve_spec(spec, proto_fds=proto, initial_ppid=initial_ppid, hangup_fd=keep, mode="forkserver")
        except BaseException as exc:  # noqa: BLE001 - report, never fall back into the loop
            _say(f"harnesscheck bridge (forkserver child): {type(exc).__name__}: {exc}\n")
        finally:
            _flush_stderr()
            if conn is not None:
                _report_exit(conn, code)
            os._exit(code)

    def _rehearse(self) -> None:
        """A spare's rehearsal (`server.rehearse`) before it waits: only a speed-up, so a
        failure is noted on stderr (the forkserver's log) and the spare waits all the same."""
        if self.rehearsal_root is None:
            return
        from harnesscheck.bridge import server

        try:
            server.rehearse(self.rehearsal_root)
        except Exception as exc:  # noqa: BLE001
            _say(f"bridge forkserver: a spare's rehearsal failed: {type(exc).__name__}: {exc}\n")
        server._CALL_THREADS.park(2)  # the session's parent watch and first call

    # -- children ---------------------------------------------------------------------------

    def _kill(self, pid: int) -> None:
        for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
            try:
                kill()
            except OSError:
                pass

    def _reap(self, *, block: bool, pid: int = -1) -> None:
        while self.children or self.spare is not None:
            try:
                got, status = os.waitpid(pid, 0 if block else os.WNOHANG)
            except ChildProcessError:
                return
            except InterruptedError:
                continue
            if got == 0:
                return
            self._reaped(got, status)
            if pid != -1:
                return

    def _reap_all(self, pids: list[int], bound_s: float = REAP_TIMEOUT_S) -> None:
        """Wait (at most `bound_s`) until every pid in `pids` is reaped: woken by each child's
        pidfd the moment it exits (a 5 ms poll where pidfds are missing)."""
        import select

        deadline = time.monotonic() + bound_s
        pending = [p for p in pids if p in self.children]
        pidfds: dict[int, int] = {}
        try:
            while pending:
                for pid in list(pending):
                    try:
                        got, status = os.waitpid(pid, os.WNOHANG)
                    except ChildProcessError:
                        self._forget(pid)
                        got = -1
                    if got:
                        if got > 0:
                            self._reaped(got, status)
                        pending.remove(pid)
                        if pid in pidfds:
                            os.close(pidfds.pop(pid))
                    elif pid not in pidfds and hasattr(os, "pidfd_open"):
                        try:
                            pidfds[pid] = os.pidfd_open(pid)
                        except OSError:
                            pass
                left = deadline - time.monotonic()
                if not pending or left <= 0:
                    return
                if len(pidfds) == len(pending):
                    poller = select.poll()
                    for fd in pidfds.values():
                        poller.register(fd, select.POLLIN)
                    poller.poll(left * 1000)  # until one exits (or the bound)
                else:
                    time.sleep(min(0.005, left))
        finally:
            _close_fds(list(pidfds.values()))

    def _reaped(self, pid: int, status: int) -> None:
        if self.spare is not None and pid == self.spare.pid:  # died waiting: fork another soon
            self.spare.handoff.close()
            self.spare = None
            self._want_spare(SPARE_DELAY_S)  # not at once: a spare that dies at start must not spin
            return
        child = self.children.get(pid)
        if child is not None and not child.took() and self._serve_again(pid, child):
            return
        if child is not None:
            try:
                child.conn.send(_status_text(status))
            except OSError:
                pass
            self._want_spare()  # a session ended: its CPU is free for the next spare
        self._forget(pid)

    def _on_handoff(self, pid: int) -> None:
        child = self.children.get(pid)
        if child is None:
            return
        if child.took() or child.hung_up:
            self._unwatch(child)

    def _unwatch(self, child: _Child) -> None:
        if child.handoff is not None:
            try:
                self.selector.unregister(child.handoff)
            except (KeyError, ValueError):
                pass

    def _serve_again(self, pid: int, child: _Child) -> bool:
        """The spare `pid` died before it took its session: fork a child afresh for the same
        relay (its connection and our copies of its stdio fds). False when that cannot be
        done (the spec was released, the process is not single-threaded, fork failed): the
        relay then gets the spare's exit status, as any session whose bridge died."""
        reg = self.registrations.get(child.spec_path)  # a released spec is gone from here
        if reg is None or reg is not child.reg or self.stopping or _thread_count() != 1:
            return False
        if not reg.cli_running() or _hung_up(child.conn):  # nobody left to serve
            return False
        self.children.pop(pid, None)
        reg.children.discard(pid)
        self._unwatch(child)
        if child.handoff is not None:
            child.handoff.close()
            child.handoff = None
        fds, child.fds = child.fds, []
        try:
            new = os.fork()
        except OSError:
            self.children[pid] = child  # forgotten by the caller with its status sent
            child.fds = fds
            return False
        if new == 0:
            self._child(child.conn, None, fds, reg.spec)  # never returns
        _close_fds(fds)
        try:
            os.setpgid(new, new)
        except OSError:
            pass
        reg.children.add(new)
        self.children[new] = _Child(child.spec_path, child.conn)
        sys.stderr.write(f"bridge forkserver: spare {pid} died before it took its session; served by {new}\n")
        sys.stderr.flush()
        return True

    def _forget(self, pid: int) -> None:
        child = self.children.pop(pid, None)
        if child is None:
            return
        self._unwatch(child)
        child.close()
        reg = self.registrations.get(child.spec_path)
        if reg is not None:
            reg.children.discard(pid)


def main(argv: list[str] | None = None) -> int:
    """`python -m harnesscheck.bridge.forkserver --control-fd N --dir D` (started by the host)."""
    parser = argparse.ArgumentParser(prog="python -m harnesscheck.bridge.forkserver")
    parser.add_argument("--control-fd", type=int, required=True)
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--listen-fd", type=int, metavar="LISTEN_FD",
                        help="the relays' socket, bound by the host (a fresh forkserver)")
    parser.add_argument("--template", type=int, metavar="LISTEN_FD",
                        help="fork ready forkservers for the hosts that connect to LISTEN_FD (start_template)")
    ns = parser.parse_args(argv)
    control = socket.socket(fileno=ns.control_fd)
    control.set_inheritable(False)
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # only the host's EOF (or SIGTERM/SIGKILL) ends us
    listener = None
    if ns.template is not None or ns.listen_fd is not None:
        listener = socket.socket(fileno=ns.template if ns.template is not None else ns.listen_fd)
        listener.set_inheritable(False)
    try:
        gc.disable()  # until the freeze below: the imports' collections would only walk what stays
        _preimport()
        rehearsal_root = _rehearsal_root(ns.dir)
        try:
            _warm_up(rehearsal_root)
        except Exception as exc:  # noqa: BLE001 - only a speed-up: children then do it themselves
            sys.stderr.write(f"bridge forkserver: warm-up session failed: {type(exc).__name__}: {exc}\n")
        if not _wait_single_threaded(WARM_UP_TIMEOUT_S):
            raise RuntimeError("threads still run after the warm-up; the forkserver must not fork")
        # Everything alive now lives as long as the forkserver: out of the collector's sight,
        # a child's collections never walk (and so copy-on-write) those pages.
        gc.collect()
        gc.freeze()
        gc.enable()
        if ns.template is not None:
            os.close(os.pidfd_open(os.getpid()))  # no pidfds here (Linux < 5.3): hosts start their own
            try:
                return _Template(control, listener).run()
            finally:  # its starter may be gone (killed): nothing else would remove it
                shutil.rmtree(ns.dir, ignore_errors=True)
        server = _Server(control, ns.dir, rehearsal_root, listener)
    except BaseException as exc:  # noqa: BLE001
        sys.stderr.write(f"bridge forkserver failed to start: {type(exc).__name__}: {exc}\n")
        return 1
    return _serve(server)


def _serve(server: "_Server") -> int:
    def stop(signum, frame):  # noqa: ARG001 - SIGTERM: end like a host EOF, children first
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    try:
        server.run()
    except SystemExit as exc:
        server._shutdown()
        return exc.code if isinstance(exc.code, int) else 0
    return 0


class _Template:
    """The template's single-threaded loop: fork a ready forkserver for each host that asks;
    end on EOF on the control channel."""

    def __init__(self, control: socket.socket, listener: socket.socket):
        self.control = control
        self.listener = listener

    def run(self) -> int:
        import select

        while True:
            readable, _, _ = select.select([self.control, self.listener], [], [], 1.0)
            self._reap()
            if self.control in readable:
                try:
                    if not self.control.recv(MAX_MESSAGE):
                        return 0
                except OSError:
                    return 0
            if self.listener in readable:
                try:
                    conn, _ = self.listener.accept()
                except OSError:
                    time.sleep(ACCEPT_PAUSE_S)
                    continue
                with conn:
                    self._serve_host(conn)

    @staticmethod
    def _reap() -> None:
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return

    def _serve_host(self, conn: socket.socket) -> None:
        """One request: its fd is the forkserver's control end, its message {dir, env}."""
        fds: list[int] = []
        try:
            conn.settimeout(PENDING_TIMEOUT_S)
            if _peer_cred(conn)[1] != os.getuid():
                conn.send(json.dumps({"error": "not our uid"}).encode())
                return
            msg, fds, flags, _addr = socket.recv_fds(conn, MAX_MESSAGE, 2)
            error = _template_request_error(msg, fds, flags)
            if error is None and _thread_count() != 1:
                error = "the template is not single-threaded"
            if error is not None:
                conn.send(json.dumps({"error": error}).encode())
                return
            request = json.loads(msg)
            pid = os.fork()
            if pid == 0:
                for sock in (self.control, self.listener, conn):
                    sock.detach()  # closed by number below: no object may close a reused fd later
                _become_forkserver(fds[0], Path(request["dir"]), request["env"])  # never returns
            try:
                pidfd = os.pidfd_open(pid)  # its parent: it cannot be reaped (its pid reused) before this
            except OSError:
                os.kill(pid, signal.SIGKILL)  # no way to hand it over safely (EMFILE): not half-served
                raise
            try:
                socket.send_fds(conn, [json.dumps({"pid": pid}).encode()], [pidfd])
            finally:
                os.close(pidfd)
        except Exception as exc:  # noqa: BLE001 - a bad request must not end the template
            try:
                conn.send(json.dumps({"error": f"{type(exc).__name__}"}).encode())
            except OSError:
                pass
        finally:
            _close_fds(fds)


def _template_request_error(msg: bytes, fds: list[int], flags: int = 0) -> str | None:
    """Why a host's request cannot be served (None: it can): one fd, a SEQPACKET socket; a
    private directory of ours (0700, not a link) by absolute path; an env of strings."""
    if len(fds) != 1 or flags & (socket.MSG_CTRUNC | socket.MSG_TRUNC):
        return "send exactly one fd, the forkserver's end of the control pair"
    try:
        if not stat.S_ISSOCK(os.fstat(fds[0]).st_mode):
            return "the fd is not a socket"
        dup = os.dup(fds[0])
        try:
            probe = socket.socket(fileno=dup)
        except OSError:
            os.close(dup)
            raise
        with probe:
            if probe.type != socket.SOCK_SEQPACKET or probe.family != socket.AF_UNIX:
                return "the fd is not a unix SEQPACKET socket"
        request = json.loads(msg)
        directory, env = request["dir"], request["env"]
        st = os.lstat(directory)
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        return f"malformed request: {type(exc).__name__}"
    if not os.path.isabs(directory) or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return "the directory is not a private one of ours (0700, by absolute path)"
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        return "the env is not a map of strings"
    try:
        for key, value in env.items():
            k, v = os.fsencode(key), os.fsencode(value)
            if not k or b"=" in k or b"\0" in k or b"\0" in v:
                return "the env has a name or value no environment can hold"
    except UnicodeError:
        return "the env has a name or value no environment can hold"
    return None


def _become_forkserver(control_fd: int, directory: Path, env: dict[str, str]) -> None:
    """In the template's fork: become a forkserver exactly as a fresh one starts (own
    session, cwd, env, stderr to its log), warm already. Never returns."""
    code = 1
    try:
        os.setsid()
        _close_fds_except((control_fd,))
        log = os.open(directory / "forkserver.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        os.dup2(log, 2)
        os.close(log)
        os.chdir(directory)
        os.environ.clear()
        os.environ.update(env)
        control = socket.socket(fileno=control_fd)
        control.set_inheritable(False)
        code = _serve(_Server(control, directory, _rehearsal_root(directory)))
    except BaseException as exc:  # noqa: BLE001
        _say(f"bridge forkserver (forked by the template) failed to start: {type(exc).__name__}: {exc}\n")
    finally:
        _flush_stderr()
        os._exit(code)


def _say(message: str) -> None:
    """A note on fd 2 (the forkserver's log) from a forked child, never raising."""
    try:
        os.write(2, message.encode())
    except OSError:
        pass


def _flush_stderr() -> None:
    try:
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - a child on its way out
        pass


if __name__ == "__main__":
    raise SystemExit(main())
