"""Temp dirs named after the process that made them, and the sweep of those whose maker is gone.

A process removes the temp dirs it makes when it is done with them (a `finally`, an atexit
handler); only a process killed outright (SIGKILL: an ending run's last resort, the OOM killer)
never gets there. So a dir made outside any run dir is named `<prefix><pid>-<start time>-<random>`
after its maker, and the next process that makes one with the same prefix first removes those of
this user whose maker is no longer alive (no process with that pid and start time). A dir of a
live maker, a name of another form, another user's entry or a non-dir is left alone; without
/proc (not Linux) nothing is removed. Pids are read in this process's pid namespace: hosts in
containers of their own that share one temp dir are not supported.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path


def start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot, /proc/<pid>/stat field 22), None when
    it is gone or there is no /proc: with the pid, it names one process, never a later one that
    reuses the pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def maker_prefix(prefix: str) -> str:
    """`prefix` followed by this process's pid and start time (just `prefix` without /proc)."""
    started = start_time(os.getpid())
    return f"{prefix}{os.getpid()}-{started}-" if started else prefix


def sweep_orphans(prefix: str, parent: str) -> list[Path]:
    """Remove the dirs in `parent` named `<prefix><pid>-<start time>-*`, this user's, whose maker
    is gone, and return them (the module docstring says what is left alone)."""
    if start_time(os.getpid()) is None:
        return []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return []
    removed: list[Path] = []
    for entry in entries:
        if not entry.name.startswith(prefix):
            continue
        pid, _, rest = entry.name[len(prefix) :].partition("-")
        started, _, _ = rest.partition("-")
        if not (pid.isdigit() and started.isdigit()) or start_time(int(pid)) == started:
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid():
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(Path(entry.path))
    return removed


def make_temp_dir(prefix: str, parent: str | None = None) -> Path:
    """A fresh 0700 dir `<parent>/<prefix><pid>-<start time>-<random>` (parent: the system temp
    dir), made after removing those of makers that are gone (sweep_orphans)."""
    parent = parent or tempfile.gettempdir()
    sweep_orphans(prefix, parent)
    return Path(tempfile.mkdtemp(prefix=maker_prefix(prefix), dir=parent))
