"""The baseline: a backend author's list of known failures, strict in both directions.

File format (JSON, or TOML with the same shape)::

    {"version": 1,
     "known_failing": [
       {"id": "usage.cost-never-fabricated", "backend": "my-backend", "level": "offline",
        "reason": "upstream-bug", "note": "why", "expires": "2027-01-31"}]}

``backend`` and ``level`` are optional (an entry without them matches every backend or
level). Rules: a listed cell that fails is reported ``xfailed``; a listed cell that passes
fails the run (stale entry); an entry past its ``expires`` date fails the run; an entry
whose id is not in the catalog, or whose reason is not a reason code, is a usage error.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from harnesscheck.kit.catalog import REASON_CODES

BASELINE_VERSION = 1


class BaselineError(Exception):
    """The baseline file is malformed or names unknown checks (usage error, exit 2)."""


@dataclass(frozen=True)
class Entry:
    id: str
    reason: str
    backend: str | None = None
    level: str | None = None
    note: str = ""
    expires: date | None = None

    def matches(self, check: str, backend: str, level: str) -> bool:
        from harnesscheck.backends.registry import base_id

        # an entry for `my-backend` also covers its release columns (`my-backend==1.2.3`); one
        # naming a release covers only that column
        return self.id == check and self.backend in (None, backend, base_id(backend)) and self.level in (None, level)

    def expired(self, today: date | None = None) -> bool:
        return self.expires is not None and (today or date.today()) > self.expires

    def label(self) -> str:
        where = "/".join(x for x in (self.backend, self.level) if x)
        return f"{self.id}" + (f" [{where}]" if where else "")


@dataclass
class Baseline:
    entries: list[Entry]
    path: Path | None = None

    def match(self, check: str, backend: str, level: str) -> Entry | None:
        for entry in self.entries:
            if entry.matches(check, backend, level):
                return entry
        return None

    def problems(self, known_ids: set[str], today: date | None = None) -> tuple[list[str], list[str]]:
        """(usage errors, run failures) that do not depend on any cell's result."""
        from harnesscheck.kit.catalog import issued_ids

        retired = issued_ids()
        usage = [
            f"baseline entry {e.label()}: " + (f"the check was retired ({retired[e.id]}): remove the entry" if retired.get(e.id) else "unknown check id")
            for e in self.entries
            if e.id not in known_ids
        ]
        expired = [f"baseline entry {e.label()} expired on {e.expires}" for e in self.entries if e.expired(today)]
        return usage, expired


def _parse_date(value, where: str) -> date | None:
    if value in (None, ""):
        return None
    if isinstance(value, date):
        return value
    try:
        return date.fromisoformat(str(value))
    except ValueError:
        raise BaselineError(f"{where}: expires {value!r} is not YYYY-MM-DD") from None


def load_baseline(path: Path) -> Baseline:
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise BaselineError(f"cannot read baseline {path}: {exc.strerror}") from None
    try:
        data = tomllib.loads(raw.decode()) if path.suffix == ".toml" else json.loads(raw)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise BaselineError(f"baseline {path} is not valid {'TOML' if path.suffix == '.toml' else 'JSON'}: {exc}") from None
    if not isinstance(data, dict) or data.get("version") != BASELINE_VERSION:
        raise BaselineError(f"baseline {path}: expected a table with version = {BASELINE_VERSION}")
    entries = []
    for i, item in enumerate(data.get("known_failing", [])):
        where = f"{path} known_failing[{i}]"
        if not isinstance(item, dict) or not item.get("id"):
            raise BaselineError(f"{where}: an entry needs an id")
        unknown = set(item) - {"id", "reason", "backend", "level", "note", "expires"}
        if unknown:
            raise BaselineError(f"{where}: unknown keys {sorted(unknown)}")
        if "*" in item["id"]:
            raise BaselineError(f"{where}: wildcards are not allowed; list check ids one by one")
        if item.get("reason") not in REASON_CODES:
            raise BaselineError(f"{where}: reason must be one of {', '.join(REASON_CODES)}")
        entries.append(
            Entry(
                id=item["id"],
                reason=item["reason"],
                backend=item.get("backend"),
                level=item.get("level"),
                note=item.get("note", ""),
                expires=_parse_date(item.get("expires"), where),
            )
        )
    return Baseline(entries, path)


def write_baseline(path: Path, failing: list[tuple[str, str, str, str]], reason: str = "upstream-bug") -> int:
    """Write a baseline listing each failing (check, backend, level, message). Returns the count."""
    entries = [
        {"id": check, "backend": backend, "level": level, "reason": reason, "note": message.splitlines()[0][:200] if message else ""}
        for check, backend, level, message in sorted(set(failing))
    ]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".toml":
        lines = [f"version = {BASELINE_VERSION}", ""]
        for e in entries:
            lines.append("[[known_failing]]")
            lines.extend(f"{k} = {json.dumps(v)}" for k, v in e.items())
            lines.append("")
        path.write_text("\n".join(lines), encoding="utf-8")
    else:
        path.write_text(json.dumps({"version": BASELINE_VERSION, "known_failing": entries}, indent=1) + "\n", encoding="utf-8")
    return len(entries)
