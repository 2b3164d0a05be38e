"""A scope root at or above the temp dir (root=/tmp) still works: the run dir and the CLI's
scratch cwd go to a private temp dir outside the root; a root containing every scratch
location is refused up front with a usage error (backends/_harness.py scratch_dir)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from harnesscheck.backends import _harness
from harnesscheck.backends.codex import CodexTransport
from harnesscheck.backends.registry import get_spec
from harnesscheck.core.config import Settings
from harnesscheck.core.contracts import AgentSessionRequest, ConfigError
from harnesscheck.core.scope import ToolScope
from harnesscheck.testing.fakes import install_fake_cli


def _session(tmp_path, root: Path, monkeypatch, tmpdir: Path):
    fake = install_fake_cli("codex", "success", tmp_path / "bin")
    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"), "TMPDIR": str(tmpdir)}
    transport = CodexTransport(get_spec("codex"), Settings(), cli_path=fake.path, parent_env=env)
    request = AgentSessionRequest(prompt="hi", scope=ToolScope(root=root), timeout_s=60.0)  # no run_dir: a temp one
    return transport.run_session(request), fake


def test_a_root_holding_the_temp_dir_works(tmp_path, monkeypatch):
    root = tmp_path / "tmp-like"  # plays /tmp: TMPDIR is inside the scope root
    (root / "t").mkdir(parents=True)
    out, fake = _session(tmp_path, root, monkeypatch, root / "t")
    assert out.ok, out.message
    cwd = Path(fake.last()["cwd"]).resolve()
    assert not cwd.is_relative_to(root.resolve()), f"the CLI ran in {cwd}, inside the scope root"
    assert not list((root / "t").iterdir()), "a run dir or scratch dir was made inside the scope root"


def test_a_root_holding_every_scratch_location_is_refused_up_front(tmp_path, monkeypatch):
    monkeypatch.setattr(_harness, "SCRATCH_BASES", (str(tmp_path / "t"),))
    (tmp_path / "t").mkdir()
    with pytest.raises(ConfigError) as err:
        _session(tmp_path, tmp_path, monkeypatch, tmp_path / "t")
    assert "contains every scratch location" in str(err.value) and "narrower root" in err.value.fix
    assert not (tmp_path / "bin" / "codex.record.jsonl").exists(), "the CLI was started"
