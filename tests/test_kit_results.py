"""Reports, JUnit, exit codes and the matrix, from the same result model."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from harnesscheck.kit.baseline import Baseline, Entry
from harnesscheck.kit.matrix import InconsistentReports, combine, matrix_command, regressions, to_html, to_json, to_markdown
from harnesscheck.kit.results import BackendInfo, CellResult, Report, read_report, write_json, write_junit

DOC = Path(__file__).resolve().parent.parent / "doc"


def _report(cells, digest="abc123", backends=("fake", "codex")):
    return Report(
        kit_version="0.1.0", catalog_hash=digest, levels=["offline"],
        backends=[BackendInfo(id=b, label=b, kind="api", cli_version="1.2.3" if b == "codex" else None, levels=["offline"]) for b in backends],
        started_at="2026-11-29T10:00:00+00:00", finished_at="2026-11-29T10:01:00+00:00", platform={"system": "Linux"},
        cells=[CellResult(check=c, backend=b, level="offline", outcome=o, reason=r, duration_s=0.1, message=m, area=c.split(".")[0])
               for c, b, o, r, m in cells],
    )


CELLS = [
    ("scope.dotdot-refused", "fake", "passed", None, ""),
    ("scope.dotdot-refused", "codex", "failed", None, "bytes leaked"),
    ("usage.vendor-cost-reported", "fake", "skipped", "unsupported-by-backend", "no cost_reporting"),
    ("usage.vendor-cost-reported", "codex", "xfailed", "upstream-bug", "known"),
]


def test_json_report_round_trips_with_header(tmp_path):
    report = _report(CELLS)
    write_json(report, tmp_path / "r.json")
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["schema"] == "harnesscheck-conformance-report" and data["version"] == 1
    head = data["header"]
    assert {"kit_version", "catalog_hash", "backends", "levels", "platform", "started_at", "finished_at"} <= set(head)
    assert set(data["cells"][0]) == {"check", "backend", "level", "outcome", "reason", "duration_s", "message", "area"}
    again = read_report(tmp_path / "r.json")
    assert again.cells == sorted(report.cells, key=lambda c: (c.backend, c.level, c.check))


def test_exit_codes_separate_backend_failure_from_kit_fault():
    assert _report(CELLS[:1]).exit_code() == 0
    assert _report(CELLS).exit_code() == 1
    assert _report(CELLS[:1] + [("parity.outcome-schema", "fake", "error", "kit-bug", "adapter crashed")]).exit_code() == 3
    problem = _report(CELLS[:1])
    problem.problems.append("baseline entry x expired")
    assert problem.exit_code() == 1


def test_junit_has_one_case_per_cell_with_properties(tmp_path):
    write_junit(_report(CELLS), tmp_path / "j.xml")
    suite = ET.parse(tmp_path / "j.xml").getroot()
    assert suite.get("tests") == "4" and suite.get("failures") == "1" and suite.get("skipped") == "2"
    case = next(c for c in suite.iter("testcase") if c.get("classname") == "codex.offline" and c.get("name") == "scope.dotdot-refused")
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["check_id"] == "scope.dotdot-refused" and props["level"] == "offline"
    assert case.find("failure") is not None


def test_matrix_refuses_reports_of_different_catalogs(tmp_path):
    with pytest.raises(InconsistentReports):
        combine([_report(CELLS, "aaa"), _report(CELLS, "bbb")])
    for name, digest in (("a.json", "aaa"), ("b.json", "bbb")):
        write_json(_report(CELLS, digest), tmp_path / name)
    assert matrix_command([tmp_path / "a.json", tmp_path / "b.json"], tmp_path / "out") == 2
    assert not (tmp_path / "out").exists(), "nothing is written from inconsistent reports"


def test_matrix_renders_every_status_with_notes(tmp_path):
    write_json(_report(CELLS), tmp_path / "r.json")
    assert matrix_command([tmp_path / "r.json"], tmp_path / "out") == 0
    md = (tmp_path / "out" / "backends.md").read_text()
    assert "| Area | codex (offline) | fake (offline) |" in md
    assert "*1.2.3*" in md and "*2026-11-29*" in md
    row = next(line for line in md.splitlines() if line.startswith("| Path scope"))
    assert "❌" in row and "✅" in row
    usage = next(line for line in md.splitlines() if line.startswith("| Usage"))
    assert "⚠️" in usage and "⏭" in usage
    assert "unsupported-by-backend" in md and "bytes leaked" in md
    data = json.loads((tmp_path / "out" / "backends.json").read_text())
    assert data["areas"]["codex"]["offline"]["scope"] == "fail"
    html = (tmp_path / "out" / "backends.html").read_text()
    assert html.startswith("<!doctype html>") and "class=fail" in html and "scope.dotdot-refused" in html


def test_later_reports_win_for_the_same_cell():
    old = _report([("scope.dotdot-refused", "fake", "failed", None, "x")])
    new = _report([("scope.dotdot-refused", "fake", "passed", None, "")])
    new.finished_at = "2026-11-30T00:00:00+00:00"
    m = combine([new, old])
    assert m.cells[("fake", "offline", "scope.dotdot-refused")].outcome == "passed"


def test_ratchet_flags_regressions_unless_baselined():
    committed = to_json(combine([_report(CELLS)]))
    now = _report([("scope.dotdot-refused", "fake", "failed", None, "regressed"), ("scope.dotdot-refused", "codex", "failed", None, "")])
    found = regressions(committed, now)
    assert len(found) == 1 and "fake" in found[0], "only a cell that passed before is a regression"
    baseline = Baseline([Entry(id="scope.dotdot-refused", reason="upstream-bug", backend="fake")])
    assert regressions(committed, now, baseline) == []


def test_markdown_and_html_are_deterministic():
    m = combine([_report(CELLS)])
    assert to_markdown(m) == to_markdown(combine([_report(CELLS)]))
    assert to_html(m).count("<tr>") >= 3
