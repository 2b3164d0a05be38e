"""A host that runs one emit.py mode through run_process and prints the result and its own
peak RSS (so memory bounds are measured in a fresh process, not in pytest).

usage: host_memory.py MODE N MAX_LINE_BYTES
"""

import json
import os
import sys

from harnesscheck.contain.process import run_process


def peak_rss_kib() -> int:
    """This image's own peak RSS (VmHWM). Not ru_maxrss: Linux carries the forking parent's
    high-water mark across execve, so under a large pytest worker it reports the worker."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


here = os.path.dirname(os.path.abspath(__file__))
mode, n, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
lines = []
result = run_process(
    [sys.executable, os.path.join(here, "emit.py"), mode, n],
    env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    cwd=here,
    on_line=lambda line: lines.append(len(line)),
    timeout_s=120,
    max_line_bytes=limit,
    term_grace_s=1.0,
)
print(
    json.dumps(
        {
            "ending": result.ending.value,
            "oversize_limit": result.oversize_limit,
            "stderr_tail_len": len(result.stderr_tail),
            "stderr_tail_end": result.stderr_tail[-20:],
            "lines": lines,
            "maxrss_kib": peak_rss_kib(),
        }
    )
)
