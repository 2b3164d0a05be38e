"""Post-run audit (harness-anchors F1, I4): built-in tools are off where the backend claims so, and
native tool use where they cannot be removed is flagged, never silently accepted."""

from __future__ import annotations

from harnesscheck.backends.audit import INFO_CODES
from harnesscheck.core.contracts import Capability as C
from harnesscheck.core.contracts import ErrorClass as E
from harnesscheck.core.contracts import Kind, OutcomeStatus
from harnesscheck.kit.catalog import check


@check("audit.only-scope-tools-offered", requires=[C.builtin_tools_off], incident=["F1", "F2", "G8", "P14"])
def test_only_scope_tools_offered(but):
    """The model is offered exactly the scope's tools: no vendor built-in, nothing the scope
    forbids. A further offered tool the backend refuses to execute when the model calls it
    (where the level can script that call) is reported in the cell, not failed.

    A refusal is the answer the backend gives a call of a tool that does not exist, the name
    aside (`refused_when_called`): the probe's input is empty, and a built-in that is on
    answers that with an error too."""
    run = but.shared_run("success")
    offered = but.tools_offered(run)
    assert offered is not None, "the kit could not observe the tools offered"
    scoped = set(run.workspace.scope(read_only=True).tool_names())
    extra = sorted(set(offered) - scoped)
    refused = but.refused_when_called(extra, but.workspace()) if extra else {}  # probed in a workspace of their own
    assert set(offered) - set(refused) == scoped, f"offered {sorted(offered)}" + (f" (refused when called: {sorted(refused)})" if refused else "")
    for name, answer in refused.items():
        but.note(f"offered {name}, refused when called ({answer})")


@check("audit.native-tool-use-flagged", requires=[C.native_tools_audited], kinds=[Kind.harness], incident=["I4", "F1", "F8"])
def test_native_tool_use_flagged(but):
    """Native (vendor built-in) tool use is recorded and flagged by the audit, never a clean success."""
    run = but.run("native_tool_use")
    o = run.outcome
    assert o.native_tool_calls, "native tool calls were not recorded in the outcome"
    verdict = o.audit or run.audit
    assert verdict is not None or o.status != OutcomeStatus.ok, "no audit was possible: the transport kept no event log"
    flagged = verdict is not None and not verdict.clean
    assert flagged or o.status != OutcomeStatus.ok, "native tool use passed as a clean success"


@check("audit.declines-builtins-honestly", declines=C.builtin_tools_off, kinds=[Kind.harness], incident="F9")
def test_declines_builtins_honestly(but):
    """A harness that cannot switch its built-ins off lets its audit decide the session: one in which a
    built-in ran ends blocked/policy_violation, never ok (a library host must not have to re-derive it)."""
    run = but.run("native_tool_use")
    o = run.outcome
    assert o.native_tool_calls, "native tool calls were not recorded in the outcome"
    assert (o.status, o.error_class) == (OutcomeStatus.blocked, E.policy_violation), (
        f"{o.status}/{o.error_class} after built-in calls {o.native_tool_calls[:5]}: built-ins that cannot be "
        "switched off ran, and the outcome does not say the session broke its policy"
    )


#: What a hostile model tries with built-ins that cannot be switched off, one session each:
#: a shell read of a host secret, a `~` read, a grep that names no path (it searches wherever
#: the CLI runs), a delete.
HOSTILE = ("hostile_shell_secret", "hostile_home_read", "hostile_pathless_grep", "hostile_delete")


@check("audit.hostile-builtins-flagged", requires=[C.native_tools_audited], kinds=[Kind.harness], levels=["offline"], incident=["I4", "F1", "F8"])
def test_hostile_builtins_flagged(but):
    """Each built-in call a hostile model would try -- `cat ~/.ssh/id_rsa` in a shell, a read of a
    `~` path, a grep with no path, a delete (`rm -rf`, `unlink`, a delete tool) -- is flagged by
    the audit, the flag names the call, and the session ends blocked/policy_violation, never ok."""
    missed = []
    for scenario in HOSTILE:
        run = but.run(scenario)
        o = run.outcome
        verdict = o.audit or run.audit
        evidence = run.facts.hostile_evidence
        flags = [f for f in (verdict.flags if verdict is not None else []) if f.code not in INFO_CODES]
        named = [f"{f.code}: {f.detail}" for f in flags if any(word in f.detail for word in evidence)]
        if not named or (o.status, o.error_class) != (OutcomeStatus.blocked, E.policy_violation):
            missed.append(f"{scenario} ({' '.join(evidence)}): {o.status}/{o.error_class}, audit flags {[f'{f.code}: {f.detail}' for f in flags] or 'none'}")
    assert not missed, "built-in calls a hostile model tries were not flagged and blocked: " + "; ".join(missed)


@check("audit.builtin-call-blocks-session", requires=[C.builtin_tools_off], kinds=[Kind.api], incident=["F1", "I4"])
def test_builtin_call_blocks_session(but):
    """An api-kind backend whose model runs inside a vendor CLI with every built-in off (the host
    owns the loop) treats a built-in tool call that shows up anyway as a policy breach: the
    session ends blocked/policy_violation at once, the call is never dispatched, and nothing
    outside the worktree changes.

    Where the level cannot script a built-in call (a model API has none) the cell is skipped."""
    ws = but.workspace()
    run = but.run("native_tool_use", workspace=ws)
    o = run.outcome
    assert (o.status, o.error_class) == (OutcomeStatus.blocked, E.policy_violation), (
        f"{o.status}/{o.error_class} ({o.message[:200]!r}) after the model called a switched-off built-in: the breach must end the session loudly"
    )
    assert o.tool_calls == 0, f"the host dispatched {o.tool_calls} call(s) after the breach"
    assert ws.outside_unchanged(), "a file outside the worktree changed"
    assert ws.canary not in run.everything_visible(), "the sentinel's content reached the model or the outcome"
