"""A host that runs spawn_tree.py (with a setsid escapee) through run_process, for the
test that SIGKILLs the host itself.

usage: host.py PIDFILE HOSTPIDFILE
"""

import os
import sys

from harnesscheck.contain.process import run_process

here = os.path.dirname(os.path.abspath(__file__))
with open(sys.argv[2] + ".tmp", "w") as fh:
    fh.write(f"{os.getpid()}\n")
os.replace(sys.argv[2] + ".tmp", sys.argv[2])
run_process(
    [sys.executable, os.path.join(here, "spawn_tree.py"), sys.argv[1], "--setsid"],
    env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    cwd=here,
    on_line=lambda line: None,
    timeout_s=600,
)
