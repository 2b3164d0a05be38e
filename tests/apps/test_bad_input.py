"""Bad input gets one line naming the value and the rule, then the fix, and a documented exit
code (cli.py: 0 ok, 1 backend failed, 2 usage, 3 environment, 4 internal); never a traceback,
and nothing is created for a refused command. One case per input seen failing (issue 16 item 3)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXE = str(Path(sys.executable).with_name("harnesscheck"))


def _report(tmp: Path, **change) -> Path:
    """A valid one-cell conformance report with `change` applied to its JSON."""
    from harnesscheck.kit.results import BackendInfo, CellResult, Report, write_json

    path = tmp / "report.json"
    write_json(
        Report(
            kit_version="0.1.0",
            catalog_hash="abc",
            levels=["offline"],
            started_at="2026-12-01T00:00:00+00:00",
            backends=[BackendInfo(id="fake")],
            cells=[CellResult(check="scope.dotdot-refused", backend="fake", level="offline", outcome="passed")],
        ),
        path,
    )
    data = json.loads(path.read_text())
    for key, fn in change.items():
        data = fn(data)
    path.write_text(json.dumps(data))
    return path


def _file(tmp: Path) -> Path:
    path = tmp / "a-file"
    path.write_text("x\n")
    return path


def _not_executable(tmp: Path) -> Path:
    path = tmp / "codex"
    path.write_text("#!/bin/sh\necho 0.171.0\n")
    path.chmod(0o644)
    return path


def _unwritable_dir() -> str:
    return "/proc/1"


# (id, argv builder(tmp) -> list, extra env, exit code, what the first line must say)
CASES = [
    (
        "run-prompt-not-utf8",
        lambda t: ["run", "--backend", "fake", "--root", str(t), "--prompt", b"caf\xe9", "--run-dir", str(t / "run")],
        {},
        2,
        "--prompt: not valid UTF-8 (byte 0xe9 at character 3)",
    ),
    (
        "run-run-dir-is-a-file",
        lambda t: ["run", "--backend", "fake", "--root", str(t / "wt"), "--prompt", "hi", "--run-dir", str(_file(t))],
        {},
        2,
        "a-file: is a file, must be a directory",
    ),
    (
        "verify-report-is-a-file",
        lambda t: ["verify", "--backend", "fake", "--report", str(_file(t))],
        {},
        2,
        "--report {t}/a-file: is a file, must be a directory",
    ),
    ("matrix-out-is-a-file", lambda t: ["matrix", str(_report(t)), "--out", str(_file(t))], {}, 2, "--out {t}/a-file: is a file, must be a directory"),
    ("install-clis-dest-is-a-file", lambda t: ["install-clis", "--dest", str(_file(t))], {}, 2, "--dest {t}/a-file: is a file, must be a directory"),
    (
        "install-clis-version-not-a-release",
        lambda t: ["install-clis", "--backend", "codex", "--version", "bogus", "--dest", str(t / "c")],
        {},
        2,
        "--version 'bogus': must be a release X.Y.Z (optionally -pre.N) or latest",
    ),
    (
        "record-out-unwritable",
        lambda t: ["record", "--backend", "codex", "--scenario", "success", "--out", f"{_unwritable_dir()}/x.json"],
        {},
        2,
        "--out /proc/1/x.json: not writable",
    ),
    (
        "record-out-under-a-file",
        lambda t: ["record", "--backend", "codex", "--scenario", "success", "--out", str(_file(t) / "x.json")],
        {},
        2,
        "a-file is a file, so x.json cannot be created there",
    ),
    (
        "record-would-overwrite-a-shipped-fixture",
        lambda t: ["record", "--backend", "codex", "--scenario", "success"],
        {},
        2,
        "exists (a shipped fixture); record never overwrites a file unless told",
    ),
    (
        "matrix-json-list",
        lambda t: ["matrix", str(_report(t, x=lambda d: [d])), "--out", str(t / "m")],
        {},
        2,
        "not a harnesscheck-conformance-report v1 report (found a JSON list)",
    ),
    (
        "matrix-report-without-header",
        lambda t: ["matrix", str(_report(t, x=lambda d: {k: v for k, v in d.items() if k != "header"})), "--out", str(t / "m")],
        {},
        2,
        "header: Field required",
    ),
    (
        "matrix-unknown-cell-field",
        lambda t: ["matrix", str(_report(t, x=lambda d: {**d, "cells": [{**d["cells"][0], "colour": 1}]})), "--out", str(t / "m")],
        {},
        2,
        "cells.0.colour: Extra inputs are not permitted",
    ),
    (
        "matrix-outcome-bogus",
        lambda t: ["matrix", str(_report(t, x=lambda d: {**d, "cells": [{**d["cells"][0], "outcome": "bogus"}]})), "--out", str(t / "m")],
        {},
        2,
        "cells.0.outcome: Input should be 'passed'",
    ),
    (
        "verify-n-negative",
        lambda t: ["verify", "--backend", "fake", "-n", "-2", "--report", str(t / "r")],
        {},
        2,
        "-n '-2': must be a whole number of workers, 0 or more",
    ),
    (
        "verify-n-not-a-number",
        lambda t: ["verify", "--backend", "fake", "-n", "abc", "--report", str(t / "r")],
        {},
        2,
        "-n 'abc': must be a whole number of workers, 0 or more",
    ),
    (
        "timeout-env-inf",
        lambda t: ["run", "--backend", "fake", "--root", str(t / "wt"), "--prompt", "hi"],
        {"HARNESS_BACKEND_TIMEOUT_S": "inf"},
        2,
        "HARNESS_BACKEND_TIMEOUT_S='inf': must be a positive, finite number of seconds (pydantic: Input should be a finite number)",
    ),
    (
        "timeout-env-negative",
        lambda t: ["run", "--backend", "fake", "--root", str(t / "wt"), "--prompt", "hi"],
        {"HARNESS_BACKEND_TIMEOUT_S": "-5"},
        2,
        "HARNESS_BACKEND_TIMEOUT_S='-5': must be a positive, finite number of seconds (pydantic: Input should be greater than 0)",
    ),
    (
        "timeout-option-inf",
        lambda t: ["run", "--backend", "fake", "--root", str(t / "wt"), "--prompt", "hi", "--timeout", "inf"],
        {},
        2,
        "--timeout inf: must be a positive, finite number of seconds",
    ),
    (
        "cli-is-a-directory",
        lambda t: ["run", "--backend", "codex", "--root", str(t / "wt"), "--prompt", "hi", "--cli", str(t)],
        {},
        2,
        "--cli {t}: is a directory, must be the CLI binary itself",
    ),
    (
        "cli-not-executable",
        lambda t: ["run", "--backend", "codex", "--root", str(t / "wt"), "--prompt", "hi", "--cli", str(_not_executable(t))],
        {},
        2,
        "--cli {t}/codex: is not executable (mode 644)",
    ),
    ("doctor-unknown-backend", lambda t: ["doctor", "--backend", "nope"], {}, 2, "unknown backend 'nope'"),
    ("run-no-backend-selected", lambda t: ["run", "--root", str(t / "wt"), "--prompt", "hi"], {}, 2, "no backend selected (HARNESS_BACKEND is not set)"),
    ("bridge-trace-is-a-directory", lambda t: ["bridge", "--root", str(t), "--trace", str(t)], {}, 2, "--trace {t}: is a directory, must be a file path"),
    (
        "cli-env-is-a-directory",
        lambda t: ["run", "--backend", "codex", "--root", str(t / "wt"), "--prompt", "hi"],
        {"HARNESS_BACKEND_CLI": "/"},
        3,
        "tried: / (a directory, not the binary)",
    ),
    ("drift-unknown-backend", lambda t: ["drift", "--backend", "nope"], {}, 2, "unknown backend 'nope'"),
    (
        "run-policy-missing",
        lambda t: ["run", "--backend", "fake", "--root", str(t / "wt"), "--prompt", "hi", "--policy", str(t / "nope.toml")],
        {},
        2,
        "policy file nope.toml: cannot be read",
    ),
    (
        "run-policy-bad-field",
        lambda t: ["run", "--backend", "fake", "--root", str(t / "wt"), "--prompt", "hi", "--policy", str(_policy(t, '[[rules]]\ndecision = "maybe"\n'))],
        {},
        2,
        "policy file p.toml: rules.0.decision: Input should be 'allow', 'deny' or 'approval_required'",
    ),
    (
        "run-events-and-json",
        lambda t: ["run", "--backend", "fake", "--root", str(t / "wt"), "--prompt", "hi", "--events", "--json"],
        {},
        2,
        "--events and --json both want stdout",
    ),
    # issue 32: a third-party backend's author's mistakes are usage errors naming the value, never "a bug"
    (
        "verify-backend-attr-not-a-spec",
        lambda t: ["verify", "--backend", f"{_spec_module(t)}:helper", "--report", str(t / "r")],
        {},
        2,
        "mine.helper gives a int, not a ProviderSpec",
    ),
    (
        "verify-backend-attr-missing",
        lambda t: ["verify", "--backend", f"{_spec_module(t)}:nospec", "--report", str(t / "r")],
        {},
        2,
        "module 'mine' has no attribute 'nospec' (it has: Mine, bad_id, broken_factory, helper, spec)",
    ),
    (
        "verify-backend-module-import-fails",
        lambda t: ["verify", "--backend", f"{_spec_module(t, 'import not_installed_dep')}:spec", "--report", str(t / "r")],
        {},
        2,
        "importing module 'mine' failed: ModuleNotFoundError: No module named 'not_installed_dep'",
    ),
    (
        "verify-backend-factory-does-not-import",
        lambda t: ["verify", "--backend", f"{_spec_module(t)}:broken_factory", "--report", str(t / "r")],
        {},
        2,
        "its factory 'nowhere_at_all:Nothing' does not import: ModuleNotFoundError",
    ),
    (
        "verify-backend-bad-id",
        lambda t: ["verify", "--backend", f"{_spec_module(t)}:bad_id", "--report", str(t / "r")],
        {},
        2,
        "its ProviderSpec id 'Bad ID!' is not an id (letters, digits",
    ),
    (
        "verify-report-under-proc",
        lambda t: ["verify", "--backend", "fake", "--report", "/proc/hc-report"],
        {},
        2,
        "--report /proc/hc-report: cannot be created (/proc is not writable)",
    ),
    (
        "verify-check-unknown",
        lambda t: ["verify", "--backend", "fake", "--level", "offline", "--check", "no.such-check", "--report", str(t / "r")],
        {},
        2,
        "--check: no such check: no.such-check",
    ),
    (
        "verify-check-typo",
        lambda t: ["verify", "--backend", "fake", "--check", "env.provider-keys-strippd", "--report", str(t / "r")],
        {},
        2,
        "(did you mean env.provider-keys-stripped",
    ),
    (
        "verify-cli-at-offline",
        lambda t: ["verify", "--backend", "claude-code", "--level", "offline", "--cli", "/bin/true", "--report", str(t / "r")],
        {},
        2,
        "--cli /bin/true: the offline level runs the kit's fake CLIs, never a given binary",
    ),
    (
        "verify-timeout-env-abc",
        lambda t: ["verify", "--backend", "fake", "--level", "offline", "--report", str(t / "r")],
        {"HARNESS_BACKEND_TIMEOUT_S": "abc"},
        2,
        "HARNESS_BACKEND_TIMEOUT_S='abc': must be a positive, finite number of seconds",
    ),
]

SPEC_MODULE = """
from harnesscheck.core.contracts import Kind, ProviderSpec

def spec():
    return ProviderSpec(id="mine", kind=Kind.harness, label="mine", factory="mine:Mine", cli_name="claude")

def helper():
    return 1

def broken_factory():
    return ProviderSpec(id="mine", kind=Kind.harness, label="mine", factory="nowhere_at_all:Nothing", cli_name="claude")

def bad_id():
    return ProviderSpec(id="Bad ID!", kind=Kind.harness, label="mine", factory="mine:Mine", cli_name="claude")

class Mine:
    def __init__(self, spec, settings):
        self.spec = spec
"""


def _spec_module(tmp: Path, first_line: str = "") -> str:
    """A third-party backend module `mine` in the command's cwd."""
    (tmp / "mine.py").write_text(first_line + "\n" + SPEC_MODULE)
    return "mine"


def _policy(tmp: Path, text: str) -> Path:
    path = tmp / "p.toml"
    path.write_text(text)
    return path


def run_case(tmp_path: Path, build, env_extra: dict) -> subprocess.CompletedProcess:
    (tmp_path / "wt").mkdir(exist_ok=True)
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_")}
    env.update({"HOME": str(tmp_path), "TMPDIR": str(tmp_path / "tmp"), "COLUMNS": "200", **env_extra})
    argv = [EXE, *build(tmp_path)]
    return subprocess.run(argv, capture_output=True, cwd=tmp_path, env=env, timeout=180, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize(("case", "build", "env_extra", "code", "says"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_a_fix_and_its_exit_code(tmp_path: Path, case, build, env_extra, code, says) -> None:
    if case == "record-out-unwritable" and os.access(_unwritable_dir(), os.W_OK):
        pytest.skip(f"{_unwritable_dir()} is writable here")
    proc = run_case(tmp_path, build, env_extra)
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == code, err
    assert "Traceback" not in err
    says = says.format(t=tmp_path)
    if case.startswith("doctor-"):  # doctor reports it as its failing `backend` line, with the fix
        out = proc.stdout.decode("utf-8", "replace")
        assert says in out and "fix:" in out, out
    else:
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert lines[0].startswith("harnesscheck ") and says in lines[0], err
        assert len(lines) >= 2 and lines[1].startswith("  fix: "), err
    assert not (tmp_path / "run").exists(), "a refused run creates no run dir"
    assert list((tmp_path / "tmp").iterdir()) == [], "a refused command leaves nothing in the temp dir"


def test_internal_error_is_one_line_and_exit_4_and_the_traceback_needs_debug(monkeypatch, capsys) -> None:
    import harnesscheck.apps.cli as cli
    import harnesscheck.core.contracts as contracts

    def broken() -> str:
        raise RuntimeError("a bug")

    monkeypatch.setattr(contracts, "outcome_schema_json", broken)
    monkeypatch.setattr(sys, "argv", ["harnesscheck", "schema"])
    with pytest.raises(SystemExit) as info:
        cli.main()
    assert info.value.code == 4
    err = capsys.readouterr().err
    assert err.splitlines()[0] == "harnesscheck schema: internal error: RuntimeError: a bug" and "Traceback" not in err
    assert "--debug" in err
    monkeypatch.setattr(sys, "argv", ["harnesscheck", "--debug", "schema"])
    with pytest.raises(RuntimeError, match="a bug"):
        cli.main()


def test_pytest_m_conformance_without_a_backend_says_how_to_name_one(tmp_path: Path) -> None:
    """In a backend's own project, `pytest -m conformance` with no backend is pytest's usage
    error (its exit code 4) naming --hc-backend, not "collected 0 items"."""
    (tmp_path / "test_nothing.py").write_text("def test_x():\n    pass\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARNESS_", "PYTEST_"))}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "conformance", "-p", "no:cacheprovider", "-c", os.devnull, "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "-m conformance: no backend named" in proc.stderr and "--hc-backend mymodule:spec" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("backend", ["claude-code", "api/anthropic_messages", "fake"])
def test_a_library_scope_whose_root_does_not_exist_is_refused_before_the_session(tmp_path: Path, monkeypatch, backend) -> None:
    """Every kind of backend: a harness CLI, the api host loop, the fake."""
    from harnesscheck import AgentSessionRequest, ToolScope, resolve_provider
    from harnesscheck.core.config import Settings
    from harnesscheck.core.contracts import ConfigError
    from harnesscheck.core.paths import fake_clis_dir

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-never-sent")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")  # nothing may be sent: refused first
    settings = {
        "claude-code": Settings(backend="claude-code", cli=str(fake_clis_dir() / "claude")),
        "api/anthropic_messages": Settings(backend="api/anthropic_messages", model="claude-haiku-4-5"),
        "fake": Settings(backend="fake"),
    }[backend]
    provider = resolve_provider(settings)
    request = AgentSessionRequest(prompt="hi", scope=ToolScope(name="ws", root=tmp_path / "no-such-worktree"), timeout_s=30)
    with pytest.raises(ConfigError) as info:
        provider.run_session(request)
    assert info.value.message == f"scope root {tmp_path / 'no-such-worktree'}: does not exist"
    assert "ToolScope(root=...)" in info.value.fix and info.value.exit_code == 2
