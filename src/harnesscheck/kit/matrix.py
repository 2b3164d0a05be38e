"""The verification matrix: reports combined into doc/backends.md, backends.json and backends.html.

Reports combine only when they ran the same catalog (same hash); otherwise nothing is
written (a half-consistent matrix is worse than none). Each cell carries its level, the CLI
version it was verified with and the date. The committed backends.json is a ratchet:
`regressions()` lists cells that passed there and fail now without a baseline entry.
backends.json is a `MatrixFile` (doc/backends.schema.json); `read_matrix` validates one.

The verdict (first line of the page and of backends.md) never says "no check fails" while a
known failure (baseline xfail) exists: it counts them, and names every known failure in a
security-relevant area (SECURITY_AREAS) with its first message line.
"""

from __future__ import annotations

import html
import json
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harnesscheck.kit.catalog import AREAS, REASON_CODES
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


class MatrixFile(BaseModel):
    """backends.json: per backend, level and check the outcome; per area the status."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, title="harnesscheck verification matrix")

    schema_name: Literal["harnesscheck-matrix"] = Field(default=MATRIX_SCHEMA, alias="schema")
    version: Literal[1] = MATRIX_VERSION
    kit_version: str
    catalog_hash: str
    backends: dict[str, MatrixBackend]
    areas: dict[str, dict[str, dict[str, AreaStatus]]]  # backend -> level -> area -> status
    cells: dict[str, dict[str, dict[str, MatrixCell]]]  # backend -> level -> check -> cell


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


def combine(reports: list[Report]) -> Combined:
    if not reports:
        raise InconsistentReports("no reports given")
    hashes = {r.catalog_hash for r in reports}
    if len(hashes) > 1:
        raise InconsistentReports(
            f"reports ran different catalogs ({', '.join(sorted(hashes))}): rerun them with one kit version"
        )
    backends: dict[str, dict] = {}
    cells: dict[tuple[str, str, str], CellResult] = {}
    areas: dict[str, str] = {}
    for report in sorted(reports, key=lambda r: r.finished_at or r.started_at):
        for b in report.backends:
            entry = backends.setdefault(b.id, {"label": b.label, "kind": b.kind, "cli_version": {}, "run_at": {}})
            for level in report.levels:
                if any(c.backend == b.id and c.level == level for c in report.cells):
                    entry["cli_version"][level] = b.cli_versions.get(level, b.cli_version) if b.cli_versions else b.cli_version
                    entry["run_at"][level] = report.finished_at or report.started_at
        for cell in report.cells:
            cells[(cell.backend, cell.level, cell.check)] = cell
            areas[cell.check] = cell.area or cell.check.split(".", 1)[0]
    return Combined(reports[0].kit_version, reports[0].catalog_hash, backends, cells, areas)


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
    """(backend, level) columns; a level this machine could not run for a backend at all (every
    cell skipped env-missing) is left out rather than shown as a column of skips."""
    cols = {(b, lv) for (b, lv, _) in m.cells}
    for b, lv in list(cols):
        cells = [c for (cb, clv, _), c in m.cells.items() if (cb, clv) == (b, lv)]
        if lv != "offline" and cells and all(c.outcome == "skipped" for c in cells) and any(c.reason == "env-missing" for c in cells):
            cols.discard((b, lv))
    return sorted(cols, key=lambda bl: (bl[0], ["offline", "loopback", "live"].index(bl[1]) if bl[1] in ("offline", "loopback", "live") else 9))


def to_json(m: Combined) -> dict:
    out_cells: dict = defaultdict(lambda: defaultdict(dict))
    out_areas: dict = defaultdict(lambda: defaultdict(dict))
    by_area: dict = defaultdict(list)
    for (backend, level, check), cell in sorted(m.cells.items()):
        out_cells[backend][level][check] = {"outcome": cell.outcome, "reason": cell.reason}
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
    }
    return MatrixFile.model_validate(data).model_dump(mode="json", by_alias=True)  # what is written, validated


def verdict(m: Combined) -> tuple[str, str, list[CellResult]]:
    """(status, sentence, cells it links to) for the top of the page and of backends.md.
    Never "no check fails" while a known failure exists; a known failure in a security area
    is named with its first message line."""
    shown = set(columns(m))
    cells = [c for (b, lv, _), c in sorted(m.cells.items()) if (b, lv) in shown]
    failing = [c for c in cells if c.outcome in ("failed", "error")]
    known = [c for c in cells if c.outcome == "xfailed"]
    skipped = sum(c.outcome == "skipped" for c in cells)
    security = [c for c in known if m.areas.get(c.check, "") in SECURITY_AREAS]

    def named(c: CellResult) -> str:
        first = _first_line(c.message, 200)
        return f"{c.check} on {c.backend} ({c.level})" + (f": {first}" if first else "")

    parts: list[str] = []
    if failing:
        parts.append(f"{len(failing)} check{'s' if len(failing) != 1 else ''} fail{'s' if len(failing) == 1 else ''}.")
    if known:
        parts.append(f"{len(known)} known failure{'s' if len(known) != 1 else ''} (baseline)"
                     + (" other than the failures" if failing else "") + ".")
        if security:
            parts.append(f"Security-relevant known failure{'s' if len(security) != 1 else ''}: "
                         + "; ".join(named(c) for c in security) + ".")
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
            text = f"{SYMBOL['warn' if cell.outcome == 'xfailed' else 'fail']} `{check}` on {backend} ({level}): {cell.outcome}" + (
                f" [{cell.reason}]" if cell.reason else "") + (f" — {first}" if first else "")
        if text not in index:
            notes.append(text)
            index[text] = len(notes)
        key = (backend, level, m.areas[check])
        if index[text] not in refs[key]:
            refs[key].append(index[text])
    return refs, notes


def to_markdown(m: Combined) -> str:
    cols = columns(m)
    refs, notes = _footnotes(m)
    lines = [
        "# Backend verification matrix",
        "",
        "Generated by `harnesscheck matrix` from conformance reports — do not edit by hand.",
        f"Kit {m.kit_version}, catalog `{m.catalog_hash}`. "
        "✅ every applicable check passes · ❌ a check fails · ⚠️ known failures (baseline) · ⏭ skipped (see notes) · — no check applies. "
        "A cell reads passed/run, then how many checks were skipped.",
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
    lines += ["", "## Backends", ""]
    for backend, info in sorted(m.backends.items()):
        lines.append(f"- **{backend}** — {info.get('label', '')} ({info.get('kind', '')})")
    if notes:
        lines += ["", "## Notes", ""]
        lines += [f"{n}. {text}" for n, text in enumerate(notes, 1)]
    lines += ["", "## Reason codes", ""]
    lines += [f"- `{code}` — {text}" for code, text in REASON_CODES.items()]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------
# backends.html: one static, self-contained page (no script, no network: a CSP forbids both)

_OUTCOME_STATUS = {"passed": "pass", "failed": "fail", "error": "fail", "xfailed": "warn", "skipped": "skip"}
_OUTCOME_WORD = {"passed": "passed", "failed": "failed", "error": "error", "xfailed": "known failure", "skipped": "skipped"}
_SEVERITY = {"fail": 4, "warn": 3, "pass": 2, "skip": 1, "none": 0}
_MESSAGE_CHARS = 800

# Shapes differ per status (check, cross, triangle, skip-forward, dash), drawn in the text colour,
# so the page reads the same without colour and without an emoji font.
_ICONS = (
    "<svg class=sprite aria-hidden=true focusable=false>"
    "<symbol id=i-pass viewBox='0 0 16 16'><path d='M2.5 8.6l3.6 3.6 7.4-8' fill=none stroke=currentColor stroke-width=2.4 "
    "stroke-linecap=round stroke-linejoin=round /></symbol>"
    "<symbol id=i-fail viewBox='0 0 16 16'><path d='M3.5 3.5l9 9M12.5 3.5l-9 9' fill=none stroke=currentColor stroke-width=2.4 "
    "stroke-linecap=round /></symbol>"
    "<symbol id=i-warn viewBox='0 0 16 16'><path d='M8 1.8l6.6 12H1.4z' fill=none stroke=currentColor stroke-width=1.6 "
    "stroke-linejoin=round /><path d='M8 6v3.8' stroke=currentColor stroke-width=1.8 stroke-linecap=round /><circle cx=8 cy=12 r=1 "
    "fill=currentColor /></symbol>"
    "<symbol id=i-skip viewBox='0 0 16 16'><path d='M2 3.5l5 4.5-5 4.5zM7.5 3.5l5 4.5-5 4.5z' fill=currentColor /><path d='M14 3.5v9' "
    "stroke=currentColor stroke-width=1.8 stroke-linecap=round /></symbol>"
    "<symbol id=i-none viewBox='0 0 16 16'><path d='M4.5 8h7' stroke=currentColor stroke-width=1.6 stroke-linecap=round /></symbol>"
    "</svg>"
)

_CSS = """
:root{--fg:#1b2130;--muted:#596177;--line:#d9dde6;--head:#eef1f6;--page:#fff;
--pass-bg:#dcf2e1;--pass-fg:#14532d;--fail-bg:#fde1df;--fail-fg:#8f1414;--fail-edge:#c62828;
--warn-bg:#fcefc7;--warn-fg:#664200;--skip-bg:#eceef3;--skip-fg:#4a5163;--none-fg:#6b7386}
@media (prefers-color-scheme:dark){:root{--fg:#e6e9f0;--muted:#a6adbd;--line:#394052;--head:#232836;--page:#151922;
--pass-bg:#173b25;--pass-fg:#a6e9b8;--fail-bg:#4a1a1a;--fail-fg:#ffb4ad;--fail-edge:#ff6b5e;
--warn-bg:#45380f;--warn-fg:#ffd98a;--skip-bg:#2a2f3c;--skip-fg:#c3c8d4;--none-fg:#8c94a7}}
*{box-sizing:border-box}
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1280px;padding:1.5rem 1rem 3rem;
color:var(--fg);background:var(--page)}
h1{font-size:1.55rem;margin:0 0 .25rem}h2{font-size:1.15rem;margin:2.2rem 0 .6rem}
.sub{color:var(--muted);margin:0 0 1rem}
code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.88em;background:var(--head);padding:0 .25rem;border-radius:4px}
a{color:inherit}
.sprite{position:absolute;width:0;height:0;overflow:hidden}
.ic{width:1em;height:1em;vertical-align:-.14em;flex:none}
.sr{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0);white-space:nowrap}
.pass{background:var(--pass-bg);color:var(--pass-fg)}.fail{background:var(--fail-bg);color:var(--fail-fg);box-shadow:inset 0 0 0 2px var(--fail-edge)}
.warn{background:var(--warn-bg);color:var(--warn-fg)}.skip{background:var(--skip-bg);color:var(--skip-fg)}.none{color:var(--none-fg)}
.verdict{display:flex;gap:.6rem;align-items:center;padding:.7rem 1rem;border-radius:10px;font-weight:600;margin:0 0 1rem}
.verdict .ic{width:1.3em;height:1.3em}
.legend{display:flex;flex-wrap:wrap;gap:.4rem 1rem;margin:0 0 1.2rem;padding:0;list-style:none;font-size:.88rem;color:var(--muted)}
.legend li{display:flex;gap:.35rem;align-items:center}.legend .chip{display:inline-flex;padding:.1rem .45rem;border-radius:6px}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(205px,1fr));gap:.7rem;margin:0 0 .5rem}
.card{border:1px solid var(--line);border-radius:10px;padding:.7rem .8rem;text-decoration:none;display:block}
.card:hover{border-color:var(--muted)}
.card .t .s{background:none;box-shadow:none}
h3{font-size:1rem;margin:0 0 .5rem;display:flex;flex-wrap:wrap;gap:.2rem .5rem;align-items:center}
h3 small{font-weight:400;color:var(--muted);font-size:.82rem;flex-basis:100%}
section.col{border:1px solid var(--line);border-radius:10px;padding:.7rem .9rem;margin:0 0 .8rem}
section.col h3 .ic{width:1.15em;height:1.15em}
.lv{font-size:.75rem;font-weight:600;padding:.05rem .45rem;border-radius:99px;border:1px solid var(--line);color:var(--muted)}
.note{color:var(--muted);font-size:.9rem;margin:.3rem 0}
ul.probs{list-style:none;margin:.2rem 0 .6rem;padding:0}
ul.probs>li{display:flex;gap:.5rem;padding:.2rem .5rem;border-radius:6px;margin:.2rem 0;font-size:.9rem}
ul.probs>li>.ic{margin-top:.3rem}
ul.probs>li>div{min-width:0;flex:1}
.o-fail{background:var(--fail-bg);color:var(--fail-fg);border-left:4px solid var(--fail-edge)}
.o-warn{background:var(--warn-bg);color:var(--warn-fg);border-left:4px solid var(--warn-fg)}
.why{color:var(--fg);overflow-wrap:anywhere}
details.more{border:0;padding:0;margin:0}details.more summary{font-weight:400;padding:.1rem 0}.line{padding:.1rem 0}
details.more[open]{padding-bottom:.3rem}details.more .msg{margin-top:.3rem}
details.more .msg{color:var(--fg)}
details.skips{margin:.4rem 0 0}
p.reason{margin:.5rem 0 .2rem;color:var(--muted);font-size:.88rem}p.reason code{font-weight:650;color:var(--fg)}
ul.skiplist{margin:0 0 .4rem;padding-left:1.2rem;font-size:.86rem;color:var(--muted)}ul.skiplist li{overflow-wrap:anywhere}
ul.skiplist code{color:var(--fg)}
.card .t{display:flex;gap:.45rem;align-items:center;font-weight:650}.card .t .ic{width:1.15em;height:1.15em}
.card .lv{margin-left:auto}
.card .m{font-size:.82rem;color:var(--muted);margin:.15rem 0 .45rem}
.card .n{font-size:.82rem;display:flex;flex-wrap:wrap;gap:.1rem .7rem}
.bar{display:flex;height:6px;border-radius:3px;overflow:hidden;margin:.5rem 0 .1rem;background:var(--head)}
.bar i{display:block;box-shadow:none}
.bar .pass{background:var(--pass-fg)}.bar .fail{background:var(--fail-edge)}.bar .warn{background:var(--warn-fg)}.bar .skip{background:var(--none-fg)}
.scroll{position:relative;overflow-x:auto;border:1px solid var(--line);border-radius:10px}
table{border-collapse:separate;border-spacing:0;width:100%}
th,td{padding:.45rem .55rem;border-bottom:1px solid var(--line);text-align:center;vertical-align:middle}
tr:last-child>td{border-bottom:0}
thead th{background:var(--head);font-size:.85rem;font-weight:650;white-space:nowrap}
thead th small{display:block;font-weight:400;color:var(--muted);font-size:.76rem}
thead th.bk{border-left:1px solid var(--line)}
th.row,td.row{text-align:left;position:sticky;left:0;background:var(--page);z-index:1;font-weight:500;min-width:9.5rem}
thead th.row{background:var(--head);z-index:2}
td.c{font-weight:650;white-space:nowrap;border-left:3px solid var(--page)}
td.c a{text-decoration:none;display:block}
td.c small{display:block;font-weight:500;font-size:.74rem;opacity:.9}
tr.grp th{text-align:left;background:var(--head);font-size:.8rem;text-transform:uppercase;letter-spacing:.04em;color:var(--muted)}
.checks td,.checks th.row{padding:.2rem .45rem;font-size:.82rem}.checks td.row{font-family:ui-monospace,Menlo,Consolas,monospace;font-weight:400}
.scroll.tall{max-height:80vh;overflow:auto}.tall thead th{position:sticky;top:0;z-index:2}.tall thead th.row{z-index:3}
@media (max-width:40rem){.checks td.row{min-width:0;max-width:45vw;overflow-wrap:break-word}}
.list td,.list th{text-align:left;vertical-align:top;font-size:.88rem}
.list td.o{white-space:nowrap;font-weight:600}
.msg{white-space:pre-wrap;word-break:break-word;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.8rem;margin:0}
details{border:1px solid var(--line);border-radius:10px;margin:.5rem 0;padding:.1rem .8rem}
details[open]{padding-bottom:.7rem}
summary{cursor:pointer;padding:.45rem 0;font-weight:600}summary .ic{margin-right:.3rem}
summary small{font-weight:400;color:var(--muted)}
:target{outline:3px solid var(--fail-edge);outline-offset:2px}
dl.codes{display:grid;grid-template-columns:max-content 1fr;gap:.3rem 1rem;font-size:.9rem}dl.codes dd{margin:0;color:var(--muted)}
@media (max-width:640px){body{padding:1rem .6rem 2rem;font-size:14px}h1{font-size:1.3rem}
th.row,td.row{min-width:7.5rem;max-width:9rem}th,td{padding:.35rem .4rem}dl.codes{grid-template-columns:1fr}dl.codes dd{margin-bottom:.4rem}}
"""


def _slug(*parts: str) -> str:
    return "-".join(re.sub(r"[^a-z0-9]+", "-", p.lower()).strip("-") or "x" for p in parts)


def _icon(status: str) -> str:
    return f"<svg class=ic aria-hidden=true focusable=false><use href='#i-{status}'/></svg>"


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


def _cell_attrs(c: CellResult) -> str:
    """Machine-readable cell identity, so the page provably carries every cell of the json."""
    e = html.escape
    return (f" data-backend='{e(c.backend, quote=True)}' data-level='{e(c.level, quote=True)}'"
            f" data-check='{e(c.check, quote=True)}' data-outcome='{e(c.outcome, quote=True)}'"
            f" data-reason='{e(c.reason or '', quote=True)}'")


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


def to_html(m: Combined) -> str:
    e = html.escape
    shown = columns(m)
    all_cols = sorted({(b, lv) for (b, lv, _) in m.cells}, key=lambda bl: (bl[0], _level_rank(bl[1])))
    hidden = [col for col in all_cols if col not in shown]
    by_col: dict[tuple[str, str], list[CellResult]] = defaultdict(list)
    for (b, lv, _), cell in sorted(m.cells.items()):
        by_col[(b, lv)].append(cell)
    info = lambda b: m.backends.get(b, {})  # noqa: E731
    cli_of = lambda b, lv: str(info(b).get("cli_version", {}).get(lv) or "no CLI")  # noqa: E731
    when_of = lambda b, lv: str(info(b).get("run_at", {}).get(lv) or "")  # noqa: E731
    dates = sorted(d for b, lv in all_cols if (d := when_of(b, lv)))
    verified = dates[-1][:10] if dates else "unknown date"

    out = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        "<meta http-equiv=Content-Security-Policy content=\"default-src 'none'; style-src 'unsafe-inline'\">",
        "<meta name=viewport content='width=device-width,initial-scale=1'>",
        "<meta name=color-scheme content='light dark'>",
        "<title>harnesscheck — backend verification matrix</title>",
        f"<style>{_CSS}</style></head><body>",
        _ICONS,
        "<h1>Backend verification matrix</h1>",
        f"<p class=sub>Kit {e(m.kit_version)} · catalog <code>{e(m.catalog_hash)}</code> · {len(m.backends)} backends · "
        f"{len(m.areas)} checks · last verified {e(verified)}. Generated by <code>harnesscheck matrix</code>; do not edit.</p>",
    ]
    status, sentence, linked = verdict(m)
    names = sorted({(c.backend, c.level) for c in linked}, key=lambda bl: (bl[0], _level_rank(bl[1])))
    links = (" See " + ", ".join(f"<a href='#col-{_slug(b, lv)}'>{e(b)} ({e(lv)})</a>" for b, lv in names) + ".") if names else ""
    out.append(f"<p class='verdict {status}'>{_icon(status)}<span>{e(sentence)}{links}</span></p>")
    out.append("<ul class=legend>" + "".join(
        f"<li><span class='chip {k}'>{_icon(k)}</span>{e(t)}</li>" for k, t in (
            ("pass", "every check that ran passes"), ("fail", "a check fails"),
            ("warn", "known failure (baseline entry)"), ("skip", "skipped, with a reason code"), ("none", "no check applies"))
    ) + "<li><b>7/9</b>&nbsp;passed of the checks that ran; skips counted apart</li></ul>")

    # At a glance: one card per (backend, level) that ran; the levels this machine could not run, in one line
    out.append("<h2>At a glance</h2><div class=cards>")
    for b, lv in shown:
        cells = by_col[(b, lv)]
        t = _tally(cells)
        status = _worst(s for s, n in t.items() if n)
        total = len(cells) or 1
        bar = "".join(f"<i class={k} style='width:{100 * t[k] / total:.1f}%'></i>" for k in ("pass", "warn", "fail", "skip") if t[k])
        counts = [f"{t['pass']} passed"] + [f"{t[k]} {w}" for k, w in (("fail", "failing"), ("warn", "known"), ("skip", "skipped")) if t[k]]
        cli = cli_of(b, lv)
        out.append(
            f"<a class=card href='#col-{_slug(b, lv)}' title='{e(str(info(b).get('label') or b), quote=True)}'>"
            f"<div class=t><span class='s {status}'>{_icon(status)}<span class=sr>{e(WORD[status])}: </span></span>{e(b)}"
            f"<span class=lv>{e(lv)}</span></div>"
            f"<div class=m>{e(cli if cli == 'no CLI' else 'CLI ' + cli)}<br>{e(when_of(b, lv)[:16].replace('T', ' ') or 'date unknown')}</div>"
            f"<div class=bar aria-hidden=true>{bar}</div><div class=n>{' · '.join(e(x) for x in counts)}</div></a>"
        )
    out.append("</div>")
    if hidden:
        out.append("<p class=note>" + _icon("skip") + " Not run on this machine (every check skipped, <code>env-missing</code>): "
                   + ", ".join(f"<a href='#col-{_slug(b, lv)}'>{e(b)} ({e(lv)})</a>" for b, lv in hidden) + ".</p>")

    # The area matrix
    out.append("<h2>By area</h2><div class=scroll><table class=matrix><thead><tr><th class=row rowspan=2>Area</th>")
    groups: list[tuple[str, int]] = []
    for b, _ in shown:
        if groups and groups[-1][0] == b:
            groups[-1] = (b, groups[-1][1] + 1)
        else:
            groups.append((b, 1))
    out += [f"<th class=bk colspan={n}>{e(b)}<small>{e(str(info(b).get('kind') or ''))}</small></th>" for b, n in groups]
    out.append("</tr><tr>")
    out += [f"<th>{e(lv)}<small>{e(cli_of(b, lv))}</small><small>{e(when_of(b, lv)[:10])}</small></th>" for b, lv in shown]
    out.append("</tr></thead><tbody>")
    for area, title in AREAS.items():
        cells_by_col = [_cells_in(m, b, lv, area) for b, lv in shown]
        if not any(cells_by_col):
            continue
        out.append(f"<tr><th class=row scope=row>{e(title)}</th>")
        for (b, lv), cells in zip(shown, cells_by_col):
            status = area_status(cells)
            if not cells:
                out.append(f"<td class='c none'>{_icon('none')}<span class=sr>no checks</span></td>")
                continue
            t = _tally(cells)
            ran = t["pass"] + t["fail"] + t["warn"]
            main = f"{t['pass']}/{ran}" if ran else "skipped"
            subs = [f"{t[k]} {w}" for k, w in (("fail", "failing"), ("warn", "known"), ("skip", "skipped")) if t[k] and (ran or k != "skip")]
            tip = "\n".join(f"{c.check}: {_OUTCOME_WORD.get(c.outcome, c.outcome)}" + (f" [{c.reason}]" if c.reason else "") for c in cells)
            out.append(
                f"<td class='c {status}' title='{e(tip, quote=True)}'><a href='#col-{_slug(b, lv)}'>{_icon(status)}"
                f"<span class=sr>{e(WORD[status])}: </span> {e(main)}" + (f"<small>{e(' · '.join(subs))}</small>" if subs else "") + "</a></td>"
            )
        out.append("</tr>")
    out.append("</tbody></table></div>")

    # Per column: failures in full view, skips grouped by reason code behind one click
    out.append("<h2 id=details>Failures and skips, per backend and level</h2>")
    for b, lv in shown + hidden:
        cells = by_col[(b, lv)]
        t = _tally(cells)
        ran_here = (b, lv) in shown
        status = _worst(s for s, n in t.items() if n) if ran_here else "skip"
        counts = [f"{t['pass']} passed"] + [f"{t[k]} {w}" for k, w in (("fail", "failing"), ("warn", "known"), ("skip", "skipped")) if t[k]]
        out.append(
            f"<section class=col id=col-{_slug(b, lv)}><h3>{_icon(status)}<span class=sr>{e(WORD[status])}: </span>{e(b)} "
            f"<span class=lv>{e(lv)}</span><small>{e(cli_of(b, lv))} · {e(when_of(b, lv)[:16].replace('T', ' '))} · "
            f"{e(' · '.join(counts))}</small></h3>"
        )
        bad = sorted((c for c in cells if c.outcome not in ("passed", "skipped")),
                     key=lambda c: (-_SEVERITY[_OUTCOME_STATUS.get(c.outcome, "fail")], c.check))
        if not ran_here:
            whys = sorted({_first_line(_why(c)) for c in cells})
            out.append("<p class=note>Not run on this machine: " + "; ".join(e(w) for w in whys[:3]) + ("; …" if len(whys) > 3 else "") + "</p>")
        elif bad:
            out.append("<ul class=probs>")
            for c in bad:
                st = _OUTCOME_STATUS.get(c.outcome, "fail")
                first, rest = _split_message(_why(c))
                head = (f"<code>{e(c.check)}</code> <b>{e(_OUTCOME_WORD.get(c.outcome, c.outcome))}</b>"
                        + (f" <code>{e(c.reason)}</code>" if c.reason else "") + f" <span class=why>— {e(first)}</span>")
                body = (f"<details class=more><summary>{head}</summary><pre class=msg>{e(rest)}</pre></details>" if rest
                        else f"<div class=line>{head}</div>")
                out.append(f"<li class=o-{st}{_cell_attrs(c)}>{_icon(st)}<div>{body}</div></li>")
            out.append("</ul>")
        elif not t["skip"]:
            out.append("<p class=note>Every check passed.</p>")
        skips = [c for c in cells if c.outcome == "skipped"]
        if skips:
            by_reason: dict[str, list[CellResult]] = defaultdict(list)
            for c in skips:
                by_reason[c.reason or "no reason"].append(c)
            tally = ", ".join(f"{len(v)} {r}" for r, v in sorted(by_reason.items(), key=lambda rv: (-len(rv[1]), rv[0])))
            out.append(f"<details class=skips><summary>{_icon('skip')}{len(skips)} skipped <small>({e(tally)})</small></summary>")
            for reason, group in sorted(by_reason.items(), key=lambda rv: (-len(rv[1]), rv[0])):
                out.append(f"<p class=reason><code>{e(reason)}</code> {e(REASON_CODES.get(reason, ''))}</p><ul class=skiplist>")
                out += [f"<li{_cell_attrs(c)}><code>{e(c.check)}</code> {e(_first_line(c.message))}</li>" for c in sorted(group, key=lambda c: c.check)]
                out.append("</ul>")
            out.append("</details>")
        out.append("</section>")

    # Every check, one row each
    out.append("<h2>Every check</h2><details><summary>One row per check, one column per backend and level "
               "<small>(hover a mark for its message)</small></summary><div class='scroll tall'><table class=checks><thead><tr><th class=row>Check</th>")
    out += [f"<th>{e(b)}<small>{e(lv)}</small></th>" for b, lv in shown]
    out.append("</tr></thead><tbody>")
    for area, title in AREAS.items():
        checks = sorted(chk for chk, a in m.areas.items() if a == area)
        if checks:
            out.append(f"<tr class=grp><th colspan={len(shown) + 1}>{e(title)}</th></tr>")
        for check in checks:
            out.append(f"<tr><td class=row>{e(check).replace('.', '.<wbr>', 1)}</td>")  # a narrow screen breaks after the area
            for b, lv in shown:
                cell = m.cells.get((b, lv, check))
                if cell is None:
                    out.append(f"<td class='c none'>{_icon('none')}<span class=sr>not in this run</span></td>")
                    continue
                status = _OUTCOME_STATUS.get(cell.outcome, "fail")
                tip = _OUTCOME_WORD.get(cell.outcome, cell.outcome) + (f" [{cell.reason}]" if cell.reason else "") + (
                    f": {_first_lines(cell.message, 600)}" if cell.message else "")
                out.append(f"<td class='c {status}'{_cell_attrs(cell)} title='{e(tip, quote=True)}'>{_icon(status)}"
                           f"<span class=sr>{e(tip)}</span></td>")
            out.append("</tr>")
    leftovers = sorted(chk for chk, a in m.areas.items() if a not in AREAS)
    for check in leftovers:  # an area the catalog does not name still shows
        out.append(f"<tr><td class=row>{e(check)}</td>")
        for b, lv in shown:
            cell = m.cells.get((b, lv, check))
            status = _OUTCOME_STATUS.get(cell.outcome, "fail") if cell else "none"
            attrs = _cell_attrs(cell) if cell else ""
            out.append(f"<td class='c {status}'{attrs}>{_icon(status)}</td>")
        out.append("</tr>")
    out.append("</tbody></table></div></details>")

    out.append("<h2>Reason codes</h2><dl class=codes>")
    out += [f"<dt><code>{e(k)}</code></dt><dd>{e(v)}</dd>" for k, v in REASON_CODES.items()]
    out.append("</dl></body></html>")
    return "\n".join(out) + "\n"


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


def regressions(committed: dict, report: Report, baseline=None) -> list[str]:
    """Cells that passed in the committed matrix and fail now, with no baseline entry for them."""
    out = []
    cells = committed.get("cells", {})
    for cell in report.cells:
        before = cells.get(cell.backend, {}).get(cell.level, {}).get(cell.check)
        if not before or before.get("outcome") != "passed":
            continue
        if cell.outcome in ("failed", "error"):
            if baseline is not None and baseline.match(cell.check, cell.backend, cell.level):
                continue
            out.append(f"{cell.check} on {cell.backend} ({cell.level}) passed before and now {cell.outcome}: {cell.message[:200]}")
    return out


def matrix_command(reports: list[Path], out: Path) -> int:
    """`harnesscheck matrix REPORT...`: 0 written, 2 unusable input (nothing written)."""
    import sys

    try:
        combined = combine([read_report(Path(p)) for p in reports])
    except ReportError as exc:
        print(f"harnesscheck matrix: {exc}\n  fix: pass conformance-report.json files written by "
              "`harnesscheck verify` (or `pytest --hc-report FILE`)", file=sys.stderr)
        return 2
    except InconsistentReports as exc:
        print(f"harnesscheck matrix: {exc}", file=sys.stderr)
        return 2
    for path in write_matrix(combined, Path(out)):
        print(f"wrote {path}")
    return 0
