"""Child that ignores SIGTERM, writes its pid to PIDFILE, then prints a line every 20 ms."""

import os
import signal
import sys
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(sys.argv[1] + ".tmp", "w") as fh:
    fh.write(f"{os.getpid()}\n")
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
n = 0
while True:
    print(f"tick {n}", flush=True)
    n += 1
    time.sleep(0.02)
