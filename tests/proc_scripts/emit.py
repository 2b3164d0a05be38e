"""Child that writes raw bytes in one of several shapes, then exits 0.

usage: emit.py MODE [N]
  framing       "a\\n", "b\\r\\n", "", "c" (no final newline), in awkward chunks
  badutf8       a line with invalid UTF-8
  bigline N     one N-byte line (then "after\\n")
  stderrflood N N bytes of stderr without a newline, then "tail-end" and exit
  stopper       many lines; the test stops at the first
"""

import os
import sys
import time

mode = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 0
out = sys.stdout.buffer


def write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


if mode == "framing":
    for piece in (b"a", b"\nb\r", b"\n\n", b"c"):
        write(1, piece)
        time.sleep(0.02)
elif mode == "badutf8":
    write(1, b"ok \xff\xfe end\n")
elif mode == "bigline":
    chunk = b"x" * (1024 * 1024)
    left = n
    while left > 0:
        write(1, chunk[: min(left, len(chunk))])
        left -= len(chunk)
    write(1, b"\nafter\n")
elif mode == "stderrflood":
    chunk = b"e" * (1024 * 1024)
    left = n
    while left > 0:
        write(2, chunk[: min(left, len(chunk))])
        left -= len(chunk)
    write(2, b"\ntail-end")
elif mode == "stopper":
    for i in range(100000):
        write(1, b'{"n":%d}\n' % i)
        time.sleep(0.01)
else:
    sys.exit(f"unknown mode {mode}")
