"""The kit never reaches the developer's real credential stores below the live level."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harnesscheck.backends.registry import get_spec
from harnesscheck.kit.levels import adapter_for


@pytest.mark.parametrize(("backend", "store"), [("claude-code", ".claude/.credentials.json"), ("codex", ".codex/auth.json")])
def test_offline_runs_never_link_the_real_login(backend: str, store: str, tmp_path: Path, monkeypatch) -> None:
    real_home = tmp_path / "real-home"
    cred = real_home / store
    cred.parent.mkdir(parents=True)
    cred.write_text('{"tokens": {"access_token": "canary-login-%s"}, "auth_mode": "chatgpt"}' % os.urandom(6).hex())
    monkeypatch.setenv("HOME", str(real_home))
    before = cred.read_bytes(), cred.stat().st_mtime_ns

    but = adapter_for(get_spec(backend), "offline", tmp_path / "kit")
    run = but.run("success")

    assert run.outcome.ok, run.outcome.message
    links = [p for p in (tmp_path / "kit").rglob("*") if p.is_symlink() and Path(os.readlink(p)) == cred]
    assert links == [], f"{backend} linked the real login into a kit run: {links}"
    for child in run.children:
        assert child["env"].get("HOME") != str(real_home)
        seen = repr(child.get("config_dirs", {}))
        assert str(real_home) not in seen, f"{backend}'s CLI saw the real login: {seen}"
    assert (cred.read_bytes(), cred.stat().st_mtime_ns) == before


def test_overlapping_runs_restore_the_environment_exactly() -> None:
    """Concurrent sessions patch os.environ in overlapping windows; afterwards it is as before."""
    import threading

    from harnesscheck.kit.session import patched_environ

    before = dict(os.environ)
    inside, release = threading.Barrier(2), threading.Event()

    def run(tag: str) -> None:
        with patched_environ({"HOME": f"/scratch/{tag}", f"CANARY_{tag}": "x"}):
            inside.wait(timeout=30)
            release.wait(timeout=30)

    threads = [threading.Thread(target=run, args=(t,)) for t in ("A", "B")]
    for t in threads:
        t.start()
    release.set()
    for t in threads:
        t.join(timeout=60)
    assert dict(os.environ) == before


def test_nested_patches_restore_in_order() -> None:
    """A nested patch (the api adapter's own key inside a run's canaries) undoes only itself."""
    from harnesscheck.kit.session import patched_environ

    before = dict(os.environ)
    with patched_environ({"HC_TEST_KEY": "outer"}):
        with patched_environ({"HC_TEST_KEY": "inner"}):
            assert os.environ["HC_TEST_KEY"] == "inner"
        assert os.environ["HC_TEST_KEY"] == "outer"
    assert dict(os.environ) == before
