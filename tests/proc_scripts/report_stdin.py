"""Child that reports what its stdin is, as JSON lines.

First line: {"stdin": "devnull"|"pipe"|"other"}. Then, unless stdin is /dev/null, it first
writes BIG bytes of stdout (to prove the runner reads while it writes the prompt), reads
stdin to EOF and prints {"bytes": n, "sha256": ...}.
usage: report_stdin.py [BIG]
"""

import hashlib
import json
import os
import stat
import sys

st = os.fstat(0)
null = os.stat(os.devnull)
if stat.S_ISCHR(st.st_mode) and st.st_rdev == null.st_rdev:
    kind = "devnull"
elif stat.S_ISFIFO(st.st_mode):
    kind = "pipe"
else:
    kind = "other"
print(json.dumps({"stdin": kind}), flush=True)
big = int(sys.argv[1]) if len(sys.argv) > 1 else 0
if big:
    sys.stdout.write(json.dumps({"pad": "x" * big}) + "\n")
    sys.stdout.flush()
data = sys.stdin.buffer.read()
print(json.dumps({"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}), flush=True)
