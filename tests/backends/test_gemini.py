"""Gemini transport: the pure parser over every fixture (any chunking), error classification,
the settings.json and argv builders, and sessions through the fake `gemini` (argv, env, cwd,
stdin, the per-run HOME and its settings, the bridge, linger after result, timeouts)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _replay import assert_no_canary, build, hostile_worktree, parent_env, pids_alive, run_parser
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harnesscheck.backends.gemini import (
    BRIDGE_PREFIX,
    DEFAULT_MODEL,
    GeminiParser,
    GeminiTransport,
    check_model,
    classify_gemini,
    compose_prompt,
    render_settings,
)
from harnesscheck.backends.registry import get_spec
from harnesscheck.core.config import Settings
from harnesscheck.core.contracts import AgentSessionRequest, ConfigError, ErrorClass, ModelVerdict, OutcomeStatus
from harnesscheck.core.paths import fixtures_dir
from harnesscheck.core.scope import ToolScope
from harnesscheck.testing.fakes import install_fake_cli

SCENARIOS = sorted(p.stem for p in (fixtures_dir() / "gemini").glob("*.json"))
SMALL = [s for s in SCENARIOS if s != "oversize_line"]


def replay(scenario: str, model: str = DEFAULT_MODEL):
    """The fixture's bytes as the fake writes them (it fills `{{model}}` in keys too, as in
    `stats.models`; the shared replay helper fills values only)."""
    import dataclasses

    r = build("gemini", scenario, model)
    return dataclasses.replace(r, stdout=r.stdout.replace(b"{{model}}", model.encode()))


def replay_outcome(scenario: str, model: str = DEFAULT_MODEL, cuts=None):
    return run_parser(GeminiParser(requested_model=model), replay(scenario, model), cuts)


def test_every_fixture_has_provenance():
    for name in SCENARIOS:
        prov = json.loads((fixtures_dir() / "gemini" / f"{name}.json").read_text())["provenance"]
        assert prov["cli"] == "gemini" and prov["cli_version"] == "0.61.0" and prov["date"]
        assert prov["source"] in ("loopback-recording", "observed-here") or prov["source"].startswith("derived:"), name


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
@pytest.mark.parametrize("scenario", SMALL)
def test_any_chunking_gives_the_same_outcome(scenario, data):
    r = replay(scenario)
    cuts = data.draw(st.lists(st.integers(0, len(r.stdout)), max_size=30))
    whole = run_parser(GeminiParser(requested_model=DEFAULT_MODEL), r).model_dump()
    assert run_parser(GeminiParser(requested_model=DEFAULT_MODEL), r, cuts).model_dump() == whole


@pytest.mark.parametrize(
    ("scenario", "status", "cls"),
    [
        ("success", OutcomeStatus.ok, None),
        ("tool_calls", OutcomeStatus.ok, None),
        ("served_model_mismatch", OutcomeStatus.ok, None),
        ("not_logged_in", OutcomeStatus.blocked, ErrorClass.auth),
        ("auth_401", OutcomeStatus.blocked, ErrorClass.auth),
        ("usage_limit", OutcomeStatus.blocked, ErrorClass.quota),
        ("rate_limit_429", OutcomeStatus.error, ErrorClass.rate_limit),
        ("overloaded_529", OutcomeStatus.error, ErrorClass.overloaded),
        ("context_overflow", OutcomeStatus.error, ErrorClass.context_overflow),
        ("model_not_found", OutcomeStatus.error, ErrorClass.model_unavailable),
        ("exit0_is_error", OutcomeStatus.error, ErrorClass.unknown),
        ("crash_no_result", OutcomeStatus.error, ErrorClass.cli_crash),
        ("truncated_last_line", OutcomeStatus.error, ErrorClass.protocol),
        ("timeout_mid_stream", OutcomeStatus.truncated, ErrorClass.timeout),
        ("unknown_events", OutcomeStatus.ok, None),
        ("malformed_line", OutcomeStatus.ok, None),
    ],
)
def test_classification(scenario, status, cls):
    o = replay_outcome(scenario)
    assert (o.status, o.error_class) == (status, cls), o.message
    assert o.retryable == (cls in (ErrorClass.rate_limit, ErrorClass.overloaded, ErrorClass.cli_crash, ErrorClass.timeout))


def test_answer_usage_and_served_model_come_from_the_result():
    o = replay_outcome("success")
    assert o.text == "The answer is 42."
    assert (o.usage.input, o.usage.output, o.usage.cache_read) == (120, 30, 7)  # `input` is the uncached part
    assert o.served_model == DEFAULT_MODEL and o.model_verdict is ModelVerdict.match
    assert o.terminal_event_seen and o.session_id


def test_the_served_model_is_the_stats_models_key():
    o = replay_outcome("served_model_mismatch")
    assert o.served_model == "loopback-other-model" and o.model_verdict is ModelVerdict.mismatch


def test_tool_calls_count_bridge_calls_and_keep_the_final_answer():
    o = replay_outcome("tool_calls")
    assert o.tool_calls == 1 and o.tools_used == ["read_file"] and not o.native_tool_calls
    assert o.text == "README greets you."  # the answer after the last tool call


def test_a_native_call_is_recorded_for_the_audit():
    o = replay_outcome("native_tool_use")
    assert o.native_tool_calls == ["run_shell_command"] and o.tool_calls == 0


def test_a_failed_session_keeps_all_the_text():
    o = replay_outcome("timeout_mid_stream")
    assert "Reading the files first." in o.text and o.cost.partial


def test_exit_zero_without_a_result_is_never_success():
    p = GeminiParser(requested_model="m")
    for line in replay("truncated_last_line", "m").stdout.decode().splitlines():
        p.feed(line)
    from harnesscheck.contain.process import Ending, ProcessResult

    o = p.outcome(ProcessResult(exit_code=0, signal=None, ending=Ending.exited, duration_s=1.0, stderr_tail=""))
    assert o.status is OutcomeStatus.error and o.error_class is ErrorClass.protocol and not o.terminal_event_seen


@pytest.mark.parametrize(
    ("etype", "message", "cls"),
    [
        ("FatalAuthenticationError", "anything", ErrorClass.auth),
        ("FatalTurnLimitedError", "Reached max session turns", ErrorClass.max_turns),
        ("unknown", '[API Error: {"error":{"code":401,"message":"x","status":"UNAUTHENTICATED"}}]', ErrorClass.auth),
        ("unknown", '{"code":403,"status":"PERMISSION_DENIED"}', ErrorClass.auth),
        ("unknown", '{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED"}', ErrorClass.rate_limit),
        ("unknown", '{"code":429,"message":"You exceeded your current quota","status":"RESOURCE_EXHAUSTED"}', ErrorClass.quota),
        ("unknown", '{"code":503,"status":"UNAVAILABLE"}', ErrorClass.overloaded),
        ("unknown", '{"code":500,"status":"INTERNAL"}', ErrorClass.server_error),
        ("unknown", "models/x is not found for API version v1beta (NOT_FOUND)", ErrorClass.model_unavailable),
        (None, "When using Gemini API, you must specify the GEMINI_API_KEY environment variable.", ErrorClass.auth),
        (None, "The input token count (5) exceeds the maximum number of tokens allowed (4).", ErrorClass.context_overflow),
        (None, "something else entirely", None),
    ],
)
def test_error_classification_structured_first(etype, message, cls):
    assert classify_gemini(etype, message) is cls


def test_settings_remove_every_builtin_and_trust_only_the_bridge():
    s = render_settings((["/py", "-m", "bridge"], {"A": "1"}), ("read_file", "grep"))
    assert s["security"]["auth"]["selectedType"] == "gemini-api-key"
    assert s["privacy"]["usageStatisticsEnabled"] is False
    assert s["general"]["enableAutoUpdate"] is False and s["general"]["enableAutoUpdateNotification"] is False
    assert s["general"]["maxAttempts"] == 1
    assert s["tools"]["core"] == [f"{BRIDGE_PREFIX}read_file", f"{BRIDGE_PREFIX}grep"]  # no built-in named
    assert s["mcp"]["allowed"] == ["bridge"] and list(s["mcpServers"]) == ["bridge"]
    server = s["mcpServers"]["bridge"]
    assert server["command"] == "/py" and server["args"] == ["-m", "bridge"] and server["trust"] is True
    assert server["env"] == {"A": "1"}
    one_shot = render_settings(None, ())
    assert "mcpServers" not in one_shot and one_shot["mcp"]["allowed"] == []
    assert one_shot["tools"]["core"] and not any(t.startswith("mcp_") for t in one_shot["tools"]["core"])


@pytest.mark.parametrize("model", ["auto", "AUTO", "-m", "a b", "x,y", ""])
def test_router_and_smuggling_models_are_refused(model):
    with pytest.raises(ConfigError):
        check_model(model)


def test_prompt_composition_puts_the_contract_first():
    text = compose_prompt("CONTRACT", "task", ("read_file",))
    assert text.startswith("# Instructions\n\nCONTRACT") and text.endswith("# Task\n\ntask")
    assert "mcp_bridge_read_file" in text
    assert compose_prompt(None, "task", ()) == "task"


# ---------------------------------------------------------------------------------------
# Sessions through the fake gemini


def session(tmp_path, scenario, *, prompt="hi", timeout_s=30.0, model=None, system=None, env=None, **kwargs):
    wt = hostile_worktree(tmp_path)
    (wt / ".gemini").mkdir()
    (wt / ".gemini" / "settings.json").write_text('{"mcpServers":{"canary-worktree":{"command":"/bin/false"}}}')
    (wt / "GEMINI.md").write_text("CANARY-GEMINI-INSTRUCTION\n")
    fake = install_fake_cli("gemini", scenario, tmp_path / "bin")
    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True, exist_ok=True)
    (home / ".gemini" / "settings.json").write_text('{"mcpServers":{"canary-home":{"command":"/bin/false"}}}')
    transport = GeminiTransport(
        get_spec("gemini"),
        Settings(),
        cli_path=fake.path,
        parent_env=env or {**parent_env(home), "GEMINI_API_KEY": "canary-host-gemini"},
        linger_s=0.5,
        term_grace_s=1.0,
        **kwargs,
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
    out, fake, wt = session(tmp_path, "success", system="CONTRACT-TEXT", model="gemini-loop-1")
    assert out.ok, out.message
    assert out.text == "The answer is 42." and out.backend == "gemini" and out.served_model == "gemini-loop-1"
    rec = fake.last()
    argv = rec["argv"][1:]
    assert argv == ["-p", "", "-o", "stream-json", "--skip-trust", "-m", "gemini-loop-1"]
    assert rec["stdin"].startswith("# Instructions\n\nCONTRACT-TEXT") and rec["stdin"].endswith("# Task\n\nhi")
    assert rec["stdin_eof_mono"] is not None
    assert_no_canary(rec)
    assert "GEMINI_API_KEY" not in rec["env"] and "canary-host-gemini" not in json.dumps(rec)
    assert not Path(rec["cwd"]).resolve().is_relative_to(wt.resolve())
    home = Path(rec["env"]["HOME"])
    assert home.is_relative_to((tmp_path / "run").resolve())
    settings_files = [p for p in rec["mcp_configs"] if p.endswith("settings.json")]
    assert settings_files == [str(home / ".gemini" / "settings.json")]  # not the user's, not the worktree's
    written = json.loads(rec["mcp_configs"][settings_files[0]])
    assert list(written["mcpServers"]) == ["bridge"] and "canary" not in json.dumps(written)


def test_stdout_is_a_spooled_file_left_nowhere(tmp_path):
    """Issue #21: gemini ends with process.exit(), which drops the writes node still queued for a
    full pipe; its stdout is a file in the run dir (unlinked at once), which node writes synchronously."""
    out, fake, _ = session(tmp_path, "success")
    assert out.ok, out.message
    assert fake.last()["stdout_type"] == "file"
    assert not [p for p in (tmp_path / "run").rglob(".stdout-*")], "the spool file was left behind"


def test_no_model_means_the_default_never_auto(tmp_path):
    out, fake, _ = session(tmp_path, "success")
    assert out.ok and fake.last()["argv"][-1] == DEFAULT_MODEL


def test_the_api_key_is_injected_only_when_handed_over(tmp_path):
    out, fake, _ = session(tmp_path, "success", api_key="explicit-test-key-123")
    assert out.ok and fake.last()["env"]["GEMINI_API_KEY"] == "explicit-test-key-123"
    assert "explicit-test-key-123" not in json.dumps(fake.last()["argv"])


def test_without_skip_trust_the_fake_says_so_and_the_session_is_not_ok(tmp_path):
    import tests_mutants_import  # noqa: F401  (puts the checkout on sys.path for `tests.mutants`)

    from tests.mutants.gemini import ForgetsSkipTrust

    fake = install_fake_cli("gemini", "success", tmp_path / "bin")
    wt = tmp_path / "wt"
    wt.mkdir()
    t = ForgetsSkipTrust(get_spec("gemini"), Settings(), cli_path=fake.path, parent_env=parent_env(tmp_path / "home"))
    out = t.run_session(AgentSessionRequest(prompt="hi", scope=ToolScope(root=wt), timeout_s=20, run_dir=tmp_path / "run"))
    assert not out.ok and "trusted directory" in out.stderr_tail


def test_linger_after_result_outcome_from_event_and_tree_gone(tmp_path):
    out, fake, _ = session(tmp_path, "linger_after_result")
    assert out.ok and out.text == "Finished." and out.terminal_event_seen
    assert not pids_alive([fake.last()["pid"]])


def test_timeout_truncates_with_partial_text_and_no_survivors(tmp_path):
    out, fake, _ = session(tmp_path, "timeout_mid_stream", timeout_s=4.0)
    assert out.status is OutcomeStatus.truncated and out.error_class is ErrorClass.timeout
    assert "Reading the files first." in out.text
    assert not pids_alive([fake.last()["pid"]])


def test_a_session_whose_bridge_never_listed_its_tools_is_blocked(tmp_path):
    out, _, _ = session(tmp_path, "mcp_failed")
    assert out.status is OutcomeStatus.blocked and out.error_class is ErrorClass.mcp_unavailable


def test_bridge_calls_through_the_real_bridge(tmp_path):
    out, fake, wt = session(tmp_path, "mcp_slow")
    assert out.ok and out.tool_calls == 1 and out.tools_used == ["read_file"]
    assert out.audit is not None and out.audit.clean, out.audit


def test_auth_failure_blocks_and_is_not_retried(tmp_path):
    out, _, _ = session(tmp_path, "auth_401")
    assert out.status is OutcomeStatus.blocked and out.error_class is ErrorClass.auth and not out.retryable


def test_one_shot_is_tool_less(tmp_path):
    fake = install_fake_cli("gemini", "success", tmp_path / "bin")
    t = GeminiTransport(get_spec("gemini"), Settings(), cli_path=fake.path, parent_env=parent_env(tmp_path / "home"))
    out = t.complete("hello")
    assert out.ok and out.text == "The answer is 42."
    written = json.loads(next(v for k, v in fake.last()["mcp_configs"].items() if k.endswith("settings.json")))
    assert "mcpServers" not in written and written["mcp"]["allowed"] == []


def test_the_clis_loop_detection_is_a_turn_cap_not_success():
    """Observed at loopback (0.61.0): a model that repeats a bridge call is stopped by the CLI
    with a warning and a success result without an answer."""
    from harnesscheck.contain.process import Ending, ProcessResult

    p = GeminiParser(requested_model="m")
    lines = [
        {"type": "init", "session_id": "s", "model": "m"},
        {"type": "tool_use", "tool_name": "mcp_bridge_read_file", "tool_id": "t1", "parameters": {"path": "a"}},
        {"type": "tool_result", "tool_id": "t1", "status": "success", "output": "x"},
        {"type": "error", "severity": "warning", "message": "Loop detected, stopping execution"},
        {
            "type": "result",
            "status": "success",
            "stats": {"input_tokens": 4, "output_tokens": 2, "input": 4, "models": {"m": {"input_tokens": 4, "output_tokens": 2}}},
        },
    ]
    for ev in lines:
        p.feed(json.dumps(ev))
    o = p.outcome(ProcessResult(exit_code=0, signal=None, ending=Ending.exited, duration_s=1.0, stderr_tail=""))
    assert (o.status, o.error_class) == (OutcomeStatus.truncated, ErrorClass.max_turns) and "Loop detected" in o.message
