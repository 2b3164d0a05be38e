"""Checks that read different evidence from the same session share it where sessions cost
seconds (kit/adapters.py BackendUnderTest.shared_run): one session per scenario, backend and
level in a pytest run, and only one that ended ok, so one check's crash never decides another's
verdict."""

from __future__ import annotations

from harnesscheck.backends.registry import BUILTIN_SPECS
from harnesscheck.core.contracts import OutcomeStatus
from harnesscheck.kit.scripted_adapter import ScriptedAdapter


class Sharing(ScriptedAdapter):
    """The in-process fake, sharing as a loopback adapter does, counting its sessions."""

    SHARES_SESSIONS = True

    def run(self, scenario, **kwargs):
        self.sessions = getattr(self, "sessions", 0) + 1
        return super().run(scenario, **kwargs)


def test_a_session_that_ended_ok_is_shared_by_the_next_check(tmp_path):
    shared: dict = {}
    first, second = (Sharing(BUILTIN_SPECS["fake"], "offline", tmp_path / n) for n in ("a", "b"))
    first.shared_runs = second.shared_runs = shared
    run = first.shared_run("success")
    assert run.outcome.status == OutcomeStatus.ok and first.sessions == 1
    assert second.shared_run("success") is run and getattr(second, "sessions", 0) == 0
    assert second.shared_run("served_model_mismatch") is not run  # another scenario: its own session
    assert second.sessions == 1


def test_a_session_that_did_not_end_ok_is_never_shared(tmp_path):
    shared: dict = {}
    first, second = (Sharing(BUILTIN_SPECS["fake"], "offline", tmp_path / n) for n in ("a", "b"))
    first.shared_runs = second.shared_runs = shared
    failed = first.shared_run("auth_401")
    assert failed.outcome.status != OutcomeStatus.ok and not shared
    assert second.shared_run("auth_401") is not failed and second.sessions == 1


def test_nothing_is_shared_outside_a_run_of_the_suite_or_where_sessions_are_cheap(tmp_path):
    alone = Sharing(BUILTIN_SPECS["fake"], "offline", tmp_path / "a")  # no `but` fixture: shared_runs None
    assert alone.shared_run("success") is not alone.shared_run("success") and alone.sessions == 2
    cheap = ScriptedAdapter(BUILTIN_SPECS["fake"], "offline", tmp_path / "b")
    cheap.shared_runs = {}
    assert cheap.shared_run("success") is not cheap.shared_run("success") and not cheap.shared_runs


def test_a_session_with_host_canaries_is_shared_only_with_checks_that_ask_for_them(tmp_path):
    """shared_run(canaries=True): the parent env carries parent_env_canaries(), made once for the
    session and handed to every check that shares it (run.canaries); a plain session is another."""
    shared: dict = {}
    first, second = (Sharing(BUILTIN_SPECS["fake"], "offline", tmp_path / n) for n in ("a", "b"))
    first.shared_runs = second.shared_runs = shared
    planted = first.shared_run("success", canaries=True)
    assert planted.canaries and planted.canaries == {k: planted.parent_env[k] for k in planted.canaries}
    assert set(planted.canaries) >= {"ANTHROPIC_API_KEY", "OPENAI_API_KEY"}
    assert second.shared_run("success", canaries=True) is planted
    plain = second.shared_run("success")
    assert plain is not planted and plain.canaries == {} and not set(planted.canaries) & set(plain.parent_env)
    alone = Sharing(BUILTIN_SPECS["fake"], "offline", tmp_path / "c")  # nothing shared: canaries of its own each time
    one, two = alone.shared_run("success", canaries=True), alone.shared_run("success", canaries=True)
    assert one.canaries and one.canaries != two.canaries


def test_a_warm_up_session_that_ended_ok_is_the_shared_plain_session(tmp_path, monkeypatch):
    """LoopbackAdapter warms up once per process and backend (an untimed `success` session,
    no canaries, no strace): if it ended ok it is what shared_run("success") gives, so the
    checks that read only its evidence run no session of their own; a canary session is another."""
    from harnesscheck.kit import loopback_adapter

    class WarmingUp(Sharing):
        WARM_UP_TIMEOUT_S = loopback_adapter.LoopbackAdapter.WARM_UP_TIMEOUT_S
        startup_allowance_s = loopback_adapter.LoopbackAdapter.startup_allowance_s
        measure_startup = loopback_adapter.LoopbackAdapter.measure_startup
        trace_opens = True  # as a check that traces the CLI's opens sets it

        def run(self, scenario, **kwargs):
            self.traced = [*getattr(self, "traced", []), self.trace_opens]
            return super().run(scenario, **kwargs)

    monkeypatch.setattr(loopback_adapter, "_STARTUP_SEEN", {})
    shared: dict = {}
    first, second = (WarmingUp(BUILTIN_SPECS["fake"], "offline", tmp_path / n) for n in ("a", "b"))
    first.shared_runs = second.shared_runs = shared
    plain = first.shared_run("success")
    assert first.sessions == 1, "the warm-up is the shared session, not one before it"
    assert first.traced == [False] and first.trace_opens is True, "the warm-up runs untraced; the cell's setting is back"
    assert plain.outcome.status == OutcomeStatus.ok and plain.canaries == {}
    assert second.shared_run("success") is plain and getattr(second, "sessions", 0) == 0
    planted = second.shared_run("success", canaries=True)  # a canary session is another
    assert planted is not plain and planted.canaries and second.sessions == 1


def test_the_warm_up_is_recorded_by_the_cells_that_read_it_not_by_the_cell_that_triggered_it(tmp_path, monkeypatch):
    """Which cell a worker runs first must not change the published matrix: the cell whose
    allowance triggered the warm-up and then skipped says no containment (as it does when
    another cell warmed up first); a cell that reads the warm-up through shared_run says how
    that session was contained."""
    from harnesscheck.kit import loopback_adapter

    class WarmingUp(Sharing):
        WARM_UP_TIMEOUT_S = loopback_adapter.LoopbackAdapter.WARM_UP_TIMEOUT_S
        startup_allowance_s = loopback_adapter.LoopbackAdapter.startup_allowance_s
        measure_startup = loopback_adapter.LoopbackAdapter.measure_startup
        trace_opens = False

        def run(self, scenario, **kwargs):
            run = super().run(scenario, **kwargs)
            run.outcome = run.outcome.model_copy(update={"containment": "bwrap"})
            self.__dict__.setdefault("containments", set()).add("bwrap")  # as adapters.run records it
            return run

    monkeypatch.setattr(loopback_adapter, "_STARTUP_SEEN", {})
    shared: dict = {}
    trigger, reader, earlier = (WarmingUp(BUILTIN_SPECS["fake"], "offline", tmp_path / n) for n in ("a", "b", "c"))
    trigger.shared_runs = reader.shared_runs = earlier.shared_runs = shared
    trigger.startup_allowance_s()  # a check that asks for its allowance, then skips
    assert trigger.sessions == 1 and not getattr(trigger, "containments", None), "the warm-up leaked into the triggering cell"
    assert reader.shared_run("success").outcome.containment == "bwrap"
    assert reader.containments == {"bwrap"} and getattr(reader, "sessions", 0) == 0
    earlier.__dict__["containments"] = {"guards"}  # what a cell recorded before it triggered a warm-up is kept
    monkeypatch.setattr(loopback_adapter, "_STARTUP_SEEN", {})
    earlier.startup_allowance_s()
    assert earlier.containments == {"guards"}
