"""`harnesscheck verify`'s progress: one line per backend × level, as the cells finish.

The child pytest writes JSON lines (kit/plugin.py `--hc-progress FILE`): a `plan` (every
cell's node id -> [column, check id], and each check's requirement), a `start` per cell
begun, a `done` per cell ended (its record). `Progress` folds them; a view shows them:

- `LiveView` (a terminal, CI unset): rich, redrawn in place: a line per column with
  done/total, passed, failed, skipped and the cell running now; a failing cell is printed
  above the lines as it happens.
- `PlainView` (not a terminal, or CI=true): no redraw and no colour; a failing cell as it
  happens and one line per column when its last cell is done, nothing else.

A failing cell prints its check id, its requirement, the first lines of its message, its fix
(kit/guidance.py) and the exact command that reruns just that cell.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

FAILING = ("failed", "error")


@dataclass
class Column:
    name: str  # backend@level
    total: int = 0
    counts: dict[str, int] = field(default_factory=lambda: {"passed": 0, "failed": 0, "skipped": 0, "xfailed": 0, "error": 0})
    running: dict[str, str] = field(default_factory=dict)  # node id -> check id

    @property
    def done(self) -> int:
        return sum(self.counts.values())

    def summary(self) -> str:
        c = self.counts
        parts = [f"{c['passed']} passed", f"{c['failed'] + c['error']} failed", f"{c['skipped']} skipped"]
        if c["xfailed"]:
            parts.append(f"{c['xfailed']} known failures")
        return ", ".join(parts)


class Progress:
    """The state of the run, folded from the child's events."""

    def __init__(self) -> None:
        self.cells: dict[str, tuple[str, str]] = {}  # node id -> (column, check)
        self.requirements: dict[str, str] = {}
        self.columns: dict[str, Column] = {}
        self.failures: list[dict] = []

    def feed(self, event: dict) -> list[tuple[str, dict]]:
        """Apply one event; returns what a view should announce: ("failed", record), ("column-done", {...})."""
        kind = event.get("e")
        out: list[tuple[str, dict]] = []
        if kind == "plan":
            self.requirements.update(event.get("requirements", {}))
            for nodeid, (column, check) in event.get("cells", {}).items():
                if nodeid not in self.cells:
                    self.cells[nodeid] = (column, check)
                    self.columns.setdefault(column, Column(column)).total += 1
        elif kind == "start" and event.get("id") in self.cells:
            column, check = self.cells[event["id"]]
            self.columns[column].running[event["id"]] = check
        elif kind == "done":
            column = f"{event['backend']}@{event['level']}"
            col = self.columns.setdefault(column, Column(column))
            col.running.pop(event.get("id", ""), None)
            outcome = event.get("outcome", "error")
            col.counts[outcome] = col.counts.get(outcome, 0) + 1
            if col.total < col.done:
                col.total = col.done
            if outcome in FAILING:
                self.failures.append(event)
                out.append(("failed", event))
            if col.total and col.done == col.total:
                out.append(("column-done", {"column": col}))
        return out


class EventReader:
    """Reads the events appended to the progress file since the last call (whole lines only)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.offset = 0
        self.tail = b""

    def read(self) -> list[dict]:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        data = self.tail + data
        *lines, self.tail = data.split(b"\n")
        events = []
        for line in lines:
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
        return events


def rerun_command(record: dict) -> str:
    """The command that reruns just this cell, as `harnesscheck verify` runs it: with the
    backend as the run was given it (`selector`: a `module:attr` reference for a third-party
    backend, whose spec id alone is no registered backend)."""
    from harnesscheck.kit.guidance import rerun_command as command

    return command(record.get("selector") or record["backend"], record["level"], record["check"])


def failure_lines(record: dict, requirement: str) -> list[str]:
    """What failed, the requirement, the evidence (bounded), the fix and its severity
    (conformance/guidance.toml), and the rerun command."""
    from harnesscheck.kit.guidance import failure_text

    lines = failure_text(
        check_id=record["check"],
        backend=record["backend"],
        selector=record.get("selector") or "",
        level=record["level"],
        requirement=requirement,
        message=record.get("message") or "",
        max_lines=3,
    )
    if record.get("outcome") == "error":
        lines[0] = "ERROR (kit)" + lines[0][len("FAILED") :]
    return lines


def interactive(stream=None) -> bool:
    """Rich, redrawn progress: a terminal, and not CI."""
    stream = stream or sys.stdout
    ci = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
    return not ci and hasattr(stream, "isatty") and stream.isatty()


class PlainView:
    """Not a terminal, or CI: a failing cell as it happens and a line per finished column."""

    def __init__(self, progress: Progress, stream=None) -> None:
        self.progress, self.stream = progress, stream or sys.stdout

    def __enter__(self) -> PlainView:
        return self

    def __exit__(self, *exc) -> None:
        return None

    def announce(self, what: str, data: dict) -> None:
        if what == "failed":
            lines = failure_lines(data, self.progress.requirements.get(data["check"], ""))
        else:
            col = data["column"]
            lines = [f"{col.name}: {col.done}/{col.total} cells: {col.summary()}"]
        self.stream.write("\n".join(lines) + "\n")
        self.stream.flush()

    def refresh(self) -> None:
        return None


class LiveView:
    """A terminal: rich's Live display, a line per column, redrawn in place."""

    def __init__(self, progress: Progress, stream=None) -> None:
        from rich.console import Console
        from rich.live import Live

        self.progress = progress
        self.console = Console(file=stream) if stream is not None else Console()
        self.live = Live(self._render(), console=self.console, refresh_per_second=4, transient=False)

    def __enter__(self) -> LiveView:
        self.live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.live.update(self._render(final=True))
        self.live.__exit__(*exc)

    def _render(self, final: bool = False):
        from rich.table import Table
        from rich.text import Text

        table = Table.grid(padding=(0, 2))
        for col in sorted(self.progress.columns.values(), key=lambda c: c.name):
            c = col.counts
            bad = c["failed"] + c["error"]
            counts = Text()
            counts.append(f"{c['passed']} passed", style="green")
            counts.append(", ")
            counts.append(f"{bad} failed", style="bold red" if bad else "")
            counts.append(f", {c['skipped']} skipped", style="")
            if c["xfailed"]:
                counts.append(f", {c['xfailed']} known failures", style="yellow")
            running = ", ".join(sorted(set(col.running.values()))) if col.running and not final else ""
            done = col.total and col.done >= col.total
            table.add_row(
                Text(col.name, style="bold"),
                f"{col.done}/{col.total or '?'}",
                counts,
                Text("done" if done else (f"running {running}" if running else ""), style="dim"),
            )
        if not self.progress.columns:
            table.add_row(Text("collecting the cells…", style="dim"))
        return table

    def announce(self, what: str, data: dict) -> None:
        if what == "failed":
            from rich.text import Text

            lines = failure_lines(data, self.progress.requirements.get(data["check"], ""))
            self.live.console.print(Text(lines[0], style="bold red"))
            for line in lines[1:]:
                self.live.console.print(Text(line))
        self.refresh()

    def refresh(self) -> None:
        self.live.update(self._render())


def view(progress: Progress, stream=None):
    """The progress view on `stream` (stdout; stderr when stdout carries --json)."""
    stream = stream or sys.stdout
    return LiveView(progress, stream) if interactive(stream) else PlainView(progress, stream)
