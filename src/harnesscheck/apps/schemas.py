"""The published JSON Schemas of the files harnesscheck writes, generated from their pydantic
models (tests/apps/test_schemas.py fails when a file under doc/ is stale):

    python -m harnesscheck.apps.schemas [DOC_DIR]     # rewrite every schema file

- doc/conformance-report.schema.json: the conformance report (`ReportFile`, kit/results.py)
- doc/backends.schema.json: backends.json, the verification matrix (`MatrixFile`, kit/matrix.py)
- doc/doctor.schema.json: `harnesscheck doctor --json` (`DoctorReport`, doctor.py)

Each carries `$schema` (JSON Schema 2020-12) and a stable `$id` (a URN: the schemas are
published in the repository and the wheel, not at an address).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def schemas() -> dict[str, dict]:
    """file name -> schema."""
    from harnesscheck.apps.doctor import DoctorReport
    from harnesscheck.kit.matrix import MATRIX_SCHEMA_ID, MatrixFile
    from harnesscheck.kit.results import REPORT_SCHEMA_ID, ReportFile, json_schema

    return {
        "conformance-report.schema.json": json_schema(ReportFile, REPORT_SCHEMA_ID),
        "backends.schema.json": json_schema(MatrixFile, MATRIX_SCHEMA_ID),
        "doctor.schema.json": json_schema(DoctorReport, "urn:harnesscheck:schema:harnesscheck-doctor:1"),
    }


def render(schema: dict) -> str:
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def write_all(doc_dir: Path) -> list[Path]:
    out = []
    for name, schema in schemas().items():
        path = Path(doc_dir) / name
        path.write_text(render(schema), encoding="utf-8")
        out.append(path)
    return out


if __name__ == "__main__":
    for written in write_all(Path(sys.argv[1] if len(sys.argv) > 1 else "doc")):
        print(f"wrote {written}")
