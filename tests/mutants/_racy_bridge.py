"""A known-bad bridge (tests/mutants/harness.py ChecksThenOpensByName): the real bridge whose
`read_file` checks a relative path by name (its realpath lies under the root's and is a file)
and then opens it by name, so a directory on the way that is swapped for a symlink to an
outside directory between the check and the open is read (TOCTOU, harness-anchors P11).
Every other call goes to the real dispatch.

The caricature: WINDOW_S of sleep between the check and the open. A real check-then-use
bridge has a window of microseconds, which a race hits now and then; widened, the kit's
swapper (harnesscheck.kit.swapper) hits it on about one read in four, so the self-test
catches the defect in every run instead of by luck. Measured 2026-12-02 on the shared 2-core
machine under `nice -n 19` (load average 3-10): caught in 20 of 20 runs of the check called
directly and 20 of 20 pytest runs, 41-63 of the 200 reads returning the outside bytes; with
the sleep taken out, still 10 of 10 runs, 12-44 reads.

Run as `<python> _racy_bridge.py --spec FILE` (the bridge's own arguments)."""

from __future__ import annotations

import os
import sys
import time

if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]  # the mutants' modules (codex.py, ...) must not shadow anything the bridge imports

import harnesscheck.choke.dispatch as dispatch_module  # noqa: E402
from harnesscheck.choke.dispatch import ToolResult  # noqa: E402

WINDOW_S = 0.002
_real_dispatch = dispatch_module.dispatch


def checks_then_opens(name, args, scope, trace=None, **kwargs):
    path = args.get("path") if isinstance(args, dict) else None
    if name == "read_file" and isinstance(path, str) and path and "\x00" not in path and not os.path.isabs(path):
        root = os.path.realpath(scope.root)
        full = os.path.join(root, path)
        real = os.path.realpath(full)
        if real.startswith(root + os.sep) and os.path.isfile(real):  # the check, by name
            time.sleep(WINDOW_S)
            try:
                with open(full, encoding="utf-8", errors="replace") as fh:  # the use, by name again
                    text = fh.read(scope.max_result_bytes)
            except OSError as exc:
                return ToolResult(ok=False, text=f"refused: io_error: {exc.__class__.__name__}", code="io_error")
            if trace is not None:
                trace.record(
                    "tool",
                    tool=name,
                    decision="allow",
                    code=None,
                    path=path,
                    bytes=len(text.encode()),
                    truncated=False,
                    session=kwargs.get("session_id") or trace.session_id,
                )
            return ToolResult(ok=True, text=text)
    return _real_dispatch(name, args, scope, trace, **kwargs)


dispatch_module.dispatch = checks_then_opens

if __name__ == "__main__":
    from harnesscheck.bridge.__main__ import exit_now, main

    exit_now(main())
