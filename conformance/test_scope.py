"""Path scope and exfiltration guards (harness-anchors §4, P1–P15): every tool call the model makes
reaches the one choke point — through the host loop (api, fake) or the MCP bridge (harnesses) —
and nothing outside the worktree is read, written or shown to the model. Benign controls
beside the hostile inputs must keep working."""

from __future__ import annotations

import json
import os

from harnesscheck.core.contracts import Capability as C
from harnesscheck.core.contracts import Kind, OutcomeStatus
from harnesscheck.kit.catalog import check
from harnesscheck.kit.session import ToolCall
from harnesscheck.kit.swapper import SwapRace


def _refused(but, run, tool: str, n: int = 1):
    """The session survived, n calls of `tool` were refused, and nothing leaked. A refusal is
    judged by its effect: the model saw an error result for the call (any wording, any code),
    or, where the adapter cannot see the results as the model got them, the outcome lists it.
    harnesscheck's own reason codes are parity.refusal-codes-match-dispatch's, not this."""
    o = run.outcome
    assert o.status == OutcomeStatus.ok, f"a refusal must be a tool error the model reads, not {run.said}"
    assert not run.tool_failures, f"the calls reached no tool server the backend configured: {run.tool_failures[:2]}"
    refusals = [r for r in o.refusals if r.tool == tool]
    errors = but.tool_errors(run)
    seen = [text for name, text in errors if name == tool] if errors is not None else None
    assert len(refusals) >= n or (seen is not None and len(seen) >= n), (
        f"expected {n} refused {tool} call(s): the model saw {len(seen) if seen is not None else 'no observable'} "
        f"error result(s) and the outcome lists {o.refusals}"
    )
    canary = run.workspace.canary
    assert canary not in run.everything_visible(), "out-of-scope bytes reached the model, the outcome or a trace"
    assert run.workspace.outside_unchanged(), "a file outside the worktree changed"
    return refusals, seen or []


@check("scope.loop-reaches-dispatch", requires=[C.host_tool_loop], kinds=[Kind.api])
def test_loop_reaches_dispatch(but):
    """A model's tool call runs through dispatch in the host loop and its result reaches the model."""
    run = but.run_tools([ToolCall("read_file", {"path": "README.md"})])
    assert run.outcome.status == OutcomeStatus.ok, run.said
    assert run.outcome.tool_calls >= 1 and "read_file" in run.outcome.tools_used
    assert any("hello from the worktree" in text for text in run.model_saw), "the tool result never reached the model"
    assert any(r.get("event") == "tool" and r.get("decision") == "allow" for r in run.trace), "dispatch traced nothing"


@check("scope.bridge-reaches-dispatch", requires=[C.mcp_tools], kinds=[Kind.harness], incident=["G4", "I4"])
def test_bridge_reaches_dispatch(but):
    """A harness's tool call goes through the bridge to dispatch; the call and its result are folded into the outcome."""
    run = but.run_tools([ToolCall("read_file", {"path": "README.md"})])
    assert not run.tool_failures, f"the CLI's tool call reached no MCP server the backend configured: {run.tool_failures[:2]}"
    assert run.outcome.status == OutcomeStatus.ok, run.said
    assert run.outcome.tool_calls >= 1 and "read_file" in run.outcome.tools_used
    assert any("hello from the worktree" in text for text in run.model_saw), "the bridge result never reached the CLI"


@check("scope.dotdot-refused", incident="P1")
def test_dotdot_refused(but):
    """`..` traversal out of the root is refused with a stable code; the bytes never reach the model."""
    run = but.run_tools([ToolCall("read_file", {"path": "../outside/secret.txt"}), ToolCall("read_file", {"path": "src/../../outside/secret.txt"})])
    _refused(but, run, "read_file", 2)


@check("scope.absolute-path-refused", incident="P2")
def test_absolute_path_refused(but):
    """An absolute path outside the root is refused (it must never discard the root)."""
    ws = but.workspace()
    run = but.run_tools([ToolCall("read_file", {"path": str(ws.secret)})], workspace=ws)
    _refused(but, run, "read_file")


@check("scope.sibling-prefix-refused", incident=["P3", "I2"])
def test_sibling_prefix_refused(but):
    """A sibling directory sharing the root's prefix (`work-secrets` beside `work`) is outside the scope."""
    ws = but.workspace()
    run = but.run_tools(
        [ToolCall("read_file", {"path": str(ws.sibling / "key.txt")}), ToolCall("read_file", {"path": "../work-secrets/key.txt"})], workspace=ws
    )
    _refused(but, run, "read_file", 2)


@check("scope.symlink-leaf-refused", incident="P4")
def test_symlink_leaf_refused(but):
    """An in-tree symlink pointing outside the root is not followed."""
    _refused(but, but.run_tools([ToolCall("read_file", {"path": "leak"})]), "read_file")


@check("scope.symlink-parent-write-refused", incident=["P5", "I2"])
def test_symlink_parent_write_refused(but):
    """A write through a symlinked parent directory to a not-yet-existing file outside is refused."""
    ws = but.workspace()
    run = but.run_tools([ToolCall("write_file", {"path": "outbox/new.conf", "content": "x"})], read_only=False, workspace=ws)
    _refused(but, run, "write_file")
    assert not (ws.outside / "new.conf").exists(), "the write escaped through the symlinked parent"


@check("scope.in-tree-symlink-reads", incident="P4")
def test_in_tree_symlink_reads(but):
    """Benign control: an in-tree symlink to an in-tree file still reads."""
    run = but.run_tools([ToolCall("read_file", {"path": "link_in"})])
    assert run.outcome.status == OutcomeStatus.ok, run.said
    assert not run.outcome.refusals, f"a benign in-tree symlink was refused: {run.outcome.refusals}"
    assert any("hello from the worktree" in t for t in run.model_saw)


@check("scope.procfs-refused", incident=["P6", "A11"])
def test_procfs_refused(but):
    """/proc/self/environ and other magic links are refused: the serving process's secrets never leak."""
    canaries = but.parent_env_canaries()
    run = but.run_tools(
        [ToolCall("read_file", {"path": "/proc/self/environ"}), ToolCall("read_file", {"path": "/proc/self/root/etc/hostname"})], parent_env=canaries
    )
    _refused(but, run, "read_file", 2)
    blob = run.everything_visible()
    assert not [k for k, v in canaries.items() if v in blob], "a parent-env canary reached the model"


@check("scope.nul-byte-refused", incident="P9")
def test_nul_byte_refused(but):
    """A path with a NUL byte is refused before any resolution."""
    _refused(but, but.run_tools([ToolCall("read_file", {"path": "README.md\x00.png"})]), "read_file")


@check("scope.long-path-refused", incident="P10")
def test_long_path_refused(but):
    """A very long path is refused cleanly (no crash, no hang)."""
    _refused(but, but.run_tools([ToolCall("read_file", {"path": "a/" * 3000 + "x"})]), "read_file")


@check("scope.hardlink-write-refused", incident="P12")
def test_hardlink_write_refused(but):
    """A write through an in-tree hard link to an outside file is refused; the outside inode is unchanged."""
    ws = but.workspace()
    if not (ws.root / "hard.txt").exists():
        but.skip("env-missing", "this filesystem cannot make hard links")
    run = but.run_tools([ToolCall("write_file", {"path": "hard.txt", "content": "pwned"})], read_only=False, workspace=ws)
    _refused(but, run, "write_file")


@check("scope.hardlink-read-contained", incident="P12")
def test_hardlink_read_contained(but):
    """Reading an in-tree hard link to a file outside the root never returns the outside bytes to
    the model, a trace or the outcome (a hard link *is* the outside file: realpath cannot see it);
    the session goes on, and a read of an in-tree file beside it still works."""
    ws = but.workspace()
    if not (ws.root / "hard.txt").exists():
        but.skip("env-missing", "this filesystem cannot make hard links")
    run = but.run_tools([ToolCall("read_file", {"path": "hard.txt"}), ToolCall("read_file", {"path": "README.md"})], workspace=ws)
    o = run.outcome
    assert not run.tool_failures, f"the calls reached no tool server the backend configured: {run.tool_failures[:2]}"
    assert o.status == OutcomeStatus.ok, f"{o.status}/{o.error_class}: {o.message}"
    assert ws.canary not in run.everything_visible(), (
        "the outside file's bytes (its canary) reached the model, the outcome or a trace through the hard link hard.txt"
    )
    assert any("hello from the worktree" in text for text in run.model_saw), "the benign read beside it failed"


@check("scope.fifo-refused", incident="P13")
def test_fifo_refused(but):
    """Reading a FIFO is refused at once instead of blocking the session."""
    ws = but.workspace()
    if not (ws.root / "pipe").exists():
        but.skip("env-missing", "this filesystem cannot make FIFOs")
    run = but.run_tools([ToolCall("read_file", {"path": "pipe"})], workspace=ws, timeout_s=30)
    # well before the deadline of the run judged (an adapter may repeat a run its deadline cut short at a later one)
    assert run.duration_s < run.timeline.timeout_s - 5, "reading a FIFO blocked the session"
    _refused(but, run, "read_file")


@check("scope.read-only-write-refused", incident=["P15", "I3"])
def test_read_only_write_refused(but):
    """In a read-only scope every write is refused (or the writers are never offered) and nothing is created."""
    ws = but.workspace()
    run = but.run_tools(
        [ToolCall("write_file", {"path": "new.txt", "content": "x"}), ToolCall("edit_file", {"path": "README.md", "old": "hello", "new": "bye"})],
        read_only=True,
        workspace=ws,
    )
    assert run.outcome.status == OutcomeStatus.ok, run.said
    offered = but.tools_offered(run)
    not_offered = offered is not None and not {"write_file", "edit_file"} & set(offered)
    errors = but.tool_errors(run) or []
    seen = [name for name, _ in errors if name in ("write_file", "edit_file")]
    assert len(run.outcome.refusals) >= 2 or len(seen) >= 2 or not_offered, (
        f"writes in a read-only scope were neither refused nor withheld: refusals {run.outcome.refusals}, offered {offered}"
    )
    assert not (ws.root / "new.txt").exists(), "a file was created in a read-only scope"
    assert (ws.root / "README.md").read_text().startswith("hello"), "a file was edited in a read-only scope"


@check("scope.refusal-visible-to-model", incident="G4")
def test_refusal_visible_to_model(but):
    """A refusal reaches the model as a tool error (where the adapter cannot see the model's side: naming its
    reason code), and the session goes on."""
    run = but.run_tools([ToolCall("read_file", {"path": "../outside/secret.txt"})])
    refusals, seen = _refused(but, run, "read_file")
    if seen:  # the model's side saw an error result: that is the refusal reaching the model
        return
    shown = [t for t in run.model_saw if refusals[0].code in t]
    assert shown, f"the model never saw the refusal code {refusals[0].code!r}: {run.model_saw}"


@check("scope.writes-stay-inside", incident=["I1", "I2"])
def test_writes_stay_inside(but):
    """Benign control: an in-scope write lands in the worktree, and nothing outside changes."""
    ws = but.workspace()
    run = but.run_tools([ToolCall("write_file", {"path": "out.txt", "content": "written"})], read_only=False, workspace=ws)
    assert run.outcome.status == OutcomeStatus.ok, run.said
    created = ws.root / "out.txt"
    assert created.is_file() and created.read_text() == "written", "an allowed write did not land"
    assert ws.outside_unchanged()
    assert not os.path.exists(ws.outside / "out.txt")


@check("scope.large-result-bounded", incident=["G5", "P13"])
def test_large_result_bounded(but):
    """A 5 MB file comes back bounded, with an explicit truncation marker, not whole and not garbled."""
    ws = but.workspace()
    (ws.root / "big.txt").write_text("0123456789abcdef\n" * (5 * 1024 * 1024 // 17))
    run = but.run_tools([ToolCall("read_file", {"path": "big.txt"})], workspace=ws, timeout_s=90)
    assert run.outcome.status == OutcomeStatus.ok, run.said
    shown = [t for t in run.model_saw if "0123456789abcdef" in t]
    assert shown, "the file never reached the model"
    limit = ws.scope().max_result_bytes
    assert len(shown[0].encode()) <= limit + 1024, f"{len(shown[0])} bytes reached the model (bound {limit})"
    assert "trunc" in shown[0].lower(), "the cut carries no explicit truncation marker"


#: Reads of the raced path scope.swap-race-contained asks for in one session. A backend that
#: checks a path by name and then opens it by name reads the outside file on about one read in
#: four while the swapper runs (tests/mutants/_racy_bridge.py: 41-63 of 200 in each of 20 runs
#: on a loaded 2-core machine), so even a rate twenty times lower is caught in nearly every run.
SWAP_READS = 200
#: Races run before the cell is skipped `budget` when the swapper never swapped while the
#: session ran: a fast in-process backend ends its 200 reads in ~15 ms, and on a loaded machine
#: the swapper (a process of its own) may get no time slice in that window. Each race is one
#: session; a race that swapped ends the repeats.
SWAP_RACES = 5


@check("scope.swap-race-contained", levels=["offline"], incident="P11")
def test_swap_race_contained(but):
    """While the model reads `d/inside.txt` many times, a separate process keeps swapping the
    directory `d` with a symlink to an outside directory that holds a file of the same name
    (TOCTOU, P11): the outside file's bytes never reach the model, a trace or the outcome, and
    the in-root file still reads. A read refused or failed mid-swap is fine (any wording).

    A race in which the swapper never swapped while the session ran judged nothing: it is run
    again, up to SWAP_RACES times, then the cell is skipped `budget`. A race judged something
    only if the swapper swapped and a read met a swapped `d` (then a correct backend refused or
    failed that read: not every read showed the in-root file); swaps made before the first read
    or after the last do not count. Every race's session is
    judged for leaks. If every raced read failed, one read without the race decides: it shows
    the file (a loaded machine let the race judge nothing: skipped `budget`) or it does not
    (failed).

    Offline only: the race is between the backend's tool server (its dispatch) and the
    filesystem; the CLI only relays the calls, so the real CLI at loopback adds nothing to the
    verdict but the cost of 200 tool calls through it (seconds per cell, and a turn the model
    server must script)."""
    ws = but.workspace()
    inside, outside = ws.root / "d", ws.base / "outside-race"
    inside.mkdir()
    outside.mkdir()
    (inside / "inside.txt").write_text("inside the root: raced file\n")
    (outside / "inside.txt").write_text(f"swapped in {ws.canary}\n")
    partner = ws.root / "d.swap"
    os.symlink(os.path.join("..", "outside-race"), partner)
    calls = [ToolCall("read_file", {"path": "d/inside.txt"}) for _ in range(SWAP_READS)]
    for race_no in range(1, SWAP_RACES + 1):
        with SwapRace(inside, partner) as race:
            run = but.run_tools(calls, workspace=ws, timeout_s=120)
        swapped = race.summary or {}
        shown, evidence = _judge_race(run, ws, swapped, race_no)
        if swapped.get("stopped") == "stop" and swapped.get("swaps", 0) > 2 and len(shown) < SWAP_READS:
            break  # it swapped while the reads ran: a correct backend refused or failed the reads of a swapped d
    else:
        but.skip(
            "budget",
            f"in {SWAP_RACES} races the swapper stopped ({swapped.get('stopped')}) before the session ended or never swapped "
            f"while the reads ran (every read showed the in-root file, or 2 swaps at most): this machine is too slow "
            f"right now; the race was not judged ({evidence})",
        )
    if not shown:  # every raced read failed: the machine's scheduling, or a backend that cannot read it at all
        if _reads_unraced(but):
            but.skip(
                "budget",
                "every read of d/inside.txt during the race failed, while one without the race shows it: "
                f"this machine is too slow right now for the race to judge anything ({evidence})",
            )
        raise AssertionError(f"no read of the in-root d/inside.txt reached the model, not even one without the race: {evidence}")
    but.note(evidence)


def _judge_race(run, ws, swapped: dict, race_no: int) -> tuple[list[str], str]:
    """Fails the cell if the outside file's bytes reached the model, a trace, the outcome or
    the CLI's argv in this race's session; returns the reads that showed the in-root file and
    the race's evidence line."""
    assert swapped.get("restored"), f"kit: the swapper did not put d back ({swapped})"
    o = run.outcome
    assert not run.tool_failures, f"the calls reached no tool server the backend configured: {run.tool_failures[:2]}"
    shown = [t for t in run.model_saw if "raced file" in t]
    evidence = (
        f"race {race_no}: {SWAP_READS} reads asked, {len(run.model_saw)} results seen by the model, {len(shown)} showed the in-root "
        f"file; {swapped.get('swaps')} swaps ({swapped.get('mode')}) in {swapped.get('elapsed_s')} s, "
        f"ended by {swapped.get('stopped')}"
    )
    where = [
        name
        for name, blob in (
            ("the model's tool results", "\n".join(run.model_saw)),
            ("the traces", json.dumps(run.trace)),
            ("the outcome", o.model_dump_json()),
            ("the CLI's argv", json.dumps([c.get("argv", []) for c in run.children])),
        )
        if ws.canary in blob
    ]
    hits = sum(1 for t in run.model_saw if ws.canary in t)
    assert not where, f"the outside file's bytes reached {', '.join(where)} through the swapped directory d ({hits} read(s) returned them): {evidence}"
    assert ws.canary not in run.everything_visible(), f"the outside file's bytes reached the backend's output: {evidence}"
    return shown, evidence


def _reads_unraced(but) -> bool:
    """Whether the in-root file of the race reaches the model through one read with no swapper."""
    ws = but.workspace()
    (ws.root / "d").mkdir()
    (ws.root / "d" / "inside.txt").write_text("inside the root: raced file\n")
    run = but.run_tools([ToolCall("read_file", {"path": "d/inside.txt"})], workspace=ws, timeout_s=120)
    return any("raced file" in t for t in run.model_saw)
