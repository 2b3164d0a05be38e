"""`harnesscheck drift`: what changed in a real CLI release that matters, per scenario and
version, against stored baselines (`fixtures/<cli>/drift/<version>.json`, written with
`--save`), plus the event shapes of the stored loopback recordings.

Compared (`facts_of`): the requests the CLI sends (tool names and their flags such as
`defer_loading`, beta headers, `max_tokens`, model, system prompt size in KiB), the values
that change behaviour (default model, terminal reason, error status and type, refusal text,
number and delays of retries, exit code), the transport's classification (status, error
class, retry_after), side effects (what the CLI created in its temp and runtime dirs), and
of the release itself (`release_facts`): its `--help` flags, the environment names its
binary references, its Node engine. Open maps (keys that are model names, ids) are folded.

Output is ranked: behaviour and classification first, then removed, changed, added, each
a line `- / ~ / +  scenario  fact: old -> new`. Exit 0: nothing changed in behaviour or
classification (additions and shape changes are reported); 1: a change in behaviour or
classification; 3: the CLI is not installed, or nothing is stored to compare with.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
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


def recorded_part(fixture: dict) -> dict:
    """The part of a fixture a fresh recording can show: a fixture whose retry ladder goes on
    past the transport's early stop (`provenance.ladder`, fixtures/<cli>/README.md) is cut at
    the wait that follows its first retry notice, where the recording itself ended."""
    ladder = (fixture.get("provenance") or {}).get("ladder")
    if not ladder:
        return fixture
    steps = fixture.get("steps") or []
    cut = next((i for i, step in enumerate(steps) if step.get("delay") == ladder.get("first_wait_s")), len(steps))
    return {**fixture, "steps": steps[:cut]}


def compare(cli: str, scenario: str, stored: dict, fresh: dict) -> Drift:
    """Shape difference between two fixtures of the same scenario (a stored ladder compared
    only as far as it was recorded: recorded_part)."""
    a, b = shapes(fixture_events(recorded_part(stored))), shapes(fixture_events(fresh))
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
    from harnesscheck.core.paths import fixtures_dir
    from harnesscheck.loopback.record import is_recording

    folder = fixtures_dir() / cli
    return {p.stem: p for p in sorted(folder.glob("*.json")) if is_recording(p)} if folder.is_dir() else {}


#: The scenarios that end on their own in seconds (the CI drift test runs these).
FAST_SCENARIOS = (
    "success",
    "tool_calls",
    "max_turns",
    "not_logged_in",
    "auth_401",
    "context_overflow",
    "model_not_found",
    "served_model_mismatch",
    "native_tool_use",
    "mcp_failed",
    "api_key_source",
)


def drift_for(backend: str, *, scenarios: tuple[str, ...] | None = None, out=None) -> tuple[int, list[Drift]]:
    """Record every stored scenario (or those named) afresh and compare. (exit code, drifts)."""
    from harnesscheck.backends.registry import get_spec
    from harnesscheck.loopback.clis import require_pinned_cli
    from harnesscheck.loopback.record import run_loopback, to_fixture

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


def drift_command(backends: list[str], against: str | None = None, save: bool = False, shapes_too: bool = False) -> int:
    """Entry point of `harnesscheck drift [--backend ID|ID==VERSION]... [--against VERSION]
    [--save] [--shapes]`. Default: every backend with a pinned npm CLI; the facts drift
    against the stored baseline, then (with --shapes) the event shapes of the recordings."""
    from harnesscheck.loopback.install import pinned_clis

    ids = backends or [c.backend for c in pinned_clis()]
    worst = 0
    for backend in ids:
        worst = max(worst, facts_drift(backend, against, save=save))
        if shapes_too:
            code, _ = drift_for(backend)
            if code == 3:
                worst = max(worst, 3)  # shape changes are reported, not a change in behaviour
    return worst


# ---------------------------------------------------------------------------------------
# What matters: facts of a session and of a release, compared ranked


#: The scenarios `drift` records for facts (each ends on its own in seconds).
DRIFT_SCENARIOS = ("success", "tool_calls", "native_tool_use", "rate_limit_429", "auth_401")

#: Facts whose change is a change in behaviour or classification (exit 1); others are reported.
BEHAVIOUR = frozenset(
    {
        "default_model",
        "terminal_reason",
        "error_status",
        "error_type",
        "refusal_text",
        "retries",
        "retry_delays_ms",
        "exit_code",
        "status",
        "error_class",
        "retry_after_s",
        "offered_tools",
        "tool_flags",
        "side_effects",  # a new file, directory or socket the CLI makes is a change in what it does
    }
)


def _events(lines: list[str]) -> list[dict]:
    out = []
    for line in lines:
        if line.startswith("{"):
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                out.append(event)
    return out


def facts_of(recording) -> dict:
    """The facts of one recorded session that matter for drift (see the module docstring)."""
    events = _events(recording.lines)
    facts: dict = {}
    tools: dict[str, None] = {}
    flags: dict[str, list[str]] = {}
    betas: set[str] = set()
    for req in recording.requests:
        body = req.body if isinstance(req.body, dict) else {}
        for tool in body.get("tools") or []:
            name = str(tool.get("name") or tool.get("type") or "?")
            tools.setdefault(name, None)
            known = ("name", "description", "input_schema", "parameters", "type", "strict")
            extra = sorted(k for k, v in tool.items() if k not in known and v not in (None, False))
            if extra:
                flags[name] = extra
        betas.update(b.strip() for b in str((req.headers or {}).get("anthropic-beta") or "").split(",") if b.strip())
        if "max_tokens" in body:
            facts["max_tokens"] = body["max_tokens"]
        if body.get("model"):
            facts["request_model"] = body["model"]
        system = body.get("system") if "system" in body else body.get("instructions")
        if system is not None:
            facts["system_kib"] = round(len(json.dumps(system)) / 1024)
    facts["offered_tools"] = sorted(tools)
    facts["tool_flags"] = {k: v for k, v in sorted(flags.items())}
    facts["beta_headers"] = sorted(betas)
    retries, delays, refusals = 0, [], []
    for event in events:
        kind = event_kind(event)
        if kind == "system/init":
            facts["default_model"] = event.get("model")
            facts["init_fields"] = sorted(event)
        if kind == "system/api_retry":
            retries += 1
            if isinstance(event.get("retry_delay_ms"), (int, float)):
                delays.append(int(event["retry_delay_ms"]) // 1000 * 1000)
        if kind == "result":
            for key, fact in (("terminal_reason", "terminal_reason"), ("api_error_status", "error_status"), ("api_error_type", "error_type")):
                if event.get(key) is not None:
                    facts[fact] = event.get(key)
        if kind.startswith("error") or kind.startswith("turn.failed"):
            retries += 1 if "Reconnecting" in json.dumps(event) else 0
        message = event.get("message") if isinstance(event.get("message"), dict) else {}
        for block in message.get("content") or []:
            if isinstance(block, dict) and block.get("type") == "tool_result" and block.get("is_error"):
                refusals.append(re.sub(r"\s+", " ", str(block.get("content")))[:200])
    facts["retries"] = retries
    facts["retry_delays_ms"] = delays
    if refusals:
        facts["refusal_text"] = refusals[0]
    facts["exit_code"] = recording.exit_code
    o = recording.outcome
    facts["status"] = getattr(getattr(o, "status", None), "value", None)
    facts["error_class"] = getattr(getattr(o, "error_class", None), "value", None)
    if getattr(o, "retry_after_s", None) is not None:
        facts["retry_after_s"] = round(o.retry_after_s)  # whole seconds: the rest is timing noise
    facts["side_effects"] = list(getattr(recording, "side_effects", []) or [])
    return facts


def release_facts(binary_path: Path, package_dir: Path | None = None) -> dict:
    """Facts of the release: its `--help` flags, the env names its binary references (the
    CLI's own prefixes), its Node engine."""
    import subprocess

    out: dict = {}
    try:
        proc = subprocess.run(
            [str(binary_path), "--help"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=60,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": tempfile.gettempdir()},
        )
        out["help_flags"] = sorted(set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]+", proc.stdout.decode("utf-8", "replace"))))
    except (OSError, subprocess.TimeoutExpired):
        out["help_flags"] = []
    names: set[str] = set()
    try:
        real = Path(os.path.realpath(binary_path))
        pattern = re.compile(rb"\b(?:CLAUDE_CODE|ANTHROPIC|CODEX|OPENAI)_[A-Z0-9_]{2,}\b")
        with open(real, "rb") as fh:
            while chunk := fh.read(1 << 22):
                names.update(m.decode() for m in pattern.findall(chunk))
    except OSError:
        pass
    out["env_names"] = sorted(names)
    if package_dir is not None:
        try:
            out["node_engine"] = (json.loads((package_dir / "package.json").read_text(encoding="utf-8")).get("engines") or {}).get("node")
        except (OSError, ValueError):
            out["node_engine"] = None
    return out


def _fmt(value) -> str:
    text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else value
    return text if len(text) <= 160 else text[:157] + "..."


@dataclass(order=True)
class Change:
    rank: int  # 0 behaviour/classification, then 1 removed, 2 changed, 3 added
    scenario: str
    fact: str
    kind: str  # "-", "~", "+"
    old: object = None
    new: object = None

    @property
    def behaviour(self) -> bool:
        return self.fact.split("[", 1)[0] in BEHAVIOUR

    def line(self) -> str:
        mark = "!" if self.behaviour else " "
        if self.kind == "-":
            return f"{mark}- {self.scenario:<16} {self.fact}: {_fmt(self.old)}"
        if self.kind == "+":
            return f"{mark}+ {self.scenario:<16} {self.fact}: {_fmt(self.new)}"
        return f"{mark}~ {self.scenario:<16} {self.fact}: {_fmt(self.old)} -> {_fmt(self.new)}"


def diff_facts(scenario: str, old: dict, new: dict) -> list[Change]:
    """Ranked changes between two fact maps: list facts by element (removed / added), the
    rest by value."""
    out: list[Change] = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if a == b:
            continue
        behaviour = key in BEHAVIOUR
        if isinstance(a, list) and isinstance(b, list) and key not in ("retry_delays_ms",):
            for item in sorted(set(map(_fmt, a)) - set(map(_fmt, b))):
                out.append(Change(0 if behaviour else 1, scenario, key, "-", old=item))
            for item in sorted(set(map(_fmt, b)) - set(map(_fmt, a))):
                out.append(Change(0 if behaviour else 3, scenario, key, "+", new=item))
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            for sub in sorted(set(a) | set(b)):
                if a.get(sub) != b.get(sub):
                    kind = "-" if sub not in b else "+" if sub not in a else "~"
                    out.append(Change(0 if behaviour else {"-": 1, "~": 2, "+": 3}[kind], scenario, f"{key}[{sub}]", kind, a.get(sub), b.get(sub)))
            continue
        kind = "+" if key not in old else "-" if key not in new else "~"
        out.append(Change(0 if behaviour else {"-": 1, "~": 2, "+": 3}[kind], scenario, key, kind, a, b))
    return out


def baseline_path(cli: str, version: str) -> Path:
    from harnesscheck.core.paths import fixtures_dir

    return fixtures_dir() / cli / "drift" / f"{version}.json"


def fresh_baseline(backend: str, scenarios: tuple[str, ...] = DRIFT_SCENARIOS) -> dict:
    """{"version", "release": release_facts, "scenarios": {name: facts}} from fresh sessions."""
    from harnesscheck.backends.registry import get_spec
    from harnesscheck.loopback.clis import require_pinned_cli
    from harnesscheck.loopback.record import RECIPES, run_loopback

    binary, why = require_pinned_cli(backend)
    if binary is None:
        raise LookupError(why)
    scenarios = tuple(n for n in scenarios if n in RECIPES.get(get_spec(backend).cli_name or "", {}))  # what this CLI can record
    package_dir = None
    real = Path(os.path.realpath(binary.path))
    for parent in real.parents:
        if (parent / "package.json").is_file():
            package_dir = parent
            break
    return {
        "version": binary.version,
        "release": release_facts(binary.path, package_dir),
        "scenarios": {name: facts_of(run_loopback(backend, name)) for name in scenarios},
    }


def compare_baselines(old: dict, new: dict) -> list[Change]:
    """Ranked, folded changes between two stored baselines."""
    names = sorted(set(old.get("scenarios") or {}) | set(new.get("scenarios") or {}))
    changes = diff_facts("release", old.get("release") or {}, new.get("release") or {})
    for name in names:
        changes += diff_facts(name, (old.get("scenarios") or {}).get(name) or {}, (new.get("scenarios") or {}).get(name) or {})
    return fold(changes, names)


#: More element changes than this of one fact in one place fold into a single line.
FOLD_OVER = 4


def fold(changes: list[Change], scenarios: list[str]) -> list[Change]:
    """The same change in several scenarios is one line (`all` when in every one); many
    element changes of one fact (env names, init fields) are one line with a count."""
    where: dict[tuple, list[str]] = {}
    first: dict[tuple, Change] = {}
    for c in changes:
        key = (c.fact, c.kind, _fmt(c.old), _fmt(c.new))
        where.setdefault(key, []).append(c.scenario)
        first.setdefault(key, c)
    merged: list[Change] = []
    for key, places in where.items():
        c = first[key]
        label = "all" if len(places) == len(scenarios) and len(places) > 1 and "release" not in places else ",".join(places)
        merged.append(Change(c.rank, label, c.fact, c.kind, c.old, c.new))
    groups: dict[tuple, list[Change]] = {}
    for c in merged:
        groups.setdefault((c.scenario, c.fact, c.kind, c.old is None or c.new is None), []).append(c)
    out: list[Change] = []
    for (place, fact, kind, element), items in groups.items():
        if element and kind in "+-" and len(items) > FOLD_OVER:
            values = sorted(_fmt(i.old if kind == "-" else i.new) for i in items)
            summary = f"{len(values)} ({', '.join(values[:3])}, ...)"
            out.append(Change(items[0].rank, place, fact, kind, summary if kind == "-" else None, summary if kind == "+" else None))
        else:
            out.extend(items)
    return sorted(out)


def print_changes(title: str, changes: list[Change], out) -> None:
    print(title, file=out)
    if not changes:
        print("  nothing that matters changed", file=out)
    for change in changes:
        print("  " + change.line(), file=out)
    n = sum(c.behaviour for c in changes)
    print(f"  {len(changes)} changes, {n} in behaviour or classification (marked !)", file=out)


def facts_drift(backend: str, against: str | None, *, save: bool = False, out=None) -> int:
    """Fresh facts of `backend`'s release against the stored baseline of `against` (default:
    the same release). Exit 0 / 1 (behaviour changed) / 3 (nothing to compare)."""
    from harnesscheck.backends.registry import get_spec

    out = out or sys.stdout
    spec = get_spec(backend)
    cli = spec.cli_name or backend
    try:
        fresh = fresh_baseline(backend)
    except LookupError as exc:
        print(f"drift: {exc}", file=sys.stderr)
        return 3
    if save:
        path = baseline_path(cli, fresh["version"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(_scrubbed(fresh), indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(f"drift: saved {path}", file=out)
    version = against or fresh["version"]
    stored = baseline_path(cli, version)
    if not stored.is_file():
        again = f"harnesscheck drift --backend {spec.id.partition('==')[0]}=={version} --save"
        print(f"drift: no stored baseline {stored} (record one with `{again}`)", file=sys.stderr)
        return 3
    old = json.loads(stored.read_text(encoding="utf-8"))
    changes = compare_baselines(old, _scrubbed(fresh))
    print_changes(f"{cli} {version} -> {fresh['version']}", changes, out)
    return 1 if any(c.behaviour for c in changes) else 0


def _scrubbed(baseline: dict) -> dict:
    """No machine path, port or secret in a stored baseline."""
    from harnesscheck.contain.envpolicy import redact

    text = json.dumps(baseline)
    home = os.path.expanduser("~")
    text = text.replace(home, "<home>")
    text = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", text)
    return json.loads(redact(text))
