"""Process guard: one per host process; kills every registered session tree when the host dies.

    python -I -S _procguard.py HOST_PID

Why: a CLI's own children (MCP bridge, shells, node workers) must not outlive the host,
even when the host is SIGKILLed or OOM-killed and runs no cleanup at all. PR_SET_PDEATHSIG
reaches only a direct child and is not inherited, so it cannot cover a CLI's tree.

Contract with the host (process.py):
- The guard is started once per host process, in its own session, with a scrubbed env,
  stdout/stderr on /dev/null, and stdin = one end of an AF_UNIX stream socketpair whose
  other end only the host holds (close-on-exec, closed in forked children). Not a pipe: a
  pipe can be reopened for writing through /proc/<guard>/fd/0 by any same-uid process
  (a CLI's shell tool), which could then inject registrations or hold a writer open so EOF
  never comes; a socket cannot be opened that way. It holds no other descriptor of the
  host: never a CLI's pipes.
- The guard makes itself non-dumpable (PR_SET_DUMPABLE 0) first thing, so same-uid
  processes cannot take its descriptor either (pidfd_getfd, ptrace) or list its fds.
- The host writes one line per event, each in a single small write under its lock;
  markers are hex-encoded so any marker fits on one line:
      + SID HEXMARKER    a session is about to spawn its CLI (before the spawn)
      g SID PGID         the CLI's process group
      - SID              the session's tree is torn down and reaped
  Anything else (a cut or garbage line) is ignored.
- EOF on stdin (the host's end closed everywhere) means the host is gone (died or exited). The guard then SIGKILLs every
  registered group and, in a few bounded /proc sweeps, every process whose environment
  carries HARNESSCHECK_RUN=<a registered marker> (descendants that left the group with
  setsid), and their groups. Then it exits 0.
- While the host lives the guard sleeps in poll() registered for no event, so host writes
  do not wake it; it reads the queued lines every 0.5 s (the socket buffer holds thousands
  of sessions' lines) and at EOF (POLLHUP). It costs next to nothing.

Imports only built-ins, `select` and `ctypes` (for prctl) so it starts in a few
milliseconds; the host does not wait for it (lines queue in the socket until it reads them).
"""

import _signal as signal  # the C module: `signal` would import enum & co (~25 ms)
import os
import select
import sys
import time

MARKER_VAR = "HARNESSCHECK_RUN"
SWEEP_ROUNDS = 5
DRAIN_EVERY_MS = 500  # read the queued lines this often
PR_SET_DUMPABLE = 4


def _not_dumpable() -> None:
    """PR_SET_DUMPABLE 0: same-uid processes cannot ptrace us, take our fds or read /proc."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (ImportError, OSError, AttributeError):
        pass


def _parse(line: bytes, markers: dict, groups: dict) -> None:
    """Apply one protocol line; ignore anything malformed."""
    parts = line.split()
    try:
        if len(parts) == 3 and parts[0] == b"+":
            marker = bytes.fromhex(parts[2].decode("ascii"))
            if marker and b"\0" not in marker:
                markers[parts[1]] = marker
        elif len(parts) == 3 and parts[0] == b"g" and parts[1] in markers:
            pgid = int(parts[2])
            if pgid > 1:
                groups[parts[1]] = pgid
        elif len(parts) == 2 and parts[0] == b"-":
            markers.pop(parts[1], None)
            groups.pop(parts[1], None)
    except (ValueError, UnicodeDecodeError):
        pass


def _carries(data: bytes, needle: bytes) -> bool:
    return (
        data.startswith(needle + b"\0")
        or (b"\0" + needle + b"\0") in data
        or data.endswith(b"\0" + needle)
        or data == needle
    )


def _kill_all(markers: dict, groups: dict) -> None:
    """The host is gone: kill the registered groups, then every marked process and its group."""
    me = os.getpid()
    own_group = os.getpgrp()
    for pgid in groups.values():
        if pgid != own_group:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except OSError:
                pass
    needles = [(MARKER_VAR + "=").encode() + m for m in set(markers.values())]
    if not needles:
        return
    for round_no in range(SWEEP_ROUNDS):
        hits = 0
        try:
            entries = os.listdir("/proc")
        except OSError:
            return
        for entry in entries:
            if not entry.isdigit() or int(entry) == me:
                continue
            try:
                with open("/proc/" + entry + "/environ", "rb") as fh:
                    data = fh.read()
            except OSError:
                continue
            if not data or not any(_carries(data, n) for n in needles):
                continue  # empty: a zombie or a kernel thread
            pid = int(entry)
            hits += 1
            try:
                other = os.getpgid(pid)
                if other != own_group and other > 1:
                    os.killpg(other, signal.SIGKILL)
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if not hits:
            return
        time.sleep(0.01)  # a process caught mid-fork: its child shows up in the next round


def main() -> None:
    _not_dumpable()
    # Group and terminal signals are not for us (we are in our own session anyway); a host
    # thread's blocked-signal mask would otherwise survive exec.
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    os.set_blocking(0, False)
    # Registered for no event: only POLLHUP (the last writer closed) or an error wakes us.
    # A host write therefore never wakes the guard (no context switch on the host's spawn
    # path); the queued lines are read every DRAIN_EVERY_MS and at EOF.
    waiter = select.poll()
    waiter.register(0, 0)
    markers: dict = {}  # session id -> marker bytes
    groups: dict = {}  # session id -> pgid
    pending = b""
    eof = False
    while not eof:
        try:
            waiter.poll(DRAIN_EVERY_MS)
        except InterruptedError:
            pass
        while True:
            try:
                chunk = os.read(0, 65536)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                chunk = b""
            if not chunk:
                eof = True
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                _parse(line, markers, groups)
            if len(pending) > 65536:  # never a valid line: drop the garbage
                pending = b""
    _kill_all(markers, groups)
    os._exit(0)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        os.write(2, b"usage: _procguard.py HOST_PID\n")
        os._exit(2)
    main()
