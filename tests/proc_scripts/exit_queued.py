"""Child that writes stdout the way node does, then exits like `process.exit()`.

usage: exit_queued.py DONE_FILE N
Writes "start\\n", then one N-byte JSON line and a `{"type":"result"}` line with O_NONBLOCK
set on stdout (node's libuv sets it on a pipe): whatever does not fit is dropped, as node
drops its queued writes on process.exit(). On a regular file every write completes. Then it
creates DONE_FILE and exits 0.
"""

import os
import sys

done, n = sys.argv[1], int(sys.argv[2])
os.write(1, b"start\n")
os.set_blocking(1, False)
data = memoryview(b'{"type":"message","content":"' + b"x" * n + b'"}\n{"type":"result"}\n')
try:
    while data:
        data = data[os.write(1, data) :]
except BlockingIOError:
    pass  # the rest stays queued in memory, and exit drops it
open(done, "w").close()
os._exit(0)
