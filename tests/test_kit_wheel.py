"""A backend in another package, against a non-editable harnesscheck wheel in a fresh venv:
`harnesscheck verify --backend example` and `pytest -m conformance --backend example` run the
suite shipped inside the wheel, from an empty directory, without copying any test file.

Offline: the wheels are built with --no-build-isolation and installed with --no-index; the
fresh venv borrows the third-party dependencies (pydantic, typer, mcp, ...) from this venv's
site-packages through a path entry, never its editable harnesscheck."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _run(cmd, cwd, timeout=600, **kw):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV") and not k.startswith("PYTEST_")}
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL, **kw)


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory):
    pytest.importorskip("hatchling", reason="env-missing: hatchling is needed to build the wheels offline")
    base = tmp_path_factory.mktemp("wheel")
    dist = base / "dist"
    for project in (REPO, REPO / "examples" / "example_backend"):
        proc = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(project)], cwd=base)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    venv = base / "venv"
    proc = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=base)
    assert proc.returncode == 0, proc.stderr
    python = venv / "bin" / "python"
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=base).stdout.strip())
    (site / "_borrowed_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    wheels = sorted(str(p) for p in dist.glob("*.whl"))
    proc = _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q", *wheels], cwd=base)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return venv, base


def test_wheel_is_installed_not_editable(fresh_venv):
    venv, base = fresh_venv
    proc = _run(
        [str(venv / "bin" / "python"), "-c", "import harnesscheck, harnesscheck.core.paths as p; print(harnesscheck.__file__); print(p.conformance_dir())"],
        cwd=base,
    )
    module, suite = proc.stdout.split()
    assert str(venv) in module, f"harnesscheck imported from {module}, not the wheel"
    assert str(venv) in suite and Path(suite, "test_scope.py").is_file(), "the suite is not shipped in the wheel"


def test_verify_runs_the_shipped_suite_for_the_entry_point_backend(fresh_venv):
    venv, base = fresh_venv
    work = base / "empty-cwd-verify"
    work.mkdir()
    proc = _run([str(venv / "bin" / "harnesscheck"), "verify", "--backend", "example", "--report", "out"], cwd=work)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    report = json.loads((work / "out" / "conformance-report.json").read_text())
    assert {c["backend"] for c in report["cells"]} == {"example"}
    assert sum(c["outcome"] == "passed" for c in report["cells"]) >= 40
    assert (work / "out" / "backends.md").is_file() and list(work.iterdir()) == [work / "out"], "verify copied files"


def test_pytest_conformance_runs_from_an_empty_directory(fresh_venv):
    venv, base = fresh_venv
    work = base / "empty-cwd-pytest"
    work.mkdir()
    proc = _run(
        [str(venv / "bin" / "python"), "-m", "pytest", "-m", "conformance", "--backend", "example", "-q", "-p", "no:cacheprovider", "--hc-report", "r.json"],
        cwd=work,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    report = json.loads((work / "r.json").read_text())
    assert report["cells"] and all(c["backend"] == "example" for c in report["cells"])
    assert sorted(p.name for p in work.iterdir()) == ["r.json"], "no test file was copied"


def test_verify_from_a_project_with_its_own_conformance_package(fresh_venv):
    """A project's own `conformance/` (this checkout has one) never shadows the shipped suite."""
    venv, base = fresh_venv
    work = base / "project-with-conformance"
    (work / "conformance").mkdir(parents=True)
    (work / "conformance" / "__init__.py").write_text("")
    (work / "conformance" / "test_usage.py").write_text("raise RuntimeError('the project copy was imported')\n")
    proc = _run([str(venv / "bin" / "harnesscheck"), "verify", "--backend", "example", "--report", "out"], cwd=work)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    report = json.loads((work / "out" / "conformance-report.json").read_text())
    assert any(c["check"].startswith("usage.") and c["outcome"] == "passed" for c in report["cells"])
