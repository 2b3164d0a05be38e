"""Any CLI release, said out loud: side-by-side installs, `ID==VERSION` columns, the
HARNESS_BACKEND_CLI override honoured or refused at the loopback level, doctor's
"verified" line and install-clis --check (no real CLI, no network: fakes and monkeypatches)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harnesscheck.backends.registry import (
    SECOND_COLUMNS,
    base_id,
    default_backend_ids,
    get_spec,
    is_version_variant,
    nearest_release,
    verified_releases,
)
from harnesscheck.core.contracts import CliVersionUnsupported, ConfigError
from harnesscheck.loopback import clis, install


def _release(cache: Path, cli: str, package: str, version: str) -> Path:
    prefix = install.version_dir(cache, cli, version)
    pkg = prefix / "node_modules" / package
    pkg.mkdir(parents=True)
    (pkg / "package.json").write_text(json.dumps({"name": package, "version": version}))
    exe = prefix / "node_modules" / ".bin" / cli
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text(f"#!/bin/sh\necho '{version} (Claude Code)'\n")
    exe.chmod(0o755)
    return exe


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESSCHECK_CACHE", str(tmp_path))
    monkeypatch.delenv("HARNESS_BACKEND_CLI", raising=False)
    monkeypatch.delenv("HARNESS_BACKEND", raising=False)
    return tmp_path / "clis"


def test_a_release_column_is_the_same_backend_at_that_version():
    spec = get_spec("claude-code==2.1.197")  # the previous pin, the second column
    base = get_spec("claude-code")
    assert base.pinned_version == "2.1.332" and not is_version_variant(base)
    assert spec.id == "claude-code==2.1.197" and spec.pinned_version == "2.1.197" and is_version_variant(spec)
    assert (spec.factory, spec.capabilities, spec.cli_package) == (base.factory, base.capabilities, base.cli_package)
    assert base_id(spec.id) == "claude-code"
    assert get_spec(f"claude-code=={base.pinned_version}") is base  # the pin is the base column
    with pytest.raises(CliVersionUnsupported):
        get_spec("claude-code==3.0.0")  # outside the supported range: refused, never run
    with pytest.raises(ConfigError):
        get_spec("claude-code==latest")
    with pytest.raises(ConfigError):
        get_spec("fake==1.0.0")  # no npm CLI


def test_default_backends_carry_the_second_columns():
    ids = default_backend_ids()
    for backend, versions in SECOND_COLUMNS.items():
        for v in versions:
            if v != get_spec(backend).pinned_version:
                assert f"{backend}=={v}" in ids


def test_releases_live_side_by_side_in_the_cache(cache):
    _release(cache, "claude", "@anthropic-ai/claude-code", "2.1.197")
    _release(cache, "claude", "@anthropic-ai/claude-code", "2.1.332")
    one, why = clis.require_pinned_cli("claude-code==2.1.332")
    assert one is not None and one.version == "2.1.332" and "claude@2.1.332" in str(one.path), why
    two, why = clis.require_pinned_cli("claude-code==2.1.197")
    assert two is not None and "claude@2.1.197" in str(two.path), why
    none, why = clis.require_pinned_cli("claude-code==2.1.300")
    assert none is None and "2.1.197, 2.1.332" in why and "--version 2.1.300" in why


def test_a_cache_holding_another_release_says_which(cache):
    _release(cache, "claude", "@anthropic-ai/claude-code", "2.1.299")
    found, why = clis.require_pinned_cli("claude-code==2.1.298")
    assert found is None and "the cache holds 2.1.299" in why


def test_backend_cli_override_is_honoured_or_refused_never_ignored(cache, tmp_path, monkeypatch):
    exe = _release(tmp_path / "elsewhere", "claude", "@anthropic-ai/claude-code", "2.1.250")
    env = {"HARNESS_BACKEND_CLI": str(exe)}
    found, why = clis.require_pinned_cli("claude-code", env)
    assert found is None and "HARNESS_BACKEND does not say" in why and "refused" in why
    env["HARNESS_BACKEND"] = "claude-code"
    found, why = clis.require_pinned_cli("claude-code", env)
    assert found is not None and found.version == "2.1.250" and found.source == "HARNESS_BACKEND_CLI"
    found, why = clis.require_pinned_cli("claude-code==2.1.197", env)
    assert found is None and "names 2.1.197" in why
    assert clis.require_pinned_cli("codex", env)[1] != why  # another backend's override does not concern codex
    env["HARNESS_BACKEND_CLI"] = str(tmp_path / "missing")
    found, why = clis.require_pinned_cli("claude-code", env)
    assert found is None and "not an executable file" in why


def test_verify_refuses_a_loopback_level_that_cannot_run(cache, capsys):
    from harnesscheck.kit.verify import LevelUnavailable, plan

    with pytest.raises(LevelUnavailable, match="not installed"):
        plan(["claude-code"], ["loopback"])
    ids, chosen, notes = plan(["claude-code"], [])  # not asked for by name: a note, not an error
    assert chosen == ["offline"] and notes


def test_doctor_says_verified_only_for_a_release_the_matrix_ran(tmp_path, monkeypatch):
    from harnesscheck.apps import doctor
    from harnesscheck.backends import registry

    matrix = tmp_path / "backends.json"
    matrix.write_text(
        json.dumps(
            {
                "backends": {
                    "claude-code": {"cli_version": {"loopback": "2.1.332", "offline": "2.1.197 (fixtures)"}},
                    "claude-code==2.1.197": {"cli_version": {"loopback": "2.1.197"}},
                    "codex": {"cli_version": {"loopback": "0.171.0"}},
                }
            }
        )
    )
    assert verified_releases("claude-code", matrix) == ["2.1.332", "2.1.197"]
    assert nearest_release("2.1.300", ["2.1.332", "2.1.197"]) == "2.1.332"
    monkeypatch.setattr(registry, "verified_releases", lambda backend: verified_releases(backend, matrix))
    spec = get_spec("claude-code")
    ok = doctor.check_verified(spec, "2.1.197 (Claude Code)")
    assert ok.status == doctor.OK and "verified" in ok.detail
    warn = doctor.check_verified(spec, "2.1.300 (Claude Code)")
    assert warn.status == doctor.WARN and "NOT verified" in warn.detail and "nearest 2.1.332" in warn.detail
    assert "--version 2.1.300" in warn.fix and "claude-code==2.1.300" in warn.fix


def test_shipped_matrix_is_found():
    assert verified_releases("codex"), "doc/backends.json names the codex release its loopback level ran"


def test_install_clis_version_needs_a_backend(cache, capsys):
    assert install.install(cache, version="1.2.3") == 2
    assert "needs --backend" in capsys.readouterr().err


def test_install_clis_wants_pins_and_second_columns():
    wanted = {(c.backend, c.version) for c in install.wanted_clis()}
    for c in install.pinned_clis():
        assert (c.backend, c.version) in wanted
    for backend, versions in SECOND_COLUMNS.items():
        assert {(backend, v) for v in versions} <= wanted
    assert [c.version for c in install.wanted_clis("claude-code", "9.9.9")] == ["9.9.9"]


def test_npm_engine_warnings_stay_visible(tmp_path):
    argv = install.npm_argv("/usr/bin/npm", tmp_path, install.pinned_clis())
    assert "--loglevel=error" not in argv and "--loglevel=warn" in argv


def test_engine_ranges():
    assert install.engine_satisfied(">=22.0.0", "20.20.2") is False
    assert install.engine_satisfied(">=16", "20.20.2") is True
    assert install.engine_satisfied("^18 || ^20", "20.20.2") is None


def test_check_reports_a_pin_behind_latest(monkeypatch, capsys):
    pins = [install.PinnedCli("claude-code", "claude", "@anthropic-ai/claude-code", "2.1.197")]
    monkeypatch.setattr(install, "pinned_clis", lambda: pins)
    monkeypatch.setattr(install, "node_version", lambda: "20.20.2")
    answers = {
        ("@anthropic-ai/claude-code", "dist-tags.latest"): "2.1.332",
        ("@anthropic-ai/claude-code@2.1.332", "engines.node"): ">=22.0.0",
        ("@anthropic-ai/claude-code@2.1.197", "engines.node"): ">=18.0.0",
    }
    monkeypatch.setattr(install, "npm_view", lambda package, field: answers.get((package, field)))
    assert install.check_command() == 1
    out = capsys.readouterr().out
    assert "claude 2.1.197 pinned, npm latest 2.1.332: behind" in out
    assert "@anthropic-ai/claude-code@2.1.332 asks Node >=22.0.0" in out
    answers[("@anthropic-ai/claude-code", "dist-tags.latest")] = "2.1.197"
    assert install.check_command() == 0


def test_doctor_warns_of_credential_files_at_a_fixed_path():
    """claude reads /home/claude/.claude/remote/.api_key (strace, 2.1.197 and 2.1.332) whatever HOME says."""
    from harnesscheck.apps import doctor

    spec = get_spec("claude-code")
    assert doctor.check_fixed_credential_files(spec, present=lambda p: False) == []
    warn = doctor.check_fixed_credential_files(spec, present=lambda p: p.endswith(".api_key"))
    assert [c.status for c in warn] == [doctor.WARN] and "/home/claude/.claude/remote/.api_key" in warn[0].detail
    assert doctor.check_fixed_credential_files(get_spec("codex"), present=lambda p: True) == []
