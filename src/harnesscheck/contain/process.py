"""Process runner: spawn a backend CLI, frame its stdout into lines, end it cleanly.

Requirements kept here (see doc/SPEC-process.md):
- argv list only (no shell), `env` passed exactly as given plus the run marker
  `HARNESSCHECK_RUN=<marker>`, a new session / process group, stdin /dev/null or the given
  bytes then EOF; the CLI is spawned by a session supervisor of this process's guard (one
  `_procguard.py` per host process), a child subreaper, so every descendant stays in reach
  and the whole tree dies on every ending and with the host, even on SIGKILL;
- one thread, `selectors` over non-blocking pipes, monotonic deadlines, cancel polled at
  least every 50 ms;
- stdout a pipe, or with `stdout_spool` a regular file (created in that directory, unlinked at
  once) read as it grows: a CLI that exits while its stdout writes are still queued (node's
  `process.exit()` on a full non-blocking pipe drops them) loses nothing to a slow host;
- stdout framed on b"\\n" (CRLF tolerated), decoded UTF-8 with replacement, lines longer
  than `max_line_bytes` end the run (`Ending.oversize`); stderr kept as a bounded,
  redacted tail;
- every ending goes through one `terminate_tree()`: SIGTERM the group, grace, SIGKILL the
  group, then the supervisor kills every other descendant (setsid escapees) and reports;
  a supervisor stopped or killed from inside is detected and reported (supervisor_lost);
  the marker sweep only without a supervisor or as a last resort.

Over 800 lines for a reason: the guard's client (`_Guard`, `_Supervised`, `start_guard`), the
kill path (`terminate_tree`, the sweeps) and the runner (`run_process`, `_Run`, `StdinFeed`)
share the process-wide state a fork must reset together (`_guard`, the live groups, reset by
`_after_fork_in_child`), and tests stand in for that state on this one module. Cut apart, a
fork handler here would reach into another module's globals. Its seams, were it split: the
guard's client (about 440 lines), killing, the runner, concurrency (`session_slot`).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import marshal
import os
import secrets
import select
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import Any

from harnesscheck.contain.envpolicy import RUN_MARKER_VAR, redact, secret_values

DEFAULT_MAX_LINE_BYTES = 64 * 1024 * 1024
DEFAULT_STDERR_TAIL_BYTES = 64 * 1024
_READ_CHUNK = 1024 * 1024
_POLL_S = 0.05  # cancel latency bound
_EXIT_DRAIN_S = 0.5  # after the leader exits: how long descendants may keep the pipes open
_KILL_DRAIN_S = 0.5  # after SIGKILL: bounded drain before our pipe ends are closed
_REAP_S = 5.0


class Ending(StrEnum):
    """Why the process ended."""

    exited = "exited"  # it exited by itself (after a terminal line, within linger_s, too)
    deadline = "deadline"  # timeout_s passed
    linger = "linger"  # terminal line seen, still running after linger_s: killed
    early_stop = "early_stop"  # on_line returned LineAction.STOP
    cancelled = "cancelled"  # the cancel event was set
    oversize = "oversize"  # a stdout line exceeded max_line_bytes
    process_limit = "process_limit"  # the tree held more processes at once than max_processes


class LineAction(Enum):
    """What `on_line` asks the runner to do (None means: go on)."""

    TERMINAL = "terminal"  # terminal event seen: wait linger_s for exit, then kill the tree
    STOP = "stop"  # stop now (e.g. an auth failure the CLI would retry for minutes)


class LineTooLong(Exception):
    """A stdout line exceeded the configured limit."""

    def __init__(self, limit: int):
        super().__init__(f"a stdout line exceeded the {limit}-byte limit (max_line_bytes)")
        self.limit = limit


@dataclass
class ProcessResult:
    ending: Ending
    exit_code: int | None  # None when killed by a signal (or not reaped)
    signal: int | None  # the signal that ended the process, if any
    stderr_tail: str  # last stderr_tail_bytes of stderr, decoded and redacted
    duration_s: float
    orphan_suspected: bool = False  # a descendant escaped the group and had to be hunted down
    oversize_limit: int | None = None  # set when ending == oversize
    partial_tail: str | None = None  # stdout after the last newline (unterminated last line)
    #: The session's supervisor was killed or stopped from inside (tampering): the tree was
    #: killed by the guard, the cgroup or, last, the marker sweep; orphan_suspected is set.
    supervisor_lost: bool = False
    #: How the process was contained: "bwrap" (its own namespaces, sandbox.py) or "guards"
    #: (the process guard and env policy alone: no sandbox asked for, or none to be had here).
    containment: str = "guards"
    #: Why a sandbox that was asked for was not had (empty otherwise).
    containment_note: str = ""
    #: With max_processes: the most processes of the tree counted at once (None: not counted),
    #: and why they could not be counted (empty when they were, or when no limit was asked).
    processes_seen: int | None = None
    process_count_note: str = ""

    @property
    def line_too_long(self) -> LineTooLong | None:
        return LineTooLong(self.oversize_limit) if self.oversize_limit is not None else None


# --- signals for the child ------------------------------------------------------------

_PR_SET_PDEATHSIG = 1
_PR_GET_DUMPABLE = 3
_PR_SET_DUMPABLE = 4
_prctl: Any = None
# Signals a CLI must start with at their default disposition (SIG_IGN survives exec).
_DEFAULT_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


def _load_prctl() -> Any:
    """libc prctl, resolved before fork so the child only calls into C."""
    global _prctl
    if _prctl is None:
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            fn = libc.prctl
            fn.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
            fn.restype = ctypes.c_int
            _prctl = fn
        except (OSError, AttributeError):
            _prctl = False
    return _prctl


def _host_ignores_signals() -> bool:
    """True when the host ignores a signal the CLI must not ignore (nohup, `cmd &` in sh)."""
    return any(signal.getsignal(s) == signal.SIG_IGN for s in _DEFAULT_SIGNALS)


def _default_signals() -> None:
    """In the forked child: default dispositions for the group signals, nothing blocked."""
    for s in _DEFAULT_SIGNALS:
        signal.signal(s, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())


def _child_preexec(parent_pid: int, prctl: Any, death_signal: int) -> Callable[[], None]:
    """preexec_fn for the no-guard fallback: get `death_signal` when the parent dies.

    Gotcha: PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, not the
    process. run_process is synchronous, so the spawning thread outlives the child; never
    spawn from a short-lived thread and hand the process to another one.
    """

    def preexec() -> None:
        _default_signals()
        if prctl:
            prctl(_PR_SET_PDEATHSIG, int(death_signal), 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


@contextlib.contextmanager
def _unblocked_signals() -> Iterator[None]:
    """Spawn with an empty signal mask: the mask survives exec, and a host thread may block
    signals. Cleared on this thread only, for the spawn (no preexec_fn: Popen keeps vfork)."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, ())
    if not old:
        yield
        return
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


# --- host hardening: same-uid children must not read the host through /proc ---------------

HOST_DUMPABLE_VAR = "HARNESSCHECK_HOST_DUMPABLE"
_harden_lock = threading.Lock()
_hardened = False


def harden_host() -> None:
    """Make this host process non-dumpable (Linux), once, before its first CLI is spawned.

    A CLI runs as our uid, so without this its tools could read our initial environment
    (secrets included) from /proc/<host>/environ, our memory, or take our descriptors
    (pidfd_getfd, /proc/<host>/fd). PR_SET_DUMPABLE 0 makes those need CAP_SYS_PTRACE; this
    process still reads its own /proc/self. Children get dumpable 1 back at execve, so the
    CLIs are unaffected. No protection when the CLI runs as root. Opt out (ptrace, core
    dumps) with HARNESSCHECK_HOST_DUMPABLE=1. Idempotent, thread-safe, a no-op off Linux.
    """
    global _hardened
    if _hardened:
        return
    with _harden_lock:
        if _hardened:
            return
        _hardened = True
        if not sys.platform.startswith("linux") or os.environ.get(HOST_DUMPABLE_VAR) == "1":
            return
        prctl = _load_prctl()
        if prctl:
            prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)


# --- the guard: one per host process, kills registered trees when the host dies ------------

_GUARD_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_procguard.py")
_GUARD_EXIT_WAIT_S = 2.0
_SPAWN_WAIT_S = 30.0  # a spare supervisor answers a spawn request within this (a first guard starts)
_SWEEP_WAIT_S = 5.0
#: How often a running session checks that its supervisor is neither gone nor stopped; a
#: supervisor answers a kill request within this, or it was tampered with.
_WATCH_S = 0.25


def _use_guard() -> bool:
    """The guard needs a Python interpreter and Linux /proc; without them the CLI leads its
    group and only it gets a parent-death signal."""
    return (
        sys.platform.startswith("linux")
        and bool(sys.executable)
        and not getattr(sys, "frozen", False)  # a frozen app's executable is not a Python
        and os.path.isfile(_GUARD_PATH)
    )


class _Guard:
    """Host side of the guard (see _procguard.py): start it lazily, hand it each session's
    spawn, restart it when it died or was stopped.

    Every method takes the lock for the guard's state; a session's own traffic goes over its
    own socket, outside the lock.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.owner = 0  # pid of the process that started the guard
        self.proc: subprocess.Popen[bytes] | None = None
        self.fd = -1  # host end of the guard's control socket (SOCK_SEQPACKET, close-on-exec)
        self.fd_ident: tuple[int, int] | None = None  # (st_dev, st_ino): is fd still ours?
        self.unavailable = False  # the guard cannot run here: fall back for good
        self.started_at = 0.0
        self.quick_deaths = 0  # guards that died within a second of their start, in a row
        self.closed = False  # interpreter exit: no new guard

    # -- public --

    def spawn(
        self,
        executable: str,
        argv: list[str],
        env: dict[str, str],
        cwd: str,
        stdin: bool,
        stdout_fd: int | None = None,
        info_fd: int = 0,
    ) -> _Supervised | None:
        """Start argv under a session supervisor; None when no guard can run here (the caller
        falls back to a direct spawn). Raises OSError when the spawn itself failed.
        `stdout_fd`: the child's stdout (a spool file; the caller keeps it and reads it
        itself), else a pipe whose read end is the result's `stdout`."""
        request: tuple = (executable, list(argv), dict(env), os.fspath(cwd))
        if info_fd:
            request += (int(info_fd),)  # a sandbox: the supervisor reads its init's pid
        spec = marshal.dumps(request)
        pipes: list[int] = []
        out_r: int | None = None
        try:
            if stdout_fd is None:
                out_r, out_w = os.pipe()
                pipes += [out_r, out_w]
            else:
                out_w = os.dup(stdout_fd)
                pipes.append(out_w)
            err_r, err_w = os.pipe()
            pipes += [err_r, err_w]
            if stdin:
                in_r, in_w = os.pipe()
                pipes += [in_r, in_w]
            host_sess, sup_sess = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        except OSError:
            for fd in pipes:
                os.close(fd)
            return None  # out of descriptors: this session goes without
        theirs = [sup_sess.fileno()] + ([in_r] if stdin else []) + [out_w, err_w]
        try:
            with self.lock:
                sent = self._send_request(theirs)
        finally:
            sup_sess.close()
            for fd in theirs[1:]:
                os.close(fd)
        if not sent:
            host_sess.close()
            for fd in (out_r, err_r) + ((in_w,) if stdin else ()):
                if fd is not None:
                    os.close(fd)
            return None
        try:
            host_sess.settimeout(_SPAWN_WAIT_S)
            host_sess.sendall(b"%08x" % len(spec) + spec)
            line, rest = _read_line(host_sess)
        except OSError:
            line, rest = b"", b""
        words = line.split()
        if len(words) == 2 and words[0] == b"e":
            host_sess.close()
            for fd in (out_r, err_r) + ((in_w,) if stdin else ()):
                if fd is not None:
                    os.close(fd)
            code = int(words[1])
            raise OSError(code, os.strerror(code), argv[0])
        if len(words) not in (4, 5) or words[0] != b"p":
            # No supervisor answered in time (the guard is stuck or gone): it is replaced, and
            # this session is spawned directly. Closing our end makes a late supervisor end
            # whatever it started.
            host_sess.close()
            for fd in (out_r, err_r) + ((in_w,) if stdin else ()):
                if fd is not None:
                    os.close(fd)
            with self.lock:
                self._drop()
            return None
        host_sess.setblocking(False)
        cgroup = words[3].decode("utf-8", "surrogateescape")
        supervised = _Supervised(
            guard=self.proc.pid if self.proc is not None else 0,
            pid=int(words[1]),
            supervisor=int(words[2]),
            cgroup="" if cgroup == "-" else cgroup,
            sess=host_sess,
            stdin=os.fdopen(in_w, "wb", buffering=0) if stdin else None,
            stdout=os.fdopen(out_r, "rb", buffering=0) if out_r is not None else None,
            stderr=os.fdopen(err_r, "rb", buffering=0),
        )
        supervised.inner = int(words[4]) if len(words) == 5 else 0
        supervised.feed(rest)
        return supervised

    def warm(self) -> bool:
        """Start the guard now if none runs (what a host's first session would otherwise wait
        for: an interpreter start). True when one runs."""
        with self.lock:
            if self.owner and self.owner != os.getpid():
                self._forget_inherited()
            if self.unavailable or self.closed:
                return False
            if self.fd >= 0 and self._fd_is_ours() and self._healthy():
                return True
            return self._start()

    def pid(self) -> int | None:
        with self.lock:
            return self.proc.pid if self.proc is not None and self.owner == os.getpid() else None

    def shutdown(self) -> None:
        """Interpreter exit: close our socket end (the guard kills what is left and exits) and
        reap it, briefly."""
        if not self.lock.acquire(timeout=_GUARD_EXIT_WAIT_S):
            return
        try:
            self.closed = True
            if self.owner == os.getpid():
                proc = self.proc
                self._close_fd()
                self.proc = None
                if proc is not None:
                    with contextlib.suppress(subprocess.TimeoutExpired, OSError):
                        proc.wait(timeout=_GUARD_EXIT_WAIT_S)
        finally:
            self.lock.release()

    # -- internals (lock held) --

    def _send_request(self, fds: list[int]) -> bool:
        """Queue one session request for a spare supervisor; (re)start the guard when needed."""
        if self.owner and self.owner != os.getpid():
            self._forget_inherited()  # forked without the at-fork hook (C-level fork)
        if self.unavailable or self.closed:
            return False
        for _ in range(2):
            if self.fd < 0 or not self._fd_is_ours() or not self._healthy():
                if not self._start():
                    return False
            try:
                _send_fds(self.fd, fds)
                return True
            except OSError:  # the guard and its spares are gone, or nobody reads (stopped)
                self._drop()
        return False

    def _healthy(self) -> bool:
        """The guard runs and is not stopped (a same-uid CLI may SIGSTOP or SIGKILL it)."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return False
        return _proc_state(proc.pid) not in (b"T", b"t")

    def _start(self) -> bool:
        if self.closed or self.unavailable:
            return False
        self._drop()
        # A socketpair, not a pipe: a pipe's ends can be reopened through /proc/<pid>/fd by
        # any same-uid process; a socket cannot. SEQPACKET: one request per message, with its
        # descriptors. Both ends close-on-exec: no CLI ever inherits the host's end.
        try:
            host_end, guard_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            w, r = host_end.detach(), guard_end.detach()
        except OSError:
            return False
        try:
            env = {k: os.environ[k] for k in ("LD_LIBRARY_PATH",) if k in os.environ}
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", _GUARD_PATH, str(os.getpid())],
                executable=sys.executable,
                stdin=r,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env,
                cwd="/",
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            os.close(w)
            # No interpreter to run: for good. EAGAIN/ENOMEM: only this session goes without.
            self.unavailable = isinstance(exc, (FileNotFoundError, PermissionError))
            return False
        finally:
            os.close(r)
        os.set_blocking(w, False)
        st = os.fstat(w)
        self.fd, self.fd_ident, self.owner = w, (st.st_dev, st.st_ino), os.getpid()
        self.started_at = time.monotonic()
        return True  # requests wait in the socket until a spare supervisor reads them

    def _fd_is_ours(self) -> bool:
        try:
            st = os.fstat(self.fd)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self.fd_ident

    def _close_fd(self) -> None:
        if self.fd >= 0 and self._fd_is_ours():
            with contextlib.suppress(OSError):
                os.close(self.fd)
        self.fd, self.fd_ident = -1, None

    def _drop(self) -> None:
        """Forget the current guard: SIGKILL and reap it, then close our end of its socket (its
        spare supervisors see EOF and exit). Running sessions keep their supervisors: each
        watches its own session socket, not the guard."""
        proc, self.proc = self.proc, None
        if proc is not None and self.owner == os.getpid():
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                if proc.poll() is None:
                    proc.kill()  # stopped, or our fd was taken over
                proc.wait(timeout=_GUARD_EXIT_WAIT_S)
            if time.monotonic() - self.started_at < 1.0:
                self.quick_deaths += 1
                if self.quick_deaths >= 3:  # it dies as soon as it starts: give up
                    self.unavailable = True
            else:
                self.quick_deaths = 0
        self._close_fd()

    def _forget_inherited(self) -> None:
        """In a forked child: the parent's guard is not ours. Close the inherited end (so the
        parent's guard still sees EOF when the parent dies) and start afresh."""
        self._close_fd()
        if self.proc is not None:
            self.proc._child_created = False  # not our child: Popen must not track or warn
        self.proc = None
        self.owner = 0


def _send_fds(fd: int, fds: list[int]) -> None:
    """One SEQPACKET message b"s" carrying `fds` (non-blocking: EAGAIN when nobody reads)."""
    sock = socket.socket(fileno=fd)
    try:
        socket.send_fds(sock, [b"s"], fds)
    finally:
        sock.detach()


def _read_line(sock: socket.socket) -> tuple[bytes, bytes]:
    """One line from a blocking socket with a timeout (a supervisor's first answer), and
    whatever came after it (the CLI may have exited already)."""
    data = b""
    while b"\n" not in data:
        chunk = sock.recv(4096)
        if not chunk or len(data) > 4096:
            return b"", b""
        data += chunk
    line, _, rest = data.partition(b"\n")
    return line, rest


def _proc_state(pid: int) -> bytes | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    return data[data.rfind(b")") + 2 :][:1]


class _Supervised:
    """A CLI running under a session supervisor: the parts of Popen that run_process uses.

    The supervisor is the CLI's parent: it reaps it and reports its status (`x`), kills the
    whole tree on `k` and answers how many processes it killed (`d`), and kills the tree when
    our end of the session socket closes.
    """

    def __init__(self, *, guard: int, pid: int, supervisor: int, cgroup: str, sess: socket.socket, stdin: Any, stdout: Any, stderr: Any) -> None:
        self.guard = guard
        self.pid = pid
        self.supervisor = supervisor
        self.cgroup = cgroup
        self.sess = sess
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr
        self.returncode: int | None = None
        self.report: tuple[int, int, int] | None = None
        self.lost = False  # the supervisor went away (or was stopped) before its work was done
        self.inner = 0  # a sandbox's init (host pid): its process group is the CLI's
        self._buf = b""
        self._eof = False
        self._child_created = True  # read by the at-fork hook, as on a Popen
        self.sup_fd = _pidfd_open(supervisor)

    def fileno(self) -> int:
        return self.sess.fileno()

    def pump(self) -> None:
        """Read whatever the supervisor has said (never blocks)."""
        while True:
            try:
                chunk = self.sess.recv(4096)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                chunk = b""
            if not chunk:
                if self.returncode is None or self.report is None:
                    self.lost = self.lost or self.returncode is None
                self._eof = True
                return
            self.feed(chunk)

    def feed(self, chunk: bytes) -> None:
        self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        for line in lines:
            words = line.split()
            if len(words) == 2 and words[0] == b"x" and self.returncode is None:
                self.returncode = os.waitstatus_to_exitcode(int(words[1]))
            elif len(words) == 4 and words[0] == b"d":
                self.report = (int(words[1]), int(words[2]), int(words[3]))

    def supervisor_gone(self) -> bool:
        if self.sup_fd is not None:
            return bool(select.select([self.sup_fd], [], [], 0)[0])
        return _proc_state(self.supervisor) is None

    def tampered(self) -> bool:
        """The supervisor is gone or stopped/traced before the session ended: a process of the
        tree (same uid) did it. (A stopped guard alone is replaced at the next spawn.)"""
        if self.returncode is not None and self.report is not None:
            return False
        return _proc_state(self.supervisor) in (None, b"T", b"t", b"Z", b"X")

    def poll(self) -> int | None:
        self.pump()
        if self.returncode is None and not self.lost and self.supervisor_gone():
            self.pump()
            self.lost = self.returncode is None
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None and not self.lost:
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired([str(self.pid)], timeout or 0)
            select.select([self.sess], [], [], min(0.05, left) if left is not None else 0.05)
        return self.returncode

    def sweep(self, timeout: float) -> tuple[int, int, int] | None:
        """Ask the supervisor to kill the whole tree; its report, or None when it did not
        answer in time (stopped or killed: tampering)."""
        self.report = None
        try:
            self.sess.send(b"k")
        except OSError:
            self.lost = True
            return None
        end = time.monotonic() + timeout
        while self.report is None:
            left = end - time.monotonic()
            if left <= 0 or self._eof:
                break
            select.select([self.sess], [], [], min(0.05, left))
            self.pump()
        if self.report is None:
            self.lost = True
        return self.report

    def close(self) -> None:
        """Our end of the session closes: the supervisor kills what is left and exits."""
        with contextlib.suppress(OSError):
            self.sess.close()
        if self.sup_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.sup_fd)
            self.sup_fd = None


_guard = _Guard()


def start_guard() -> bool:
    """Start this host's process guard ahead of its first session (`harnesscheck.warm_up`).
    False where no guard can run (sessions then use the fallback, as they would anyway)."""
    return _use_guard() and _guard.warm()


def _guard_pid() -> int | None:
    """Pid of this process's guard, if one is running (for tests and diagnostics)."""
    return _guard.pid()


def _resolve_executable(name: str, env: Mapping[str, str], cwd: str | os.PathLike[str]) -> str:
    """Absolute path of argv[0], looked up on the child's PATH (as exec would)."""
    if os.sep in name:
        path = name if os.path.isabs(name) else os.path.join(os.fspath(cwd), name)
        if not os.path.exists(path):
            raise FileNotFoundError(errno.ENOENT, "no such executable", name)
        if os.path.isdir(path) or not os.access(path, os.X_OK):
            raise PermissionError(errno.EACCES, "not an executable file", name)
        return os.path.abspath(path)
    found = shutil.which(name, path=env.get("PATH", os.defpath))
    if found is None:
        raise FileNotFoundError(errno.ENOENT, "executable not found on the child's PATH", name)
    return os.path.abspath(found)


# --- registry of live groups (atexit) ------------------------------------------------

_live_lock = threading.Lock()
_live: dict[int, tuple[subprocess.Popen[bytes], str]] = {}


def _register(proc: subprocess.Popen[bytes], marker: str) -> None:
    with _live_lock:
        _live[proc.pid] = (proc, marker)


def _unregister(proc: subprocess.Popen[bytes]) -> None:
    with _live_lock:
        _live.pop(proc.pid, None)


def _kill_live_groups() -> None:
    """At interpreter exit, no child group we started may survive."""
    with _live_lock:
        items = list(_live.values())
        _live.clear()
    for proc, marker in items:
        _shielded(lambda p=proc, m=marker: terminate_tree(p, p.pid, m, 0.0))


@atexit.register
def _at_exit() -> None:
    """Kill the live groups, then let the guard go (it exits on EOF) and reap it."""
    _kill_live_groups()
    _guard.shutdown()


def _after_fork_in_child() -> None:
    """A forked host child owns neither the parent's sessions nor its guard: it must not
    kill them at its exit, and must not hold the parent's guard socket open. It gets its own
    guard on its first session. (No locks here: another thread may have held them.)"""
    global _guard, _live, _live_lock
    inherited, _guard = _guard, _Guard()
    inherited._forget_inherited()
    for proc, _marker in _live.values():
        proc._child_created = False  # the parent's child, not ours
    _live_lock, _live = threading.Lock(), {}


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _shielded(fn: Callable[[], Any]) -> Any:
    """Run cleanup to completion even if KeyboardInterrupt arrives; re-raise it afterwards.

    An interrupt restarts `fn`, which must be idempotent (and should skip its grace period
    on a retry).
    """
    pending: BaseException | None = None
    result = None
    for _ in range(10):
        try:
            result = fn()
            break
        except KeyboardInterrupt as exc:
            pending = exc
    if pending is not None:
        raise pending
    return result


# --- killing -------------------------------------------------------------------------


def _killpg(pgid: int, sig: int) -> bool:
    """Signal the group; False when it no longer exists."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        # A member changed credentials (setuid); still try the rest via the marker sweep.
        return True


def _group_alive(pgid: int) -> bool:
    """True while the group has a member that is not a zombie.

    Zombies still count for kill(-pgid, 0) until whoever inherited them reaps them (PID 1
    may take a second), so membership is confirmed from /proc.
    """
    if not _killpg(pgid, 0):
        return False
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may contain spaces and parens.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) >= 3 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


def find_marked(marker: str) -> list[int]:
    """Pids of live processes (other than us) whose environment carries HARNESSCHECK_RUN=marker."""
    needle = f"{RUN_MARKER_VAR}={marker}".encode()
    me = os.getpid()
    found: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        pid = int(entry)
        if pid == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                data = fh.read()
        except OSError:
            continue
        if not data:
            continue  # zombie or kernel thread
        if data.startswith(needle + b"\0") or (b"\0" + needle + b"\0") in data or data.endswith(b"\0" + needle):
            found.append(pid)
    return found


def terminate_tree(
    proc: subprocess.Popen[bytes],
    pgid: int,
    marker: str | None,
    grace: float,
    *,
    wait_step: Callable[[float], None] | None = None,
) -> bool:
    """End the child's whole tree; return True when escaped descendants had to be killed.

    SIGTERM the process group, wait up to `grace` for it to empty (reaping the leader),
    SIGKILL the group, then SIGKILL every process still carrying `HARNESSCHECK_RUN=marker`
    (descendants that left the group with setsid) and their groups. Idempotent.
    `wait_step(seconds)` is how the caller waits (e.g. draining pipes meanwhile).
    """
    sleep = wait_step or time.sleep
    if _killpg(pgid, signal.SIGTERM) and grace > 0:
        # Wake stopped members so they can handle SIGTERM.
        _killpg(pgid, signal.SIGCONT)
        end = time.monotonic() + grace
        while True:
            proc.poll()
            if not _group_alive(pgid):
                break
            left = end - time.monotonic()
            if left <= 0:
                break
            sleep(min(0.05, left))
    _killpg(pgid, signal.SIGKILL)
    if isinstance(proc, _Supervised):
        return _end_supervised(proc, marker)
    # Fallback (no supervisor): the group is gone; hunt setsid escapees by the run marker.
    orphans = _sweep_marked(marker, pgid) if marker else False
    try:
        proc.wait(timeout=_REAP_S)
    except subprocess.TimeoutExpired:
        pass  # uninterruptible sleep; the atexit hook and Popen's own cleanup retry later
    return orphans


def _sweep_marked(marker: str, pgid: int) -> bool:
    """Last resort: SIGKILL every process still carrying HARNESSCHECK_RUN=marker, with its
    group. Blind to a process that cleared or overwrote its environment, or is not dumpable."""
    orphans = False
    for _ in range(5):
        marked = find_marked(marker)
        if not marked:
            break
        for pid in marked:
            try:
                epgid = os.getpgid(pid)
            except ProcessLookupError:
                continue
            if epgid != pgid:
                orphans = True
                if epgid != os.getpgrp() and epgid > 1:
                    _killpg(epgid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)
    return orphans


def _cgroup_kill(path: str) -> bool:
    try:
        with open(os.path.join(path, "cgroup.kill"), "w") as fh:
            fh.write("1")
        return True
    except OSError:
        return False


def _end_supervised(proc: _Supervised, marker: str | None) -> bool:
    """The group is SIGKILLed; now the supervisor kills every other descendant (it is their
    subreaper, so nothing of the tree can be anywhere else) and reports. True when a process
    had left the CLI's group, or the tree could not be confirmed gone."""
    report = None if proc.lost else proc.sweep(_SWEEP_WAIT_S)
    if report is not None:
        orphans = report[1] > 0 or report[2] > 0
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=_REAP_S)
        return orphans
    # The supervisor is dead or stopped (a same-uid process can do both): its descendants went
    # to the guard, which kills them, unless the guard is stopped or dead too. The session
    # cgroup, where there is one, is killed whole; without one the marker sweep is all that is
    # left. Either way this is reported: never silence.
    if proc.cgroup:
        _cgroup_kill(proc.cgroup)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(proc.supervisor, signal.SIGKILL)
    if proc.guard and _proc_state(proc.guard) in (b"T", b"t"):
        # Its orphans are the (stopped) guard's now: let it run to kill them. It is replaced at
        # the next spawn.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(proc.guard, signal.SIGCONT)
        time.sleep(_WATCH_S * 2)
    if marker:
        _sweep_marked(marker, proc.pid)
    proc.lost = True
    return True


# --- the runner ----------------------------------------------------------------------


class _Run:
    """State of one run_process call."""

    def __init__(
        self, on_line: Callable[[str], LineAction | None], max_line_bytes: int, tail_bytes: int, on_err_line: Callable[[str], LineAction | None] | None = None
    ):
        self.on_line = on_line
        self.on_err_line = on_err_line
        self.max_line_bytes = max_line_bytes
        self.tail_bytes = tail_bytes
        self.out = bytearray()
        self.scan_from = 0
        self.err = bytearray()
        self.err_dropped = False
        self.err_line = bytearray()  # the stderr line being assembled for on_err_line
        self.err_skipping = False  # inside a stderr line longer than max_line_bytes: not delivered
        self.action: LineAction | None = None  # strongest action seen so far
        self.terminal_at: float | None = None
        self.oversize = False
        self.deliver = True  # False after oversize / stop: keep draining, stop calling on_line

    def feed_out(self, chunk: bytes) -> None:
        """Append stdout bytes; deliver every complete line (a trailing CR is not counted)."""
        if self.oversize:
            return
        buf = self.out
        buf.extend(chunk)
        start = 0
        try:
            while True:
                nl = buf.find(b"\n", self.scan_from)
                if nl < 0:
                    break
                end = nl - 1 if nl > start and buf[nl - 1] == 0x0D else nl
                if end - start > self.max_line_bytes:
                    self._set_oversize()
                    return
                line = self._text(buf, start, end) if self.deliver else ""
                start = self.scan_from = nl + 1
                self._deliver(line)
        finally:
            if start and not self.oversize:
                del buf[:start]
            self.scan_from = len(self.out)
        # A pending CR may belong to a CRLF: it does not count against the limit yet.
        pending = len(buf) - (1 if buf and buf[-1] == 0x0D else 0)
        if pending > self.max_line_bytes:
            self._set_oversize()

    def _set_oversize(self) -> None:
        self.oversize = True
        self.deliver = False
        self.out = bytearray()
        self.scan_from = 0

    @staticmethod
    def _text(buf: bytearray, start: int, end: int) -> str:
        """buf[start:end] decoded, without copying the bytes first (a line may be many MiB)."""
        with memoryview(buf) as view:
            return str(view[start:end], "utf-8", "replace")

    def _deliver(self, line: str, on_line: Callable[[str], LineAction | None] | None = None) -> None:
        if not self.deliver:
            return
        try:
            action = (on_line or self.on_line)(line)
        except BaseException:
            self.deliver = False  # a failing parser (or an interrupt) gets no further lines
            raise
        if action is LineAction.STOP:
            self.action = LineAction.STOP
            self.deliver = False
        elif action is LineAction.TERMINAL and self.action is None:
            self.action = LineAction.TERMINAL
            self.terminal_at = time.monotonic()

    def feed_err(self, chunk: bytes) -> None:
        self.err.extend(chunk)
        excess = len(self.err) - self.tail_bytes
        if excess > 0:
            del self.err[:excess]
            self.err_dropped = True
        if self.on_err_line is None:
            return
        # Complete stderr lines to on_err_line (a line over max_line_bytes is skipped, never
        # buffered whole); its actions count as stdout's do.
        parts = chunk.split(b"\n")
        for n, part in enumerate(parts):
            if not self.err_skipping:
                self.err_line.extend(part)
                if len(self.err_line) > self.max_line_bytes:
                    self.err_line = bytearray()
                    self.err_skipping = True
            if n == len(parts) - 1:
                break  # no newline after this part yet
            if not self.err_skipping:
                line = self.err_line.decode("utf-8", "replace").rstrip("\r")
                self._deliver(line, self.on_err_line)
            self.err_line = bytearray()
            self.err_skipping = False

    def partial_tail(self) -> str | None:
        if self.oversize or not self.out:
            return None
        data = bytes(self.out)
        if data.endswith(b"\r"):
            data = data[:-1]
        return data.decode("utf-8", "replace")


class StdinFeed:
    """A child's stdin kept open for a conversation (a JSON-RPC peer such as an ACP agent):
    any thread may `write` bytes or `close` it; run_process moves them into the pipe from its
    own loop (a wake pipe in its selector), never blocking on a full pipe. Once closed and
    drained, the child's stdin is closed (EOF). Writes after `close` are dropped."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._chunks: list[bytes] = []
        self._closed = False
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)

    def write(self, data: bytes) -> bool:
        """Queue `data`; False when the feed is closed (nothing queued)."""
        with self._lock:
            if self._closed:
                return False
            self._chunks.append(bytes(data))
        self._wake()
        return True

    def close(self) -> None:
        """No more bytes: the child gets EOF once what is queued is written."""
        with self._lock:
            self._closed = True
        self._wake()

    @property
    def closed(self) -> bool:
        return self._closed

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_w, b"w")

    def fileno(self) -> int:
        return self._wake_r

    def take(self) -> tuple[bytes, bool]:
        """(queued bytes, closed), emptying the queue and the wake pipe (run_process's side)."""
        with contextlib.suppress(BlockingIOError, OSError):
            while os.read(self._wake_r, 4096):
                pass
        with self._lock:
            data, self._chunks = b"".join(self._chunks), []
            return data, self._closed

    def dispose(self) -> None:
        _close_fds(self._wake_r, self._wake_w)
        self._wake_r = self._wake_w = -1


def run_process(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | os.PathLike[str],
    on_line: Callable[[str], LineAction | None],
    timeout_s: float,
    stdin_bytes: bytes | None = None,
    cancel: threading.Event | None = None,
    linger_s: float = 2.0,
    term_grace_s: float = 2.0,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    stderr_tail_bytes: int = DEFAULT_STDERR_TAIL_BYTES,
    run_marker: str | None = None,
    on_spawn: Callable[[int], None] | None = None,
    on_err_line: Callable[[str], LineAction | None] | None = None,
    stdout_spool: str | os.PathLike[str] | None = None,
    stdin_feed: StdinFeed | None = None,
    sandbox: Any = None,
    max_processes: int | None = None,
) -> ProcessResult:
    """Run `argv` to an ending and return how it ended; complete stdout lines go to on_line.

    `on_err_line`: complete stderr lines (up to max_line_bytes; longer ones are skipped), for
    a CLI that reports some endings only in its log on stderr; its TERMINAL/STOP count as
    on_line's. The stderr tail is kept either way.

    `stdout_spool`: a private directory (the session's run dir). The child's stdout is then a
    regular file made there (unlinked at once, so nothing is left behind) instead of a pipe,
    and the host reads it as it grows. A pipe holds 64 KiB: a node CLI writes to it without
    blocking and queues the rest in memory, and `process.exit()` drops that queue, so a host
    that reads late (a loaded machine) saw the stream end inside an event. Writes to a
    regular file complete before the write call returns (node writes files synchronously).
    The trade-off: no back-pressure, the file grows with the output until the session ends.

    `stdin_feed`: the child's stdin is a pipe kept open for a conversation (instead of
    `stdin_bytes`): bytes written to the feed from any thread (on_line included) go into the
    pipe, and its `close()` closes the pipe once they are written (StdinFeed).

    `sandbox`: a `harnesscheck.contain.sandbox.Sandbox`: run argv inside bubblewrap namespaces of its
    own (doc/SPEC-sandbox.md) where the machine allows it; the group signalled on every
    ending is then the namespace's (its init's pid, from bwrap's --info-fd), and bwrap's
    `--die-with-parent` ends the namespace with the bwrap process the supervisor started.
    Where no sandbox can be had it runs as without one (`containment` says "guards", with
    the reason), unless the sandbox is `required` (then RuntimeError before anything runs).

    `max_processes`: the most processes the CLI's tree (the CLI included) may hold at once.
    The tree is counted every _COUNT_S where it can be counted whole: under a session
    supervisor (a subreaper: every descendant stays below it, setsid or double fork alike) or
    in a sandbox (the namespace's init reaps every orphan); bwrap's own two processes are not
    counted. Past the limit the tree is ended at once (`Ending.process_limit`). Where it
    cannot be counted whole (no supervisor and no sandbox: an escapee is re-parented to init)
    it is not enforced and `process_count_note` says why. A process that lives less than
    _COUNT_S between two counts can be missed: the limit bounds what the tree holds, not
    every fork.

    `on_spawn(pid)` is called once the child runs, before its output is read; the child leads
    its own session and process group (sid = pgid = pid), so whatever it starts without
    setsid can be recognised by its session.

    Raises only for spawn failures (FileNotFoundError, PermissionError, ValueError for bad
    arguments) or an exception from `on_line` or `on_spawn` (after the tree is killed).
    """
    if isinstance(argv, (str, bytes)) or not argv or not all(isinstance(a, str) for a in argv):
        raise ValueError("argv must be a non-empty list of str (no shell)")
    if timeout_s <= 0:
        raise ValueError("timeout_s must be > 0")
    if stdin_feed is not None and stdin_bytes is not None:
        raise ValueError("give stdin_bytes or stdin_feed, not both")
    if max_line_bytes <= 0 or stderr_tail_bytes < 0:
        raise ValueError("max_line_bytes must be > 0 and stderr_tail_bytes >= 0")
    if max_processes is not None and max_processes < 1:
        raise ValueError("max_processes must be >= 1 (the CLI itself is one)")
    if run_marker is not None and (not run_marker or "\0" in run_marker):
        raise ValueError("run_marker must be a non-empty string without NUL")
    marker = run_marker or secrets.token_hex(12)
    harden_host()  # before any CLI of ours can look at /proc/<host>
    child_env = dict(env)
    child_env[RUN_MARKER_VAR] = marker

    executable = _resolve_executable(argv[0], child_env, cwd)
    containment, containment_note = "guards", ""
    if sandbox is not None:
        from harnesscheck.contain import sandbox as _sandbox

        state = _sandbox.status()
        if state.available:
            containment = "bwrap"
        elif getattr(sandbox, "required", False):
            raise RuntimeError(f"a sandbox is required and cannot be had here: {state.reason}; fix: {_sandbox.INSTALL_FIX}")
        else:
            containment_note = state.reason
    started = time.monotonic()
    deadline = started + timeout_s
    host_pid = os.getpid()

    spool_r, spool_w = _open_spool(stdout_spool) if stdout_spool is not None else (-1, -1)
    stdin_piped = stdin_bytes is not None or stdin_feed is not None

    def command(fd: int | None) -> tuple[str, list[str]]:
        if containment != "bwrap":
            return executable, list(argv)
        from harnesscheck.contain import sandbox as _sandbox

        wrapped = _sandbox.bwrap_argv(sandbox, [executable, *argv[1:]], cwd=os.fspath(cwd), info_fd=fd)
        return wrapped[0], wrapped

    def spawn() -> Any:
        if _use_guard():
            exe, args = command(3 if containment == "bwrap" else None)
            supervised = _guard.spawn(
                exe, args, child_env, os.fspath(cwd), stdin_piped, stdout_fd=spool_w if spool_w >= 0 else None, info_fd=3 if containment == "bwrap" else 0
            )
            if supervised is not None:
                return supervised
        # Fallback (no guard here): the CLI leads its group and gets a parent-death signal.
        info_r, info_w = os.pipe() if containment == "bwrap" else (-1, -1)
        exe, args = command(info_w if info_w >= 0 else None)
        try:
            with _unblocked_signals():  # for the spawn only, not across when_not_busy's waits
                popen = subprocess.Popen(
                    args,
                    executable=exe,
                    env=child_env,
                    cwd=cwd,
                    stdin=subprocess.PIPE if stdin_piped else subprocess.DEVNULL,
                    stdout=spool_w if spool_w >= 0 else subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    start_new_session=True,
                    close_fds=True,
                    pass_fds=(info_w,) if info_w >= 0 else (),
                    preexec_fn=_child_preexec(host_pid, _load_prctl(), signal.SIGKILL),
                )
        except BaseException:
            _close_fds(info_r, info_w)
            raise
        if info_r >= 0:
            from harnesscheck.contain import sandbox as _sandbox

            _close_fds(info_w)
            popen.inner = _sandbox.parse_child_pid(_read_all(info_r, 10.0))  # type: ignore[attr-defined]
            _close_fds(info_r)
        return popen

    try:
        proc = when_not_busy(spawn)
    except BaseException:
        _close_fds(spool_r)
        raise
    finally:
        _close_fds(spool_w)  # the child has its own copy; ours would only hold the file open
    _register(proc, marker)
    # start_new_session: the child leads its own session and group; in a sandbox, the CLI is
    # in the group of the namespace's init (bwrap --new-session), signalled instead of bwrap.
    pgid = getattr(proc, "inner", 0) or proc.pid
    state = _Run(on_line, max_line_bytes, stderr_tail_bytes, on_err_line)
    sel = selectors.DefaultSelector()
    open_fds: dict[int, str] = {}
    stdin_view: memoryview | None = None
    pidfd: int | None = None

    def setup() -> None:
        nonlocal stdin_view, pidfd
        assert proc.stderr is not None and (proc.stdout is not None or spool_r >= 0)
        for stream, kind in ((proc.stdout, "out"), (proc.stderr, "err")):
            if stream is None:
                continue  # a spooled stdout: read_spool reads the file
            os.set_blocking(stream.fileno(), False)
            sel.register(stream.fileno(), selectors.EVENT_READ, kind)
            open_fds[stream.fileno()] = kind
        if proc.stdin is not None and stdin_feed is not None:
            stdin_view = memoryview(b"")
            os.set_blocking(proc.stdin.fileno(), False)
            sel.register(stdin_feed.fileno(), selectors.EVENT_READ, "feed")
        elif proc.stdin is not None:
            stdin_view = memoryview(stdin_bytes or b"")
            if len(stdin_view):
                os.set_blocking(proc.stdin.fileno(), False)
                sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE, "in")
            else:
                _close_quietly(proc.stdin)
        if isinstance(proc, _Supervised):
            # The supervisor reports the CLI's exit on the session socket; its pidfd says
            # when it is gone (killed or stopped from inside: then the guard kills the tree).
            sel.register(proc.fileno(), selectors.EVENT_READ, "sup")
            if proc.sup_fd is not None:
                sel.register(proc.sup_fd, selectors.EVENT_READ, "exit")
        else:
            pidfd = _pidfd_open(proc.pid)
            if pidfd is not None:
                sel.register(pidfd, selectors.EVENT_READ, "exit")
        if on_spawn is not None:
            on_spawn(proc.pid)

    def read_ready(timeout: float) -> None:
        """One selector round: write stdin, read pipes (and notice exit)."""
        nonlocal stdin_view
        for key, _ in sel.select(timeout):
            kind = key.data
            fd = key.fd
            if kind == "feed":
                assert stdin_feed is not None and stdin_view is not None
                data, closed = stdin_feed.take()
                if proc.stdin is None or proc.stdin.closed:
                    if closed:
                        sel.unregister(fd)
                    continue
                if data:
                    stdin_view = memoryview(bytes(stdin_view) + data)
                    if proc.stdin.fileno() not in sel.get_map():
                        sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE, "in")
                if closed:
                    sel.unregister(fd)
                    if not len(stdin_view):
                        _close_quietly(proc.stdin)
                continue
            if kind == "in":
                assert proc.stdin is not None and stdin_view is not None
                try:
                    n = os.write(fd, stdin_view[:65536])
                    stdin_view = stdin_view[n:]
                except BlockingIOError:
                    continue
                except (BrokenPipeError, OSError):
                    stdin_view = stdin_view[:0]
                if not len(stdin_view):
                    sel.unregister(fd)
                    if stdin_feed is None or stdin_feed.closed:
                        _close_quietly(proc.stdin)
            elif kind == "exit":
                sel.unregister(fd)
            elif kind == "sup":
                proc.pump()
                if proc._eof or proc.returncode is not None:
                    sel.unregister(fd)
            else:
                try:
                    chunk = os.read(fd, _READ_CHUNK)
                except BlockingIOError:
                    continue
                except OSError:
                    chunk = b""
                if not chunk:
                    sel.unregister(fd)
                    open_fds.pop(fd, None)
                    continue
                if kind == "out":
                    state.feed_out(chunk)
                else:
                    state.feed_err(chunk)

    def read_spool(max_chunks: int = 16) -> bool:
        """Feed what the spool file gained since the last read (a regular file never blocks);
        True when it holds nothing more now (or there is no spool, or lines are no longer wanted)."""
        if spool_r < 0:
            return True
        for _ in range(max_chunks):
            if state.oversize or not state.deliver:
                return True
            chunk = os.read(spool_r, _READ_CHUNK)
            if not chunk:
                return True
            state.feed_out(chunk)
        return False

    def drain(seconds: float) -> None:
        """Read whatever the pipes (and the spool) hold for at most `seconds` (never waits for
        EOF past that)."""
        end = time.monotonic() + seconds
        while True:
            spool_idle = read_spool()
            left = end - time.monotonic()
            if left <= 0 or (not open_fds and spool_idle):
                break
            if open_fds:
                read_ready(min(left, _POLL_S))

    ending: Ending | None = None
    orphans = False
    exit_seen_at: float | None = None
    next_watch = 0.0
    count_root, count_own, count_note = _count_root(proc, containment) if max_processes is not None else (0, 0, "")
    processes_seen: int | None = 0 if count_root else None
    next_count = 0.0
    try:
        setup()
        while ending is None:
            now = time.monotonic()
            if isinstance(proc, _Supervised) and now >= next_watch:
                next_watch = now + _WATCH_S
                if proc.tampered():
                    proc.lost = True  # ended below as a lost leader; the teardown kills the tree
            if count_root and now >= next_count and max_processes is not None:
                next_count = now + _COUNT_S
                counted = count_tree(count_root, count_own)
                processes_seen = max(processes_seen or 0, counted)
                if counted > max_processes:
                    ending = Ending.process_limit
                    break
            if cancel is not None and cancel.is_set():
                ending = Ending.cancelled
                break
            read_spool()
            if state.oversize:
                ending = Ending.oversize
                break
            if state.action is LineAction.STOP:
                ending = Ending.early_stop
                break
            if proc.poll() is not None or getattr(proc, "lost", False):
                # The leader is gone (or its supervisor: then the guard killed the tree); give descendants a short, bounded chance to flush.
                if exit_seen_at is None:
                    exit_seen_at = now
                    while not read_spool():
                        pass  # the leader's writes are all in the file now: every line, here
                if not open_fds or now - exit_seen_at >= _EXIT_DRAIN_S:
                    ending = Ending.exited
                    break
            if now >= deadline:
                ending = Ending.deadline
                break
            if state.terminal_at is not None and now >= state.terminal_at + linger_s:
                ending = Ending.linger
                break
            wake = deadline
            if state.terminal_at is not None:
                wake = min(wake, state.terminal_at + linger_s)
            timeout = max(0.0, min(_POLL_S, wake - now))
            if sel.get_map():
                read_ready(timeout)
            else:
                time.sleep(timeout)
    finally:
        # Every ending (and any exception from on_line, or an interrupt) ends the tree here.
        attempts = 0

        def cleanup() -> bool:
            nonlocal attempts
            attempts += 1  # an interrupt during cleanup restarts it without the grace period
            graceful = ending in (Ending.deadline, Ending.linger, Ending.cancelled)
            grace = term_grace_s if graceful and attempts == 1 else 0.0
            killed_escapees = terminate_tree(proc, pgid, marker, grace, wait_step=_safe_wait(drain))
            _safe_wait(drain)(_KILL_DRAIN_S)
            return killed_escapees

        try:
            orphans = bool(_shielded(cleanup))
        finally:
            sel.close()
            _close_fds(spool_r)
            if stdin_feed is not None:
                stdin_feed.close()  # writes after the ending are dropped
            if pidfd is not None:
                with contextlib.suppress(OSError):
                    os.close(pidfd)
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    _close_quietly(stream)
            if proc.returncode is not None or isinstance(proc, _Supervised):
                _unregister(proc)
            if isinstance(proc, _Supervised):
                proc.close()  # the supervisor kills whatever is left and exits

    rc = proc.returncode
    exit_code = rc if rc is not None and rc >= 0 else None
    sig = -rc if rc is not None and rc < 0 else None
    tail = bytes(state.err).decode("utf-8", "replace")
    if state.err_dropped:
        # Drop the (probably cut) first partial line of the ring buffer.
        cut = tail.find("\n")
        if 0 <= cut < len(tail) - 1:
            tail = tail[cut + 1 :]
    tail = redact(tail, extra_secrets=secret_values(env))
    return ProcessResult(
        ending=ending,
        exit_code=exit_code,
        signal=sig,
        stderr_tail=tail,
        duration_s=time.monotonic() - started,
        orphan_suspected=orphans,
        oversize_limit=max_line_bytes if ending is Ending.oversize else None,
        partial_tail=state.partial_tail(),
        supervisor_lost=bool(getattr(proc, "lost", False)),
        containment=containment,
        containment_note=containment_note,
        processes_seen=processes_seen,
        process_count_note=count_note,
    )


#: How often a tree with a process limit is counted (s).
_COUNT_S = 0.1


def _count_root(proc: Any, containment: str) -> tuple[int, int, str]:
    """(the pid whose descendants are the whole tree, how many of them are bwrap's own, "")
    where the tree can be counted whole: the session supervisor (a subreaper; below it a
    sandbox's bwrap and its namespace's init), else a sandbox's bwrap (its namespace's init
    reaps every orphan; below it the init); (0, 0, why not) otherwise."""
    sandboxed = containment == "bwrap"
    if isinstance(proc, _Supervised) and proc.supervisor:
        return proc.supervisor, 2 if sandboxed else 0, ""
    if sandboxed:
        return proc.pid, 1, ""
    return (
        0,
        0,
        (
            "the session's processes cannot be counted whole here (no process guard and no sandbox: a process "
            "that leaves the tree is re-parented outside it), so the processes limit is not enforced"
        ),
    )


def count_tree(root: int, own: int = 0) -> int:
    """Live processes below `root` (zombies not counted), less `own` of them that are not the
    CLI's (a sandbox's bwrap processes)."""
    table: dict[int, tuple[int, bytes]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                data = fh.read()
            fields = data[data.rfind(b")") + 2 :].split()
            table[int(entry)] = (int(fields[1]), fields[0])
        except (OSError, ValueError, IndexError):
            continue
    children: dict[int, list[int]] = {}
    for pid, (ppid, _state) in table.items():
        children.setdefault(ppid, []).append(pid)
    count, todo = 0, [root]
    while todo:
        for kid in children.get(todo.pop(), ()):
            todo.append(kid)
            if table[kid][1] not in (b"Z", b"X"):
                count += 1
    return max(0, count - own)


#: Waits between attempts to start an executable that is busy (ETXTBSY): ~0.4 s in all.
BUSY_RETRY_S = (0.005, 0.02, 0.05, 0.1, 0.2)


def when_not_busy(start: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`start(*args, **kwargs)` (Popen, subprocess.run), tried again for a moment while the
    executable is busy (ETXTBSY). A file just written is busy as long as any process holds
    it open for writing, and in a threaded host that includes a child another thread has
    just forked and not yet exec'd (its copy of the fd table holds the writer until exec): a
    fake CLI or a wrapper written a moment before, or a CLI an installer is replacing."""
    for delay in (*BUSY_RETRY_S, None):
        try:
            return start(*args, **kwargs)
        except OSError as exc:
            if exc.errno != errno.ETXTBSY or delay is None:
                raise
            time.sleep(delay)


def _safe_wait(drain: Callable[[float], None]) -> Callable[[float], None]:
    """A wait step that drains the pipes but never lets a parser exception stop the kill."""

    def step(seconds: float) -> None:
        try:
            drain(seconds)
        except KeyboardInterrupt:
            raise
        except Exception:
            time.sleep(seconds)

    return step


def _read_all(fd: int, bound_s: float) -> bytes:
    """What a pipe gives until EOF, a closing brace (bwrap's info JSON) or `bound_s`."""
    data = b""
    end = time.monotonic() + bound_s
    while b"}" not in data:
        left = end - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            break
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    return data


def _pidfd_open(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        return None


def _open_spool(directory: str | os.PathLike[str]) -> tuple[int, int]:
    """A fresh 0600 file in `directory` for a child's stdout: (read fd, write fd), its name
    already unlinked. The write end appends; neither end is inherited by accident (O_CLOEXEC)."""
    path = os.path.join(os.fspath(directory), f".stdout-{secrets.token_hex(8)}")
    flags = os.O_CLOEXEC | os.O_NOFOLLOW
    write_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | flags, 0o600)
    try:
        read_fd = os.open(path, os.O_RDONLY | flags)
    except BaseException:
        os.close(write_fd)
        raise
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
    return read_fd, write_fd


def _close_fds(*fds: int) -> None:
    for fd in fds:
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)


def _close_quietly(stream: Any) -> None:
    with contextlib.suppress(OSError, ValueError):
        stream.close()


# --- concurrency -----------------------------------------------------------------------

_slots_lock = threading.Lock()
_slots: dict[int, threading.BoundedSemaphore] = {}


class SlotBusy(TimeoutError):
    """No session slot became free within the wait (saturation, not a hang)."""


#: The documented default of Settings.concurrency (HARNESS_BACKEND_CONCURRENCY).
DEFAULT_CONCURRENCY = 2


@contextlib.contextmanager
def session_slot(limit: int | None = None, *, wait_s: float | None = None) -> Iterator[None]:
    """Hold one of the process-wide session slots: `limit` is the host's Settings.concurrency
    (HARNESS_BACKEND_CONCURRENCY; None: the default, 2). Never read from os.environ here: a
    transport passes its own settings.

    Calls with the same size share one semaphore. With `wait_s`, raise SlotBusy if no slot
    frees up in time (a transport passes what is left of the session's timeout_s).
    """
    size = DEFAULT_CONCURRENCY if limit is None else limit
    if size <= 0:
        raise ValueError("limit must be > 0")
    with _slots_lock:
        sem = _slots.get(size)
        if sem is None:
            sem = _slots[size] = threading.BoundedSemaphore(size)
    if wait_s is not None and wait_s <= 0:
        acquired = sem.acquire(blocking=False)
    else:
        acquired = sem.acquire(timeout=wait_s) if wait_s is not None else sem.acquire()
    if not acquired:
        raise SlotBusy(f"all {size} session slots stayed busy for {wait_s:g} s (HARNESS_BACKEND_CONCURRENCY={size})")
    try:
        yield
    finally:
        sem.release()


__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "DEFAULT_STDERR_TAIL_BYTES",
    "Ending",
    "LineAction",
    "LineTooLong",
    "ProcessResult",
    "SlotBusy",
    "find_marked",
    "run_process",
    "session_slot",
    "terminate_tree",
]
