"""`harnesscheck doctor`: precise about what is missing on a machine with none of the CLIs,
names credentials by variable only, checks versions, self-tests the real bridge."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harnesscheck.apps.doctor import run_doctor

CANARY = "sk-ant-api03-CANARY-doctor-0123456789"
EXE = str(Path(sys.executable).parent / "harnesscheck")


def _env(tmp_path: Path, path_dirs: list[Path] = (), **extra: str) -> dict[str, str]:
    """A stripped environment: PATH holds only the given dirs (no CLI anywhere), an empty
    CLI cache, a scratch HOME."""
    cache = tmp_path / "empty-cache"
    cache.mkdir(exist_ok=True)
    return {
        "PATH": os.pathsep.join(str(p) for p in path_dirs) or str(tmp_path / "no-bin"),
        "HOME": str(tmp_path),
        "HARNESSCHECK_CACHE": str(cache),
        **extra,
    }


def _doctor_cli(tmp_path: Path, *args: str, env: dict[str, str]) -> tuple[int, dict, str]:
    """The real command in a subprocess (the real bridge self-test included)."""
    proc = subprocess.run([EXE, "doctor", "--json", *args], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    return proc.returncode, json.loads(proc.stdout), proc.stdout + proc.stderr


@pytest.fixture
def _doctor(monkeypatch, capsys):
    """doctor_command in-process under the given environment, with the bridge self-test
    (covered by the subprocess tests) replaced by a fixed line to keep these fast."""
    import harnesscheck.apps.doctor as doctor

    monkeypatch.setattr(doctor, "bridge_self_test", lambda: [doctor.Check("bridge", "self-test", doctor.OK, "stubbed")])

    def run(tmp_path: Path, *args: str, env: dict[str, str]) -> tuple[int, dict, str]:
        for name in [n for n in os.environ if n not in ("PYTHONPATH",)]:
            monkeypatch.delenv(name)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        monkeypatch.chdir(tmp_path)
        backends = [args[i + 1] for i, a in enumerate(args) if a == "--backend"]
        code = doctor.doctor_command(backends=backends, probe="--probe" in args, as_json=True)
        out = capsys.readouterr()
        return code, json.loads(out.out), out.out + out.err

    return run


def _by(report: dict, backend: str, check: str) -> dict:
    found = [c for c in report["checks"] if c["backend"] == backend and c["check"] == check]
    assert len(found) == 1, (backend, check, report)
    return found[0]


def test_machine_without_any_cli_says_precisely_what_is_missing(tmp_path: Path) -> None:
    code, report, _ = _doctor_cli(tmp_path, env=_env(tmp_path))
    assert code == 0  # nothing selected: missing CLIs are warnings; the bridge works
    for backend, cli in (("claude-code", "claude"), ("codex", "codex"), ("cursor", "cursor-agent")):
        line = _by(report, backend, "binary")
        assert line["status"] == "warn"
        assert f"$PATH/{cli}" in line["detail"]
        assert str(tmp_path / "empty-cache" / "clis" / "node_modules" / ".bin" / cli) in line["detail"]
        assert f"HARNESS_BACKEND_CLI=/path/to/{cli}" in line["fix"]
    assert "npm install -g @anthropic-ai/claude-code" in _by(report, "claude-code", "binary")["fix"]
    assert _by(report, "selection", "HARNESS_BACKEND")["status"] == "warn"
    for check in ("list tools", "scoped read", "refused read", "trace"):
        assert _by(report, "bridge", check)["status"] == "ok"


def test_selected_backend_missing_fails_with_the_fix(tmp_path: Path, _doctor) -> None:
    code, report, _ = _doctor(tmp_path, "--backend", "claude-code", env=_env(tmp_path))
    assert code == 1 and report["ok"] is False
    line = _by(report, "claude-code", "binary")
    assert line["status"] == "fail" and "harnesscheck install-clis" in line["fix"]
    assert not [c for c in report["checks"] if c["backend"] in ("codex", "cursor")]


def test_selection_from_harness_backend_and_unknown_backend(tmp_path: Path, _doctor) -> None:
    code, report, _ = _doctor(tmp_path, env=_env(tmp_path, HARNESS_BACKEND="codex"))
    assert code == 1 and _by(report, "codex", "binary")["status"] == "fail"
    code, report, _ = _doctor(tmp_path, "--backend", "nope", env=_env(tmp_path))
    line = _by(report, "nope", "backend")
    assert code == 2 and line["status"] == "fail" and "claude-code" in line["fix"], "an unknown id is a usage error"


@pytest.mark.parametrize("token", [False, True], ids=["saved-login", "oauth-token"])
def test_claude_code_reasoning_reports_the_credentials_of_claude_code(tmp_path: Path, _doctor, token: bool) -> None:
    """claude-code-reasoning calls `claude -p` with claude's own login: doctor reports the same
    credential status as for claude-code, never "no credentials needed"."""
    extra = {"ANTHROPIC_API_KEY": "sk-ant-doctor-canary"}
    if token:
        extra["CLAUDE_CODE_OAUTH_TOKEN"] = "doctor-token-canary"
    _code, report, out = _doctor(tmp_path, "--backend", "claude-code", "--backend", "claude-code-reasoning", env=_env(tmp_path, **extra))
    for check in ("auth", "api-key-env"):
        plain, reasoning = _by(report, "claude-code", check), _by(report, "claude-code-reasoning", check)
        assert {**reasoning, "backend": "claude-code"} == plain
    assert _by(report, "claude-code-reasoning", "auth")["status"] == ("ok" if token else "skip")
    assert "no credentials needed" not in out and "canary" not in out


def test_api_key_is_reported_by_name_never_by_value(tmp_path: Path, _doctor) -> None:
    env = _env(tmp_path, HARNESS_API_MODE="anthropic_messages", ANTHROPIC_API_KEY=CANARY)
    code, report, raw = _doctor(tmp_path, "--backend", "api", env=env)
    line = _by(report, "api", "auth")
    assert line["status"] == "ok" and "ANTHROPIC_API_KEY is set" in line["detail"]
    assert CANARY not in raw and code == 0
    code, report, raw = _doctor(tmp_path, "--backend", "api", env=_env(tmp_path, HARNESS_API_MODE="responses"))
    line = _by(report, "api", "auth")
    assert code == 1 and line["status"] == "fail" and "OPENAI_API_KEY" in line["fix"]


def test_copilot_login_is_read_from_harnesscheck_own_auth_file_never_shown(tmp_path: Path, _doctor) -> None:
    from harnesscheck.backends.authstore import AuthStore

    auth = tmp_path / "hc-auth"
    code, report, _ = _doctor(tmp_path, "--backend", "copilot", env=_env(tmp_path, HARNESS_AUTH_DIR=str(auth)))
    line = _by(report, "copilot", "auth")
    assert code == 1 and line["status"] == "fail" and "harnesscheck login copilot" in line["fix"]
    AuthStore(auth).put("copilot", {"type": "oauth", "access": CANARY, "refresh": "", "expires": 0})
    code, report, raw = _doctor(tmp_path, "--backend", "copilot", env=_env(tmp_path, HARNESS_AUTH_DIR=str(auth)))
    assert _by(report, "copilot", "auth")["status"] == "ok" and CANARY not in raw
    (auth / "auth.json").chmod(0o644)
    code, report, raw = _doctor(tmp_path, "--backend", "copilot", env=_env(tmp_path, HARNESS_AUTH_DIR=str(auth)))
    line = _by(report, "copilot", "auth")
    assert line["status"] == "fail" and "chmod 600" in line["fix"] and CANARY not in raw


def _fake_cli(bin_dir: Path, name: str, version_line: str, auth_json: str | None = None) -> Path:
    bin_dir.mkdir(exist_ok=True)
    exe = bin_dir / name
    auth = f"if [ \"$1\" = auth ]; then echo '{auth_json}'; exit 0; fi\n" if auth_json else ""
    exe.write_text(f"#!/bin/sh\n{auth}if [ \"$1\" = --version ]; then echo '{version_line}'; exit 0; fi\nexit 3\n")
    exe.chmod(0o755)
    return exe


def test_versions_against_the_supported_range(tmp_path: Path, _doctor) -> None:
    bin_dir = tmp_path / "bin"
    _fake_cli(bin_dir, "claude", "2.1.197 (Claude Code)")
    _fake_cli(bin_dir, "codex", "codex-cli 0.50.0")
    env = _env(tmp_path, [bin_dir, Path("/usr/bin"), Path("/bin")])
    code, report, _ = _doctor(tmp_path, "--backend", "claude-code", "--backend", "codex", env=env)
    assert _by(report, "claude-code", "version")["status"] == "ok"
    codex = _by(report, "codex", "version")
    assert codex["status"] == "fail" and "0.50.0" in codex["detail"] and ">=0.100.0" in codex["detail"]
    assert "install-clis" in codex["fix"] and code == 1


def test_broken_cli_says_what_it_printed(tmp_path: Path, _doctor) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "claude"
    exe.write_text("#!/bin/sh\necho 'Error: claude native binary not installed.' >&2\nexit 1\n")
    exe.chmod(0o755)
    env = _env(tmp_path, [bin_dir, Path("/usr/bin"), Path("/bin")])
    _, report, _ = _doctor(tmp_path, "--backend", "claude-code", env=env)
    line = _by(report, "claude-code", "version")
    assert line["status"] == "fail" and "native binary not installed" in line["detail"]


def test_claude_token_status_is_asked_in_a_scratch_home(tmp_path: Path, _doctor) -> None:
    """With the subscription token variable set, `claude auth status --json` runs with a
    scratch HOME/CLAUDE_CONFIG_DIR: the user's store is never read. (A fake CLI here.)"""
    bin_dir = tmp_path / "bin"
    record = tmp_path / "auth-env.txt"
    exe = bin_dir / "claude"
    bin_dir.mkdir()
    exe.write_text(
        "#!/bin/sh\n"
        "if [ \"$1\" = --version ]; then echo '2.1.197 (Claude Code)'; exit 0; fi\n"
        f'echo "HOME=$HOME CFG=$CLAUDE_CONFIG_DIR KEY=${{ANTHROPIC_API_KEY:-none}}" > {record}\n'
        'echo \'{"loggedIn":true,"authMethod":"oauth_token","apiProvider":"firstParty"}\'\n'
    )
    exe.chmod(0o755)
    env = _env(tmp_path, [bin_dir, Path("/usr/bin"), Path("/bin")], CLAUDE_CODE_OAUTH_TOKEN=CANARY, ANTHROPIC_API_KEY=CANARY + "x")
    code, report, raw = _doctor(tmp_path, "--backend", "claude-code", env=env)
    line = _by(report, "claude-code", "auth")
    assert line["status"] == "ok" and "oauth_token" in line["detail"]
    assert _by(report, "claude-code", "api-key-env")["status"] == "warn"
    seen = record.read_text()
    assert "KEY=none" in seen and f"HOME={tmp_path}" not in seen and "hc-doctor-" in seen
    assert CANARY not in raw


def test_probe_through_the_fake_backend(tmp_path: Path, _doctor) -> None:
    code, report, _ = _doctor(tmp_path, "--backend", "fake", "--probe", env=_env(tmp_path))
    assert _by(report, "fake", "probe")["status"] == "ok" and code == 0
    code, report, _ = _doctor(tmp_path, "--backend", "codex", "--probe", env=_env(tmp_path))
    assert _by(report, "codex", "probe")["status"] == "skip"


def test_table_output_renders_fixes(tmp_path: Path, monkeypatch, capsys) -> None:
    import harnesscheck.apps.doctor as doctor

    monkeypatch.setattr(doctor, "bridge_self_test", lambda: [doctor.Check("bridge", "self-test", doctor.OK, "stubbed")])
    for name, value in {**_env(tmp_path), "COLUMNS": "200"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    assert doctor.doctor_command(backends=["cursor"], probe=False, as_json=False) == 1
    out = capsys.readouterr().out
    assert "cursor-agent not found" in out and "fix:" in out and "[/bold]" not in out


def test_run_doctor_in_process_bridge_failure_is_failing(monkeypatch, tmp_path: Path) -> None:
    import harnesscheck.apps.doctor as doctor

    monkeypatch.setattr(doctor, "bridge_self_test", lambda: [doctor.Check("bridge", "self-test", doctor.FAIL, "x", "y")])
    checks, failing = run_doctor(["fake"], probe=False, environ=_env(tmp_path))
    assert failing and checks[-1].check == "self-test"


def test_doctor_piped_or_narrow_prints_one_line_per_check_with_its_fix():
    """Issue 32 item 7: an 80-column table folded every detail into a narrow column; piped
    (or below TABLE_MIN_COLUMNS) each check is one line, its fix indented below."""
    from harnesscheck.apps.doctor import FAIL, OK, Check, render_lines

    text = render_lines(
        [
            Check("codex", "binary", FAIL, "codex not found in the cache", "harnesscheck install-clis"),
            Check("bridge", "self-test", OK, "spawn to tools/list in 0.6 s", ""),
        ]
    )
    lines = text.splitlines()
    assert lines[1] == "fail  codex   binary: codex not found in the cache"
    assert lines[2] == "              fix: harnesscheck install-clis"
    assert lines[3] == "ok    bridge  self-test: spawn to tools/list in 0.6 s" and len(lines) == 4


def test_install_clis_checks_that_the_installed_bubblewrap_can_sandbox_a_session(monkeypatch):
    """`install-clis` (as .ci/run) installs bubblewrap and then runs the sandbox's trial: a
    machine with bwrap that refuses user or PID namespaces is told so, with the fix."""
    import io
    import sys

    from harnesscheck.contain import sandbox
    from harnesscheck.loopback import install

    if not sys.platform.startswith("linux"):
        pytest.skip("bubblewrap is Linux")
    monkeypatch.setattr(sandbox, "_find_bwrap", lambda: "/usr/bin/bwrap")
    monkeypatch.setattr(sandbox, "status", lambda: sandbox.SandboxStatus(False, "/usr/bin/bwrap", False, "bwrap cannot create the namespaces here (EPERM)"))
    out = io.StringIO()
    assert install.ensure_bubblewrap(out) is False
    assert "cannot sandbox a session here" in out.getvalue() and "EPERM" in out.getvalue()
    assert sandbox.INSTALL_FIX in out.getvalue()
    monkeypatch.setattr(sandbox, "status", lambda: sandbox.SandboxStatus(True, "/usr/bin/bwrap", True, "", "0.8.0"))
    out = io.StringIO()
    assert install.ensure_bubblewrap(out) is True and out.getvalue() == ""
