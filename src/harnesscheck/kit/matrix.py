"""The verification matrix: reports combined into doc/backends.md, backends.json and backends.html.

Reports combine only when they ran the same catalog (same hash); otherwise nothing is
written (a half-consistent matrix is worse than none). Each column carries its level, the CLI
version it was verified with and the date; each cell its provenance (what its verdict came from). The committed backends.json is a ratchet:
`regressions()` lists cells that passed there and fail now without a baseline entry.
backends.json is a `MatrixFile` (doc/backends.schema.json); `read_matrix` validates one.

Every column shows its coverage (`coverage`): how many of the checks applicable to it reached a
verdict (passed, failed, known failure), out of how many the catalog holds for its backend's kind,
its level and its declared capabilities (a `declines=` check is applicable only where the
capability is not declared), with the reasons the others did not run. A backend that declares
little gets a thin column that says so, never a full green one.

The verdict (first line of the page and of backends.md) never says "no check fails" while a
known failure (baseline xfail) exists: it counts them, and names every known failure in a
security-relevant area (SECURITY_AREAS) with its first message line.

Over 800 lines for a reason: the three renderings (JSON, Markdown, HTML) must say the same
verdict, coverage and provenance for every cell, so they are built from one `Combined` side by
side; the HTML page's builder (`to_html` and its helpers, about 270 lines) is the seam if the
page grows.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Iterable, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harnesscheck.kit.catalog import AREAS, REASON_CODES
from harnesscheck.kit.publish import severity_of
from harnesscheck.kit.results import CellResult, Outcome, Report, ReportError, read_report, validation_problem

MATRIX_SCHEMA = "harnesscheck-matrix"
MATRIX_VERSION = 1
MATRIX_SCHEMA_ID = f"urn:harnesscheck:schema:{MATRIX_SCHEMA}:{MATRIX_VERSION}"

#: Areas whose failure means a host guarantee does not hold (a tool outside the choke point,
#: a secret reaching the child, a path escaping the scope, a process tree outliving the
#: session): a known failure there is named in the verdict, not only counted.
SECURITY_AREAS = ("env", "scope", "bridge", "audit", "time")

AreaStatus = Literal["pass", "fail", "warn", "skip", "none"]


class MatrixBackend(BaseModel):
    model_config = ConfigDict(extra="forbid")

    label: str = ""
    kind: str = ""
    cli_version: dict[str, str | None] = Field(default_factory=dict)  # level -> CLI version
    run_at: dict[str, str] = Field(default_factory=dict)  # level -> when that level ran


class MatrixCell(BaseModel):
    model_config = ConfigDict(extra="forbid")

    outcome: Outcome
    reason: str | None = None
    #: What this cell's verdict came from (fixtures and the release they were recorded from, the
    #: scripted server's protocol, the real CLI's version): per cell, since the cells of one
    #: column replay different fixtures. Absent in matrices written before it was recorded.
    provenance: str | None = None
    #: How the cell's sessions were contained (bwrap, guards, none; '+'-joined when they differ),
    #: None where the kit ran none itself or in matrices written before it was recorded.
    containment: str | None = None
    #: "KIT-VERSION DATE": the first matrix (in the chain of previous ones) with this outcome
    #: (kit/publish.py history). Absent in matrices written before it was recorded.
    since: str | None = None


class MatrixChange(BaseModel):
    """A cell whose outcome differs from the previous matrix (`before` None: a new cell)."""

    model_config = ConfigDict(extra="forbid")

    backend: str
    level: str
    check: str
    before: str | None = None
    now: str


class MatrixCoverage(BaseModel):
    """How much of what applies to a column was judged."""

    model_config = ConfigDict(extra="forbid")

    ran: int = Field(description="checks that reached a verdict: passed, failed or a known failure")
    applicable: int = Field(
        description="checks the catalog holds for the backend's kind, the level and its declared "
        "capabilities (a declines= check only where the capability is not declared)"
    )
    not_run: dict[str, int] = Field(
        default_factory=dict,
        description="why the others did not run: a skip's reason code, `error` (the kit broke), or `not-selected` (no cell in the reports)",
    )


class MatrixFile(BaseModel):
    """backends.json: per backend, level and check the outcome; per area the status; per column the coverage."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, title="harnesscheck verification matrix")

    schema_name: Literal["harnesscheck-matrix"] = Field(default=MATRIX_SCHEMA, alias="schema")
    version: Literal[1] = MATRIX_VERSION
    kit_version: str
    catalog_hash: str
    backends: dict[str, MatrixBackend]
    areas: dict[str, dict[str, dict[str, AreaStatus]]]  # backend -> level -> area -> status
    cells: dict[str, dict[str, dict[str, MatrixCell]]]  # backend -> level -> check -> cell
    #: backend -> level -> coverage. Absent in matrices written before it was recorded.
    coverage: dict[str, dict[str, MatrixCoverage]] = Field(default_factory=dict)
    #: check -> critical | high | medium | low (conformance/guidance.toml). Absent before it was recorded.
    severity: dict[str, str] = Field(default_factory=dict)
    #: What changed since the previous matrix (empty when there was none to compare with).
    changes: list[MatrixChange] = Field(default_factory=list)


def read_matrix(path: Path) -> dict:
    """A backends.json, validated against MatrixFile (ReportError names the file and the problem)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ReportError(f"{path}: not a readable JSON matrix ({exc})") from None
    try:
        return MatrixFile.model_validate(data).model_dump(mode="json", by_alias=True)
    except ValidationError as exc:
        raise ReportError(f"{path}: not a valid {MATRIX_SCHEMA} v{MATRIX_VERSION} file: {validation_problem(exc)}") from None


SYMBOL = {"pass": "✅", "fail": "❌", "warn": "⚠️", "skip": "⏭", "none": "—"}
WORD = {"pass": "passes", "fail": "fails", "warn": "known failures", "skip": "skipped", "none": "no checks"}


class InconsistentReports(Exception):
    """Reports from different catalogs (or kit versions of the catalog) cannot be combined."""


@dataclass
class Combined:
    kit_version: str
    catalog_hash: str
    backends: dict[str, dict]  # id -> {label, kind, cli_version, levels, run_at}
    cells: dict[tuple[str, str, str], CellResult]  # (backend, level, check) -> cell
    areas: dict[str, str]  # check -> area
    #: (backend, level) -> the check ids applicable to that column (see `applicable_checks`)
    applicable: dict[tuple[str, str], frozenset[str]] = field(default_factory=dict)
    #: (backend, level, check) -> "KIT DATE" since when its outcome holds (kit/publish.py history)
    since: dict[tuple[str, str, str], str] = field(default_factory=dict)
    #: cells whose outcome changed since the previous matrix; None: there was none to compare with
    changes: list[dict] | None = None


def applicable_checks(catalog: dict, kind: str, capabilities: Iterable[str], level: str) -> frozenset[str]:
    """The catalog's checks that apply to a backend of `kind` declaring `capabilities` at `level`:
    what the plugin makes a cell of (kit/plugin.py pytest_generate_tests), whether or not it ran."""
    caps = set(capabilities)
    return frozenset(
        cid
        for cid, info in catalog.items()
        if kind in {str(k) for k in info.kinds} and level in info.levels and not (info.declines is not None and str(info.declines) in caps)
    )


def _installed_catalog(digest: str) -> dict | None:
    """The installed catalog when it is the one the reports ran (same hash), else None."""
    from harnesscheck.kit.catalog import catalog_hash, load_catalog

    try:
        catalog = load_catalog()
    except Exception:  # noqa: BLE001 - no catalog here: coverage falls back to the reports' cells
        return None
    return catalog if catalog_hash(catalog) == digest else None


def combine(reports: list[Report], catalog: dict | None = None, previous: dict | None = None) -> Combined:
    """The reports as one matrix. `catalog` (id -> CheckInfo) decides what is applicable to
    each column; by default the installed catalog when the reports ran it (same hash), else
    the reports' own cells (then a check a run did not select is not counted). `previous`: the
    previous matrix (a backends.json), for each cell's history. Every message, provenance and
    label is scrubbed of machine paths here (kit/publish.py), so no generated file holds one."""
    from harnesscheck.kit.publish import history, scrub

    if not reports:
        raise InconsistentReports("no reports given")
    hashes = {r.catalog_hash for r in reports}
    if len(hashes) > 1:
        raise InconsistentReports(f"reports ran different catalogs ({', '.join(sorted(hashes))}): rerun them with one kit version")
    backends: dict[str, dict] = {}
    cells: dict[tuple[str, str, str], CellResult] = {}
    areas: dict[str, str] = {}
    for report in sorted(reports, key=lambda r: r.finished_at or r.started_at):
        for b in report.backends:
            entry = backends.setdefault(b.id, {"label": scrub(b.label), "kind": b.kind, "cli_version": {}, "run_at": {}})
            for level in report.levels:
                if any(c.backend == b.id and c.level == level for c in report.cells):
                    entry["cli_version"][level] = b.cli_versions.get(level, b.cli_version) if b.cli_versions else b.cli_version
                    entry["run_at"][level] = report.finished_at or report.started_at
        for cell in report.cells:
            cell = cell.model_copy(update={"message": scrub(cell.message), "provenance": scrub(cell.provenance)})
            cells[(cell.backend, cell.level, cell.check)] = cell
            areas[cell.check] = cell.area or cell.check.split(".", 1)[0]
    if catalog is None:
        catalog = _installed_catalog(reports[0].catalog_hash)
    declared = {b.id: (b.kind, b.capabilities) for r in reports for b in r.backends}
    applicable: dict[tuple[str, str], frozenset[str]] = {}
    for backend, level, check in cells:
        known = applicable.get((backend, level))
        if known is None:
            kind, caps = declared.get(backend, ("", []))
            known = applicable_checks(catalog, kind, caps, level) if catalog is not None and kind else frozenset()
        applicable[(backend, level)] = known | {check}
    if catalog is not None:
        for check in set().union(*applicable.values()) - set(areas):
            areas[check] = catalog[check].area if check in catalog else check.split(".", 1)[0]
    since, changes = history(cells, backends, reports[0].kit_version, previous)
    return Combined(reports[0].kit_version, reports[0].catalog_hash, backends, cells, areas, applicable, since, changes if previous is not None else None)


RAN = ("passed", "failed", "xfailed")


def coverage(m: Combined, backend: str, level: str) -> MatrixCoverage:
    """The column's coverage: checks that reached a verdict, of those applicable to it, and
    why the others did not run."""
    wanted = m.applicable.get((backend, level)) or frozenset(c for (b, lv, c) in m.cells if (b, lv) == (backend, level))
    ran = 0
    not_run: dict[str, int] = defaultdict(int)
    for check in wanted:
        cell = m.cells.get((backend, level, check))
        if cell is None:
            not_run["not-selected"] += 1
        elif cell.outcome in RAN:
            ran += 1
        else:
            not_run["error" if cell.outcome == "error" else cell.reason or "skipped"] += 1
    return MatrixCoverage(ran=ran, applicable=len(wanted), not_run=dict(sorted(not_run.items())))


def coverage_text(cov: MatrixCoverage) -> str:
    """`41/63 ran (65%)`."""
    share = f" ({100 * cov.ran // cov.applicable}%)" if cov.applicable else ""
    return f"{cov.ran}/{cov.applicable} ran{share}"


def area_status(cells: list[CellResult]) -> str:
    outcomes = {c.outcome for c in cells}
    if not cells:
        return "none"
    if outcomes & {"failed", "error"}:
        return "fail"
    if "xfailed" in outcomes:
        return "warn"
    if "passed" in outcomes:
        return "pass"
    return "skip"


def columns(m: Combined) -> list[tuple[str, str]]:
    """(backend, level) columns that reached a verdict. A column where no check ran (every cell
    skipped: a level that cannot apply to the backend, "fake is in-process: only the offline
    level exists", a CLI not pinned, an adapter not written, or a binary not installed here) is
    left out, not shown as a 0 % column: the page and backends.md name it once, with why."""
    cols = {(b, lv) for (b, lv, _) in m.cells}
    for b, lv in list(cols):
        cells = [c for (cb, clv, _), c in m.cells.items() if (cb, clv) == (b, lv)]
        if cells and all(c.outcome == "skipped" for c in cells):
            cols.discard((b, lv))
    return sorted(cols, key=lambda bl: (bl[0], ["offline", "loopback", "live"].index(bl[1]) if bl[1] in ("offline", "loopback", "live") else 9))


def to_json(m: Combined) -> dict:
    out_cells: dict = defaultdict(lambda: defaultdict(dict))
    out_areas: dict = defaultdict(lambda: defaultdict(dict))
    by_area: dict = defaultdict(list)
    for (backend, level, check), cell in sorted(m.cells.items()):
        out_cells[backend][level][check] = {
            "outcome": cell.outcome,
            "reason": cell.reason,
            "provenance": cell.provenance or None,
            "containment": cell.containment,
            "since": m.since.get((backend, level, check)),
        }
        by_area[(backend, level, m.areas[check])].append(cell)
    for (backend, level, area), cells in sorted(by_area.items()):
        out_areas[backend][level][area] = area_status(cells)
    data = {
        "schema": MATRIX_SCHEMA,
        "version": MATRIX_VERSION,
        "kit_version": m.kit_version,
        "catalog_hash": m.catalog_hash,
        "backends": m.backends,
        "areas": {k: dict(v) for k, v in out_areas.items()},
        "cells": {k: {lv: dict(c) for lv, c in v.items()} for k, v in out_cells.items()},
        "coverage": _coverage_json(m),
        "severity": {check: severity_of(check) for check in sorted(m.areas)},
        "changes": m.changes or [],
    }
    return MatrixFile.model_validate(data).model_dump(mode="json", by_alias=True)  # what is written, validated


def coverage_why(cov: MatrixCoverage) -> str:
    """`41 of 63 applicable checks ran; not run: 20 unsupported-by-backend, 2 budget`."""
    why = ", ".join(f"{n} {reason}" for reason, n in sorted(cov.not_run.items(), key=lambda rn: (-rn[1], rn[0])))
    return f"{cov.ran} of {cov.applicable} applicable checks ran" + (f"; not run: {why}" if why else "")


def _coverage_json(m: Combined) -> dict:
    out: dict = defaultdict(dict)
    for backend, level in sorted({(b, lv) for (b, lv, _) in m.cells}):
        out[backend][level] = coverage(m, backend, level).model_dump()
    return dict(out)


def verdict(m: Combined) -> tuple[str, str, list[CellResult]]:
    """(status, sentence, cells it links to) for the top of the page and of backends.md.
    Never "no check fails" while a known failure exists; a known failure in a security area
    is named with its first message line."""
    shown = set(columns(m))
    cells = [c for (b, lv, _), c in sorted(m.cells.items()) if (b, lv) in shown]
    failing = [c for c in cells if c.outcome in ("failed", "error")]
    known = [c for c in cells if c.outcome == "xfailed"]
    skipped = sum(c.outcome == "skipped" for c in cells)
    security = [c for c in known if m.areas.get(c.check, "") in SECURITY_AREAS or severity_of(c.check) in ("critical", "high")]

    def named(c: CellResult) -> str:
        first = _first_line(c.message, 200)
        return f"{c.check} ({severity_of(c.check)}) on {c.backend} ({c.level})" + (f": {first}" if first else "")

    parts: list[str] = []
    if failing:
        parts.append(f"{len(failing)} check{'s' if len(failing) != 1 else ''} fail{'s' if len(failing) == 1 else ''}.")
    if known:
        parts.append(f"{len(known)} known failure{'s' if len(known) != 1 else ''} (baseline)" + (" other than the failures" if failing else "") + ".")
        if security:
            parts.append(f"Security-relevant known failure{'s' if len(security) != 1 else ''}: " + "; ".join(named(c) for c in security) + ".")
    if not failing and not known:
        parts.append("No check fails.")
    elif not failing:
        parts.append("Every other check that ran passes.")
    parts.append(f"{skipped} cells are skipped, each with a reason.")
    status = "fail" if failing else "warn" if known else "pass"
    return status, " ".join(parts), failing or known


def _cells_in(m: Combined, backend: str, level: str, area: str) -> list[CellResult]:
    return [c for (b, lv, chk), c in sorted(m.cells.items()) if b == backend and lv == level and m.areas[chk] == area]


def _footnotes(m: Combined) -> tuple[dict[tuple, list[int]], list[str]]:
    """Footnote numbers per (backend, level, area), one note per distinct non-pass reason."""
    notes: list[str] = []
    index: dict[str, int] = {}
    refs: dict[tuple, list[int]] = defaultdict(list)
    shown = set(columns(m))
    for (backend, level, check), cell in sorted(m.cells.items()):
        if cell.outcome == "passed" or (backend, level) not in shown:
            continue
        if cell.outcome == "skipped":  # one note per distinct reason, shared by every cell it explains
            text = f"⏭ `{cell.reason}` — {cell.message or REASON_CODES.get(cell.reason or '', '')}"
        else:
            first = (cell.message or "").strip().splitlines()[0][:240] if cell.message else ""
            text = (
                f"{SYMBOL['warn' if cell.outcome == 'xfailed' else 'fail']} `{check}` ({severity_of(check)}) on {backend} ({level}): {cell.outcome}"
                + (f" [{cell.reason}]" if cell.reason else "")
                + (f" — {first}" if first else "")
            )
        if text not in index:
            notes.append(text)
            index[text] = len(notes)
        key = (backend, level, m.areas[check])
        if index[text] not in refs[key]:
            refs[key].append(index[text])
    return refs, notes


def hidden_columns(m: Combined) -> list[tuple[str, str, str]]:
    """(backend, level, why) of the columns left out because no check reached a verdict there."""
    shown = set(columns(m))
    out = []
    for b, lv in sorted({(b, lv) for (b, lv, _) in m.cells} - shown, key=lambda bl: (bl[0], _level_rank(bl[1]))):
        whys = Counter(_first_line(c.message or REASON_CODES.get(c.reason or "", ""), 160) for (cb, clv, _), c in m.cells.items() if (cb, clv) == (b, lv))
        out.append((b, lv, whys.most_common(1)[0][0] if whys else ""))
    return out


#: at most this many changes are listed one by one (the rest are counted): the page stays bounded
CHANGES_LISTED = 60


def change_lines(m: Combined) -> list[str]:
    """Markdown lines: what changed since the previous matrix, worst first."""
    if m.changes is None:
        return ["No previous matrix was given to compare with: every cell's history starts here."]
    if not m.changes:
        return ["No cell changed its outcome."]
    rank = {"failed": 0, "error": 0, "xfailed": 1, "skipped": 2, "passed": 3}
    ordered = sorted(m.changes, key=lambda c: (rank.get(c["now"], 4), c["check"], c["backend"], c["level"]))
    out = [
        f"- `{c['check']}` ({severity_of(c['check'])}) on {c['backend']} ({c['level']}): {c['before'] or 'new'} → {c['now']}" for c in ordered[:CHANGES_LISTED]
    ]
    if len(ordered) > CHANGES_LISTED:
        out.append(f"- … and {len(ordered) - CHANGES_LISTED} more (backends.json `changes` lists them all)")
    return out


def to_markdown(m: Combined) -> str:
    cols = columns(m)
    refs, notes = _footnotes(m)
    lines = [
        "# Backend verification matrix",
        "",
        "Generated by `harnesscheck matrix` from conformance reports — do not edit by hand.",
        f"Kit {m.kit_version}, catalog `{m.catalog_hash}`. "
        "✅ every applicable check passes · ❌ a check fails · ⚠️ known failures (baseline) · ⏭ skipped (see notes) · — no check applies. "
        "A cell reads passed/run, then how many checks were skipped. "
        "**Coverage**: the checks that reached a verdict, of those applicable to the column (its backend's kind, "
        "the level, its declared capabilities); the reasons the others did not run are under Coverage below.",
        "",
        f"**Verdict:** {SYMBOL[verdict(m)[0]]} {verdict(m)[1]}",
        "",
        "| Area | " + " | ".join(f"{b} ({lv})" for b, lv in cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    head = ["CLI version"] + [str(m.backends.get(b, {}).get("cli_version", {}).get(lv) or "n/a") for b, lv in cols]
    date = ["Verified"] + [str(m.backends.get(b, {}).get("run_at", {}).get(lv) or "")[:10] for b, lv in cols]
    lines.append("| " + " | ".join(f"*{x}*" for x in head) + " |")
    lines.append("| " + " | ".join(f"*{x}*" for x in date) + " |")
    lines.append("| **Coverage** | " + " | ".join(f"**{coverage_text(coverage(m, b, lv))}**" for b, lv in cols) + " |")
    for area, title in AREAS.items():
        row = []
        for backend, level in cols:
            cells = _cells_in(m, backend, level, area)
            status = area_status(cells)
            n_pass = sum(c.outcome == "passed" for c in cells)
            n_skip = sum(c.outcome == "skipped" for c in cells)
            mark = SYMBOL[status] + (f" {n_pass}/{len(cells) - n_skip}" if len(cells) > n_skip else "")
            if n_skip:
                mark += f" · {n_skip} skipped" if len(cells) > n_skip else f" {n_skip} skipped"
            if refs.get((backend, level, area)) and status != "pass":
                mark += " " + ",".join(f"[{n}]" for n in refs[(backend, level, area)][:6])
                if len(refs[(backend, level, area)]) > 6:
                    mark += "…"
            row.append(mark)
        if any(r != SYMBOL["none"] for r in row):
            lines.append(f"| {title} | " + " | ".join(row) + " |")
    hidden = hidden_columns(m)
    if hidden:
        lines += ["", "No check reached a verdict in these columns (each left out above): " + "; ".join(f"{b} ({lv}): {why}" for b, lv, why in hidden) + "."]
    lines += ["", "## Backends", ""]
    for backend, info in sorted(m.backends.items()):
        lines.append(f"- **{backend}** — {info.get('label', '')} ({info.get('kind', '')})")
    lines += ["", "## Coverage", ""]
    for backend, level in cols:
        lines.append(f"- **{backend} ({level})**: {coverage_why(coverage(m, backend, level))}")
    if notes:
        lines += ["", "## Notes", ""]
        lines += [f"{n}. {text}" for n, text in enumerate(notes, 1)]
    lines += ["", "## Changes since the previous matrix", ""]
    lines += change_lines(m)
    lines += ["", "## Reason codes", ""]
    lines += [f"- `{code}` — {text}" for code, text in REASON_CODES.items()]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------
# backends.html: one static, self-contained page (no script, no network: a CSP forbids both)

_OUTCOME_STATUS = {"passed": "pass", "failed": "fail", "error": "fail", "xfailed": "warn", "skipped": "skip"}
_OUTCOME_WORD = {"passed": "passed", "failed": "failed", "error": "error", "xfailed": "known failure", "skipped": "skipped"}
_SEVERITY = {"fail": 4, "warn": 3, "pass": 2, "skip": 1, "none": 0}
_MESSAGE_CHARS = 800


def _slug(*parts: str) -> str:
    return "-".join(re.sub(r"[^a-z0-9]+", "-", p.lower()).strip("-") or "x" for p in parts)


def _tally(cells: list[CellResult]) -> dict[str, int]:
    counts = dict.fromkeys(("pass", "fail", "warn", "skip"), 0)
    for c in cells:
        counts[_OUTCOME_STATUS.get(c.outcome, "fail")] += 1
    return counts


def _worst(statuses) -> str:
    return max(statuses, key=_SEVERITY.__getitem__, default="none")


def _first_lines(text: str, limit: int = _MESSAGE_CHARS) -> str:
    text = (text or "").strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _first_line(text: str, limit: int = 300) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _split_message(text: str) -> tuple[str, str]:
    """(first line, the whole message bounded) — the rest only when there is more to show."""
    first = _first_line(text)
    whole = _first_lines(text)
    return first, (whole if whole.strip() != first else "")


def _why(c: CellResult) -> str:
    return c.message or REASON_CODES.get(c.reason or "", "")


def _by_message(cells: list[CellResult]) -> list[dict]:
    """Skipped cells of one reason, grouped by their message: each message is written once,
    followed by the checks it explains (the page's size stays bounded)."""
    groups: dict[str, list[str]] = defaultdict(list)
    for c in sorted(cells, key=lambda c: c.check):
        groups[_first_line(c.message)].append(c.check)
    return [{"first": first, "checks": checks} for first, checks in sorted(groups.items(), key=lambda fc: fc[1][0])]


def to_html(m: Combined) -> str:
    """backends.html from templates/backends.html.j2 (Jinja2, autoescaping on: every report
    value is escaped by the template engine, none is pasted into markup here). This function
    builds the view model: which columns, cards, rows and sections, and their plain texts."""
    shown_cols = columns(m)
    all_cols = sorted({(b, lv) for (b, lv, _) in m.cells}, key=lambda bl: (bl[0], _level_rank(bl[1])))
    by_col: dict[tuple[str, str], list[CellResult]] = defaultdict(list)
    for (b, lv, _), cell in sorted(m.cells.items()):
        by_col[(b, lv)].append(cell)
    info = lambda b: m.backends.get(b, {})  # noqa: E731
    cli_of = lambda b, lv: str(info(b).get("cli_version", {}).get(lv) or "no CLI")  # noqa: E731
    when_of = lambda b, lv: str(info(b).get("run_at", {}).get(lv) or "")  # noqa: E731
    dates = sorted(d for b, lv in all_cols if (d := when_of(b, lv)))

    def col(b: str, lv: str) -> dict:
        return {"slug": _slug(b, lv), "backend": b, "level": lv, "cli": cli_of(b, lv), "date": when_of(b, lv)[:10]}

    def counts_of(t: dict[str, int]) -> list[str]:
        return [f"{t['pass']} passed"] + [f"{t[k]} {w}" for k, w in (("fail", "failing"), ("warn", "known"), ("skip", "skipped")) if t[k]]

    status, sentence, linked = verdict(m)
    names = sorted({(c.backend, c.level) for c in linked}, key=lambda bl: (bl[0], _level_rank(bl[1])))

    cards = []
    for b, lv in shown_cols:
        cells = by_col[(b, lv)]
        t = _tally(cells)
        st = _worst(s for s, n in t.items() if n)
        total = len(cells) or 1
        cli = cli_of(b, lv)
        cards.append(
            {
                "slug": _slug(b, lv),
                "label": str(info(b).get("label") or b),
                "status": st,
                "word": WORD[st],
                "backend": b,
                "level": lv,
                "cli": cli if cli == "no CLI" else "CLI " + cli,
                "when": when_of(b, lv)[:16].replace("T", " ") or "date unknown",
                "bar": [(k, f"{100 * t[k] / total:.1f}") for k in ("pass", "warn", "fail", "skip") if t[k]],
                "counts": counts_of(t),
                "coverage": coverage_text(coverage(m, b, lv)),
                "coverage_why": coverage_why(coverage(m, b, lv)),
            }
        )
    hidden_why = [{**col(b, lv), "why": why} for b, lv, why in hidden_columns(m)]

    groups: list[dict] = []
    for b, _ in shown_cols:
        if groups and groups[-1]["backend"] == b:
            groups[-1]["span"] += 1
        else:
            groups.append({"backend": b, "span": 1, "kind": str(info(b).get("kind") or "")})

    # By area, one row per backend and level and one column per area: 13 narrow columns fit
    # 1400 px whatever the number of backends (the other way round it scrolled sideways).
    area_keys = [a for a in AREAS if any(_cells_in(m, b, lv, a) for b, lv in shown_cols)]
    area_heads = [{"key": a, "title": AREAS[a]} for a in area_keys]
    area_rows = []
    for b, lv in shown_cols:
        row = []
        for area in area_keys:
            cells = _cells_in(m, b, lv, area)
            if not cells:
                row.append({"empty": True})
                continue
            st = area_status(cells)
            t = _tally(cells)
            ran = t["pass"] + t["fail"] + t["warn"]
            row.append(
                {
                    "empty": False,
                    "status": st,
                    "word": WORD[st],
                    "slug": _slug(b, lv),
                    "main": f"{t['pass']}/{ran}" if ran else "skipped",
                    "subs": [f"{t[k]} {w}" for k, w in (("fail", "failing"), ("warn", "known"), ("skip", "skipped")) if t[k] and (ran or k != "skip")],
                }
            )
        area_rows.append({**col(b, lv), "cells": row})

    sections = []
    for b, lv in shown_cols:
        cells = by_col[(b, lv)]
        t = _tally(cells)
        ran_here = (b, lv) in shown_cols
        st = _worst(s for s, n in t.items() if n) if ran_here else "skip"
        bad = sorted((c for c in cells if c.outcome not in ("passed", "skipped")), key=lambda c: (-_SEVERITY[_OUTCOME_STATUS.get(c.outcome, "fail")], c.check))
        whys = sorted({_first_line(_why(c)) for c in cells})
        problems = []
        for c in bad:
            first, rest = _split_message(_why(c))
            problems.append(
                {
                    "cell": c,
                    "status": _OUTCOME_STATUS.get(c.outcome, "fail"),
                    "severity": severity_of(c.check),
                    "since": m.since.get((b, lv, c.check), ""),
                    "word": _OUTCOME_WORD.get(c.outcome, c.outcome),
                    "first": first,
                    "rest": rest,
                }
            )
        skips = [c for c in cells if c.outcome == "skipped"]
        skip_view = None
        if skips:
            by_reason: dict[str, list[CellResult]] = defaultdict(list)
            for c in skips:
                by_reason[c.reason or "no reason"].append(c)
            ordered = sorted(by_reason.items(), key=lambda rv: (-len(rv[1]), rv[0]))
            skip_view = {
                "n": len(skips),
                "tally": ", ".join(f"{len(v)} {r}" for r, v in ordered),
                "groups": [{"reason": r, "text": REASON_CODES.get(r, ""), "entries": _by_message(group)} for r, group in ordered],
            }
        sections.append(
            {
                "slug": _slug(b, lv),
                "status": st,
                "word": WORD[st],
                "backend": b,
                "level": lv,
                "cli": cli_of(b, lv),
                "when": when_of(b, lv)[:16].replace("T", " "),
                "counts": counts_of(t),
                "ran_here": ran_here,
                "whys": whys[:3],
                "more_whys": len(whys) > 3,
                "bad": problems,
                "all_passed": not t["skip"],
                "skips": skip_view,
                "coverage_why": coverage_why(coverage(m, b, lv)),
                "provenances": sorted({_first_lines(c.provenance, 300) for c in cells if c.provenance}),
            }
        )

    def check_cell(cell: CellResult | None) -> dict:
        """A mark, its outcome word for screen readers, and a link to the column's section,
        where a failure's or skip's message is written out (nothing is reached by hover alone,
        and each message is on the page once: its size stays bounded)."""
        if cell is None:
            return {"cell": None, "status": "none"}
        word = _OUTCOME_WORD.get(cell.outcome, cell.outcome) + (f" [{cell.reason}]" if cell.reason else "")
        return {"cell": cell, "status": _OUTCOME_STATUS.get(cell.outcome, "fail"), "word": word, "slug": _slug(cell.backend, cell.level)}

    check_groups = []
    for area, title in AREAS.items():
        checks = sorted(chk for chk, a in m.areas.items() if a == area)
        if checks:
            check_groups.append(
                {
                    "title": title,
                    "rows": [
                        {
                            "area": chk.partition(".")[0],
                            "rest": chk.partition(".")[2],
                            "severity": severity_of(chk),
                            "cells": [check_cell(m.cells.get((b, lv, chk))) for b, lv in shown_cols],
                        }
                        for chk in checks
                    ],
                }
            )
    leftovers = [
        {"check": chk, "cells": [check_cell(m.cells.get((b, lv, chk))) for b, lv in shown_cols]}
        for chk in sorted(chk for chk, a in m.areas.items() if a not in AREAS)
    ]  # an area the catalog does not name still shows

    return _template().render(
        kit_version=m.kit_version,
        catalog_hash=m.catalog_hash,
        n_backends=len(m.backends),
        n_checks=len(m.areas),
        verified=dates[-1][:10] if dates else "unknown date",
        verdict={"status": status, "sentence": sentence, "links": [col(b, lv) for b, lv in names]},
        legend=LEGEND,
        cards=cards,
        hidden=hidden_why,
        groups=groups,
        area_heads=area_heads,
        shown=[col(b, lv) for b, lv in shown_cols],
        area_rows=area_rows,
        sections=sections,
        changes=change_lines(m),
        severities=SEVERITY_TEXT,
        check_groups=check_groups,
        leftovers=leftovers,
        reason_codes=list(REASON_CODES.items()),
    )


SEVERITY_TEXT = (
    ("critical", "a secret, a credential or a file outside the scope can leak, or a denied action can run"),
    ("high", "the host loses control of the session (survivors, deadlines, a failure read as success)"),
    ("medium", "the outcome is misreported (error class, lost text, usage)"),
    ("low", "bookkeeping"),
)

LEGEND = (
    ("pass", "every check that ran passes"),
    ("fail", "a check fails"),
    ("warn", "known failure (baseline entry)"),
    ("skip", "skipped, with a reason code"),
    ("none", "no check applies"),
)


@cache
def _template():
    """The page's template. Why Jinja2: autoescaping by default (a report's text can never
    become markup or break out of an attribute), and the page's markup lives in one file
    instead of f-strings spread through Python."""
    from jinja2 import Environment, PackageLoader, StrictUndefined

    env = Environment(
        loader=PackageLoader("harnesscheck.kit", "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=StrictUndefined,
        keep_trailing_newline=True,
    )
    return env.get_template("backends.html.j2")


def _level_rank(level: str) -> int:
    return ("offline", "loopback", "live").index(level) if level in ("offline", "loopback", "live") else 9


def write_matrix(m: Combined, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    files = {
        out / "backends.md": to_markdown(m),
        out / "backends.json": json.dumps(to_json(m), indent=1, sort_keys=True) + "\n",
        out / "backends.html": to_html(m),
    }
    for path, text in files.items():  # whole snapshots only
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    return list(files)


#: Columns whose id changed: the new id -> the id a committed matrix may still hold them under.
#: `api` drove anthropic_messages only until each api_mode got its own column (`api/<mode>`):
#: until the matrix is regenerated, the ratchet compares api/anthropic_messages with the cells
#: committed as `api`. The two new columns have no committed cells, so nothing of them is compared.
FORMER_IDS: dict[str, str] = {"api/anthropic_messages": "api"}


def committed_cells(committed: dict, backend: str) -> dict:
    """The committed matrix's cells of a column (level -> check -> cell), under its former id
    (FORMER_IDS) when the matrix predates the rename."""
    cells = committed.get("cells", {})
    if backend in cells:
        return cells[backend]
    return cells.get(FORMER_IDS.get(backend, ""), {})


def regressions(committed: dict, report: Report, baseline=None) -> list[str]:
    """Cells that passed in the committed matrix and do not pass now (SPEC-matrix, "The ratchet"):
    failed or errored without a baseline entry for them, or skipped for any reason, except
    env-missing in a column (backend, level) where every cell was skipped env-missing: that
    level could not run here at all, so nothing of it was compared; and except `budget`, which
    says this machine was too slow to judge the cell (no verdict on the backend): counting it
    would make the ratchet depend on the machine's speed. A cell absent from the report (a
    column not run, a check deselected) is not compared either. A renamed column is compared
    with its cells under the former id (FORMER_IDS)."""
    out = []
    unavailable = _columns_that_could_not_run(report)
    for cell in report.cells:
        before = committed_cells(committed, cell.backend).get(cell.level, {}).get(cell.check)
        if not before or before.get("outcome") != "passed" or cell.outcome in ("passed", "xfailed") or cell.reason == "stale-baseline":
            continue
        if cell.outcome in ("failed", "error") and baseline is not None and baseline.match(cell.check, cell.backend, cell.level):
            continue
        if cell.outcome == "skipped" and ((cell.backend, cell.level) in unavailable or cell.reason == "budget"):
            continue
        now = f"skipped [{cell.reason}]" if cell.outcome == "skipped" else cell.outcome
        out.append(f"{cell.check} on {cell.backend} ({cell.level}) passed before and now {now}: {cell.message[:200]}")
    return out


def _columns_that_could_not_run(report: Report) -> set[tuple[str, str]]:
    """(backend, level) columns whose every cell was skipped env-missing."""
    seen: dict[tuple[str, str], bool] = {}
    for cell in report.cells:
        key = (cell.backend, cell.level)
        seen[key] = seen.get(key, True) and cell.outcome == "skipped" and cell.reason == "env-missing"
    return {key for key, all_missing in seen.items() if all_missing}


def matrix_command(reports: list[Path], out: Path, previous: Path | None = None) -> int:
    """`harnesscheck matrix REPORT...`: 0 written, 2 unusable input (nothing written).
    `previous`: the matrix to take history from; by default the backends.json already in
    `out` (regenerating doc/ compares with the committed doc/backends.json)."""
    import sys

    from harnesscheck.kit.publish import read_previous

    try:
        before = read_previous(previous if previous is not None else Path(out) / "backends.json")
        combined = combine([read_report(Path(p)) for p in reports], previous=before)
    except ReportError as exc:
        print(
            f"harnesscheck matrix: {exc}\n  fix: pass conformance-report.json files written by `harnesscheck verify` (or `pytest --hc-report FILE`)",
            file=sys.stderr,
        )
        return 2
    except InconsistentReports as exc:
        print(f"harnesscheck matrix: {exc}", file=sys.stderr)
        return 2
    for path in write_matrix(combined, Path(out)):
        print(f"wrote {path}")
    return 0
