"""Child that starts grandchildren holding its stdout, prints partial output, then hangs.

usage: spawn_tree.py PIDFILE [--setsid] [--exit]
  --setsid  one more grandchild leaves the process group (setsid escapee)
  --exit    the child itself exits 0 right away (its grandchildren keep the pipes open)
The pid file gets one pid per line (child first), written atomically, then "ready" is
printed on stdout.
"""

import os
import subprocess
import sys
import time

pidfile = sys.argv[1]
setsid = "--setsid" in sys.argv
exit_now = "--exit" in sys.argv
sleeper = [sys.executable, "-c", "import time\nwhile True: time.sleep(1)"]

pids = [os.getpid()]
pids.append(subprocess.Popen(sleeper).pid)  # inherits stdout/stderr
if setsid:
    pids.append(subprocess.Popen(sleeper, start_new_session=True).pid)
tmp = pidfile + ".tmp"
with open(tmp, "w") as fh:
    fh.write("\n".join(str(p) for p in pids) + "\n")
os.replace(tmp, pidfile)

print('{"type":"partial","n":1}', flush=True)
print('{"type":"partial","n":2}', flush=True)
sys.stdout.write('{"type":"cut')  # a last line without its newline
sys.stdout.flush()
if exit_now:
    os._exit(0)
while True:
    time.sleep(1)
