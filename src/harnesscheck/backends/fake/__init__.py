"""The `fake` backend: in-process, deterministic, scripted; the reference for every check that applies.

It behaves like an api-kind backend whose "model" is a script: each turn may stream text,
report usage (repeated on every streamed chunk, as real APIs do), name the served model,
report helper-model usage, ask for tool calls, fail with an error class, or stall. The host
tool loop runs every tool call through `dispatch` (the one choke point), so refusals,
bounds and traces are the real ones. See doc/SPEC-fake.md.

    transport = FakeTransport(spec, settings)
    transport.script = FakeScript([FakeTurn(tool_calls=[ToolCall("read_file", {"path": "a"})]),
                                   FakeTurn(text="done")])
    outcome = transport.run_session(request)
    transport.session_log(outcome.session_id).model_saw   # what the model was shown

The methods below are small on purpose: each is one seam a known-bad backend in
tests/mutants overrides to reproduce one defect.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from harnesscheck.backends._guard import apply_model_guard
from harnesscheck.contain.rundir import prepare_run_dir
from harnesscheck.core.config import Settings
from harnesscheck.core.contracts import (
    BLOCKING,
    RETRYABLE,
    AgentOutcome,
    AgentSessionRequest,
    CapabilityUnsupported,
    Cost,
    ErrorClass,
    ModelVerdict,
    OutcomeStatus,
    ProviderSpec,
    Refusal,
    Usage,
    model_verdict,
)

DEFAULT_MODEL = "fake-model-1"


@dataclass(frozen=True)
class ToolCall:
    name: str
    args: dict


@dataclass
class FakeTurn:
    """One scripted model turn."""

    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=lambda: Usage(input=10, output=5))
    usage_repeats: int = 1  # streamed chunks that each repeat the message's usage
    model: str | None = None  # served model; None: the requested model (or DEFAULT_MODEL)
    helper_usage: dict[str, Usage] = field(default_factory=dict)  # sub-agent / helper models
    error: ErrorClass | None = None
    error_message: str = ""
    retry_after_s: float | None = None
    delay_s: float = 0.0  # the model "thinks" this long before the turn (a stall)


@dataclass
class FakeScript:
    turns: list[FakeTurn] = field(default_factory=lambda: [FakeTurn(text="ok")])
    repeat_last: bool = False  # keep replaying the last turn (a model that never stops)

    def turn(self, index: int) -> FakeTurn | None:
        if index < len(self.turns):
            return self.turns[index]
        return self.turns[-1] if self.repeat_last and self.turns else None

    @classmethod
    def from_prompt(cls, prompt: str) -> "FakeScript | None":
        """A prompt that is a JSON script plays that script (doc/SPEC-fake.md), so a demo or a
        test drives the fake from the command line: `{"turns": [{"text", "tool_calls": [[name,
        args]], "delay_s", "error", "error_message", "input", "output"}], "repeat_last"}`.
        Any other prompt (not a JSON object with "turns") is None: the default script."""
        text = prompt.strip()
        if not text.startswith("{"):
            return None
        try:
            data = json.loads(text)
        except ValueError:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("turns"), list):
            return None
        turns = [
            FakeTurn(
                text=str(t.get("text", "")),
                tool_calls=[ToolCall(str(name), dict(args)) for name, args in t.get("tool_calls", [])],
                delay_s=float(t.get("delay_s", 0.0)),
                error=ErrorClass(t["error"]) if t.get("error") else None,
                error_message=str(t.get("error_message", "")),
                usage=Usage(input=int(t.get("input", 10)), output=int(t.get("output", 5))),
            )
            for t in data["turns"]
            if isinstance(t, dict)
        ]
        return cls(turns, repeat_last=bool(data.get("repeat_last"))) if turns else None


@dataclass
class SessionLog:
    """What happened inside one fake session (for checks)."""

    model_calls: int = 0
    model_saw: list[str] = field(default_factory=list)  # tool results shown to the model
    tools_offered: list[str] = field(default_factory=list)  # tool names offered to the model
    system: str | None = None  # the system prompt the model was given
    trace_path: Path | None = None


@dataclass
class _Event:
    kind: str  # text | usage | model | helper_usage | tool_call
    message_id: str = ""
    text: str = ""
    usage: Usage | None = None
    model: str = ""
    call: ToolCall | None = None


class FakeTransport:
    """Scripted in-process backend. `script` may be replaced between sessions."""

    def __init__(self, spec: ProviderSpec, settings: Settings | None = None):
        self.spec = spec
        self.settings = settings or Settings()
        self.script = FakeScript()
        self._logs: dict[str, SessionLog] = {}
        self._lock = threading.Lock()

    # -- the Transport protocol ---------------------------------------------------------

    def run_session(
        self,
        request: AgentSessionRequest,
        *,
        cancel: threading.Event | None = None,
        on_text: Callable[[str], None] | None = None,
        script: FakeScript | None = None,
    ) -> AgentOutcome:
        """One scripted session (`script`, else a JSON script given as the prompt, overrides
        `self.script` for this session only), in one
        of the host's session slots (Settings.concurrency); the wait counts against timeout_s."""
        from harnesscheck.contain.process import SlotBusy, session_slot
        from harnesscheck.core.scope import require_root

        require_root(request.scope)  # as every backend: a placeholder root never runs a session
        if request.options is not None and request.options.given():  # a script has no model to pass them to
            from harnesscheck.core.contracts import OptionUnsupported

            raise OptionUnsupported(
                self.spec.id, next(iter(request.options.given())), request.model, "the fake backend's scripted model takes no request options"
            )
        started = time.monotonic()
        try:
            with session_slot(self.settings.concurrency, wait_s=request.timeout_s):
                return self._session(request, cancel, on_text, script or FakeScript.from_prompt(request.prompt), started)
        except SlotBusy as exc:
            return AgentOutcome(
                status=OutcomeStatus.truncated,
                error_class=ErrorClass.timeout,
                retryable=True,
                message=f"the session never started: {exc}",
                session_id=request.session_id,
                backend=self.spec.id,
                duration_s=time.monotonic() - started,
            )

    def session_run_dir(self, request: AgentSessionRequest) -> Path:
        """The session's run dir: fresh and private, never inside the worktree once `..` and
        symlinks are resolved (doc/SPEC-rundir.md), as every backend's; else RunDirError."""
        return prepare_run_dir(request.run_dir, forbidden=[request.scope.root], prefix="hc-fake-")

    def _session(self, request, cancel, on_text, script, started) -> AgentOutcome:
        from harnesscheck.choke.trace import Trace

        deadline = started + request.timeout_s
        session_id = request.session_id or uuid.uuid4().hex
        run_dir = self.session_run_dir(request)
        log = SessionLog(trace_path=run_dir / "trace.jsonl")
        log.tools_offered = self.offered_tools(request)
        log.system = self.system_prompt(request)
        with self._lock:
            self._logs[session_id] = log
        trace = Trace(log.trace_path, session_id=session_id)
        requested = request.model or self.settings.model
        script = script or self.script
        state = _SessionState(requested=requested)

        def finish(status: OutcomeStatus, error: ErrorClass | None = None, message: str = "", **extra):
            retryable = extra.pop("retryable", error in RETRYABLE if error else False)
            outcome = AgentOutcome(
                status=status,
                error_class=error,
                retryable=retryable,
                message=message,
                text=state.text,
                iterations=state.iterations,
                tool_calls=state.tool_calls,
                tools_used=sorted(state.tools_used),
                refusals=state.refusals,
                usage=self.fold_usage(state.usage_events),
                helper_usage=state.helper_usage,
                cost=self.cost(state),
                requested_model=requested,
                served_model=self.served_model(state),
                model_verdict=self.verdict(requested, self.served_model(state)),
                session_id=session_id,
                duration_s=time.monotonic() - started,
                terminal_event_seen=status not in (OutcomeStatus.truncated, OutcomeStatus.cancelled),
                backend=self.spec.id,
                **extra,
            )
            # The served-model guard may end an ok session (backends/_guard.py).
            outcome = apply_model_guard(outcome, self.settings.model_mismatch)
            error_class = outcome.error_class.value if outcome.error_class else None
            trace.record("session_end", status=outcome.status.value, error_class=error_class)
            return outcome

        trace.record("session_start", backend=self.spec.id)
        index = 0
        while True:
            turn = script.turn(index)
            if turn is None:
                return finish(OutcomeStatus.ok)
            if state.iterations >= request.max_iters:
                return finish(OutcomeStatus.truncated, ErrorClass.max_turns, f"stopped after {request.max_iters} turns")
            stalled = self.wait(turn.delay_s, deadline, cancel)
            if stalled == "cancelled":
                return finish(OutcomeStatus.cancelled, None, "cancelled by the host")
            if stalled == "deadline":
                return finish(OutcomeStatus.truncated, ErrorClass.timeout, f"timed out after {request.timeout_s:g} s")
            engine = request.policy_engine(session_id)
            if engine is not None and not engine.count_turn():
                return finish(OutcomeStatus.truncated, ErrorClass.budget, "stopped at the policy's turns limit")
            log.model_calls += 1
            state.iterations += 1
            if turn.error is not None:
                outcome = self.on_model_error(turn, index, log)
                if outcome is not None:
                    status = OutcomeStatus.blocked if outcome in BLOCKING else OutcomeStatus.error
                    return finish(status, outcome, self.error_message(turn, outcome), retry_after_s=turn.retry_after_s)
                continue
            calls: list[ToolCall] = []
            for event in self.stream(turn, index, requested):
                self.consume(event, state, on_text)
                if event.kind == "tool_call" and event.call is not None:
                    calls.append(event.call)
            if not calls:
                return finish(OutcomeStatus.ok)
            for call in calls:
                if cancel is not None and cancel.is_set():
                    return finish(OutcomeStatus.cancelled, None, "cancelled by the host")
                result = self.call_tool(call, request, trace, session_id)
                state.tool_calls += 1
                state.tools_used.add(call.name)
                if not result.ok:
                    self.record_refusal(state, call, result)
                log.model_saw.append(result.text)
            limit = self.policy_limit_reached(engine)
            if limit:
                return finish(OutcomeStatus.truncated, ErrorClass.budget, f"stopped at the policy's {limit} limit")
            index += 1

    def complete(self, prompt, *, system=None, model=None, tools=None, timeout_s=None) -> AgentOutcome:
        """Tool-less one-shot: the first scripted turn's text. Tools are refused before any work."""
        if tools:
            raise CapabilityUnsupported(self.spec.id, "tools in complete() (use run_session)")
        turn = self.script.turn(0) or FakeTurn()
        served = turn.model or model or self.settings.model or DEFAULT_MODEL
        if turn.error is not None:
            status = OutcomeStatus.blocked if turn.error in BLOCKING else OutcomeStatus.error
            return AgentOutcome(
                status=status, error_class=turn.error, retryable=turn.error in RETRYABLE, message=self.error_message(turn, turn.error), backend=self.spec.id
            )
        return apply_model_guard(
            AgentOutcome(
                status=OutcomeStatus.ok,
                text=turn.text,
                usage=turn.usage,
                requested_model=model,
                served_model=served,
                model_verdict=model_verdict(model, served),
                backend=self.spec.id,
                terminal_event_seen=True,
                iterations=1,
            ),
            self.settings.model_mismatch,
        )

    def session_log(self, session_id: str) -> SessionLog:
        with self._lock:
            return self._logs[session_id]

    # -- seams (each one is overridden by exactly one known-bad backend) ---------------

    def stream(self, turn: FakeTurn, index: int, requested: str | None) -> Iterator[_Event]:
        """The turn as streamed events: text deltas, usage repeated per chunk, model, tool calls."""
        message_id = f"msg_{index}"
        yield _Event("model", message_id, model=turn.model or requested or DEFAULT_MODEL)
        for helper, usage in turn.helper_usage.items():
            yield _Event("helper_usage", f"{message_id}_{helper}", model=helper, usage=usage)
        words = turn.text.split(" ") if turn.text else []
        repeats = max(turn.usage_repeats, 1)
        for i in range(repeats):
            if words:
                chunk = " ".join(words[i * len(words) // repeats : (i + 1) * len(words) // repeats])
                if chunk:
                    yield _Event("text", message_id, text=(" " if i else "") + chunk)
            yield _Event("usage", message_id, usage=turn.usage)
        for call in turn.tool_calls:
            yield _Event("tool_call", message_id, call=call)

    def consume(self, event: _Event, state: "_SessionState", on_text) -> None:
        if event.kind == "text":
            state.text += event.text
            if on_text is not None:
                on_text(event.text)
        elif event.kind == "usage" and event.usage is not None:
            state.usage_events.append((event.message_id, event.usage))
        elif event.kind == "model":
            state.main_models.append(event.model)
        elif event.kind == "helper_usage" and event.usage is not None:
            state.helper_usage[event.model] = state.helper_usage.get(event.model, Usage()) + event.usage
            state.all_models.append(event.model)

    def fold_usage(self, usage_events: list[tuple[str, Usage]]) -> Usage:
        """Usage counted once per message id: the last report of each message wins."""
        per_message: dict[str, Usage] = {}
        for message_id, usage in usage_events:
            per_message[message_id] = usage
        total = Usage()
        for usage in per_message.values():
            total = total + usage
        return total

    def served_model(self, state: "_SessionState") -> str | None:
        """The main chain's model (the last one it reported); helpers never count."""
        return state.main_models[-1] if state.main_models else None

    def verdict(self, requested: str | None, served: str | None) -> ModelVerdict:
        """The served model judged against the requested one (contracts.model_verdict), before the guard."""
        return model_verdict(requested, served)

    def cost(self, state: "_SessionState") -> Cost:
        """No vendor figure exists for a fake model: no dollars, ever."""
        return Cost()

    def call_tool(self, call: ToolCall, request: AgentSessionRequest, trace, session_id: str):
        """Every tool call goes through the one choke point."""
        from harnesscheck.choke.dispatch import dispatch

        return dispatch(call.name, dict(call.args), request.scope, trace, session_id=session_id, policy=request.policy_engine(session_id))

    def policy_limit_reached(self, engine) -> str | None:
        """The policy limit the session reached (it then ends truncated/budget), or None."""
        return engine.limit_reached if engine is not None else None

    def record_refusal(self, state: "_SessionState", call: ToolCall, result) -> None:
        state.refusals.append(Refusal(tool=call.name, code=result.code or "refused", detail=_detail(result.text)))

    def system_prompt(self, request: AgentSessionRequest) -> str | None:
        """The system prompt goes to the model on its own channel, unchanged."""
        return request.system

    def offered_tools(self, request: AgentSessionRequest) -> list[str]:
        """The model is offered exactly the scope's tools (there are no built-ins)."""
        from harnesscheck.choke.dispatch import tool_definitions

        return [d.name for d in tool_definitions(request.scope)]

    def error_message(self, turn: FakeTurn, error: ErrorClass) -> str:
        """The upstream's error text, with every secret of this process redacted."""
        import os

        from harnesscheck.contain.envpolicy import redact, secret_values

        return redact(turn.error_message or error.value, extra_secrets=secret_values(os.environ))

    def on_model_error(self, turn: FakeTurn, index: int, log: SessionLog) -> ErrorClass | None:
        """A failed model call ends the session with its class; the host decides on retries."""
        return turn.error

    def wait(self, seconds: float, deadline: float, cancel: threading.Event | None) -> str | None:
        """Stall for `seconds`, but never past the deadline; None, 'deadline' or 'cancelled'."""
        if seconds <= 0:
            if cancel is not None and cancel.is_set():
                return "cancelled"
            return "deadline" if time.monotonic() >= deadline else None
        end = time.monotonic() + seconds
        while True:
            now = time.monotonic()
            if cancel is not None and cancel.is_set():
                return "cancelled"
            if now >= deadline:
                return "deadline"
            if now >= end:
                return None
            step = min(end, deadline) - now
            if cancel is not None:
                cancel.wait(min(step, 0.05))
            else:
                time.sleep(min(step, 0.05))


@dataclass
class _SessionState:
    requested: str | None = None
    text: str = ""
    iterations: int = 0
    tool_calls: int = 0
    tools_used: set[str] = field(default_factory=set)
    refusals: list[Refusal] = field(default_factory=list)
    usage_events: list[tuple[str, Usage]] = field(default_factory=list)
    helper_usage: dict[str, Usage] = field(default_factory=dict)
    main_models: list[str] = field(default_factory=list)
    all_models: list[str] = field(default_factory=list)


def _detail(text: str) -> str:
    """'refused: <code>: <detail>' -> '<detail>'."""
    parts = text.split(": ", 2)
    return parts[2] if len(parts) == 3 and parts[0] == "refused" else text
