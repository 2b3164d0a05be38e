"""Process guard and session supervisors: every session's tree lives under a child subreaper.

    python -I -S _procguard.py HOST_PID

One guard per host process (started by process.py). It is a child subreaper
(PR_SET_CHILD_SUBREAPER) and keeps SPARES pre-forked *supervisors*, each a subreaper too and,
where the machine allows, in a fresh cgroup v2 of its own. A session's CLI is spawned by one
supervisor, so whatever the CLI's tree does (setsid, double fork, fork-hopping, a blanked or
overwritten environment, PR_SET_DUMPABLE 0) every descendant stays a descendant of that
supervisor: a process whose parent dies is re-parented to the nearest subreaper ancestor, the
supervisor, never to init. The supervisor kills its whole tree when the host asks (teardown),
when the host's end of the session socket closes (the host died, even by SIGKILL), and before
it exits. See doc/SPEC-process.md ("Containment") for what each layer guarantees.

Why pre-forked: the spawn path then costs no fork of Python (a fork of even this small
interpreter takes milliseconds on a loaded machine); the guard forks the next spare after a
spare is taken, off the session's critical path.

Protocol (fd 0 is an AF_UNIX SOCK_SEQPACKET socket whose other end only the host holds):
- host -> a spare: one message b"s" with SCM_RIGHTS [session socket, stdin, stdout, stderr]
  (stdin may be absent: /dev/null). Every spare blocks in recvmsg on fd 0, so exactly one
  takes it; it tells the guard through the `taken` pipe, and the guard forks a replacement.
- host -> supervisor, on the session socket (SOCK_STREAM): 8 hex digits of length, then a
  marshal of (executable, argv, env, cwd) or (executable, argv, env, cwd, info_fd) (bytes,
  str and int only). `info_fd` > 0: a sandboxed CLI (bwrap, sandbox.py): the write end of a
  pipe is its fd `info_fd` (`--info-fd`), and the supervisor reads from it the pid of the
  namespace's init, whose process group holds the CLI.
- supervisor -> host, lines on the session socket:
      p PID SUP CGROUP [INNER]  the CLI runs (SUP: this supervisor; CGROUP: the session
                       cgroup, or -; INNER: a sandbox's init pid, its group the CLI's)
      e ERRNO          the spawn failed (nothing runs)
      x STATUS         the CLI (the direct child) exited; STATUS is the raw wait status
      d KILLED OUTSIDE LEFT    answer to `k`: KILLED processes were killed, OUTSIDE of them had
                       left the CLI's process group, LEFT could not be confirmed gone (the
                       tree is empty when LEFT is 0)
- host -> supervisor: b"k" kill the whole tree now and answer `d`. EOF: the host is done (or
  dead): kill the tree, exit.
- EOF on fd 0 (the host is gone): the guard writes cgroup.kill of every session cgroup,
  SIGKILLs every supervisor (their trees are re-parented to the guard) and then every
  descendant, in rounds until none is left; then it exits.
- The guard's fd 0 and each session socket are O_ASYNC with F_SETSIG=SIGCONT: the host's
  death resumes a guard or supervisor that a CLI had SIGSTOPped, so it can act.
- A supervisor that dies or is stopped (SIGSTOP/ptrace: tampering by a same-uid process)
  while its session runs: the guard SIGKILLs it, kills its cgroup, and kills every process
  re-parented to itself (the guard's only rightful children are supervisors).

Imports only built-ins, `_socket`, `select`, `marshal` and `ctypes` (for prctl).
"""

import _signal as signal  # the C module: `signal` would import enum & co (~25 ms)
import _socket
import marshal
import os
import select
import sys
import time

PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
SPARES = 2
KILL_ROUNDS = 200
TICK_MS = 250  # how often supervisors are checked for tampering (stopped)
_SCM_RIGHTS = 1
_SOL_SOCKET = 1
_MSG_CMSG_CLOEXEC = 0x40000000
#: Every signal the CLI gets at its default disposition (an ignored one survives exec; Python
#: ignores SIGPIPE, we ignore SIGINT/SIGHUP/SIGQUIT), as a directly spawned CLI would.
_SIGDEF = tuple(s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP))

_prctl = None


def _prctl_call(option: int, value: int) -> bool:
    global _prctl
    if _prctl is None:
        try:
            import ctypes

            _prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (ImportError, OSError, AttributeError):
            _prctl = False
    return bool(_prctl) and _prctl(option, value, 0, 0, 0) == 0


# --- the process table (no /proc/<pid>/task/<tid>/children on every kernel) ----------------


def _stat(pid: int):
    """(state, ppid, pgid) of pid, or None when it is gone."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    try:
        return fields[0], int(fields[1]), int(fields[2])
    except (IndexError, ValueError):
        return None


def _table() -> dict:
    """pid -> (state, ppid, pgid) for every process."""
    table = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return table
    for entry in entries:
        if entry.isdigit():
            st = _stat(int(entry))
            if st is not None:
                table[int(entry)] = st
    return table


def descendants(root: int, table: dict) -> list:
    """Every live (non-zombie) descendant of root, by the parent links of `table`."""
    children: dict = {}
    for pid, (_state, ppid, _pgid) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        for kid in children.get(todo.pop(), ()):
            todo.append(kid)
            if table[kid][0] not in (b"Z", b"X"):
                out.append(kid)
    return out


def reap() -> list:
    """Reap every exited child; [(pid, status)]."""
    done = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return done
        except InterruptedError:
            continue
        if pid == 0:
            return done
        done.append((pid, status))


def kill_tree(root: int, on_reaped=None, cli_pgid=0, inner_pgid=0):
    """SIGKILL every descendant of root (we are root, a subreaper), in rounds: a process killed
    in one round may have forked; its child is re-parented to us and is killed in the next.
    The end is decided by waitid (we have no child left at all), not by a /proc scan, which a
    process forking while it is read can slip through. Returns (killed, outside, left)."""
    killed, outside, seen = 0, 0, set()
    for _ in range(KILL_ROUNDS):
        for pid, status in reap():
            if on_reaped is not None:
                on_reaped(pid, status)
        if not has_children():
            return killed, outside, 0
        table = _table()
        for pid in descendants(root, table):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                continue
            if pid not in seen:
                seen.add(pid)
                killed += 1
                _state, _ppid, pgid = table[pid]
                inside = (cli_pgid, inner_pgid) if inner_pgid else (cli_pgid,)
                if pid not in inside and pgid not in inside:
                    outside += 1  # it had left the CLI's process group (setsid, setpgid)
        time.sleep(0.001)
    table = _table()
    return killed, outside, max(1, len(descendants(root, table)))


def has_children() -> bool:
    """Whether we have any child at all (live or not yet reaped)."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        return True
    except ChildProcessError:
        return False
    except InterruptedError:
        return True


# --- cgroup v2 (optional layer) --------------------------------------------------------------


def _cgroup_base(host_pid: int) -> str:
    """A fresh directory for this host's session cgroups beneath our own cgroup v2, or "" when
    the machine does not allow one (no cgroup2 mount, no write access: a non-root host without
    a delegated subtree)."""
    try:
        with open("/proc/self/cgroup") as fh:
            own = [line.split(":", 2)[2].strip() for line in fh if line.startswith("0::")]
        mount = ""
        with open("/proc/self/mountinfo") as fh:
            for line in fh:
                left, _, right = line.partition(" - ")
                if right.split(" ", 1)[0] == "cgroup2":
                    mount = left.split()[4]
                    break
        if not own or not mount:
            return ""
        parent = mount + own[0].rstrip("/")
        if own[0] == "/" or not os.path.exists(parent + "/cgroup.kill"):
            parent = mount if own[0] == "/" else parent
        if not os.path.exists(parent + "/cgroup.procs"):
            return ""
        base = "%s/harnesscheck-%d-%s" % (parent, host_pid, os.urandom(4).hex())
        os.mkdir(base, 0o755)
        if not os.path.exists(base + "/cgroup.kill"):  # kernels before 5.14: no cgroup.kill
            os.rmdir(base)
            return ""
        return base
    except (OSError, IndexError, ValueError):
        return ""


def wake_on_hangup(fd: int) -> None:
    """Have the kernel send us SIGCONT when `fd` (our end of a socket whose other end only the
    host holds) becomes readable or hung up: a same-uid CLI may SIGSTOP us, and a stopped
    process cannot notice the host's death by itself. SIGCONT resumes us (it interrupts no
    call and its default action is only to continue)."""
    try:
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETOWN, os.getpid())
        fcntl.fcntl(fd, getattr(fcntl, "F_SETSIG", 10), signal.SIGCONT)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_ASYNC)
    except (ImportError, OSError, AttributeError):
        pass


def fcntl_dupfd(fd: int) -> int:
    """A close-on-exec copy of fd numbered 10 or above (never one of the stdio targets)."""
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)


def _write(path: str, data: bytes) -> bool:
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError:
        return False
    try:
        os.write(fd, data)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def cgroup_kill(path: str) -> None:
    if path:
        _write(path + "/cgroup.kill", b"1")


def cgroup_remove(path: str, wait_s: float = 0.0) -> bool:
    """rmdir the cgroup and any child cgroups beneath it (only empty ones can go)."""
    if not path:
        return True
    end = time.monotonic() + wait_s
    while True:
        try:
            for dirpath, dirnames, _files in _walk_bottom_up(path):
                os.rmdir(dirpath)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() >= end:
                return False
            time.sleep(0.005)


def _walk_bottom_up(path: str):
    try:
        names = [e.name for e in os.scandir(path) if e.is_dir(follow_symlinks=False)]
    except OSError:
        names = []
    for name in names:
        yield from _walk_bottom_up(path + "/" + name)
    yield path, names, ()


# --- a supervisor: one session ---------------------------------------------------------------


def _recv_request(sock):
    """Wait for one session request; (fds) or None at EOF."""
    while True:
        try:
            msg, anc, _flags, _addr = sock.recvmsg(16, _socket.CMSG_SPACE(4 * 4), _MSG_CMSG_CLOEXEC)
        except InterruptedError:
            continue
        except OSError:
            return None
        fds = []
        for level, kind, data in anc:
            if level == _SOL_SOCKET and kind == _SCM_RIGHTS:
                usable = len(data) - len(data) % 4
                fds.extend(int.from_bytes(data[i : i + 4], sys.byteorder) for i in range(0, usable, 4))
        if not msg:
            for fd in fds:
                os.close(fd)
            return None
        if msg == b"s" and len(fds) in (3, 4):
            return fds
        for fd in fds:  # not a request: ignore
            os.close(fd)


def _read_exact(fd: int, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = os.read(fd, n - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return out


def _send(fd: int, line: str) -> None:
    data = line.encode("ascii")
    try:
        while data:
            data = data[os.write(fd, data) :]
    except OSError:
        pass  # the host is gone: our tree dies at EOF anyway


def end_tree(me: int, reaped, cli: int, inner: int = 0):
    """Kill everything beneath us; (killed, outside, left)."""
    return kill_tree(me, on_reaped=reaped, cli_pgid=cli, inner_pgid=inner)


def _read_info(fd: int, bound_s: float = 10.0) -> int:
    """The namespace init's pid from bwrap's --info-fd JSON (0: none came: bwrap failed and
    says why on stderr)."""
    data = b""
    end = time.monotonic() + bound_s
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    while b"}" not in data:
        left = end - time.monotonic()
        if left <= 0:
            break
        try:
            if not poller.poll(int(left * 1000) + 1):
                break
            chunk = os.read(fd, 4096)
        except InterruptedError:
            continue
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    key = b'"child-pid"'
    at = data.find(key)
    if at < 0:
        return 0
    digits = data[at + len(key) :].lstrip(b" :\t\r\n")
    n = 0
    while n < len(digits) and 48 <= digits[n] <= 57:
        n += 1
    return int(digits[:n]) if n else 0


def serve(sess: int, stdio: list, cgroup: str) -> bool:
    """One session: spawn its CLI, reap and report, kill the tree at the end. True when the
    tree is confirmed gone (this supervisor may serve another session)."""
    me = os.getpid()
    wake_on_hangup(sess)
    try:
        size = int(_read_exact(sess, 8), 16)
        request = marshal.loads(_read_exact(sess, size))
        executable, argv, env, cwd = request[:4]
        info_fd = int(request[4]) if len(request) > 4 else 0
    except (EOFError, OSError, ValueError, TypeError, IndexError):
        return True
    if len(stdio) == 2:  # no stdin pipe: /dev/null
        stdio = [os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)] + stdio
    actions = [(os.POSIX_SPAWN_DUP2, fd, n) for n, fd in enumerate(stdio)]
    info_r = info_w = -1
    if info_fd > 2:
        try:
            r, w = os.pipe()
            info_r = fcntl_dupfd(r)
            info_w = fcntl_dupfd(w)
            os.close(r)
            os.close(w)
            actions.append((os.POSIX_SPAWN_DUP2, info_w, info_fd))
        except OSError:
            info_fd = 0
    try:
        os.chdir(cwd)
        cli = os.posix_spawn(executable, argv, env, file_actions=actions, setsid=True, setsigdef=_SIGDEF, setsigmask=())
    except OSError as exc:
        _send(sess, "e %d\n" % (exc.errno or 5))
        for fd in (info_r, info_w):
            if fd >= 0:
                os.close(fd)
        return True
    finally:
        for fd in stdio:
            os.close(fd)
        os.chdir("/")
    inner = 0
    if info_r >= 0:
        os.close(info_w)
        inner = _read_info(info_r)
        os.close(info_r)
    if inner:
        _send(sess, "p %d %d %s %d\n" % (cli, me, cgroup or "-", inner))
    else:
        _send(sess, "p %d %d %s\n" % (cli, me, cgroup or "-"))
    try:
        cli_fd = os.pidfd_open(cli)
    except OSError:
        cli_fd = -1
    poller = select.poll()
    poller.register(sess, select.POLLIN)
    if cli_fd >= 0:
        poller.register(cli_fd, select.POLLIN)
    cli_status = []

    def reaped(pid, status):
        if pid == cli and not cli_status:
            cli_status.append(status)
            _send(sess, "x %d\n" % status)

    try:
        while True:
            try:
                events = poller.poll(200)
            except InterruptedError:
                events = []
            for pid, status in reap():
                reaped(pid, status)
            if cli_status and cli_fd >= 0:
                poller.unregister(cli_fd)
                os.close(cli_fd)
                cli_fd = -1
            if not any(fd == sess for fd, _ev in events):
                continue
            try:
                cmd = os.read(sess, 64)
            except OSError:
                cmd = b""
            if not cmd:  # the host is done with us, or dead
                return end_tree(me, reaped, cli, inner)[2] == 0
            if b"k" in cmd:
                killed, outside, left = end_tree(me, reaped, cli, inner)
                _send(sess, "d %d %d %d\n" % (killed, outside, left))
    finally:
        if cli_fd >= 0:
            os.close(cli_fd)


def supervise(ctl, taken_w: int, cgroup: str) -> None:
    """A supervisor: serve one session after another, while each ends with an empty tree.

    Between sessions it is idle in recvmsg on the shared control socket. It tells the guard
    `b PID` when it takes a session and `f PID` when it is free again.
    """
    me = os.getpid()
    while True:
        got = _recv_request(ctl)
        if got is None:
            os._exit(0)
        _send(taken_w, "b %d\n" % me)
        sess, stdio = got[0], got[1:]
        try:
            clean = serve(sess, list(stdio), cgroup)
        finally:
            os.close(sess)
        if not clean:
            os._exit(1)  # the guard sweeps what is left and forks a fresh supervisor
        _send(taken_w, "f %d\n" % me)


# --- the guard -------------------------------------------------------------------------------


class Guard:
    def __init__(self, host_pid: int):
        self.host_pid = host_pid
        self.ctl = None  # fd 0, set by main
        self.base = _cgroup_base(host_pid)
        self.taken_r, self.taken_w = os.pipe()
        os.set_blocking(self.taken_r, False)
        self.spares: dict = {}  # pid -> (pidfd, cgroup)
        self.busy: dict = {}  # pid -> (pidfd, cgroup)
        self.next_id = 0

    def fork_spare(self) -> None:
        self.next_id += 1
        cgroup = "%s/s%d" % (self.base, self.next_id) if self.base else ""
        if cgroup:
            try:
                os.mkdir(cgroup, 0o755)
            except OSError:
                cgroup = ""
        try:
            pid = os.fork()
        except OSError:
            return
        if pid == 0:
            try:
                _prctl_call(PR_SET_CHILD_SUBREAPER, 1)
                if cgroup and not _write(cgroup + "/cgroup.procs", b"0"):
                    cgroup = ""
                os.close(self.taken_r)
                supervise(self.ctl, self.taken_w, cgroup)
            finally:
                os._exit(0)
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            pidfd = -1
        self.spares[pid] = (pidfd, cgroup)

    def supervisors(self):
        return {**self.spares, **self.busy}

    def forget(self, pid: int) -> None:
        entry = self.spares.pop(pid, None) or self.busy.pop(pid, None)
        if entry is None:
            return
        pidfd, cgroup = entry
        if pidfd >= 0:
            os.close(pidfd)
        if cgroup:
            cgroup_kill(cgroup)  # empty unless the supervisor died early: then its tree goes too
            cgroup_remove(cgroup, 1.0)

    def sweep_orphans(self) -> None:
        """Our rightful children are supervisors: anything else was re-parented to us when a
        supervisor died (tampering) and is killed with its descendants."""
        keep = set(self.supervisors())
        me = os.getpid()
        for _ in range(KILL_ROUNDS):
            table = _table()
            kids = [p for p, st in table.items() if st[1] == me and p not in keep and st[0] not in (b"Z", b"X")]
            victims = set(kids)
            for kid in kids:
                victims.update(descendants(kid, table))
            if not victims:
                break
            for pid in victims:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            self.reap()
            time.sleep(0.001)
        self.reap()

    def reap(self) -> bool:
        """Reap exited children; True when a supervisor ended without confirming its tree gone
        (killed, or unable to kill it all): its orphans may be ours now."""
        lost = False
        for pid, status in reap():
            if pid in self.spares or pid in self.busy:
                lost = lost or status != 0
                self.forget(pid)
            else:
                lost = True  # a re-parented orphan that exited: there may be more
        return lost

    def check_tampering(self) -> bool:
        """A stopped or traced supervisor cannot keep its promise: kill it (and its cgroup)."""
        hit = False
        for pid, (_fd, cgroup) in list(self.supervisors().items()):
            st = _stat(pid)
            if st is not None and st[0] in (b"T", b"t"):
                cgroup_kill(cgroup)
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
                hit = True
        return hit

    def take(self) -> None:
        """Supervisors say when they take a session (`b PID`) and when they are free (`f PID`)."""
        try:
            data = os.read(self.taken_r, 4096)
        except OSError:
            return
        words = data.split()
        for kind, word in zip(words[::2], words[1::2]):
            try:
                pid = int(word)
            except ValueError:
                continue
            if kind == b"b" and pid in self.spares:
                self.busy[pid] = self.spares.pop(pid)
            elif kind == b"f" and pid in self.busy:
                self.spares[pid] = self.busy.pop(pid)

    def end_all(self) -> None:
        """The host is gone: nothing of any session may survive."""
        for pid, (_fd, cgroup) in list(self.supervisors().items()):
            cgroup_kill(cgroup)
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        kill_tree(os.getpid())
        self.reap()
        for pid in list(self.supervisors()):
            self.forget(pid)
        if self.base:
            cgroup_kill(self.base)
            cgroup_remove(self.base, 1.0)

    def run(self) -> None:
        waiter = select.poll()
        waiter.register(0, 0)  # only POLLHUP (the host's end closed) wakes us for fd 0
        waiter.register(self.taken_r, select.POLLIN)
        registered = set()
        while True:
            while len(self.spares) < SPARES:
                before = len(self.spares)
                self.fork_spare()
                if len(self.spares) == before:
                    break  # cannot fork now: try again on the next tick
            for pid, (pidfd, _cg) in self.supervisors().items():
                if pidfd >= 0 and pidfd not in registered:
                    waiter.register(pidfd, select.POLLIN)
                    registered.add(pidfd)
            try:
                events = waiter.poll(TICK_MS)
            except InterruptedError:
                events = []
            live_fds = {fd for fd, _cg in self.supervisors().values()}
            for fd in [fd for fd in registered if fd not in live_fds]:
                registered.discard(fd)
            for fd, ev in events:
                if fd == 0 and ev & (select.POLLHUP | select.POLLERR | select.POLLNVAL):
                    self.end_all()
                    os._exit(0)
                if fd == self.taken_r:
                    self.take()
                elif fd in registered:
                    waiter.unregister(fd)
                    registered.discard(fd)
            tampered = self.check_tampering()
            if self.reap() or tampered:
                self.sweep_orphans()


def main() -> None:
    _prctl_call(PR_SET_DUMPABLE, 0)  # same-uid processes cannot ptrace us, take our fds or read /proc
    _prctl_call(PR_SET_CHILD_SUBREAPER, 1)  # a dead supervisor's tree comes to us, not to init
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    guard = Guard(int(sys.argv[1]))
    guard.ctl = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET, 0, 0)  # fd 0, as given
    wake_on_hangup(0)
    guard.run()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        os.write(2, b"usage: _procguard.py HOST_PID\n")
        os._exit(2)
    main()
