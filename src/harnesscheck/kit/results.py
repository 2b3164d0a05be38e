"""The result model, and the versioned JSON report written from it.

One record per cell (check × backend × level). Outcomes: passed, failed, skipped (with a
reason code), xfailed (a baseline entry matched), error (the kit or the environment broke).
Exit codes: 0 conformant within the baseline, 1 a backend failed, 2 usage error, 3 kit or
environment fault. See doc/SPEC-kit.md. JUnit XML is pytest's own (--junitxml): the plugin
puts each cell's check id, backend and level on its testcase (kit/plugin.py).

The models are pydantic models: the report file is `ReportFile` (published as
doc/conformance-report.schema.json, `$id` REPORT_SCHEMA_ID) and `read_report` validates a
file against it, so a list, a report without a header, an unknown field or an outcome
outside OUTCOMES is refused with the file, the place and the rule, never half-read.
"""

from __future__ import annotations

import json
import platform
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

REPORT_SCHEMA = "harnesscheck-conformance-report"
REPORT_VERSION = 1
OUTCOMES = ("passed", "failed", "skipped", "xfailed", "error")
JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
REPORT_SCHEMA_ID = f"urn:harnesscheck:schema:{REPORT_SCHEMA}:{REPORT_VERSION}"

EXIT_OK, EXIT_BACKEND_FAILED, EXIT_USAGE, EXIT_KIT_FAULT = 0, 1, 2, 3

Outcome = Literal["passed", "failed", "skipped", "xfailed", "error"]


class ReportError(Exception):
    """A report file that is not a report of this schema/version."""


class CellResult(BaseModel):
    """One (check, backend, level) result."""

    model_config = ConfigDict(extra="forbid")

    check: str
    backend: str
    level: str
    outcome: Outcome
    reason: str | None = None
    duration_s: float = 0.0
    message: str = ""
    area: str = ""
    provenance: str = Field(
        default="", description="what the verdict came from: the fixtures, scripted servers or CLI release this cell ran against (empty where nothing ran)"
    )
    containment: str | None = Field(
        default=None,
        description="how the sessions the kit ran for this cell were "
        "contained: bwrap, guards or none (an api session), '+'-joined when they differ; "
        "None where the kit ran no session itself (doc/SPEC-sandbox.md)",
    )

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.check, self.backend, self.level)


class BackendInfo(BaseModel):
    """A backend of the run: its spec's facts and the CLI version seen per level."""

    model_config = ConfigDict(extra="forbid")

    id: str
    label: str = ""
    kind: str = ""
    cli_version: str | None = None
    capabilities: list[str] = Field(default_factory=list)
    cli_versions: dict[str, str | None] = Field(default_factory=dict)  # level -> version
    levels: list[str] = Field(default_factory=list)


class ReportHeader(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kit_version: str
    catalog_hash: str
    backends: list[BackendInfo]
    levels: list[str]
    platform: dict[str, str] = Field(default_factory=dict)
    started_at: str
    finished_at: str = ""


class ReportFile(BaseModel):
    """The conformance report file (`--hc-report`, `verify`'s conformance-report.json)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, title="harnesscheck conformance report")

    schema_name: Literal["harnesscheck-conformance-report"] = Field(default=REPORT_SCHEMA, alias="schema")
    version: Literal[1] = REPORT_VERSION
    header: ReportHeader
    problems: list[str] = Field(default_factory=list)
    cells: list[CellResult]


class Report(BaseModel):
    """A run's results in memory (plugin.py builds it; `to_file()` is what is written)."""

    kit_version: str
    catalog_hash: str
    backends: list[BackendInfo]
    levels: list[str]
    started_at: str
    finished_at: str = ""
    platform: dict = Field(default_factory=dict)
    cells: list[CellResult] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)  # run-level failures (baseline, kit)
    areas: dict[str, str] = Field(default_factory=dict)  # check id -> area

    def to_file(self) -> ReportFile:
        return ReportFile(
            header=ReportHeader(
                kit_version=self.kit_version,
                catalog_hash=self.catalog_hash,
                backends=self.backends,
                levels=self.levels,
                platform={k: str(v) for k, v in self.platform.items()},
                started_at=self.started_at,
                finished_at=self.finished_at,
            ),
            problems=self.problems,
            cells=sorted(self.cells, key=lambda c: (c.backend, c.level, c.check)),
        )

    def to_dict(self) -> dict:
        return self.to_file().model_dump(mode="json", by_alias=True)

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


def json_schema(model: type[BaseModel], schema_id: str) -> dict:
    """A model's JSON Schema (validation mode) with its dialect (`$schema`) and `$id`."""
    return {"$schema": JSON_SCHEMA_DIALECT, "$id": schema_id, **model.model_json_schema(by_alias=True)}


def validation_problem(exc: ValidationError) -> str:
    """pydantic's first error as `place: rule (got value)`, e.g. `cells.3.outcome: Input
    should be 'passed', ... (got 'bogus')`; the number of further errors after it."""
    errors = exc.errors()
    first = errors[0]
    place = ".".join(str(p) for p in first.get("loc", ())) or "(the document)"
    got = first.get("input")
    shown = "" if isinstance(got, (dict, list)) else f" (got {str(got)[:60]!r})"
    more = f"; {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''}" if len(errors) > 1 else ""
    return f"{place}: {first.get('msg', 'invalid')}{shown}{more}"


def now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def platform_info() -> dict:
    return {
        "system": platform.system(),
        "release": platform.release(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "sandbox": _sandbox_line(),
    }


def _sandbox_line() -> str:
    """How this machine's sessions are contained (doc/SPEC-sandbox.md): `bwrap <version>` or
    `guards (<why no sandbox>)`, and the HARNESS_BACKEND_SANDBOX mode."""
    from harnesscheck.contain import sandbox
    from harnesscheck.core.config import Settings

    state = sandbox.status()
    mode = Settings().sandbox  # the kit's own sessions build their settings, never from the host's environment
    return f"bwrap {state.version or ''} (HARNESS_BACKEND_SANDBOX={mode})".replace("  ", " ") if state.available else f"guards ({state.reason})"


def write_json(report: Report, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(report.to_dict(), indent=1, sort_keys=False) + "\n", encoding="utf-8")
    tmp.replace(path)  # whole snapshots only: a reader never sees half a report


def read_report(path: Path) -> Report:
    """A report file, validated against ReportFile; ReportError names the file and the problem."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ReportError(f"{path}: not readable ({exc})") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ReportError(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("schema") != REPORT_SCHEMA or data.get("version") != REPORT_VERSION:
        what = type(data).__name__ if not isinstance(data, dict) else f"schema {data.get('schema')!r} v{data.get('version')!r}"
        raise ReportError(f"{path}: not a {REPORT_SCHEMA} v{REPORT_VERSION} report (found a JSON {what})")
    try:
        file = ReportFile.model_validate(data)
    except ValidationError as exc:
        raise ReportError(f"{path}: not a valid {REPORT_SCHEMA} v{REPORT_VERSION} report: {validation_problem(exc)}") from None
    head = file.header
    return Report(
        kit_version=head.kit_version,
        catalog_hash=head.catalog_hash,
        backends=head.backends,
        levels=head.levels,
        platform=dict(head.platform),
        started_at=head.started_at,
        finished_at=head.finished_at,
        problems=file.problems,
        cells=file.cells,
    )
