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
