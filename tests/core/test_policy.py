"""The policy engine (doc/SPEC-policy.md): rules, defaults, approvals bound to digests,
expiry, timeouts, limits, and the choke point acting on them (dispatch(..., policy=))."""

from __future__ import annotations

import asyncio
import json
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from harnesscheck.choke.dispatch import dispatch
from harnesscheck.choke.trace import Trace
from harnesscheck.core.policy import (
    ApprovalAnswer,
    Limits,
    Policy,
    PolicyEngine,
    PolicyError,
    PreApproval,
    Rule,
    ToolCall,
    ToolKind,
    Verdict,
    call_digest,
    policy_json_schema,
)
from harnesscheck.core.scope import ToolScope


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def root(tmp_path: Path) -> Path:
    tree = tmp_path / "repo"
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "a.py").write_text("alpha\n")
    (tree / "docs").mkdir()
    return tree


def engine(root: Path, policy: Policy | None = None, **kw) -> PolicyEngine:
    return PolicyEngine(policy, root=root, session=kw.pop("session", "s1"), **kw)


def ask_writes() -> Policy:
    return Policy(rules=(Rule(decision=Verdict.APPROVAL_REQUIRED, kinds=(ToolKind.WRITE,)),))


# -- rules and defaults


def test_defaults_fail_closed_for_commands_network_and_unknown_kinds(root):
    e = engine(root)
    assert e.decide(e.host_call("read_file", {"path": "src/a.py"})).verdict is Verdict.ALLOW
    assert e.decide(e.host_call("write_file", {"path": "x", "content": "y"})).verdict is Verdict.ALLOW
    for kind in (ToolKind.EXECUTE, ToolKind.NETWORK, ToolKind.OTHER):
        decision = e.decide(ToolCall("Bash", {"command": "ls"}, kind))
        assert decision.verdict is Verdict.DENY and decision.code == "default"
    assert e.host_call("shell", {}).kind is ToolKind.OTHER


def test_deny_beats_approval_beats_allow_whatever_the_order(root):
    rules = (
        Rule(decision=Verdict.ALLOW, tools=("write_file",)),
        Rule(decision=Verdict.DENY, tools=("write_*",), paths=(".github/*",)),
        Rule(decision=Verdict.APPROVAL_REQUIRED, kinds=(ToolKind.WRITE,)),
    )
    for ordered in (rules, rules[::-1]):
        e = engine(root, Policy(rules=ordered))
        assert e.decide(e.host_call("write_file", {"path": ".github/ci.yml", "content": ""})).verdict is Verdict.DENY
        assert e.decide(e.host_call("write_file", {"path": "src/b.py", "content": ""})).verdict is Verdict.APPROVAL_REQUIRED


def test_path_rules_match_beneath_the_root_only(root):
    e = engine(root, Policy(rules=(Rule(decision=Verdict.DENY, paths=("src/*",)),)))
    assert e.decide(e.host_call("read_file", {"path": "src/a.py"})).verdict is Verdict.DENY
    assert e.decide(e.host_call("read_file", {"path": str(root / "src" / "a.py")})).verdict is Verdict.DENY
    assert e.decide(e.host_call("read_file", {"path": "docs/x"})).verdict is Verdict.ALLOW
    # a path that climbs out is placed nowhere: no path rule matches it (the scope refuses it)
    assert e.host_call("read_file", {"path": "../src/a.py"}).path is None


def test_digest_binds_tool_arguments_root_and_session(root, tmp_path_factory):
    base = call_digest("write_file", {"path": "a", "content": "x"}, root, "s1")
    assert base == call_digest("write_file", {"content": "x", "path": "a"}, root, "s1")  # canonical order
    other_root = tmp_path_factory.mktemp("other")
    changed = [
        call_digest("edit_file", {"path": "a", "content": "x"}, root, "s1"),
        call_digest("write_file", {"path": "a", "content": "x "}, root, "s1"),
        call_digest("write_file", {"path": "b", "content": "x"}, root, "s1"),
        call_digest("write_file", {"path": "a", "content": "x"}, other_root, "s1"),
        call_digest("write_file", {"path": "a", "content": "x"}, root, "s2"),
    ]
    assert base not in changed and len(set(changed)) == len(changed)


# -- approvals


def test_an_approval_authorizes_exactly_the_call_it_was_asked_for(root):
    asked = []

    def approver(request):
        asked.append(request)
        return len(asked) == 1  # yes to the first question, no to any other

    e = engine(root, ask_writes(), approver=approver)
    first = e.host_call("write_file", {"path": "src/b.py", "content": "one"})
    assert e.authorize(first).code == "approved"
    assert asked[0].digest == e.digest(first) and asked[0].kind is ToolKind.WRITE and asked[0].path == "src/b.py"
    assert e.authorize(first).code == "approved" and len(asked) == 1  # the grant is kept, not asked again
    changed = e.host_call("write_file", {"path": "src/b.py", "content": "two"})
    decision = e.authorize(changed)
    assert decision.verdict is Verdict.DENY and decision.code == "approval_denied" and len(asked) == 2


def test_an_approval_never_crosses_to_another_session(root):
    e1 = engine(root, ask_writes(), approver=lambda r: True, session="s1")
    e2 = engine(root, ask_writes(), session="s2")
    call = {"path": "src/b.py", "content": "one"}
    assert e1.authorize(e1.host_call("write_file", call)).allowed
    assert e2.authorize(e2.host_call("write_file", call)).code == "no_approver"


def test_an_expired_approval_is_refused_and_asked_again(root):
    clock, answers = Clock(), iter([ApprovalAnswer(approve=True, ttl_s=60), False])
    e = engine(root, ask_writes(), approver=lambda r: next(answers), clock=clock)
    call = e.host_call("write_file", {"path": "src/b.py", "content": "one"})
    assert e.authorize(call).allowed
    clock.now += 61
    assert e.authorize(call).code == "approval_denied"


def test_an_approval_with_no_lifetime_authorizes_nothing(root):
    e = engine(root, ask_writes(), approver=lambda r: ApprovalAnswer(approve=True, ttl_s=0))
    assert e.authorize(e.host_call("write_file", {"path": "x", "content": ""})).code == "approval_expired"


def test_a_pattern_approval_covers_its_pattern_only(root):
    e = engine(root, ask_writes(), approver=lambda r: ApprovalAnswer(approve=True, tools=("write_file",), paths=("docs/*",)))
    assert e.authorize(e.host_call("write_file", {"path": "docs/a.md", "content": ""})).code == "approved"
    # docs/b.md is covered by the grant without asking; src/ is not covered: asked again, and yes again
    asked = []
    e.approver = lambda r: asked.append(r) or False
    assert e.authorize(e.host_call("write_file", {"path": "docs/b.md", "content": ""})).allowed and not asked
    assert e.authorize(e.host_call("write_file", {"path": "src/c.py", "content": ""})).code == "approval_denied"
    assert e.authorize(e.host_call("edit_file", {"path": "docs/a.md", "old": "a", "new": "b"})).code == "approval_denied"


def test_an_unanswered_approval_is_denied_at_its_timeout(root):
    release = threading.Event()
    e = engine(root, ask_writes().model_copy(update={"approval_timeout_s": 0.05}), approver=lambda r: release.wait(30))
    try:
        decision = e.authorize(e.host_call("write_file", {"path": "x", "content": ""}))
    finally:
        release.set()
    assert decision.verdict is Verdict.DENY and decision.code == "approval_timeout"


def test_async_approvers_and_failing_approvers(root):
    async def yes(request):
        await asyncio.sleep(0)
        return ApprovalAnswer(approve=True)

    async def never(request):
        await asyncio.sleep(30)

    def broken(request):
        raise RuntimeError("approver crashed")

    call = {"path": "x", "content": ""}
    assert engine(root, ask_writes(), approver=yes).authorize(engine(root).host_call("write_file", call)).allowed
    slow = engine(root, ask_writes().model_copy(update={"approval_timeout_s": 0.05}), approver=never)
    assert slow.authorize(slow.host_call("write_file", call)).code == "approval_timeout"
    bad = engine(root, ask_writes(), approver=broken)
    assert bad.authorize(bad.host_call("write_file", call)).code == "approval_failed"
    odd = engine(root, ask_writes(), approver=lambda r: "yes")  # not an answer: a no
    assert odd.authorize(odd.host_call("write_file", call)).code == "approval_failed"


def test_preapprovals_hold_until_their_expiry(root):
    now = datetime(2026, 12, 5, tzinfo=timezone.utc)
    policy = ask_writes().model_copy(update={"preapprove": (PreApproval(tools=("write_file",), paths=("docs/*",), expires=now + timedelta(hours=1)),)})
    e = engine(root, policy, wall_clock=lambda: now)
    assert e.authorize(e.host_call("write_file", {"path": "docs/a.md", "content": ""})).code == "preapproved"
    assert e.authorize(e.host_call("write_file", {"path": "src/a.py", "content": ""})).code == "no_approver"
    later = engine(root, policy, wall_clock=lambda: now + timedelta(hours=2))
    assert later.authorize(later.host_call("write_file", {"path": "docs/a.md", "content": ""})).code == "no_approver"


# -- limits


def test_each_limit_denies_the_call_past_it_and_stays_reached(root):
    e = engine(root, Policy(limits=Limits(tool_calls=2)))
    read = e.host_call("read_file", {"path": "src/a.py"})
    for _ in range(2):
        assert e.authorize(read).allowed
        e.record(read, ran=True)
    assert e.authorize(read).code == "limit_reached" and e.limit_reached == "tool_calls"

    e = engine(root, Policy(limits=Limits(bytes_written=5)))
    small = e.host_call("write_file", {"path": "a", "content": "1234"})
    assert e.authorize(small).allowed
    e.record(small, ran=True)
    assert e.authorize(e.host_call("write_file", {"path": "b", "content": "12"})).code == "limit_reached"
    assert e.limit_reached == "bytes_written"
    assert e.authorize(e.host_call("read_file", {"path": "src/a.py"})).code == "limit_reached"  # stays reached

    e = engine(root, Policy(limits=Limits(files_touched=1)))
    first = e.host_call("write_file", {"path": "a", "content": ""})
    e.record(first, ran=True)
    assert e.authorize(e.host_call("edit_file", {"path": "a", "old": "x", "new": "y"})).allowed  # the same file
    assert e.authorize(e.host_call("write_file", {"path": "b", "content": ""})).code == "limit_reached"

    e = engine(root, Policy(limits=Limits(turns=1)))
    assert e.count_turn() and not e.count_turn() and e.limit_reached == "turns"


# -- the choke point acts on it


def test_dispatch_runs_nothing_the_policy_denies_and_traces_the_decision(root, tmp_path_factory):
    scope = ToolScope(root=root, read_only=False)
    trace_path = tmp_path_factory.mktemp("t") / "trace.jsonl"
    trace = Trace(trace_path)
    e = engine(root, Policy(rules=(Rule(decision=Verdict.DENY, paths=("src/*",), reason="src is frozen"),)))
    result = dispatch("write_file", {"path": "src/a.py", "content": "pwned"}, scope, trace, policy=e)
    assert not result.ok and result.code == "policy_denied" and "src is frozen" in result.text
    assert (root / "src" / "a.py").read_text() == "alpha\n"
    ok = dispatch("write_file", {"path": "docs/n.md", "content": "fine"}, scope, trace, policy=e)
    assert ok.ok and (root / "docs" / "n.md").read_text() == "fine"
    records = [json.loads(line) for line in trace_path.read_text().splitlines()]
    tools = [r for r in records if r.get("tool") in ("write_file",)]
    assert [(r["decision"], r.get("policy")) for r in tools] == [("refuse", "rule"), ("allow", "default")]
    assert all(len(r["digest"]) == 16 for r in tools)
    assert e.used.tool_calls == 2 and e.used.bytes_written == 4  # the denied call counts too


def test_dispatch_ends_at_a_limit_with_nothing_past_it_done(root):
    scope = ToolScope(root=root, read_only=False)
    e = engine(root, Policy(limits=Limits(files_touched=2)))
    results = [dispatch("write_file", {"path": f"docs/{i}.md", "content": "x"}, scope, policy=e) for i in range(4)]
    assert [r.ok for r in results] == [True, True, False, False]
    assert {r.code for r in results[2:]} == {"limit_reached"}
    assert sorted(p.name for p in (root / "docs").iterdir()) == ["0.md", "1.md"]


def test_an_approval_required_write_does_not_run_before_its_approval(root):
    scope = ToolScope(root=root, read_only=False)
    seen_on_disk = []

    def approver(request):
        seen_on_disk.append((root / "docs" / "w.md").exists())
        return True

    e = engine(root, ask_writes(), approver=approver)
    assert dispatch("write_file", {"path": "docs/w.md", "content": "x"}, scope, policy=e).ok
    assert seen_on_disk == [False]


# -- the policy file


def test_a_policy_file_loads_and_a_bad_one_names_the_field(tmp_path):
    good = tmp_path / "policy.toml"
    good.write_text(
        'approval_timeout_s = 30\n[defaults]\nwrite = "approval_required"\n'
        '[[rules]]\ndecision = "deny"\ntools = ["write_file", "edit_file"]\npaths = [".github/*"]\n'
        '[[preapprove]]\ntools = ["write_file"]\npaths = ["docs/*"]\n[limits]\ntool_calls = 50\n'
    )
    policy = Policy.load(good)
    assert policy.default_for(ToolKind.WRITE) is Verdict.APPROVAL_REQUIRED
    assert policy.default_for(ToolKind.EXECUTE) is Verdict.DENY  # an unnamed kind keeps its default
    assert policy.limits.tool_calls == 50 and policy.rules[0].paths == (".github/*",)
    bad = tmp_path / "bad.toml"
    bad.write_text('[[rules]]\ndecision = "maybe"\n')
    with pytest.raises(PolicyError, match=r"bad.toml: rules.0.decision"):
        Policy.load(bad)
    (tmp_path / "x.toml").write_text("[[")
    with pytest.raises(PolicyError, match="not TOML"):
        Policy.load(tmp_path / "x.toml")


def test_the_published_schema_is_the_models():
    published = Path(__file__).resolve().parents[2] / "doc" / "policy.schema.json"
    assert json.loads(published.read_text()) == policy_json_schema(), (
        "doc/policy.schema.json is stale: python -m harnesscheck.core.policy > doc/policy.schema.json"
    )


# -- backends obey it: the fake (in process) and the api host loop (all three wires)


def fake_session(root: Path, tmp_path: Path, turns, **request_kw):
    from harnesscheck.backends.fake import FakeScript
    from harnesscheck.backends.registry import resolve_provider
    from harnesscheck.core.config import Settings
    from harnesscheck.core.contracts import AgentSessionRequest

    transport = resolve_provider(Settings(backend="fake"))
    transport.script = FakeScript(turns=turns)
    req = AgentSessionRequest(prompt="go", scope=ToolScope(root=root, read_only=False), run_dir=tmp_path / "run", **request_kw)
    out = transport.run_session(req)
    return out, transport._logs[out.session_id]


def test_the_fake_backend_denies_runs_nothing_and_the_model_reads_the_refusal(root, tmp_path):
    from harnesscheck.backends.fake import FakeTurn
    from harnesscheck.backends.fake import ToolCall as FakeCall

    turns = [FakeTurn(tool_calls=[FakeCall("write_file", {"path": "src/a.py", "content": "pwned"})]), FakeTurn(text="ok")]
    policy = Policy(rules=(Rule(decision=Verdict.DENY, kinds=(ToolKind.WRITE,)),))
    out, log = fake_session(root, tmp_path, turns, policy=policy)
    assert out.status.value == "ok" and [(r.tool, r.code) for r in out.refusals] == [("write_file", "policy_denied")]
    assert (root / "src" / "a.py").read_text() == "alpha\n"
    assert log.model_saw[0].startswith("refused: policy_denied:")


def test_the_fake_backend_ends_typed_at_a_limit(root, tmp_path):
    from harnesscheck.backends.fake import FakeTurn
    from harnesscheck.backends.fake import ToolCall as FakeCall

    many = [FakeTurn(tool_calls=[FakeCall("write_file", {"path": f"docs/{i}.md", "content": "x"})]) for i in range(5)]
    out, _ = fake_session(root, tmp_path, many + [FakeTurn(text="done")], policy=Policy(limits=Limits(tool_calls=2)))
    assert (out.status.value, out.error_class.value) == ("truncated", "budget")
    assert sorted(p.name for p in (root / "docs").iterdir()) == ["0.md", "1.md"]
    out, _ = fake_session(root, tmp_path / "again", [FakeTurn(text="a")], policy=Policy(limits=Limits(turns=0)))
    assert (out.status.value, out.error_class.value) == ("truncated", "budget")


def test_the_approver_of_a_request_is_asked_before_the_write(root, tmp_path):
    from harnesscheck.backends.fake import FakeTurn
    from harnesscheck.backends.fake import ToolCall as FakeCall

    asked = []

    def approver(request):
        asked.append((request.tool, request.path, (root / "docs" / "n.md").exists()))
        return True

    turns = [FakeTurn(tool_calls=[FakeCall("write_file", {"path": "docs/n.md", "content": "x"})]), FakeTurn(text="ok")]
    out, _ = fake_session(root, tmp_path, turns, policy=ask_writes(), approver=approver)
    assert out.status.value == "ok" and out.refusals == [] and asked == [("write_file", "docs/n.md", False)]
    assert (root / "docs" / "n.md").read_text() == "x"


# -- harnesscheck run: the policy file, the terminal approver, the events on stdout


def test_the_terminal_approver_asks_on_the_tty_and_only_yes_approves(monkeypatch, root):
    import os
    import pty
    import sys

    from harnesscheck.apps.runner import terminal_approver
    from harnesscheck.core.policy import ApprovalRequest

    monkeypatch.setattr(sys.stdin, "isatty", lambda: False, raising=False)
    assert terminal_approver() is None, "without a terminal there is no approver: approval_required is denied"
    master, slave = pty.openpty()
    try:
        monkeypatch.setattr(sys.stdin, "isatty", lambda: True, raising=False)
        monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
        approve = terminal_approver(os.ttyname(slave))
        request = ApprovalRequest("write_file", {"path": "a", "content": "x"}, ToolKind.WRITE, "a", "f" * 64, "s", str(root), "")
        for typed, expected in ((b"y\n", True), (b"yes\n", True), (b"n\n", False), (b"\n", False), (b"maybe\n", False)):
            os.write(master, typed)
            assert approve(request) is expected, typed
        shown = os.read(master, 4096).decode()
        assert "approve write_file a (write, call ffffffffffff)? [y/N]" in shown
    finally:
        os.close(master)
        os.close(slave)


def test_run_prints_events_as_json_lines_and_obeys_the_policy_file(tmp_path, capsys, monkeypatch):
    from harnesscheck.apps.runner import run_command

    monkeypatch.chdir(tmp_path)
    wt = tmp_path / "wt"
    (wt / ".github").mkdir(parents=True)
    policy = tmp_path / "policy.toml"
    policy.write_text('[[rules]]\ndecision = "deny"\npaths = [".github/*"]\n')
    script = json.dumps(
        {
            "turns": [
                {"tool_calls": [["write_file", {"path": ".github/ci.yml", "content": "x"}], ["write_file", {"path": "ok.md", "content": "y"}]]},
                {"text": "done"},
            ]
        }
    )
    code = run_command(backend="fake", root=wt, prompt=script, write=True, policy_file=policy, events=True, run_dir=tmp_path / "run")
    assert code == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    decisions = [(e["path"] if "path" in e else None, e.get("decision"), e.get("code")) for e in lines if e["kind"] == "tool_decision"]
    assert [d[1:] for d in decisions] == [("deny", "rule"), ("allow", "default")]
    assert lines[-1]["kind"] == "end" and not (wt / ".github" / "ci.yml").exists() and (wt / "ok.md").read_text() == "y"
