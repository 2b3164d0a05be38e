"""A hostile CLI: it starts a descendant that tries to outlive the session, then hangs.

usage: escape.py MODE PIDFILE [TOKEN]

Every process it makes appends its pid to PIDFILE (one O_APPEND write per line) *before* it
does anything else, so a test knows every pid that ever existed. Then "ready" is printed.
TOKEN (default "97") is the `sleep` duration of the exec'd escapees (e.g. 97.1234), so a
test can also find them by command line. Modes:

  setsid-env-i   `setsid env -i sleep TOKEN`: a new session and an empty environment (no marker)
  double-fork    fork, fork again, the middle one exits: the grandchild is an orphan in a new session
  fork-hop       keep forking: each child calls setsid, records itself, forks the next and exits
  nondumpable    a setsid child that sets PR_SET_DUMPABLE 0 (as ssh-agent and gpg-agent do)
  overwrite-env  a setsid child that overwrites its own environment block in memory (no exec)
  ssh-agent      `ssh-agent -a SOCKET` as `eval $(ssh-agent)` would start it (daemonizes)
  stop-supervisor  SIGSTOP the parent (the session's supervisor) and its parent, then a setsid escapee
  kill-supervisor  SIGKILL the parent, then a setsid escapee (re-parented to whoever is above)
"""

import os
import signal
import subprocess
import sys
import time

mode, pidfile = sys.argv[1], sys.argv[2]
token = sys.argv[3] if len(sys.argv) > 3 else "97"


def record(pid: int) -> None:
    fd = os.open(pidfile, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, f"{pid}\n".encode())
    os.close(fd)


def prctl(option: int, value: int) -> None:
    import ctypes

    ctypes.CDLL(None).prctl(option, value, 0, 0, 0)


def linger() -> None:
    while True:
        time.sleep(1)


def ppid_of(pid: int) -> int:
    stat = open(f"/proc/{pid}/stat", "rb").read()
    return int(stat[stat.rfind(b")") + 2 :].split()[1])


def setsid_child(then) -> None:
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            record(os.getpid())
            then()
        finally:
            os._exit(0)


record(os.getpid())
if mode == "setsid-env-i":
    proc = subprocess.Popen(["setsid", "env", "-i", "sleep", token])
    record(proc.pid)  # setsid forks when it leads a group; the exec'd sleep is found by TOKEN
elif mode == "double-fork":
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            record(os.getpid())
            linger()
        os._exit(0)
elif mode == "fork-hop":
    if os.fork() == 0:
        while True:
            os.setsid()
            record(os.getpid())
            time.sleep(0.005)
            if os.fork() != 0:
                os._exit(0)
elif mode == "nondumpable":
    setsid_child(lambda: (prctl(4, 0), linger()))
elif mode == "overwrite-env":

    def overwrite() -> None:
        stat = open("/proc/self/stat", "rb").read()
        fields = stat[stat.rfind(b")") + 2 :].split()
        start, end = int(fields[47]), int(fields[48])  # env_start, env_end (fields 50, 51)
        with open("/proc/self/mem", "r+b", buffering=0) as mem:
            mem.seek(start)
            mem.write(b"X" * (end - start - 1))
        linger()

    setsid_child(overwrite)
elif mode == "ssh-agent":
    sock = os.path.join(os.path.dirname(os.path.abspath(pidfile)), f"agent.{os.getpid()}")
    out = subprocess.run(["ssh-agent", "-s", "-a", sock], capture_output=True, text=True, check=True).stdout
    for part in out.split(";"):
        if "SSH_AGENT_PID=" in part:
            record(int(part.split("=")[1]))
elif mode == "stop-supervisor":
    parent = os.getppid()
    grand = ppid_of(parent)
    setsid_child(linger)
    time.sleep(0.05)
    for pid in (grand, parent):
        if pid > 1:
            try:
                os.kill(pid, signal.SIGSTOP)
            except OSError:
                pass
elif mode == "kill-supervisor":
    setsid_child(linger)
    time.sleep(0.05)
    os.kill(os.getppid(), signal.SIGKILL)
else:
    raise SystemExit(f"unknown mode {mode}")
time.sleep(0.2)  # the escapees have recorded themselves
print("ready", flush=True)
linger()
