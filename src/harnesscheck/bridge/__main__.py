"""`python -m harnesscheck.bridge --spec FILE`: serve one session's scoped tools over stdio MCP."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from harnesscheck.bridge.server import main_from_argv

    return main_from_argv(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    raise SystemExit(main())
