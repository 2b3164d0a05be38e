"""Provider `api`: the raw model APIs, with the host-owned tool loop (doc/SPEC-api.md).

`ApiTransport(spec, settings)` wraps one `LLM` client (harnesscheck.backends.llm) in the api_mode
HARNESS_API_MODE selects. `run_session` loops model → tool calls → `dispatch` → results →
model until a final answer, `max_iters` (truncated/max_turns) or the wall clock
(truncated/timeout, partial text kept, in-flight request cancelled). The backend never
executes a tool itself: every call goes through `harnesscheck.choke.dispatch.dispatch`.

Importing this module imports neither SDK; the selected mode imports only its own.
"""

from __future__ import annotations

import os
import secrets
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable

from harnesscheck.backends._guard import MISMATCH_ERROR_CLASS, apply_model_guard, guard_verdict
from harnesscheck.backends.llm import API_MODES, LLM, Abort, Aborted, LLMError, Reply
from harnesscheck.core.config import Settings
from harnesscheck.core.contracts import (
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
    OutcomeStatus,
    ProviderSpec,
    Refusal,
    RequestOptions,
    Usage,
    model_verdict,
)

#: api_mode → (key variable, base URL variable). Read once, when the transport is built.
MODE_ENV: dict[str, tuple[str, str]] = {
    "anthropic_messages": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
    "chat_completions": ("OPENAI_API_KEY", "OPENAI_BASE_URL"),
    "responses": ("OPENAI_API_KEY", "OPENAI_BASE_URL"),
}


_WATCH_POLL_S = 0.05


def tool_specs(scope: Any) -> list[dict]:
    """The scope's tools as canonical {name, description, input_schema} dicts."""
    from harnesscheck.choke.dispatch import tool_definitions

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
        llm: Any = None,
    ):
        """`llm`: a model client in place of the api_mode's own HTTP client (the public seam for a
        backend whose model is not an HTTP API, e.g. backends/claude_code_reasoning/__init__.py): it has
        `create(messages=, system=, tools=, model=, on_text=, abort=, deadline=, max_tokens=) ->
        Reply`, and the loop, dispatch, limits and outcomes stay this class's. No key is read then."""
        self.spec = spec
        self.settings = settings
        self._tool_cache: dict[Any, list[dict]] = {}
        if llm is not None:
            self.api_mode = spec.api_mode or getattr(self, "api_mode", None) or "client"  # a subclass may name its own
            self.llm = llm
            self.base_url = None
            return
        if spec.api_mode and settings.api_mode and settings.api_mode != spec.api_mode:
            raise ConfigError(
                f"{spec.id} speaks {spec.api_mode}, but HARNESS_API_MODE={settings.api_mode}",
                f"unset HARNESS_API_MODE, or select the backend api with HARNESS_API_MODE={settings.api_mode}",
            )
        mode = spec.api_mode or settings.api_mode
        if not mode:
            raise ConfigError(
                "api backend: no api_mode selected (HARNESS_API_MODE is not set)",
                "add this line to .env (one of " + ", ".join(API_MODES) + "):\nHARNESS_API_MODE=anthropic_messages",
            )
        self.api_mode = mode
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

    def _tool_specs(self, scope: Any) -> list[dict]:
        """tool_specs(scope), remembered per scope value (a frozen model: equal scopes offer
        equal tools). Each session gets its own copy of the list."""
        cached = self._tool_cache.get(scope)
        if cached is None:
            cached = tool_specs(scope)
            if len(self._tool_cache) >= 16:
                self._tool_cache.clear()
            self._tool_cache[scope] = cached
        return list(cached)

    #: Whether a session needs a named model (HARNESS_BACKEND_MODEL or the request's). A backend
    #: whose client has a default model of its own (a CLI's) sets False.
    model_required = True

    def session_cost(self, model: str | None, usage: Usage, *, partial: bool) -> Cost:
        """The session's dollar cost: its tokens at the model's list prices from the shipped
        model metadata (harnesscheck.core.models; source api, `basis` naming the snapshot), or none
        for a model the snapshot does not price. The public seam for a backend billed otherwise
        (a subscription login: no per-token figure) to override."""
        from harnesscheck.core.models import cost_from

        info = self.model_metadata(model)
        usd = cost_from(info, usage) if info is not None else None
        if usd is None:
            return Cost(usd=None, source=CostSource.none, partial=partial)
        return Cost(usd=usd, source=CostSource.api, partial=partial, basis=f"{info.source}: {info.provider}/{info.model}")

    def _model(self, model: str | None) -> str:
        """The model to request: the call's, else HARNESS_BACKEND_MODEL; none is a pre-session error."""
        chosen = model or self.settings.model
        if not chosen and not self.model_required:
            return None  # the client's own default model (model_required = False)
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
        options: RequestOptions | None = None,
    ) -> AgentOutcome:
        """A tool-less one-shot completion. Raises CapabilityUnsupported if given tools, and
        OptionUnsupported, before any request, for an option it cannot honour."""
        if tools:
            raise CapabilityUnsupported(self.spec.id, "tools in complete(); use run_session")
        start = time.monotonic()
        requested = self._model(model)
        self.refuse_options(options, requested)
        deadline = start + (timeout_s or self.settings.timeout_s)
        state = _SessionState(requested, None, start)
        messages = [{"role": "user", "content": prompt}]
        too_long = self.over_context(requested, system, messages, None)
        if too_long is not None:
            return self._finish(state, start, OutcomeStatus.error, ErrorClass.context_overflow, too_long)
        abort = Abort()
        with _Watchdog(abort, deadline, None):
            try:
                reply = self.llm.create(
                    messages=messages,
                    system=system,
                    model=requested,
                    max_tokens=max_tokens,
                    on_text=on_text,
                    abort=abort,
                    deadline=deadline,
                    **({"options": options} if options is not None and options.given() else {}),
                )
            except LLMError as err:
                return self._failure(err, state, start)
        state.add_reply(reply)
        if self._mismatch_fails(requested, reply):
            return self._finish(state, start, OutcomeStatus.error, MISMATCH_ERROR_CLASS, self._mismatch_message(requested, reply))
        state.final_text = reply.text
        return self._finish(state, start, OutcomeStatus.ok)

    def _mismatch_fails(self, requested: str, reply: Reply) -> bool:
        """The served-model guard (backends/_guard.py): under HARNESS_MODEL_MISMATCH=fail a
        mismatching reply ends the session before any of its tool calls runs."""
        served = reply.served_model
        return guard_verdict(requested, served, model_verdict(requested, served), self.settings.model_mismatch).fail

    def _mismatch_message(self, requested: str, reply: Reply) -> str:
        served = reply.served_model
        return guard_verdict(requested, served, model_verdict(requested, served), self.settings.model_mismatch).note

    # -- the tool loop ---------------------------------------------------------------------

    def run_session(
        self,
        request: AgentSessionRequest,
        *,
        cancel: threading.Event | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> AgentOutcome:
        """model → tool calls → dispatch → results → model, until a final answer or a limit; in
        one of the host's session slots (Settings.concurrency), the wait counted in timeout_s."""
        from harnesscheck.contain.process import SlotBusy, session_slot
        from harnesscheck.core.scope import require_root

        require_root(request.scope)  # a placeholder root is a usage error, never a session of refusals
        start = time.monotonic()
        if request.run_dir is not None:
            # The trace there records every tool call: never where the model's write_file reaches
            # it (inside the scope root, after resolving '..' and symlinks; doc/SPEC-rundir.md).
            from harnesscheck.contain.rundir import check_outside

            check_outside(os.path.realpath(os.path.abspath(request.run_dir)), [request.scope.root])
        try:
            with session_slot(self.settings.concurrency, wait_s=request.timeout_s):
                return self._session(request, cancel, on_text, start)
        except SlotBusy as exc:
            return AgentOutcome(
                status=OutcomeStatus.truncated,
                error_class=ErrorClass.timeout,
                retryable=True,
                message=f"the session never started: {exc}",
                session_id=request.session_id,
                backend=self.spec.id,
                duration_s=time.monotonic() - start,
            )

    def model_metadata(self, model: str | None):
        """The shipped metadata of `model` as this backend's provider lists it
        (harnesscheck.core.models.model_info), None when the snapshot does not know it."""
        from harnesscheck.core.models import PROVIDER_OF_MODE, model_info

        return model_info(PROVIDER_OF_MODE.get(self.api_mode or ""), model)

    def over_context(self, model: str | None, system, messages, tools) -> str | None:
        """Why this request cannot fit the model's context window, or None: a floor of its tokens
        (llm.token_floor) above the context limit of the model's metadata. Checked before every
        request of the loop, so an over-long request (a huge prompt, or a tool result that
        pushed the transcript past the window) never reaches the wire."""
        from harnesscheck.backends.llm import token_floor

        info = self.model_metadata(model)
        if info is None or not info.context:
            return None
        floor = token_floor(system, messages, tools)
        if floor <= info.context:
            return None
        return f"the request is at least {floor} tokens, over {info.provider}/{info.model}'s context window of {info.context} ({info.source}); it was not sent"

    def option_names(self) -> frozenset[str]:
        """The request options this backend passes on (llm.WIRE_OPTIONS for its wire, through
        harnesscheck's own client); a backend on another client (Copilot's router, the claude
        CLI) passes none: every option is refused up front."""
        from harnesscheck.backends.llm import LLM, WIRE_OPTIONS

        return WIRE_OPTIONS.get(self.api_mode or "", frozenset()) if isinstance(self.llm, LLM) else frozenset()

    def check_options(self, request: AgentSessionRequest, model: str | None) -> None:
        """Refuse, before any request, an option the backend, its wire or the model cannot
        honour (OptionUnsupported naming the option and the model; doc/SPEC-api.md)."""
        self.refuse_options(request.options, model)

    def refuse_options(self, options: RequestOptions | None, model: str | None) -> None:
        """check_options for a bare set of options (complete() has no request)."""
        if options is None or not options.given():
            return
        from harnesscheck.backends.llm import DEFAULT_MAX_TOKENS, check_options
        from harnesscheck.core.contracts import OptionUnsupported

        for name in options.given():
            if name not in self.option_names():
                raise OptionUnsupported(self.spec.id, name, model, f"{self.spec.id} passes no {name} to its model")
        info = self.model_metadata(model)
        refused = check_options(self.api_mode, options, info, default_max_tokens=getattr(self.llm, "max_tokens", DEFAULT_MAX_TOKENS))
        if refused is not None:
            raise OptionUnsupported(self.spec.id, refused[0], model, refused[1])

    def _session(self, request, cancel, on_text, start) -> AgentOutcome:
        from harnesscheck.choke.dispatch import dispatch

        deadline = start + request.timeout_s
        session_id = request.session_id or secrets.token_hex(16)
        requested = self._model(request.model)
        self.check_options(request, requested)
        state = _SessionState(requested, session_id, start)
        tools = self._tool_specs(request.scope)
        request.scope.open_root()  # once per session: a later rename or swap of the root is refused (SPEC-scope)
        messages: list[dict] = [{"role": "user", "content": request.prompt}]
        abort = Abort()
        trace = _SessionTrace(request.run_dir, session_id)
        events = request.events(session_id)
        from harnesscheck.backends.llm import retry_notices, thought_notices

        notices = retry_notices.set(lambda attempt, wait_s, error_class: events("retry", attempt=attempt, wait_s=round(wait_s, 3), error_class=error_class))
        thoughts = thought_notices.set(lambda text: events("thought", text=text))
        try:
            with _Watchdog(abort, deadline, cancel):
                outcome = self._loop(request, state, messages, tools, trace, abort, deadline, on_text, dispatch)
            if trace.opened:
                trace.get().record(
                    "session_end",
                    backend=self.spec.id,
                    api_mode=self.api_mode,
                    status=outcome.status.value,
                    error_class=outcome.error_class.value if outcome.error_class else None,
                    iterations=outcome.iterations,
                    tool_calls=outcome.tool_calls,
                )
        finally:
            retry_notices.reset(notices)
            thought_notices.reset(thoughts)
            trace.close()
        return outcome

    def _loop(self, request, state, messages, tools, trace, abort, deadline, on_text, dispatch) -> AgentOutcome:
        start, requested = state.start, state.requested
        while True:
            if state.iterations >= request.max_iters:
                return self._finish(
                    state,
                    start,
                    OutcomeStatus.truncated,
                    ErrorClass.max_turns,
                    f"stopped after max_iters={request.max_iters} model turns; the model still wanted tools",
                )
            engine = request.policy_engine(state.session_id)
            if engine is not None and not engine.count_turn():
                return self._finish(state, start, OutcomeStatus.truncated, ErrorClass.budget, "stopped at the policy's turns limit")
            too_long = self.over_context(requested, request.system, messages, tools)
            if too_long is not None:
                return self._finish(state, start, OutcomeStatus.error, ErrorClass.context_overflow, too_long)
            try:
                reply = self.llm.create(
                    messages=messages,
                    system=request.system,
                    tools=tools or None,
                    model=requested,
                    on_text=on_text,
                    abort=abort,
                    deadline=deadline,
                    **({"options": request.options} if request.options is not None and request.options.given() else {}),
                )
            except LLMError as err:
                state.add_partial(err.partial)
                if err.partial is not None and err.partial.usage != Usage():
                    request.events(state.session_id)("usage", usage=err.partial.usage.model_dump())
                return self._failure(err, state, start)
            state.add_reply(reply)
            request.events(state.session_id)("usage", usage=reply.usage.model_dump())
            if self._mismatch_fails(state.requested, reply):  # the client's own choice when none was named
                return self._finish(state, start, OutcomeStatus.error, MISMATCH_ERROR_CLASS, self._mismatch_message(state.requested, reply))
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
            if engine is not None and engine.limit_reached:
                return self._finish(state, start, OutcomeStatus.truncated, ErrorClass.budget, f"stopped at the policy's {engine.limit_reached} limit")
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
                result = dispatch(call.name, call.arguments, request.scope, trace.get(), session_id=session_id, policy=request.policy_engine(session_id))
            except Exception as exc:  # a dispatch bug must not end the session or leak details
                trace.get().record("api_tool_error", tool=call.name, error=type(exc).__name__)
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
        served = state.served_model
        text = state.final_text if status is OutcomeStatus.ok else state.all_text()
        cost = self.session_cost(served or state.requested, state.usage, partial=status is not OutcomeStatus.ok)
        outcome = AgentOutcome(
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
        return apply_model_guard(outcome, self.settings.model_mismatch)


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
        if not self.requested and reply.requested_model:  # no model named: the client's own choice
            self.requested = reply.requested_model
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


class _SessionTrace:
    """The session's trace (<run_dir>/trace.jsonl), opened on the first tool call: a
    session without tool calls does no file I/O (dispatch's records are the evidence)."""

    def __init__(self, run_dir: Path | None, session_id: str):
        self.run_dir, self.session_id = run_dir, session_id
        self._trace: Any = None

    @property
    def opened(self) -> bool:
        return self._trace is not None

    def get(self) -> Any:
        if self._trace is None:
            from harnesscheck.choke.trace import Trace

            run_dir = self.run_dir or Path(tempfile.mkdtemp(prefix="harnesscheck-api-"))
            self._trace = Trace(Path(run_dir) / "trace.jsonl", session_id=self.session_id)
        return self._trace

    def close(self) -> None:
        if self._trace is not None:
            self._trace.close()


class _WatchService:
    """One shared daemon thread that fires each session's abort at its deadline or when the
    host's cancel event is set (polled every 50 ms while a cancel event is registered).

    A thread per session would cost more than the rest of the loop's per-turn overhead;
    this one idles on a condition when no session is registered. Sessions unregister
    before run_session returns, so nothing of a session runs after it returned."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._entries: dict[int, tuple[Abort, float, threading.Event | None]] = {}
        self._next = 0
        self._thread: threading.Thread | None = None
        self._wake_at = 0.0  # when the thread wakes next on its own (0: it is busy or idle-forever)

    def register(self, abort: Abort, deadline: float, cancel: threading.Event | None) -> int:
        with self._cond:
            self._next += 1
            self._entries[self._next] = (abort, deadline, cancel)
            if self._thread is None or not self._thread.is_alive():  # first use, or after fork
                self._thread = threading.Thread(target=self._run, name="harnesscheck-api-watchdog", daemon=True)
                self._thread.start()
            elif not (deadline >= self._wake_at > 0 and (cancel is None or self._wake_at - time.monotonic() <= _WATCH_POLL_S)):
                self._cond.notify()  # only when the thread would otherwise wake too late
            return self._next

    def unregister(self, token: int) -> None:
        with self._cond:
            self._entries.pop(token, None)

    def active(self) -> int:
        with self._cond:
            return len(self._entries)

    def _run(self) -> None:
        while True:
            due: list[tuple[Abort, str]] = []
            with self._cond:
                now = time.monotonic()
                for token, (abort, deadline, cancel) in list(self._entries.items()):
                    if cancel is not None and cancel.is_set():
                        due.append((abort, "cancelled"))
                    elif now >= deadline:
                        due.append((abort, "timeout"))
                    else:
                        continue
                    del self._entries[token]
                if not due:
                    if not self._entries:
                        self._wake_at = 0.0
                        self._cond.wait()
                        continue
                    wait = min(d for _, d, _ in self._entries.values()) - now
                    if any(c is not None for _, _, c in self._entries.values()):
                        wait = min(wait, _WATCH_POLL_S)
                    wait = max(wait, 0.001)
                    self._wake_at = now + wait
                    self._cond.wait(wait)
                    self._wake_at = 0.0
                    continue
            for abort, reason in due:  # outside the lock: firing closes sockets
                abort.fire(reason)


_WATCH = _WatchService()


class _Watchdog:
    """A session's registration with the shared watch service, for the `with` block."""

    def __init__(self, abort: Abort, deadline: float, cancel: threading.Event | None):
        self.abort, self.deadline, self.cancel = abort, deadline, cancel
        self._token: int | None = None

    def __enter__(self) -> "_Watchdog":
        self._token = _WATCH.register(self.abort, self.deadline, self.cancel)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _WATCH.unregister(self._token)
