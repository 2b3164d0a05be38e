"""The typed event stream (doc/SPEC-events.md): what a host sees while a session runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harnesscheck.backends.fake import FakeScript, FakeTurn, ToolCall
from harnesscheck.backends.registry import resolve_provider
from harnesscheck.core.config import Settings
from harnesscheck.core.contracts import AgentSessionRequest, Usage
from harnesscheck.core.events import EventStream, SessionEvent, iter_events, run_with_events
from harnesscheck.core.policy import Policy, Rule, ToolKind, Verdict
from harnesscheck.core.scope import ToolScope


@pytest.fixture
def root(tmp_path: Path) -> Path:
    tree = tmp_path / "repo"
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "a.py").write_text("alpha\n")
    return tree


def fake(turns):
    transport = resolve_provider(Settings(backend="fake"))
    transport.script = FakeScript(turns=turns)
    return transport


def request(root: Path, tmp_path: Path, **kw) -> AgentSessionRequest:
    return AgentSessionRequest(prompt="go", scope=ToolScope(root=root, read_only=False), run_dir=tmp_path / "run", **kw)


def test_every_tool_call_is_requested_decided_and_completed_in_order(root, tmp_path):
    turns = [
        FakeTurn(
            text="reading",
            tool_calls=[
                ToolCall("read_file", {"path": "src/a.py"}),
                ToolCall("write_file", {"path": "src/b.py", "content": "x"}),
                ToolCall("read_file", {"path": "../secret"}),
            ],
            usage=Usage(input=7, output=3),
        ),
        FakeTurn(text="done", usage=Usage(input=11, output=2)),
    ]
    policy = Policy(rules=(Rule(decision=Verdict.APPROVAL_REQUIRED, kinds=(ToolKind.WRITE,)),))
    events: list[SessionEvent] = []
    out = run_with_events(fake(turns), request(root, tmp_path, policy=policy, approver=lambda r: False), events.append)
    kinds = [(e.kind, e.tool) for e in events if e.kind.startswith(("tool", "approval"))]
    assert kinds == [
        ("tool_call", "read_file"),
        ("tool_decision", "read_file"),
        ("tool_result", "read_file"),
        ("tool_call", "write_file"),
        ("approval_requested", "write_file"),
        ("approval_answered", "write_file"),
        ("tool_decision", "write_file"),
        ("tool_call", "read_file"),
        ("tool_decision", "read_file"),
        ("tool_result", "read_file"),
    ]
    decisions = [(e.decision, e.code) for e in events if e.kind == "tool_decision"]
    assert decisions == [("allow", "default"), ("deny", "approval_denied"), ("allow", "default")]
    results = [(e.ok, e.code) for e in events if e.kind == "tool_result"]
    assert results == [(True, None), (False, "path_outside_scope")]
    # one digest follows each call through its events
    write_digests = {e.digest for e in events if e.tool == "write_file"}
    assert len(write_digests) == 1 and len(write_digests.pop()) == 16
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert {e.session_id for e in events} == {out.session_id}
    assert [e.text for e in events if e.kind == "text"] == ["reading", "done"]
    assert [e.kind for e in events][-2:] == ["usage", "end"] and events[-1].status == "ok"
    summed = sum((Usage(**e.usage) for e in events if e.kind == "usage"), Usage())
    assert summed == out.usage


def test_the_trace_and_the_stream_agree_call_for_call(root, tmp_path):
    turns = [FakeTurn(tool_calls=[ToolCall("read_file", {"path": p}) for p in ("src/a.py", "nope", "src/a.py")]), FakeTurn(text="ok")]
    events: list[SessionEvent] = []
    run_with_events(fake(turns), request(root, tmp_path), events.append)
    trace = [json.loads(line) for line in (tmp_path / "run" / "trace.jsonl").read_text().splitlines()]
    traced = [(r["tool"], r["decision"] == "allow", r["code"]) for r in trace if r.get("event") == "tool"]
    streamed = [(e.tool, e.ok, e.code) for e in events if e.kind == "tool_result"]
    assert traced == streamed == [("read_file", True, None), ("read_file", False, "not_found"), ("read_file", True, None)]


def test_an_error_ends_with_error_then_end_and_a_broken_sink_never_breaks_the_session(root, tmp_path):
    from harnesscheck.core.contracts import ErrorClass

    events: list[SessionEvent] = []
    out = run_with_events(fake([FakeTurn(error=ErrorClass.auth, error_message="401")]), request(root, tmp_path), events.append)
    assert [e.kind for e in events][-2:] == ["error", "end"] and events[-2].error_class == "auth"
    assert out.status.value == "blocked"

    def broken(event):
        raise RuntimeError("display crashed")

    turns = [FakeTurn(tool_calls=[ToolCall("write_file", {"path": "n.txt", "content": "x"})]), FakeTurn(text="ok")]
    out = run_with_events(fake(turns), request(root, tmp_path / "2"), broken)
    assert out.ok and (root / "n.txt").read_text() == "x"


def test_on_text_is_an_adapter_over_the_text_events(root, tmp_path):
    seen: list[str] = []
    events: list[SessionEvent] = []
    run_with_events(fake([FakeTurn(text="one two three")]), request(root, tmp_path), events.append, on_text=seen.append)
    assert seen == [e.text for e in events if e.kind == "text"] and "".join(seen) == "one two three"


def test_iter_events_yields_as_it_runs_and_keeps_the_outcome(root, tmp_path):
    it = iter_events(fake([FakeTurn(text="hi")]), request(root, tmp_path))
    kinds = [e.kind for e in it]
    assert kinds[0] == "text" and kinds[-1] == "end" and it.outcome.ok


def test_the_api_loop_emits_retry_notices_and_per_request_usage(monkeypatch, tmp_path, root):
    import api_wire as W
    import respx
    import respx_httpx2  # noqa: F401

    mode = "anthropic_messages"
    key_var, url_var = W.KEY_VARS[mode]
    monkeypatch.setenv(key_var, W.CANARY_KEY)
    monkeypatch.setenv(url_var, W.base_url(mode, W.BASE))
    transport = resolve_provider(Settings(backend="api", api_mode=mode, model=W.MODELS[mode]))
    transport.llm._sleep = lambda s: None
    import httpx

    turns = W.script(mode, [W.Turn(tool_calls=[("c1", "read_file", {"path": "src/a.py"})]), W.Turn(text="done")])
    answers = iter([httpx.Response(529, json={"type": "error", "error": {"type": "overloaded_error", "message": "busy"}})])

    def side_effect(req):
        try:
            return next(answers)
        except StopIteration:
            return turns(req)

    events: list[SessionEvent] = []
    with respx.mock(using="httpx2", assert_all_mocked=True) as router:
        router.post(W.url(mode)).mock(side_effect=side_effect)
        out = run_with_events(transport, request(root, tmp_path), events.append)
    assert out.ok
    retries = [e for e in events if e.kind == "retry"]
    assert len(retries) == 1 and retries[0].attempt == 2 and retries[0].error_class == "overloaded"
    assert events.index(retries[0]) < next(i for i, e in enumerate(events) if e.kind == "tool_call")
    usage = [Usage(**e.usage) for e in events if e.kind == "usage"]
    assert len(usage) == 2 and sum(usage, Usage()) == out.usage


def test_acp_updates_are_valid_acp_session_updates():
    from acp.schema import SessionNotification

    samples = [
        SessionEvent(kind="text", seq=1, text="hi"),
        SessionEvent(kind="thought", seq=2, text="hmm"),
        SessionEvent(kind="tool_call", seq=3, tool="write_file", tool_kind="write", path="/w/a.txt", digest="ab" * 8),
        SessionEvent(kind="tool_decision", seq=4, tool="write_file", decision="deny", digest="ab" * 8),
        SessionEvent(kind="tool_result", seq=5, tool="read_file", ok=True, digest="cd" * 8),
    ]
    for event in samples:
        update = event.acp_update()
        SessionNotification.model_validate({"sessionId": "s", "update": update})
    assert SessionEvent(kind="end", seq=6, status="ok").acp_update() is None


def test_a_stream_without_a_sink_costs_nothing():
    stream = EventStream(None)
    assert stream("text", text="x") is None and not stream.kinds_seen
