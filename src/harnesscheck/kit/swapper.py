"""The kit's TOCTOU swapper (scope.swap-race-contained): a separate process that keeps
exchanging one path component between a real directory inside the worktree and a symlink to
a directory outside it, while a backend's tool calls read through that component.

A process, not a thread: an in-process backend's dispatch runs in the kit's own interpreter,
where a thread would only swap at the GIL's switch interval; a process swaps whenever the
kernel runs it.

How it swaps: `renameat2(RENAME_EXCHANGE)` (ctypes) of `a` (the directory) and `b` (the
symlink), one atomic syscall, so `a` always exists and is either one; where the kernel or
the filesystem refuses that (ENOSYS, EINVAL), two renames through a hold name (`a` is
briefly missing then). Between two swaps it waits a random gap (0 to 2x `mean_gap_s`), so
the number of swaps inside any window is random: a fixed period could line up with a
reader's check-to-use window and keep the state the same at both ends of it.

Bounded: it stops at `max_s` seconds, at `max_swaps` swaps, or when its stdin reaches EOF
(the kit's "stop"), whichever comes first; it then puts the real directory back at `a` and
prints one JSON line: {"swaps", "mode", "errors", "elapsed_s", "stopped", "restored"}
(`stopped`: "stop" when the kit ended it, else the bound that did: "max_s", "max_swaps",
"errors" after 1,000 failed swaps). Before its first
gap it prints "ready" (one full exchange and back done: the swap works here).

    python -m harnesscheck.kit.swapper A B [--max-s S] [--max-swaps N] [--mean-gap-s G]

Stdlib only; `SwapRace` runs it from the kit.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import errno
import json
import os
import random
import select
import subprocess
import sys
import time
from pathlib import Path

AT_FDCWD = -100
RENAME_EXCHANGE = 2


class _Exchanger:
    """Swaps what the names `a` and `b` point at, one way or the other."""

    def __init__(self, a: str, b: str):
        self.a, self.b, self.hold = a, b, a + ".hold"
        self.mode = "exchange"
        self.flipped = False  # `a` currently holds what `b` held at the start
        self._renameat2 = None
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            fn = libc.renameat2
            fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
            fn.restype = ctypes.c_int
            self._renameat2 = fn
        if self._renameat2 is None:
            self.mode = "rename"

    def swap(self) -> None:
        if self.mode == "exchange":
            if self._renameat2(AT_FDCWD, os.fsencode(self.a), AT_FDCWD, os.fsencode(self.b), RENAME_EXCHANGE) == 0:
                self.flipped = not self.flipped
                return
            err = ctypes.get_errno()
            if err not in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                raise OSError(err, os.strerror(err))
            self.mode = "rename"
        # a -> hold, b -> a, hold -> b: `a` is missing between the first two renames
        os.rename(self.a, self.hold)
        try:
            os.rename(self.b, self.a)
        except OSError:
            os.rename(self.hold, self.a)
            raise
        self.flipped = not self.flipped
        os.rename(self.hold, self.b)

    def shape(self) -> tuple[bool, bool]:
        """(a is a symlink, b is a symlink); what `restored` compares with the start."""
        return os.path.islink(self.a), os.path.islink(self.b)

    def present(self) -> bool:
        return os.path.lexists(self.a) and os.path.lexists(self.b) and not os.path.lexists(self.hold)


def run(a: str, b: str, *, max_s: float, max_swaps: int, mean_gap_s: float, out=sys.stdout, stop_fd: int | None = 0) -> dict:
    """Swap until a bound or EOF on `stop_fd`; restore; return (and print) the summary."""
    ex = _Exchanger(a, b)
    before = ex.shape()
    start = time.monotonic()
    swaps = errors = 0
    rng = random.Random()
    ex.swap()
    ex.swap()
    swaps = 2
    out.write("ready\n")
    out.flush()
    stopped = "max_swaps"
    while swaps < max_swaps:
        left = max_s - (time.monotonic() - start)
        if left <= 0:
            stopped = "max_s"
            break
        gap = min(rng.uniform(0.0, 2.0 * mean_gap_s), left)
        if stop_fd is not None:
            readable, _, _ = select.select([stop_fd], [], [], gap)
            if readable and not os.read(stop_fd, 4096):
                stopped = "stop"  # EOF: the kit is done
                break
        elif gap > 0:
            time.sleep(gap)
        try:
            ex.swap()
            swaps += 1
        except OSError:
            errors += 1
            if errors > 1000:
                stopped = "errors"
                break
    if ex.flipped:
        with contextlib.suppress(OSError):
            ex.swap()
    restored = ex.present() and ex.shape() == before  # judged on the tree, not on the bookkeeping
    summary = {"swaps": swaps, "mode": ex.mode, "errors": errors, "elapsed_s": round(time.monotonic() - start, 3), "stopped": stopped, "restored": restored}
    out.write(json.dumps(summary) + "\n")
    out.flush()
    return summary


class SwapRace:
    """Runs the swapper over `a` (an in-root directory) and `b` (a symlink to an outside
    directory) for the duration of a `with` block; `summary` is its report afterwards.

    Raises RuntimeError when it cannot start (no "ready" within `start_s`)."""

    def __init__(self, a: Path, b: Path, *, max_s: float = 300.0, max_swaps: int = 600_000, mean_gap_s: float = 0.0005, start_s: float = 30.0):
        self.a, self.b = Path(a), Path(b)
        self.max_s, self.max_swaps, self.mean_gap_s, self.start_s = max_s, max_swaps, mean_gap_s, start_s
        self.proc: subprocess.Popen | None = None
        self.summary: dict | None = None

    def __enter__(self) -> "SwapRace":
        argv = [
            sys.executable,
            "-m",
            "harnesscheck.kit.swapper",
            str(self.a),
            str(self.b),
            "--max-s",
            str(self.max_s),
            "--max-swaps",
            str(self.max_swaps),
            "--mean-gap-s",
            str(self.mean_gap_s),
        ]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        ready, _, _ = select.select([self.proc.stdout], [], [], self.start_s)
        line = self.proc.stdout.readline() if ready else b""
        if line.strip() != b"ready":
            err = self._end(kill=True)
            raise RuntimeError(f"the swapper did not start: {line[:200]!r} {err[-400:]!r}")
        return self

    def __exit__(self, *exc) -> None:
        self._end(kill=False)

    def _end(self, *, kill: bool) -> str:
        proc = self.proc
        if proc is None:
            return ""
        if kill:
            proc.kill()
        try:  # communicate closes the swapper's stdin: its "stop"
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        for line in reversed(out.decode("utf-8", "replace").splitlines()):
            with contextlib.suppress(ValueError):
                self.summary = json.loads(line)
                break
        self.proc = None
        return err.decode("utf-8", "replace")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m harnesscheck.kit.swapper")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--max-s", type=float, default=300.0)
    p.add_argument("--max-swaps", type=int, default=600_000)
    p.add_argument("--mean-gap-s", type=float, default=0.0005)
    ns = p.parse_args(argv)
    summary = run(ns.a, ns.b, max_s=ns.max_s, max_swaps=ns.max_swaps, mean_gap_s=ns.mean_gap_s)
    return 0 if summary["restored"] else 1


if __name__ == "__main__":
    sys.exit(main())
