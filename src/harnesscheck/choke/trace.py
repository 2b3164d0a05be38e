"""Append-only JSONL traces, safe with many concurrent writers (doc/SPEC-trace.md).

Each record is serialized first and written with ONE os.write on a file opened O_APPEND:
on Linux a regular-file O_APPEND write moves the offset and writes atomically, so records
from several threads or processes never interleave or overwrite each other, whatever
their size (PIPE_BUF only bounds pipes, not regular files).

Records hold only non-secret data (scope-relative paths, codes, byte counts); string
values still pass through `harnesscheck.contain.envpolicy.redact` when that module is present.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

_REDACT: Callable[[str], str] | None = None
_REDACT_LOADED = False
_REDACT_LOCK = threading.Lock()
_SECRETS_VERSION: Callable[[], object] | None = None

_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str)
_MEMO_MAX = 4096


def _redactor() -> Callable[[str], str] | None:
    """envpolicy.redact if it can be imported (loaded once, lazily); else None."""
    global _REDACT, _REDACT_LOADED, _SECRETS_VERSION
    if not _REDACT_LOADED:
        with _REDACT_LOCK:
            if not _REDACT_LOADED:
                try:
                    from harnesscheck.contain import envpolicy  # noqa: PLC0415

                    redact = envpolicy.redact
                except Exception:  # the module is optional: a trace must never fail on it
                    redact = None
                    envpolicy = None
                # The cached secret tuple changes identity whenever the env's secrets do;
                # it lets the memo below be dropped exactly then (optional: no memo without it).
                holder = getattr(envpolicy, "_environ_secrets", None)
                _SECRETS_VERSION = getattr(holder, "get", None)
                _REDACT = redact
                _REDACT_LOADED = True
    return _REDACT


class _Redaction:
    """redact() with a bounded memo: trace strings (paths, tool names) repeat a lot.
    The memo is cleared whenever envpolicy's set of known secret values changes."""

    def __init__(self) -> None:
        self.memo: dict[str, str] = {}
        self.version: object = None
        self.fn: Callable[[str], str] | None = None
        self.base: Callable[[str], str] | None = None

    def prepare(self) -> Callable[[str], str] | None:
        redact = _redactor()
        if redact is None:
            return None
        version_of = _SECRETS_VERSION
        if version_of is None:
            return redact
        try:
            version = version_of()
        except Exception:
            return redact
        memo = self.memo
        if version is not self.version or redact is not self.base or len(memo) > _MEMO_MAX or self.fn is None:
            memo.clear()
            self.version, self.base = version, redact

            def cached(text: str) -> str:
                out = memo.get(text)
                if out is None:
                    out = redact(text)
                    if len(text) <= 256:
                        memo[text] = out
                return out

            self.fn = cached
        return self.fn


#: Characters that str.splitlines() (and some JSON readers) take for line ends, which
#: `ensure_ascii=False` would leave raw inside strings: escaped, so a record is one line for
#: every reader (only "\n" ends a record; control characters are escaped by JSON anyway).
_LINE_BREAKS = {"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"}


def _escape_line_breaks(text: str) -> str:
    for raw, escaped in _LINE_BREAKS.items():
        if raw in text:
            text = text.replace(raw, escaped)
    return text


def _clean(value: Any, redact: Callable[[str], str] | None) -> Any:
    if isinstance(value, str):
        return redact(value) if redact is not None and value else value
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, dict):
        return {str(k): _clean(v, redact) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_clean(v, redact) for v in value]
    return _clean(str(value), redact)


class Trace:
    """One JSONL trace file. `Trace(None)` is a no-op sink with the same interface.

    Every record carries `ts` (epoch seconds), `session` and `event`, then the fields.
    """

    def __init__(self, path: str | os.PathLike[str] | None, session_id: str | None = None):
        self.path = Path(path) if path is not None else None
        self.session_id = session_id
        self._fd: int | None = None
        self._redaction = _Redaction()
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # O_NOFOLLOW: a trace is never a symlink (one planted in a run dir would make the
            # host append to any file of its user); O_NONBLOCK: a FIFO cannot stall the open.
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
            self._fd = os.open(self.path, flags, 0o600)

    @property
    def enabled(self) -> bool:
        return self._fd is not None

    def record(self, event: str, **fields: Any) -> None:
        """Append one record with a single write. `session=` in fields overrides the default."""
        fd = self._fd
        if fd is None:
            return
        redact = self._redaction.prepare()
        session = fields.pop("session", self.session_id)
        rec: dict[str, Any] = {
            "ts": round(time.time(), 6),
            "session": _clean(session, redact),
            "event": _clean(event, redact),
        }
        for key, value in fields.items():
            kind = value.__class__
            if kind is str:
                rec[key] = redact(value) if redact is not None and value else value
            elif value is None or kind is int or kind is bool or kind is float:
                rec[key] = value
            else:
                rec[key] = _clean(value, redact)
        text = _ENCODER.encode(rec)
        if not text.isascii():
            text = _escape_line_breaks(text)
        data = (text + "\n").encode("utf-8", "backslashreplace")
        written = os.write(fd, data)
        if written != len(data):
            # Only on a full disk or a signal mid-write: finish the line rather than lose it.
            view = memoryview(data)[written:]
            while view:
                n = os.write(fd, view)
                view = view[n:]

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> Trace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort at interpreter exit
        try:
            self.close()
        except Exception:
            pass


def read_trace(path: str | os.PathLike[str], *, strict: bool = False) -> Iterator[dict]:
    """Yield each record of a trace file. A line that is not a JSON object (a crash's
    truncated last line) is skipped, or raises ValueError when strict."""
    try:
        fh = open(path, "rb")  # binary: records end at b"\n" only (text mode also splits at \r)
    except FileNotFoundError:
        return
    with fh:
        for number, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            line = raw.decode("utf-8", "replace")
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                if strict:
                    raise ValueError(f"{path}:{number}: not a JSON record") from None
                continue
            if isinstance(rec, dict):
                yield rec
            elif strict:
                raise ValueError(f"{path}:{number}: not a JSON object")
