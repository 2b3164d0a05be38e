"""The typed event stream (doc/SPEC-events.md): what a host sees while a session runs. Judged
against the session's own evidence — the dispatch trace (in-process tool loops) or the bridge's
trace (CLIs, ACP agents), the outcome's usage, the requests the scripted upstream answered —
never against the backend's account of itself."""

from __future__ import annotations

from harnesscheck.core.contracts import Capability as C
from harnesscheck.core.contracts import Usage
from harnesscheck.kit.catalog import check
from harnesscheck.kit.session import ToolCall


def _traced_calls(run) -> list[tuple[str, bool]]:
    """(tool, allowed) of each tool call the session's trace records, in order."""
    return [(str(r.get("tool")), r.get("decision") == "allow") for r in run.trace if r.get("event") == "tool"]


@check("events.tool-calls-streamed", requires=[C.event_stream])
def test_tool_calls_streamed(but):
    """Every tool call the session's trace records appears in the event stream with its decision:
    an allowed call as a completed `tool_result`, a refused one as refused (`tool_decision` deny, or
    a `tool_result` that is not ok), and `end` comes last. Calls a CLI runs at once finish in any
    order, so the stream and the trace are compared call for call, not by position."""
    events: list = []
    run = but.run_tools(
        [ToolCall("read_file", {"path": "README.md"}), ToolCall("read_file", {"path": "../outside/secret.txt"}), ToolCall("list_dir", {"path": "."})],
        events=events,
    )
    if not run.trace:
        but.skip("adapter-not-implemented", f"the kit cannot read {but.spec.id}'s trace at {but.level}")
    traced = _traced_calls(run)
    assert len(traced) >= 3, f"kit premise: the session traced {len(traced)} tool call(s): {traced}"
    streamed = []
    for e in events:
        if e.kind == "tool_result":
            streamed.append((e.tool, bool(e.ok)))
        elif e.kind == "tool_decision" and e.decision == "deny":
            streamed.append((e.tool, False))
    assert sorted(streamed) == sorted(traced), (
        f"the event stream showed {streamed} where the trace records {traced}: a host cannot show the user "
        "what its tools did (fix: pass request.policy_engine(session_id) to dispatch, or report the bridge's calls)"
    )
    assert events and events[-1].kind == "end", f"the stream must end with `end`, it ended {events[-1].kind if events else 'empty'}"
    assert [e.seq for e in events] == sorted(e.seq for e in events), "events out of order"


@check("events.usage-adds-up", requires=[C.event_stream, C.usage_reporting])
def test_usage_adds_up(but):
    """The session's `usage` events add up to the outcome's usage: none counted twice, none lost
    (the upstream repeats each message's usage on several streamed chunks, as real streams do)."""
    events: list = []
    run = but.run("repeated_usage", events=events)
    usage = [Usage(**e.usage) for e in events if e.kind == "usage"]
    summed = sum(usage, Usage())
    assert run.outcome.usage.total == 0 or usage, "the outcome reports usage the event stream never showed"
    assert summed == run.outcome.usage, f"usage events add up to {summed}, the outcome reports {run.outcome.usage}"


@check("events.retry-announced", requires=[C.retry_events])
def test_retry_announced(but):
    """A backend that waits before retrying an overloaded upstream says so first: each retry of the
    scripted 529 ladder is a `retry` event (its attempt, its wait, the error class) before the request
    it announces, so a host can show "retrying in N s" instead of silence."""
    events: list = []
    run = but.run("overloaded_529", events=events)
    requests = len(getattr(run, "requests", []) or [])
    if requests < 2:
        but.skip("unsupported-by-backend", f"the backend made {requests} request(s): no retry to announce")
    retries = [e for e in events if e.kind == "retry"]
    assert len(retries) == requests - 1, f"{requests} requests to an overloaded upstream, {len(retries)} retry event(s)"
    assert [e.attempt for e in retries] == list(range(2, requests + 1)), [e.attempt for e in retries]
    assert all(e.error_class == "overloaded" and (e.wait_s or 0) >= 0 for e in retries), retries
