"""The committed matrix (doc/backends.json, written by `harnesscheck verify` + `matrix`) is a
ratchet and the proof that every declared capability is backed by a check that passes.

Every backend is ratcheted: the README's test command (what `.ci/run` runs) passes
`--hc-ratchet doc/backends.json`, so the conformance cells of that run (every built-in
backend, offline, and loopback where the pinned CLIs are installed) are compared with the
committed matrix; `harnesscheck verify` compares its cells with doc/backends.json by default.
The rule (kit/matrix.py regressions, SPEC-matrix "The ratchet"): a cell that passed there and
fails, errors or is skipped now is a regression, except a skip env-missing in a column whose
every cell was skipped env-missing (that level could not run here at all).

This file does not run any column again to compare it: the README's test command ratchets every
cell it runs, the in-process columns included (a second run of them here cost 24 s and judged
nothing new); the rule itself is unit-tested below, and --hc-ratchet end to end on one cell."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harnesscheck.backends.registry import BUILTIN_SPECS, column_ids, get_spec
from harnesscheck.kit.baseline import Baseline, Entry
from harnesscheck.kit.catalog import load_catalog
from harnesscheck.kit.matrix import committed_cells, regressions
from harnesscheck.kit.results import BackendInfo, CellResult, Report

#: Every built-in backend's matrix columns (`api` is one column per api_mode).
COLUMNS = [column for backend in BUILTIN_SPECS for column in column_ids(backend)]
from kit_support import preload_the_kit, run_inline

pytest_plugins = ["pytester"]
preload_the_kit()

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "doc"


@pytest.fixture(scope="module")
def committed() -> dict:
    path = DOC / "backends.json"
    assert path.is_file(), "doc/backends.json is missing: run `harnesscheck verify --report R && harnesscheck matrix R/conformance-report.json --out doc`"
    return json.loads(path.read_text())


def test_committed_matrix_covers_every_builtin_backend(committed):
    """Every column, a renamed one under its former id (FORMER_IDS); the mode columns the api split
    added are pending only while the committed matrix predates it (holds `api`, no `api/...`)."""
    predates_split = "api" in committed["cells"] and not any(b.startswith("api/") for b in committed["cells"])
    missing = [c for c in COLUMNS if not committed_cells(committed, c) and not (predates_split and c.startswith("api/")) and c not in AWAITING_REGENERATION]
    assert not missing, f"missing: {missing}"
    stale = sorted(c for c in AWAITING_REGENERATION if committed_cells(committed, c))
    assert not stale, f"the committed matrix holds {stale}: remove them from AWAITING_REGENERATION"


#: Columns added since doc/backends.* was last regenerated (only the lead regenerates it, from
#: one full verify): pending until then, and the test above fails once the matrix holds them.
AWAITING_REGENERATION: set[str] = set()


def test_every_declared_capability_is_backed_by_a_passing_check(committed):
    """A capability a backend column claims must be exercised by at least one check that requires
    it and passed offline (a column with no offline adapter, whose offline cells all skip, at
    loopback: claude-code-reasoning); a claim nothing tests is a kit bug. A capability whose every
    backing check is newer than the committed matrix (no cell of it there) waits for the regeneration."""
    catalog = load_catalog()
    known = {check for levels in committed["cells"].values() for cells in levels.values() for check in cells}
    unbacked = []
    for column in COLUMNS:
        spec = get_spec(column)
        levels = committed_cells(committed, column)
        cells = levels.get("offline", {})
        if not cells:
            continue  # a column the committed matrix does not hold yet (test above)
        if not any(c.get("outcome") == "passed" for c in cells.values()):
            cells = levels.get("loopback", {})  # verified at loopback only (its offline cells all skip)
        for cap in sorted(spec.capabilities):
            requiring = [c for c, info in catalog.items() if cap in info.requires]
            backing = [c for c in requiring if cells.get(c, {}).get("outcome") == "passed"]
            if not backing and any(c in known for c in requiring):
                unbacked.append(f"{column}: {cap}")
    assert not unbacked, f"declared capabilities no passing check backs: {unbacked}"


def test_a_renamed_column_is_compared_with_its_former_cells():
    """`api` was anthropic_messages' column: until the matrix is regenerated, api/anthropic_messages
    is ratcheted against the cells committed as `api`; a column the matrix holds under its own id
    uses those, and the new mode columns compare nothing."""
    committed = _committed(("a.x", "api", "offline"), ("a.y", "api", "offline"))
    now = _report(
        ("a.x", "api/anthropic_messages", "offline", "failed", None),
        ("a.y", "api/anthropic_messages", "offline", "passed", None),
        ("a.x", "api/chat_completions", "offline", "failed", None),
    )
    assert [line.split(" passed")[0] for line in regressions(committed, now)] == ["a.x on api/anthropic_messages (offline)"]
    committed["cells"]["api/anthropic_messages"] = {"offline": {}}
    assert regressions(committed, now) == []


def _report(*cells: tuple[str, str, str, str, str | None]) -> Report:
    return Report(
        kit_version="0",
        catalog_hash="h",
        backends=[BackendInfo(id="x")],
        levels=["offline", "loopback"],
        started_at="2026-12-01T00:00:00+00:00",
        cells=[CellResult(check=c, backend=b, level=lv, outcome=o, reason=r) for c, b, lv, o, r in cells],
    )


def _committed(*cells: tuple[str, str, str]) -> dict:
    out: dict = {"cells": {}}
    for check, backend, level in cells:
        out["cells"].setdefault(backend, {}).setdefault(level, {})[check] = {"outcome": "passed", "reason": None}
    return out


def test_a_pass_that_turns_into_a_fail_an_error_or_a_skip_is_a_regression():
    committed = _committed(("a.x", "codex", "offline"), ("a.y", "codex", "offline"), ("a.z", "codex", "offline"), ("a.w", "codex", "offline"))
    now = _report(
        ("a.x", "codex", "offline", "failed", None),
        ("a.y", "codex", "offline", "error", "kit-bug"),
        ("a.z", "codex", "offline", "skipped", "unsupported-by-backend"),
        ("a.w", "codex", "offline", "passed", None),
    )
    found = regressions(committed, now)
    assert [line.split(" passed before")[0] for line in found] == ["a.x on codex (offline)", "a.y on codex (offline)", "a.z on codex (offline)"]
    assert "now skipped [unsupported-by-backend]" in found[2]


def test_only_a_column_that_could_not_run_here_at_all_is_excused():
    """env-missing for every cell of (backend, level): the level is not available here, nothing
    was compared; env-missing for some cells of a column that ran is a regression."""
    committed = _committed(("a.x", "codex", "loopback"), ("a.y", "codex", "loopback"), ("a.x", "claude-code", "loopback"))
    now = _report(
        ("a.x", "codex", "loopback", "skipped", "env-missing"),
        ("a.y", "codex", "loopback", "skipped", "env-missing"),
        ("a.x", "claude-code", "loopback", "skipped", "env-missing"),
        ("a.y", "claude-code", "loopback", "passed", None),
    )
    assert [line.split(" passed")[0] for line in regressions(committed, now)] == ["a.x on claude-code (loopback)"]


def test_a_budget_skip_is_the_machines_speed_not_a_regression():
    """`budget`: the machine was too slow to judge the cell; the ratchet must not make CI depend on load.
    Any other skip reason in the same column still counts."""
    committed = _committed(("a.x", "codex", "offline"), ("a.y", "codex", "offline"))
    now = _report(("a.x", "codex", "offline", "skipped", "budget"), ("a.y", "codex", "offline", "skipped", "adapter-not-implemented"))
    assert [line.split(" passed")[0] for line in regressions(committed, now)] == ["a.y on codex (offline)"]


def test_a_baseline_entry_excuses_a_failure_and_a_known_failure_is_not_a_regression():
    committed = _committed(("a.x", "codex", "offline"), ("a.y", "codex", "offline"))
    now = _report(("a.x", "codex", "offline", "failed", None), ("a.y", "codex", "offline", "xfailed", "upstream-bug"))
    assert regressions(committed, now, Baseline([Entry(id="a.x", reason="upstream-bug", backend="codex")])) == []
    assert len(regressions(committed, now)) == 1


def test_the_plugin_ratchet_fails_a_run_whose_passing_cell_now_skips(tmp_path, pytester, committed):
    """--hc-ratchet end to end: a committed matrix in which fake's vendor-cost check passed (fake
    declares no cost_reporting, so it skips) fails the run, naming the cell; the real one does not."""
    doctored = json.loads(json.dumps(committed))
    doctored["cells"]["fake"]["offline"]["usage.vendor-cost-reported"] = {"outcome": "passed", "reason": None}
    (tmp_path / "doctored.json").write_text(json.dumps(doctored))
    args = ("--hc-backend", "fake", "-k", "vendor_cost or registry_builds")
    code, report, out = run_inline(pytester, *args, "--hc-ratchet", str(tmp_path / "doctored.json"))
    assert code == 1, out
    assert "usage.vendor-cost-reported on fake (offline) passed before and now skipped [unsupported-by-backend]" in out
    assert any("ratchet" in p for p in report["problems"])
    code, report, out = run_inline(pytester, *args, "--hc-ratchet", str(DOC / "backends.json"))
    assert code == 0 and report["problems"] == [], out


def test_every_backend_is_ratcheted_by_the_readme_test_command_and_by_verify(tmp_path, monkeypatch):
    from harnesscheck.kit import verify

    readme = (REPO / "README.md").read_text()
    test_command = next(line for line in readme.splitlines() if line.startswith("    python3 -m venv") and "pytest" in line)
    assert test_command.rstrip().endswith("--hc-ratchet doc/backends.json"), test_command
    assert test_command.strip() in (REPO / ".ci" / "run").read_text()
    # verify: doc/backends.json of the current directory by default, passed to its child
    monkeypatch.chdir(REPO)
    path, why = verify._ratchet_path("default")
    assert (path, why) == ((DOC / "backends.json").resolve(), "")
    args = verify.pytest_args(["codex"], ["offline"], tmp_path, None, None, ratchet=path)
    assert args[args.index("--hc-ratchet") + 1] == str(path)
    monkeypatch.chdir(tmp_path)
    assert verify._ratchet_path("default") == (None, "")  # no committed matrix here: nothing to compare
    assert verify._ratchet_path("none") == (None, "")
    (tmp_path / "list.json").write_text("[]")
    assert "not a harnesscheck-matrix file" in verify._ratchet_path(str(tmp_path / "list.json"))[1]
