"""The bridge's live line to its host (bridge/hostlink.py): events as they happen, approvals
asked of the host's approver, and a fail-closed bridge side."""

from __future__ import annotations

import threading

import pytest

from harnesscheck.bridge.hostlink import MAX_LINE_BYTES, SOCKET_NAME, HostLink, LinkClient
from harnesscheck.core.policy import ApprovalAnswer, ApprovalRequest, Policy, PolicyEngine, Rule, ToolKind, Verdict


@pytest.fixture
def run_dir(tmp_path):
    # deeper than AF_UNIX's 108 bytes: the link must reach it anyway
    path = tmp_path / ("d" * 60) / ("e" * 60)
    path.mkdir(parents=True, mode=0o700)
    return path


def request(tool="write_file", args=None, digest="ab" * 32):
    return ApprovalRequest(
        tool=tool, args=args or {"path": "a.txt", "content": "x"}, kind=ToolKind.WRITE, path="a.txt", digest=digest, session="s1", root="/r", reason="asks"
    )


def test_events_arrive_in_order_and_the_reported_calls_are_kept(run_dir):
    got, arrived = [], threading.Event()

    def events(kind, **fields):
        got.append((kind, fields))
        if kind == "tool_result":
            arrived.set()

    link = HostLink(run_dir, events=events, approver=None, timeout_s=5)
    try:
        client = LinkClient(run_dir, timeout_s=5)
        client.event("tool_call", tool="read_file", digest="0123456789abcdef", tool_kind="read", path="a")
        client.event("tool_decision", tool="read_file", digest="0123456789abcdef", decision="allow", code="default")
        client.event("tool_result", tool="read_file", digest="0123456789abcdef", ok=True, code=None)
        assert arrived.wait(5)
    finally:
        link.close()
    assert [k for k, _ in got] == ["tool_call", "tool_decision", "tool_result"]
    assert got[2][1] == {"tool": "read_file", "digest": "0123456789abcdef", "ok": True, "code": None}
    assert link.reported == {"0123456789abcdef"}
    assert not (run_dir / SOCKET_NAME).exists(), "close() removes the socket"


def test_an_approval_goes_to_the_hosts_approver_and_its_answer_comes_back(run_dir):
    asked = []

    def approver(req):
        asked.append(req)
        return ApprovalAnswer(approve=True, tools=("write_file",), paths=("docs/*",), ttl_s=30)

    link = HostLink(run_dir, events=None, approver=approver, timeout_s=5)
    try:
        answer = LinkClient(run_dir, timeout_s=5).approve(request(args={"path": "a.txt", "content": "héllo"}))
    finally:
        link.close()
    assert answer == ApprovalAnswer(approve=True, tools=("write_file",), paths=("docs/*",), ttl_s=30.0)
    assert asked[0].args == {"path": "a.txt", "content": "héllo"} and asked[0].digest == "ab" * 32
    assert asked[0].kind is ToolKind.WRITE and asked[0].session == "s1"


def test_a_host_without_an_approver_and_an_approver_that_says_no_are_denials(run_dir):
    link = HostLink(run_dir, events=None, approver=None, timeout_s=5)
    try:
        assert LinkClient(run_dir, timeout_s=5).approve(request()).approve is False
    finally:
        link.close()
    link = HostLink(run_dir, events=None, approver=lambda r: False, timeout_s=5)
    try:
        assert LinkClient(run_dir, timeout_s=5).approve(request()).approve is False
    finally:
        link.close()


def test_an_unanswered_approval_is_a_timeout_at_the_bridge(run_dir):
    release = threading.Event()
    link = HostLink(run_dir, events=None, approver=lambda r: release.wait(30), timeout_s=0.2)
    try:
        with pytest.raises(TimeoutError):
            LinkClient(run_dir, timeout_s=0.2).approve(request())
    finally:
        release.set()
        link.close()


def test_the_bridge_fails_closed_without_a_link(run_dir):
    """No host listening: the approver raises (the engine's approval_failed: a deny), events drop."""
    client = LinkClient(run_dir, timeout_s=1)
    client.event("tool_call", tool="x")  # dropped, no raise
    with pytest.raises(OSError):
        client.approve(request())
    engine = PolicyEngine(
        Policy(rules=(Rule(decision=Verdict.APPROVAL_REQUIRED, kinds=(ToolKind.WRITE,)),)), root=run_dir, session="s1", approver=client.approve
    )
    decision = engine.authorize(engine.host_call("write_file", {"path": "a.txt", "content": "x"}))
    assert not decision.allowed and decision.code == "approval_failed"


def test_an_oversized_line_ends_that_peer_and_nothing_else(run_dir):
    got = []
    link = HostLink(run_dir, events=lambda kind, **f: got.append(kind), approver=lambda r: True, timeout_s=5)
    try:
        rogue = LinkClient(run_dir, timeout_s=5)
        rogue.event("tool_call", blob="x" * (MAX_LINE_BYTES + 10))
        assert LinkClient(run_dir, timeout_s=5).approve(request()).approve is True, "another peer is still served"
    finally:
        link.close()
    assert got == []


def test_the_engine_in_the_bridge_asks_through_the_link_and_binds_the_answer_to_the_digest(run_dir):
    """The bridge's PolicyEngine with the link as approver: the first write is asked and allowed,
    the same call again is allowed on its grant without asking, a changed call is asked anew."""
    asked = []
    link = HostLink(run_dir, events=None, approver=lambda r: asked.append(r.digest) or len(asked) == 1, timeout_s=5)
    try:
        client = LinkClient(run_dir, timeout_s=5)
        engine = PolicyEngine(
            Policy(rules=(Rule(decision=Verdict.APPROVAL_REQUIRED, kinds=(ToolKind.WRITE,)),)), root=run_dir, session="s1", approver=client.approve
        )
        first = engine.host_call("write_file", {"path": "a.txt", "content": "one"})
        assert engine.authorize(first).allowed
        assert engine.authorize(first).allowed and len(asked) == 1
        changed = engine.host_call("write_file", {"path": "a.txt", "content": "two"})
        assert engine.authorize(changed).code == "approval_denied" and len(asked) == 2
    finally:
        link.close()


def _until(condition, bound_s=30.0):
    """Wait for `condition` (an upper bound, not a timing: it returns as soon as it holds)."""
    import time

    end = time.monotonic() + bound_s
    while not condition():
        assert time.monotonic() < end, "the link never got there"
        time.sleep(0.01)


def test_seal_waits_for_what_was_sent_then_delivers_nothing_more(run_dir):
    """At a session's end the host reports from the bridge trace every call the link did not
    deliver: seal() first reads what a gone bridge already sent, then no event is delivered, so
    a call is reported once, live or late, never both (zcode's events doubled under load)."""
    import socket

    from harnesscheck.bridge.hostlink import _line, _short_path

    def send_and_go(digest):  # a bridge that sends one result and is gone (its socket at EOF)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with _short_path(run_dir) as path:
            sock.connect(path)
        sock.sendall(_line({"event": "tool_result", "fields": {"tool": "read_file", "digest": digest, "ok": True}}))
        sock.close()

    got = []
    link = HostLink(run_dir, events=lambda kind, **fields: got.append(fields["digest"]), approver=None, timeout_s=5)
    try:
        send_and_go("0123456789abcdef")
        _until(lambda: link._serving)  # accepted by the link's thread
        assert link.seal(wait_s=30) == {"0123456789abcdef"} and got == ["0123456789abcdef"]  # it ends at EOF, not at 30 s
        send_and_go("fedcba9876543210")  # a peer still sending after the seal
        _until(lambda: len(link._serving) == 2)
        for thread in list(link._serving):
            thread.join(timeout=30)
        assert got == ["0123456789abcdef"] and link.reported == {"0123456789abcdef"}, "nothing is delivered or counted after the seal"
    finally:
        link.close()
