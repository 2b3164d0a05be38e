"""The api SDK as the kit's warm-up loads it (kit/plugin.py): the cyclic collector is off
while it is imported in the background, and once every warm-up is done, between two cells,
one full collection runs, the heap is frozen and the collector is on again, so no later
collection walks the SDK."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from types import SimpleNamespace


def _fake_gc(monkeypatch, enabled: bool) -> list[str]:
    import gc

    calls: list[str] = []
    monkeypatch.setattr(gc, "isenabled", lambda: enabled)
    for name in ("disable", "enable", "collect", "freeze"):
        monkeypatch.setattr(gc, name, lambda *a, name=name: calls.append(name))
    return calls


def _protocol(item) -> None:
    """The plugin's pytest_runtest_protocol wrapper around a protocol that does nothing."""
    from harnesscheck.kit import plugin

    wrapper = plugin.pytest_runtest_protocol(item, None)
    next(wrapper)
    try:
        wrapper.send(None)
    except StopIteration:
        pass


def test_the_collector_is_paused_for_the_sdk_import_and_settled_once_after_it(monkeypatch) -> None:
    from harnesscheck.kit import plugin

    calls = _fake_gc(monkeypatch, enabled=True)
    release = threading.Event()
    sdk_import = threading.Thread(target=release.wait, daemon=True)
    sdk_import.start()
    config = SimpleNamespace(stash={})
    plugin._pause_collector(config, sdk_import)
    item = SimpleNamespace(config=config)
    _protocol(item)
    assert calls == ["disable"]  # the import still runs: still paused
    release.set()
    sdk_import.join()
    _protocol(item)
    _protocol(item)
    plugin._resume_collector(config)
    assert calls == ["disable", "collect", "freeze", "enable"]  # once, in this order, after the cell's protocol


def test_a_session_ending_paused_turns_the_collector_on_again(monkeypatch) -> None:
    from harnesscheck.kit import plugin

    calls = _fake_gc(monkeypatch, enabled=True)
    config = SimpleNamespace(stash={})
    plugin._pause_collector(config, threading.Thread(target=lambda: None))  # never started: never "done"
    plugin._resume_collector(config)
    plugin._resume_collector(config)
    assert calls == ["disable", "enable"]


def test_nothing_is_paused_or_frozen_with_the_collector_off_or_without_an_sdk_import(monkeypatch) -> None:
    from harnesscheck.kit import plugin

    calls = _fake_gc(monkeypatch, enabled=False)  # the user turned it off: left alone
    config = SimpleNamespace(stash={})
    plugin._pause_collector(config, threading.Thread(target=lambda: None))
    _protocol(SimpleNamespace(config=config))
    plugin._resume_collector(config)
    _protocol(SimpleNamespace(config=SimpleNamespace(stash={})))  # no SDK warm-up (a mixed run, the controller)
    assert calls == []


def test_a_cells_fixture_values_are_not_frozen_with_the_heap(tmp_path) -> None:
    """The settle comes after the cell's protocol has dropped its fixture values: a value in a
    reference cycle is collected (its finalizer runs), not frozen for the process's life."""
    tests = tmp_path / "test_cycle.py"
    tests.write_text(
        textwrap.dedent(
            """
        import gc, json, os, threading
        import pytest
        from harnesscheck.kit import plugin

        FINALIZED = []

        class Held:
            def __init__(self):
                self.me = self  # a cycle: only the collector frees it
            def __del__(self):
                FINALIZED.append("held")

        @pytest.fixture
        def held():
            return Held()

        def test_pause_and_hold(held, request):
            plugin._pause_collector(request.config, threading.Thread(target=lambda: None))
            request.config.stash[plugin._PAUSED].start()  # "the import", done at once

        def test_after():
            with open(os.environ["HC_PROBE_OUT"], "w") as fh:
                json.dump({"finalized": FINALIZED, "enabled": gc.isenabled()}, fh)
        """
        )
    )
    out = tmp_path / "out.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "harnesscheck.kit.plugin",
            "-p",
            "no:cacheprovider",
            "-c",
            "/dev/null",
            "--rootdir",
            str(tmp_path),
            str(tests),
        ],
        env={**__import__("os").environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "HC_PROBE_OUT": str(out)},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert json.loads(out.read_text()) == {"finalized": ["held"], "enabled": True}


def test_the_warm_ups_pause_the_collector_only_for_the_sdk(monkeypatch, tmp_path) -> None:
    from harnesscheck.core.paths import conformance_dir
    from harnesscheck.kit import levels, plugin

    paused = []
    monkeypatch.setattr(plugin, "_pause_collector", lambda config, thread: paused.append(thread.name))
    monkeypatch.setattr(plugin, "_levels", lambda config: ["offline"])
    monkeypatch.setattr(plugin, "_backends", lambda config: [])
    monkeypatch.setattr(
        levels,
        "background_warm_ups",
        lambda cells, api_sdk: [levels.WarmUp(name, lambda: None) for name in (["forkserver"] + (["api-sdk"] if api_sdk else []))],
    )
    for api_sdk in (False, True):
        config = SimpleNamespace(
            args=[str(conformance_dir())], option=SimpleNamespace(dist="no"), stash={}, workerinput={"workerid": "gw0", "harnesscheck_api_sdk_here": api_sdk}
        )
        plugin._warm_up_in_background(config)
    assert paused == ["harnesscheck-warm-up"]  # once: the SDK's, not the forkserver's


def test_a_run_of_the_suite_ends_with_the_sdk_frozen_and_the_collector_on(tmp_path) -> None:
    """End to end, serial: after the first cells the SDK is out of the collector's sight."""
    probe = tmp_path / "hc_freeze_probe.py"
    probe.write_text(
        textwrap.dedent(
            """
        import gc, json, os
        def pytest_unconfigure(config):
            import anthropic
            tracked = {id(o) for o in gc.get_objects()}
            with open(os.environ["HC_PROBE_OUT"], "w") as fh:
                json.dump({"frozen": gc.get_freeze_count(), "sdk_tracked": id(anthropic.Anthropic) in tracked,
                           "enabled": gc.isenabled()}, fh)
        """
        )
    )
    from harnesscheck.core.paths import conformance_dir
    from harnesscheck.kit.verify import child_env

    out = tmp_path / "out.json"
    env = {**child_env(), "PYTHONPATH": str(tmp_path), "HC_PROBE_OUT": str(out)}
    proc = subprocess.run(
        [
            sys.executable,
            "-P",
            "-m",
            "pytest",
            str(conformance_dir()),
            "-p",
            "harnesscheck.kit.plugin",
            "-p",
            "hc_freeze_probe",
            "-p",
            "no:cacheprovider",
            "-q",
            "--rootdir",
            str(conformance_dir().parent),
            "-c",
            "/dev/null",
            "--backend",
            "api",
            "--level",
            "offline",
            "--basetemp",
            str(tmp_path / "bt"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["frozen"] > 10_000 and not result["sdk_tracked"] and result["enabled"]
