"""The committed matrix (doc/backends.json, written by `harnesscheck verify` + `matrix`) is a
ratchet and the proof that every declared capability is backed by a check that passes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harnesscheck.kit.catalog import load_catalog
from harnesscheck.kit.matrix import regressions
from harnesscheck.kit.results import read_report
from harnesscheck.registry import BUILTIN_SPECS
from kit_support import run_suite

DOC = Path(__file__).resolve().parent.parent / "doc"


@pytest.fixture(scope="module")
def committed() -> dict:
    path = DOC / "backends.json"
    assert path.is_file(), "doc/backends.json is missing: run `harnesscheck verify --report R && harnesscheck matrix R/conformance-report.json --out doc`"
    return json.loads(path.read_text())


def test_committed_matrix_covers_every_builtin_backend(committed):
    assert set(BUILTIN_SPECS) <= set(committed["cells"]), f"missing: {set(BUILTIN_SPECS) - set(committed['cells'])}"


def test_every_declared_capability_is_backed_by_a_passing_check(committed):
    """A capability a backend claims must be exercised by at least one check that requires it
    and passed offline; a claim nothing tests is a kit bug."""
    catalog = load_catalog()
    unbacked = []
    for spec in BUILTIN_SPECS.values():
        cells = committed["cells"].get(spec.id, {}).get("offline", {})
        for cap in sorted(spec.capabilities):
            backing = [c for c, info in catalog.items() if cap in info.requires and cells.get(c, {}).get("outcome") == "passed"]
            if not backing:
                unbacked.append(f"{spec.id}: {cap}")
    assert not unbacked, f"declared capabilities no passing check backs: {unbacked}"


def test_no_passing_cell_regresses_for_the_in_process_backends(committed, tmp_path):
    """Fresh offline run of fake and api against the committed matrix (the CLI backends are
    ratcheted by `harnesscheck verify` in CI)."""
    code, report, out = run_suite(tmp_path, "--backend", "fake", "--backend", "api", "-n", "2", timeout=900)
    assert report is not None, out[-3000:]
    found = regressions(committed, read_report(sorted(tmp_path.glob("report-*.json"))[-1]))
    assert not found, "\n".join(found)
