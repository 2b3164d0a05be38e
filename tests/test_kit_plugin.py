"""The pytest plugin: options, markers without warnings, the header, live gating, usage errors."""

from __future__ import annotations

from kit_support import cells, run_suite


def test_markers_registered_and_header_names_backends(tmp_path):
    code, report, out = run_suite(tmp_path, "--backend", "fake", "--backend", "codex", "-m", "conformance",
                                  "-k", "registry_builds", "-W", "error::pytest.PytestUnknownMarkWarning", "--strict-markers", "-v")
    assert code == 0, out
    assert "harnesscheck kit 0.1.0, catalog" in out and "levels: offline" in out
    assert "backend fake (api" in out and "backend codex (harness; cli offline: 0.171.0 (fixtures)" in out
    assert {c["backend"] for c in report["cells"]} == {"fake", "codex"}
    assert report["header"]["backends"][1]["cli_version"] == "0.171.0 (fixtures)"


def test_unknown_backend_is_a_usage_error_listing_known_ids(tmp_path):
    code, _, out = run_suite(tmp_path, "--backend", "nope", "-k", "registry_builds")
    assert code == 4, out
    assert "unknown backend 'nope'" in out and "claude-code" in out


def test_missing_capability_skips_with_reason_code(tmp_path):
    code, report, out = run_suite(tmp_path, "--backend", "fake", "-k", "vendor_cost")
    assert code == 0, out
    cell = cells(report, "fake")["usage.vendor-cost-reported"]
    assert (cell["outcome"], cell["reason"]) == ("skipped", "unsupported-by-backend")
    assert "cost_reporting" in cell["message"]


def test_kind_restricted_checks_have_no_cell_for_other_kinds(tmp_path):
    code, report, out = run_suite(tmp_path, "--backend", "fake", "-k", "no_secret_in_argv or registry_builds")
    assert code == 0, out
    assert set(cells(report, "fake")) == {"selection.registry-builds-backend"}


def test_live_level_never_runs_without_the_real_cli(tmp_path):
    code, report, out = run_suite(tmp_path, "--backend", "fake", "-m", "live")
    assert code in (0, 5), out  # nothing live for an in-process backend
    assert not report or all(c["level"] == "live" for c in report["cells"])
    code, report, out = run_suite(tmp_path, "--backend", "fake", "--level", "loopback", "-k", "registry_builds")
    assert code == 0, out
    cell = cells(report, "fake")["selection.registry-builds-backend"]
    assert (cell["outcome"], cell["reason"], cell["level"]) == ("skipped", "env-missing", "loopback")


def test_conformance_marker_selects_only_checks(tmp_path):
    code, report, out = run_suite(tmp_path, "--backend", "fake", "-m", "conformance and not live", "-k", "parity")
    assert code == 0, out
    assert {c["check"] for c in report["cells"]} == {"parity.outcome-schema", "parity.refusal-codes-match-dispatch"}


def test_suite_is_collected_from_the_package_when_no_path_is_given(tmp_path):
    code, report, out = run_suite(tmp_path, "--backend", "fake", "-k", "registry_builds", files=())
    assert code == 0, out
    assert [c["check"] for c in report["cells"]] == ["selection.registry-builds-backend"]


def test_a_run_of_the_suite_alone_starts_its_one_time_start_ups_when_collection_ends(monkeypatch, tmp_path):
    """Only a run whose every path is inside the suite starts them early (in the background)."""
    import threading
    from types import SimpleNamespace

    from harnesscheck.kit import adapters, plugin
    from harnesscheck.paths import conformance_dir
    from harnesscheck.kit.scheduling import API_SDK_HERE
    from harnesscheck.registry import BUILTIN_SPECS

    started: list[list] = []
    done = threading.Semaphore(0)
    monkeypatch.setattr(adapters, "background_warm_ups",
                        lambda cells, api_sdk: [adapters.WarmUp("forkserver", lambda: (started.append((sorted(s.id for s, _ in cells), api_sdk)), done.release()))])
    monkeypatch.setattr(plugin, "_backends", lambda config: [BUILTIN_SPECS["api"], BUILTIN_SPECS["codex"]])
    monkeypatch.setattr(plugin, "_levels", lambda config: ["offline"])
    suite = conformance_dir()
    serial, controller = SimpleNamespace(dist="no"), SimpleNamespace(dist="load", tx=["popen"] * 2)
    for args in ([str(suite), str(tmp_path)], [str(tmp_path)], []):  # mixed with other tests, or none of it
        plugin._warm_up_in_background(SimpleNamespace(args=args, option=serial, stash={}))
    plugin._warm_up_in_background(SimpleNamespace(args=[str(suite)], option=controller, stash={}))  # runs no cell itself
    assert not done.acquire(timeout=0.2) and started == []
    whole_and_one = [str(suite / "test_time.py") + "::test_timeout_truncates", str(suite)]
    plugin._warm_up_in_background(SimpleNamespace(args=whole_and_one, option=serial, stash={}))
    for here in (True, False):  # xdist workers told (plugin.pytest_configure_node) where the api cells run
        plugin._warm_up_in_background(SimpleNamespace(args=[str(suite)], option=controller, stash={},
                                                      workerinput={"workerid": "gw0", API_SDK_HERE: here}))
    for _ in range(3):
        assert done.acquire(timeout=10)
    # the api SDK is imported where the offline api cells run: a serial run, or the worker they are pinned to
    assert started == [(["api", "codex"], True), (["api", "codex"], True), (["api", "codex"], False)]


def test_workers_learn_which_one_runs_the_pinned_api_cells(monkeypatch):
    from types import SimpleNamespace

    from harnesscheck.kit import plugin
    from harnesscheck.kit.scheduling import API_SDK_HERE, PIN_WORKER
    from harnesscheck.paths import conformance_dir
    from harnesscheck.registry import BUILTIN_SPECS

    monkeypatch.setattr(plugin, "_levels", lambda config: ["offline"])
    suite = str(conformance_dir())

    def configured(worker: str, dist: str, args: list[str], backends: list[str]) -> dict:
        monkeypatch.setattr(plugin, "_backends", lambda config: [BUILTIN_SPECS[b] for b in backends])
        node = SimpleNamespace(config=SimpleNamespace(args=args, option=SimpleNamespace(dist=dist), stash={}),
                               gateway=SimpleNamespace(id=worker), workerinput={})
        plugin.pytest_configure_node(node)
        return node.workerinput

    assert configured(PIN_WORKER, "load", [suite], ["api", "codex"]) == {API_SDK_HERE: True}
    assert configured("gw1", "load", [suite], ["api", "codex"]) == {API_SDK_HERE: False}
    # nothing pinned, every worker may warm up: another distribution, other tests mixed in, no api cells
    assert configured("gw1", "loadfile", [suite], ["api", "codex"]) == {}
    assert configured("gw1", "load", [suite, "tests"], ["api", "codex"]) == {}
    assert configured("gw1", "load", [suite], ["codex"]) == {}
    # an xdist whose load scheduler lacks what the pinning builds on keeps its own scheduler
    from harnesscheck.kit import scheduling

    monkeypatch.setattr(scheduling, "supported", lambda: False)
    assert configured(PIN_WORKER, "load", [suite], ["api", "codex"]) == {}
    assert plugin.pytest_xdist_make_scheduler(SimpleNamespace(args=[suite], option=SimpleNamespace(dist="load")), None) is None
    assert scheduling.PinnedLoadScheduling.__mro__[1].__name__ == "LoadScheduling"


def test_background_warm_ups_name_what_the_cells_need():
    from harnesscheck.bridge.forkserver import get_forkserver
    from harnesscheck.kit.adapters import background_warm_ups
    from harnesscheck.registry import BUILTIN_SPECS

    assert background_warm_ups([(BUILTIN_SPECS["fake"], "offline")]) == []
    assert background_warm_ups([(BUILTIN_SPECS["cursor"], "offline")]) == [("forkserver", get_forkserver)]
    (sdk,) = background_warm_ups([(BUILTIN_SPECS["api"], "offline")])
    assert sdk.name == "api-sdk" and sdk.run.args == ("anthropic",)
    assert background_warm_ups([(BUILTIN_SPECS["api"], "live")]) == []  # may skip: no import paid for nothing
    assert background_warm_ups([(BUILTIN_SPECS["api"], "offline")], api_sdk=False) == []  # another worker's cells


def test_cells_run_scripted_then_harness_then_api_and_nothing_else_moves():
    from types import SimpleNamespace

    from harnesscheck.kit import plugin
    from harnesscheck.registry import BUILTIN_SPECS

    def item(backend, n):
        return SimpleNamespace(n=n, callspec=SimpleNamespace(params={"but": (BUILTIN_SPECS[backend], "offline")}))

    items = [item("api", 0), item("codex", 1), SimpleNamespace(n=2), item("api", 3), item("fake", 4), item("cursor", 5)]
    items.sort(key=plugin._run_order)
    assert [i.n for i in items] == [2, 4, 1, 5, 0, 3]


def test_only_xdist_workers_spread_the_paced_cells_then_cells_still_run_by_kind():
    from types import SimpleNamespace

    from harnesscheck.kit import plugin
    from harnesscheck.registry import BUILTIN_SPECS

    def fn(paced):
        from harnesscheck.kit.catalog import ATTR, CheckInfo

        f = lambda: None  # noqa: E731
        setattr(f, ATTR, CheckInfo(id="time.x", requirement="r", area="time", paced=paced))
        return f

    def item(backend, n, paced=False):
        return SimpleNamespace(n=n, function=fn(paced), callspec=SimpleNamespace(params={"but": (BUILTIN_SPECS[backend], "offline")}))

    def order(config):
        items = [item("codex", 0, True), item("codex", 1, True), *[item("codex", n) for n in range(2, 8)], item("fake", 8, True), item("fake", 9)]
        config.hook = SimpleNamespace(pytest_deselected=lambda items: None)
        plugin.pytest_collection_modifyitems(config, items)
        return [i.n for i in items]

    serial = SimpleNamespace(option=SimpleNamespace(dist="no"))
    worker = SimpleNamespace(option=SimpleNamespace(dist="no"), workerinput={"workerid": "gw0"})
    assert order(serial) == [8, 9, 0, 1, 2, 3, 4, 5, 6, 7]
    # spread over the run, then grouped by kind: harness, api, then the in-process cells
    assert order(worker) == [2, 3, 0, 4, 5, 1, 6, 7, 8, 9]


def test_the_xdist_controller_reads_the_catalog_without_rewriting_its_asserts():
    import importlib
    import sys

    from _pytest.assertion.rewrite import AssertionRewritingHook

    from harnesscheck.kit import plugin

    before = list(sys.meta_path)
    with plugin._plain_imports(True):
        assert not any(isinstance(f, AssertionRewritingHook) for f in sys.meta_path)
        importlib.invalidate_caches()
    assert sys.meta_path == before
    with plugin._plain_imports(False):
        assert sys.meta_path == before
