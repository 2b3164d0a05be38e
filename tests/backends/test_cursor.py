"""Cursor transport: the pure parser over every fixture (snapshots, any chunking), the
argv/config builder, and sessions through the fake `cursor-agent` (argv, env, cwd, stdin,
per-run HOME, linger after result, timeouts, worktree and home config that must not reach it)."""

from __future__ import annotations

import json

import pytest
from _replay import build, run_parser
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harnesscheck.backends.cursor import CursorParser
from harnesscheck.contain.process import LineAction
from harnesscheck.core.contracts import CostSource, ErrorClass, ModelVerdict, OutcomeStatus
from harnesscheck.core.paths import fixtures_dir

SCENARIOS = sorted(p.stem for p in (fixtures_dir() / "cursor").glob("*.json"))
SMALL = [s for s in SCENARIOS if s != "oversize_line"]


def replay_outcome(scenario: str, model: str | None = None, cuts=None):
    return run_parser(CursorParser(requested_model=model), build("cursor-agent", scenario, model), cuts)


def test_every_fixture_has_provenance():
    for name in SCENARIOS:
        prov = json.loads((fixtures_dir() / "cursor" / f"{name}.json").read_text())["provenance"]
        assert prov["cli"] == "cursor-agent" and prov["cli_version"] and prov["date"]
        assert prov["source"].startswith("reference:"), name  # nothing cursor-related is observed here


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_outcome_snapshot(scenario, snapshot):
    assert replay_outcome(scenario).model_dump(mode="json") == snapshot


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
@pytest.mark.parametrize("scenario", SMALL)
def test_any_chunking_gives_the_same_outcome(scenario, data):
    replay = build("cursor-agent", scenario)
    cuts = data.draw(st.lists(st.integers(0, len(replay.stdout)), max_size=40))
    whole = run_parser(CursorParser(), replay).model_dump()
    assert run_parser(CursorParser(), replay, cuts).model_dump() == whole


@pytest.mark.parametrize(
    ("scenario", "status", "cls"),
    [
        ("success", OutcomeStatus.ok, None),
        ("tool_calls", OutcomeStatus.ok, None),
        ("not_logged_in", OutcomeStatus.blocked, ErrorClass.auth),
        ("auth_401", OutcomeStatus.blocked, ErrorClass.auth),
        ("usage_limit", OutcomeStatus.blocked, ErrorClass.quota),
        ("rate_limit_429", OutcomeStatus.error, ErrorClass.rate_limit),
        ("overloaded_529", OutcomeStatus.error, ErrorClass.overloaded),
        ("context_overflow", OutcomeStatus.error, ErrorClass.context_overflow),
        ("model_not_found", OutcomeStatus.error, ErrorClass.model_unavailable),
        ("malformed_line", OutcomeStatus.ok, None),
        ("truncated_last_line", OutcomeStatus.error, ErrorClass.protocol),
        ("exit0_is_error", OutcomeStatus.error, ErrorClass.overloaded),
        ("crash_no_result", OutcomeStatus.error, ErrorClass.cli_crash),
        ("timeout_mid_stream", OutcomeStatus.truncated, ErrorClass.timeout),
        ("linger_after_result", OutcomeStatus.ok, None),
        ("api_key_source", OutcomeStatus.blocked, ErrorClass.policy_violation),
        ("unknown_events", OutcomeStatus.ok, None),
        ("oversize_line", OutcomeStatus.ok, None),
    ],
)
def test_classification(scenario, status, cls):
    out = replay_outcome(scenario)
    assert (out.status, out.error_class) == (status, cls), out.message


def test_result_text_and_usage():
    out = replay_outcome("tool_calls")
    assert out.text.endswith("README.md and src/.") and out.tools_used == ["list_dir", "read_file"]
    assert (out.usage.input, out.usage.output, out.usage.cache_read) == (2400, 80, 1800)
    assert out.cost.usd is None and out.auth_source == "login"


def test_is_error_wins_over_subtype_and_exit_code():
    out = replay_outcome("exit0_is_error")
    assert out.exit_code == 0 and out.terminal_event_seen and not out.ok


def test_native_tools_are_recorded_for_the_audit():
    out = replay_outcome("native_tool_use")
    assert out.native_tool_calls == ["read", "write", "shell", "mcp:repo-shipped/search", "function:browser_navigate"]
    assert out.tool_calls == 0


def test_display_model_verdict():
    assert replay_outcome("served_model_mismatch", model="claude-4-sonnet").model_verdict is ModelVerdict.mismatch
    assert replay_outcome("success", model="claude-4-sonnet").model_verdict is ModelVerdict.match
    assert replay_outcome("success").model_verdict is ModelVerdict.unverified


def test_partial_output_is_not_double_counted():
    parser = CursorParser()
    for text in ("Hi", " there"):
        parser.feed(json.dumps({"type": "assistant", "timestamp_ms": 1, "message": {"content": [{"type": "text", "text": text}]}}))
    parser.feed(json.dumps({"type": "assistant", "message": {"content": [{"type": "text", "text": "Hi there"}]}}))
    assert parser.partial_text() == "Hi there"


def test_reported_cost_is_subscription_not_billed():
    parser = CursorParser()
    assert (
        parser.feed(json.dumps({"type": "result", "subtype": "success", "is_error": False, "result": "x", "usage": {"inputTokens": 1, "totalCost": 0.25}}))
        is LineAction.TERMINAL
    )  # noqa: E501
    from harnesscheck.contain.process import Ending, ProcessResult

    out = parser.outcome(ProcessResult(Ending.exited, 0, None, "", 0.0))
    assert out.cost.usd == 0.25 and out.cost.source is CostSource.subscription


def test_api_key_source_stops_at_init():
    parser = CursorParser()
    line = json.dumps({"type": "system", "subtype": "init", "apiKeySource": "flag", "model": "Auto"})
    assert parser.feed(line) is LineAction.STOP and parser.early is ErrorClass.policy_violation


# ---------------------------------------------------------------------------------------
# Sessions through the fake cursor-agent

from pathlib import Path  # noqa: E402

from _replay import assert_no_canary, hostile_worktree, parent_env, pids_alive  # noqa: E402

from harnesscheck.backends.cursor import MAX_ARGV_PROMPT_BYTES, CursorTransport  # noqa: E402
from harnesscheck.backends.registry import get_spec  # noqa: E402
from harnesscheck.core.config import Settings  # noqa: E402
from harnesscheck.core.contracts import AgentSessionRequest  # noqa: E402
from harnesscheck.core.scope import ToolScope  # noqa: E402
from harnesscheck.testing.fakes import install_fake_cli  # noqa: E402


def session(tmp_path, scenario, *, prompt="hi", timeout_s=30.0, model=None, system=None, env=None):
    wt = hostile_worktree(tmp_path)
    fake = install_fake_cli("cursor-agent", scenario, tmp_path / "bin")
    transport = CursorTransport(
        get_spec("cursor"),
        Settings(),
        cli_path=fake.path,
        parent_env=env or parent_env(tmp_path / "home"),
        linger_s=0.5,
        term_grace_s=1.0,
    )
    request = AgentSessionRequest(
        prompt=prompt,
        system=system,
        model=model,
        scope=ToolScope(root=wt),
        timeout_s=timeout_s,
        run_dir=tmp_path / "run",
    )
    return transport.run_session(request), fake, wt


def test_session_argv_env_cwd_stdin(tmp_path):
    out, fake, wt = session(tmp_path, "success", system="CONTRACT-TEXT", model="sonnet-4.5")
    assert out.ok and out.text == "Hi. What would you like to work on?" and out.backend == "cursor"
    rec = fake.last()
    cwd = Path(rec["cwd"]).resolve()
    argv = rec["argv"][1:]
    assert argv[:7] == ["--print", "--output-format", "stream-json", "--trust", "--workspace", rec["cwd"], "--force"]
    assert "--approve-mcps" in argv and "--model=sonnet-4.5" in argv
    assert "--" not in argv and not any("CONTRACT-TEXT" in a for a in argv)  # the prompt is never on argv
    assert rec["stdin_type"] == "pipe" and rec["stdin"].startswith("# Instructions\n\nCONTRACT-TEXT")
    assert rec["stdin"].endswith("# Task\n\nhi")
    assert_no_canary(rec)
    assert not cwd.is_relative_to(wt.resolve())
    assert rec["env"]["HOME"] == str((tmp_path / "run" / "home").resolve())
    assert rec["env"]["XDG_CONFIG_HOME"].startswith(rec["env"]["HOME"])


def test_prompt_can_never_become_a_flag(tmp_path):
    evil = "--api-key=sk-injected --yolo"
    out, fake, _ = session(tmp_path, "success", prompt=evil)
    rec = fake.last()
    assert not any(evil in a for a in rec["argv"]) and rec["stdin"].endswith(evil)  # stdin: never a flag


def test_huge_prompt_goes_on_stdin(tmp_path):
    big = "x" * (MAX_ARGV_PROMPT_BYTES + 10)
    out, fake, _ = session(tmp_path, "success", prompt=big)
    rec = fake.last()
    assert "--" not in rec["argv"] and rec["stdin_type"] == "pipe" and rec["stdin"].endswith(big)


def test_mcp_config_lives_in_the_per_run_home_only(tmp_path):
    out, fake, wt = session(tmp_path, "success")
    rec = fake.last()
    home = Path(rec["env"]["HOME"])
    for cfg in (home / ".cursor" / "mcp.json", Path(rec["cwd"]) / ".cursor" / "mcp.json"):
        servers = json.loads(cfg.read_text())["mcpServers"]
        assert list(servers) == ["bridge"]
        assert Path(servers["bridge"]["command"]).is_absolute() and "--spec" in servers["bridge"]["args"]
    # the worktree's and the user's files are untouched and unused
    assert "canary-worktree" in (wt / ".cursor" / "mcp.json").read_text()
    assert "canary-home" in (tmp_path / "home" / ".cursor" / "mcp.json").read_text()
    assert not (Path(rec["cwd"]) / "AGENTS.md").exists()


def test_worktree_and_home_config_never_reach_the_cli(tmp_path):
    out, fake, wt = session(tmp_path, "success")
    rec = fake.last()
    assert_no_canary(rec)
    blob = json.dumps(rec)
    assert "canary-home" not in blob and "canary-worktree" not in blob and "CANARY-AGENTS" not in blob
    assert rec["env"]["HOME"] != str(tmp_path / "home")


def test_login_file_is_linked_for_the_session_only(tmp_path):
    home = tmp_path / "home"
    (home / ".config" / "cursor").mkdir(parents=True)
    auth = home / ".config" / "cursor" / "auth.json"
    auth.write_text('{"accessToken": "canary-login-token-0123456789"}')
    scenario = {
        "mcp": "connect",
        "steps": [
            {"spawn": "sh -c 'readlink \"$HOME/.config/cursor/auth.json\" >&2'"},
            {"delay": 0.5},
            {"emit": {"type": "result", "subtype": "success", "is_error": False, "result": "ok"}},
        ],
    }
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home)}
    out, fake, _ = session(tmp_path, scenario, env=env)
    assert out.ok and str(auth) in out.stderr_tail
    link = Path(fake.last()["env"]["HOME"]) / ".config" / "cursor" / "auth.json"
    assert not link.exists() and not link.is_symlink()
    assert auth.read_text() == '{"accessToken": "canary-login-token-0123456789"}'


def test_linger_after_result_outcome_from_event_and_tree_gone(tmp_path):
    out, fake, _ = session(tmp_path, "linger_after_result", timeout_s=60.0)
    assert out.ok and out.text == "Finished." and out.terminal_event_seen
    kids = [g["pid"] for g in fake.last()["grandchildren"]]
    assert kids and pids_alive(kids) == []
    assert out.duration_s < 60.0


def test_timeout_truncates_with_partial_text_and_no_survivors(tmp_path):
    out, fake, _ = session(tmp_path, "timeout_mid_stream", timeout_s=2.0)
    assert out.status is OutcomeStatus.truncated and out.error_class is ErrorClass.timeout
    assert out.text == "Looking at the tree first." and out.native_tool_calls == ["shell"]
    kids = [g["pid"] for g in fake.last()["grandchildren"]]
    assert kids and pids_alive(kids) == []


def test_one_shot_is_tool_less_and_read_only(tmp_path):
    fake = install_fake_cli("cursor-agent", "success", tmp_path / "bin")
    t = CursorTransport(get_spec("cursor"), Settings(), cli_path=fake.path, parent_env=parent_env(tmp_path / "home"))
    out = t.complete("say hi")
    assert out.ok
    argv = fake.last()["argv"]
    assert "--force" not in argv and "--approve-mcps" not in argv and argv[argv.index("--mode") + 1] == "ask"
    with pytest.raises(Exception):
        t.complete("x", tools=[{"name": "read_file"}])


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_fake_session_matches_the_replayed_outcome(tmp_path, scenario):
    # 3 s bounds the stalling scenarios; the rest start their bridge first, which a loaded machine may make slow
    out, _, _ = session(tmp_path, scenario, timeout_s=3.0 if scenario.startswith("timeout") else 60.0)
    want = replay_outcome(scenario)
    if scenario in SESSION_VERDICTS:  # decided after the stream, by the transport (see SESSION_VERDICTS)
        want = want.model_copy(update=dict(zip(("status", "error_class"), SESSION_VERDICTS[scenario])))
    keys = (
        "status",
        "error_class",
        "text",
        "usage",
        "native_tool_calls",
        "terminal_event_seen",
        "served_model",
        "iterations",
        "auth_source",
        "tool_calls",
        "tools_used",
    )
    got, expected = ({k: getattr(o, k) for k in keys} for o in (out, want))
    got["tools_used"], expected["tools_used"] = sorted(got["tools_used"]), sorted(expected["tools_used"])  # trace: first-use order
    assert got == expected


#: Scenarios whose session outcome is not the stream's: the bridge never listed its tools
#: (readiness from the bridge trace), or the audit is unclean (cursor's built-ins cannot be
#: switched off, so the audit decides). See HarnessTransport.judge.
SESSION_VERDICTS = {
    "mcp_failed": (OutcomeStatus.blocked, ErrorClass.mcp_unavailable),
    "native_tool_use": (OutcomeStatus.blocked, ErrorClass.policy_violation),
    "oversize_line": (OutcomeStatus.blocked, ErrorClass.policy_violation),  # its shell call printed the big line
}


def test_a_session_whose_bridge_never_listed_its_tools_is_blocked(tmp_path):
    """cursor says nothing about MCP servers: the bridge's own trace is the readiness signal."""
    out, _, _ = session(tmp_path, "mcp_failed")
    assert (out.status, out.error_class) == (OutcomeStatus.blocked, ErrorClass.mcp_unavailable)
    assert "the bridge never started" in out.message and out.text


def test_an_unclean_audit_blocks_the_session(tmp_path):
    out, _, _ = session(tmp_path, "native_tool_use")
    assert (out.status, out.error_class) == (OutcomeStatus.blocked, ErrorClass.policy_violation)
    assert not out.audit.clean and "native_shell" in out.message


def test_session_carries_the_audit_verdict(tmp_path):
    clean, _, _ = session(tmp_path / "a", "success")
    assert clean.audit is not None and clean.audit.clean
    flagged, _, _ = session(tmp_path / "b", "native_tool_use")
    assert flagged.audit is not None and not flagged.audit.clean
    assert {"native_shell", "foreign_mcp_tool"} <= {f.code for f in flagged.audit.flags}


def test_bridge_calls_through_the_real_bridge(tmp_path):
    """The fake starts the bridge from the per-run ~/.cursor/mcp.json and calls it."""

    def call(cid, path, sub):
        args = {"name": "bridge-read_file", "args": {"path": path}, "toolName": "read_file", "providerIdentifier": "bridge"}
        return {"type": "tool_call", "subtype": sub, "call_id": cid, "tool_call": {"mcpToolCall": {"args": args}}}

    scenario = {
        "mcp": "connect",
        "steps": [
            {"emit": {"type": "system", "subtype": "init", "apiKeySource": "login", "model": "Auto", "session_id": "s"}},
            {
                "mcp_calls": [
                    {"name": "read_file", "arguments": {"path": "README.md"}},
                    {"name": "read_file", "arguments": {"path": "../home/.cursor/mcp.json"}},
                ],
                "server": "bridge",
            },
            {"emit": call("c1", "README.md", "started")},
            {"emit": call("c1", "README.md", "completed")},
            {"emit": call("c2", "../home/.cursor/mcp.json", "started")},
            {"emit": call("c2", "../home/.cursor/mcp.json", "completed")},
            {"emit": {"type": "result", "subtype": "success", "is_error": False, "result": "read it", "session_id": "s"}},
        ],
    }
    out, fake, _ = session(tmp_path, scenario, timeout_s=60.0)
    results = [json.loads(r) for r in fake.record_path.read_text().splitlines() if '"mcp_result"' in r]
    assert len(results) == 2, results
    assert "# Project" in results[0].get("text", "") and results[1].get("is_error")
    assert out.ok and out.tool_calls == 2 and [r.code for r in out.refusals] == ["path_outside_scope"]


@pytest.mark.parametrize("model", ["--yolo", "opus,--tools=Bash", "opus --debug", "a\nb"])
def test_smuggling_model_names_are_refused_before_spawn(tmp_path, model):
    from harnesscheck.core.contracts import ConfigError

    with pytest.raises(ConfigError):
        session(tmp_path, "success", model=model)
    assert not (tmp_path / "bin" / "cursor-agent.record.jsonl").exists()
