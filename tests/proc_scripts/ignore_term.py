"""Child that ignores SIGTERM, writes its pid to PIDFILE, prints "ready" and hangs."""

import os
import signal
import sys
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(sys.argv[1] + ".tmp", "w") as fh:
    fh.write(f"{os.getpid()}\n")
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
print("ready", flush=True)
while True:
    time.sleep(1)
