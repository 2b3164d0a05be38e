"""The kit's timing checks judge only facts that came to be: a deadline is trusted to have
fired after the upstream stalled only when the upstream recorded the stall in time, cancel
is sent on the observed stall, and a too-slow machine skips `budget` instead of failing
(kit/adapters.py run_stalled, Timeline; fake_clis/_fakecli.py progress records)."""

from __future__ import annotations

import re
import time

import pytest

from harnesscheck.backends.registry import BUILTIN_SPECS
from harnesscheck.core.contracts import OutcomeStatus
from harnesscheck.kit.harness_adapter import HarnessAdapter
from harnesscheck.kit.scripted_adapter import ScriptedAdapter
from harnesscheck.kit.session import SkipCell


class SlowToStall(HarnessAdapter):
    """The claude fake takes 30 s more before its hang than any deadline the test allows."""

    def load_fixture(self, scenario):
        data = super().load_fixture(scenario)
        if scenario == "timeout_mid_stream":
            steps = data["steps"]
            hang = next(i for i, s in enumerate(steps) if "hang" in s)
            steps.insert(hang, {"delay": 30})
        return data


def test_a_stall_in_time_is_judged_with_its_partial_text(tmp_path):
    but = ScriptedAdapter(BUILTIN_SPECS["fake"], "offline", tmp_path)
    run = but.run_stalled("timeout_mid_stream", timeout_s=0.3, blind_timeout_s=2.0)
    tl = run.timeline
    assert tl.observed and tl.stalled_by(tl.started + tl.timeout_s)
    assert run.outcome.status == OutcomeStatus.truncated
    assert run.facts.partial_text and run.facts.partial_text in run.outcome.text


def test_a_run_that_ends_before_any_deadline_is_judged_as_it_is(tmp_path):
    but = ScriptedAdapter(BUILTIN_SPECS["fake"], "offline", tmp_path)
    run = but.run_stalled("success", timeout_s=30, blind_timeout_s=30)
    assert run.timeline.stalled is None and run.outcome.status == OutcomeStatus.ok


def test_an_upstream_too_slow_to_stall_skips_budget_after_its_retries(tmp_path):
    but = SlowToStall(BUILTIN_SPECS["claude-code"], "offline", tmp_path)
    but.MAX_RETRY_TIMEOUT_S = 2.0
    but.warm_up()  # once per process: its untimed success run is not one of the timed runs
    warm = len(but.spawned())
    with pytest.raises(SkipCell) as info:
        but.run_stalled("timeout_mid_stream", timeout_s=0.2, blind_timeout_s=2.0)
    assert info.value.reason == "budget"
    assert re.search(r"in 3 run\(s\) \(timeout_s 0\.2 and [\d.]+ and 2\): ", info.value.message)  # then capped
    assert len(but.spawned()) - warm == but.MAX_STALLED_RUNS == 3


def test_warm_up_runs_one_untimed_success_once_per_process_and_backend(tmp_path, monkeypatch):
    from harnesscheck.kit import adapters

    monkeypatch.setattr(adapters, "_WARMED", set())
    first = HarnessAdapter(BUILTIN_SPECS["codex"], "offline", tmp_path / "a")
    first.warm_up()
    assert [r["stdin"].endswith("Say hello.") for r in first.spawned()] == [True]
    first.warm_up()
    second = HarnessAdapter(BUILTIN_SPECS["codex"], "offline", tmp_path / "b")
    second.warm_up()
    assert len(first.spawned()) == 1 and second.spawned() == []
    other = HarnessAdapter(BUILTIN_SPECS["cursor"], "offline", tmp_path / "c")
    other.warm_up()
    assert len(other.spawned()) == 1  # per backend


class SeesTeardown(HarnessAdapter):
    """Notes the linger and term grace of every transport it builds."""

    seen: list[tuple[float, float]]

    def prepare(self, *args, **kwargs):
        setup = super().prepare(*args, **kwargs)
        self.seen.append((setup.transport.linger_s, setup.transport.term_grace_s))
        return setup


def test_teardown_s_is_the_hosts_linger_and_term_grace_for_that_run_only(tmp_path):
    but = SeesTeardown(BUILTIN_SPECS["claude-code"], "offline", tmp_path)
    but.seen = []
    but.run("success", teardown_s=0.25)
    but.run("success")
    assert but.seen == [(0.25, 0.25), (2.0, 2.0)]  # then the Settings defaults again


class SlowToSpawn(HarnessAdapter):
    """A backend that spends 0.6 s before it spawns its CLI (its deadline counts from run_session,
    so that time is part of the session's budget, as a wait for a session slot is)."""

    def prepare(self, *args, **kwargs):
        setup = super().prepare(*args, **kwargs)
        invocation = setup.transport.invocation

        def slow_invocation(*a, **kw):
            time.sleep(0.6)
            return invocation(*a, **kw)

        setup.transport.invocation = slow_invocation
        return setup


def test_the_retry_outlasts_a_slow_start_seen_in_the_first_run(tmp_path):
    """A deadline shorter than the backend's own start (0.2 s vs 0.6 s before the spawn) is never
    judged as the backend's fault: the run is repeated until a deadline outlasts the slow start
    and the upstream's stall came first, and that run is judged on its facts."""
    but = SlowToSpawn(BUILTIN_SPECS["codex"], "offline", tmp_path)
    run = but.run_stalled("timeout_mid_stream", timeout_s=0.2, blind_timeout_s=2.0)
    tl = run.timeline
    assert tl.timeout_s > 0.6  # retried past the 0.6 s the backend spends before its CLI starts
    assert tl.stalled_by(tl.started + tl.timeout_s) and run.outcome.status == OutcomeStatus.truncated
    assert run.facts.partial_text in run.outcome.text


@pytest.mark.parametrize("backend", ["claude-code", "codex", "cursor"])
def test_harness_stall_facts_come_from_the_fake(backend, tmp_path):
    but = HarnessAdapter(BUILTIN_SPECS[backend], "offline", tmp_path)
    run = but.run_stalled("timeout_tree", timeout_s=0.5, blind_timeout_s=2.0)
    tl = run.timeline
    assert tl.observed and tl.started < tl.last_output <= tl.stalled < tl.started + tl.timeout_s
    assert len(but.child_pids(run)) >= 3  # every spawn was recorded before the stall
    assert run.facts.partial_text and run.facts.partial_text in run.outcome.text


def test_cancel_is_sent_on_the_observed_stall(tmp_path):
    but = HarnessAdapter(BUILTIN_SPECS["codex"], "offline", tmp_path)
    run = but.run("timeout_mid_stream", timeout_s=120, cancel_on_stall=True, cancel_after_s=60)
    tl = run.timeline
    assert tl.stalled is not None and tl.cancel_sent is not None
    assert tl.stalled <= tl.cancel_sent < tl.started + 60  # the stall, not the fallback timer, sent it
    assert run.outcome.status == OutcomeStatus.cancelled


def test_linger_grace_is_timed_from_the_result_line(tmp_path):
    but = HarnessAdapter(BUILTIN_SPECS["cursor"], "offline", tmp_path)
    run = but.run("linger_after_result", timeout_s=120)
    tl = run.timeline
    assert tl.last_output is not None and tl.started < tl.last_output <= tl.stalled < tl.ended
