"""The verification matrix: reports combined into doc/backends.md, backends.json and backends.html.

Reports combine only when they ran the same catalog (same hash); otherwise nothing is
written (a half-consistent matrix is worse than none). Each cell carries its level, the CLI
version it was verified with and the date. The committed backends.json is a ratchet:
`regressions()` lists cells that passed there and fail now without a baseline entry.
"""

from __future__ import annotations

import html
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from harnesscheck.kit.catalog import AREAS, REASON_CODES
from harnesscheck.kit.results import CellResult, Report, ReportError, now_iso, read_report

MATRIX_SCHEMA = "harnesscheck-matrix"
MATRIX_VERSION = 1

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
    return {
        "schema": MATRIX_SCHEMA,
        "version": MATRIX_VERSION,
        "kit_version": m.kit_version,
        "catalog_hash": m.catalog_hash,
        "backends": m.backends,
        "areas": {k: dict(v) for k, v in out_areas.items()},
        "cells": {k: {lv: dict(c) for lv, c in v.items()} for k, v in out_cells.items()},
    }


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
        "✅ every applicable check passes · ❌ a check fails · ⚠️ known failures (baseline) · ⏭ skipped (see notes) · — no check applies.",
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
            mark = SYMBOL[status] + (f" {n_pass}/{len(cells)}" if cells else "")
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


_CSS = """
body{font:15px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem auto;max-width:1200px;color:#1d2330;padding:0 1rem}
h1{font-size:1.6rem;margin:0 0 .2rem} .sub{color:#5a6275;margin:0 0 1.5rem}
table{border-collapse:separate;border-spacing:4px;width:100%}
th{font-weight:600;text-align:left;padding:.4rem .6rem;color:#39405a;font-size:.85rem}
th.col{text-align:center;background:#f2f4f8;border-radius:8px}
th.col small{display:block;font-weight:400;color:#6b7288}
td{padding:.55rem .6rem;border-radius:8px;text-align:center;font-weight:600;cursor:default}
td.area{text-align:left;font-weight:500;background:none}
.pass{background:#dff5e3;color:#17612b}.fail{background:#fde2e1;color:#9b1c1c}
.warn{background:#fff1cc;color:#7a5300}.skip{background:#eceef3;color:#5a6275}.none{background:#fafbfc;color:#b3b8c4}
.legend span{display:inline-block;margin-right:1rem;padding:.2rem .6rem;border-radius:6px;font-size:.85rem}
details{margin-top:1.5rem} summary{cursor:pointer;font-weight:600}
.notes li{margin:.25rem 0;font-size:.9rem} code{background:#f2f4f8;padding:0 .25rem;border-radius:4px}
.checks td{font-weight:400;font-size:.8rem;padding:.25rem .4rem} .checks td.area{font-family:ui-monospace,monospace}
"""


def to_html(m: Combined) -> str:
    cols = columns(m)
    e = html.escape
    out = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        "<meta name=viewport content='width=device-width,initial-scale=1'>",
        "<title>harnesscheck — backend verification matrix</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>Backend verification matrix</h1>",
        f"<p class=sub>Kit {e(m.kit_version)} · catalog <code>{e(m.catalog_hash)}</code> · generated {e(now_iso()[:10])}. "
        "Hover a cell for the checks behind it.</p>",
        "<p class=legend>" + "".join(f"<span class={k}>{SYMBOL[k]} {WORD[k]}</span>" for k in ("pass", "fail", "warn", "skip")) + "</p>",
        "<table><tr><th></th>",
    ]
    for backend, level in cols:
        info = m.backends.get(backend, {})
        cli = info.get("cli_version", {}).get(level) or "no CLI"
        date = str(info.get("run_at", {}).get(level) or "")[:10]
        out.append(f"<th class=col>{e(backend)}<small>{e(level)} · {e(str(cli))}</small><small>{e(date)}</small></th>")
    out.append("</tr>")
    for area, title in AREAS.items():
        cells_by_col = [_cells_in(m, b, lv, area) for b, lv in cols]
        if not any(cells_by_col):
            continue
        out.append(f"<tr><td class=area>{e(title)}</td>")
        for cells in cells_by_col:
            status = area_status(cells)
            tip = "\n".join(f"{c.check}: {c.outcome}" + (f" [{c.reason}]" if c.reason else "") for c in cells) or "no checks"
            count = f" {sum(c.outcome == 'passed' for c in cells)}/{len(cells)}" if cells else ""
            out.append(f"<td class={status} title='{e(tip, quote=True)}'>{SYMBOL[status]}{count}</td>")
        out.append("</tr>")
    out.append("</table>")
    # per-check detail
    out.append("<details><summary>Every check</summary><table class=checks><tr><th>check</th>")
    out += [f"<th class=col>{e(b)}<small>{e(lv)}</small></th>" for b, lv in cols]
    out.append("</tr>")
    for check in sorted(m.areas):
        out.append(f"<tr><td class=area>{e(check)}</td>")
        for backend, level in cols:
            cell = m.cells.get((backend, level, check))
            if cell is None:
                out.append("<td class=none>—</td>")
                continue
            status = {"passed": "pass", "failed": "fail", "error": "fail", "xfailed": "warn"}.get(cell.outcome, "skip")
            tip = f"{cell.outcome}" + (f" [{cell.reason}]" if cell.reason else "") + (f": {cell.message}" if cell.message else "")
            out.append(f"<td class={status} title='{e(tip[:600], quote=True)}'>{SYMBOL[status]}</td>")
        out.append("</tr>")
    out.append("</table></details>")
    out.append("<details><summary>Reason codes</summary><ul class=notes>")
    out += [f"<li><code>{e(k)}</code> — {e(v)}</li>" for k, v in REASON_CODES.items()]
    out.append("</ul></details></body></html>")
    return "\n".join(out) + "\n"


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
    except (ReportError, InconsistentReports) as exc:
        print(f"harnesscheck matrix: {exc}", file=sys.stderr)
        return 2
    for path in write_matrix(combined, Path(out)):
        print(f"wrote {path}")
    return 0
