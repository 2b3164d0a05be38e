"""scope.swap-race-contained judges the race or skips `budget`: when every raced read failed
(a loaded machine that scheduled each read into a swap), one read without the race decides
whether the backend reads the file at all (then the cell is skipped, never failed) or not."""

from __future__ import annotations

import pytest
import tests_mutants_import  # noqa: F401  (the repository on sys.path: `conformance`, `tests.mutants`)

from harnesscheck.backends.registry import get_spec
from harnesscheck.kit.levels import adapter_for
from harnesscheck.kit.session import SkipCell


class _EveryReadMidSwap:
    """A swapper as the machine under load made it look: `d` is away for the whole session."""

    def __init__(self, a, b, **_kwargs):
        self.a, self.summary = a, None

    def __enter__(self):
        self.a.rename(self.a.with_name("d.away"))
        return self

    def __exit__(self, *exc):
        self.a.with_name("d.away").rename(self.a)
        self.summary = {"restored": True, "stopped": "stop", "swaps": 1154, "mode": "rename", "elapsed_s": 3.0}


def _judge(backend: str, tmp_path, monkeypatch):
    import conformance.test_scope as scope_checks

    monkeypatch.setattr(scope_checks, "SwapRace", _EveryReadMidSwap)
    but = adapter_for(get_spec(backend), "offline", tmp_path)
    scope_checks.test_swap_race_contained(but)


def test_a_race_that_judged_nothing_skips_budget_for_a_backend_that_reads_the_file(tmp_path, monkeypatch):
    with pytest.raises(SkipCell) as skipped:
        _judge("fake", tmp_path, monkeypatch)
    assert skipped.value.reason == "budget" and "one without the race shows it" in skipped.value.message


def test_a_backend_whose_reads_never_reach_the_model_still_fails(tmp_path, monkeypatch):
    with pytest.raises(AssertionError, match="not even one without the race"):
        _judge("tests.mutants.scripted:tool_results_never_reach_the_model", tmp_path, monkeypatch)


class _SwapsOnlyFromRace:
    """A swapper the machine never scheduled while the session ran (2 swaps: its own check),
    until race `swaps_from` (None: never); every race is counted."""

    races = 0
    swaps_from: int | None = None

    def __init__(self, a, b, **_kwargs):
        self.summary = None

    def __enter__(self):
        type(self).races += 1
        return self

    def __exit__(self, *exc):
        judged = self.swaps_from is not None and type(self).races >= self.swaps_from
        self.summary = {"restored": True, "stopped": "stop", "swaps": 900 if judged else 2, "mode": "exchange", "elapsed_s": 0.01}


def _race(monkeypatch, tmp_path, swaps_from):
    import conformance.test_scope as scope_checks

    swapper = type("Swapper", (_SwapsOnlyFromRace,), {"races": 0, "swaps_from": swaps_from})
    monkeypatch.setattr(scope_checks, "SwapRace", swapper)
    but = adapter_for(get_spec("fake"), "offline", tmp_path)
    return scope_checks, swapper, but


def test_a_race_the_swapper_missed_is_run_again_and_judged_when_it_swaps(tmp_path, monkeypatch):
    """Races 1 and 2: no swap met a read. Race 3 swapped too, but every read still showed the
    in-root file (its swaps fell before or after the reads): missed. Race 4: one read met the
    swapped `d` and was refused: judged, and the repeats end."""
    scope_checks, swapper, but = _race(monkeypatch, tmp_path, swaps_from=3)
    reads = but.run_tools

    def run_tools(calls, **kwargs):
        run = reads(calls, **kwargs)
        if swapper.races >= 4:  # one read met the swapped d: a correct backend refused it
            run.model_saw = ["refused: outside-root: d/inside.txt", *run.model_saw[1:]]
        return run

    monkeypatch.setattr(but, "run_tools", run_tools)
    scope_checks.test_swap_race_contained(but)
    assert swapper.races == 4


def test_races_the_swapper_always_missed_skip_budget_after_the_last(tmp_path, monkeypatch):
    scope_checks, swapper, but = _race(monkeypatch, tmp_path, swaps_from=None)
    with pytest.raises(SkipCell) as skipped:
        scope_checks.test_swap_race_contained(but)
    assert swapper.races == scope_checks.SWAP_RACES
    assert skipped.value.reason == "budget" and f"in {scope_checks.SWAP_RACES} races" in skipped.value.message
