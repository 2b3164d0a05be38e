"""Bridge forkserver, what runs inside the forkserver process besides its loop: the checks on a
relay that connects (`_Peer`: its uid, its descent from the bound CLI, both still running;
`_read_regular`: the spec's current bytes), the registrations and the relays held until their
binding, a served child (`_Child`, `_await_session`, `_report_exit`) and the spare forked ahead
(`_Spare`, `_preimport`, `_warm_up`), and the process's own hardening.

Contract: doc/SPEC-bridge.md, "Forkserver", and the docstring of bridge/forkserver.py (the
host side); the loop that drives these is bridge/forkserver_process.py.
"""

from __future__ import annotations

import os
import signal
import socket
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from harnesscheck.bridge.forkserver import MAX_MESSAGE, RELAY_EXIT_WAIT_S, _close_fds, _peer_cred

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


#: SO_PEERPIDFD (Linux 6.5+): a pidfd for the process that connect()ed. Its value is 77 on the
#: architectures using the generic socket.h; elsewhere only Python's own constant is trusted.
_SO_PEERPIDFD = getattr(socket, "SO_PEERPIDFD", None) or (
    77 if os.uname().machine in ("x86_64", "i686", "i386", "aarch64", "armv7l", "riscv64", "s390x", "ppc64le") else None
)


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
