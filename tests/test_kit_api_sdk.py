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


def test_the_collector_is_paused_for_the_sdk_and_settled_once_after_the_warm_ups(monkeypatch) -> None:
    import gc

    from harnesscheck.kit import plugin

    calls: list[str] = []
    monkeypatch.setattr(gc, "isenabled", lambda: True)
    monkeypatch.setattr(gc, "disable", lambda: calls.append("disable"))
    monkeypatch.setattr(gc, "enable", lambda: calls.append("enable"))
    monkeypatch.setattr(gc, "collect", lambda *a: calls.append("collect") or 0)
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    release = threading.Event()
    busy = threading.Thread(target=release.wait, daemon=True)
    busy.start()
    config = SimpleNamespace(stash={})
    plugin._pause_collector(config)
    config.stash[plugin._WARM_UPS] = [busy]
    item = SimpleNamespace(config=config)
    plugin.pytest_runtest_teardown(item)
    assert calls == ["disable"]  # a warm-up still runs: still paused
    release.set()
    busy.join()
    plugin.pytest_runtest_teardown(item)
    plugin.pytest_runtest_teardown(item)
    assert calls == ["disable", "collect", "freeze", "enable"]  # once, in this order


def test_nothing_is_paused_or_frozen_without_an_sdk_warm_up_or_with_the_collector_off(monkeypatch) -> None:
    import gc

    from harnesscheck.kit import plugin

    calls: list[str] = []
    for name in ("disable", "enable", "collect", "freeze"):
        monkeypatch.setattr(gc, name, lambda *a, name=name: calls.append(name))
    monkeypatch.setattr(gc, "isenabled", lambda: False)  # the user turned it off: left alone
    config = SimpleNamespace(stash={})
    plugin._pause_collector(config)
    plugin.pytest_runtest_teardown(SimpleNamespace(config=config))
    plugin.pytest_runtest_teardown(SimpleNamespace(config=SimpleNamespace(stash={plugin._WARM_UPS: []})))
    assert calls == []


def test_the_warm_ups_pause_the_collector_only_for_the_sdk(monkeypatch, tmp_path) -> None:
    from harnesscheck.kit import adapters, plugin
    from harnesscheck.paths import conformance_dir

    paused = []
    monkeypatch.setattr(plugin, "_pause_collector", lambda config: paused.append(True))
    monkeypatch.setattr(plugin, "_levels", lambda config: ["offline"])
    monkeypatch.setattr(adapters, "background_warm_ups", lambda cells, api_sdk: [
        adapters.WarmUp(name, lambda: None) for name in (["forkserver"] + (["api-sdk"] if api_sdk else []))])
    for api_sdk in (False, True):
        config = SimpleNamespace(args=[str(conformance_dir())], option=SimpleNamespace(dist="no"), stash={},
                                 workerinput={"workerid": "gw0", "harnesscheck_api_sdk_here": api_sdk})
        monkeypatch.setattr(plugin, "_backends", lambda config: [])
        plugin._warm_up_in_background(config)
        assert len(config.stash[plugin._WARM_UPS]) == 1 + api_sdk
        assert paused == [True] * api_sdk


def test_a_run_of_the_suite_ends_with_the_sdk_frozen_and_the_collector_on(tmp_path) -> None:
    """End to end, serial: after the first cells the SDK is out of the collector's sight."""
    probe = tmp_path / "hc_freeze_probe.py"
    probe.write_text(textwrap.dedent(
        """
        import gc, json, os
        def pytest_unconfigure(config):
            import anthropic
            tracked = {id(o) for o in gc.get_objects()}
            with open(os.environ["HC_PROBE_OUT"], "w") as fh:
                json.dump({"frozen": gc.get_freeze_count(), "sdk_tracked": id(anthropic.Anthropic) in tracked,
                           "enabled": gc.isenabled()}, fh)
        """
    ))
    from harnesscheck.kit.verify import child_env
    from harnesscheck.paths import conformance_dir

    out = tmp_path / "out.json"
    env = {**child_env(), "PYTHONPATH": str(tmp_path), "HC_PROBE_OUT": str(out)}
    proc = subprocess.run(
        [sys.executable, "-P", "-m", "pytest", str(conformance_dir()), "-p", "harnesscheck.kit.plugin", "-p", "hc_freeze_probe",
         "-p", "no:cacheprovider", "-q", "--rootdir", str(conformance_dir().parent), "-c", "/dev/null",
         "--backend", "api", "--level", "offline", "--basetemp", str(tmp_path / "bt")],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["frozen"] > 10_000 and not result["sdk_tracked"] and result["enabled"]
