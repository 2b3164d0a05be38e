"""The pytest plugin: options, markers without warnings, the header, live gating, usage errors.

Option handling is tested in this process (pytester, kit_support.run_inline); a child pytest only
where the subject is a boundary: no path given (the package's suite, the project's own rootdir),
xdist workers, a host project with its own options."""

from __future__ import annotations

import json

from kit_support import cells, preload_the_kit, run_inline, run_suite

pytest_plugins = ["pytester"]
preload_the_kit()


def test_markers_registered_and_header_names_backends(tmp_path, pytester):
    code, report, out = run_inline(
        pytester,
        "--backend",
        "fake",
        "--backend",
        "codex",
        "-m",
        "conformance",
        "-k",
        "registry_builds",
        "-W",
        "error::pytest.PytestUnknownMarkWarning",
        "--strict-markers",
        "-v",
    )
    assert code == 0, out
    assert "harnesscheck kit 0.1.0, catalog" in out and "levels: offline" in out
    assert "backend fake (api" in out and "backend codex (harness; cli offline: 0.171.0 (fixtures)" in out
    assert {c["backend"] for c in report["cells"]} == {"fake", "codex"}
    assert report["header"]["backends"][1]["cli_version"] == "0.171.0 (fixtures)"


def test_unknown_backend_is_a_usage_error_listing_known_ids(tmp_path, pytester):
    code, _, out = run_inline(pytester, "--backend", "nope", "-k", "registry_builds")
    assert code == 4, out
    assert "unknown backend 'nope'" in out and "claude-code" in out


def test_missing_capability_skips_with_reason_code(tmp_path, pytester):
    code, report, out = run_inline(pytester, "--backend", "fake", "-k", "vendor_cost")
    assert code == 0, out
    cell = cells(report, "fake")["usage.vendor-cost-reported"]
    assert (cell["outcome"], cell["reason"]) == ("skipped", "unsupported-by-backend")
    assert "cost_reporting" in cell["message"]


def test_kind_restricted_checks_have_no_cell_for_other_kinds(tmp_path, pytester):
    code, report, out = run_inline(pytester, "--backend", "fake", "-k", "no_secret_in_argv or registry_builds")
    assert code == 0, out
    assert set(cells(report, "fake")) == {"selection.registry-builds-backend"}


def test_a_cli_model_check_applies_to_the_api_backends_whose_model_is_a_cli_and_no_other():
    """`cli_model` checks (the CLI's env, argv, cwd) have cells for harness backends and for a
    reasoning-only api backend (it starts a CLI per turn), never for an api backend over HTTP;
    a harness-only check without it has none for the reasoning backend."""
    from harnesscheck.backends.registry import get_spec
    from harnesscheck.kit import plugin
    from harnesscheck.kit.catalog import load_catalog

    catalog = load_catalog()
    keys, harness_only = catalog["env.provider-keys-stripped"], catalog["selection.flag-values-validated"]
    assert keys.cli_model and not harness_only.cli_model
    reasoning, api, harness = get_spec("claude-code-reasoning"), get_spec("api"), get_spec("claude-code")
    assert [plugin._applies(keys, s) for s in (reasoning, api, harness)] == [True, False, True]
    assert [plugin._applies(harness_only, s) for s in (reasoning, api, harness)] == [False, False, True]


def test_live_level_never_runs_without_the_real_cli(tmp_path, pytester):
    code, report, out = run_inline(pytester, "--backend", "fake", "-m", "live")
    assert code in (0, 5), out  # nothing live for an in-process backend
    assert not report or all(c["level"] == "live" for c in report["cells"])
    code, report, out = run_inline(pytester, "--backend", "fake", "--level", "loopback", "-k", "registry_builds")
    assert code == 0, out
    cell = cells(report, "fake")["selection.registry-builds-backend"]
    assert (cell["outcome"], cell["reason"], cell["level"]) == ("skipped", "env-missing", "loopback")


def test_conformance_marker_selects_only_checks(tmp_path, pytester):
    code, report, out = run_inline(pytester, "--backend", "fake", "-m", "conformance and not live", "-k", "parity")
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

    from harnesscheck.backends.registry import BUILTIN_SPECS
    from harnesscheck.core.paths import conformance_dir
    from harnesscheck.kit import levels, plugin
    from harnesscheck.kit.scheduling import API_SDK_HERE

    started: list[list] = []
    done = threading.Semaphore(0)
    monkeypatch.setattr(
        levels,
        "background_warm_ups",
        lambda cells, api_sdk: [levels.WarmUp("forkserver", lambda: (started.append((sorted(s.id for s, _ in cells), api_sdk)), done.release()))],
    )  # noqa: E501
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
        plugin._warm_up_in_background(SimpleNamespace(args=[str(suite)], option=controller, stash={}, workerinput={"workerid": "gw0", API_SDK_HERE: here}))
    for _ in range(3):
        assert done.acquire(timeout=10)
    # the api SDK is imported where the offline api cells run: a serial run, or the worker they are pinned to
    assert started == [(["api", "codex"], True), (["api", "codex"], True), (["api", "codex"], False)]


def test_workers_learn_which_one_runs_the_pinned_api_cells(monkeypatch):
    from types import SimpleNamespace

    from harnesscheck.backends.registry import BUILTIN_SPECS
    from harnesscheck.core.paths import conformance_dir
    from harnesscheck.kit import plugin
    from harnesscheck.kit.scheduling import API_SDK_HERE, PIN_WORKER

    monkeypatch.setattr(plugin, "_levels", lambda config: ["offline"])
    suite = str(conformance_dir())

    def configured(worker: str, dist: str, args: list[str], backends: list[str]) -> dict:
        monkeypatch.setattr(plugin, "_backends", lambda config: [BUILTIN_SPECS[b] for b in backends])
        node = SimpleNamespace(
            config=SimpleNamespace(args=args, option=SimpleNamespace(dist=dist), stash={}), gateway=SimpleNamespace(id=worker), workerinput={}
        )
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
    assert scheduling.SuiteScheduling.__mro__[1].__name__ == "LoadScheduling"


def test_background_warm_ups_name_what_the_cells_need():
    from harnesscheck.backends.registry import BUILTIN_SPECS
    from harnesscheck.bridge.forkserver import get_forkserver
    from harnesscheck.kit.levels import background_warm_ups

    assert background_warm_ups([(BUILTIN_SPECS["fake"], "offline")]) == []
    assert background_warm_ups([(BUILTIN_SPECS["cursor"], "offline")]) == [("forkserver", get_forkserver)]
    (sdk,) = background_warm_ups([(BUILTIN_SPECS["api"], "offline")])
    assert sdk.name == "api-sdk" and sdk.run.args == (["anthropic"],)
    from harnesscheck.backends.registry import get_spec

    (both,) = background_warm_ups([(get_spec(f"api/{m}"), "offline") for m in ("responses", "anthropic_messages", "chat_completions")])
    assert both.run.args == (["anthropic", "openai"],), "each mode column's SDK, once"
    assert background_warm_ups([(BUILTIN_SPECS["api"], "live")]) == []  # may skip: no import paid for nothing
    assert background_warm_ups([(BUILTIN_SPECS["api"], "offline")], api_sdk=False) == []  # another worker's cells


def test_cells_run_scripted_then_harness_then_api_and_nothing_else_moves():
    from types import SimpleNamespace

    from harnesscheck.backends.registry import BUILTIN_SPECS
    from harnesscheck.kit import plugin
    from harnesscheck.kit.catalog import ATTR, CheckInfo

    def fn():
        f = lambda: None  # noqa: E731
        setattr(f, ATTR, CheckInfo(id="time.x", requirement="r", area="time"))
        return f

    def item(backend, n):
        return SimpleNamespace(n=n, function=fn(), callspec=SimpleNamespace(params={"but": (BUILTIN_SPECS[backend], "offline")}))

    items = [item("api", 0), item("codex", 1), SimpleNamespace(n=2), item("api", 3), item("fake", 4), item("cursor", 5)]
    items.sort(key=plugin._run_order)
    assert [i.n for i in items] == [2, 4, 1, 5, 0, 3]


def test_only_xdist_workers_spread_the_paced_cells_then_cells_still_run_by_kind():
    from types import SimpleNamespace

    from harnesscheck.backends.registry import BUILTIN_SPECS
    from harnesscheck.kit import plugin

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

    kit_run = {plugin._STATE: {"kit": True}}
    serial = SimpleNamespace(option=SimpleNamespace(dist="no"), stash=kit_run, getoption=lambda name: [])
    worker = SimpleNamespace(option=SimpleNamespace(dist="no"), workerinput={"workerid": "gw0"}, stash=kit_run, getoption=lambda name: [])
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


# ---------------------------------------------------------------------------------------
# A plugin that never breaks its host (doc/SPEC-kit.md, "The plugin in another project")

HOST_CONFTEST = """
import pytest

def pytest_addoption(parser):
    parser.addoption("--backend", default="sqlite", help="the host project's own database backend")
    parser.addoption("--level", type=int, default=1, help="the host project's own level")

@pytest.fixture
def backend(request):
    return request.config.getoption("--backend")
"""

HOST_TESTS = """
def test_its_own_options(backend, request):
    assert backend == "postgres" and request.config.getoption("--level") == 3

def test_no_fixture_from_harnesscheck(request):
    import pytest
    with pytest.raises(pytest.FixtureLookupError):
        request.getfixturevalue("but")
"""


def _host_pytest(host, *args: str):
    """pytest in the host project, every installed plugin autoloaded (harnesscheck's included)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "HARNESS"))}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=host,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_a_host_project_with_its_own_backend_option_stays_green_and_can_still_run_the_suite(tmp_path):
    import json

    host = tmp_path / "host"
    host.mkdir()
    (host / "conftest.py").write_text(HOST_CONFTEST)
    (host / "test_host.py").write_text(HOST_TESTS)
    code, out = _host_pytest(host, "-q", "--backend", "postgres", "--level", "3", "-W", "error", "--strict-markers")
    assert code == 0 and "2 passed" in out, out
    assert "harnesscheck" not in out, "no header, no note from the kit in a run that is not the suite's"
    code, out = _host_pytest(host, "--markers")
    assert code == 0 and "conformance:" not in out and "live:" not in out, "markers only in a run of the suite"
    code, out = _host_pytest(host, "--help")
    assert code == 0 and "the host project's own database backend" in out and "--hc-backend" in out
    assert "short for --hc-backend" not in out and "short for --hc-level" not in out, "the host owns the short names"
    for internal in ("--hc-bridge-template", "--hc-exit-fast", "--hc-progress"):
        assert internal not in out, f"{internal} is internal: hidden from --help"
    # the documented spelling runs the suite shipped in the package, in that same project
    report = tmp_path / "report.json"
    code, out = _host_pytest(
        host,
        "-q",
        "-m",
        "conformance",
        "--hc-backend",
        "fake",
        "--hc-level",
        "offline",
        "--hc-check",
        "selection.registry-builds-backend",
        "--hc-report",
        str(report),
    )
    assert code == 0, out
    assert [(c["check"], c["outcome"]) for c in json.loads(report.read_text())["cells"]] == [("selection.registry-builds-backend", "passed")]


def test_short_names_work_where_the_project_does_not_own_them(tmp_path):
    """This project defines no --backend: the README's spelling is the kit's (as run_suite uses it)."""
    code, report, out = run_suite(tmp_path, "--backend", "fake", "--level", "offline", "-k", "registry_builds", files=())
    assert code == 0, out
    assert [c["check"] for c in report["cells"]] == ["selection.registry-builds-backend"]
    code, _, out = run_suite(tmp_path, "--help", files=())
    assert "short for --hc-backend" in out and "--hc-exit-fast" not in out and "--hc-bridge-template" not in out


def test_a_project_whose_venv_holds_harnesscheck_does_not_collect_the_suite(tmp_path):
    """A run of a folder above the suite counts as the suite's only if pytest recurses into it."""
    from pathlib import Path
    from types import SimpleNamespace

    from harnesscheck.kit import plugin

    suite = tmp_path / "proj" / ".venv" / "lib" / "site-packages" / "harnesscheck" / "_data" / "conformance"
    suite.mkdir(parents=True)
    (tmp_path / "proj" / "venv2").mkdir()
    (tmp_path / "proj" / "venv2" / "pyvenv.cfg").write_text("")
    other = tmp_path / "proj" / "venv2" / "conformance"
    config = SimpleNamespace(getini=lambda name: [".*", "venv", "node_modules"], getoption=lambda name, default=None: default)
    assert not plugin._recursed_into(config, tmp_path / "proj", suite)  # through .venv
    assert not plugin._recursed_into(config, tmp_path / "proj", other)  # through a virtualenv
    assert plugin._recursed_into(config, tmp_path, tmp_path / "src" / "conformance")
    assert Path(plugin.__file__).name == "plugin.py"


def test_a_foreign_parameter_named_but_is_not_a_cell():
    from types import SimpleNamespace

    from harnesscheck.kit import plugin

    foreign = SimpleNamespace(function=lambda but: None, callspec=SimpleNamespace(params={"but": ("x", "y")}))
    assert plugin._cell_of(foreign) is None


def test_hc_check_selects_the_cells_of_one_check_and_refuses_an_unknown_id(tmp_path, pytester):
    code, report, out = run_inline(
        pytester, "--hc-backend", "fake", "--hc-backend", "codex", "--hc-check", "parity.outcome-schema", "--hc-check", "selection.registry-builds-backend"
    )
    assert code == 0, out
    assert sorted((c["check"], c["backend"]) for c in report["cells"]) == [
        ("parity.outcome-schema", "codex"),
        ("parity.outcome-schema", "fake"),
        ("selection.registry-builds-backend", "codex"),
        ("selection.registry-builds-backend", "fake"),
    ]
    code, _, out = run_inline(pytester, "--hc-backend", "fake", "--hc-check", "scope.no-such-check")
    assert code == 4 and "no such check: scope.no-such-check" in out, out


def test_native_junitxml_carries_each_cells_check_id_backend_and_level(tmp_path, pytester):
    """Serial in this process; with xdist workers (the properties travel on their reports) a child pytest."""
    from xml.etree import ElementTree as ET

    for jobs in ("0", "2"):
        xml = tmp_path / f"junit-{jobs}.xml"
        args = ("--hc-backend", "fake", "-k", "parity or vendor_cost", "-n", jobs, "--junitxml", str(xml), "-o", "junit_family=xunit1")
        code, report, out = run_inline(pytester, *args) if jobs == "0" else run_suite(tmp_path, *args)
        assert code == 0, out
        root = ET.parse(xml).getroot()
        cases = {}
        for case in root.iter("testcase"):
            props = {p.get("name"): p.get("value") for p in case.iter("property")}
            cases[props["check_id"]] = (props["backend"], props["level"], case.find("skipped") is not None)
        assert cases == {
            "parity.outcome-schema": ("fake", "offline", False),
            "parity.refusal-codes-match-dispatch": ("fake", "offline", False),
            "usage.vendor-cost-reported": ("fake", "offline", True),
        }, jobs
        suite_props = {p.get("name"): p.get("value") for p in root.find("testsuite").find("properties").iter("property")}
        assert suite_props["harnesscheck_catalog_hash"] == report["header"]["catalog_hash"]
        assert "harnesscheck_cell" not in xml.read_text(), "the cell record is not written as a property"


def test_live_without_a_named_backend_says_nothing_was_verified_and_require_run_fails_it(tmp_path, pytester):
    code, report, out = run_inline(pytester, "-m", "live")
    assert code == 0, out
    assert report["cells"] and {(c["outcome"], c["reason"]) for c in report["cells"]} == {("skipped", "budget")}
    assert "harnesscheck: nothing was verified: all" in out and "--hc-backend" in out
    code, _, out = run_inline(pytester, "-m", "live", "--hc-require-run")
    assert code == 1 and "--hc-require-run: a run that verified nothing fails" in out, out
    # every smoke skipped for a named backend (no live level for an in-process one): said, and failed on demand
    code, report, out = run_inline(pytester, "-m", "live", "--hc-backend", "fake", "--hc-require-run")
    assert code == 1 and {c["reason"] for c in report["cells"]} == {"env-missing"}, out
    assert "nothing was verified" in out
    # a run that verified something is unaffected
    code, _, out = run_inline(pytester, "--hc-backend", "fake", "-k", "registry_builds", "--hc-require-run")
    assert code == 0 and "nothing was verified" not in out, out


def test_hc_cells_runs_only_the_named_checks_of_the_named_backends(tmp_path, pytester):
    """--hc-cells FILE: backend id -> check ids (the one child run of the CLI mutants); a backend
    the file does not name runs all its selected cells; a typo is a usage error, never a quiet full run."""
    cells_file = tmp_path / "cells.json"
    cells_file.write_text(json.dumps({"codex": ["parity.outcome-schema"]}))
    code, report, out = run_inline(pytester, "--hc-backend", "fake", "--hc-backend", "codex", "--hc-cells", str(cells_file), "-k", "parity or registry_builds")
    assert code == 0, out
    assert sorted((c["backend"], c["check"]) for c in report["cells"]) == [
        ("codex", "parity.outcome-schema"),
        ("fake", "parity.outcome-schema"),
        ("fake", "parity.refusal-codes-match-dispatch"),
        ("fake", "selection.registry-builds-backend"),
    ]
    for content, why in (
        ({"nope": ["parity.outcome-schema"]}, "backends this run does not select: nope"),
        ({"codex": ["parity.no-such-check"]}, "no such check: parity.no-such-check"),
        (["codex"], "not a JSON object"),
    ):
        cells_file.write_text(json.dumps(content))
        code, _, out = run_inline(pytester, "--hc-backend", "fake", "--hc-backend", "codex", "--hc-cells", str(cells_file), "-k", "parity")
        assert code == 4 and why in out, out
