"""`harnesscheck drift [--backend ID]...`: compare the stored loopback recordings (the
offline fixtures `fixtures/<cli>/<scenario>.json` whose provenance says `loopback-recording`)
with fresh recordings from the pinned real CLI, by event shape: event kinds (type, subtype / item type) and the field paths each kind carries.
Values never matter (ids, text, timings change every run); shapes do.

Exit 0: no drift. Exit 1: drift (what changed is printed per CLI version and scenario).
Exit 3: the pinned CLI is not installed, or nothing is recorded to compare with.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

#: Keys whose values are open maps (ids or names as keys): only "a map" is part of the shape.
OPEN_MAPS = frozenset({"modelUsage", "env", "memory_paths", "structuredContent", "structured_content", "arguments", "input"})


def event_kind(event: dict) -> str:
    """`type`, `type/subtype`, or `type/item.type` (codex items)."""
    kind = str(event.get("type", "?"))
    if isinstance(event.get("subtype"), str):
        kind += "/" + event["subtype"]
    item = event.get("item")
    if isinstance(item, dict) and isinstance(item.get("type"), str):
        kind += "/" + item["type"]
    return kind


def field_paths(value, prefix: str = "") -> set[str]:
    """Dotted key paths of a JSON value; list elements share `[]`; open maps stop at `{}`."""
    out: set[str] = set()
    if isinstance(value, dict):
        for key, sub in value.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            out.add(path)
            if key in OPEN_MAPS and isinstance(sub, dict):
                out.add(path + "{}")
                continue
            out |= field_paths(sub, path)
    elif isinstance(value, list):
        for sub in value:
            out |= field_paths(sub, prefix + "[]")
    return out


def shapes(events: list[dict]) -> dict[str, set[str]]:
    """kind -> union of field paths over every event of that kind."""
    out: dict[str, set[str]] = {}
    for event in events:
        out.setdefault(event_kind(event), set()).update(field_paths(event))
    return out


def fixture_events(fixture: dict) -> list[dict]:
    return [s["emit"] for s in fixture.get("steps", []) if isinstance(s.get("emit"), dict)]


@dataclass
class Drift:
    cli: str
    scenario: str
    stored_version: str | None
    fresh_version: str | None
    kinds_added: list[str] = field(default_factory=list)
    kinds_removed: list[str] = field(default_factory=list)
    fields_added: dict[str, list[str]] = field(default_factory=dict)
    fields_removed: dict[str, list[str]] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return bool(self.kinds_added or self.kinds_removed or self.fields_added or self.fields_removed)

    def lines(self) -> list[str]:
        head = f"{self.cli} {self.scenario}: {self.stored_version} -> {self.fresh_version}"
        if not self.changed:
            return [head + ": same shape"]
        out = [head + ": drift"]
        out += [f"  + event {k}" for k in self.kinds_added]
        out += [f"  - event {k}" for k in self.kinds_removed]
        for kind, paths in self.fields_added.items():
            out += [f"  + {kind}: {p}" for p in paths]
        for kind, paths in self.fields_removed.items():
            out += [f"  - {kind}: {p}" for p in paths]
        return out


def compare(cli: str, scenario: str, stored: dict, fresh: dict) -> Drift:
    """Shape difference between two fixtures of the same scenario."""
    a, b = shapes(fixture_events(stored)), shapes(fixture_events(fresh))
    drift = Drift(
        cli,
        scenario,
        (stored.get("provenance") or {}).get("cli_version"),
        (fresh.get("provenance") or {}).get("cli_version"),
        kinds_added=sorted(set(b) - set(a)),
        kinds_removed=sorted(set(a) - set(b)),
    )
    for kind in sorted(set(a) & set(b)):
        added, removed = sorted(b[kind] - a[kind]), sorted(a[kind] - b[kind])
        if added:
            drift.fields_added[kind] = added
        if removed:
            drift.fields_removed[kind] = removed
    return drift


def stored_recordings(cli: str) -> dict[str, Path]:
    """The offline fixtures of `cli` that are loopback recordings (hand-written ones are not
    compared: they hold what loopback cannot produce)."""
    from harnesscheck.loopback.record import is_recording
    from harnesscheck.paths import fixtures_dir

    folder = fixtures_dir() / cli
    return {p.stem: p for p in sorted(folder.glob("*.json")) if is_recording(p)} if folder.is_dir() else {}


#: The scenarios that end on their own in seconds (the CI drift test runs these).
FAST_SCENARIOS = (
    "success", "tool_calls", "max_turns", "not_logged_in", "auth_401", "context_overflow", "model_not_found",
    "served_model_mismatch", "native_tool_use", "mcp_failed", "api_key_source",
)


def drift_for(backend: str, *, scenarios: tuple[str, ...] | None = None, out=None) -> tuple[int, list[Drift]]:
    """Record every stored scenario (or those named) afresh and compare. (exit code, drifts)."""
    from harnesscheck.loopback.clis import require_pinned_cli
    from harnesscheck.loopback.record import run_loopback, to_fixture
    from harnesscheck.registry import get_spec

    spec = get_spec(backend)
    cli = spec.cli_name or backend
    binary, why = require_pinned_cli(backend)
    if binary is None:
        print(f"drift: {why}", file=sys.stderr)
        return 3, []
    stored = stored_recordings(cli)
    if not stored:
        print(f"drift: no recordings in fixtures/{cli} (run `harnesscheck record --backend {backend} --scenario all`)", file=sys.stderr)
        return 3, []
    drifts = []
    for scenario, path in stored.items():
        if scenarios is not None and scenario not in scenarios:
            continue
        old = json.loads(path.read_text(encoding="utf-8"))
        fresh = to_fixture(run_loopback(backend, scenario))
        drift = compare(cli, scenario, old, fresh)
        drifts.append(drift)
        for line in drift.lines():
            print(line, file=out or sys.stdout)  # the stdout of the call, not of import time
    return (1 if any(d.changed for d in drifts) else 0), drifts


def drift_command(backends: list[str]) -> int:
    """Entry point of `harnesscheck drift`. Default: every backend with a pinned npm CLI."""
    from harnesscheck.loopback.install import pinned_clis

    ids = backends or [c.backend for c in pinned_clis()]
    worst = 0
    for backend in ids:
        code, _ = drift_for(backend)
        worst = max(worst, code)
    return worst
