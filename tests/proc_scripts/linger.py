"""Child that prints a terminal event, then either lingers forever or exits after a beat.

usage: linger.py forever|exit
"""

import sys
import time

print('{"type":"assistant","text":"hi"}', flush=True)
print('{"type":"result","is_error":false}', flush=True)
if sys.argv[1] == "exit":
    sys.exit(0)
while True:
    time.sleep(1)
