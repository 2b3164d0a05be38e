"""Reports, JUnit, exit codes and the matrix, from the same result model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harnesscheck.kit.baseline import Baseline, Entry
from harnesscheck.kit.matrix import (
    InconsistentReports,
    combine,
    hidden_columns,
    matrix_command,
    regressions,
    to_html,
    to_json,
    to_markdown,
)
from harnesscheck.kit.results import BackendInfo, CellResult, Report, read_report, write_json

DOC = Path(__file__).resolve().parents[2] / "doc"


def _report(cells, digest="abc123", backends=("fake", "codex")):
    return Report(
        kit_version="0.1.0",
        catalog_hash=digest,
        levels=["offline"],
        backends=[BackendInfo(id=b, label=b, kind="api", cli_version="1.2.3" if b == "codex" else None, levels=["offline"]) for b in backends],
        started_at="2026-11-29T10:00:00+00:00",
        finished_at="2026-11-29T10:01:00+00:00",
        platform={"system": "Linux"},
        cells=[
            CellResult(check=c, backend=b, level="offline", outcome=o, reason=r, duration_s=0.1, message=m, area=c.split(".")[0]) for c, b, o, r, m in cells
        ],
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
    assert set(data["cells"][0]) == {"check", "backend", "level", "outcome", "reason", "duration_s", "message", "area", "provenance", "containment"}
    again = read_report(tmp_path / "r.json")
    assert again.cells == sorted(report.cells, key=lambda c: (c.backend, c.level, c.check))


def test_exit_codes_separate_backend_failure_from_kit_fault():
    assert _report(CELLS[:1]).exit_code() == 0
    assert _report(CELLS).exit_code() == 1
    assert _report(CELLS[:1] + [("parity.outcome-schema", "fake", "error", "kit-bug", "adapter crashed")]).exit_code() == 3
    problem = _report(CELLS[:1])
    problem.problems.append("baseline entry x expired")
    assert problem.exit_code() == 1


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


# ---------------------------------------------------------------------------------------
# backends.html: self-contained, and carrying every cell of backends.json

from html.parser import HTMLParser  # noqa: E402

_FETCHING_TAGS = {"script", "link", "img", "iframe", "object", "embed", "audio", "video", "source", "track", "base", "form", "frame"}


class _PageScan(HTMLParser):
    """Collects what a browser could fetch, the CSP, and the cells the page carries."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.fetching: list[str] = []
        self.external: list[str] = []
        self.csp: str | None = None
        self.cells: set[tuple] = set()
        self.style = ""
        self._in_style = False
        self._columns: list[tuple] = []
        self._row: str | None = None
        self._index = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in _FETCHING_TAGS:
            self.fetching.append(tag)
        if tag == "style":
            self._in_style = True
        if tag == "meta" and (a.get("http-equiv") or "").lower() == "content-security-policy":
            self.csp = a.get("content")
        for name, value in attrs:
            value = value or ""
            if name in ("src", "srcset", "action", "formaction", "poster", "data", "background") or name.startswith("on"):
                self.external.append(f"<{tag} {name}={value!r}>")
            if name in ("href", "xlink:href") and not value.startswith("#"):
                self.external.append(f"<{tag} {name}={value!r}>")
            if "://" in value and not name.startswith("data-") and name != "title":
                self.external.append(f"<{tag} {name}={value!r}>")
            if name == "style" and "url(" in value.replace(" ", "").lower():
                self.external.append(f"<{tag} style={value!r}>")
        if "data-check" in a:
            self.cells.add((a["data-backend"], a["data-level"], a["data-check"], a["data-outcome"], a["data-reason"] or None))
        # the every-check table: columns named by its header, the check by its row, the outcome by its cell
        if tag == "th" and "data-col" in a:
            self._columns.append(tuple(a["data-col"].split("|", 1)))
        if tag == "tr":
            self._row, self._index = a.get("data-row"), 0
        if tag == "td" and self._row is not None and "class" in a and a["class"].startswith("c "):
            if "data-o" in a or a["class"] == "c pass":
                backend, level = self._columns[self._index]
                self.cells.add((backend, level, self._row, a.get("data-o", "passed"), a.get("data-r")))
            self._index += 1

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag):
        if tag == "style":
            self._in_style = False

    def handle_data(self, data):
        if self._in_style:
            self.style += data


def _scan(text: str) -> _PageScan:
    scan = _PageScan()
    scan.feed(text)
    scan.close()
    return scan


def _json_cells(matrix_json: dict) -> set[tuple]:
    return {
        (b, lv, chk, info["outcome"], info["reason"])
        for b, levels in matrix_json["cells"].items()
        for lv, checks in levels.items()
        for chk, info in checks.items()
    }


def _assert_self_contained(page: str) -> _PageScan:
    scan = _scan(page)
    assert not scan.fetching, f"tags that load or run something: {scan.fetching}"
    assert not scan.external, f"external references: {scan.external[:5]}"
    style = scan.style.replace(" ", "").lower()
    assert "url(" not in style and "@import" not in style and "@font-face" not in style
    assert "http://" not in scan.style and "https://" not in scan.style
    assert scan.csp and "default-src 'none'" in scan.csp and "script-src" not in scan.csp, "the CSP must forbid every fetch and script"
    return scan


RICH_CELLS = CELLS + [
    ("scope.absolute-path-refused", "codex", "error", "kit-bug", "adapter crashed <script>alert(1)</script> see http://127.0.0.1:9/x\nsecond line"),
    ("scope.absolute-path-refused", "fake", "passed", None, ""),
    ("parity.outcome-schema", "fake", "skipped", "kit-bug", "' onmouseover='x"),
]


def _rich_report():
    report = _report(RICH_CELLS)
    report.levels = ["offline", "loopback"]
    # a level this machine could not run at all: hidden as a column, still listed in the page
    report.cells += [
        CellResult(
            check=c,
            backend="codex",
            level="loopback",
            outcome="skipped",
            reason="env-missing",
            duration_s=0.0,
            message="codex is not installed",
            area=c.split(".")[0],
        )
        for c in ("scope.dotdot-refused", "usage.vendor-cost-reported")
    ]
    return report


def test_html_is_self_contained_and_escapes_messages():
    page = to_html(combine([_rich_report()]))
    _assert_self_contained(page)
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;" in page
    assert "onmouseover='x" not in page
    assert page == to_html(combine([_rich_report()])), "the page is a pure function of the reports"


def test_html_carries_every_cell_of_the_json_with_its_reason():
    m = combine([_rich_report()])
    data, scan = to_json(m), _scan(to_html(m))
    # a column where no check reached a verdict is one line naming it and why (issue 32: no 0 % column)
    no_verdict = {(b, lv) for b, lv, _ in hidden_columns(m)}
    assert no_verdict == {("codex", "loopback")}
    missing = {cell for cell in _json_cells(data) - scan.cells if cell[:2] not in no_verdict}
    assert not missing, f"cells of backends.json absent from backends.html: {sorted(missing)}"
    assert "<li>codex (loopback): codex is not installed</li>" in to_html(m)


def test_html_shows_status_level_cli_version_date_and_reasons():
    page = to_html(combine([_rich_report()]))
    for status in ("pass", "fail", "warn", "skip"):
        assert f"href='#i-{status}'" in page, f"no {status} symbol: colour is never the only signal"
    assert "1.2.3" in page and "2026-11-29" in page
    assert "bytes leaked" in page and "no cost_reporting" in page and "unsupported-by-backend" in page
    assert "No check reached a verdict in these columns" in page and "codex is not installed" in page
    assert "class='verdict fail'" in page
    calm = to_html(combine([_report(CELLS[:1] + CELLS[2:])]))
    assert "class='verdict warn'" in calm and "1 known failure (baseline)" in calm
    assert "No check fails" not in calm, "a known failure never sits under a 'no check fails' banner"
    clean = to_html(combine([_report(CELLS[:1])]))
    assert "class='verdict pass'" in clean and "No check fails." in clean


def test_verdict_names_a_security_relevant_known_failure():
    """The codex loopback xfail (exec offered beyond the bridge) is stated in the verdict line
    of the page and of backends.md, never hidden under a green banner."""
    from harnesscheck.kit.matrix import verdict

    cells = CELLS[:1] + [("audit.builtins-off-at-wire", "codex", "xfailed", "upstream-bug", "offered beyond the bridge: ['exec', 'wait']\nmore detail")]
    m = combine([_report(cells)])
    status, sentence, _ = verdict(m)
    assert status == "warn" and "No check fails" not in sentence
    assert "Security-relevant known failure: audit.builtins-off-at-wire (critical) on codex (offline): offered beyond the bridge: ['exec', 'wait']" in sentence
    assert sentence in to_markdown(m) and "more detail" not in sentence
    page = to_html(m)
    assert "class='verdict warn'" in page and "offered beyond the bridge: [&#39;exec&#39;, &#39;wait&#39;]" in page
    usage_only = combine([_report(CELLS[:1] + CELLS[3:])])
    assert "Security-relevant" not in verdict(usage_only)[1], "a known failure outside the security areas is counted, not named"


def test_bad_reports_and_matrices_are_refused_with_the_place_and_the_rule(tmp_path):
    from harnesscheck.kit.matrix import read_matrix
    from harnesscheck.kit.results import ReportError

    write_json(_report(CELLS), tmp_path / "good.json")
    good = json.loads((tmp_path / "good.json").read_text())
    cases = {
        "list.json": ([good], "found a JSON list"),
        "no-header.json": ({k: v for k, v in good.items() if k != "header"}, "header: Field required"),
        "extra.json": ({**good, "cells": [{**good["cells"][0], "colour": "red"}]}, "cells.0.colour: Extra inputs are not permitted"),
        "bogus.json": ({**good, "cells": [{**good["cells"][0], "outcome": "bogus"}]}, "cells.0.outcome: Input should be 'passed'"),
    }
    for name, (data, expected) in cases.items():
        (tmp_path / name).write_text(json.dumps(data))
        with pytest.raises(ReportError) as info:
            read_report(tmp_path / name)
        assert expected in str(info.value) and name in str(info.value), str(info.value)
    assert read_matrix(DOC / "backends.json")["schema"] == "harnesscheck-matrix", "the committed matrix validates"
    matrix = json.loads((DOC / "backends.json").read_text())
    matrix["cells"]["fake"]["offline"]["scope.dotdot-refused"]["outcome"] = "bogus"
    (tmp_path / "m.json").write_text(json.dumps(matrix))
    with pytest.raises(ReportError) as info:
        read_matrix(tmp_path / "m.json")
    assert "cells.fake.offline.scope.dotdot-refused.outcome" in str(info.value)


def test_committed_html_is_self_contained_and_matches_the_committed_json():
    """doc/backends.html and doc/backends.json come from one `harnesscheck matrix` run."""
    scan = _assert_self_contained((DOC / "backends.html").read_text(encoding="utf-8"))
    cells = _json_cells(json.loads((DOC / "backends.json").read_text()))
    ran = {(c[0], c[1]) for c in cells if c[3] != "skipped"}
    # a column where nothing ran at a level is one line with its reason, not a card of skips
    missing = {c for c in cells if (c[0], c[1]) in ran} - scan.cells
    assert not missing, f"regenerate doc/ with `harnesscheck verify` + `harnesscheck matrix`: {sorted(missing)[:5]}"


def test_markdown_cells_count_passed_over_run_and_skips_apart():
    """A cell reads passed/run plus the skips, never passed/(run + skipped)."""
    cells = [("scope.dotdot-refused", "fake", "passed", None, ""), ("scope.absolute-path-refused", "fake", "skipped", "budget", "slow")]
    text = to_markdown(combine([_report(cells)]))
    row = next(line for line in text.splitlines() if line.startswith("| Path scope"))
    assert "1/1 · 1 skipped" in row, row
