"""The CLI's stdout event log, kept in the run dir for the post-run audit.

`LoggedParser` wraps a transport's pure parser: every stdout line is appended to
`<run dir>/events.jsonl` (mode 0600) before the parser sees it, so the audit can make its
own streaming pass later. Constant memory; the file is closed when the outcome is built.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

EVENT_LOG_NAME = "events.jsonl"


class LoggedParser:
    def __init__(self, parser: Any, path: Path):
        self.parser = parser
        self.path = Path(path)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
        self._fh = os.fdopen(fd, "w", encoding="utf-8", errors="replace")

    def feed(self, line: str):
        if not self._fh.closed:
            self._fh.write(line)
            self._fh.write("\n")
        return self.parser.feed(line)

    def outcome(self, result: Any):
        if not self._fh.closed:
            self._fh.close()
        return self.parser.outcome(result)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.parser, name)
