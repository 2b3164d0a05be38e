"""Known-bad backends are caught: each fails exactly the checks listed for it, and every
offline check fails at least one of them (or tests/mutants says why not).

The in-process mutants run the whole suite in one child pytest; the CLI-based mutants share one
child pytest too, each against only the checks around its defect (tests/mutants AREAS, passed as
--hc-cells), as MCP conformance runs each broken client against only its scenario."""

from __future__ import annotations

import importlib
import json

import pytest
from kit_support import failing, run_suite
from tests_mutants_import import AREAS, MUTANT_LEVELS, MUTANTS, UNCAUGHT

from harnesscheck.kit.catalog import load_catalog

SCRIPTED = sorted(r for r in MUTANTS if r.startswith("tests.mutants.scripted:"))
CLI_BASED = sorted(r for r in MUTANTS if r not in SCRIPTED)


#: The built-in backends whose pinned CLIs the loopback mutants run (reasoning-only Claude Code's
#: is claude-code's): the test skips, naming it, when one is not installed.
LOOPBACK_MUTANT_CLIS = ("claude-code", "codex")


def _spec(ref: str):
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def _spec_id(ref: str) -> str:
    return _spec(ref).id


def test_there_are_enough_mutants_each_named_for_its_defect():
    assert len(MUTANTS) >= 12
    ids = [_spec_id(ref) for ref in MUTANTS]
    assert len(set(ids)) == len(ids), f"two mutants share a backend id (one run judges them by id): {sorted(i for i in ids if ids.count(i) > 1)}"
    for ref in MUTANTS:
        module, _, name = ref.partition(":")
        spec = getattr(importlib.import_module(module), name)
        cls = getattr(importlib.import_module(module), spec.factory.partition(":")[2])
        assert cls.__doc__ and cls.__doc__.strip(), f"{ref}: the class must say what its defect is"
        assert name.replace("_", "") == "".join(w.lower() for w in __import__("re").findall("[A-Z][a-z0-9]*", cls.__name__)), (
            f"{ref}: the reference must be the class name ({cls.__name__}) in snake case"
        )


def test_every_offline_check_catches_a_mutant():
    catalog = load_catalog()
    caught = set().union(*MUTANTS.values())
    assert caught <= set(catalog), f"mutants list unknown checks: {caught - set(catalog)}"
    offline = {c for c, info in catalog.items() if "offline" in info.levels}
    uncaught = offline - caught - set(UNCAUGHT)
    assert not uncaught, f"checks no known-bad backend fails (add a mutant or say why in UNCAUGHT): {sorted(uncaught)}"
    assert not (set(UNCAUGHT) & caught), "UNCAUGHT lists checks that a mutant does catch"
    assert all(reason.strip() for reason in UNCAUGHT.values())


def test_in_process_mutants_fail_exactly_their_checks(tmp_path):
    """Every in-process mutant against the whole suite in one child run. A mutant with a cell it
    must fail that the machine was too slow to judge (skipped `budget`: a race that judged nothing
    under load) runs once more, alone with the others that had one, and its cells of that run
    count; a cell still unjudged then is left out (a fact about the machine, not a verdict)."""
    args = [a for ref in SCRIPTED for a in ("--backend", ref)]
    code, report, out = run_suite(tmp_path, *args, "-n", "2", timeout=1500)
    assert report is not None, out[-3000:]
    assert code == 1
    cells = {(c["backend"], c["check"]): c for c in report["cells"]}

    def unjudged(refs):
        return {ref: {c for c in MUTANTS[ref] if (cells.get((_spec_id(ref), c)) or {}).get("reason") == "budget"} for ref in refs}

    again = [ref for ref, checks in unjudged(SCRIPTED).items() if checks]
    if again:
        _code, rerun, out = run_suite(tmp_path, *[a for ref in again for a in ("--backend", ref)], "-n", "2", timeout=1500)
        assert rerun is not None, out[-3000:]
        cells.update({(c["backend"], c["check"]): c for c in rerun["cells"]})
    left_out = unjudged(SCRIPTED)
    got = failing({"cells": list(cells.values())})
    wrong = {}
    for ref in SCRIPTED:
        expected = MUTANTS[ref] - left_out[ref]
        actual = got.get(_spec_id(ref), set())
        if actual != expected:
            wrong[ref] = {"not caught": sorted(expected - actual), "also failed": sorted(actual - expected)}
    assert not wrong, wrong


def _judge(refs: list[str], report: dict) -> dict[str, dict]:
    """Per mutant whose verdict is not exactly its MUTANTS set: the checks it should have failed
    and did not, those it failed besides (with their messages), and its selected checks that
    have no cell in the report (not judged at all)."""
    from harnesscheck.contain import sandbox
    from tests.mutants import NEEDS_SANDBOX

    got = failing(report)
    ran: dict[str, set[str]] = {}
    for c in report["cells"]:
        ran.setdefault(c["backend"], set()).add(c["check"])
    # Where the machine gives no sandbox those checks skip with the reason: no mutant fails them.
    unjudgeable = set() if sandbox.status().available else set(NEEDS_SANDBOX)
    wrong = {}
    for ref in refs:
        spec_id = _spec_id(ref)
        expected, actual = set(MUTANTS[ref]) - unjudgeable, got.get(spec_id, set())
        unjudged = set(AREAS[ref]) - ran.get(spec_id, set())
        if actual != expected or unjudged:
            messages = {c["check"]: c["message"][:600] for c in report["cells"] if c["backend"] == spec_id and c["check"] in actual - expected}
            wrong[ref] = {"not caught": sorted(expected - actual), "also failed": messages, "no cell": sorted(unjudged)}
    return wrong


#: Child workers per level. Offline, the CLI mutants' run is waits, not CPU: a defective fake
#: is judged at its check's own bound (kit/watchdog.py; 12-40 s each, 335 s of cells in all,
#: 44 CPU-s). Measured alone, nothing else running: -n 2 204 s, -n 4 106 s, -n 6 77 s (52
#: CPU-s), -n 8 76 s, -n 12 80 s; `--dist worksteal` at -n 6 91 s. At loopback each cell
#: starts the real claude, so two workers.
CLI_MUTANT_WORKERS = {"offline": "6", "loopback": "2"}


def _run_cli_mutants(tmp_path, refs: list[str], level: str) -> tuple[dict, str]:
    """One child run: every mutant of `refs` against only its own checks (AREAS, through
    --hc-cells), at `level`. A mutant with a cell in its reach the machine was too slow to judge
    (`budget`) is run once more, alone with the others that had one; its cells of that run count."""
    refs_left, cells_seen, out, catalog = list(refs), {}, "", load_catalog()
    for attempt in range(2):
        selection = {_spec_id(ref): list(AREAS[ref]) for ref in refs_left}
        cells_file = tmp_path / f"cells-{level}-{attempt}.json"
        cells_file.write_text(json.dumps(selection), encoding="utf-8")
        files = tuple(sorted({f"conformance/{catalog[c].module}" for ref in refs_left for c in AREAS[ref]}))  # a check's module, not its area's
        backends = [a for ref in refs_left for a in ("--backend", ref)]
        _code, report, out = run_suite(
            tmp_path, *backends, "--level", level, "--hc-cells", str(cells_file), "-n", CLI_MUTANT_WORKERS[level], files=files, timeout=1500
        )
        assert report is not None, out[-3000:]
        for c in report["cells"]:
            cells_seen[(c["backend"], c["check"])] = c
        refs_left = [
            ref for ref in refs_left if any(c["reason"] == "budget" and c["backend"] == _spec_id(ref) and c["check"] in MUTANTS[ref] for c in report["cells"])
        ]
        if not refs_left:
            break
    return {"cells": list(cells_seen.values())}, out


def test_cli_mutants_fail_exactly_their_checks(tmp_path):
    """Every CLI-based mutant (offline) in one child run, each against only its own checks."""
    refs = [ref for ref in CLI_BASED if MUTANT_LEVELS.get(ref, "offline") == "offline"]
    report, _out = _run_cli_mutants(tmp_path, refs, "offline")
    wrong = _judge(refs, report)
    assert not wrong, wrong


def test_loopback_cli_mutants_fail_exactly_their_checks(tmp_path):
    """The mutants that run at loopback: reasoning-only Claude Code (its column exists only there) and
    those whose defect only the real CLI shows (tests/mutants, MUTANT_LEVELS)."""
    from harnesscheck.loopback.clis import require_pinned_cli

    refs = [ref for ref in CLI_BASED if MUTANT_LEVELS.get(ref, "offline") == "loopback"]
    missing = {backend: why for backend in LOOPBACK_MUTANT_CLIS for binary, why in [require_pinned_cli(backend)] if binary is None}
    runnable = [ref for ref in refs if _loopback_cli(ref) not in missing]
    if runnable:
        report, _out = _run_cli_mutants(tmp_path, runnable, "loopback")
        wrong = _judge(runnable, report)
        assert not wrong, wrong
    if missing:
        not_run = [ref for ref in refs if ref not in runnable]
        pytest.skip(f"{len(not_run)} loopback mutants not run ({len(runnable)} ran and were judged): " + "; ".join(missing.values()))


def _loopback_cli(ref: str) -> str:
    """The built-in backend whose pinned CLI a loopback mutant runs (LOOPBACK_MUTANT_CLIS): the one
    with its CLI; claude-code for reasoning-only Claude Code, whose spec names no CLI of its own."""
    from harnesscheck.backends.registry import get_spec

    by_cli = {get_spec(backend).cli_name: backend for backend in LOOPBACK_MUTANT_CLIS}
    return by_cli.get(_spec(ref).cli_name, "claude-code")


def test_every_cli_mutant_runs_against_checks_of_the_catalog_that_include_its_own():
    catalog = load_catalog()
    assert set(AREAS) == set(CLI_BASED), "each CLI-based mutant needs its checks in AREAS, and only they"
    for ref in CLI_BASED:
        assert set(AREAS[ref]) <= set(catalog), f"{ref}: unknown checks {set(AREAS[ref]) - set(catalog)}"
        assert MUTANTS[ref] <= set(AREAS[ref]), f"{ref}: checks it must fail but is not run against: {MUTANTS[ref] - set(AREAS[ref])}"
        assert MUTANT_LEVELS.get(ref, "offline") in ("offline", "loopback"), ref
