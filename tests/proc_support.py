"""Watching processes from a test: alive (a zombie counts as gone) and what survives."""

from __future__ import annotations

import time
from pathlib import Path


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] not in (b"Z", b"X")


def survivors(pids: list[int], within_s: float = 15.0) -> list[int]:
    """Pids still alive after waiting up to within_s (SIGKILL delivery is asynchronous)."""
    end = time.monotonic() + within_s
    while True:
        left = [p for p in pids if alive(p)]
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.05)
