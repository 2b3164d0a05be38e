"""Parity ratchets: every backend gives the same normalized answer to the same situation —
one outcome schema, and the refusal codes dispatch itself gives, whichever path the call took."""

from __future__ import annotations

from harnesscheck.core.contracts import AgentOutcome, OutcomeStatus
from harnesscheck.kit.catalog import check
from harnesscheck.kit.session import ToolCall

HOSTILE = [
    ToolCall("read_file", {"path": "../outside/secret.txt"}),
    ToolCall("read_file", {"path": "leak"}),
    ToolCall("read_file", {"path": "/proc/self/environ"}),
    ToolCall("list_dir", {"path": "../outside"}),
    ToolCall("write_file", {"path": "new.txt", "content": "x"}),
]


@check("parity.outcome-schema")
def test_outcome_schema(but):
    """The outcome is an AgentOutcome that round-trips through JSON and names its backend."""
    run = but.shared_run("success")
    again = AgentOutcome.model_validate_json(run.outcome.model_dump_json())
    assert again == run.outcome
    assert run.outcome.backend == but.spec.id, f"backend label {run.outcome.backend!r} != {but.spec.id!r}"
    assert run.outcome.status == OutcomeStatus.ok and run.outcome.text, "a success scenario gives text"


@check("parity.refusal-codes-match-dispatch", incident=["G4", "P1", "P4", "P6", "P15"])
def test_refusal_codes_match_dispatch(but):
    """Refusal codes seen through the backend equal what dispatch returns in-process for the same
    calls; a call to a tool the scope never offered is refused or never reaches dispatch at all."""
    from harnesscheck.choke.dispatch import dispatch

    if not but.built_on_dispatch():
        but.skip(
            "unsupported-by-backend",
            f"{but.spec.id} refuses through its own dispatcher: harnesscheck's reason "
            "codes are not its contract (the scope checks judge its refusals by what the model saw)",
        )
    ws = but.workspace()
    scope = ws.scope(read_only=True)
    offered = set(scope.tool_names())
    expected, unoffered = [], []
    for call in HOSTILE:
        result = dispatch(call.name, dict(call.args), scope)
        assert not result.ok, f"kit premise: dispatch allowed {call}"
        (expected if call.name in offered else unoffered).append((call.name, result.code))
    run = but.run_tools(HOSTILE, workspace=ws, read_only=True)
    got = sorted((r.tool, r.code) for r in run.outcome.refusals)  # a real CLI may reorder parallel calls
    # A real CLI refuses a call to a tool it was never offered before the bridge sees it; when
    # the call does reach dispatch, its refusal must carry dispatch's own code.
    for item in unoffered:
        if item in got:
            got.remove(item)
    assert got == sorted(expected), f"refusals through {but.spec.id}: {got}\n   dispatch in-process: {sorted(expected)}"
    allowed = [r for r in run.trace if r.get("event") == "tool" and r.get("decision") == "allow" and r.get("tool") in {name for name, _ in unoffered}]
    assert not allowed, f"a tool the scope never offered was executed: {allowed}"
    assert not (ws.root / "new.txt").exists(), "a write happened in a read-only scope"
