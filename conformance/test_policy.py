"""The host's policy (doc/SPEC-policy.md): every tool call the model makes is decided by the
policy in the request before it runs. Judged by effect: the file on disk, what the model was
shown, and how the session ended; never by the backend's own report of its decisions."""

from __future__ import annotations

from harnesscheck.core.contracts import Capability as C
from harnesscheck.core.contracts import ErrorClass, OutcomeStatus
from harnesscheck.core.policy import ApprovalAnswer, Limits, Policy, Rule, ToolKind, Verdict
from harnesscheck.kit.catalog import check
from harnesscheck.kit.session import ToolCall

APP = "src/app.py"
APP_BYTES = "print('app')\n"


def _saw_an_error_for(but, run, tool: str, n: int) -> bool:
    """The model was shown n error results for `tool` (any wording), or, where the adapter
    cannot see what the model got, the outcome lists n refusals of it."""
    errors = but.tool_errors(run)
    if errors is not None and sum(1 for name, _ in errors if name == tool) >= n:
        return True
    return sum(1 for r in run.outcome.refusals if r.tool == tool) >= n


@check("policy.denied-call-never-runs", requires=[C.host_policy])
def test_denied_call_never_runs(but):
    """A tool call the host's policy denies never runs and the model reads a refusal; a call the
    policy allows beside it still runs (the policy is applied, not everything refused)."""
    policy = Policy(rules=(Rule(decision=Verdict.DENY, paths=("src/*",), reason="src/ is frozen by the host"),))
    run = but.run_tools(
        [ToolCall("write_file", {"path": APP, "content": "pwned\n"}), ToolCall("write_file", {"path": "notes.txt", "content": "allowed\n"})],
        read_only=False,
        policy=policy,
    )
    ws = run.workspace
    assert not run.tool_failures, f"the calls reached no tool server the backend configured: {run.tool_failures[:2]}"
    assert (ws.root / APP).read_text() == APP_BYTES, (
        f"{APP} was written although the policy denies writes under src/: the call ran past the host's policy "
        "(fix: pass AgentSessionRequest.policy to the choke point, dispatch(..., policy=request.policy_engine(id)))"
    )
    assert (ws.root / "notes.txt").is_file(), "the allowed write beside the denied one did not run: the policy was not applied, everything was refused"
    assert _saw_an_error_for(but, run, "write_file", 1), "the model was never shown the refusal of the denied call"
    assert run.outcome.status == OutcomeStatus.ok, f"a denial is a tool error the model reads, not {run.said}"


@check("policy.unapproved-call-never-runs", requires=[C.host_policy])
def test_unapproved_call_never_runs(but):
    """A call the policy marks approval_required does not run unless approved: the host's approver
    says no (where the backend can reach it; elsewhere there is no approver and the call is denied).
    An approver that is asked is asked before the call's effect exists."""
    asked: list[bool] = []
    target = {}

    def approver(request):
        asked.append(target["path"].exists())
        return False

    policy = Policy(rules=(Rule(decision=Verdict.APPROVAL_REQUIRED, kinds=(ToolKind.WRITE,)),))
    ws = but.workspace()
    target["path"] = ws.root / "new.txt"
    run = but.run_tools(
        [ToolCall("write_file", {"path": "new.txt", "content": "unapproved\n"})], read_only=False, policy=policy, approver=approver, workspace=ws
    )
    assert not run.tool_failures, f"the calls reached no tool server the backend configured: {run.tool_failures[:2]}"
    assert not target["path"].exists(), "new.txt was written although its approval was refused: the call ran without approval"
    assert True not in asked, "the approver was asked after the call had already written its file"
    assert _saw_an_error_for(but, run, "write_file", 1), "the model was never shown that the unapproved call was refused"


@check("policy.approval-bound-to-the-call", requires=[C.host_approvals])
def test_approval_bound_to_the_call(but):
    """An approval authorizes exactly the call it was given for: the same tool with a changed
    argument is a new call, asked again (here: refused), never covered by the first approval."""
    digests: list[str] = []

    def approver(request):
        digests.append(request.digest)
        # yes to the first call only, known by its content: a CLI may run the two calls at once,
        # and either may reach the approver first
        return ApprovalAnswer(approve=request.args.get("content") == "first\n")

    policy = Policy(rules=(Rule(decision=Verdict.APPROVAL_REQUIRED, kinds=(ToolKind.WRITE,)),))
    run = but.run_tools(
        [ToolCall("write_file", {"path": "note.txt", "content": "first\n"}), ToolCall("write_file", {"path": "note.txt", "content": "second, changed\n"})],
        read_only=False,
        policy=policy,
        approver=approver,
    )
    note = run.workspace.root / "note.txt"
    assert note.is_file() and note.read_text() == "first\n", (
        f"note.txt holds {note.read_text()!r} if it exists: the changed call ran on the first call's approval"
        if note.is_file()
        else "the approved call never ran"
    )
    assert len(digests) == 2 and digests[0] != digests[1], (
        f"the approver was asked {len(digests)} time(s) for two different calls: an approval must be bound to the "
        "call's digest (tool, canonical arguments, root, session)"
    )


@check("policy.limit-ends-session", requires=[C.host_policy])
def test_limit_ends_session(but):
    """A session that reaches a policy limit ends typed (truncated, budget) and nothing past the
    limit is done: here two tool calls are allowed, so at most two of the four writes happen."""
    calls = [ToolCall("write_file", {"path": f"limited-{i}.txt", "content": f"{i}\n"}) for i in range(4)]
    run = but.run_tools(calls, read_only=False, policy=Policy(limits=Limits(tool_calls=2)))
    root = run.workspace.root
    written = sorted(p.name for p in root.iterdir() if p.name.startswith("limited-"))
    # Which two ran is the backend's order (a CLI may reorder or retry its calls); how many is the limit's.
    assert 1 <= len(written) <= 2, f"files written under a two-call limit: {written}"
    o = run.outcome
    assert (o.status, o.error_class) == (OutcomeStatus.truncated, ErrorClass.budget), (
        f"a session that reached its tool_calls limit ended {o.status}/{o.error_class}: it must end truncated/budget so the host knows the work is incomplete"
    )
