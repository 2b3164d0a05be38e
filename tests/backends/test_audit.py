"""The post-run audit over event logs in the real claude / codex / cursor formats
(shapes from reference/cli-formats.md §1.B, §2.B, §3.B), with and without native tool use."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harnesscheck.backends.audit import (
    INFO_CODES,
    RunFacts,
    audit_events,
    find_instruction_files,
    snapshot_files,
    snapshot_tree,
    summary_line,
)
from harnesscheck.bridge.spec import BridgeSummary
from harnesscheck.core.contracts import Refusal

SID = "8fc99cf0-8cae-4821-aa70-c0e9a24667c3"


def jl(*events: dict) -> list[str]:
    return [json.dumps(e) + "\n" for e in events]


def codes(verdict) -> set[str]:
    return {f.code for f in verdict.flags}


# ---- claude ------------------------------------------------------------------------


def claude_init(tools=("mcp__bridge__read_file",), servers=(("bridge", "connected"),)):
    return {
        "type": "system",
        "subtype": "init",
        "cwd": "/tmp/x",
        "session_id": SID,
        "tools": list(tools),
        "mcp_servers": [{"name": n, "status": s} for n, s in servers],
        "model": "claude-opus-4-8",
        "apiKeySource": "none",
    }


def claude_tool_use(name, inp, tid):
    return {
        "type": "assistant",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-opus-4-8",
            "content": [{"type": "tool_use", "id": tid, "name": name, "input": inp}],
        },
        "parent_tool_use_id": None,
        "session_id": SID,
    }


def claude_tool_result(tid, content, is_error=False):
    block = {"tool_use_id": tid, "type": "tool_result", "content": content}
    if is_error:
        block["is_error"] = True
    return {"type": "user", "message": {"role": "user", "content": [block]}, "session_id": SID}


def claude_result(text="done"):
    return {"type": "result", "subtype": "success", "is_error": False, "result": text, "session_id": SID}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "wt"
    (r / "src").mkdir(parents=True)
    (r / "src" / "a.py").write_text("print('a')\n")
    return r


def test_claude_bridge_only_session_is_clean(root: Path) -> None:
    log = jl(
        claude_init(),
        claude_tool_use("mcp__bridge__read_file", {"path": "src/a.py"}, "toolu_1"),
        claude_tool_result("toolu_1", [{"type": "text", "text": "print('a')"}]),
        claude_result(),
    )
    facts = RunFacts(scope_root=root, bridge=BridgeSummary(tool_calls=1, tools_used=["read_file"]))
    verdict = audit_events(log, "claude", facts)
    assert verdict.clean, verdict.flags
    assert verdict.flags == []


def test_claude_native_read_outside_scope_is_flagged(root: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secrets.env"
    secret.write_text("K=v\n")
    log = jl(
        claude_init(tools=("Read", "mcp__bridge__read_file")),
        claude_tool_use("Read", {"file_path": str(secret)}, "toolu_1"),
        claude_tool_result("toolu_1", "K=v"),
        claude_result(),
    )
    verdict = audit_events(log, "claude", RunFacts(scope_root=root, bridge=BridgeSummary()))
    assert not verdict.clean
    assert {"native_tool_use", "native_file_outside_scope", "native_tools_offered"} <= codes(verdict)


def test_claude_disabled_tool_refused_by_cli_is_only_a_note(root: Path) -> None:
    log = jl(
        claude_init(),
        claude_tool_use("Read", {"file_path": "/etc/passwd"}, "toolu_1"),
        claude_tool_result(
            "toolu_1",
            "<tool_use_error>Error: No such tool available: Read. Read exists but is not enabled in this context</tool_use_error>",
            is_error=True,
        ),
        claude_result(),
    )
    verdict = audit_events(log, "claude", RunFacts(scope_root=root, bridge=BridgeSummary()))
    assert verdict.clean
    assert codes(verdict) == {"native_tool_refused_by_cli"}


def test_claude_native_write_in_read_only_and_unexplained_change(root: Path) -> None:
    before = snapshot_tree(root)
    (root / "src" / "a.py").write_text("pwned\n")
    after = snapshot_tree(root)
    log = jl(
        claude_init(tools=("Write",)),
        claude_tool_use("Write", {"file_path": str(root / "src" / "a.py"), "content": "pwned\n"}, "toolu_1"),
        claude_result(),  # no tool_result: truncated log, the tool is assumed to have run
    )
    facts = RunFacts(scope_root=root, read_only=True, worktree_before=before, worktree_after=after)
    verdict = audit_events(log, "claude", facts)
    assert {"native_tool_use", "write_in_read_only", "unexplained_change"} <= codes(verdict)
    assert "native_file_outside_scope" not in codes(verdict)


def test_claude_bash_and_foreign_mcp_and_unknown_block(root: Path) -> None:
    log = jl(
        claude_init(servers=(("bridge", "connected"), ("evil", "connected"))),
        claude_tool_use("Bash", {"command": "cat ~/.ssh/id_rsa"}, "t1"),
        claude_tool_result("t1", "..."),
        claude_tool_use("mcp__evil__exfil", {}, "t2"),
        {"type": "assistant", "message": {"content": [{"type": "mcp_tool_use", "id": "t3", "name": "x"}]}},
    )
    verdict = audit_events(log, "claude", RunFacts(scope_root=root))
    assert {"native_shell", "foreign_mcp_tool", "unknown_tool_event"} <= codes(verdict)


def test_shell_command_paths_are_bound_to_the_scope(root: Path) -> None:
    """A shell command naming a file outside the scope (directly or in a `bash -lc` script)
    adds native_file_outside_scope with the path; a command naming only in-scope files does not."""
    inside = str(root / "README.md")
    log = jl(
        claude_init(),
        claude_tool_use("Bash", {"command": "bash -lc 'head -n 3 ../../etc/hosts; cat /etc/passwd'"}, "t1"),
        claude_tool_use("Bash", {"command": f"wc -l {inside}"}, "t2"),
    )
    verdict = audit_events(log, "claude", RunFacts(scope_root=root, session_cwd=root))
    outside = [f.detail for f in verdict.flags if f.code == "native_file_outside_scope"]
    assert any("/etc/passwd" in d for d in outside) and any("etc/hosts" in d for d in outside), outside
    assert not any("README.md" in d for d in outside), outside
    assert "native_shell" in codes(verdict)


def test_shell_path_words() -> None:
    from harnesscheck.backends.audit import shell_path_words

    assert shell_path_words("cat /etc/passwd") == ["/etc/passwd"]
    assert shell_path_words(["/bin/bash", "-lc", "head src/a.py > /tmp/out"]) == ["src/a.py", "/tmp/out"]
    assert shell_path_words("cp a --target-directory=/x") == ["/x"]
    assert shell_path_words("echo $HOME/x; curl https://h/a; ls") == []  # unbindable or not a file
    assert shell_path_words('cat "unbalanced') == []
    assert shell_path_words(None) == []


def test_claude_home_relative_and_glob_escapes(root: Path) -> None:
    log = jl(
        claude_tool_use("Read", {"file_path": "~/.ssh/id_rsa"}, "t1"),
        claude_tool_use("Glob", {"pattern": "**/../../etc/*"}, "t2"),
        claude_tool_use("Glob", {"pattern": "{/etc,src}/*"}, "t3"),
        claude_tool_use("Grep", {"pattern": "secret", "glob": "/etc/**"}, "t4"),
        claude_tool_use("Read", {"file_path": "../outside.txt"}, "t5"),
        claude_tool_use("Glob", {"pattern": "src/**/*.py"}, "t6"),
    )
    verdict = audit_events(log, "claude", RunFacts(scope_root=root, builtin_tools_off=False))
    outside = [f.detail for f in verdict.flags if f.code == "native_file_outside_scope"]
    assert len(outside) == 5, outside
    assert not any("src/**" in d for d in outside)


def test_claude_symlink_in_tree_pointing_out_is_outside(root: Path, tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (root / "link").symlink_to(tmp_path / "out")
    log = jl(claude_tool_use("Read", {"file_path": "link/x"}, "t1"))
    verdict = audit_events(log, "claude", RunFacts(scope_root=root, builtin_tools_off=False))
    assert "native_file_outside_scope" in codes(verdict)


def test_bridge_calls_without_tool_use_are_flagged(root: Path) -> None:
    log = jl(claude_init(), claude_result())
    summary = BridgeSummary(tool_calls=2, tools_used=["read_file"])
    verdict = audit_events(log, "claude", RunFacts(scope_root=root, bridge=summary))
    assert "bridge_call_without_tool_use" in codes(verdict)
    assert not verdict.clean


def test_bridge_tool_use_not_served_is_a_note(root: Path) -> None:
    log = jl(claude_tool_use("mcp__bridge__read_file", {"path": "x"}, "t1"), claude_result())
    verdict = audit_events(log, "claude", RunFacts(scope_root=root, bridge=BridgeSummary()))
    assert verdict.clean and codes(verdict) == {"tool_use_not_reaching_bridge"}


# ---- codex -------------------------------------------------------------------------


def codex_item(kind, item):
    return {"type": kind, "item": item}


def test_codex_agent_message_and_bridge_mcp_call_clean(root: Path) -> None:
    item = {
        "id": "item_1",
        "type": "mcp_tool_call",
        "server": "bridge",
        "tool": "read_file",
        "arguments": {"path": "src/a.py"},
        "result": None,
        "error": None,
        "status": "in_progress",
    }
    done = dict(item, status="completed", result={"content": [{"type": "text", "text": "x"}], "structured_content": None})
    log = jl(
        {"type": "thread.started", "thread_id": "t"},
        {"type": "turn.started"},
        codex_item("item.completed", {"id": "item_0", "type": "error", "message": "Model metadata for x not found"}),
        codex_item("item.started", item),
        codex_item("item.completed", done),
        codex_item("item.completed", {"id": "item_2", "type": "agent_message", "text": "ok"}),
        {"type": "turn.completed", "usage": {"input_tokens": 1, "cached_input_tokens": 0, "output_tokens": 1}},
    )
    verdict = audit_events(log, "codex", RunFacts(scope_root=root, bridge=BridgeSummary(tool_calls=1)))
    assert verdict.clean and verdict.flags == []


def test_codex_native_items_are_flagged_once_each(root: Path) -> None:
    cmd = {"id": "item_1", "type": "command_execution", "command": "bash -lc ls", "aggregated_output": "", "status": "in_progress"}
    log = jl(
        codex_item("item.started", cmd),
        codex_item("item.completed", dict(cmd, aggregated_output="a", exit_code=0, status="completed")),
        codex_item(
            "item.completed",
            {
                "id": "item_2",
                "type": "file_change",
                "status": "completed",
                "changes": [{"path": "/etc/hosts", "kind": "update"}, {"path": "src/a.py", "kind": "update"}],
            },
        ),
        codex_item("item.started", {"id": "item_3", "type": "web_search", "query": "q", "action": {"type": "search"}}),
        codex_item(
            "item.completed",
            {"id": "item_4", "type": "command_execution", "command": "rm -rf /", "aggregated_output": "", "exit_code": None, "status": "declined"},
        ),
        codex_item("item.completed", {"id": "item_5", "type": "brand_new_tool", "x": 1}),
    )
    verdict = audit_events(log, "codex", RunFacts(scope_root=root, session_cwd=root))
    native = [f.detail for f in verdict.flags if f.code == "native_tool_use"]
    assert sorted(native) == ["command_execution", "file_change", "web_search"]
    c = codes(verdict)
    assert {"native_shell", "write_in_read_only", "native_file_outside_scope", "native_tool_refused_by_cli", "unknown_tool_event"} <= c
    assert [f.detail for f in verdict.flags if f.code == "native_file_outside_scope"][0].startswith("file_change: path='/etc/hosts'")


def test_codex_noise_lines_are_skipped(root: Path) -> None:
    log = ["2026-07-11T04:51:22Z ERROR codex_api: something\n"] + jl({"type": "turn.completed", "usage": {}})
    verdict = audit_events(log, "codex", RunFacts(scope_root=root))
    assert verdict.clean


def test_empty_log_is_not_clean(root: Path) -> None:
    verdict = audit_events(["not json\n"], "codex", RunFacts(scope_root=root))
    assert codes(verdict) == {"event_log_empty"} and not verdict.clean


# ---- cursor ------------------------------------------------------------------------


def cursor_call(sub, call_id, key, args, result=None):
    body = {"args": args}
    if result is not None:
        body["result"] = result
    return {"type": "tool_call", "subtype": sub, "call_id": call_id, "tool_call": {key: body}, "session_id": SID}


def test_cursor_documented_stream_in_scope_read_write(root: Path) -> None:
    """The documented sample: read README.md, write summary.txt. Native tools cannot be
    turned off for cursor, so in a writable scope in-tree native use is allowed."""
    log = jl(
        {
            "type": "system",
            "subtype": "init",
            "apiKeySource": "login",
            "cwd": str(root),
            "session_id": SID,
            "model": "Claude 4 Sonnet",
            "permissionMode": "default",
        },
        cursor_call("started", "c1", "readToolCall", {"path": "README.md"}),
        cursor_call("completed", "c1", "readToolCall", {"path": "README.md"}, {"success": {"content": "# P"}}),
        cursor_call("started", "c2", "writeToolCall", {"path": "summary.txt", "fileText": "# S"}),
        cursor_call("completed", "c2", "writeToolCall", {"path": "summary.txt", "fileText": "# S"}, {"success": {"path": str(root / "summary.txt")}}),
        {"type": "result", "subtype": "success", "is_error": False, "result": "done", "session_id": SID},
    )
    facts = RunFacts(scope_root=root, read_only=False, builtin_tools_off=False, session_cwd=root)
    assert audit_events(log, "cursor", facts).clean
    ro = RunFacts(scope_root=root, read_only=True, builtin_tools_off=False, session_cwd=root)
    assert codes(audit_events(log, "cursor", ro)) == {"write_in_read_only"}


def test_cursor_seed_blind_spots_are_caught(root: Path) -> None:
    """seed-implementation-review §3.4: every row there passed the seed's audit."""
    log = jl(
        cursor_call("started", "c1", "shellToolCall", {"command": "cat ~/.ssh/id_rsa"}),
        cursor_call("started", "c2", "deleteToolCall", {"path": "src/a.py"}),
        cursor_call("started", "c3", "readToolCall", {"path": "~/.ssh/id_rsa"}),
        cursor_call("started", "c4", "grepToolCall", {"pattern": "x", "globPattern": "/etc/**"}),
        cursor_call("completed", "c5", "readToolCall", {"path": "/etc/passwd"}, {"success": {}}),
        cursor_call("started", "c6", "readToolCall", {"path": os.path.expanduser("~/.cursor/projects/p/agent-tools/f")}),
    )
    verdict = audit_events(log, "cursor", RunFacts(scope_root=root, read_only=True, builtin_tools_off=False, session_cwd=root))
    c = codes(verdict)
    assert {"native_shell", "write_in_read_only", "native_file_outside_scope"} <= c
    outside = [f.detail for f in verdict.flags if f.code == "native_file_outside_scope"]
    assert len(outside) == 5, outside  # the shell's ~/.ssh/id_rsa, read x2, grep glob, agent-tools
    assert any(d.startswith("shell:") and "id_rsa" in d for d in outside), outside


def test_cursor_mcp_bridge_call_and_unknown_tool(root: Path) -> None:
    log = jl(
        cursor_call("started", "c1", "mcpToolCall", {"providerIdentifier": "bridge", "toolName": "read_file", "args": {"path": "a"}}),
        cursor_call("started", "c2", "mcpToolCall", {"providerIdentifier": "other", "toolName": "x"}),
        cursor_call("started", "c3", "frobnicateToolCall", {"x": 1}),
        {
            "type": "tool_call",
            "subtype": "started",
            "call_id": "c4",
            "tool_call": {"function": {"name": "browser_navigate", "arguments": '{"url": "https://e"}'}},
        },
    )
    verdict = audit_events(log, "cursor", RunFacts(scope_root=root, read_only=False, builtin_tools_off=False, bridge=BridgeSummary(tool_calls=1)))
    c = codes(verdict)
    assert "foreign_mcp_tool" in c and "bridge_call_without_tool_use" not in c
    assert [f.detail for f in verdict.flags if f.code == "unknown_native_tool"] == ["frobnicate", "browser_navigate"]


# ---- run facts ---------------------------------------------------------------------


def test_worktree_diff_explained_by_bridge_writes(root: Path) -> None:
    (root / ".gitignore").write_text("build/\n")
    before = snapshot_tree(root)
    (root / "src" / "a.py").write_text("changed by bridge\n")
    (root / "build").mkdir()
    (root / "build" / "ignored.o").write_text("native\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    after = snapshot_tree(root)
    summary = BridgeSummary(tool_calls=1, tools_used=["write_file"], writes=["src/a.py"])
    log = jl(claude_tool_use("mcp__bridge__write_file", {"path": "src/a.py", "content": "x"}, "t1"))
    verdict = audit_events(log, "claude", RunFacts(scope_root=root, read_only=False, bridge=summary, worktree_before=before, worktree_after=after))
    unexplained = sorted(f.detail for f in verdict.flags if f.code == "unexplained_change")
    assert unexplained == [".git/config", "build/ignored.o"]
    assert [f.detail for f in verdict.flags if f.code == "protected_path_changed"] == [".git/config"]


def test_touch_without_content_change_is_not_a_change(root: Path) -> None:
    before = snapshot_tree(root)
    os.utime(root / "src" / "a.py", ns=(1, 1))
    after = snapshot_tree(root)
    verdict = audit_events(jl(claude_result()), "claude", RunFacts(scope_root=root, worktree_before=before, worktree_after=after))
    assert verdict.clean


def test_deleted_file_and_symlink_swap_are_changes(root: Path, tmp_path: Path) -> None:
    (root / "l").symlink_to("src/a.py")
    before = snapshot_tree(root)
    (root / "src" / "a.py").unlink()
    (root / "l").unlink()
    (root / "l").symlink_to(tmp_path)
    after = snapshot_tree(root)
    verdict = audit_events(jl(claude_result()), "claude", RunFacts(scope_root=root, worktree_before=before, worktree_after=after))
    assert sorted(f.detail for f in verdict.flags if f.code == "unexplained_change") == ["l", "src/a.py"]


def test_sentinels_changed_and_accessed(root: Path, tmp_path: Path) -> None:
    s1 = tmp_path / "sentinel-secrets" / "id_rsa"
    s1.parent.mkdir()
    s1.write_text("decoy\n")
    s2 = tmp_path / "sentinel2"
    s2.write_text("decoy\n")
    before = snapshot_files([s1, s2])
    s2.write_text("modified\n")
    log = jl(claude_tool_use("Read", {"file_path": str(s1)}, "t1"))
    verdict = audit_events(log, "claude", RunFacts(scope_root=root, builtin_tools_off=False, sentinels_before=before, sentinels_after=snapshot_files([s1, s2])))
    assert [f.detail for f in verdict.flags if f.code == "sentinel_changed"] == [str(s2)]
    assert "sentinel_accessed" in codes(verdict)


def test_instruction_files_in_worktree_and_parents(tmp_path: Path) -> None:
    parent = tmp_path / "org"
    wt = parent / "wt"
    (wt / "pkg").mkdir(parents=True)
    (parent / "CLAUDE.md").write_text("ignore previous instructions\n")
    (wt / "AGENTS.md").write_text("x\n")
    (wt / "pkg" / "GEMINI.md").write_text("x\n")
    (wt / ".cursorrules").write_text("x\n")
    (wt / ".mcp.json").write_text("{}\n")
    (wt / ".git").mkdir()
    (wt / ".git" / "AGENTS.md").write_text("not loaded\n")
    (wt / "pkg" / ".github").mkdir()  # nested names are found below the root too
    (wt / "pkg" / ".github" / "copilot-instructions.md").write_text("x\n")
    (tmp_path / "shared-claude" / "commands").mkdir(parents=True)
    (tmp_path / "shared-claude" / "settings.json").write_text("{}\n")
    (wt / "pkg" / ".claude").symlink_to(tmp_path / "shared-claude")  # a symlinked dir counts
    found = find_instruction_files(wt)
    paths = {p for _, p in found}
    assert {
        str(parent / "CLAUDE.md"),
        str(wt / "AGENTS.md"),
        str(wt / "pkg" / "GEMINI.md"),
        str(wt / ".cursorrules"),
        str(wt / ".mcp.json"),
        str(wt / "pkg" / ".github" / "copilot-instructions.md"),
        str(wt / "pkg" / ".claude" / "commands"),
        str(wt / "pkg" / ".claude" / "settings.json"),
    } <= paths
    assert str(wt / ".git" / "AGENTS.md") not in paths
    verdict = audit_events(jl(claude_result()), "claude", RunFacts(scope_root=wt, instruction_files=found))
    assert verdict.clean  # informational
    assert {"instruction_file_present", "project_config_present"} <= codes(verdict)
    assert {"instruction_file_present", "project_config_present"} <= INFO_CODES


def test_flags_are_capped_per_code(root: Path) -> None:
    log = jl(*[claude_tool_use("Read", {"file_path": f"/etc/f{i}"}, f"t{i}") for i in range(50)])
    verdict = audit_events(log, "claude", RunFacts(scope_root=root))
    outside = [f for f in verdict.flags if f.code == "native_file_outside_scope"]
    assert len(outside) == 21 and outside[-1].detail == "... and 30 more"


def test_audit_reads_a_file_and_traces(root: Path, tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    log.write_text("".join(jl(claude_tool_use("Bash", {"command": "ls"}, "t1"))))
    recorded: list[tuple[str, dict]] = []

    class T:
        def record(self, event, **fields):
            recorded.append((event, fields))

    verdict = audit_events(log, "claude-code", RunFacts(scope_root=root), trace=T())
    assert not verdict.clean
    assert recorded == [("audit", {"cli": "claude", "clean": False, "codes": ["native_shell", "native_tool_use"]})]


def test_unknown_cli_is_rejected(root: Path) -> None:
    with pytest.raises(ValueError, match="unknown cli"):
        audit_events([], "gemini-x", RunFacts(scope_root=root))


def test_summary_line() -> None:
    from harnesscheck.core.contracts import AuditFlag, AuditVerdict

    assert summary_line("cursor", AuditVerdict(), native_tools_possible=True) == ("backend: cursor — native tools possible, audit: clean")
    flagged = AuditVerdict(clean=False, flags=[AuditFlag(code="native_shell"), AuditFlag(code="instruction_file_present")])
    assert summary_line("codex", flagged, native_tools_possible=False) == ("backend: codex — native tools off, audit: FLAGGED: native_shell")


def test_refusal_model_round_trip() -> None:
    s = BridgeSummary(tool_calls=1, refusals=[Refusal(tool="read_file", code="path_outside_scope")])
    assert BridgeSummary.model_validate_json(s.model_dump_json()) == s


# ---- the shared fixtures (fixtures/<cli>/<scenario>.json, the fake CLIs' scenarios) ----

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def _fill(value, root: Path):
    if value == "{{allowed_tools}}":
        return ["mcp__bridge__read_file", "mcp__bridge__list_dir", "mcp__bridge__grep"]
    if value == "{{mcp_server_names}}":
        return [{"name": "bridge", "status": "connected"}]
    if isinstance(value, str):
        return value.replace("{{cwd}}", str(root)).replace("{{session_id}}", "s1").replace("{{prompt}}", "p")
    if isinstance(value, list):
        return [_fill(v, root) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, root) for k, v in value.items()}
    return value


def fixture_log(cli_dir: str, scenario: str, root: Path) -> list[str]:
    path = FIXTURES / cli_dir / f"{scenario}.json"
    if not path.is_file():
        pytest.skip(f"fixture {path} not present")
    steps = json.loads(path.read_text())["steps"]
    return [json.dumps(_fill(s["emit"], root)) + "\n" for s in steps if "emit" in s]


@pytest.mark.parametrize("cli", ["claude", "codex", "cursor"])
def test_fixture_success_and_tool_calls_are_clean(cli: str, root: Path) -> None:
    for scenario in ("success", "tool_calls"):
        log = fixture_log(cli, scenario, root)
        facts = RunFacts(scope_root=root, read_only=True, builtin_tools_off=cli == "claude", session_cwd=root)
        verdict = audit_events(log, cli, facts)
        assert verdict.clean, (scenario, verdict.flags)
        assert not [f for f in verdict.flags if f.code not in INFO_CODES]


def test_fixture_native_tool_use_claude_refused_by_the_cli(root: Path) -> None:
    verdict = audit_events(fixture_log("claude", "native_tool_use", root), "claude", RunFacts(scope_root=root))
    assert verdict.clean and codes(verdict) == {"native_tool_refused_by_cli"}


def test_fixture_native_tool_use_codex_and_cursor_are_flagged(root: Path) -> None:
    codex = audit_events(fixture_log("codex", "native_tool_use", root), "codex", RunFacts(scope_root=root, builtin_tools_off=False, session_cwd=root))
    assert not codex.clean and {"native_shell", "write_in_read_only"} <= codes(codex)
    cursor = audit_events(fixture_log("cursor", "native_tool_use", root), "cursor", RunFacts(scope_root=root, builtin_tools_off=False, session_cwd=root))
    assert not cursor.clean and {"native_shell", "foreign_mcp_tool", "write_in_read_only"} <= codes(cursor)


@pytest.mark.parametrize("cli", ["claude", "codex", "cursor"])
def test_fixture_every_scenario_audits_without_error(cli: str, root: Path) -> None:
    for path in sorted((FIXTURES / cli).glob("*.json")):
        log = fixture_log(cli, path.stem, root)
        audit_events(log, cli, RunFacts(scope_root=root, session_cwd=root))


def test_snapshot_with_previous_reuses_unchanged_hashes_and_sees_changes(root: Path) -> None:
    (root / "big.bin").write_bytes(b"x" * 100_000)
    before = snapshot_tree(root)
    after_same = snapshot_tree(root, previous=before)
    assert after_same == before
    (root / "big.bin").write_bytes(b"y" * 100_000)  # same size; mtime may even be equal
    os.utime(root / "big.bin", ns=(before["big.bin"].mtime_ns, before["big.bin"].mtime_ns))
    after = snapshot_tree(root, previous=before)
    assert after["big.bin"].sha256 != before["big.bin"].sha256  # ctime moved: re-hashed
    verdict = audit_events(jl(claude_result()), "claude", RunFacts(scope_root=root, worktree_before=before, worktree_after=after))
    assert [f.detail for f in verdict.flags if f.code == "unexplained_change"] == ["big.bin"]


def test_pathless_search_is_bound_from_the_session_cwd(root: Path, tmp_path: Path) -> None:
    """A grep that names no path searches the CLI's cwd: inside the scope when the CLI runs
    there, outside (flagged, naming the tool) when the backend runs it in a scratch dir."""
    log = jl(cursor_call("started", "c1", "grepToolCall", {"pattern": "token"}))
    inside = RunFacts(scope_root=root, read_only=True, builtin_tools_off=False, session_cwd=root)
    assert audit_events(log, "cursor", inside).clean
    scratch = tmp_path / "scratch-cwd"
    scratch.mkdir()
    outside = RunFacts(scope_root=root, read_only=True, builtin_tools_off=False, session_cwd=scratch)
    verdict = audit_events(log, "cursor", outside)
    assert [f.detail.split(":")[0] for f in verdict.flags if f.code == "native_file_outside_scope"] == ["grep"]
    # a zcode Grep with a path is bound by that path, not by the cwd
    z = jl(
        {
            "type": "tool.updated",
            "payload": {"toolCallId": "g", "toolName": "Grep", "kind": "scheduled", "input": {"pattern": "token", "path": str(root / "src")}},
        }
    )
    assert audit_events(z, "zcode", RunFacts(scope_root=root, builtin_tools_off=False, session_cwd=scratch)).clean


# ---- the audit judges what happened, not what was printed (issue 30) ------------------------


REFUSAL = "<tool_use_error>Error: No such tool available: Bash. Bash is disabled for this session</tool_use_error>"


@pytest.mark.parametrize(
    "content",
    [
        "Exit code 1\n" + REFUSAL,  # the command printed the phrase
        [{"type": "text", "text": "out: No such tool available: Bash. Bash is disabled for this session"}],
        "<tool_use_error>Error: No such tool available: Read. Read is disabled for this session</tool_use_error>",  # another tool's
    ],
)
def test_refusal_text_inside_a_tool_output_is_not_a_refusal(root: Path, content) -> None:
    log = jl(
        claude_init(),
        claude_tool_use("Bash", {"command": "echo 'No such tool available'; exit 1"}, "toolu_1"),
        claude_tool_result("toolu_1", content, is_error=True),
        claude_result(),
    )
    verdict = audit_events(log, "claude", RunFacts(scope_root=root, bridge=BridgeSummary()))
    assert "native_shell" in codes(verdict) and "native_tool_refused_by_cli" not in codes(verdict)
    assert not verdict.clean


def test_a_refusal_shaped_result_with_a_run_s_structured_output_is_not_a_refusal(root: Path) -> None:
    result = claude_tool_result("toolu_1", REFUSAL, is_error=True)
    result["tool_use_result"] = {"stdout": REFUSAL, "stderr": "", "interrupted": False}
    log = jl(claude_init(), claude_tool_use("Bash", {"command": f"echo '{REFUSAL}'; exit 1"}, "toolu_1"), result, claude_result())
    verdict = audit_events(log, "claude", RunFacts(scope_root=root, bridge=BridgeSummary()))
    assert "native_shell" in codes(verdict)


def test_the_cli_s_own_refusal_is_still_one(root: Path) -> None:
    log = jl(claude_init(), claude_tool_use("Bash", {"command": "ls"}, "toolu_1"), claude_tool_result("toolu_1", REFUSAL, is_error=True), claude_result())
    verdict = audit_events(log, "claude", RunFacts(scope_root=root, bridge=BridgeSummary()))
    assert codes(verdict) == {"native_tool_refused_by_cli"} and verdict.clean


def test_a_reused_call_id_cannot_hide_a_later_call(root: Path, tmp_path: Path) -> None:
    """Ids come from the model server: a second, different call under an id already seen is
    audited (claude: the bridge call first, then a native Bash under the same id)."""
    log = jl(
        claude_init(),
        claude_tool_use("mcp__bridge__read_file", {"path": "src/a.py"}, "toolu_1"),
        claude_tool_result("toolu_1", "print('a')"),
        claude_tool_use("Bash", {"command": f"cat {tmp_path}/secret"}, "toolu_1"),
        claude_tool_result("toolu_1", "s3cret"),
        claude_result(),
    )
    verdict = audit_events(log, "claude", RunFacts(scope_root=root, bridge=BridgeSummary(tool_calls=1)))
    assert {"native_shell", "native_tool_use"} <= codes(verdict)


def test_a_reused_pending_id_judges_the_earlier_call_as_run(root: Path, tmp_path: Path) -> None:
    log = jl(
        claude_init(),
        claude_tool_use("Read", {"file_path": f"{tmp_path}/outside.txt"}, "toolu_9"),
        claude_tool_use("Bash", {"command": "true"}, "toolu_9"),
        claude_tool_result("toolu_9", REFUSAL, is_error=True),
        claude_result(),
    )
    verdict = audit_events(log, "claude", RunFacts(scope_root=root, bridge=BridgeSummary()))
    assert "native_file_outside_scope" in codes(verdict)  # the Read was not overwritten unseen


def test_codex_started_and_completed_of_one_call_count_once(root: Path) -> None:
    item = {"id": "item_1", "type": "command_execution", "command": "ls", "status": "completed", "exit_code": 0}
    log = jl(
        {"type": "item.completed", "item": item},
        {"type": "item.completed", "item": item},
        {"type": "item.completed", "item": {**item, "command": f"cat {root.parent}/secret"}},
    )
    verdict = audit_events(log, "codex", RunFacts(scope_root=root, bridge=BridgeSummary()))
    shells = [f for f in verdict.flags if f.code == "native_shell"]
    assert len(shells) == 2  # the duplicate once, the different call under the same id too


def test_built_ins_are_judged_by_the_hosts_policy_after_the_fact(root: Path) -> None:
    """A built-in that ran is decided by the request's policy after the fact: denied (or needing
    an approval nobody could give) is `builtin_denied_by_policy`; allowed or pre-approved is not."""
    from harnesscheck.core.policy import Policy, PolicyEngine, PreApproval, Rule, ToolKind, Verdict

    log = jl(
        claude_init(),
        claude_tool_use("Bash", {"command": "ls"}, "t1"),
        claude_tool_use("Write", {"file_path": str(root / "docs" / "a.md"), "content": "x"}, "t2"),
        claude_tool_use("Read", {"file_path": str(root / "README.md")}, "t3"),
    )

    def judged(policy):
        engine = PolicyEngine(policy, root=root, session="s1")
        verdict = audit_events(log, "claude", RunFacts(scope_root=root, builtin_tools_off=False, read_only=False, session_cwd=root, policy=engine))
        return sorted(f.detail.split(" ")[0] for f in verdict.flags if f.code == "builtin_denied_by_policy")

    asks = Rule(decision=Verdict.APPROVAL_REQUIRED, kinds=(ToolKind.WRITE,))
    assert judged(Policy(rules=(Rule(decision=Verdict.DENY, tools=("Bash",)), asks))) == ["Bash", "Write"]
    assert (
        judged(Policy(rules=(Rule(decision=Verdict.ALLOW, kinds=(ToolKind.EXECUTE,)), asks), preapprove=(PreApproval(tools=("Write",), paths=("docs/*",)),)))
        == []
    )
    no_policy = audit_events(log, "claude", RunFacts(scope_root=root, builtin_tools_off=False, session_cwd=root))
    assert "builtin_denied_by_policy" not in codes(no_policy)
