"""Helpers for the kit's self-tests: run the conformance suite in a child pytest, read its report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_suite(tmp_path: Path, *args: str, files: tuple[str, ...] = ("conformance",), timeout: float = 900) -> tuple[int, dict | None, str]:
    """(exit code, JSON report or None, combined output) of `pytest <files> <args>` with the kit plugin."""
    report = tmp_path / f"report-{len(list(tmp_path.glob('report-*.json')))}.json"
    # The kit's self-tests pin offline semantics unless a test names its level: the default
    # levels also include loopback wherever the pinned real CLIs are installed.
    named = any(a == "--level" or a.startswith("--level=") for a in args) or "live" in args
    level = () if named else ("--level", "offline")
    cmd = [sys.executable, "-m", "pytest", *files, "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--hc-report", str(report), *level, *args]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT"))}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    data = json.loads(report.read_text()) if report.is_file() else None
    return proc.returncode, data, proc.stdout + proc.stderr


def preload_the_kit() -> None:
    """Import every harnesscheck module now, at collection: pytester's sys.modules snapshot,
    taken when a test's pytester is set up, then holds them, so a run in this process never
    imports a second copy of a module that a package attribute still names (a monkeypatch
    would patch one copy and the kit use the other). Called by the test files that use run_inline."""
    import importlib
    import pkgutil

    import harnesscheck

    for module in pkgutil.walk_packages(harnesscheck.__path__, "harnesscheck."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)


def run_inline(pytester, *args: str, files: tuple[str, ...] = ("conformance",)) -> tuple[int, dict | None, str]:
    """What run_suite returns, from the same run made in this process (pytester): for tests of
    the plugin's options, where a child interpreter proves nothing more. A test whose subject
    is a process boundary (what outlives a run, xdist, a host project, an installed wheel) uses
    run_suite."""
    report = pytester.path / f"report-{len(list(pytester.path.glob('report-*.json')))}.json"
    named = any(a == "--level" or a.startswith("--level=") for a in args) or "live" in args
    level = () if named else ("--level", "offline")
    seen = _ImportedBy()
    # no:unraisableexception: its gc.collect at the end of each run walks this whole process's heap
    result = pytester.runpytest_inprocess(
        *(str(REPO / f) for f in files), "-q", "-p", "no:randomly", "-p", "no:unraisableexception", "--hc-report", str(report), *level, *args, plugins=[seen]
    )
    seen.keep()
    data = json.loads(report.read_text()) if report.is_file() else None
    return int(result.ret), data, result.stdout.str() + result.stderr.str()


class _ImportedBy:
    """The library modules a run imported, kept in sys.modules afterwards: pytester's snapshot
    drops what a run imported, so each run would import (and assertion-rewrite) the kit, its
    providers and every plugin's package afresh, slower than a child interpreter that reads them
    from the bytecode cache. The very module objects are put back (a package's attribute and
    sys.modules stay one object); the suite's own modules are left to each run (rewritten)."""

    def __init__(self) -> None:
        self.modules: dict = {}

    def pytest_sessionfinish(self) -> None:
        self.modules = {
            n: m for n, m in sys.modules.items() if not n.startswith(("conformance", "conftest", "test_")) and ".test_" not in n and "conftest" not in n
        }

    def keep(self) -> None:
        for name, module in self.modules.items():
            sys.modules.setdefault(name, module)


def failing(report: dict) -> dict[str, set[str]]:
    """backend -> ids of checks that failed or errored."""
    out: dict[str, set[str]] = {}
    for cell in report["cells"]:
        if cell["outcome"] in ("failed", "error"):
            out.setdefault(cell["backend"], set()).add(cell["check"])
    return out


def cells(report: dict, backend: str) -> dict[str, dict]:
    return {c["check"]: c for c in report["cells"] if c["backend"] == backend}
