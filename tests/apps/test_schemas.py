"""The published JSON Schemas (doc/*.schema.json) are generated from the pydantic models,
are current, carry `$schema` and `$id`, and accept what harnesscheck writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from harnesscheck.apps.schemas import render, schemas

DOC = Path(__file__).resolve().parents[2] / "doc"


@pytest.mark.parametrize("name", sorted(schemas()))
def test_published_schema_is_current_and_identified(name: str) -> None:
    schema = schemas()[name]
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"].startswith("urn:harnesscheck:schema:")
    Draft202012Validator.check_schema(schema)
    assert (DOC / name).read_text(encoding="utf-8") == render(schema), f"doc/{name} is stale: run `python -m harnesscheck.apps.schemas doc`"


def test_the_committed_matrix_matches_its_schema() -> None:
    schema = json.loads((DOC / "backends.schema.json").read_text())
    Draft202012Validator(schema).validate(json.loads((DOC / "backends.json").read_text()))


def test_a_written_report_matches_its_schema_and_a_bogus_one_does_not(tmp_path: Path) -> None:
    from harnesscheck.kit.results import BackendInfo, CellResult, Report, write_json

    report = Report(
        kit_version="0.1.0",
        catalog_hash="abc",
        levels=["offline"],
        started_at="2026-12-01T00:00:00+00:00",
        backends=[BackendInfo(id="fake", kind="api")],
        cells=[CellResult(check="scope.dotdot-refused", backend="fake", level="offline", outcome="passed")],
    )
    write_json(report, tmp_path / "r.json")
    data = json.loads((tmp_path / "r.json").read_text())
    validator = Draft202012Validator(json.loads((DOC / "conformance-report.schema.json").read_text()))
    validator.validate(data)
    data["cells"][0]["outcome"] = "bogus"
    assert not validator.is_valid(data)


def test_doctor_json_matches_its_schema() -> None:
    from harnesscheck.apps.doctor import Check, DoctorReport

    report = DoctorReport(ok=False, checks=[Check("codex", "binary", "fail", "codex not found", "harnesscheck install-clis")])
    validator = Draft202012Validator(json.loads((DOC / "doctor.schema.json").read_text()))
    validator.validate(json.loads(report.model_dump_json()))
    assert not validator.is_valid({"ok": True, "checks": [{"backend": "x", "check": "y", "status": "maybe"}]})
