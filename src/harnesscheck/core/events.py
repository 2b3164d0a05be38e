"""events: one typed event stream for every backend, as things happen (doc/SPEC-events.md).

Requirement (issue 31, the ADR's normalized event stream): a host can show a user what a run
is doing while it runs — text as it streams, each tool call as it is requested, decided (with
its decision and digest) and completed, approvals asked and answered, retry waits, usage, an
error, the end — in one vocabulary for every backend, modelled on ACP's `session/update` so an
ACP agent's updates map one to one (`SessionEvent.acp_update`).

Where events come from:
- `text`: the transport's `on_text` stream (every backend streams through it);
- `tool_call`, `tool_decision`, `approval_requested`, `approval_answered`, `tool_result`: the
  policy engine at the choke point (`harnesscheck.core.policy`), so they are emitted for every call
  that reaches `dispatch` in this process — the host loops (api, copilot, fake) — before and
  after it runs; a harness CLI's bridge calls run in the bridge process and are reported from
  its trace when the session ends (`tool_result` events with `late=True`);
- `retry`: the api client's backoff (`llm.retry_notices`), before each wait;
- `usage`: per model request where the transport reports it (api), else once at the end from
  the outcome, so the usage events of a session always add up to the outcome's usage;
- `error`, `end`: from the outcome.

This module imports nothing of harnesscheck: contracts build on it.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict

EventKind = Literal[
    "text",
    "thought",
    "tool_call",
    "tool_decision",
    "tool_result",
    "approval_requested",
    "approval_answered",
    "retry",
    "usage",
    "error",
    "end",
]

#: Our tool kinds (harnesscheck.core.policy.ToolKind values) as ACP spells them.
_ACP_TOOL_KIND = {"read": "read", "write": "edit", "execute": "execute", "network": "fetch", "other": "other"}


class SessionEvent(BaseModel):
    """One event. `seq` orders a session's events (from 1); only the fields of its kind are set."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: EventKind
    seq: int = 0
    session_id: str | None = None
    text: str | None = None
    tool: str | None = None
    tool_kind: str | None = None
    path: str | None = None
    digest: str | None = None
    decision: str | None = None
    code: str | None = None
    ok: bool | None = None
    late: bool | None = None
    attempt: int | None = None
    wait_s: float | None = None
    error_class: str | None = None
    usage: dict[str, int] | None = None
    status: str | None = None
    message: str | None = None

    def json_line(self) -> str:
        return json.dumps(self.model_dump(exclude_none=True), ensure_ascii=False, separators=(",", ":"))

    def acp_update(self) -> dict[str, Any] | None:
        """This event as an ACP `session/update` payload, or None where ACP has no such update
        (retry, usage as billing, error, end: ACP carries those in the prompt's answer)."""
        if self.kind in ("text", "thought"):
            kind = "agent_message_chunk" if self.kind == "text" else "agent_thought_chunk"
            return {"sessionUpdate": kind, "content": {"type": "text", "text": self.text or ""}}
        call_id = f"hc-{self.digest}" if self.digest else f"hc-{self.seq}"
        if self.kind == "tool_call":
            update: dict[str, Any] = {
                "sessionUpdate": "tool_call",
                "toolCallId": call_id,
                "title": self.tool or "",
                "kind": _ACP_TOOL_KIND.get(self.tool_kind or "other", "other"),
                "status": "pending",
            }
            if self.path:
                update["locations"] = [{"path": self.path}]
            return update
        if self.kind == "tool_decision":
            status = "in_progress" if self.decision == "allow" else "failed"
            return {"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": status}
        if self.kind == "tool_result":
            return {"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": "completed" if self.ok else "failed"}
        return None


class EventStream:
    """A session's emitter: numbers events, hands each to the host's sink. A sink that raises is
    dropped from the stream (its error never reaches the session: a broken display must not
    end a run), and the stream remembers that it failed."""

    def __init__(self, sink: Callable[[SessionEvent], object] | None, session_id: str | None = None) -> None:
        self.sink = sink
        self.session_id = session_id
        self.sink_failed = False
        self.kinds_seen: set[str] = set()
        self._seq = 0
        self._lock = threading.Lock()

    def __call__(self, kind: EventKind, **fields: Any) -> SessionEvent | None:
        if self.sink is None:
            return None
        with self._lock:
            self._seq += 1
            event = SessionEvent(kind=kind, seq=self._seq, session_id=fields.pop("session_id", self.session_id), **fields)
            self.kinds_seen.add(kind)
            sink = self.sink
        try:
            sink(event)
        except Exception:
            self.sink, self.sink_failed = None, True
        return event


def run_with_events(
    transport: Any,
    request: Any,
    on_event: Callable[[SessionEvent], object],
    *,
    cancel: threading.Event | None = None,
    on_text: Callable[[str], None] | None = None,
) -> Any:
    """Run one session of `transport` with `on_event` receiving its events as they happen;
    returns the AgentOutcome. `on_text` (the old callback) still gets the text: it is a thin
    adapter over the `text` events. The last event is `end` (after `error` when the session
    did not end ok); the session's `usage` events add up to the outcome's usage."""
    import uuid

    from harnesscheck.core.contracts import Usage

    session_id = request.session_id or uuid.uuid4().hex
    request = request.model_copy(update={"session_id": session_id, "on_event": on_event})
    request._engines, request._streams = {}, {}  # a copy shares nothing of the original's sessions
    stream = request.events(session_id)

    def text(chunk: str) -> None:
        stream("text", text=chunk)
        if on_text is not None:
            on_text(chunk)

    outcome = transport.run_session(request, cancel=cancel, on_text=text)
    if "usage" not in stream.kinds_seen and outcome.usage != Usage():
        stream("usage", usage=outcome.usage.model_dump())
    if not outcome.ok:
        stream("error", status=outcome.status.value, message=outcome.message[:500], error_class=outcome.error_class.value if outcome.error_class else None)
    stream("end", status=outcome.status.value, error_class=outcome.error_class.value if outcome.error_class else None)
    return outcome


def iter_events(transport: Any, request: Any, *, cancel: threading.Event | None = None):
    """The session's events as an iterator (the session runs on a thread); the iterator ends
    after `end`, and its `.outcome` attribute (`EventIterator.outcome`) then holds the outcome.
    Leaving the loop early cancels the session (the host's cancel event is set)."""
    return EventIterator(transport, request, cancel=cancel)


class EventIterator:
    def __init__(self, transport: Any, request: Any, *, cancel: threading.Event | None = None) -> None:
        import queue

        self.outcome: Any = None
        self.error: BaseException | None = None
        self._queue: "queue.Queue[SessionEvent | None]" = queue.Queue()
        self._cancel = cancel or threading.Event()

        def work() -> None:
            try:
                self.outcome = run_with_events(transport, request, self._queue.put, cancel=self._cancel)
            except BaseException as exc:  # handed to the caller, raised from the iterator
                self.error = exc
            finally:
                self._queue.put(None)

        self._thread = threading.Thread(target=work, name="hc-session-events", daemon=True)
        self._thread.start()

    def __iter__(self) -> "EventIterator":
        return self

    def __next__(self) -> SessionEvent:
        item = self._queue.get()
        if item is None:
            self._thread.join()
            if self.error is not None:
                raise self.error
            raise StopIteration
        return item

    def close(self) -> None:
        """Stop early: cancel the session and wait for it to end."""
        self._cancel.set()
        self._thread.join()

    def __del__(self) -> None:
        if self._thread.is_alive():
            self._cancel.set()
