"""Bounded accumulators for the stream parsers: memory stays flat in the size of the log.

A parser keeps only what the outcome needs: the text (capped, most recent kept, with a
marker saying how much was dropped), call counts, the distinct tool names, and at most
`MAX_NATIVE` native-call entries (then one "+N more" entry).
"""

from __future__ import annotations

from collections import deque

MAX_TEXT_CHARS = 1_000_000
MAX_NATIVE = 1000


class TextTail:
    """Joined text of many parts, keeping the most recent MAX_TEXT_CHARS characters."""

    def __init__(self, sep: str = "", limit: int = MAX_TEXT_CHARS):
        self.sep = sep
        self.limit = limit
        self.parts: deque[str] = deque()
        self.size = 0
        self.dropped = 0
        self.count = 0

    def append(self, text: str) -> None:
        self.count += 1
        self.parts.append(text)
        self.size += len(text) + len(self.sep)
        while self.size > self.limit and len(self.parts) > 1:
            old = self.parts.popleft()
            self.size -= len(old) + len(self.sep)
            self.dropped += len(old)
        if len(self.parts) > 1024:  # many tiny parts: one string costs less than many objects
            merged = self.sep.join(self.parts)
            self.parts = deque([merged])
            self.size = len(merged) + len(self.sep)

    def text(self) -> str:
        joined = self.sep.join(self.parts)
        if len(joined) > self.limit:
            self.dropped += len(joined) - self.limit
            joined = joined[-self.limit :]
        if self.dropped:
            return f"[… {self.dropped} earlier characters not kept]{self.sep or ' '}{joined}"
        return joined

    def __bool__(self) -> bool:
        return self.count > 0


class CallLog:
    """Bridge calls (count + distinct names) and native calls (bounded list)."""

    def __init__(self) -> None:
        self.bridge_calls = 0
        self.bridge_names: dict[str, None] = {}
        self._native: list[str] = []
        self.native_overflow = 0

    def bridge(self, name: str) -> None:
        self.bridge_calls += 1
        self.bridge_names.setdefault(name, None)

    def native(self, name: str) -> None:
        if len(self._native) < MAX_NATIVE:
            self._native.append(name)
        else:
            self.native_overflow += 1

    @property
    def native_calls(self) -> list[str]:
        extra = [f"… +{self.native_overflow} more"] if self.native_overflow else []
        return self._native + extra

    @property
    def tools_used(self) -> list[str]:
        return sorted(self.bridge_names)
