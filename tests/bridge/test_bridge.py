"""The bridge's logic through the SDK's in-memory client: the tool list is the scope's, every
call is dispatch (parity on the same inputs), refusals are isError results naming the code,
the per-session trace carries the session id. Plus the spec model and summarize_trace."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anyio
import pytest

from harnesscheck.bridge.spec import (
    SERVER_NAME,
    BridgeSpec,
    BridgeSummary,
    bridge_argv,
    bridge_env,
    load_spec,
    summarize_trace,
    write_spec,
)
from harnesscheck.choke.dispatch import dispatch, tool_definitions
from harnesscheck.choke.trace import Trace
from harnesscheck.core.scope import ToolScope


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("alpha = 1\nbeta = 2\n")
    (root / "README.md").write_text("# readme\n")
    (root / "big.txt").write_text("x" * 300_000)
    (root / "inlink").symlink_to("src/a.py")
    (tmp_path / ".env").write_text("ANTHROPIC_API_KEY=sk-ant-outside-canary-0001\n")
    (root / "outlink").symlink_to(tmp_path / ".env")
    return root


def _run(server, calls: list[tuple[str, dict]], mode: str = "auto"):
    """List tools and make the calls through an in-memory MCP client."""
    from mcp import Client

    async def go():
        async with Client(server, mode=mode) as client:
            listed = await client.list_tools()
            results = [await client.call_tool(name, args) for name, args in calls]
            return listed, results

    return anyio.run(go)


def _text(result) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


CASES: list[tuple[str, dict]] = [
    ("read_file", {"path": "src/a.py"}),
    ("read_file", {"path": "inlink"}),
    ("read_file", {"path": "big.txt"}),
    ("list_dir", {"path": "."}),
    ("grep", {"pattern": "beta", "path": "."}),
    ("read_file", {"path": "../.env"}),
    ("read_file", {"path": "outlink"}),
    ("read_file", {"path": "/proc/self/environ"}),
    ("read_file", {"path": "/sys/kernel/hostname"}),
    ("read_file", {"path": "/dev/zero"}),
    ("read_file", {"path": "src/../../.env"}),
    ("read_file", {"path": "nul\x00byte"}),
    ("read_file", {}),
    ("read_file", {"path": 7}),
    ("write_file", {"path": "new.txt", "content": "x"}),
    ("edit_file", {"path": "src/a.py", "old": "alpha", "new": "gamma"}),
    ("no_such_tool", {"path": "x"}),
]


def test_tools_listed_are_exactly_the_scope_tools(tree: Path) -> None:
    from harnesscheck.bridge.server import build_server

    for read_only in (True, False):
        scope = ToolScope(root=tree, read_only=read_only)
        listed, _ = _run(build_server(scope), [])
        want = {d.name: d for d in tool_definitions(scope)}
        assert [t.name for t in listed.tools] == list(want)
        for tool in listed.tools:
            assert tool.input_schema == want[tool.name].input_schema
            assert tool.description == want[tool.name].description
    narrow = ToolScope(root=tree, read_only=False, allowed_tools=("read_file", "edit_file"))
    listed, _ = _run(build_server(narrow), [])
    assert [t.name for t in listed.tools] == ["read_file", "edit_file"]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
@pytest.mark.parametrize("read_only", [True, False])
def test_parity_with_in_process_dispatch(tree: Path, tmp_path: Path, read_only: bool, mode: str) -> None:
    """The same inputs give identical ok / code / text in-process and through the bridge.
    (Writes run on two copies of the tree so each side sees the same starting state.)"""
    import shutil

    from harnesscheck.bridge.server import build_server

    other = tmp_path / "copy" / "root"
    shutil.copytree(tree, other, symlinks=True)
    (tmp_path / "copy" / ".env").write_text("ANTHROPIC_API_KEY=sk-ant-outside-canary-0001\n")
    (other / "outlink").unlink()
    (other / "outlink").symlink_to(tmp_path / "copy" / ".env")
    direct = [dispatch(n, a, ToolScope(root=other, read_only=read_only)) for n, a in CASES]
    _, bridged = _run(build_server(ToolScope(root=tree, read_only=read_only)), CASES, mode=mode)
    for (name, args), want, got in zip(CASES, direct, bridged):
        assert got.is_error is (not want.ok), (name, args)
        assert _text(got) == want.text, (name, args)
        if not want.ok:
            assert _text(got).startswith(f"refused: {want.code}: "), (name, args)
    codes = {(n, str(a.get("path"))): r.code for (n, a), r in zip(CASES, direct) if not r.ok}
    assert codes[("read_file", "../.env")] is not None
    assert codes[("read_file", "/proc/self/environ")] is not None


def test_refusals_never_leak_outside_content(tree: Path) -> None:
    from harnesscheck.bridge.server import build_server

    _, results = _run(build_server(ToolScope(root=tree)), CASES)
    for result in results:
        assert "sk-ant-outside-canary-0001" not in _text(result)


def test_the_bridge_obeys_the_host_policy_of_its_spec(tree: Path, tmp_path: Path) -> None:
    """doc/SPEC-policy.md: a denied call never runs; approval_required with no approver across
    the process boundary is denied (no_approver), a pre-approved one runs."""
    from harnesscheck.bridge.server import build_server
    from harnesscheck.core.policy import Policy, PreApproval, Rule, ToolKind, Verdict

    policy = Policy(
        rules=(Rule(decision=Verdict.APPROVAL_REQUIRED, kinds=(ToolKind.WRITE,)), Rule(decision=Verdict.DENY, tools=("grep",))),
        preapprove=(PreApproval(tools=("write_file",), paths=("ok/*",)),),
    )
    scope = ToolScope(root=tree, read_only=False)
    calls = [("write_file", {"path": "new.txt", "content": "x"}), ("grep", {"pattern": "a"}), ("write_file", {"path": "ok/new.txt", "content": "x"})]
    (tree / "ok").mkdir(exist_ok=True)
    _, results = _run(build_server(scope, policy=policy, session_id="s"), calls)
    texts = [_text(r) for r in results]
    assert texts[0].startswith("refused: policy_denied:") and "approver" in texts[0]
    assert texts[1].startswith("refused: policy_denied:")
    assert not (tree / "new.txt").exists() and (tree / "ok" / "new.txt").read_text() == "x"
    spec = _spec(tmp_path, policy=policy)
    assert BridgeSpec.model_validate_json(spec.model_dump_json()).policy == policy


def test_trace_per_session_and_summary(tree: Path, tmp_path: Path) -> None:
    from harnesscheck.bridge.server import build_server

    trace_path = tmp_path / "bridge-trace.jsonl"
    trace = Trace(trace_path, session_id="sess-1")
    calls = [
        ("read_file", {"path": "src/a.py"}),
        ("read_file", {"path": "../.env"}),
        ("read_file", {"path": "/proc/self/environ"}),
        ("write_file", {"path": "out.txt", "content": "hello"}),
        ("list_dir", {"path": "."}),
    ]
    _run(build_server(ToolScope(root=tree, read_only=False), trace=trace, session_id="sess-1"), calls)
    trace.close()
    records = [json.loads(line) for line in trace_path.read_text().splitlines()]
    assert records and all(r["session"] == "sess-1" for r in records)
    refused = [r for r in records if r.get("decision") == "refuse"]
    assert {r["path"] for r in refused} == {"../.env", "/proc/self/environ"}
    summary = summarize_trace(trace_path)
    assert summary.tool_calls == 5
    assert summary.tools_used == ["read_file", "write_file", "list_dir"]
    assert [r.tool for r in summary.refusals] == ["read_file", "read_file"]
    assert all(r.code for r in summary.refusals)
    assert summary.writes == ["out.txt"]
    calls_n, used, refusals = summary  # the (tool_calls, tools_used, refusals) triple
    assert (calls_n, used, refusals) == (5, summary.tools_used, summary.refusals)
    assert "sk-ant" not in trace_path.read_text()


def test_summarize_trace_filters_sessions_and_survives_torn_lines(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    lines = [
        {"ts": 1, "session": "a", "event": "bridge_start", "pid": 1, "tools": []},
        {"ts": 1, "session": "a", "event": "tool", "tool": "read_file", "decision": "allow", "path": "x"},
        {"ts": 1, "session": "b", "event": "tool", "tool": "grep", "decision": "refuse", "code": "too_large"},
        {"ts": 1, "session": "a", "event": "env_inject", "names": []},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines) + '{"ts": 1, "sess')
    both = summarize_trace(path)
    assert (both.tool_calls, both.tools_used, both.malformed_lines, both.started) == (2, ["read_file", "grep"], 1, True)
    only_a = summarize_trace(path, session_id="a")
    assert (only_a.tool_calls, only_a.refusals, only_a.reads) == (1, [], ["x"])
    assert summarize_trace(tmp_path / "missing.jsonl") == BridgeSummary()


def test_a_dispatch_bug_is_an_error_result_not_a_crash(tree: Path, monkeypatch, tmp_path: Path) -> None:
    import harnesscheck.choke.dispatch as dispatch_mod
    from harnesscheck.bridge.server import build_server

    def broken(*a, **k):
        raise RuntimeError("secret-detail-xyz")

    monkeypatch.setattr(dispatch_mod, "dispatch", broken)
    trace = Trace(tmp_path / "t.jsonl", session_id="s")
    _, results = _run(build_server(ToolScope(root=tree), trace=trace, session_id="s"), [("read_file", {"path": "x"})])
    assert results[0].is_error and _text(results[0]) == "error: internal: RuntimeError"
    assert "secret-detail-xyz" not in (tmp_path / "t.jsonl").read_text()


# ---- spec ------------------------------------------------------------------------


def _spec(tmp_path: Path, **kw) -> BridgeSpec:
    base = dict(
        scope=ToolScope(name="review", root=tmp_path, read_only=True, allowed_tools=("read_file", "grep"), path_patterns=("src/**",)),
        run_dir=tmp_path / "run",
        trace_path=tmp_path / "run" / "bridge-s1.jsonl",
        session_id="s1",
        parent_pid=os.getpid(),
    )
    base.update(kw)
    return BridgeSpec(**base)


def test_spec_round_trips_and_is_private(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    path = write_spec(spec, tmp_path / "run" / "bridge" / "s1.json")
    assert load_spec(path) == spec
    assert (path.stat().st_mode & 0o777) == 0o600
    assert BridgeSpec.model_validate_json(spec.model_dump_json()) == spec
    assert set(json.loads(path.read_text())) == {
        "version",
        "scope",
        "run_dir",
        "trace_path",
        "session_id",
        "parent_pid",
        "root_identity",
        "policy",
        "host_link",
        "host_approver",
    }


def test_spec_rejects_secrets_relative_paths_and_unknown_versions(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        BridgeSpec.model_validate({**json.loads(_spec(tmp_path).model_dump_json()), "env": {"ANTHROPIC_API_KEY": "x"}})
    with pytest.raises(ValueError):
        _spec(tmp_path, trace_path=Path("relative.jsonl"))
    with pytest.raises(ValueError):
        _spec(tmp_path, version=2)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="invalid bridge spec"):
        load_spec(bad)
    leaky = tmp_path / "leaky.json"
    leaky.write_text(json.dumps({**json.loads(_spec(tmp_path).model_dump_json()), "env": {"K": "sk-ant-spec-canary-1"}}))
    with pytest.raises(ValueError, match="env: Extra inputs are not permitted") as info:
        load_spec(leaky)
    assert "sk-ant-spec-canary-1" not in str(info.value)
    with pytest.raises(ValueError, match="cannot read"):
        load_spec(tmp_path / "none.json")


def test_bridge_argv_is_absolute_isolated_and_secret_free(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-canary-argv-0001")
    argv = bridge_argv(tmp_path / "s.json")
    assert os.path.isabs(argv[0]) and argv[0] == os.path.abspath(sys.executable)  # not realpath'd
    assert argv[-2:] == ["--spec", str(tmp_path / "s.json")]
    assert argv[argv.index("-m") + 1] == "harnesscheck.bridge"
    assert "-I" in argv or "-P" in argv  # the cwd never lands on sys.path
    env = bridge_env()
    assert set(env) <= {"PYTHONPATH"}
    assert "sk-ant-canary-argv-0001" not in json.dumps([argv, env])
    assert SERVER_NAME == "bridge"


def test_importing_the_bridge_package_stays_light() -> None:
    import subprocess

    code = (
        "import sys; import harnesscheck.bridge, harnesscheck.bridge.spec, harnesscheck.bridge.server, "
        "harnesscheck.bridge.readiness, harnesscheck.bridge.shared, harnesscheck.backends.audit, harnesscheck.apps.doctor; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'anthropic', 'openai', 'anyio', 'uvicorn', 'rich')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ---- readiness helpers -------------------------------------------------------------


def test_mcp_configs_for_each_cli(tmp_path: Path) -> None:
    import tomllib

    from harnesscheck.bridge import readiness

    spec_path = tmp_path / "spec.json"
    argv = bridge_argv(spec_path)
    claude = readiness.claude_mcp_config(spec_path)
    assert list(claude["mcpServers"]) == ["bridge"]
    assert claude["mcpServers"]["bridge"] == {"type": "stdio", "command": argv[0], "args": argv[1:], "env": bridge_env()}
    assert readiness.cursor_mcp_config(spec_path)["mcpServers"]["bridge"]["command"] == argv[0]
    codex = tomllib.loads(readiness.codex_mcp_toml(spec_path))["mcp_servers"]["bridge"]
    assert codex["command"] == argv[0] and codex["args"] == argv[1:] and codex["required"] is True
    assert codex["startup_timeout_sec"] >= 30
    assert readiness.claude_tool_names(("read_file", "grep")) == ["mcp__bridge__read_file", "mcp__bridge__grep"]
    assert readiness.claude_env()["MCP_CONNECTION_NONBLOCKING"] == "false"


def test_claude_init_readiness() -> None:
    from harnesscheck.bridge.readiness import claude_init_ready

    tools = ("read_file", "grep")
    good = {
        "type": "system",
        "subtype": "init",
        "tools": ["mcp__bridge__read_file", "mcp__bridge__grep"],
        "mcp_servers": [{"name": "bridge", "status": "connected"}],
    }
    assert claude_init_ready(good, tools).ready
    pending = {**good, "tools": [], "mcp_servers": [{"name": "bridge", "status": "pending"}]}
    assert claude_init_ready(pending, tools).reason == "bridge status 'pending'"
    failed = {**good, "mcp_servers": [{"name": "bridge", "status": "failed"}]}
    assert not claude_init_ready(failed, tools).ready
    assert "missing: mcp__bridge__grep" in claude_init_ready({**good, "tools": ["mcp__bridge__read_file"]}, tools).reason
    assert not claude_init_ready({"type": "system", "subtype": "init", "tools": "{{x}}"}, tools).ready


def test_codex_failure_line() -> None:
    from harnesscheck.bridge.readiness import codex_mcp_failure

    err = (
        "Reading additional input from stdin...\nError: required MCP servers failed to initialize: bridge: "
        "handshaking with MCP server failed: connection closed: initialize response\n"
    )
    assert codex_mcp_failure(err).startswith("Error: required MCP servers failed")
    assert codex_mcp_failure("all good\n") is None


def test_bridge_listed_readiness_from_the_trace(tree: Path, tmp_path: Path) -> None:
    from harnesscheck.bridge.readiness import bridge_listed
    from harnesscheck.bridge.server import build_server

    trace_path = tmp_path / "t.jsonl"
    assert bridge_listed(trace_path).reason == "the bridge never started"
    trace = Trace(trace_path, session_id="r1")
    trace.record("bridge_start", pid=1, tools=[])
    assert bridge_listed(trace_path, "r1").reason == "the bridge started but no client listed its tools"
    _run(build_server(ToolScope(root=tree), trace=trace, session_id="r1"), [])
    assert bridge_listed(trace_path, "r1").ready
    assert not bridge_listed(trace_path, "other").ready
