"""Coverage per column (doc/SPEC-matrix.md "Coverage"): checks that reached a verdict, of those
the catalog holds for the column's backend kind, level and declared capabilities. A backend
that declares little shows a thin column, never a full green one."""

from __future__ import annotations

from harnesscheck.core.contracts import Capability as C
from harnesscheck.core.contracts import Kind
from harnesscheck.kit.catalog import CheckInfo, catalog_hash, load_catalog
from harnesscheck.kit.matrix import applicable_checks, combine, coverage, read_matrix, to_html, to_json, to_markdown
from harnesscheck.kit.results import BackendInfo, CellResult, Report


def _info(cid, *, requires=(), declines=None, kinds=tuple(Kind), levels=("offline", "loopback")):
    return CheckInfo(
        id=cid, requirement="r", area=cid.split(".")[0], requires=frozenset(requires), declines=declines, kinds=frozenset(kinds), levels=tuple(levels)
    )


CATALOG = {
    i.id: i
    for i in (
        _info("scope.dotdot-refused"),
        _info("usage.vendor-cost-reported", requires=[C.cost_reporting]),
        _info("usage.served-model-never-guessed", declines=C.served_model_reporting),
        _info("usage.served-model-reported", requires=[C.served_model_reporting]),
        _info("bridge.failed-load-ends-session", requires=[C.mcp_tools], kinds=[Kind.harness]),
        _info("live.smoke-answers", levels=["live"]),
    )
}


def _report(backends: dict[str, list[str]], cells, digest="abc123"):
    return Report(
        kit_version="0.1.0",
        catalog_hash=digest,
        levels=["offline"],
        backends=[BackendInfo(id=b, label=b, kind="api", capabilities=caps, levels=["offline"]) for b, caps in backends.items()],
        started_at="2026-12-02T06:00:00+00:00",
        finished_at="2026-12-02T06:01:00+00:00",
        cells=[CellResult(check=c, backend=b, level="offline", outcome=o, reason=r, area=c.split(".")[0]) for c, b, o, r in cells],
    )


FULL = ["cost_reporting", "served_model_reporting"]
CELLS = [
    ("scope.dotdot-refused", "full", "passed", None),
    ("usage.vendor-cost-reported", "full", "passed", None),
    ("usage.served-model-reported", "full", "failed", None),
    ("scope.dotdot-refused", "thin", "passed", None),
    ("usage.vendor-cost-reported", "thin", "skipped", "unsupported-by-backend"),
    ("usage.served-model-never-guessed", "thin", "passed", None),
    ("usage.served-model-reported", "thin", "skipped", "unsupported-by-backend"),
]


def test_applicable_follows_kind_level_and_declines():
    assert applicable_checks(CATALOG, "api", FULL, "offline") == {"scope.dotdot-refused", "usage.vendor-cost-reported", "usage.served-model-reported"}
    assert applicable_checks(CATALOG, "api", [], "offline") == {
        "scope.dotdot-refused",
        "usage.vendor-cost-reported",
        "usage.served-model-never-guessed",
        "usage.served-model-reported",
    }
    assert "bridge.failed-load-ends-session" in applicable_checks(CATALOG, "harness", [], "offline")
    assert applicable_checks(CATALOG, "api", [], "live") == {"live.smoke-answers"}


def test_a_thin_column_shows_its_coverage_everywhere():
    m = combine([_report({"full": FULL, "thin": []}, CELLS)], catalog=CATALOG)
    full, thin = coverage(m, "full", "offline"), coverage(m, "thin", "offline")
    assert (full.ran, full.applicable, full.not_run) == (3, 3, {})
    assert (thin.ran, thin.applicable, thin.not_run) == (2, 4, {"unsupported-by-backend": 2})
    md = to_markdown(m)
    assert "| **Coverage** | **3/3 ran (100%)** | **2/4 ran (50%)** |" in md
    assert "- **thin (offline)**: 2 of 4 applicable checks ran; not run: 2 unsupported-by-backend" in md
    data = to_json(m)
    assert data["coverage"]["thin"]["offline"] == {"ran": 2, "applicable": 4, "not_run": {"unsupported-by-backend": 2}}
    page = to_html(m)
    assert "coverage 2/4 ran (50%)" in page and "Coverage: 2 of 4 applicable checks ran" in page


def test_an_applicable_check_without_a_cell_counts_as_not_selected():
    cells = [c for c in CELLS if c[1] == "full" and c[0] != "usage.vendor-cost-reported"]
    m = combine([_report({"full": FULL}, cells)], catalog=CATALOG)
    cov = coverage(m, "full", "offline")
    assert (cov.ran, cov.applicable, cov.not_run) == (2, 3, {"not-selected": 1})


def test_errors_and_other_skips_are_not_coverage():
    cells = [
        ("scope.dotdot-refused", "full", "error", "kit-bug"),
        ("usage.vendor-cost-reported", "full", "skipped", "budget"),
        ("usage.served-model-reported", "full", "xfailed", "upstream-bug"),
    ]
    cov = coverage(combine([_report({"full": FULL}, cells)], catalog=CATALOG), "full", "offline")
    assert (cov.ran, cov.applicable, cov.not_run) == (1, 3, {"budget": 1, "error": 1})


def test_without_the_reports_catalog_the_cells_are_the_applicable_set():
    m = combine([_report({"thin": []}, [c for c in CELLS if c[1] == "thin"], digest="not-the-installed-catalog")])
    cov = coverage(m, "thin", "offline")
    assert (cov.ran, cov.applicable) == (2, 4)


def test_the_installed_catalog_is_used_when_the_reports_ran_it(tmp_path):
    """Checks added to the catalog count without any list to update: a report holding one cell
    of the installed catalog covers one of everything that applies."""
    catalog = load_catalog()
    report = _report({"thin": []}, [("scope.dotdot-refused", "thin", "passed", None)], digest=catalog_hash(catalog))
    m = combine([report])
    cov = coverage(m, "thin", "offline")
    assert cov.ran == 1 and cov.applicable == len(applicable_checks(catalog, "api", [], "offline")) > 20
    (tmp_path / "backends.json").write_text(__import__("json").dumps(to_json(m)), encoding="utf-8")
    assert read_matrix(tmp_path / "backends.json")["coverage"]["thin"]["offline"]["ran"] == 1


def test_a_matrix_without_coverage_still_reads(tmp_path):
    m = combine([_report({"full": FULL}, CELLS[:3])], catalog=CATALOG)
    data = to_json(m)
    del data["coverage"]
    (tmp_path / "backends.json").write_text(__import__("json").dumps(data), encoding="utf-8")
    assert read_matrix(tmp_path / "backends.json")["coverage"] == {}


def test_the_minimum_runs_whatever_a_backend_declares():
    """kit/requirements.py: a backend that declares nothing is still judged on cancellation and
    on how host tools reach it (mcp_tools for a harness, host_tool_loop for an api backend);
    an optional capability it does not declare is skipped (its declines= checks judge it)."""
    from harnesscheck.core.contracts import ProviderSpec
    from harnesscheck.kit.requirements import required_for, unmet

    harness = ProviderSpec(id="thin-h", kind=Kind.harness, label="x", factory="m:f", cli_name="claude")
    api = ProviderSpec(id="thin-a", kind=Kind.api, label="x", factory="m:f")
    assert {C.cancellation, C.mcp_tools} <= required_for(harness)
    assert {C.cancellation, C.host_tool_loop} <= required_for(api)
    assert unmet(harness, {C.mcp_tools, C.cancellation}) == []
    assert unmet(api, {C.host_tool_loop}) == []
    assert unmet(harness, {C.served_model_reporting, C.mcp_tools}) == ["served_model_reporting"]
