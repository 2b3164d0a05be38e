"""A slow-starting runtime is judged by its behaviour, not by the machine's speed: the
adapter's start-up allowance is added to the deadline of every session whose check does not
test the deadline itself, and never to one that does (kit/adapters.py BackendUnderTest.run,
run_stalled; kit/loopback_adapter.py LoopbackAdapter.startup_allowance_s)."""

from __future__ import annotations

from harnesscheck.backends.registry import BUILTIN_SPECS
from harnesscheck.core.contracts import OutcomeStatus
from harnesscheck.kit.harness_adapter import HarnessAdapter
from harnesscheck.kit.scripted_adapter import ScriptedAdapter


class SlowStart(HarnessAdapter):
    """The claude fake, starting `delay` seconds late (before its first line), with a
    declared start-up allowance."""

    delay = 1.5
    allowance = 0.0

    def load_fixture(self, scenario):
        data = super().load_fixture(scenario)
        data["steps"].insert(0, {"delay": self.delay})
        return data

    def startup_allowance_s(self) -> float:
        return self.allowance


def test_in_process_and_fake_adapters_add_nothing(tmp_path):
    but = ScriptedAdapter(BUILTIN_SPECS["fake"], "offline", tmp_path)
    run = but.run("success", timeout_s=7.0)
    assert (run.timeline.timeout_s, run.timeline.allowance_s) == (7.0, 0.0)


def test_the_allowance_is_added_to_an_ordinary_session_deadline(tmp_path):
    """The same slow start times out without the allowance and is judged ok with it."""
    but = SlowStart(BUILTIN_SPECS["claude-code"], "offline", tmp_path)
    short = but.run("success", timeout_s=0.5)
    assert short.outcome.status == OutcomeStatus.truncated and short.timeline.allowance_s == 0.0
    but.allowance = 30.0
    run = but.run("success", timeout_s=0.5)
    assert (run.timeline.timeout_s, run.timeline.allowance_s) == (30.5, 30.0)
    assert run.outcome.status == OutcomeStatus.ok, run.outcome.message


def test_a_check_of_the_deadline_itself_keeps_its_deadline(tmp_path):
    but = SlowStart(BUILTIN_SPECS["claude-code"], "offline", tmp_path)
    but.allowance = 30.0
    run = but.run("success", timeout_s=0.5, allowance=False)
    assert (run.timeline.timeout_s, run.timeline.allowance_s) == (0.5, 0.0)
    assert run.outcome.status == OutcomeStatus.truncated


def test_run_stalled_never_adds_it_but_waits_at_least_that_long_first(tmp_path):
    """run_stalled's deadline is the subject: no allowance on top, but its first deadline is
    never shorter than the runtime's start-up (a deadline inside start-up judges nothing)."""
    but = SlowStart(BUILTIN_SPECS["claude-code"], "offline", tmp_path)
    but.delay = 0.0
    but.allowance = 3.0
    run = but.run_stalled("timeout_mid_stream", timeout_s=0.1, blind_timeout_s=2.0)
    assert (run.timeline.timeout_s, run.timeline.allowance_s) == (3.0, 0.0)
    assert run.outcome.status == OutcomeStatus.truncated


def test_loopback_allowance_is_the_declared_cold_start_or_twice_the_measured_start_up(tmp_path, monkeypatch):
    from harnesscheck.kit import loopback_adapter as loopback

    monkeypatch.setattr(loopback, "_STARTUP_SEEN", {})
    warmed = []

    def measure(self):  # the real one runs an untimed session of the pinned CLI first
        warmed.append(self.spec.id)
        loopback._STARTUP_SEEN[self.spec.id] = 1.0

    monkeypatch.setattr(loopback.LoopbackAdapter, "measure_startup", measure)
    but = object.__new__(loopback.LoopbackAdapter)  # no pinned CLI needed to ask its allowance
    but.spec = BUILTIN_SPECS["opencode"]
    assert but.spec.cold_start_s > 0
    assert but.startup_allowance_s() == but.spec.cold_start_s  # measured 1 s: the declared figure is larger
    assert but.startup_allowance_s() == but.spec.cold_start_s and warmed == ["opencode"]  # measured once
    loopback._STARTUP_SEEN["opencode"] = but.spec.cold_start_s  # a session that started as slowly as declared
    assert but.startup_allowance_s() == loopback.STARTUP_HEADROOM * but.spec.cold_start_s
    but.spec = BUILTIN_SPECS["claude-code"]
    assert but.startup_allowance_s() == loopback.STARTUP_HEADROOM * 1.0  # nothing declared: twice the measured
    assert warmed == ["opencode", "claude-code"]


def test_a_deadline_the_kit_repeats_when_too_early_gets_only_the_measured_start_up(tmp_path, monkeypatch):
    """run_stalled's first deadline and the runaway check's: twice the start-up measured in this
    process, not the declared worst case (a deadline that came first is seen and lengthened);
    the declared figure only while nothing was measured."""
    from harnesscheck.kit import loopback_adapter as loopback

    monkeypatch.setattr(loopback, "_STARTUP_SEEN", {})
    monkeypatch.setattr(loopback.LoopbackAdapter, "measure_startup", lambda self: loopback._STARTUP_SEEN.setdefault(self.spec.id, 1.5))
    but = object.__new__(loopback.LoopbackAdapter)
    but.spec = BUILTIN_SPECS["opencode"]
    assert but.measured_allowance_s() == loopback.STARTUP_HEADROOM * 1.5 < but.startup_allowance_s() == but.spec.cold_start_s
    loopback._STARTUP_SEEN["opencode"] = 0.0  # the warm-up session failed: nothing measured
    assert but.measured_allowance_s() == but.spec.cold_start_s
    slow = SlowStart(BUILTIN_SPECS["claude-code"], "offline", tmp_path)
    slow.allowance = 3.0
    assert slow.measured_allowance_s() == 3.0  # an adapter that measures nothing: its allowance


def test_the_first_401_is_the_model_servers_record_on_the_monotonic_clock(tmp_path):
    """The watchdog moment `auth_refused` (errors.auth-stops-within-5s): None until the scripted
    server answered a model turn 401, then the time it did."""
    import json
    import time
    import urllib.error
    import urllib.request

    from harnesscheck.kit.adapters import Setup
    from harnesscheck.kit.loopback_adapter import LoopbackAdapter
    from harnesscheck.loopback.scenario import Scenario, status_turn
    from harnesscheck.loopback.server import ScriptedModelServer

    but = object.__new__(LoopbackAdapter)
    with ScriptedModelServer(Scenario("auth", (status_turn(401),)), expected_key="k") as server:
        setup = Setup(transport=None, extra={"server": server})  # type: ignore[arg-type]
        assert but.auth_refused_at(setup) is None
        before = time.monotonic()
        body = json.dumps({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}).encode()
        request = urllib.request.Request(server.base_url + "/v1/messages", data=body, headers={"x-api-key": "k", "content-type": "application/json"})
        try:
            urllib.request.urlopen(request, timeout=10)
        except urllib.error.HTTPError as exc:
            assert exc.code == 401
        refused = but.auth_refused_at(setup)
    assert refused is not None and before - 0.5 <= refused <= time.monotonic()
