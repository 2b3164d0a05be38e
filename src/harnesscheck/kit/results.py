"""The result model, and the two formats written from it: a versioned JSON report and JUnit XML.

One record per cell (check × backend × level). Outcomes: passed, failed, skipped (with a
reason code), xfailed (a baseline entry matched), error (the kit or the environment broke).
Exit codes: 0 conformant within the baseline, 1 a backend failed, 2 usage error, 3 kit or
environment fault. See doc/SPEC-kit.md.
"""

from __future__ import annotations

import json
import platform
import sys
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from xml.etree import ElementTree as ET

REPORT_SCHEMA = "harnesscheck-conformance-report"
REPORT_VERSION = 1
OUTCOMES = ("passed", "failed", "skipped", "xfailed", "error")

EXIT_OK, EXIT_BACKEND_FAILED, EXIT_USAGE, EXIT_KIT_FAULT = 0, 1, 2, 3


class ReportError(Exception):
    """A report file that is not a report of this schema/version."""


@dataclass
class CellResult:
    check: str
    backend: str
    level: str
    outcome: str
    reason: str | None = None
    duration_s: float = 0.0
    message: str = ""
    area: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.check, self.backend, self.level)


@dataclass
class BackendInfo:
    id: str
    label: str = ""
    kind: str = ""
    cli_version: str | None = None
    capabilities: list[str] = field(default_factory=list)
    cli_versions: dict[str, str | None] = field(default_factory=dict)  # level -> version
    levels: list[str] = field(default_factory=list)


@dataclass
class Report:
    kit_version: str
    catalog_hash: str
    backends: list[BackendInfo]
    levels: list[str]
    started_at: str
    finished_at: str = ""
    platform: dict = field(default_factory=dict)
    cells: list[CellResult] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # run-level failures (baseline, kit)
    areas: dict[str, str] = field(default_factory=dict)  # check id -> area

    def to_dict(self) -> dict:
        return {
            "schema": REPORT_SCHEMA,
            "version": REPORT_VERSION,
            "header": {
                "kit_version": self.kit_version,
                "catalog_hash": self.catalog_hash,
                "backends": [asdict(b) for b in self.backends],
                "levels": self.levels,
                "platform": self.platform,
                "started_at": self.started_at,
                "finished_at": self.finished_at,
            },
            "problems": self.problems,
            "cells": [asdict(c) for c in sorted(self.cells, key=lambda c: (c.backend, c.level, c.check))],
        }

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(OUTCOMES, 0)
        for cell in self.cells:
            out[cell.outcome] = out.get(cell.outcome, 0) + 1
        return out

    def exit_code(self) -> int:
        counts = self.counts()
        if counts["error"]:
            return EXIT_KIT_FAULT
        if counts["failed"] or self.problems:
            return EXIT_BACKEND_FAILED
        return EXIT_OK


def now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def platform_info() -> dict:
    return {
        "system": platform.system(),
        "release": platform.release(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
    }


def write_json(report: Report, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(report.to_dict(), indent=1, sort_keys=False) + "\n", encoding="utf-8")
    tmp.replace(path)  # whole snapshots only: a reader never sees half a report


def read_report(path: Path) -> Report:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ReportError(f"{path}: not a readable JSON report ({exc})") from None
    if data.get("schema") != REPORT_SCHEMA or data.get("version") != REPORT_VERSION:
        raise ReportError(f"{path}: not a {REPORT_SCHEMA} v{REPORT_VERSION} report")
    head = data["header"]
    return Report(
        kit_version=head["kit_version"],
        catalog_hash=head["catalog_hash"],
        backends=[BackendInfo(**b) for b in head["backends"]],
        levels=list(head["levels"]),
        platform=head.get("platform", {}),
        started_at=head["started_at"],
        finished_at=head.get("finished_at", ""),
        problems=list(data.get("problems", [])),
        cells=[CellResult(**c) for c in data["cells"]],
    )


def write_junit(report: Report, path: Path) -> None:
    """JUnit XML from the same cells: one testcase per cell, properties carry id/level/reason."""
    counts = report.counts()
    suite = ET.Element(
        "testsuite",
        name="harnesscheck-conformance",
        tests=str(len(report.cells)),
        failures=str(counts["failed"]),
        errors=str(counts["error"]),
        skipped=str(counts["skipped"] + counts["xfailed"]),
        time=f"{sum(c.duration_s for c in report.cells):.3f}",
        timestamp=report.started_at,
    )
    props = ET.SubElement(suite, "properties")
    for name, value in (("kit_version", report.kit_version), ("catalog_hash", report.catalog_hash)):
        ET.SubElement(props, "property", name=name, value=value)
    for cell in sorted(report.cells, key=lambda c: (c.backend, c.level, c.check)):
        case = ET.SubElement(
            suite, "testcase", classname=f"{cell.backend}.{cell.level}", name=cell.check, time=f"{cell.duration_s:.3f}"
        )
        cprops = ET.SubElement(case, "properties")
        for name, value in (("check_id", cell.check), ("backend", cell.backend), ("level", cell.level),
                            ("area", cell.area), ("reason", cell.reason or "")):
            ET.SubElement(cprops, "property", name=name, value=value)
        if cell.outcome == "failed":
            ET.SubElement(case, "failure", message=cell.message[:500]).text = cell.message
        elif cell.outcome == "error":
            ET.SubElement(case, "error", message=cell.message[:500]).text = cell.message
        elif cell.outcome in ("skipped", "xfailed"):
            ET.SubElement(case, "skipped", message=f"[{cell.reason}] {cell.message}"[:500])
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)
