"""The kit's TOCTOU swapper (kit/swapper.py, scope.swap-race-contained): it swaps, it stops at
each of its bounds and on the kit's stop, and it always puts the real directory back."""

from __future__ import annotations

import io
import json
import os

import pytest

from harnesscheck.kit import swapper
from harnesscheck.kit.swapper import SwapRace


@pytest.fixture
def pair(tmp_path):
    a, outside = tmp_path / "root" / "d", tmp_path / "outside"
    a.mkdir(parents=True)
    outside.mkdir()
    (a / "inside.txt").write_text("in")
    (outside / "inside.txt").write_text("out")
    b = tmp_path / "root" / "d.swap"
    os.symlink(os.path.join("..", "outside"), b)
    return a, b


def _intact(a, b) -> bool:
    return a.is_dir() and not a.is_symlink() and b.is_symlink() and (a / "inside.txt").read_text() == "in"


def test_an_odd_number_of_swaps_is_undone_at_the_end(pair):
    a, b = pair
    out = io.StringIO()
    summary = swapper.run(str(a), str(b), max_s=60, max_swaps=3, mean_gap_s=0, out=out, stop_fd=None)
    assert summary["swaps"] == 3 and summary["stopped"] == "max_swaps" and summary["restored"] and summary["errors"] == 0
    assert out.getvalue().splitlines()[0] == "ready" and json.loads(out.getvalue().splitlines()[-1]) == summary
    assert _intact(a, b)


def test_the_time_bound_ends_it(pair):
    a, b = pair
    summary = swapper.run(str(a), str(b), max_s=0, max_swaps=10**6, mean_gap_s=0.001, out=io.StringIO(), stop_fd=None)
    assert summary["stopped"] == "max_s" and summary["swaps"] == 2 and summary["restored"]
    assert _intact(a, b)


def test_two_renames_where_renameat2_is_missing(pair, monkeypatch):
    a, b = pair
    monkeypatch.setattr(swapper._Exchanger, "__init__", _without_renameat2)
    ex = swapper._Exchanger(str(a), str(b))
    ex.swap()
    assert ex.mode == "rename" and a.is_symlink() and (a / "inside.txt").read_text() == "out" and b.is_dir()
    summary = swapper.run(str(a), str(b), max_s=60, max_swaps=5, mean_gap_s=0, out=io.StringIO(), stop_fd=None)
    assert summary["mode"] == "rename" and summary["restored"]
    assert a.is_symlink(), "run() restores the state it started from"
    ex.swap()
    assert _intact(a, b)


def _without_renameat2(self, a, b):
    self.a, self.b, self.hold = a, b, a + ".hold"
    self.mode, self.flipped, self._renameat2 = "rename", False, None


def test_the_kit_stops_it_and_gets_its_report(pair):
    a, b = pair
    with SwapRace(a, b, max_s=120) as race:
        assert race.proc is not None
    assert race.proc is None and race.summary["stopped"] == "stop" and race.summary["restored"], race.summary
    assert race.summary["swaps"] >= 2 and race.summary["mode"] in ("exchange", "rename")
    assert _intact(a, b)
