"""The pytest plugin (entry point pytest11 = harnesscheck): backends × levels × checks.

Options (all namespaced ``--hc-*``; see doc/SPEC-kit.md, "The plugin in another project")::

    --hc-backend ID|module:factory  (repeatable; default: every registered backend; `api` is its
                                    three mode columns, `api/<api_mode>` one of them)
    --hc-level offline|loopback|live (repeatable; default: offline, plus loopback where a
                                    selected backend's real CLI is installed; live with -m live)
    --hc-check ID                   only the cells of this check (repeatable)
    --hc-cells FILE.json            only these cells: {backend id: [check ids]}; a backend the
                                    file does not name runs all its cells
    --hc-report FILE.json           versioned JSON report of every cell
    --hc-baseline FILE|none         known failures (JSON or TOML), strict both ways; default: the
                                    built-in backends' conformance/baseline.json
    --hc-write-baseline FILE        write the current failures as a baseline
    --hc-ratchet MATRIX.json        fail on a cell that passed in this committed matrix and
                                    does not pass now (kit/matrix.py regressions)
    --hc-require-run                a run in which no cell ran (every one skipped) fails

``--backend`` and ``--level`` (the README's spelling) are short aliases of ``--hc-backend`` and
``--hc-level``, added only when no other plugin or initial conftest owns the name, so installing
harnesscheck never breaks another project's own ``--backend``. JUnit XML: pytest's own
``--junitxml``; each cell's testcase carries the properties check_id, backend and level.

With --hc-backend and no path arguments, the suite shipped in the package
(harnesscheck.core.paths.conformance_dir()) is collected, so an installed wheel runs it with
`pytest -m conformance --hc-backend mine` and no copied test files. In a run that neither names
a backend nor collects the suite, the plugin registers no marker and no fixture and changes
nothing.

Over 800 lines for a reason: pytest's hooks for options, collection, cell parametrization,
reporting and the ratchet share one config stash and run in one order pytest fixes;
scheduling.py, progress.py and summary.py already hold what stands alone. The seam:
options/collection vs. reporting.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading

import pytest

_CELLS = pytest.StashKey[list]()
_STATE = pytest.StashKey[dict]()
#: the cell record rides on the TestReport as this attribute (xdist carries a report's extra
#: attributes to the controller; pytest's junitxml writes only user_properties)
CELL_ATTR = "harnesscheck_cell"

#: Short spellings (the README documents --backend and --level; --baseline and
#: --write-baseline are the kit's earlier names), added only where nobody else owns them
#: (pytest_load_initial_conftests): name -> the namespaced option it stands for.
SHORT_ALIASES = {"--backend": "--hc-backend", "--level": "--hc-level", "--baseline": "--hc-baseline", "--write-baseline": "--hc-write-baseline"}

_LEVEL_CHOICES = ["offline", "loopback", "live"]
_ALIAS_ATTRS = {
    "--hc-backend": {"action": "append", "default": [], "dest": "hc_backend", "metavar": "ID"},
    "--hc-level": {"action": "append", "default": [], "dest": "hc_level", "choices": _LEVEL_CHOICES},
    "--hc-baseline": {"default": None, "dest": "hc_baseline", "metavar": "FILE"},
    "--hc-write-baseline": {"default": None, "dest": "hc_write_baseline", "metavar": "FILE"},
}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("harnesscheck", "harnesscheck conformance kit")
    helps = {
        "--hc-backend": "backend under test: a registered id or module:factory (repeatable)",
        "--hc-level": "verification level (repeatable; default offline, plus loopback where a selected backend's real CLI is installed, or live under -m live)",
        "--hc-baseline": "baseline of known failures (JSON or TOML); default: the built-in backends' conformance/baseline.json; 'none' disables",
        "--hc-write-baseline": "write the failing cells as a baseline",
    }
    for name, attrs in _ALIAS_ATTRS.items():
        group.addoption(name, **attrs, help=helps[name])
    group.addoption("--hc-check", action="append", default=[], metavar="ID", dest="hc_check", help="run only the cells of this check id (repeatable)")
    group.addoption(
        "--hc-cells",
        default=None,
        metavar="FILE",
        dest="hc_cells",
        help="only these cells: a JSON object backend id -> [check ids] (a backend it does not name runs all its cells)",
    )
    group.addoption("--hc-report", default=None, metavar="FILE", help="write the JSON conformance report here")
    group.addoption(
        "--hc-ratchet",
        default=None,
        metavar="MATRIX",
        dest="hc_ratchet",
        help="a committed matrix (backends.json): a cell that passed there and does not pass now fails the run",
    )
    group.addoption(
        "--hc-require-run",
        action="store_true",
        default=False,
        dest="hc_require_run",
        help="fail the run when no cell ran (every one skipped, or none selected), e.g. in CI",
    )
    # Internal (set by harnesscheck verify for its child), hidden from --help:
    # --hc-bridge-template SOCKET: a bridge forkserver template already running; this run's
    # forkservers are forked from it. --hc-exit-fast: exit without the interpreter's module
    # teardown. --hc-progress FILE: one JSON line per planned, started and finished cell.
    group.addoption("--hc-bridge-template", default=None, metavar="SOCKET", help=argparse.SUPPRESS)
    group.addoption("--hc-exit-fast", action="store_true", default=False, help=argparse.SUPPRESS)
    group.addoption("--hc-progress", default=None, metavar="FILE", help=argparse.SUPPRESS)


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]):
    """Once every plugin and initial conftest has added its options, the README's short
    spellings (--backend, --level) become aliases of the namespaced options, each only if
    nobody else owns that name: a project's own --backend keeps working and keeps its meaning."""
    result = yield
    group = parser.getgroup("harnesscheck")
    for name, full in SHORT_ALIASES.items():
        try:
            group.addoption(name, **_ALIAS_ATTRS[full], help=f"short for {full} (where no other plugin or conftest defines {name})")
        except (ValueError, argparse.ArgumentError):
            pass  # another plugin's or the project's own option: it keeps the name and its meaning
    return result


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput") and "HARNESSCHECK_VERIFY_ALIVE_FD" in os.environ:  # verify.ALIVE_FD_ENV
        from harnesscheck.kit.verify import end_with_verify

        end_with_verify()  # verify's child: its run ends if verify is killed (before any worker starts)
    config.stash[_CELLS] = []
    _config_ref[:] = [config]
    state: dict = {
        "started": None,
        "backends": None,
        "levels": None,
        "baseline": None,
        "problems": [],
        "usage": [],
        "kit": False,
        "progress": None,
        "notes": [],
    }
    config.stash[_STATE] = state
    if config.getoption("hc_backend"):
        _backends(config)  # an unknown backend is a usage error before collection
        if config.args_source != pytest.Config.ArgsSource.ARGS:
            from harnesscheck.core.paths import conformance_dir

            config.args = [str(conformance_dir())]
    if not _wants_kit(config):
        _no_backend_named(config)
        return  # another project's run: no marker, no fixture, nothing started
    state["kit"] = True
    from harnesscheck.contain.process import harden_host

    harden_host()  # a kit run (controller and xdist workers) is a host: non-dumpable before its first CLI

    if config.getoption("hc_check") and not hasattr(config, "workerinput"):
        # an unknown id is a usage error before any xdist worker starts (raised in a worker's
        # collection it crashed the controller: INTERNALERROR, exit 3)
        with _plain_imports(_xdist_controller(config)):
            _catalog()
        _check_ids_known(set(config.getoption("hc_check")))
    config.addinivalue_line("markers", "conformance: a harnesscheck conformance check (offline-safe; never live)")
    config.addinivalue_line("markers", "loopback: runs against the real CLI and a scripted model server on 127.0.0.1")
    config.addinivalue_line("markers", "live: needs a real CLI, a real login and budget; never run in CI")
    from harnesscheck.kit import fixtures

    config.pluginmanager.register(fixtures, "harnesscheck-fixtures")
    _open_progress(config)
    _share_one_bridge_template(config)


def _no_backend_named(config: pytest.Config) -> None:
    """`pytest -m conformance` in a backend's own project, with no backend named: a usage
    error saying how to name it (pytest alone would collect 0 items and say nothing). A
    project that declares its own `conformance` marker keeps it."""
    markexpr = config.getoption("markexpr", "") or ""
    if "conformance" not in markexpr or "not conformance" in markexpr:
        return
    if any(str(line).split(":", 1)[0].strip() == "conformance" for line in config.getini("markers")):
        return
    raise pytest.UsageError(
        "-m conformance: no backend named, so the conformance suite was not collected\n"
        "  fix: name the backend under test: pytest -m conformance --hc-backend ID (a registered id) "
        "or --hc-backend mymodule:spec (your ProviderSpec); doc/AUTHORS.md, Adopting the suite"
    )


def _kit(config: pytest.Config) -> bool:
    """This run involves the suite (a backend named, or a path inside the suite)."""
    state = config.stash.get(_STATE, None)
    return bool(state and state["kit"])


#: workerinput key: the socket of the run's bridge forkserver template
BRIDGE_TEMPLATE = "harnesscheck_bridge_template"
_TEMPLATE = pytest.StashKey[object]()  # the template this process started (and ends)
_TEMPLATE_PATH = pytest.StashKey[str]()  # the template's socket, whoever started it


def _share_one_bridge_template(config: pytest.Config) -> None:
    """One bridge forkserver template (bridge/forkserver.py) per run, so each host's
    forkserver is forked from it, not started and imported afresh (~0.7 s of CPU per worker).
    The one given by --hc-bridge-template (harnesscheck verify starts it before pytest, so its
    imports overlap pytest's own start-up) is used by this process and passed to the xdist
    workers; without it, the xdist controller of a run of the suite alone with harness cells
    starts one at once, its imports overlapping the workers' start. A worker uses the
    template it is told of (workerinput)."""
    from harnesscheck.bridge import forkserver

    path = getattr(config, "workerinput", {}).get(BRIDGE_TEMPLATE) or config.getoption("hc_bridge_template")
    if path:
        forkserver.use_template(path)
        config.stash[_TEMPLATE_PATH] = path
        return
    if not (_xdist_controller(config) and _only_the_suite(config)):
        return
    from harnesscheck.kit.levels import starts_bridges

    if starts_bridges(_backends(config)):
        template = forkserver.start_template()
        if template is not None:
            config.stash[_TEMPLATE] = template
            config.stash[_TEMPLATE_PATH] = template.socket_path


# ---------------------------------------------------------------------------------------
# Backends and levels


def _levels(config: pytest.Config) -> list[str]:
    """The levels this run's cells are made at, decided once per run (every test function's
    parametrisation asks; the loopback probe reads the CLI cache and the ACP profiles)."""
    state = config.stash[_STATE]
    if state["levels"] is None:
        state["levels"] = _choose_levels(config)
    return list(state["levels"])


def _choose_levels(config: pytest.Config) -> list[str]:
    chosen = config.getoption("hc_level")
    if chosen:
        return list(dict.fromkeys(chosen))
    markexpr = config.getoption("markexpr", "") or ""
    if "live" in markexpr and "not live" not in markexpr:
        return ["live"]
    return ["offline", *(["loopback"] if _loopback_available(config) else [])]


def _loopback_available(config: pytest.Config) -> bool:
    """Loopback joins the default levels when some selected backend can run it here (the
    pinned real CLI is installed); otherwise its cells would all be env-missing skips."""
    from harnesscheck.kit.levels import level_available

    return any(level_available(spec, "loopback")[0] for spec in _backends(config))


def _baseline_path(config: pytest.Config):
    """--baseline FILE; without it, the built-in backends' own baseline shipped with the
    suite (entries name their backend, so other backends are unaffected); `none` disables."""
    chosen = config.getoption("hc_baseline")
    if chosen == "none":
        return None
    if chosen:
        return chosen
    from harnesscheck.core.paths import conformance_dir

    shipped = conformance_dir() / "baseline.json"
    return shipped if shipped.is_file() else None


def _backends(config: pytest.Config) -> list:
    state = config.stash[_STATE]
    if state["backends"] is None:
        import sys

        from harnesscheck.backends.registry import column_ids, default_backend_ids, get_spec

        # `api` stands for its mode columns (api/anthropic_messages, ...; registry.column_ids)
        ids = [c for b in config.getoption("hc_backend") for c in column_ids(b)] or default_backend_ids()
        import os

        for root in (str(config.rootpath), os.getcwd()):
            if root not in sys.path:
                sys.path.append(root)  # so `module:factory` resolves from the project under test
        specs = []
        selectors = state.setdefault("selectors", {})
        for backend_id in dict.fromkeys(ids):
            try:
                spec = get_spec(backend_id)
            except Exception as exc:  # UnknownBackend, ConfigError (a module:attr that is no spec): a usage error
                raise pytest.UsageError(f"--backend {backend_id}: {exc}") from None
            specs.append(spec)
            selectors[spec.id] = backend_id  # what reruns it: `mine:spec`, not the spec id `mine`
        state["backends"] = specs
    return state["backends"]


@contextlib.contextmanager
def _plain_imports(plain: bool):
    """With `plain`, modules imported inside are not assertion-rewritten: the xdist controller
    reads the catalog (to check the baseline before its workers start) but runs no check, and
    rewriting the suite there (~0.1 s, uncached under PYTHONDONTWRITEBYTECODE) would only
    delay the workers' start."""
    from _pytest.assertion.rewrite import AssertionRewritingHook

    hooks = [f for f in sys.meta_path if isinstance(f, AssertionRewritingHook)] if plain else []
    for hook in hooks:
        sys.meta_path.remove(hook)
    try:
        yield
    finally:
        sys.meta_path[:0] = hooks


def _catalog():
    from harnesscheck.kit.catalog import CATALOG, catalog_hash, load_catalog

    try:
        load_catalog()
    except FileNotFoundError:
        pass
    return CATALOG, catalog_hash(CATALOG)


def backend_cli_version(spec, level: str) -> str | None:
    from harnesscheck.kit.levels import adapter_kind

    kind = adapter_kind(spec)
    if kind == "harness" and level == "offline":
        from harnesscheck.kit.harness_adapter import offline_cli_version

        return offline_cli_version(spec)
    if kind == "harness" or (kind, level) == ("api", "loopback"):  # the api kind's: a reasoning-only backend's CLI
        from harnesscheck.kit.levels import LEVEL_PROVIDERS

        provider = LEVEL_PROVIDERS.get((kind, level))
        probe = getattr(provider, "cli_version", None)
        return probe(spec) if probe else None
    return None


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    if not _kit(config):
        return None
    from harnesscheck import __version__

    _, digest = _catalog()
    levels = _levels(config)
    lines = [f"harnesscheck kit {__version__}, catalog {digest}, levels: {', '.join(levels)}"]
    for spec in _backends(config):
        versions = ", ".join(f"{lv}: {backend_cli_version(spec, lv) or '-'}" for lv in levels)
        lines.append(f"  backend {spec.id} ({spec.kind.value}; cli {versions})")
    return lines


def _wants_kit(config: pytest.Config) -> bool:
    """A backend is named, or the run collects the suite: a path inside it, or a folder above
    it that pytest recurses into (not through a virtualenv or a `norecursedirs` folder: a
    project whose .venv holds harnesscheck does not collect the suite shipped there)."""
    if config.getoption("hc_backend"):
        return True
    cdir, paths = _suite_and_paths(config)
    if cdir is None:
        return False
    return any(path == cdir or cdir in path.parents or (path in cdir.parents and _recursed_into(config, path, cdir)) for path in paths)


def _recursed_into(config: pytest.Config, top, cdir) -> bool:
    """Whether collecting `top` reaches `cdir` (pytest's own rules: `norecursedirs`, and no
    virtualenv unless --collect-in-virtualenv)."""
    import fnmatch

    patterns = config.getini("norecursedirs")
    in_venv_ok = bool(config.getoption("collect_in_virtualenv", False))
    here = top
    for part in cdir.relative_to(top).parts[:-1]:
        here = here / part
        if any(fnmatch.fnmatch(part, pat) for pat in patterns):
            return False
        if not in_venv_ok and (here / "pyvenv.cfg").is_file():
            return False
    return True


def _suite_and_paths(config: pytest.Config) -> tuple:
    """(the suite's directory or None when it is not found, the run's paths), all resolved."""
    from pathlib import Path

    from harnesscheck.core.paths import conformance_dir

    try:
        cdir = conformance_dir().resolve()
    except FileNotFoundError:
        return None, []
    return cdir, [Path(str(arg).split("::")[0]).resolve() for arg in config.args]


# ---------------------------------------------------------------------------------------
# Parametrization: one cell per (backend, level) the check applies to


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    from harnesscheck.backends.registry import is_version_variant
    from harnesscheck.kit.catalog import info_of

    info = info_of(metafunc.function)
    if info is None or "but" not in metafunc.fixturenames:
        return
    cells, ids = [], []
    for spec in _backends(metafunc.config):
        if not _applies(info, spec):
            continue
        if info.declines is not None and spec.supports(info.declines):
            continue  # a "declines correctly" check only concerns backends without the capability
        for level in _levels(metafunc.config):
            if level == "offline" and is_version_variant(spec):
                continue  # fake CLIs: the offline cells do not depend on the release (its base column has them)
            if level in info.levels:
                cells.append((spec, level))
                ids.append(f"{spec.id}@{level}")
    if not cells:
        cells, ids = [None], ["not-applicable"]
    metafunc.parametrize("but", cells, ids=ids, indirect=True)


def _applies(info, spec) -> bool:
    """The check has cells for the backend: its kind is one of the check's, or the check judges
    the CLI a backend starts (`cli_model`) and the backend is an api one whose model is a CLI call."""
    if info.applies_to_kind(spec.kind):
        return True
    if not info.cli_model:
        return False
    from harnesscheck.kit.levels import is_reasoning

    return is_reasoning(spec)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Drops the placeholder items of checks with no cell, keeps only the --hc-check cells
    when given, and orders the cells (never the other tests: a stable sort on a key that is
    the same for every item that is not a cell)."""
    if not _kit(config):
        return
    chosen = set(config.getoption("hc_check"))
    if chosen:
        _check_ids_known(chosen)
    per_backend = _cell_selection(config)
    keep, drop = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and _check_of(item) is not None and callspec.params.get("but", 0) is None:
            drop.append(item)
        elif chosen and (_check_of(item) is None or _check_of(item).id not in chosen):
            drop.append(item)
        elif per_backend and _not_selected(item, per_backend):
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    if hasattr(config, "workerinput"):  # an xdist worker: the order is the one xdist deals out
        from harnesscheck.kit.scheduling import spread_paced

        items[:] = spread_paced(items, _paced)
        items.sort(key=_parallel_run_order)
    else:
        items.sort(key=_run_order)


def _cell_selection(config: pytest.Config) -> dict[str, set[str]] | None:
    """--hc-cells FILE: backend id -> the check ids whose cells run for it (None without the
    option). A malformed file, an unknown check id or a backend the run does not select is a
    usage error: a typo never quietly runs every cell, or none."""
    import json
    from pathlib import Path

    path = config.getoption("hc_cells")
    if not path:
        return None
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
            raise ValueError("not a JSON object of backend id -> [check ids]")
    except (OSError, ValueError) as exc:
        raise pytest.UsageError(f"--hc-cells {path}: {exc}") from None
    _check_ids_known({c for checks in data.values() for c in checks})
    selected = {spec.id for spec in _backends(config)}
    unknown = sorted(set(data) - selected)
    if unknown:
        raise pytest.UsageError(f"--hc-cells {path}: backends this run does not select: {', '.join(unknown)}")
    return {backend: set(checks) for backend, checks in data.items()}


def _not_selected(item: pytest.Item, per_backend: dict[str, set[str]]) -> bool:
    """A cell of a backend --hc-cells names, of a check not listed for it."""
    cell = _cell_of(item)
    return cell is not None and cell[0].id in per_backend and _check_of(item).id not in per_backend[cell[0].id]


def _check_ids_known(chosen: set[str]) -> None:
    """--hc-check names checks of the catalog; a retired or unknown id is a usage error."""
    from harnesscheck.kit.catalog import CATALOG, issued_ids

    unknown = sorted(chosen - set(CATALOG))
    if unknown:
        retired = issued_ids()
        why = [f"{i} (retired: {retired[i]})" if retired.get(i) else i for i in unknown]
        raise pytest.UsageError(f"--hc-check: no such check: {', '.join(why)} (the ids are in doc/catalog.md)")


def _check_of(item: pytest.Item):
    from harnesscheck.kit.catalog import info_of

    return info_of(getattr(item, "function", None))


def _paced(item: pytest.Item) -> bool:
    """A cell of a check that waits on purpose (CheckInfo.paced)."""
    from harnesscheck.kit.catalog import info_of

    info = info_of(getattr(item, "function", None))
    return _cell_of(item) is not None and info is not None and info.paced


def _run_order(item: pytest.Item) -> int:
    """Order of the run (a stable sort): in-process (scripted) cells, then harness cells, then
    api cells, so the one-time start-ups begun when collection ends (the bridge forkserver, the
    api SDK import: _warm_up_in_background) get the most time before a cell waits for them.
    Which cells run, and their outcomes, is unchanged; tests that are not cells keep their place."""
    return _kind_rank(item, {"scripted": 0, "harness": 1, "api": 2})


def _parallel_run_order(item: pytest.Item) -> int:
    """The order an xdist worker collects: harness cells, then api cells, then the in-process
    ones. Each worker's forkserver comes from the controller's template, so harness cells need
    not wait; the api cells go to one worker after its first batch anyway (kit/scheduling.py),
    and short in-process cells at the end even out the workers' last moments (4 interleaved
    pairs, tmpfs scratch: -n 2 wall median 6.42 -> 6.18 s)."""
    return _kind_rank(item, {"harness": 0, "api": 1, "scripted": 2})


def _kind_rank(item: pytest.Item, rank: dict[str, int]) -> int:
    from harnesscheck.kit.levels import adapter_kind

    cell = _cell_of(item)
    return 0 if cell is None else rank[adapter_kind(cell[0])]


# ---------------------------------------------------------------------------------------
# Results: every cell becomes one record; the baseline is applied here


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    cell = _cell_of(item)
    if cell is not None and call.when == "setup":
        # what record_property does, for pytest's --junitxml: the cell's identity on its testcase
        info = _check_of(item)
        item.user_properties.extend([("check_id", info.id), ("backend", cell[0].id), ("level", cell[1])])
    report = yield
    if cell is None:
        return report
    spec, level = cell
    info = _check_of(item)
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        outcome, reason, message = _classify(report, call)
        but = getattr(item, "funcargs", {}).get("but")
        if outcome == "passed":
            message = "; ".join(getattr(but, "notes", None) or [])  # what the check reported
        provenance = _provenance(but)
        entry = _baseline(item.config).match(info.id, spec.id, level) if _baseline(item.config) else None
        if entry is not None and outcome == "failed":
            outcome, reason = "xfailed", entry.reason
            report.outcome = "skipped"
            report.wasxfail = f"baseline: [{entry.reason}] {entry.note}"
        elif entry is not None and outcome == "passed" and entry.reason != "upstream-flaky":
            outcome, reason = "failed", "stale-baseline"
            message = f"baseline lists {entry.label()} as failing ({entry.reason}) but it passed: remove the entry"
            report.outcome = "failed"
            report.longrepr = message
        if outcome == "failed" and reason is None:
            _for_the_author(item, report, info, spec, level, message)
            from harnesscheck.kit.guidance import author_message

            message = author_message(message, info.requirement)
        record = {
            "check": info.id,
            "backend": spec.id,
            "level": level,
            "outcome": outcome,
            "reason": reason,
            "duration_s": round(report.duration, 4),
            "message": message[:2000],
            "area": info.area,
            "provenance": provenance,
            "containment": _containment(but),
        }
        setattr(report, CELL_ATTR, record)
    return report


def _for_the_author(item: pytest.Item, report: pytest.TestReport, info, spec, level: str, message: str) -> None:
    """A failing cell's pytest output, for the backend's author: its section is headed by the
    check id (not the test function), and holds the requirement, the evidence, the fix and
    the rerun command (kit/guidance.py), not a traceback through the kit's own code: a run's
    output stays bounded whatever the number of failures. The full traceback stays one
    `--tb=long` rerun away (`pytest ... --hc-check ID --tb=long`)."""
    from harnesscheck.kit.guidance import failure_text

    selector = item.config.stash[_STATE].get("selectors", {}).get(spec.id, spec.id)
    if item.config.getoption("tbstyle", "auto") in ("long", "native"):
        return  # asked for the traceback: keep pytest's own
    where = report.location
    report.location = (where[0], where[1], f"{info.id} [{spec.id}@{level}]")
    report.longrepr = "\n".join(
        failure_text(check_id=info.id, backend=spec.id, selector=selector, level=level, requirement=info.requirement, message=message, max_lines=8)
    )


def _provenance(but) -> str:
    """The cell's provenance (BackendUnderTest.provenance), "" where no adapter was built; an
    adapter's fault here never changes the cell's verdict."""
    try:
        return str(but.provenance())[:500] if but is not None and hasattr(but, "provenance") else ""
    except Exception as exc:  # noqa: BLE001 - provenance is a record, not a verdict
        return f"provenance unavailable ({type(exc).__name__})"


def _containment(but) -> str | None:
    """How the sessions the cell's adapter ran were contained (BackendUnderTest.containments):
    bwrap, guards, none, '+'-joined when they differ; None where it ran none."""
    seen = sorted(getattr(but, "containments", None) or ())
    return "+".join(seen) if seen else None


def _cell_of(item: pytest.Item):
    """(spec, level) of a kit cell, or None (any other test, whatever its parameters are called)."""
    callspec = getattr(item, "callspec", None)
    if callspec is None or _check_of(item) is None:
        return None
    cell = callspec.params.get("but")
    return cell if isinstance(cell, tuple) else None


def _classify(report: pytest.TestReport, call: pytest.CallInfo) -> tuple[str, str | None, str]:
    from harnesscheck.kit.session import KitFault

    if report.outcome == "passed":
        return "passed", None, ""
    if report.outcome == "skipped":
        text = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        import re

        from harnesscheck.kit.catalog import REASON_CODES

        match = re.search(r"\[([a-z-]+)\]\s*(.*)", text, re.S)
        if match is None or match[1] not in REASON_CODES:
            return "error", "kit-bug", f"skip without a reason code: {text}"
        return "skipped", match[1], match[2].strip()
    excinfo = call.excinfo
    message = str(report.longreprtext or "")[-2000:]
    if excinfo is not None and excinfo.errisinstance(KitFault):
        return "error", "kit-bug", str(excinfo.value)
    if report.when == "setup":
        return "error", "kit-bug", message
    if excinfo is not None and not excinfo.errisinstance(AssertionError):
        return "failed", None, f"{excinfo.typename}: {str(excinfo.value)[:1500]}"
    short = str(excinfo.value) if excinfo is not None else message
    return "failed", None, short[:2000]


def _baseline(config: pytest.Config):
    state = config.stash[_STATE]
    if state["baseline"] is None and _baseline_path(config):
        from harnesscheck.kit.baseline import BaselineError, load_baseline

        try:
            state["baseline"] = load_baseline(_baseline_path(config))
        except BaselineError as exc:
            raise pytest.UsageError(str(exc)) from None
    return state["baseline"]


def pytest_sessionstart(session: pytest.Session) -> None:
    if not _kit(session.config):
        return
    session.config.stash[_STATE]["started"] = _now()
    with _plain_imports(_xdist_controller(session.config)):
        catalog, digest = _catalog()
    _junit_header(session.config, digest)
    if _baseline_path(session.config):
        baseline = _baseline(session.config)
        usage, expired = baseline.problems(set(catalog))
        if usage:
            raise pytest.UsageError("; ".join(usage))
        session.config.stash[_STATE]["problems"].extend(expired)


def _junit_header(config: pytest.Config, digest: str) -> None:
    """pytest's --junitxml: the kit version and catalog hash as properties of the test suite
    (what record_testsuite_property does, which a fixture cannot do once for an xdist run)."""
    from _pytest.junitxml import xml_key

    xml = config.stash.get(xml_key, None)
    if xml is not None:
        from harnesscheck import __version__

        xml.add_global_property("harnesscheck_kit_version", __version__)
        xml.add_global_property("harnesscheck_catalog_hash", digest)


def pytest_collection_finish(session: pytest.Session) -> None:
    if not _kit(session.config):
        return
    if not _xdist_controller(session.config):  # the controller learns them from a worker
        _plan(session.config, [item.nodeid for item in session.items])
    _warm_up_in_background(session.config)


def _warm_up_in_background(config: pytest.Config) -> None:
    """A run of the suite alone (every path given is inside it): the one-time start-ups its
    cells would each wait for on first use (the bridge forkserver, ~0.6 s; the api SDK import,
    ~1 s) begin once collection is over, in background threads, and overlap the first cells
    (begun earlier, they slowed collection more than they gained: ~0.4 s later first cell
    under xdist). Runs that mix in other tests keep every start on first use (their tests may
    expect it not to have run)."""
    if not _only_the_suite(config) or _xdist_controller(config):
        return
    from harnesscheck.kit.levels import background_warm_ups
    from harnesscheck.kit.scheduling import API_SDK_HERE

    cells = [(spec, level) for spec in _backends(config) for level in _levels(config)]
    api_sdk = getattr(config, "workerinput", {}).get(API_SDK_HERE, True)
    for warm_up in background_warm_ups(cells, api_sdk=api_sdk):
        thread = threading.Thread(target=warm_up.run, name="harnesscheck-warm-up", daemon=True)
        if warm_up.name == "api-sdk":
            _pause_collector(config, thread)
        thread.start()


_PAUSED = pytest.StashKey[threading.Thread]()  # the SDK import the collector is off for (_pause_collector)


def _pause_collector(config: pytest.Config, sdk_import: threading.Thread) -> None:
    """The api SDK (some 3,000 pydantic classes) is imported in the background: collections
    while it is built, and every full one after, would walk what lives as long as the process
    (~0.5 s of CPU per run in the api worker). So the collector, if it is on, is off until
    that import is done and the heap settled (_settle_heap), at the latest until the session
    ends (pytest_unconfigure)."""
    import gc

    if gc.isenabled():
        gc.disable()
        config.stash[_PAUSED] = sdk_import


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    result = yield
    _settle_heap(item.config)
    return result


def _settle_heap(config: pytest.Config) -> None:
    """With the collector paused (_pause_collector) and the SDK import done, between two cells
    (the main thread, after the cell's protocol, its fixture values dropped): one full
    collection (garbage made meanwhile is freed, finalizers run), then everything alive moves
    to the permanent generation (gc.freeze), where no later collection walks it, and the
    collector is on again. Warm-ups start only in a process that runs nothing but the suite."""
    sdk_import = config.stash.get(_PAUSED, None)
    if sdk_import is None or sdk_import.is_alive():
        return
    del config.stash[_PAUSED]
    import gc

    gc.collect()
    gc.freeze()
    gc.enable()


def _resume_collector(config: pytest.Config) -> None:
    """The session ends with the collector still paused (no cell ended after the SDK import,
    -x, an interrupt): it is on again, as it was (the heap left unfrozen)."""
    if config.stash.get(_PAUSED, None) is not None:
        del config.stash[_PAUSED]
        import gc

        gc.enable()


def _pinned_suffixes(config: pytest.Config) -> tuple[str, ...]:
    """Node-id suffixes of the cells pinned to one xdist worker: the offline api cells of a
    run of the suite alone under `--dist load` (what `-n` means); () for any other run."""
    if getattr(config.option, "dist", "no") != "load" or not _only_the_suite(config):
        return ()
    from harnesscheck.kit.levels import adapter_kind
    from harnesscheck.kit.scheduling import pinned_suffixes, supported

    if not supported():
        return ()

    return pinned_suffixes([(s.id, level, adapter_kind(s)) for s in _backends(config) for level in _levels(config)])


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """Tell each xdist worker whether it is the one that runs the pinned api cells, so only
    that one imports the api SDK in the background (absent: no pinning, every worker may),
    and where the bridge forkserver template listens (absent: none)."""
    if _pinned_suffixes(node.config):
        from harnesscheck.kit.scheduling import API_SDK_HERE, PIN_WORKER

        node.workerinput[API_SDK_HERE] = node.gateway.id == PIN_WORKER
    template = node.config.stash.get(_TEMPLATE_PATH, None)
    if template is not None:
        node.workerinput[BRIDGE_TEMPLATE] = template


@pytest.hookimpl(optionalhook=True, tryfirst=True)  # before xdist's own (a first-result hook)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto` for a run of the suite alone: kit/scheduling.py suite_workers (one more than
    the CPUs, at most 4; 0, i.e. serial, on one CPU), as `harnesscheck verify` runs it.
    xdist's own count otherwise, and whenever the user chose one (`-n logical`,
    PYTEST_XDIST_AUTO_NUM_WORKERS)."""
    if not _only_the_suite(config) or os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS") or getattr(config.option, "numprocesses", None) == "logical":
        return None
    from harnesscheck.kit.scheduling import suite_workers

    workers = suite_workers()
    return workers if workers > 1 else 0


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """A run with cells under `--dist load` (what `-n` means): each loopback column kept to one
    worker, and in a run of the suite alone every offline api cell on one worker, so one worker,
    not each, imports the api SDK (kit/scheduling.py). Any other run keeps xdist's own scheduler."""
    from harnesscheck.kit.scheduling import SuiteScheduling, supported

    if getattr(config.option, "dist", "no") != "load" or not supported() or not _kit(config):
        return None
    return SuiteScheduling(config, log, suffixes=_pinned_suffixes(config))


def _xdist_controller(config: pytest.Config) -> bool:
    """The process that hands cells to xdist workers and runs none itself (a distribution
    mode and workers to distribute to, not only collecting, as xdist decides: `--dist load`
    alone, or with --collect-only, runs in-process)."""
    return (
        getattr(config.option, "dist", "no") != "no"
        and bool(getattr(config.option, "tx", None))
        and not getattr(config.option, "collectonly", False)
        and not hasattr(config, "workerinput")
    )


def _only_the_suite(config: pytest.Config) -> bool:
    cdir, paths = _suite_and_paths(config)
    return cdir is not None and bool(paths) and all(path == cdir or cdir in path.parents for path in paths)


#: the active config (pytest_runtest_logreport gets no config argument)
_config_ref: list = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Collect cell records: locally, or on the xdist controller from the workers' reports."""
    if not _config_ref:
        return
    record = getattr(report, CELL_ATTR, None)
    if record is not None:
        config = _config_ref[0]
        config.stash[_CELLS].append(record)
        selector = config.stash[_STATE].get("selectors", {}).get(record["backend"], record["backend"])
        _progress(config, {"e": "done", "id": report.nodeid, **record, "selector": selector})


# ---------------------------------------------------------------------------------------
# Progress (--hc-progress FILE, set by harnesscheck verify): JSON lines, one per event


def _open_progress(config: pytest.Config) -> None:
    path = config.getoption("hc_progress")
    if path and not hasattr(config, "workerinput"):  # the process that sees every cell: serial or controller
        config.stash[_STATE]["progress"] = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - closed at unconfigure


def _progress(config: pytest.Config, event: dict) -> None:
    out = config.stash[_STATE]["progress"] if _STATE in config.stash else None
    if out is not None:
        import json

        out.write(json.dumps(event, separators=(",", ":")) + "\n")


def pytest_runtest_logstart(nodeid: str, location) -> None:
    if _config_ref:
        _progress(_config_ref[0], {"e": "start", "id": nodeid})


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids: list[str]) -> None:
    """The xdist controller learns the cells from the first worker's collection."""
    config = node.config
    if config.stash[_STATE]["progress"] is not None and not config.stash[_STATE].get("planned"):
        config.stash[_STATE]["planned"] = True
        _plan(config, ids)


def _plan(config: pytest.Config, nodeids: list[str]) -> None:
    """The `plan` event: every cell's node id -> [backend@level, check id]."""
    if config.stash[_STATE]["progress"] is None:
        return
    from harnesscheck.kit.catalog import CATALOG

    by_function = {(info.module, info.function): info.id for info in CATALOG.values()}
    columns = {f"{spec.id}@{level}" for spec in _backends(config) for level in _levels(config)}
    cells = {}
    for nodeid in nodeids:
        path, _, rest = nodeid.partition("::")
        function, _, param = rest.partition("[")
        column, check = param[:-1], by_function.get((path.rsplit("/", 1)[-1], function))
        if check is not None and column in columns:
            cells[nodeid] = [column, check]
    requirements = {info.id: info.requirement for info in CATALOG.values() if info.id in {c for _, c in cells.values()}}
    _progress(config, {"e": "plan", "cells": cells, "requirements": requirements})


# ---------------------------------------------------------------------------------------
# The end of the session: the report, the baseline's problems, the ratchet, "nothing ran"


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if hasattr(config, "workerinput") or not _kit(config):
        return  # xdist worker: the controller writes the report
    state = config.stash[_STATE]
    cells = config.stash[_CELLS]
    ran = [c for c in cells if c["outcome"] in ("passed", "failed", "xfailed")]
    if cells and not ran:
        state["notes"] = [_nothing_verified(cells)]
    if not ran and config.getoption("hc_require_run") and session.exitstatus in (0, pytest.ExitCode.NO_TESTS_COLLECTED):
        state["notes"] = state.get("notes") or ["harnesscheck: nothing was verified: no cell was selected"]
        state["notes"].append("harnesscheck: --hc-require-run: a run that verified nothing fails")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if not cells and not state["problems"]:
        return
    from pathlib import Path

    report = build_report(config, cells)
    ratchet = config.getoption("hc_ratchet")
    if ratchet:
        report.problems.extend(_ratchet(config, Path(ratchet), report))
    for problem in report.problems:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        tr = config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            tr.write_line(f"harnesscheck: {problem}", red=True)

    from harnesscheck.kit.results import write_json

    if config.getoption("hc_report"):
        write_json(report, Path(config.getoption("hc_report")))
    if config.getoption("hc_write_baseline"):
        from harnesscheck.kit.baseline import write_baseline

        failing = [(c.check, c.backend, c.level, c.message) for c in report.cells if c.outcome in ("failed", "xfailed")]
        write_baseline(Path(config.getoption("hc_write_baseline")), failing)


def _nothing_verified(cells: list[dict]) -> str:
    """One line: no cell ran, and the commonest reasons why."""
    from collections import Counter

    why = Counter((c["reason"] or c["outcome"], c["message"]) for c in cells)
    top = "; ".join(f"{n} {reason}: {message}" for (reason, message), n in why.most_common(3))
    more = f"; and {len(why) - 3} other reasons" if len(why) > 3 else ""
    return f"harnesscheck: nothing was verified: all {len(cells)} cells were skipped ({top}{more})"


def _ratchet(config: pytest.Config, path, report) -> list[str]:
    """--hc-ratchet MATRIX: the committed matrix's passing cells that do not pass now."""
    import json

    from harnesscheck.kit.matrix import regressions

    try:
        committed = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise pytest.UsageError(f"--hc-ratchet {path}: not a readable matrix ({exc})") from None
    found = regressions(committed, report, _baseline(config))
    return [f"ratchet ({path}): {line}" for line in found]


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if _kit(config):
        _failing_checks_summary(terminalreporter, config)
        for note in config.stash[_STATE].get("notes", ()):
            terminalreporter.write_line(note, yellow=exitstatus == 0, red=exitstatus != 0)


def _failing_checks_summary(terminalreporter, config: pytest.Config) -> None:
    """The failing cells by check id (what doc/catalog.md lists), each with its severity and
    fix (one line each: the details are in the failure sections above), then the slowest cells."""
    from harnesscheck.kit.guidance import SEVERITIES, guidance_for, rerun_command

    cells = config.stash[_CELLS]
    failing = [c for c in cells if c["outcome"] == "failed"]
    selectors = config.stash[_STATE].get("selectors", {})
    if failing:
        terminalreporter.section("harnesscheck: failing checks", sep="=", red=True)
        rank = {s: n for n, s in enumerate(SEVERITIES)}

        def order(cell: dict) -> tuple:
            guide = guidance_for(cell["check"])
            return (rank.get(guide.severity if guide else "", len(SEVERITIES)), cell["check"], cell["backend"])

        for cell in sorted(failing, key=order):
            guide = guidance_for(cell["check"])
            severity = guide.severity if guide else "?"
            terminalreporter.write_line(f"{severity:8} {cell['check']} on {cell['backend']} ({cell['level']})")
            if guide is not None:
                terminalreporter.write_line(f"         fix: {guide.fix}")
        first = failing[0]
        terminalreporter.write_line(f"rerun one: {rerun_command(selectors.get(first['backend'], first['backend']), first['level'], first['check'])}")
        terminalreporter.write_line("rerun every failed cell: add --lf (pytest's last-failed) or `harnesscheck verify --last-failed`")
    slow = sorted((c for c in cells if c.get("duration_s", 0) >= 5), key=lambda c: -c["duration_s"])[:5]
    if slow:
        terminalreporter.write_line("slowest cells: " + ", ".join(f"{c['check']} on {c['backend']}@{c['level']} {c['duration_s']:.0f} s" for c in slow))


def build_report(config: pytest.Config, cells: list[dict]):
    from harnesscheck import __version__
    from harnesscheck.kit.results import BackendInfo, CellResult, Report, platform_info

    _, digest = _catalog()
    levels = _levels(config)
    state = config.stash[_STATE]
    backends = [
        BackendInfo(
            id=s.id,
            label=s.label,
            kind=s.kind.value,
            cli_version=next((v for v in (backend_cli_version(s, lv) for lv in levels) if v), None),
            capabilities=sorted(c.value for c in s.capabilities),
            levels=levels,
            cli_versions={lv: backend_cli_version(s, lv) for lv in levels},
        )
        for s in _backends(config)
    ]
    return Report(
        kit_version=__version__,
        catalog_hash=digest,
        backends=backends,
        levels=levels,
        started_at=state["started"] or _now(),
        finished_at=_now(),
        platform=platform_info(),
        cells=[CellResult(**c) for c in cells],
        problems=list(state["problems"]),
    )


def _now() -> str:
    from harnesscheck.kit.results import now_iso

    return now_iso()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    _resume_collector(config)
    if not hasattr(config, "workerinput"):
        verify = sys.modules.get("harnesscheck.kit.verify")
        if verify is not None:
            verify.remove_verify_folders()  # verify's child whose verify was killed: its folders too
    progress = config.stash[_STATE]["progress"] if _STATE in config.stash else None
    if progress is not None:
        progress.close()
    template = config.stash.get(_TEMPLATE, None)
    if template is not None:
        template.close()
    if config.getoption("hc_exit_fast", False):
        _exit_fast_at_exit(config)


def _exit_fast_at_exit(config: pytest.Config) -> None:
    """--hc-exit-fast: the process ends as it would (non-daemon threads joined, then every
    atexit handler, then stdout and stderr flushed, with the session's exit status; 0 in an
    xdist worker, as its normal end gives) but without the module teardown that follows,
    ~0.4 s once the api SDK is loaded, which the xdist controller would wait for. Runs as
    the first atexit handler and runs the others itself; without atexit._run_exitfuncs
    (CPython's, present since 3.0) or a session, the normal exit is kept. A file some plugin
    left open, unclosed and unflushed, loses its buffer: the option is for verify's child,
    which loads no plugin but the kit's (and xdist)."""
    import atexit

    from harnesscheck.bridge.__main__ import exit_now  # flush stdout and stderr, os._exit

    run_exitfuncs = getattr(atexit, "_run_exitfuncs", None)
    # The session pytest made for this run (it registers itself as the "session" plugin, even
    # when a hook stopped the run before ours saw it): its exitstatus is what pytest returns.
    session = config.pluginmanager.get_plugin("session")
    if run_exitfuncs is None or session is None:
        return
    code = 0 if hasattr(config, "workerinput") else int(session.exitstatus)

    def exit_fast() -> None:
        atexit.unregister(exit_fast)
        run_exitfuncs()
        exit_now(code)

    atexit.register(exit_fast)
