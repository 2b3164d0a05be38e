"""Which binary a session really ran (selection.runs-the-given-cli).

The kit always names the CLI a backend must run (the fake CLI at offline, the exec wrapper of
the pinned real CLI at loopback). A backend may ignore that path and run a binary of its
own (an SDK's bundled CLI): then every cell judges a CLI the kit never controlled. Two kinds
of evidence, both from outside the backend:

- the named CLI's own invocation record (`run.children`): each session it ran says the path it
  was started as (`argv[0]`, resolved against the recorded cwd) — deterministic;
- `NamedProcessWatcher`: polls /proc while the session runs for processes in the kit's own
  process tree (the backend runs in-process, so everything it starts is below it) whose
  command names the CLI (`argv[0]`, an interpreter's script argument, or the executable),
  remembering pid, parent and argv. Polling can miss a process that lives only a few ms: what
  it sees is evidence, what it misses proves nothing.
"""

from __future__ import annotations

import os
import threading

from harnesscheck.loopback.adapter import proc_table

#: Programs that run a script named by a later argument (`python -IS /x/cli`, `node /x/cli.js`).
_INTERPRETERS = ("python", "node", "bun", "deno", "sh", "bash", "dash", "env")


def ran_as(record: dict) -> str:
    """The real path an invocation record's process was started as: `argv[0]` resolved against
    the cwd it recorded (a relative argv[0] is relative to it), symlinks followed."""
    argv = record.get("argv") or [""]
    return os.path.realpath(os.path.join(record.get("cwd") or "/", str(argv[0])))


def names_cli(argv: list[str], exe: str, name: str) -> bool:
    """Whether a process's command is a program called `name`: its argv[0], or, for an
    interpreter, the first argument that is no option (the script), or its executable."""
    if not argv:
        return os.path.basename(exe) == name
    if os.path.basename(argv[0]) == name or os.path.basename(exe) == name:
        return True
    if os.path.basename(argv[0]).startswith(_INTERPRETERS):
        script = next((a for a in argv[1:4] if not a.startswith("-")), "")
        return os.path.basename(script) == name
    return False


def _command(pid: int) -> tuple[list[str], str, str] | None:
    """(argv, executable, cwd) of a live process, None once it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = [a.decode("utf-8", "replace") for a in fh.read().split(b"\0") if a]
    except OSError:
        return None
    links = []
    for link in ("exe", "cwd"):
        try:
            links.append(os.readlink(f"/proc/{pid}/{link}"))
        except OSError:
            links.append("")
    return argv, links[0], links[1]


def program_path(argv: list[str], exe: str, cwd: str) -> str:
    """The real path of the program a process runs: an interpreter's script, else argv[0]
    (resolved against the process's cwd), else its executable."""
    if argv and os.path.basename(argv[0]).startswith(_INTERPRETERS):
        script = next((a for a in argv[1:4] if not a.startswith("-")), "")
        if script:
            return os.path.realpath(os.path.join(cwd or "/", script))
    if argv and ("/" in argv[0] or not exe):
        return os.path.realpath(os.path.join(cwd or "/", argv[0]))
    return exe


class NamedProcessWatcher:
    """Polls /proc every `interval_s` while a session runs: every descendant of `root` (default
    this process) is remembered with its parent; those whose command names `name` with their
    argv. A context manager: started on enter, stopped on exit."""

    def __init__(self, name: str, root: int | None = None, interval_s: float = 0.01):
        self.name = name
        self.root = os.getpid() if root is None else root
        self.interval_s = interval_s
        self.parents: dict[int, int] = {}  # every descendant seen -> its parent
        self.named: dict[int, dict] = {}  # pid -> {"pid", "ppid", "argv", "exe", "path"} of those named `name`
        self.available = os.path.isdir("/proc/self")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="hc-cli-watch")

    def __enter__(self) -> "NamedProcessWatcher":
        if self.available:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self.available:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.poll()
            self._stop.wait(self.interval_s)

    def poll(self) -> None:
        table = proc_table()
        children: dict[int, list[int]] = {}
        for pid, ppid in table.items():
            children.setdefault(ppid, []).append(pid)
        stack = list(children.get(self.root, []))
        while stack:
            pid = stack.pop()
            stack.extend(children.get(pid, []))
            if pid in self.named:
                continue
            # not named yet: looked at again at every poll, since a process first seen between
            # its fork and its exec still shows its parent's command
            self.parents[pid] = table[pid]
            command = _command(pid)
            if command is not None and names_cli(command[0], command[1], self.name):
                argv, exe, cwd = command
                self.named[pid] = {"pid": pid, "ppid": table[pid], "argv": argv, "exe": exe, "path": program_path(argv, exe, cwd)}

    def strays(self, named: str, allowed: list[int]) -> list[dict]:
        """The processes named like the CLI that ran neither the `named` path (a version probe
        of it included) nor are one of the `allowed` pids (the named CLI's sessions, as its own
        records say: at loopback the wrapper execs the real binary in place) or a descendant
        of one (what that CLI started itself)."""
        allowed_set = set(allowed)
        named_path = os.path.realpath(named)
        out = []
        for pid, info in sorted(self.named.items()):
            if info["path"] == named_path:
                continue
            seen, cur = set(), pid
            while cur in self.parents and cur not in allowed_set and cur not in seen:
                seen.add(cur)
                cur = self.parents[cur]
            if cur not in allowed_set:
                out.append(info)
        return out
