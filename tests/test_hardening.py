"""What stays outside the sandbox hardens itself (issue 30): `verify` and the kit's pytest
processes are non-dumpable hosts before their first CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from harnesscheck import process


def test_verify_hardens_itself_before_anything_runs(monkeypatch, tmp_path):
    from harnesscheck.kit import verify

    called = []
    monkeypatch.setattr(process, "harden_host", lambda: called.append(True))
    code = verify.verify_command(["no-such-backend"], ["offline"], tmp_path / "r", None, None, ratchet=None)
    assert called and code != 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_GET_DUMPABLE is Linux")
def test_a_kit_pytest_process_is_not_dumpable(tmp_path):
    (tmp_path / "test_probe.py").write_text(textwrap.dedent("""
        import ctypes
        def test_probe():
            assert ctypes.CDLL(None).prctl(3, 0, 0, 0, 0) == 0, "dumpable"
    """))
    env = {k: v for k, v in os.environ.items() if k != process.HOST_DUMPABLE_VAR}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
                           "--hc-backend", "fake", str(tmp_path / "test_probe.py")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
