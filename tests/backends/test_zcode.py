"""zcode transport (offline only, fixtures from references: zcode 0.16.9 shapes via the seed
implementation): the pure parser over every fixture (any chunking), its error codes, the
audit of its tool events (the seed's Glob blind spots), and sessions through the fake `zcode`
(argv, no stdin, scratch cwd, constructed env, model pin, bridge config, PROMPT.md fallback,
login link, a worktree and a host data dir that must not reach it)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from _replay import assert_no_canary, build, hostile_worktree, parent_env, run_parser
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harnesscheck.backends.audit import RunFacts, audit_events
from harnesscheck.backends.registry import get_spec
from harnesscheck.backends.zcode import (
    ATTACHED_PROMPT,
    DEFAULT_MODEL,
    DISALLOWED_TOOLS,
    MAX_ARGV_PROMPT_BYTES,
    ZcodeParser,
    ZcodeTransport,
    error_class,
    error_facts,
)
from harnesscheck.core.config import Settings
from harnesscheck.core.contracts import AgentSessionRequest, ErrorClass, ModelVerdict, OutcomeStatus
from harnesscheck.core.paths import fixtures_dir
from harnesscheck.core.scope import ToolScope
from harnesscheck.testing.fakes import install_fake_cli, load_fixture, with_worktree

SCENARIOS = sorted(p.stem for p in (fixtures_dir() / "zcode").glob("*.json"))
SMALL = [s for s in SCENARIOS if s != "oversize_line"]


def replay_outcome(scenario: str, model: str | None = None, cuts=None):
    return run_parser(ZcodeParser(requested_model=model), build("zcode", scenario, model), cuts)


def test_every_fixture_says_it_is_from_references_never_observed():
    for name in SCENARIOS:
        prov = json.loads((fixtures_dir() / "zcode" / f"{name}.json").read_text())["provenance"]
        assert prov["cli"] == "zcode" and prov["cli_version"] == "0.16.9" and prov["date"]
        assert prov["source"].startswith("reference:"), name
        assert prov["via"] == "zcode 0.16.9 shapes via the seed implementation", name


def test_matrix_cells_say_fixtures_from_references():
    from harnesscheck.kit.harness_adapter import offline_cli_version

    label = offline_cli_version(get_spec("zcode"))
    assert label == "fixtures from references (zcode 0.16.9 shapes via the seed implementation; never run here)"


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
        ("network_error", OutcomeStatus.error, ErrorClass.network),
        ("malformed_line", OutcomeStatus.ok, None),
        ("truncated_last_line", OutcomeStatus.error, ErrorClass.protocol),
        ("exit0_is_error", OutcomeStatus.error, ErrorClass.overloaded),
        ("crash_no_result", OutcomeStatus.error, ErrorClass.cli_crash),
        ("timeout_mid_stream", OutcomeStatus.truncated, ErrorClass.timeout),
        ("linger_after_result", OutcomeStatus.ok, None),
        ("unknown_events", OutcomeStatus.ok, None),
        ("oversize_line", OutcomeStatus.ok, None),  # 20 MiB is inside the default line bound
    ],
)
def test_classification(scenario, status, cls):
    out = replay_outcome(scenario)
    assert (out.status, out.error_class) == (status, cls), out.message


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
@pytest.mark.parametrize("scenario", SMALL)
def test_any_chunking_gives_the_same_outcome(scenario, data):
    replay = build("zcode", scenario)
    cuts = data.draw(st.lists(st.integers(0, len(replay.stdout)), max_size=40))
    whole = run_parser(ZcodeParser(), replay).model_dump()
    assert run_parser(ZcodeParser(), replay, cuts).model_dump() == whole


def test_text_usage_served_model_and_calls():
    out = replay_outcome("tool_calls", model="GLM-5.3-Flash")
    assert out.text == "The README says: # Project" and (out.usage.input, out.usage.output) == (50, 9)
    assert out.served_model == "GLM-5.3-Flash" and out.model_verdict is ModelVerdict.match
    assert out.tool_calls == 1 and out.tools_used == ["read_file"]  # scheduled + started: counted once


def test_partial_text_from_deltas_when_the_stream_stalls():
    out = replay_outcome("timeout_mid_stream")
    assert out.text == "Looking at the tree first." and not out.terminal_event_seen


def test_model_ids_are_matched_case_sensitively():
    assert replay_outcome("success", model="glm-5.3-flash").model_verdict is ModelVerdict.match  # {{model}} echoes it
    mismatch = replay_outcome("served_model_mismatch", model="GLM-5.3-Flash")
    assert mismatch.served_model == "GLM-4.5-Air" and mismatch.model_verdict is ModelVerdict.mismatch
    parser = ZcodeParser(requested_model="GLM-5.3-Flash")
    parser.feed(json.dumps({"type": "session.updated", "payload": {"modelId": "glm-5.3-flash"}}))
    parser.feed(json.dumps({"type": "result", "response": "x"}))
    assert parser.outcome(_ended(0)).model_verdict is ModelVerdict.mismatch


def _ended(code):
    from harnesscheck.contain.process import Ending, ProcessResult

    return ProcessResult(exit_code=code, signal=None, ending=Ending.exited, duration_s=0.1, stderr_tail="")


@pytest.mark.parametrize(
    ("event", "cls"),
    [
        ({"type": "turn.failed", "payload": {"error": {"code": 1302, "message": "too many concurrent requests"}}}, ErrorClass.rate_limit),
        ({"type": "error", "payload": {"message": "[1302] High concurrency"}}, ErrorClass.rate_limit),
        # a 429 whose text also reads like a login problem is still a rate limit, never auth
        ({"type": "request.failed", "payload": {"status": 429, "message": "unauthorized burst; please log in again"}}, ErrorClass.rate_limit),
        ({"type": "request.failed", "payload": {"status": 401, "message": "token expired"}}, ErrorClass.auth),
        ({"type": "turn.failed", "payload": {"error": {"status": 500}}}, ErrorClass.server_error),
        ({"type": "turn.failed", "payload": {}}, ErrorClass.unknown),
    ],
)
def test_error_codes(event, cls):
    assert error_class(*error_facts(event)[:3]) is cls
    parser = ZcodeParser()
    parser.feed(json.dumps(event))
    out = parser.outcome(_ended(0))  # even at exit 0: an error event is never success
    assert out.error_class is cls and out.status is not OutcomeStatus.ok


def test_rate_limit_is_retryable_with_the_clis_own_delay():
    parser = ZcodeParser()
    parser.feed(json.dumps({"type": "turn.failed", "payload": {"error": {"code": "1302", "retryAfterMs": 4500}}}))
    out = parser.outcome(_ended(1))
    assert (out.status, out.error_class, out.retryable, out.retry_after_s) == (OutcomeStatus.error, ErrorClass.rate_limit, True, 4.5)
    auth = ZcodeParser()
    auth.feed(json.dumps({"type": "error", "payload": {"status": 401, "retryAfter": 9}}))
    assert auth.outcome(_ended(1)).retry_after_s is None  # a delay means nothing for a final class


def test_a_later_result_with_an_answer_wins_over_a_retried_error():
    parser = ZcodeParser()
    parser.feed(json.dumps({"type": "request.failed", "payload": {"status": 429}}))
    parser.feed(json.dumps({"type": "result", "response": "done after the CLI's retry"}))
    assert parser.outcome(_ended(0)).ok


def test_exit_zero_without_a_result_is_never_success():
    parser = ZcodeParser()
    parser.feed(json.dumps({"type": "model.streaming", "payload": {"delta": "half", "kind": "delta"}}))
    out = parser.outcome(_ended(0))
    assert (out.status, out.error_class) == (OutcomeStatus.error, ErrorClass.protocol) and out.text == "half"


# -- the audit of zcode's tool events -----------------------------------------------------


def _audit(tmp_path, *payloads):
    root = tmp_path / "wt"
    (root / "src").mkdir(parents=True, exist_ok=True)
    cwd = tmp_path / "scratch"
    cwd.mkdir(exist_ok=True)
    lines = [json.dumps({"type": "tool.updated", "payload": {"toolCallId": str(i), "kind": "scheduled", **p}}) for i, p in enumerate(payloads)]
    return audit_events(lines, "zcode", RunFacts(scope_root=root, session_cwd=cwd, builtin_tools_off=False)), root


@pytest.mark.parametrize(
    "args",
    [
        {"toolName": "Glob", "input": {"pattern": "{/etc,src}/*"}},
        {"toolName": "Glob", "input": {"pattern": "**/../../etc/*"}},
        {"toolName": "Read", "input": {"file_path": "~/.ssh/id_rsa"}},
        {"toolName": "Grep", "input": {"pattern": "key", "glob": "/etc/**"}},
    ],
)
def test_the_seeds_blind_spots_are_flagged(tmp_path, args):
    """review §3.4: each passed the seed's zcode audit with no violation."""
    verdict, _ = _audit(tmp_path, args)
    assert not verdict.clean and "native_file_outside_scope" in {f.code for f in verdict.flags}


def test_a_glob_pattern_is_bound_relative_to_its_path(tmp_path):
    root = tmp_path / "wt"
    inside, _ = _audit(tmp_path, {"toolName": "Glob", "input": {"path": str(root), "pattern": "src/*.py"}})
    assert inside.clean, inside.flags
    climbs, _ = _audit(tmp_path, {"toolName": "Glob", "input": {"path": str(root / "src"), "pattern": "../../*"}})
    assert not climbs.clean


def test_tool_kinds_and_servers(tmp_path):
    verdict, _ = _audit(
        tmp_path,
        {"toolName": "mcp__bridge__read_file", "input": {"path": "README.md"}},
        {"toolName": "mcp__web_reader__webReader", "input": {"url": "http://127.0.0.1:9/"}},
        {"toolName": "Bash", "input": {"command": "cat /etc/passwd"}},
        {"toolName": "Write", "input": {"file_path": "x"}},
        {"toolName": "BrandNewTool", "input": {}},
    )
    codes = {f.code for f in verdict.flags}
    assert {"foreign_mcp_tool", "native_shell", "write_in_read_only", "unknown_native_tool"} <= codes
    assert "native_file_outside_scope" in codes  # /etc/passwd named by the shell command


def test_drift_is_flagged_not_ignored(tmp_path):
    lines = [json.dumps({"type": "tool.updated", "payload": {"kind": "scheduled"}}), json.dumps({"type": "tool.invoked", "payload": {"toolName": "Bash"}})]
    verdict = audit_events(lines, "zcode", RunFacts(scope_root=tmp_path, builtin_tools_off=False))
    assert [f.code for f in verdict.flags] == ["unknown_tool_event", "unknown_tool_event"]


def test_every_native_built_in_is_denied_by_name():
    from harnesscheck.backends.zcode.audit import (
        _ZCODE_OTHER_NATIVE,
        _ZCODE_READ_TOOLS,
        _ZCODE_SHELL_TOOLS,
        _ZCODE_WRITE_TOOLS,
    )

    known = _ZCODE_READ_TOOLS | _ZCODE_WRITE_TOOLS | _ZCODE_SHELL_TOOLS | _ZCODE_OTHER_NATIVE
    assert known <= set(DISALLOWED_TOOLS)


# -- sessions through the fake zcode ------------------------------------------------------


def session(tmp_path, scenario, *, prompt="hi", timeout_s=60.0, model=None, system=None, env=None):
    wt = hostile_worktree(tmp_path)
    fake = install_fake_cli("zcode", with_worktree(load_fixture("zcode", scenario), wt), tmp_path / "bin")
    transport = ZcodeTransport(
        get_spec("zcode"),
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


def test_session_argv_env_cwd_no_stdin(tmp_path):
    out, fake, wt = session(tmp_path, "success", system="CONTRACT-TEXT")
    assert out.ok and out.text == "Hi. What would you like to work on?" and out.backend == "zcode"
    rec = fake.last()
    argv = rec["argv"][1:]
    assert argv[0] == f"--prompt={ATTACHED_PROMPT}" and argv[1] == "--attach"  # the prompt is never on argv
    prompt = rec["attachments"][argv[2]]
    assert prompt.startswith("# Instructions\n\nCONTRACT-TEXT") and prompt.endswith("# Task\n\nhi")
    assert "CONTRACT-TEXT" not in " ".join(rec["argv"])
    assert argv[3:9] == ["--output-format", "stream-json", "--mode", "plan", "--cwd", rec["cwd"]]
    assert argv[9] == "--disallowed-tools=" + ",".join(DISALLOWED_TOOLS) and len(argv) == 10
    assert rec["stdin_type"] == "devnull"
    assert_no_canary(rec)
    run = (tmp_path / "run").resolve()
    assert not Path(rec["cwd"]).resolve().is_relative_to(wt.resolve())
    assert rec["env"]["HOME"] == str(run / "home")
    assert rec["env"]["ZCODE_DATA_BASE_DIR"] == str(run / "home" / ".zcode")


def test_the_model_is_pinned_through_the_personal_provider_config(tmp_path):
    out, fake, _ = session(tmp_path / "a", "success", model="GLM-4.6")
    rec = fake.last()
    pin = json.loads(Path(rec["env"]["ZCODE_PERSONAL_PROVIDER_CONFIG_FILE"]).read_text())
    chosen = pin["config"]["defaultModelSelection"]
    assert chosen["modelId"] == "GLM-4.6" and chosen["options"]["reasoningLevel"]
    assert out.served_model == "GLM-4.6" and out.model_verdict is ModelVerdict.match
    assert "--model" not in " ".join(rec["argv"])
    default, _, _ = session(tmp_path / "b", "success")
    assert default.requested_model == DEFAULT_MODEL and default.model_verdict is ModelVerdict.match


def test_the_bridge_is_the_only_mcp_server_and_memory_is_off(tmp_path):
    out, fake, wt = session(tmp_path, "tool_calls")
    rec = fake.last()
    config = json.loads((Path(rec["cwd"]) / ".zcode" / "config.json").read_text())
    assert config["features"] == {"memory": False} and config["memory"] == {"use": False}
    assert list(config["mcp"]["servers"]) == ["bridge"] and config["mcp"]["servers"]["bridge"]["type"] == "stdio"
    assert out.ok and out.tool_calls == 1 and out.tools_used == ["read_file"]


def test_a_huge_prompt_goes_into_prompt_md_and_attach(tmp_path):
    big = "x" * (MAX_ARGV_PROMPT_BYTES + 10)
    out, fake, _ = session(tmp_path, "success", prompt=big)
    rec = fake.last()
    assert sum(len(a) for a in rec["argv"]) < MAX_ARGV_PROMPT_BYTES
    path = rec["argv"][rec["argv"].index("--attach") + 1]
    assert Path(path).parent == Path(rec["cwd"]) and Path(path).name == "PROMPT.md"
    assert rec["attachments"][path].endswith(big) and out.ok


def test_prompt_md_is_private(tmp_path, monkeypatch):
    seen = {}
    real = ZcodeTransport.invocation

    def spy(self, ctx, request, cli, *, tool_less):
        inv = real(self, ctx, request, cli, tool_less=tool_less)
        seen["mode"] = stat.S_IMODE(os.stat(ctx.cwd / "PROMPT.md").st_mode)
        return inv

    monkeypatch.setattr(ZcodeTransport, "invocation", spy)
    session(tmp_path, "success", prompt="y" * (MAX_ARGV_PROMPT_BYTES + 1))
    assert seen["mode"] == 0o600


def test_login_file_is_linked_for_the_session_only(tmp_path):
    home = tmp_path / "home"
    env = parent_env(home)
    login = home / ".zcode" / "v2" / "credentials.json"
    login.parent.mkdir(parents=True)
    login.write_text('{"accessToken": "canary-zcode-login"}')
    out, fake, _ = session(tmp_path, "success", env=env)
    rec = fake.last()
    assert out.ok
    linked = Path(rec["env"]["ZCODE_DATA_BASE_DIR"]) / "v2" / "credentials.json"
    assert not linked.exists() and not linked.is_symlink()  # removed after the session
    assert login.read_text() == '{"accessToken": "canary-zcode-login"}'


def test_the_parents_data_dir_variable_names_the_login(tmp_path):
    from harnesscheck.backends.zcode import login_file

    data = tmp_path / "elsewhere"
    (data / "v2").mkdir(parents=True)
    (data / "v2" / "credentials.json").write_text("{}")
    assert login_file({"HOME": str(tmp_path), "ZCODE_DATA_BASE_DIR": str(data)}) == data / "v2" / "credentials.json"
    assert login_file({"HOME": str(tmp_path)}) is None


def test_host_zcode_config_never_reaches_the_cli(tmp_path):
    home = tmp_path / "home"
    env = parent_env(home)
    (home / ".zcode").mkdir(parents=True)
    (home / ".zcode" / "config.json").write_text('{"mcp": {"servers": {"canary-home": {"type": "stdio", "command": "/bin/false"}}}}')
    env["ZCODE_DATA_BASE_DIR"] = str(home / ".zcode")
    out, fake, _ = session(tmp_path, "tool_calls", env=env)
    rec = fake.last()
    assert out.ok and rec["env"]["ZCODE_DATA_BASE_DIR"] != str(home / ".zcode")
    assert "canary-home" not in json.dumps(rec)


#: Scenarios whose session outcome is not the stream's (HarnessTransport.judge).
SESSION_VERDICTS = {
    "mcp_failed": (OutcomeStatus.blocked, ErrorClass.mcp_unavailable),
    "native_tool_use": (OutcomeStatus.blocked, ErrorClass.policy_violation),
}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_fake_session_matches_the_replayed_outcome(tmp_path, scenario):
    out, _, _ = session(tmp_path, scenario, timeout_s=3.0 if scenario.startswith("timeout") else 60.0)
    want = replay_outcome(scenario, model=DEFAULT_MODEL)
    if scenario in SESSION_VERDICTS:
        want = want.model_copy(update=dict(zip(("status", "error_class"), SESSION_VERDICTS[scenario])))
    keys = ("status", "error_class", "text", "usage", "native_tool_calls", "terminal_event_seen", "served_model", "iterations", "tool_calls")
    assert {k: getattr(out, k) for k in keys} == {k: getattr(want, k) for k in keys}


def test_the_seeds_glob_escapes_block_the_session(tmp_path):
    """native_tool_use's Globs (the worktree as `path`, filled in as the kit does) climb out after
    a wildcard behind an in-worktree literal prefix: each is flagged for what it is."""
    out, _, _ = session(tmp_path, "native_tool_use")
    assert (out.status, out.error_class) == (OutcomeStatus.blocked, ErrorClass.policy_violation)
    details = " ".join(f.detail for f in out.audit.flags)
    assert "brace pattern" in details and "climbs with .." in details


@pytest.mark.parametrize("model", ["--yolo", "GLM,--x", "GLM 4", "a\nb"])
def test_smuggling_model_names_are_refused_before_spawn(tmp_path, model):
    from harnesscheck.core.contracts import ConfigError

    with pytest.raises(ConfigError):
        session(tmp_path, "success", model=model)
    assert not (tmp_path / "bin" / "zcode.record.jsonl").exists()
