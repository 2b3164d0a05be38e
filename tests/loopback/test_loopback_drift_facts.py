"""Drift that compares what matters (loopback/drift.py facts): ranked, behaviour first, and
the stored baselines of claude 2.1.197 and 2.1.332 show the changes a maintainer acts on
in the first screen (offline: both baselines are stored in fixtures/claude/drift/)."""

from __future__ import annotations

import json

import pytest

from harnesscheck.loopback.drift import baseline_path, compare_baselines, diff_facts, print_changes


def test_changes_are_ranked_behaviour_then_removed_changed_added():
    old = {"offered_tools": ["a", "b"], "max_tokens": 64000, "beta_headers": ["x", "y"], "exit_code": 1}
    new = {"offered_tools": ["a", "b", "c"], "max_tokens": 128000, "beta_headers": ["y", "z"], "exit_code": 1}
    changes = sorted(diff_facts("s", old, new))
    assert [c.line().split()[0:3] for c in changes] == [
        ["!+", "s", "offered_tools:"],
        ["-", "s", "beta_headers:"],
        ["~", "s", "max_tokens:"],
        ["+", "s", "beta_headers:"],
    ]
    assert changes[0].behaviour and not any(c.behaviour for c in changes[1:])


def test_open_maps_fold_to_their_keys():
    changes = diff_facts("s", {"tool_flags": {}}, {"tool_flags": {"DeferredToolPlaceholder": ["defer_loading"]}})
    assert [c.fact for c in changes] == ["tool_flags[DeferredToolPlaceholder]"]


def _stored(version: str) -> dict:
    path = baseline_path("claude", version)
    if not path.is_file():
        pytest.skip(f"no stored drift baseline {path}")
    return json.loads(path.read_text(encoding="utf-8"))


def test_drift_between_the_claude_columns_names_what_changed_in_its_first_screen(capsys):
    changes = compare_baselines(_stored("2.1.197"), _stored("2.1.332"))
    print_changes("claude 2.1.197 -> 2.1.332", changes, None)
    screen = "\n".join(capsys.readouterr().out.splitlines()[:40])
    assert "DeferredToolPlaceholder" in screen and "defer_loading" in screen
    assert "default_model: claude-sonnet-5 -> claude-sonnet-5-5" in screen
    import re

    assert re.search(r"rate_limit_429 +retries: 0 -> [1-9]", screen), screen  # 2.1.197 failed at once, 2.1.332 retries
    assert re.search(r"side_effects: .*cc-socks", screen), screen  # the messaging socket (in its private runtime dir)
    assert any(c.behaviour for c in changes)


def test_stored_baselines_hold_no_machine_path_or_port():
    import os
    import re

    for version in ("2.1.197", "2.1.332"):
        text = json.dumps(_stored(version))
        assert os.path.expanduser("~") not in text and "/tmp/" not in text
        assert not re.search(r"127\.0\.0\.1:\d", text)


def test_every_refusal_marker_is_seen_in_a_recorded_refusal():
    """No dead marker: each text the audit takes as the CLI refusing a built-in occurs in a
    refusal the real CLI gave (a loopback recording or a stored drift baseline)."""
    from harnesscheck.backends.claude_code.audit import _REFUSED_MARKERS
    from harnesscheck.loopback.drift import stored_recordings

    texts = [p.read_text(encoding="utf-8") for p in stored_recordings("claude").values()]
    for version in ("2.1.197", "2.1.332"):
        texts.append(str(_stored(version)["scenarios"]["native_tool_use"].get("refusal_text")))
    dead = [m for m in _REFUSED_MARKERS if not any(m in t for t in texts)]
    assert not dead, f"refusal markers no recorded refusal shows: {dead}"
