"""Provider `api`: the raw model APIs, with the host-owned tool loop (doc/SPEC-api.md).

`ApiTransport(spec, settings)` wraps one `LLM` client (harnesscheck.llm) in the api_mode
HARNESS_API_MODE selects. `run_session` loops model → tool calls → `dispatch` → results →
model until a final answer, `max_iters` (truncated/max_turns) or the wall clock
(truncated/timeout, partial text kept, in-flight request cancelled). The backend never
executes a tool itself: every call goes through `harnesscheck.dispatch.dispatch`.

Importing this module imports neither SDK; the selected mode imports only its own.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable

from harnesscheck.config import Settings
from harnesscheck.contracts import (
    BLOCKING,
    RETRYABLE,
    AgentOutcome,
    AgentSessionRequest,
    AuthUnavailable,
    CapabilityUnsupported,
    ConfigError,
    Cost,
    CostSource,
    ErrorClass,
    ModelVerdict,
    OutcomeStatus,
    ProviderSpec,
    Refusal,
    Usage,
    model_verdict,
)
from harnesscheck.llm import API_MODES, Abort, Aborted, LLM, LLMError, Reply

#: api_mode → (key variable, base URL variable). Read once, when the transport is built.
MODE_ENV: dict[str, tuple[str, str]] = {
    "anthropic_messages": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
    "chat_completions": ("OPENAI_API_KEY", "OPENAI_BASE_URL"),
    "responses": ("OPENAI_API_KEY", "OPENAI_BASE_URL"),
}

#: A served-model mismatch under HARNESS_MODEL_MISMATCH=fail is this error class (status error).
MISMATCH_ERROR_CLASS = ErrorClass.invalid_request

_WATCH_POLL_S = 0.05


def tool_specs(scope: Any) -> list[dict]:
    """The scope's tools as canonical {name, description, input_schema} dicts."""
    from harnesscheck.dispatch import tool_definitions

    return [{"name": d.name, "description": d.description, "input_schema": d.input_schema} for d in tool_definitions(scope)]


class ApiTransport:
    """The `api` backend: one LLM client and the host-owned tool loop."""

    def __init__(
        self,
        spec: ProviderSpec,
        settings: Settings,
        *,
        environ: Mapping[str, str] | None = None,
        sleep: Callable[[float], None] | None = None,
        retries: int | None = None,
        max_tokens: int | None = None,
    ):
        self.spec = spec
        self.settings = settings
        if not settings.api_mode:
            raise ConfigError(
                "api backend: no api_mode selected (HARNESS_API_MODE is not set)",
                "add this line to .env (one of " + ", ".join(API_MODES) + "):\nHARNESS_API_MODE=anthropic_messages",
            )
        self.api_mode = settings.api_mode
        env = os.environ if environ is None else environ
        key_var, url_var = MODE_ENV[self.api_mode]
        api_key = (env.get(key_var) or "").strip()
        if not api_key:
            raise AuthUnavailable(spec.id, key_var, f"set {key_var} in the environment (api_mode {self.api_mode})")
        base_url = (env.get(url_var) or "").strip() or None
        kwargs: dict[str, Any] = {"api_key": api_key, "base_url": base_url, "model": settings.model, "sleep": sleep}
        if retries is not None:
            kwargs["retries"] = retries
        if max_tokens is not None:
            kwargs["max_tokens"] = max_tokens
        self.llm = LLM(self.api_mode, **kwargs)
        self.base_url = base_url

    def __repr__(self) -> str:
        return f"ApiTransport(api_mode={self.api_mode!r}, model={self.settings.model!r})"

    def _model(self, model: str | None) -> str:
        """The model to request: the call's, else HARNESS_BACKEND_MODEL; none is a pre-session error."""
        chosen = model or self.settings.model
        if not chosen:
            raise ConfigError(
                "api backend: no model selected (HARNESS_BACKEND_MODEL is not set)",
                "add this line to .env (or pass --model):\nHARNESS_BACKEND_MODEL=<model id>",
            )
        return chosen

    # -- one-shot ------------------------------------------------------------------------

    def complete(
        self,
        prompt: str,
        *,
        system: str | None = None,
        model: str | None = None,
        tools: list | None = None,
        timeout_s: float | None = None,
        max_tokens: int | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> AgentOutcome:
        """A tool-less one-shot completion. Raises CapabilityUnsupported if given tools."""
        if tools:
            raise CapabilityUnsupported(self.spec.id, "tools in complete(); use run_session")
        start = time.monotonic()
        requested = self._model(model)
        deadline = start + (timeout_s or self.settings.timeout_s)
        state = _SessionState(requested, None, start)
        abort = Abort()
        with _Watchdog(abort, deadline, None):
            try:
                reply = self.llm.create(
                    messages=[{"role": "user", "content": prompt}],
                    system=system,
                    model=requested,
                    max_tokens=max_tokens,
                    on_text=on_text,
                    abort=abort,
                    deadline=deadline,
                )
            except LLMError as err:
                return self._failure(err, state, start)
        state.add_reply(reply)
        state.final_text = reply.text
        return self._finish(state, start, OutcomeStatus.ok)

    # -- the tool loop ---------------------------------------------------------------------

    def run_session(
        self,
        request: AgentSessionRequest,
        *,
        cancel: threading.Event | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> AgentOutcome:
        """model → tool calls → dispatch → results → model, until a final answer or a limit."""
        from harnesscheck.dispatch import dispatch
        from harnesscheck.trace import Trace

        start = time.monotonic()
        deadline = start + request.timeout_s
        session_id = request.session_id or uuid.uuid4().hex
        run_dir = request.run_dir or Path(tempfile.mkdtemp(prefix="harnesscheck-api-"))
        run_dir.mkdir(parents=True, exist_ok=True)
        trace = Trace(run_dir / "trace.jsonl", session_id=session_id)
        requested = self._model(request.model)
        state = _SessionState(requested, session_id, start)
        tools = tool_specs(request.scope)
        messages: list[dict] = [{"role": "user", "content": request.prompt}]
        abort = Abort()

        trace.record("session_start", backend=self.spec.id, api_mode=self.api_mode)
        with _Watchdog(abort, deadline, cancel):
            outcome = self._loop(request, state, messages, tools, trace, abort, deadline, on_text, dispatch)
        trace.record("session_end", status=outcome.status.value, error_class=outcome.error_class.value if outcome.error_class else None)
        return outcome

    def _loop(self, request, state, messages, tools, trace, abort, deadline, on_text, dispatch) -> AgentOutcome:
        start, requested = state.start, state.requested
        while True:
            if state.iterations >= request.max_iters:
                return self._finish(
                    state, start, OutcomeStatus.truncated, ErrorClass.max_turns,
                    f"stopped after max_iters={request.max_iters} model turns; the model still wanted tools",
                )
            try:
                reply = self.llm.create(
                    messages=messages,
                    system=request.system,
                    tools=tools or None,
                    model=requested,
                    on_text=on_text,
                    abort=abort,
                    deadline=deadline,
                )
            except LLMError as err:
                state.add_partial(err.partial)
                return self._failure(err, state, start)
            state.add_reply(reply)
            verdict = model_verdict(requested, reply.served_model)
            if verdict is ModelVerdict.mismatch and self.settings.model_mismatch == "fail":
                message = f"served model {reply.served_model!r} is not the requested {requested!r} (HARNESS_MODEL_MISMATCH=fail)"
                return self._finish(state, start, OutcomeStatus.error, MISMATCH_ERROR_CLASS, message)
            if not reply.tool_calls:
                state.final_text = reply.text
                return self._finish(state, start, OutcomeStatus.ok)
            messages.append(reply.assistant_message())
            results: list[dict] = []
            for call in reply.tool_calls:
                if abort.fired:
                    break
                results.append(self._run_tool(call, request, trace, state.session_id, state, dispatch))
            if abort.fired:
                return self._aborted(abort, state, start)
            messages.append({"role": "user", "content": results})

    def _run_tool(self, call: Any, request: AgentSessionRequest, trace: Any, session_id: str, state: "_SessionState", dispatch: Callable) -> dict:
        """One tool call through the choke point; a refusal becomes a tool error the model reads."""
        state.tool_calls += 1
        if call.name not in state.tools_used:
            state.tools_used.append(call.name)
            state.tools_used.sort()
        if call.arguments is None:
            text, is_error = "error: the tool arguments are not a valid JSON object", True
        else:
            try:
                result = dispatch(call.name, call.arguments, request.scope, trace, session_id=session_id)
            except Exception as exc:  # a dispatch bug must not end the session or leak details
                trace.record("api_tool_error", tool=call.name, error=type(exc).__name__)
                return {"type": "tool_result", "tool_use_id": call.id, "content": f"error: internal: {type(exc).__name__}", "is_error": True}
            text, is_error = result.text, not result.ok
            if not result.ok and result.text.startswith("refused:"):
                detail = result.text.split(":", 2)[-1].strip()
                state.refusals.append(Refusal(tool=call.name, code=result.code or "refused", detail=detail))
        block = {"type": "tool_result", "tool_use_id": call.id, "content": text}
        if is_error:
            block["is_error"] = True
        return block

    # -- outcomes ----------------------------------------------------------------------------

    def _failure(self, err: LLMError, state: "_SessionState", start: float) -> AgentOutcome:
        if isinstance(err, Aborted):
            if err.reason == "timeout":
                return self._finish(state, start, OutcomeStatus.truncated, ErrorClass.timeout, "wall-clock timeout; partial text kept")
            return self._finish(state, start, OutcomeStatus.cancelled, None, "cancelled by the host")
        status = OutcomeStatus.blocked if err.error_class in BLOCKING else OutcomeStatus.error
        outcome = self._finish(state, start, status, err.error_class, err.message)
        outcome.retry_after_s = err.retry_after_s
        return outcome

    def _aborted(self, abort: Abort, state: "_SessionState", start: float) -> AgentOutcome:
        return self._failure(Aborted(abort.reason or "cancelled"), state, start)

    def _finish(
        self,
        state: "_SessionState",
        start: float,
        status: OutcomeStatus,
        error_class: ErrorClass | None = None,
        message: str = "",
    ) -> AgentOutcome:
        from harnesscheck.pricing import cost_usd

        served = state.served_model
        text = state.final_text if status is OutcomeStatus.ok else state.all_text()
        usd = cost_usd(served or state.requested, state.usage)
        cost = Cost(usd=usd, source=CostSource.api if usd is not None else CostSource.none, partial=status is not OutcomeStatus.ok)
        return AgentOutcome(
            status=status,
            error_class=error_class,
            retryable=error_class in RETRYABLE if error_class else False,
            message=message,
            text=text,
            iterations=state.iterations,
            tool_calls=state.tool_calls,
            tools_used=list(state.tools_used),
            refusals=list(state.refusals),
            usage=state.usage,
            cost=cost,
            requested_model=state.requested,
            served_model=served,
            model_verdict=model_verdict(state.requested, served),
            session_id=state.session_id,
            duration_s=round(time.monotonic() - start, 6),
            terminal_event_seen=status not in (OutcomeStatus.truncated, OutcomeStatus.cancelled),
            backend=self.spec.id,
        )


class _SessionState:
    """What the loop has seen so far (for the final or the partial outcome)."""

    def __init__(self, requested: str | None, session_id: str | None, start: float):
        self.requested = requested
        self.start = start
        self.session_id = session_id
        self.iterations = 0
        self.tool_calls = 0
        self.tools_used: list[str] = []
        self.refusals: list[Refusal] = []
        self.usage = Usage()
        self.served_model: str | None = None
        self.texts: list[str] = []
        self.final_text = ""

    def add_reply(self, reply: Reply) -> None:
        self.iterations += 1
        self.usage = self.usage + reply.usage
        self.served_model = reply.served_model or self.served_model
        if reply.text:
            self.texts.append(reply.text)

    def add_partial(self, reply: Reply) -> None:
        """A failed turn: keep its streamed text and any usage it reported."""
        self.usage = self.usage + reply.usage
        self.served_model = reply.served_model or self.served_model
        if reply.text:
            self.texts.append(reply.text)

    def all_text(self) -> str:
        """Everything streamed so far, exactly as the on_text callback saw it."""
        return "".join(self.texts)


class _Watchdog:
    """Fires the abort at the deadline or when the host's cancel event is set; stops on exit."""

    def __init__(self, abort: Abort, deadline: float, cancel: threading.Event | None):
        self.abort, self.deadline, self.cancel = abort, deadline, cancel
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="harnesscheck-api-watchdog", daemon=True)

    def _watch(self) -> None:
        while not self._stop.is_set():
            if self.cancel is not None and self.cancel.is_set():
                self.abort.fire("cancelled")
                return
            left = self.deadline - time.monotonic()
            if left <= 0:
                self.abort.fire("timeout")
                return
            self._stop.wait(min(left, _WATCH_POLL_S) if self.cancel is not None else left)

    def __enter__(self) -> "_Watchdog":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
