"""Known-bad backends are caught: each fails exactly the checks listed for it, and every
offline check fails at least one of them (or tests/mutants says why not).

The in-process mutants run the whole suite in one child pytest; each CLI-based mutant runs
a narrow selection around its defect (tests/mutants AREAS)."""

from __future__ import annotations

import importlib

import pytest

from harnesscheck.kit.catalog import load_catalog
from kit_support import failing, run_suite
from tests_mutants_import import AREAS, MUTANT_LEVELS, MUTANTS, UNCAUGHT

SCRIPTED = sorted(r for r in MUTANTS if r.startswith("tests.mutants.scripted:"))
CLI_BASED = sorted(r for r in MUTANTS if r not in SCRIPTED)


def _spec_id(ref: str) -> str:
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name).id


def test_there_are_enough_mutants_each_named_for_its_defect():
    assert len(MUTANTS) >= 12
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
    args = [a for ref in SCRIPTED for a in ("--backend", ref)]
    code, report, out = run_suite(tmp_path, *args, "-n", "2", timeout=1500)
    assert report is not None, out[-3000:]
    got = failing(report)
    wrong = {}
    for ref in SCRIPTED:
        actual = got.get(_spec_id(ref), set())
        if actual != MUTANTS[ref]:
            wrong[ref] = {"not caught": sorted(MUTANTS[ref] - actual), "also failed": sorted(actual - MUTANTS[ref])}
    assert not wrong, wrong
    assert code == 1


@pytest.mark.parametrize("ref", CLI_BASED)
def test_cli_mutant_fails_exactly_its_checks(ref, tmp_path):
    names, selection = AREAS[ref]
    files = tuple(f"conformance/{f}" for f in names.split())
    in_reach = {c for c in MUTANTS[ref]}
    from harnesscheck import sandbox
    from tests.mutants import NEEDS_SANDBOX

    if not sandbox.status().available:
        in_reach -= NEEDS_SANDBOX  # they skip with the reason there
        if not in_reach:
            pytest.skip(f"{ref}: its checks need a sandbox, and none can be had here ({sandbox.status().reason})")
    level = MUTANT_LEVELS.get(ref, "offline")
    if level == "loopback":
        from harnesscheck.loopback.clis import require_pinned_cli

        binary, why = require_pinned_cli("claude-code")
        if binary is None:
            pytest.skip(f"{ref} runs the real claude at loopback: {why}")
    for _attempt in range(2):  # a cell the machine was too slow to judge (`budget`) is run once more
        code, report, out = run_suite(tmp_path, "--backend", ref, "--level", level, "-k", selection, files=files,
                                      timeout=900)
        assert report is not None, out[-3000:]
        unjudged = {c["check"] for c in report["cells"] if c["reason"] == "budget" and c["check"] in in_reach}
        if not unjudged:
            break
    actual = failing(report).get(_spec_id(ref), set())
    messages = {c["check"]: c["message"][:600] for c in report["cells"] if c["check"] in actual - in_reach}
    assert actual == in_reach, {"not caught": sorted(in_reach - actual), "also failed": messages}
