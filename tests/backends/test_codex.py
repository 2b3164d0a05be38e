"""Codex transport: the pure parser over every fixture (snapshots, any chunking), the
config/argv builder, and sessions through the fake `codex` (argv, env, cwd, stdin, CODEX_HOME,
timeouts, lingering processes, worktree and home config that must not reach the CLI)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _replay import build, run_parser
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harnesscheck.backends._errortext import classify_text
from harnesscheck.backends.codex import CodexParser
from harnesscheck.core.contracts import ErrorClass, ModelVerdict, OutcomeStatus
from harnesscheck.core.paths import fixtures_dir

SCENARIOS = sorted(p.stem for p in (fixtures_dir() / "codex").glob("*.json"))
SMALL = [s for s in SCENARIOS if s != "oversize_line"]


def replay_outcome(scenario: str, model: str | None = None, cuts=None):
    return run_parser(CodexParser(requested_model=model), build("codex", scenario, model), cuts)


def test_every_fixture_has_provenance():
    import json

    for name in SCENARIOS:
        doc = json.loads((fixtures_dir() / "codex" / f"{name}.json").read_text())
        prov = doc["provenance"]
        assert prov["cli"] == "codex" and prov["cli_version"] == "0.171.0" and prov["date"]
        assert prov["source"] in ("observed-here", "loopback-recording") or prov["source"].startswith("reference:"), name


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_outcome_snapshot(scenario, snapshot):
    assert replay_outcome(scenario).model_dump(mode="json") == snapshot


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
@pytest.mark.parametrize("scenario", SMALL)
def test_any_chunking_gives_the_same_outcome(scenario, data):
    replay = build("codex", scenario)
    cuts = data.draw(st.lists(st.integers(0, len(replay.stdout)), max_size=40))
    whole = run_parser(CodexParser(), replay).model_dump()
    assert run_parser(CodexParser(), replay, cuts).model_dump() == whole


def test_byte_by_byte_framing_of_success():
    replay = build("codex", "success")
    cuts = list(range(1, len(replay.stdout)))
    assert run_parser(CodexParser(), replay, cuts) == run_parser(CodexParser(), replay)


def test_warning_items_are_not_failures():
    # the real 0.171.0 prints two `item.completed{type:error}` warnings on a reroute
    out = replay_outcome("served_model_mismatch")
    assert out.ok and out.text == "Served by another model."
    assert out.error_class is None and "model rerouted" in out.message
    # ... and a "Model metadata ... not found" warning for an unknown model: it is not what
    # makes model_not_found fail (the turn.failed is), and never "model not found" by itself
    out = replay_outcome("model_not_found")
    assert out.error_class is ErrorClass.model_unavailable and "Model metadata" in out.message


@pytest.mark.parametrize(
    ("scenario", "status", "cls"),
    [
        ("not_logged_in", OutcomeStatus.blocked, ErrorClass.auth),
        ("auth_401", OutcomeStatus.blocked, ErrorClass.auth),
        ("usage_limit", OutcomeStatus.blocked, ErrorClass.quota),
        ("rate_limit_429", OutcomeStatus.error, ErrorClass.rate_limit),
        ("overloaded_529", OutcomeStatus.error, ErrorClass.overloaded),
        ("context_overflow", OutcomeStatus.error, ErrorClass.context_overflow),
        ("model_not_found", OutcomeStatus.error, ErrorClass.model_unavailable),
        ("malformed_line", OutcomeStatus.ok, None),
        ("truncated_last_line", OutcomeStatus.error, ErrorClass.protocol),
        ("mcp_failed", OutcomeStatus.blocked, ErrorClass.mcp_unavailable),
        ("exit0_is_error", OutcomeStatus.error, ErrorClass.overloaded),
        ("crash_no_result", OutcomeStatus.error, ErrorClass.cli_crash),
        ("timeout_mid_stream", OutcomeStatus.truncated, ErrorClass.timeout),
        ("linger_after_result", OutcomeStatus.ok, None),
        ("unknown_events", OutcomeStatus.ok, None),
        ("oversize_line", OutcomeStatus.ok, None),
    ],
)
def test_classification(scenario, status, cls):
    out = replay_outcome(scenario)
    assert (out.status, out.error_class) == (status, cls), out.message


def test_auth_stops_at_the_first_401_reconnect():
    parser = CodexParser()
    replay = build("codex", "not_logged_in")
    out = run_parser(parser, replay)
    assert len(parser.errors) == 1 and parser.errors[0].startswith("Reconnecting... 1/5")
    assert out.retryable is False and not out.terminal_event_seen


def test_retryable_flags():
    assert replay_outcome("rate_limit_429").retryable
    assert replay_outcome("overloaded_529").retryable
    assert not replay_outcome("usage_limit").retryable
    assert replay_outcome("timeout_mid_stream").retryable


def test_usage_from_turn_completed():
    u = replay_outcome("native_tool_use").usage
    # 34172 input of which 27136 cached; reasoning is a part of output, reported apart
    assert (u.input, u.cache_read, u.cache_write, u.output, u.reasoning) == (7036, 27136, 0, 163, 26)


def test_no_model_id_means_unverified_and_no_cost():
    out = replay_outcome("success", model="gpt-5.5-codex")
    assert out.served_model is None and out.model_verdict is ModelVerdict.unverified
    assert out.cost.usd is None and out.cost.source.value == "none"


def test_reroute_is_a_served_model_mismatch():
    out = replay_outcome("served_model_mismatch", model="gpt-5.5-codex")
    assert out.served_model == "loopback-other-model" and out.model_verdict is ModelVerdict.mismatch
    assert out.ok


def test_native_and_bridge_calls_are_told_apart():
    out = replay_outcome("native_tool_use")
    assert out.native_tool_calls == ["file_change", "command_execution", "web_search", "command_execution"]
    assert out.tool_calls == 0
    tools = replay_outcome("tool_calls")
    assert tools.tools_used == ["read_file"] and tools.tool_calls == 1 and not tools.native_tool_calls


def test_timeout_keeps_partial_text():
    out = replay_outcome("timeout_mid_stream")
    assert out.text == "Reading the files first." and out.cost.partial


def test_foreign_mcp_server_is_native():
    parser = CodexParser()
    parser.feed('{"type":"item.started","item":{"id":"i","type":"mcp_tool_call","server":"evil","tool":"x","arguments":{}}}')
    parser.feed('{"type":"item.completed","item":{"id":"i","type":"mcp_tool_call","server":"evil","tool":"x","arguments":{}}}')
    assert parser.calls.native_calls == ["mcp:evil/x"] and parser.calls.bridge_calls == 0


def test_bridge_mcp_warning_stops():
    from harnesscheck.contain.process import LineAction

    parser = CodexParser()
    action = parser.feed(
        '{"type":"item.completed","item":{"id":"item_0","type":"error","message":"MCP client for `bridge` failed to start: program not found"}}'
    )  # noqa: E501
    assert action is LineAction.STOP and parser.early is ErrorClass.mcp_unavailable
    other = CodexParser()
    assert other.feed('{"type":"item.completed","item":{"id":"item_0","type":"error","message":"MCP client for `docs` failed to start"}}') is None


def test_events_after_the_terminal_event_change_nothing():
    parser = CodexParser()
    for line in build("codex", "success").stdout.decode().splitlines():
        parser.feed(line)
    parser.feed('{"type":"turn.failed","error":{"message":"401 Unauthorized"}}')
    assert parser.terminal == "completed"


@pytest.mark.parametrize(
    ("text", "cls"),
    [
        ("Reconnecting... 2/5 (unexpected status 401 Unauthorized: Missing bearer)", ErrorClass.auth),
        ("exceeded retry limit, last status: 429 Too Many Requests", ErrorClass.rate_limit),
        ("You've hit your usage limit. Visit the settings to purchase more credits", ErrorClass.quota),
        ("Quota exceeded. Check your plan and billing details.", ErrorClass.quota),
        ("stream disconnected before completion: You have no credits remaining", ErrorClass.quota),
        ("Codex ran out of room in the model's context window.", ErrorClass.context_overflow),
        ('{"error":{"code":"context_length_exceeded"}}', ErrorClass.context_overflow),
        ("unexpected status 500 Internal Server Error", ErrorClass.server_error),
        ("Selected model is at capacity. Please try a different model.", ErrorClass.overloaded),
        ("Reconnecting... waiting for network", ErrorClass.network),
        ("required MCP servers failed to initialize: bridge: timed out", ErrorClass.mcp_unavailable),
        ("shared rollout token budget exhausted", ErrorClass.budget),
        ("Model metadata for `x` not found. Defaulting to fallback metadata", None),
        ("something odd", None),
    ],
)
def test_message_classes(text, cls):
    assert classify_text(text) is cls


# ---------------------------------------------------------------------------------------
# Sessions through the fake codex

import tomllib  # noqa: E402

from _replay import assert_no_canary, hostile_worktree, parent_env, pids_alive  # noqa: E402

from harnesscheck.backends.codex import CodexTransport, render_config, subscription_auth_file  # noqa: E402
from harnesscheck.backends.registry import get_spec  # noqa: E402
from harnesscheck.core.config import Settings  # noqa: E402
from harnesscheck.core.contracts import AgentSessionRequest  # noqa: E402
from harnesscheck.core.scope import ToolScope  # noqa: E402
from harnesscheck.testing.fakes import install_fake_cli  # noqa: E402


def session(tmp_path, scenario, *, prompt="hi", timeout_s=30.0, model=None, system=None, **kw):
    wt = hostile_worktree(tmp_path)
    fake = install_fake_cli("codex", scenario, tmp_path / "bin")
    transport = CodexTransport(
        get_spec("codex"),
        Settings(),
        cli_path=fake.path,
        parent_env=parent_env(tmp_path / "home"),
        linger_s=0.5,
        term_grace_s=1.0,
        **kw,
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
    out, fake, wt = session(tmp_path, "success", system="CONTRACT-TEXT")
    assert out.ok and out.text == "The answer is 42." and out.backend == "codex"
    assert out.cli_version == "codex-cli 0.171.0"
    rec = fake.last()
    assert rec["argv"][1:] == ["exec", "--json", "--sandbox", "read-only", "--skip-git-repo-check", "-"]
    assert_no_canary(rec)
    run = (tmp_path / "run").resolve()
    assert rec["env"]["CODEX_HOME"] == str(run / "config-homes" / "codex_home")
    assert rec["env"]["HOME"] != str(tmp_path / "home")
    cwd = Path(rec["cwd"]).resolve()
    assert not cwd.is_relative_to(wt.resolve()) and not (cwd / "AGENTS.md").exists()
    assert rec["stdin_type"] == "pipe"  # the prompt, then EOF
    assert rec["stdin"].startswith("# Instructions\n\nCONTRACT-TEXT") and rec["stdin"].endswith("# Task\n\nhi")
    assert "CANARY" not in rec["stdin"]


def test_prompt_can_never_become_a_flag(tmp_path):
    evil = "--dangerously-bypass-approvals-and-sandbox"
    out, fake, _ = session(tmp_path, "success", prompt=evil, model="gpt-5.5-codex")
    rec = fake.last()
    assert evil not in rec["argv"] and rec["stdin"].endswith("# Task\n\n" + evil)
    assert "--model=gpt-5.5-codex" in rec["argv"] and rec["argv"][-1] == "-"


def test_bad_model_name_is_refused_before_spawn(tmp_path):
    from harnesscheck.core.contracts import ConfigError

    with pytest.raises(ConfigError):
        session(tmp_path, "success", model="--yolo")


def test_per_run_codex_home_config(tmp_path):
    out, fake, _ = session(tmp_path, "success")
    home = Path(fake.last()["env"]["CODEX_HOME"])
    config = tomllib.loads((home / "config.toml").read_text())
    assert sorted(config["mcp_servers"]) == ["bridge"]
    bridge = config["mcp_servers"]["bridge"]
    assert bridge["required"] is True and Path(bridge["command"]).is_absolute()
    assert bridge["args"][-2:] == ["--spec", str((tmp_path / "run" / "bridge-spec.json").resolve())]
    assert bridge["enabled_tools"] == ["read_file", "list_dir", "grep"]
    assert config["web_search"] == "disabled"
    assert config["analytics"] == {"enabled": False}  # no metrics exporter looking up its host
    assert sorted(p.name for p in home.iterdir()) == ["config.toml"]  # no auth link without a login
    assert (home / "config.toml").stat().st_mode & 0o077 == 0


def test_config_toml_escapes_odd_paths():
    text = render_config(bridge=(['/opt/py thon\\x/"q"/é𝄞', "-I"], {"PYTHONPATH": "C:\\src"}), bridge_tools=("read_file",))
    bridge = tomllib.loads(text)["mcp_servers"]["bridge"]
    assert bridge["command"] == '/opt/py thon\\x/"q"/é𝄞' and bridge["env"] == {"PYTHONPATH": "C:\\src"}


def test_write_scope_enables_write_tools(tmp_path):
    wt = hostile_worktree(tmp_path)
    fake = install_fake_cli("codex", "success", tmp_path / "bin")
    t = CodexTransport(get_spec("codex"), Settings(), cli_path=fake.path, parent_env=parent_env(tmp_path / "home"))
    t.run_session(AgentSessionRequest(prompt="x", scope=ToolScope(root=wt, read_only=False), run_dir=tmp_path / "run"))
    config = tomllib.loads((Path(fake.last()["env"]["CODEX_HOME"]) / "config.toml").read_text())
    assert config["mcp_servers"]["bridge"]["enabled_tools"] == ["read_file", "list_dir", "grep", "write_file", "edit_file"]


def test_subscription_login_is_linked_but_never_an_api_key(tmp_path):
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    auth = home / ".codex" / "auth.json"
    auth.write_text(json.dumps({"auth_mode": "chatgpt", "tokens": {"id_token": "x"}, "last_refresh": "2026-11-01"}))
    assert subscription_auth_file({"HOME": str(home)}) == auth
    auth.write_text(json.dumps({"OPENAI_API_KEY": "sk-canary-0123456789", "tokens": None}))
    assert subscription_auth_file({"HOME": str(home)}) is None
    auth.write_text(json.dumps({"auth_mode": "apikey", "OPENAI_API_KEY": "sk-x", "tokens": {"a": 1}}))
    assert subscription_auth_file({"HOME": str(home)}) is None
    assert subscription_auth_file({"HOME": str(tmp_path / "nobody")}) is None


def test_login_link_exists_during_the_session_only(tmp_path):
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    (home / ".codex" / "auth.json").write_text(json.dumps({"auth_mode": "chatgpt", "tokens": {"id_token": "x"}}))
    scenario = {
        "steps": [
            {"spawn": "sh -c 'readlink \"$CODEX_HOME/auth.json\" >&2'"},
            {"delay": 0.5},
            {"emit": {"type": "turn.started"}},
            {"emit": {"type": "item.completed", "item": {"id": "i", "type": "agent_message", "text": "ok"}}},
            {"emit": {"type": "turn.completed", "usage": {}}},
        ]
    }
    fake = install_fake_cli("codex", scenario, tmp_path / "bin")
    wt = tmp_path / "wt"
    wt.mkdir()
    t = CodexTransport(get_spec("codex"), Settings(), cli_path=fake.path, parent_env={"PATH": "/usr/bin:/bin", "HOME": str(home)})
    out = t.run_session(AgentSessionRequest(prompt="x", scope=ToolScope(root=wt), run_dir=tmp_path / "run"))
    assert out.ok and str(home / ".codex" / "auth.json") in out.stderr_tail
    codex_home = Path(fake.last()["env"]["CODEX_HOME"])
    assert not (codex_home / "auth.json").exists() and not (codex_home / "auth.json").is_symlink()
    assert sorted(p.name for p in (home / ".codex").iterdir()) == ["auth.json"]  # the user's store untouched


def test_worktree_and_home_config_never_reach_the_cli(tmp_path):
    out, fake, wt = session(tmp_path, "success")
    rec = fake.last()
    assert_no_canary(rec)
    codex_home = Path(rec["env"]["CODEX_HOME"])
    assert codex_home.resolve() != (tmp_path / "home" / ".codex").resolve()
    assert "canary" not in (codex_home / "config.toml").read_text()
    assert not any(p.name == "AGENTS.md" for p in codex_home.rglob("*"))
    cwd = Path(rec["cwd"])
    assert list(cwd.iterdir()) == [] and not cwd.resolve().is_relative_to(wt.resolve())
    assert not Path(rec["env"]["HOME"], ".codex").exists()


def test_timeout_truncates_with_partial_text_and_no_survivors(tmp_path):
    # the recorded stall, plus a grandchild holding the pipes (a fake-only trap)
    data = json.loads((fixtures_dir() / "codex" / "timeout_mid_stream.json").read_text())
    data["steps"] = [{"spawn": "sleep 1000"}, *data["steps"]]
    out, fake, _ = session(tmp_path, data, timeout_s=2.0)
    assert out.status is OutcomeStatus.truncated and out.error_class is ErrorClass.timeout
    assert out.text == "Reading the files first." and out.tools_used == ["read_file"] and not out.native_tool_calls
    kids = [g["pid"] for g in fake.last()["grandchildren"]]
    assert kids and pids_alive(kids) == []
    assert out.duration_s < 2.0 + 1.0 + 5.0


def test_linger_after_turn_completed(tmp_path):
    out, fake, _ = session(tmp_path, "linger_after_result", timeout_s=60.0)
    assert out.ok and out.text == "Finished." and out.terminal_event_seen
    assert pids_alive([g["pid"] for g in fake.last()["grandchildren"]]) == []
    assert out.duration_s < 60.0


def test_auth_failure_stops_the_retry_ladder(tmp_path):
    out, fake, _ = session(tmp_path, "not_logged_in")
    assert out.status is OutcomeStatus.blocked and out.error_class is ErrorClass.auth
    assert out.message.startswith("Reconnecting... 1/5")
    events = (tmp_path / "run" / "events.jsonl").read_text().splitlines()
    assert sum('"Reconnecting' in e for e in events) == 1  # nothing read after the first 401


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_fake_session_matches_the_replayed_outcome(tmp_path, scenario):
    """Every fixture through the real transport + fake CLI gives the snapshotted outcome."""
    out, _, _ = session(tmp_path, scenario, timeout_s=3.0)
    want = replay_outcome(scenario)
    if scenario in AUDIT_BLOCKS:  # codex's built-ins cannot be switched off: the unclean audit decides
        want = want.model_copy(update={"status": OutcomeStatus.blocked, "error_class": ErrorClass.policy_violation})
    keys = ("status", "error_class", "text", "usage", "native_tool_calls", "terminal_event_seen", "served_model", "iterations")
    assert {k: getattr(out, k) for k in keys} == {k: getattr(want, k) for k in keys}
    # the fake never starts the bridge, so the stream's own count of bridge calls stands
    assert (out.tool_calls, out.tools_used) == (want.tool_calls, want.tools_used)


#: Fixtures in which a built-in ran (a native shell command): the session ends blocked/policy_violation.
AUDIT_BLOCKS = {"native_tool_use", "oversize_line"}


def test_format_drift_alone_never_blocks(tmp_path):
    """An unknown tool-looking item makes the audit unclean (unknown_tool_event) but is no evidence
    that anything ran: the session stays ok (audit.DRIFT_CODES), the message says why."""
    out, _, _ = session(tmp_path, "unknown_events")
    assert out.ok and not out.audit.clean and {"unknown_tool_event"} <= {f.code for f in out.audit.flags}
    assert "drift only" in out.message


def test_session_carries_the_audit_verdict(tmp_path):
    clean, _, _ = session(tmp_path / "a", "success")
    assert clean.audit is not None and clean.audit.clean
    flagged, _, _ = session(tmp_path / "b", "native_tool_use")
    assert flagged.audit is not None and not flagged.audit.clean
    codes = {f.code for f in flagged.audit.flags}
    assert "native_shell" in codes, codes


def test_exit_1_after_turn_completed_is_still_ok(tmp_path):
    scenario = {
        "steps": [
            {"emit": {"type": "turn.started"}},
            {"emit": {"type": "item.completed", "item": {"id": "i", "type": "agent_message", "text": "done"}}},
            {"emit": {"type": "turn.completed", "usage": {"input_tokens": 5, "output_tokens": 1}}},
            {"exit": 1},
        ]
    }
    out, _, _ = session(tmp_path, scenario)
    assert out.ok and out.exit_code == 1 and out.text == "done"  # the terminal event before the exit code


def test_one_shot_has_no_bridge_and_refuses_tools(tmp_path):
    from harnesscheck.core.contracts import CapabilityUnsupported

    fake = install_fake_cli("codex", "success", tmp_path / "bin")
    t = CodexTransport(get_spec("codex"), Settings(), cli_path=fake.path, parent_env=parent_env(tmp_path / "home"))
    out = t.complete("say hi", system="be brief")
    assert out.ok and out.text == "The answer is 42."
    rec = fake.last()
    assert rec["stdin"] == "# Instructions\n\nbe brief\n\n# Task\n\nsay hi"
    with pytest.raises(CapabilityUnsupported):
        t.complete("x", tools=[{"name": "read_file"}])


def test_a_one_shot_whose_private_dir_cannot_be_removed_fails_loudly(tmp_path, monkeypatch):
    """complete()'s private dir is removed after the call; when it cannot be, the ok outcome
    becomes a policy_violation error with the reason in its message (never a silent ok)."""
    from harnesscheck.contain import rundir
    from harnesscheck.core.contracts import ErrorClass, OutcomeStatus

    fake = install_fake_cli("codex", "success", tmp_path / "bin")
    t = CodexTransport(get_spec("codex"), Settings(), cli_path=fake.path, parent_env=parent_env(tmp_path / "home"))
    remove = rundir.remove_private_tree  # the dir still goes (nothing left in /tmp); the answer says it could not
    monkeypatch.setattr(rundir, "remove_private_tree", lambda path: remove(path) or "run: Device or resource busy")
    out = t.complete("say hi")
    assert out.status is OutcomeStatus.error and out.error_class is ErrorClass.policy_violation and not out.retryable
    assert "the one-shot's private dir could not be removed (run: Device or resource busy)" in (out.message or "")


def test_parser_memory_is_bounded():
    from harnesscheck.backends._bounded import MAX_NATIVE, CallLog, TextTail

    tail = TextTail(sep="\n\n", limit=1000)
    for i in range(5000):
        tail.append(f"message {i}")
    text = tail.text()
    assert len(text) < 1100 and text.endswith("message 4999") and "earlier characters not kept" in text
    calls = CallLog()
    for _ in range(MAX_NATIVE + 5):
        calls.native("command_execution")
    assert len(calls.native_calls) == MAX_NATIVE + 1 and calls.native_calls[-1] == "… +5 more"
    parser = CodexParser()
    for i in range(20000):
        parser.feed(json.dumps({"type": "item.started", "item": {"id": f"i{i}", "type": "command_execution"}}))
        parser.feed(json.dumps({"type": "item.completed", "item": {"id": f"i{i}", "type": "command_execution"}}))
    assert parser.open_items == set() and len(parser.calls.native_calls) == MAX_NATIVE + 1


def test_bridge_calls_through_the_real_bridge(tmp_path):
    """The fake starts the bridge from the per-run config.toml and calls it: the outcome's
    calls and refusals come from the bridge's own trace."""

    def item(i, path, status):
        return {
            "type": "item.completed" if status != "in_progress" else "item.started",
            "item": {
                "id": f"item_{i}",
                "type": "mcp_tool_call",
                "server": "bridge",
                "tool": "read_file",
                "arguments": {"path": path},
                "result": None,
                "error": None,
                "status": status,
            },
        }

    scenario = {
        "steps": [
            {"emit": {"type": "thread.started", "thread_id": "t"}},
            {"emit": {"type": "turn.started"}},
            {
                "mcp_calls": [
                    {"name": "read_file", "arguments": {"path": "README.md"}},
                    {"name": "read_file", "arguments": {"path": "../home/.codex/config.toml"}},
                ],
                "server": "bridge",
            },
            {"emit": item(1, "README.md", "in_progress")},
            {"emit": item(1, "README.md", "completed")},
            {"emit": item(2, "../home/.codex/config.toml", "in_progress")},
            {"emit": item(2, "../home/.codex/config.toml", "failed")},
            {"emit": {"type": "item.completed", "item": {"id": "item_3", "type": "agent_message", "text": "read it"}}},
            {"emit": {"type": "turn.completed", "usage": {"input_tokens": 10, "output_tokens": 2}}},
        ]
    }
    out, fake, _ = session(tmp_path, scenario, timeout_s=60.0)
    results = [r for r in fake.record_path.read_text().splitlines() if '"mcp_result"' in r]
    assert len(results) == 2, results
    first, second = (json.loads(r) for r in results)
    assert not first.get("is_error") and "# Project" in first.get("text", "")
    assert second.get("is_error") and "path_outside_scope" in second.get("text", "")
    assert out.ok and out.tool_calls == 2 and out.tools_used == ["read_file"]
    assert [r.code for r in out.refusals] == ["path_outside_scope"]
    assert "canary_home" not in json.dumps(out.model_dump(mode="json"))


def test_a_refreshed_login_file_never_stays_in_the_run_dir(tmp_path):
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    (home / ".codex" / "auth.json").write_text(json.dumps({"auth_mode": "chatgpt", "tokens": {"id_token": "old"}}))
    # the CLI replaces the link with its own file, as a token refresh by rename would
    scenario = {
        "steps": [
            {"spawn": 'sh -c \'rm "$CODEX_HOME/auth.json"; echo rotated > "$CODEX_HOME/auth.json"\''},
            {"delay": 0.5},
            {"emit": {"type": "turn.started"}},
            {"emit": {"type": "item.completed", "item": {"id": "i", "type": "agent_message", "text": "ok"}}},
            {"emit": {"type": "turn.completed", "usage": {}}},
        ]
    }
    fake = install_fake_cli("codex", scenario, tmp_path / "bin")
    wt = tmp_path / "wt"
    wt.mkdir()
    t = CodexTransport(get_spec("codex"), Settings(), cli_path=fake.path, parent_env={"PATH": "/usr/bin:/bin", "HOME": str(home)})
    assert t.run_session(AgentSessionRequest(prompt="x", scope=ToolScope(root=wt), run_dir=tmp_path / "run")).ok
    assert not (Path(fake.last()["env"]["CODEX_HOME"]) / "auth.json").exists()
    assert "old" in (home / ".codex" / "auth.json").read_text()


def test_refused_builtin_attempts_come_from_the_rollout(tmp_path):
    """A disabled built-in the model asked for never shows in `exec --json`; codex's rollout
    file has it (shapes observed on 0.171.0 against the loopback server)."""
    from harnesscheck.backends.codex import refused_native_calls

    day = tmp_path / "sessions" / "2026" / "11" / "29"
    day.mkdir(parents=True)
    lines = [
        {"type": "session_meta", "payload": {"id": "t"}},
        {"type": "response_item", "payload": {"type": "function_call", "name": "exec_command", "arguments": '{"cmd": "cat /x"}', "call_id": "c1"}},
        {"type": "response_item", "payload": {"type": "function_call_output", "call_id": "c1", "output": "unsupported call: exec_command"}},
        {"type": "response_item", "payload": {"type": "function_call", "name": "read_file", "namespace": "mcp__bridge", "arguments": "{}", "call_id": "c2"}},
        {
            "type": "response_item",
            "payload": {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "unsupported call: no"}]},
        },
        {"type": "response_item", "payload": {"type": "custom_tool_call", "name": "apply_patch", "call_id": "c3"}},
        {"type": "response_item", "payload": {"type": "custom_tool_call_output", "call_id": "c3", "output": "Success"}},
    ]
    (day / "rollout-2026-11-29T10-00-00-t.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n{torn")
    assert refused_native_calls(tmp_path) == ["exec_command (refused by codex)"]
    assert refused_native_calls(tmp_path / "none") == []


# ---------------------------------------------------------------------------------------
# the reconnect ladder cut short (429 / 529 / 5xx), and refused built-ins flagged


from harnesscheck.contain.process import LineAction  # noqa: E402


def _notices(*messages, **parser_kwargs):
    parser = CodexParser(**parser_kwargs)
    lines = [{"type": "thread.started", "thread_id": "t"}, {"type": "turn.started"}]
    lines += [{"type": "error", "message": m} for m in messages]
    actions = [parser.feed(json.dumps(x)) for x in lines]
    from harnesscheck.contain.process import Ending, ProcessResult

    ending = Ending.early_stop if LineAction.STOP in actions else Ending.deadline
    result = ProcessResult(ending=ending, exit_code=None, signal=15, stderr_tail="", duration_s=1.0)
    return actions[2:], parser.outcome(result)


@pytest.mark.parametrize(
    ("message", "cls"),
    [
        ("Reconnecting... 1/5 (exceeded retry limit, last status: 429 Too Many Requests)", ErrorClass.rate_limit),
        ("exceeded retry limit, last status: 429 Too Many Requests", ErrorClass.rate_limit),
        ("Reconnecting... 1/5 (unexpected status 529 <unknown status code>: Overloaded, url: http://127.0.0.1:4290/v1/responses)", ErrorClass.overloaded),
        ("Reconnecting... 1/5 (unexpected status 503 Service Unavailable: try again)", ErrorClass.overloaded),
        ("Reconnecting... 2/5 (unexpected status 500 Internal Server Error: boom)", ErrorClass.server_error),
        ("Reconnecting... 1/5 (unexpected status 502 Bad Gateway, url: http://127.0.0.1:4290/v1/responses)", ErrorClass.server_error),
    ],
)
def test_transient_reconnect_stops_at_the_first_notice(message, cls):
    actions, out = _notices(message, message)
    assert actions[0] is LineAction.STOP
    assert (out.status, out.error_class, out.retryable) == (OutcomeStatus.error, cls, True)
    assert not out.terminal_event_seen


def test_reconnect_stop_bound_and_retry_after():
    ladder = [f"Reconnecting... {n}/5 (unexpected status 429 Too Many Requests: retry-after: 7)" for n in (1, 2, 3)]
    actions, out = _notices(*ladder, retry_stop_after=2)
    assert actions[:2] == [None, LineAction.STOP]
    assert out.error_class is ErrorClass.rate_limit and out.retry_after_s == 7.0
    actions, out = _notices(*ladder, retry_stop_after=None)
    assert actions == [None, None, None]  # the ladder runs into the deadline; the 429 it was
    assert out.error_class is ErrorClass.rate_limit and out.retryable  # retrying is the root cause, not the timeout


def test_reconnect_that_says_usage_limit_is_quota_and_stops():
    actions, out = _notices("Reconnecting... 1/5 (unexpected status 429: You've hit your usage limit. Try again in 3 days.)")
    assert actions == [LineAction.STOP]
    assert (out.status, out.error_class, out.retryable) == (OutcomeStatus.blocked, ErrorClass.quota, False)


def test_other_errors_do_not_stop():
    actions, _ = _notices("stream disconnected before completion: idle timeout", "Reconnecting... 1/5 (stream disconnected)")
    assert actions == [None, None]


def test_transport_option_reaches_the_parser(tmp_path):
    wt = tmp_path / "wt"
    wt.mkdir()
    fake = install_fake_cli("codex", "rate_limit_429", tmp_path / "bin")
    t = CodexTransport(get_spec("codex"), Settings(), cli_path=fake.path, parent_env=parent_env(tmp_path), retry_stop_after=None)
    out = t.run_session(AgentSessionRequest(prompt="x", scope=ToolScope(root=wt), run_dir=tmp_path / "run", timeout_s=60))
    assert out.terminal_event_seen and out.error_class is ErrorClass.rate_limit  # the ladder ran to turn.failed
    t = CodexTransport(get_spec("codex"), Settings(), cli_path=fake.path, parent_env=parent_env(tmp_path))
    out = t.run_session(AgentSessionRequest(prompt="x", scope=ToolScope(root=wt), run_dir=tmp_path / "run2", timeout_s=60))
    assert not out.terminal_event_seen and out.error_class is ErrorClass.rate_limit and out.retryable


def test_refused_builtin_attempt_makes_the_audit_unclean():
    from harnesscheck.backends.codex import NATIVE_ATTEMPT_CODE, flag_refused
    from harnesscheck.core.contracts import AuditFlag, AuditVerdict

    clean = AuditVerdict(flags=[AuditFlag(code="instruction_file_present", detail="AGENTS.md")])
    verdict = flag_refused(clean, ["exec_command (refused by codex)"])
    assert verdict.clean is False
    codes = [f.code for f in verdict.flags]
    assert codes == ["instruction_file_present", "native_tool_refused_by_cli", NATIVE_ATTEMPT_CODE]
    assert flag_refused(None, ["apply_patch (refused by codex)"]).clean is False


def test_sandbox_blocked_patch_counts_as_refused(tmp_path):
    from harnesscheck.backends.codex import refused_native_calls

    day = tmp_path / "sessions" / "2026" / "11" / "29"
    day.mkdir(parents=True)
    lines = [
        {"type": "response_item", "payload": {"type": "custom_tool_call", "name": "apply_patch", "call_id": "c1"}},
        {
            "type": "response_item",
            "payload": {"type": "custom_tool_call_output", "call_id": "c1", "output": "patch rejected: writing is blocked by read-only sandbox"},
        },
    ]
    (day / "rollout-x.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    assert refused_native_calls(tmp_path) == ["apply_patch (refused by codex)"]


def test_session_with_a_refused_builtin_is_never_clean(tmp_path):
    """End to end: a rollout file in the per-run CODEX_HOME (as codex 0.171.0 writes it) puts the
    attempt into native_tool_calls and makes the audit verdict unclean."""
    wt = tmp_path / "wt"
    wt.mkdir()
    fake = install_fake_cli("codex", "success", tmp_path / "bin")
    t = CodexTransport(get_spec("codex"), Settings(), cli_path=fake.path, parent_env=parent_env(tmp_path))
    run_dir = tmp_path / "run"
    original = t.after_session

    def after(ctx, outcome):
        day = ctx.run_dir / "config-homes" / "codex_home" / "sessions" / "2026"
        day.mkdir(parents=True)
        (day / "rollout-t.jsonl").write_text(
            "\n".join(
                json.dumps(x)
                for x in [
                    {"type": "response_item", "payload": {"type": "function_call", "name": "exec_command", "call_id": "c"}},
                    {"type": "response_item", "payload": {"type": "function_call_output", "call_id": "c", "output": "unsupported call: exec_command"}},
                ]
            )
            + "\n"
        )
        return original(ctx, outcome)

    t.after_session = after
    out = t.run_session(AgentSessionRequest(prompt="x", scope=ToolScope(root=wt), run_dir=run_dir, timeout_s=60))
    assert (out.status, out.error_class) == (OutcomeStatus.blocked, ErrorClass.policy_violation)  # the audit decides
    assert "exec_command (refused by codex)" in out.native_tool_calls
    assert out.audit is not None and out.audit.clean is False


@given(st.text())
def test_toml_string_round_trips_any_text(value):
    """What render_config writes as a TOML string reads back as exactly that text (DEL included)."""
    import tomllib

    from harnesscheck.backends.codex import toml_string

    assert tomllib.loads(f"k = {toml_string(value)}\n")["k"] == value
    assert tomllib.loads(f"k = {toml_string(value + chr(0x7F))}\n")["k"] == value + "\x7f"


def test_each_transient_reconnect_notice_is_announced_as_a_retry_event():
    notices = []
    parser = CodexParser(retry_stop_after=None)
    parser.retry_notice = lambda **fields: notices.append(fields)
    for line in (
        {"type": "thread.started", "thread_id": "t"},
        {"type": "turn.started"},
        {"type": "error", "message": "Reconnecting... 1/5 (unexpected status 429 Too Many Requests: retry-after: 7)"},
        {"type": "error", "message": "Reconnecting... 2/5 (unexpected status 529 <unknown status code>: Overloaded)"},
    ):
        parser.feed(json.dumps(line))
    assert notices == [{"attempt": 2, "wait_s": 7.0, "error_class": "rate_limit"}, {"attempt": 3, "wait_s": None, "error_class": "overloaded"}]
