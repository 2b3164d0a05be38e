"""The offline adapter of in-process scripted backends: `fake` and any third-party backend built
on FakeTransport (its `script` attribute), with the canonical scenarios as FakeScripts."""

from __future__ import annotations

import time

from harnesscheck.core.contracts import Usage
from harnesscheck.kit.adapters import BackendUnderTest, Setup
from harnesscheck.kit.session import Facts, Progress, SkipCell

# ---------------------------------------------------------------------------------------
# Scripted (in-process) backends: fake, and anything built on FakeTransport


def scripted_scenarios() -> dict[str, tuple[object, Facts]]:
    """Canonical scenarios as FakeScripts, with the facts each one contains."""
    from harnesscheck.backends.fake import FakeScript, FakeTurn
    from harnesscheck.backends.fake import ToolCall as FakeCall
    from harnesscheck.core.contracts import ErrorClass as E

    u = Usage(input=120, output=30, cache_read=7)
    cached = (Usage(input=300, output=20, cache_read=1200, cache_write=800, reasoning=12), Usage(input=40, output=15, cache_read=2000, reasoning=9))
    err = lambda cls, msg, **kw: (FakeScript([FakeTurn(error=cls, error_message=msg, **kw)]), Facts())  # noqa: E731
    return {
        "success": (FakeScript([FakeTurn(text="The answer is 42.", usage=u, usage_repeats=3)]), Facts(usage=u, served_model="fake-model-1")),
        "repeated_usage": (
            FakeScript(
                [
                    FakeTurn(text="reading", usage=u, usage_repeats=4, tool_calls=[FakeCall("list_dir", {"path": "."})]),
                    FakeTurn(text="done", usage=Usage(input=200, output=10), usage_repeats=5),
                ]
            ),
            Facts(usage=u + Usage(input=200, output=10), served_model="fake-model-1"),
        ),
        "tool_calls": (
            FakeScript([FakeTurn(tool_calls=[FakeCall("read_file", {"path": "README.md"})]), FakeTurn(text="README greets you.")]),
            Facts(served_model="fake-model-1"),
        ),
        "max_turns": (
            FakeScript([FakeTurn(text="looking", tool_calls=[FakeCall("list_dir", {"path": "."})])], repeat_last=True),
            Facts(),
        ),
        "not_logged_in": err(E.auth, "Not logged in"),
        "auth_401": err(E.auth, "401 invalid x-api-key"),
        "usage_limit": err(E.quota, "You've hit your usage limit"),
        "rate_limit_429": err(E.rate_limit, "429 rate limited", retry_after_s=30.0),
        "overloaded_529": err(E.overloaded, "529 Overloaded"),
        "context_overflow": err(E.context_overflow, "prompt is too long"),
        "model_not_found": err(E.model_unavailable, "model not found"),
        "network_error": err(E.network, "connection reset by peer"),
        "timeout_mid_stream": (
            FakeScript(
                [
                    FakeTurn(text="partial answer", tool_calls=[FakeCall("list_dir", {"path": "."})]),
                    FakeTurn(text="never", delay_s=3600),
                ]
            ),
            Facts(partial_text="partial answer"),
        ),
        "served_model_mismatch": (
            FakeScript([FakeTurn(text="hi", model="fake-model-other")]),
            Facts(served_model="fake-model-other", requested_model="fake-model-1"),
        ),
        "cached_usage": (
            FakeScript(
                [
                    FakeTurn(text="reading", usage=cached[0], tool_calls=[FakeCall("list_dir", {"path": "."})]),
                    FakeTurn(text="done", usage=cached[1]),
                ]
            ),
            Facts(usage=cached[0] + cached[1], served_model="fake-model-1"),
        ),
        "helper_model": (
            FakeScript([FakeTurn(text="hi", usage=u, helper_usage={"fake-helper-mini": Usage(input=900, output=90)})]),
            Facts(usage=u, served_model="fake-model-1", helper_models=("fake-helper-mini",)),
        ),
    }


class ScriptedAdapter(BackendUnderTest):
    name = "scripted"

    def __init__(self, spec, level, tmp_path):
        super().__init__(spec, level, tmp_path)
        self._transport = None

    def transport(self, **settings):
        """One transport per adapter, so concurrent sessions share it as a host would."""
        if settings or getattr(self._local, "settings", None):
            return super().transport(**settings)
        if self._transport is None:
            self._transport = super().transport()
        return self._transport

    def prepare(self, scenario, ws, *, tool_calls, model, timeout_s, echo) -> Setup:
        import dataclasses

        from harnesscheck.backends.fake import FakeScript, FakeTurn
        from harnesscheck.backends.fake import ToolCall as FakeCall

        if scenario == "tools":
            calls = [FakeCall(c.name, dict(c.args)) for c in tool_calls or []]
            script = _WatchedScript(FakeScript([FakeTurn(tool_calls=calls), FakeTurn(text="done")]))
            return Setup(_Scripted(self.transport(), script), Facts(), model="fake-model-1", extra={"script": script})
        table = scripted_scenarios()
        if scenario not in table:
            raise SkipCell("unsupported-by-backend", f"{self.spec.id} is in-process: no {scenario} scenario")
        script, facts = table[scenario]
        if echo:
            script = FakeScript(
                [dataclasses.replace(t, error_message=f"{t.error_message} ({' '.join(echo)})") if t.error else t for t in script.turns],
                repeat_last=script.repeat_last,
            )
        script = _WatchedScript(script)
        return Setup(_Scripted(self.transport(), script), facts, model=facts.requested_model or "fake-model-1", extra={"script": script})

    def observes_stalls(self) -> bool:
        return True

    def stall_progress(self, setup):
        script = setup.extra.get("script")
        if script is None:
            return None
        return Progress(script.stalled_at, script.stalled_at, script.latest)

    def collect(self, run, setup, request) -> None:
        super().collect(run, setup, request)
        log = setup.transport.inner.session_log(request.session_id)
        run.model_saw = list(log.model_saw)
        run.model_calls = log.model_calls
        run.extra_tools_offered = list(log.tools_offered)
        run.extra_system = log.system

    def provenance(self) -> str:
        return f"in-process scripts (kit/scripted_adapter.py scripted_scenarios) driving {self.spec.factory}"

    def system_seen(self, run):
        return getattr(run, "extra_system", None)

    def tools_offered(self, run):
        return getattr(run, "extra_tools_offered", None)


class _WatchedScript:
    """A FakeScript that notes when the backend first asks for a stalling turn (one with a
    delay): every earlier turn is done then, its text streamed and its tools called."""

    def __init__(self, script):
        self.script = script
        self.turns, self.repeat_last = script.turns, script.repeat_last
        self.stalled_at: float | None = None
        self.latest: float | None = None  # when a turn was last asked for

    def turn(self, index: int):
        turn = self.script.turn(index)
        self.latest = time.monotonic()
        if turn is not None and turn.delay_s > 0 and self.stalled_at is None:
            self.stalled_at = self.latest
        return turn


class _Scripted:
    """Runs one session of a shared scripted transport with this session's script."""

    def __init__(self, inner, script):
        self.inner, self.script = inner, script
        self.spec = inner.spec

    def run_session(self, request, **kwargs):
        return self.inner.run_session(request, script=self.script, **kwargs)
