"""`python -m harnesscheck.bridge --spec FILE`: serve one session's scoped tools over stdio MCP."""

from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> int:
    from harnesscheck.bridge.server import main_from_argv

    return main_from_argv(sys.argv[1:] if argv is None else argv)


def exit_now(code: int) -> None:
    """Exit without tearing the interpreter down: the session is over (trace written with one
    write per record, protocol answered), and unwinding the MCP SDK's thousands of objects
    took ~200 ms that the CLI, and the host behind it, would wait for."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
