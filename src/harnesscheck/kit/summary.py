"""`harnesscheck verify`'s closing summary, for a terminal (rich), not raw Markdown.

Requirement (issue 32, items 1, 3, 5): after a run, the terminal shows the verdict, one line
per backend × level (coverage and counts, the skip reasons tallied), every failing cell with
its severity, its first message line, its fix (conformance/guidance.toml) and a rerun command
that works (the backend as the run was given it: `mine:spec`, not `mine`), the slowest cells,
and where the full report is. It refers to nothing it does not print (the old Markdown matrix
pointed at notes that were only in backends.md). Piped or under CI, rich prints the same text
without colour or redraw.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

#: cells this slow or slower are listed under "slowest cells" (at most SLOWEST of them)
SLOW_S = 5.0
SLOWEST = 5


def console_for(stream):
    """A rich console on `stream`: a terminal's own width; piped (CI, a log), lines unwrapped."""
    from rich.console import Console

    tty = hasattr(stream, "isatty") and stream.isatty()
    return Console(file=stream) if tty else Console(file=stream, width=200, soft_wrap=True)


def print_summary(console, matrix, report, report_path: Path, selectors: dict[str, str]) -> None:
    from rich.table import Table
    from rich.text import Text

    from harnesscheck.kit.guidance import SEVERITIES, author_message, guidance_for, rerun_command
    from harnesscheck.kit.matrix import SYMBOL, coverage, coverage_text, verdict

    status, sentence, _ = verdict(matrix)
    style = {"pass": "bold green", "warn": "bold yellow", "fail": "bold red"}[status]
    console.print()
    console.print(Text(f"{SYMBOL[status]} {sentence}", style=style))

    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for name in ("backend (level)", "coverage", "passed", "failed", "known", "skipped (why)"):
        table.add_column(name, overflow="fold")
    by_column: dict[tuple[str, str], list] = {}
    for cell in report.cells:
        by_column.setdefault((cell.backend, cell.level), []).append(cell)
    for (backend, level), cells in sorted(by_column.items()):
        counts = Counter(c.outcome for c in cells)
        whys = Counter(c.reason or "no reason" for c in cells if c.outcome == "skipped")
        bad = counts["failed"] + counts["error"]
        table.add_row(
            f"{backend} ({level})",
            coverage_text(coverage(matrix, backend, level)),
            str(counts["passed"]),
            Text(str(bad), style="bold red" if bad else ""),
            str(counts["xfailed"] or ""),
            f"{counts['skipped']}" + (" (" + ", ".join(f"{n} {r}" for r, n in whys.most_common()) + ")" if whys else ""),
        )
    console.print(table)

    rank = {s: n for n, s in enumerate(SEVERITIES)}
    failing = [c for c in report.cells if c.outcome in ("failed", "error")]

    def order(cell) -> tuple:
        guide = guidance_for(cell.check)
        return (rank.get(guide.severity if guide else "", len(SEVERITIES)), cell.check, cell.backend, cell.level)

    if failing:
        console.print(Text(f"\n{len(failing)} failing cell{'s' if len(failing) != 1 else ''}, most severe first:", style="bold"))
    for cell in sorted(failing, key=order):
        guide = guidance_for(cell.check)
        severity = guide.severity if guide else ("kit" if cell.outcome == "error" else "?")
        message = author_message(cell.message, "")
        first = message.strip().splitlines()[0][:240] if message.strip() else ""
        line = Text()
        line.append(f"{severity:8} ", style="bold red" if severity in ("critical", "high") else "yellow")
        line.append(f"{cell.check}", style="bold")
        line.append(f" on {cell.backend} ({cell.level})" + (f": {first}" if first else ""))
        console.print(line)
        if guide is not None and cell.outcome == "failed":
            console.print(Text(f"         fix: {guide.fix}"))
        console.print(Text(f"         rerun: {rerun_command(selectors.get(cell.backend, cell.backend), cell.level, cell.check)}", style="dim"))
    if failing:
        console.print(Text("rerun every failed cell: harnesscheck verify --last-failed (same --report)", style="dim"))

    slow = sorted((c for c in report.cells if c.duration_s >= SLOW_S), key=lambda c: -c.duration_s)[:SLOWEST]
    if slow:
        console.print(Text("slowest cells: " + ", ".join(f"{c.check} on {c.backend}@{c.level} {c.duration_s:.0f} s" for c in slow), style="dim"))
    counts = report.counts()
    console.print(
        ", ".join(f"{n} {k}" for k, n in counts.items() if n) + f" — report: {report_path} (the matrix: {report_path.parent / 'backends.html'})",
        markup=False,
        highlight=False,
    )


def last_failed(report_dir: Path) -> tuple[list[str], list[str], str]:
    """(backends, check ids) of the cells that failed or errored in the report already in
    `report_dir`, and a note for the terminal. Nothing failed, or no report: ([], [], why),
    and the run covers the whole selection (pytest's --lf does the same)."""
    from harnesscheck.kit.results import ReportError, read_report

    path = Path(report_dir) / "conformance-report.json"
    try:
        report = read_report(path)
    except ReportError:
        return [], [], f"--last-failed: no previous report in {report_dir}: running the whole selection"
    failed = [c for c in report.cells if c.outcome in ("failed", "error")]
    if not failed:
        return [], [], f"--last-failed: nothing failed in {path}: running the whole selection"
    backends = sorted({c.backend for c in failed})
    checks = sorted({c.check for c in failed})
    return backends, checks, f"--last-failed: rerunning {len(checks)} check(s) that failed on {', '.join(backends)}"
