"""The example backend that drives a real CLI (examples/claude_cli_backend, doc/AUTHORS.md)
passes the offline suite against the fake claude: every cell passes or is skipped with a
reason, and the required minimum (kit/requirements.py) is among what passed."""

from __future__ import annotations

import os

from kit_support import REPO, run_suite

from harnesscheck.kit.catalog import load_catalog

SRC = REPO / "examples" / "claude_cli_backend" / "src"


def test_the_example_is_a_cli_transport_not_a_scripted_one(monkeypatch):
    monkeypatch.syspath_prepend(str(SRC))
    from claude_cli_backend import ClaudeCliTransport, spec

    from harnesscheck.backends.claude_code import ClaudeCodeTransport
    from harnesscheck.backends.fake import FakeTransport
    from harnesscheck.kit.levels import adapter_kind

    assert adapter_kind(spec()) == "harness" and spec().cli_name == "claude"
    assert not issubclass(ClaudeCliTransport, (FakeTransport, ClaudeCodeTransport))


def test_the_example_passes_the_offline_suite(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH", "")) if p))
    code, report, out = run_suite(tmp_path, "--hc-backend", "claude_cli_backend:spec", "-n", "2", timeout=1800)
    assert report is not None, out[-3000:]
    cells = [c for c in report["cells"] if c["backend"] == "claude-cli-example"]
    bad = {
        c["check"]: f"{c['outcome']} [{c['reason']}] {c['message'][:300]}"
        for c in cells
        if c["outcome"] not in ("passed", "skipped") or (c["outcome"] == "skipped" and not c["reason"])
    }
    assert not bad, bad
    assert code == 0, out[-3000:]
    passed = {c["check"] for c in cells if c["outcome"] == "passed"}
    catalog = load_catalog()
    monkeypatch.syspath_prepend(str(SRC))
    from claude_cli_backend import spec

    from harnesscheck.kit.requirements import unmet

    # the minimum (kit/requirements.py): the harness checks of these areas that need no optional capability
    minimum = {
        cid
        for cid, info in catalog.items()
        if info.area in ("env", "scope", "time", "errors", "bridge")
        and "offline" in info.levels
        and info.applies_to_kind(spec().kind)
        and not info.declines
        and not unmet(spec().model_copy(update={"capabilities": frozenset()}), info.requires)
    }
    skipped = {c["check"]: c["reason"] for c in cells if c["check"] in minimum and c["outcome"] == "skipped"}
    # what the minimum may skip: a fixture the fake claude has no recording of, or a hazard of another platform
    assert set(skipped.values()) <= {"adapter-not-implemented", "env-missing", "budget"}, skipped
    assert len(passed & minimum) >= len(minimum) - len(skipped) and len(passed) >= 50, sorted(passed)
