"""Process guard: the group leader between the host and a backend CLI.

    python -I -S _procguard.py HOST_PID EXECUTABLE LC_CTYPE -- ARGV...

LC_CTYPE is "-" when the child env has none, else "=" + its value: Python's locale coercion
(PEP 538) may have changed it in the guard's own environment, and the CLI must get the
environment exactly as the host built it.

Why: PR_SET_PDEATHSIG only reaches the *direct* child, and it is not inherited by forks. If
the host is SIGKILLed, a CLI started directly would die but its own children (MCP bridge,
shells, node workers) would live on. The guard is started by run_process in a new session
and arms a parent-death signal (SIGUSR1) for itself; it forks and execs the CLI in the same process group
and, when the host dies, SIGKILLs the whole group plus every process that still carries
the run marker (HARNESSCHECK_RUN) in its environment.

While the host lives the guard is invisible: it ignores SIGTERM (the group SIGTERM reaches
the CLI directly), holds none of the CLI's pipes, and mirrors the CLI's exit status
(exit code, or the same fatal signal). This file imports nothing from harnesscheck and
only stdlib built-ins, so it starts in a few milliseconds.
"""

import _signal as signal  # the C module: `signal` would import enum & co (~25 ms)
import os
import sys

DEATH_SIGNAL = signal.SIGUSR1
MARKER_VAR = "HARNESSCHECK_RUN"
_PR_SET_PDEATHSIG = 1


def _sweep_and_kill() -> None:
    """Host is gone: kill marked processes outside the group, then the group (and us)."""
    marker = os.environ.get(MARKER_VAR, "")
    me = os.getpid()
    pgid = os.getpgrp()
    if marker:
        needle = (MARKER_VAR + "=" + marker).encode()
        for _ in range(3):
            hits = 0
            try:
                entries = os.listdir("/proc")
            except OSError:
                break
            for entry in entries:
                if not entry.isdigit() or int(entry) == me:
                    continue
                try:
                    with open("/proc/" + entry + "/environ", "rb") as fh:
                        data = fh.read()
                except OSError:
                    continue
                if not (
                    data.startswith(needle + b"\0")
                    or (b"\0" + needle + b"\0") in data
                    or data.endswith(b"\0" + needle)
                    or data == needle
                ):
                    continue
                pid = int(entry)
                hits += 1
                try:
                    other = os.getpgid(pid)
                    if other != pgid and other > 1:
                        os.killpg(other, signal.SIGKILL)
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            if not hits:
                break
    try:
        os.killpg(pgid, signal.SIGKILL)
    finally:
        os._exit(137)


def _on_host_death(signum, frame):  # noqa: ARG001 - signal handler signature
    _sweep_and_kill()


def _set_pdeathsig(sig: int) -> bool:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError, ImportError):
        return False


def _child_exec(executable: str, argv: list, env: dict, host_guard_pid: int) -> None:
    """In the forked child: restore default signals, die with the guard, exec the CLI."""
    try:
        for sig in (signal.SIGTERM, DEATH_SIGNAL, signal.SIGPIPE, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
            signal.signal(sig, signal.SIG_DFL)
        if hasattr(signal, "SIGXFSZ"):
            signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
        _set_pdeathsig(signal.SIGKILL)  # the CLI dies with the guard, too
        if os.getppid() != host_guard_pid:
            os._exit(137)
        os.execve(executable, argv, env)
    except BaseException as exc:  # exec failed: report like a shell would
        try:
            os.write(2, ("harnesscheck guard: cannot run %s: %s\n" % (executable, exc)).encode())
        finally:
            os._exit(127)


def main() -> None:
    args = sys.argv[1:]
    if len(args) < 5 or args[3] != "--" or not args[2].startswith(("-", "=")):
        os.write(2, b"usage: _procguard.py HOST_PID EXECUTABLE LC_CTYPE -- ARGV...\n")
        os._exit(2)
    host_pid = int(args[0])
    executable = args[1]
    env = dict(os.environ)
    if args[2] == "-":
        env.pop("LC_CTYPE", None)
    else:
        env["LC_CTYPE"] = args[2][1:]
    argv = args[4:]
    signal.signal(DEATH_SIGNAL, _on_host_death)
    # A host thread may have signals blocked; the mask survives exec. Unblock everything so
    # the death signal arrives and the CLI starts with a clean mask.
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    # Signals sent to the whole group are for the CLI; the guard outlives it to report.
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_IGN)
    # Parent-death signal. Gotcha: it fires when the host *thread* that spawned us exits,
    # not the host process; run_process is synchronous, so that thread outlives us.
    if not _set_pdeathsig(DEATH_SIGNAL):
        os.write(2, b"harnesscheck guard: prctl(PR_SET_PDEATHSIG) unavailable\n")
    if os.getppid() != host_pid:  # the host died before the death signal was armed
        os._exit(137)

    guard_pid = os.getpid()
    child = os.fork()
    if child == 0:
        _child_exec(executable, argv, env, guard_pid)
    # Hold none of the CLI's pipes: EOF on them must mean the CLI side closed them.
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)

    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except ChildProcessError:
            os._exit(127)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            import resource

            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        except (ImportError, ValueError, OSError):
            pass
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    main()
