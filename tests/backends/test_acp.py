"""The ACP backend (backends/acp/): profiles as data, the error table, the session state machine
without a process, and sessions through the fake ACP agent (fake_clis/acp-agent): the handshake,
the permission answer, fs/* through dispatch, terminal/* refused, cancel and the deadline,
the auth silence bound, the private env; and process.StdinFeed under run_process."""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

import pytest

from harnesscheck.backends.acp import (
    AcpEvidence,
    AcpSession,
    AcpTransport,
    adhoc_profile,
    builtin_profile,
    load_profile,
)
from harnesscheck.backends.acp.errors import classify_error
from harnesscheck.backends.acp.profile import ErrorRule, profile_for
from harnesscheck.backends.registry import get_spec
from harnesscheck.contain.process import LineAction, StdinFeed, run_process
from harnesscheck.core.config import Settings
from harnesscheck.core.contracts import AgentSessionRequest, ConfigError, ErrorClass, OutcomeStatus
from harnesscheck.core.scope import ToolScope

PROFILES = Path(__file__).resolve().parents[2] / "src" / "harnesscheck" / "backends" / "acp" / "profiles"


# -- profiles -----------------------------------------------------------------------------------


def test_every_shipped_profile_loads():
    names = sorted(p.stem for p in PROFILES.glob("*.toml"))
    assert "fake" in names
    for name in names:
        assert builtin_profile(name).command


def test_adhoc_profile_defaults_to_anthropic_messages_and_takes_a_wire_option():
    p = adhoc_profile("my-agent --acp")
    assert p.command == ["my-agent", "--acp"] and p.wire == "anthropic_messages"
    assert p.env == {"ANTHROPIC_BASE_URL": "{base_url}", "ANTHROPIC_API_KEY": "{key}"}
    p = adhoc_profile("--hc-wire=responses npx agent")
    assert p.command == ["npx", "agent"] and p.env["OPENAI_API_KEY"] == "{key}" and p.env["OPENAI_BASE_URL"].endswith("/v1")
    with pytest.raises(ConfigError):
        adhoc_profile("--hc-wire=carrier-pigeon agent")
    with pytest.raises(ConfigError):
        adhoc_profile("")


def test_a_profile_file_is_validated_and_named_in_errors(tmp_path):
    good = tmp_path / "agent.toml"
    good.write_text(
        'name = "a"\ncommand = ["a", "--acp"]\n[mode]\nmode_id = "default"\n'
        '[[errors]]\nerror_class = "auth"\ndata_key = "errorName"\ndata_value = "AuthError"\n'
    )
    p = profile_for(f"acp:{good}")
    assert p.mode.mode_id == "default" and p.errors[0].error_class is ErrorClass.auth
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "a"\ncommand = []\n')
    with pytest.raises(ConfigError, match="command"):
        load_profile(bad)
    bad.write_text('name = "a"\ncommand = ["a"]\nunknown_key = 1\n')
    with pytest.raises(ConfigError, match="unknown_key"):
        load_profile(bad)


def test_acp_ids_resolve_in_the_registry():
    assert get_spec("acp-fake").factory.endswith(":AcpTransport")
    spec = get_spec("acp:some-agent --acp")
    assert spec.id == "acp:some-agent --acp" and spec.factory.endswith(":AcpTransport")
    assert get_spec("acp-gemini").label == "ACP agent gemini", "a shipped profile is an id of its own"


def test_complete_is_a_tool_less_session(tmp_path):
    t = _transport(tmp_path, [{"say": "one-shot"}])
    o = t.complete("hi", timeout_s=30)
    assert o.status is OutcomeStatus.ok and o.text == "one-shot"
    session = next(r for r in _records(tmp_path) if r["kind"] == "session")
    assert session["mcp_servers"] == [], "a one-shot offers the agent no MCP server"


# -- errors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "error, expected",
    [
        ({"code": -32000, "message": "Authentication required"}, ErrorClass.auth),
        ({"code": 401, "message": '{"error":{"code":401}}'}, ErrorClass.auth),
        ({"code": 403, "message": "forbidden"}, ErrorClass.auth),
        ({"code": 429, "message": "slow down"}, ErrorClass.rate_limit),
        ({"code": 400, "message": "input token count exceeds the maximum"}, ErrorClass.context_overflow),
        ({"code": 529, "message": "overloaded"}, ErrorClass.overloaded),
        ({"code": 500, "message": "boom"}, ErrorClass.server_error),
        ({"code": -32603, "message": "Internal error: invalid x-api-key", "data": {"errorName": "APIError"}}, ErrorClass.auth),
        ({"code": -32603, "message": "Internal error"}, ErrorClass.unknown),
    ],
)
def test_generic_error_rules(error, expected):
    assert classify_error(error, []) is expected


def test_the_profile_table_decides_first():
    rules = [
        ErrorRule(error_class=ErrorClass.rate_limit, data_key="codex_error_info", data_value="response_too_many_failed_attempts"),
        ErrorRule(error_class=ErrorClass.context_overflow, data_key="errorName", data_value="ContextOverflowError"),
    ]
    codex = {"code": -32603, "message": "Internal error", "data": {"codex_error_info": {"response_too_many_failed_attempts": {"http_status_code": 429}}}}
    assert classify_error(codex, rules) is ErrorClass.rate_limit
    opencode = {"code": -32603, "message": "Session too large", "data": {"errorName": "ContextOverflowError"}}
    assert classify_error(opencode, rules) is ErrorClass.context_overflow


# -- the session without a process --------------------------------------------------------------------


class _Feed:
    def __init__(self):
        self.sent: list[dict] = []
        self.closed = False

    def write(self, data: bytes) -> bool:
        for line in data.decode().splitlines():
            self.sent.append(json.loads(line))
        return True

    def close(self):
        self.closed = True

    def dispose(self):
        pass


def _session(tmp_path, **kw):
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.txt").write_text("one\ntwo\nthree\n")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    feed = _Feed()
    session = AcpSession(
        profile=builtin_profile("fake"),
        feed=feed,
        cwd=cwd,
        prompt="hi",
        scope=ToolScope(name="t", root=root, read_only=False),
        bridge=(["/bin/bridge", "x"], {"A": "1"}),
        wire_log=None,
        **kw,
    )
    return session, feed, cwd, root


def _agent(session, msg):
    return session.feed(json.dumps({"jsonrpc": "2.0", **msg}))


def test_handshake_order_and_what_the_host_offers(tmp_path):
    session, feed, cwd, _ = _session(tmp_path)
    session.start()
    init = feed.sent[-1]
    assert init["method"] == "initialize" and init["params"]["protocolVersion"] == 1
    caps = init["params"]["clientCapabilities"]
    assert caps["fs"] == {"readTextFile": True, "writeTextFile": True} and caps["terminal"] is False
    _agent(session, {"id": init["id"], "result": {"protocolVersion": 1, "agentCapabilities": {}}})
    new = feed.sent[-1]
    assert new["method"] == "session/new" and new["params"]["cwd"] == str(cwd)
    assert new["params"]["mcpServers"] == [{"name": "bridge", "command": "/bin/bridge", "args": ["x"], "env": [{"name": "A", "value": "1"}]}]
    _agent(session, {"id": new["id"], "result": {"sessionId": "s1", "modes": {"currentModeId": "auto", "availableModes": []}}})
    mode = feed.sent[-1]
    assert mode["method"] == "session/set_mode" and mode["params"] == {"sessionId": "s1", "modeId": "ask"}
    _agent(session, {"id": mode["id"], "result": {}})
    prompt = feed.sent[-1]
    assert prompt["method"] == "session/prompt" and prompt["params"]["prompt"] == [{"type": "text", "text": "hi"}]
    assert _agent(session, {"id": prompt["id"], "result": {"stopReason": "end_turn"}}) is LineAction.TERMINAL
    assert feed.closed, "stdin is closed once the prompt is answered"


def test_another_protocol_version_is_refused(tmp_path):
    session, feed, _, _ = _session(tmp_path)
    session.start()
    assert _agent(session, {"id": feed.sent[-1]["id"], "result": {"protocolVersion": 2}}) is LineAction.TERMINAL
    assert "protocolVersion" in session.ev.setup_error["message"] and feed.closed


def test_permission_policy_bridge_allowed_everything_else_rejected(tmp_path):
    session, feed, _, _ = _session(tmp_path)
    opts = [
        {"optionId": "y", "name": "Yes", "kind": "allow_once"},
        {"optionId": "ya", "name": "Always", "kind": "allow_always"},
        {"optionId": "n", "name": "No", "kind": "reject_once"},
    ]
    ask = lambda title, options=opts: _agent(
        session,
        {
            "id": 7,
            "method": "session/request_permission",
            "params": {  # noqa: E731
                "sessionId": "s1",
                "toolCall": {"toolCallId": "t", "title": title},
                "options": options,
            },
        },
    )
    ask("mcp__bridge__read_file")
    assert feed.sent[-1]["result"]["outcome"] == {"outcome": "selected", "optionId": "y"}
    ask("Bash")
    assert feed.sent[-1]["result"]["outcome"] == {"outcome": "selected", "optionId": "n"}
    ask("mcp__evil__read_file")
    assert feed.sent[-1]["result"]["outcome"]["optionId"] == "n"
    ask("mcp__bridge__read_file", [{"optionId": "x", "name": "?", "kind": "allow_always"}])
    assert feed.sent[-1]["result"]["outcome"] == {"outcome": "cancelled"}, "no allow_once, no reject option: cancelled"
    ask("Bash", [])
    assert feed.sent[-1]["result"]["outcome"] == {"outcome": "cancelled"}


def test_the_host_policy_answers_for_the_agents_own_tools_only_by_an_explicit_rule_or_approval(tmp_path):
    """doc/SPEC-acp.md: an agent's own tool runs outside the choke point, so a kind's default
    never allows it; an allow rule naming it does, and so does the host's approver for an
    approval_required rule. The bridge's tools stay allowed (the bridge applies the policy)."""
    from harnesscheck.core.policy import Policy, PolicyEngine, Rule, ToolKind, Verdict

    asked = []
    policy = Policy(rules=(Rule(decision=Verdict.ALLOW, tools=("Read",)), Rule(decision=Verdict.APPROVAL_REQUIRED, kinds=(ToolKind.EXECUTE,))))
    engine = PolicyEngine(policy, root=tmp_path, session="s1", approver=lambda r: asked.append(r.tool) or r.tool == "Bash")
    session, feed, _, _ = _session(tmp_path, engine=engine)
    opts = [{"optionId": "y", "name": "Yes", "kind": "allow_once"}, {"optionId": "n", "name": "No", "kind": "reject_once"}]

    def answer(title, kind):
        _agent(
            session,
            {
                "id": 7,
                "method": "session/request_permission",
                "params": {"sessionId": "s1", "toolCall": {"toolCallId": "t", "title": title, "kind": kind}, "options": opts},
            },
        )
        return feed.sent[-1]["result"]["outcome"]["optionId"]

    assert answer("Read", "read") == "y", "an explicit allow rule allows the agent's own tool"
    assert answer("Write", "edit") == "n", "the write kind's default (allow, for the host's scoped tools) never allows a built-in"
    assert answer("Bash", "execute") == "y" and answer("Exec", "execute") == "n" and asked == ["Bash", "Exec"]
    assert answer("mcp__bridge__write_file", "edit") == "y", "a bridge tool: the bridge decides"


def test_fs_is_served_through_dispatch_under_the_cwd_only(tmp_path):
    session, feed, cwd, root = _session(tmp_path)
    _agent(session, {"id": 1, "method": "fs/read_text_file", "params": {"sessionId": "s", "path": str(cwd / "a.txt"), "line": 2, "limit": 1}})
    assert feed.sent[-1]["result"] == {"content": "two\n"}
    _agent(session, {"id": 2, "method": "fs/read_text_file", "params": {"sessionId": "s", "path": "/etc/hostname"}})
    assert "error" in feed.sent[-1]
    _agent(session, {"id": 3, "method": "fs/read_text_file", "params": {"sessionId": "s", "path": str(cwd / "../root/a.txt")}})
    assert "error" in feed.sent[-1], "a .. path under the cwd is refused by dispatch"
    _agent(session, {"id": 4, "method": "fs/write_text_file", "params": {"sessionId": "s", "path": str(cwd / "b.txt"), "content": "new"}})
    assert feed.sent[-1]["result"] == {} and (root / "b.txt").read_text() == "new"
    _agent(session, {"id": 5, "method": "fs/read_text_file", "params": {"sessionId": "s", "path": str(cwd / "missing.txt")}})
    assert feed.sent[-1]["result"] == {"content": ""}, "a missing file reads empty (what writers pre-read)"


def test_terminal_and_unknown_methods_get_errors(tmp_path):
    session, feed, _, _ = _session(tmp_path)
    _agent(session, {"id": 9, "method": "terminal/create", "params": {"sessionId": "s", "command": "ls"}})
    assert feed.sent[-1]["error"]["code"] == -32601 and "terminal" in feed.sent[-1]["error"]["message"]
    _agent(session, {"id": 10, "method": "_x/anything", "params": {}})
    assert feed.sent[-1]["error"]["code"] == -32601
    assert session.ev.refused_methods == ["terminal/create", "_x/anything"]


def test_noise_is_counted_never_parsed(tmp_path):
    session, _, _, _ = _session(tmp_path)
    for line in ("[debug] hi", "{not json", '{"method": "x"}', "[]"):
        assert session.feed(line) is None
    assert len(session.ev.noise) == 4


# -- StdinFeed under run_process -----------------------------------------------------------------------


def test_stdin_feed_is_a_conversation(tmp_path):
    echo = "import sys\nfor line in sys.stdin:\n    print('got ' + line.strip(), flush=True)\nprint('eof', flush=True)\n"
    feed = StdinFeed()
    seen: list[str] = []

    def on_line(line):
        seen.append(line)
        if line == "got 1":
            feed.write(b"2\n")
        elif line == "got 2":
            feed.close()
        return LineAction.TERMINAL if line == "eof" else None

    feed.write(b"1\n")
    result = run_process([sys.executable, "-c", echo], env={"PATH": os.environ["PATH"]}, cwd=tmp_path, on_line=on_line, timeout_s=30, stdin_feed=feed)
    feed.dispose()
    assert seen == ["got 1", "got 2", "eof"] and result.exit_code == 0


# -- sessions through the fake agent -----------------------------------------------------------------


def _transport(tmp_path, steps, *defects, policy=None, **kw):
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({"steps": steps, "usage": {"inputTokens": 7, "outputTokens": 3}}))
    profile = builtin_profile("fake")
    extra = ["--scenario", str(scenario), "--record", str(tmp_path / "record.jsonl")]
    for d in defects:
        extra += ["--defect", d]
    profile = profile.model_copy(update={"command": [*profile.command, *extra], **kw})
    # the fake agent reads and writes host paths named on its command line and records host-judged
    # pids: it runs with the guards, as at the kit's offline level (doc/SPEC-sandbox.md)
    return AcpTransport(
        get_spec("acp-fake"),
        Settings(sandbox="off"),
        profile=profile,
        policy=policy,
        parent_env={**os.environ, "HC_TEST_CANARY": "canary-acp-1", "ANTHROPIC_API_KEY": "canary-acp-2"},
    )


def _request(tmp_path, timeout_s=30.0, read_only=False):
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    (root / "hello.txt").write_text("hello from the root\n")
    return AgentSessionRequest(prompt="go", scope=ToolScope(name="t", root=root, read_only=read_only), timeout_s=timeout_s, run_dir=tmp_path / "run")


def _records(tmp_path):
    return [json.loads(line) for line in (tmp_path / "record.jsonl").read_text().splitlines()]


def test_a_session_with_fs_bridge_and_usage(tmp_path):
    t = _transport(
        tmp_path,
        [
            {"say": "reading "},
            {"read": "hello.txt", "via": "fs"},
            {"mcp": "list_dir", "arguments": {"path": "."}},
            {"write": "out.txt", "content": "w", "via": "fs"},
            {"say": "done"},
        ],
    )
    ev = AcpEvidence()
    o = t.run_session(_request(tmp_path), evidence=ev)
    assert o.status is OutcomeStatus.ok and o.text == "reading done" and o.terminal_event_seen
    assert o.usage.input == 7 and o.usage.output == 3
    assert ("fs/read_text_file", "hello.txt", True) in ev.fs_calls
    assert not (tmp_path / "root" / "out.txt").exists(), "the fs write asked and was rejected (not a bridge tool)"
    assert "list_dir" in o.tools_used and "read_file" in o.tools_used
    env = next(r for r in _records(tmp_path) if r["kind"] == "invocation")["env"]
    assert "HC_TEST_CANARY" not in env and env.get("ANTHROPIC_API_KEY") in ("", None), "only what the profile injects"
    assert env["HOME"].startswith(str(tmp_path / "run")) and env["TMPDIR"].startswith(str(tmp_path / "run"))


def test_a_profiles_linger_applies_unless_the_host_chose_one():
    """An agent that never exits on stdin's EOF (gemini, codex-acp) gets its profile's short
    linger instead of the 2 s default waited out in every session; a linger the host chose
    (acp.exits-on-stdin-close withholds the kill 10 s this way) wins."""
    spec = get_spec("acp-gemini")
    assert builtin_profile("gemini").linger_s == 0.2 and builtin_profile("codex-acp").linger_s == 0.2
    assert AcpTransport(spec, Settings(), profile=builtin_profile("gemini")).linger_s == 0.2
    assert AcpTransport(spec, Settings(linger_s=10), profile=builtin_profile("gemini")).linger_s == 10
    assert AcpTransport(spec, Settings(), profile=builtin_profile("gemini"), linger_s=3.0).linger_s == 3.0
    assert AcpTransport(get_spec("acp-opencode"), Settings(), profile=builtin_profile("opencode")).linger_s == Settings().linger_s  # it exits
    # the host set the default's own value: its choice all the same, from the environment or in code
    chose_two = Settings.from_env({"HARNESS_BACKEND_LINGER_S": "2"})
    assert chose_two.linger_s == Settings().linger_s == 2.0
    assert AcpTransport(spec, chose_two, profile=builtin_profile("gemini")).linger_s == 2.0
    assert AcpTransport(spec, Settings(linger_s=2.0), profile=builtin_profile("gemini")).linger_s == 2.0
    assert AcpTransport(spec, Settings.from_env({}), profile=builtin_profile("gemini")).linger_s == 0.2


def test_the_policys_turns_limit_stops_the_turn_past_it(tmp_path):
    """An ACP agent's session/update stream shows its model turns (a chunk or a tool call is
    output, a completed tool call its result): the turn past the policy's limit is stopped and
    the session ends truncated/budget (doc/SPEC-policy.md); a limit the session fits is no stop."""
    from harnesscheck.core.policy import Limits, Policy

    steps = [{"mcp": "read_file", "arguments": {"path": "hello.txt"}}, {"say": "read it"}, {"mcp": "list_dir", "arguments": {"path": "."}}, {"say": "done"}]

    def run(turns, name):
        base = tmp_path / name
        base.mkdir()
        request = _request(base).model_copy(update={"policy": Policy(limits=Limits(turns=turns))})
        return _transport(base, steps).run_session(request)

    stopped = run(1, "one")
    assert (stopped.status, stopped.error_class) == (OutcomeStatus.truncated, ErrorClass.budget), stopped.message
    assert "turns limit (1)" in stopped.message and "list_dir" not in stopped.tools_used, "turn 2's call never ran"
    fits = run(3, "three")  # tool call | text + tool call | text: three model turns
    assert fits.status is OutcomeStatus.ok and fits.text == "read itdone", fits.message


def test_host_cancel_sends_session_cancel_then_ends(tmp_path):
    t = _transport(tmp_path, [{"say": "working"}, {"hang": True}])
    cancel = threading.Event()
    ev = AcpEvidence()
    # cancelled once the agent's first text arrived (the prompt is out), not after a fixed 0.5 s:
    # a loaded machine may not have sent the prompt by then, and a cancel before it sends none
    o = t.run_session(_request(tmp_path), cancel=cancel, on_text=lambda _t: cancel.set(), evidence=ev)
    assert o.status is OutcomeStatus.cancelled and ev.cancel_reason == "host" and ev.stop_reason == "cancelled"
    assert o.text == "working"


def _spoke_then_hit_the_deadline(tmp_path, *defects, **kw):
    """A session that says "partial", then hangs to its deadline: 1 s, or, where the machine was
    too loaded for the agent to say anything in that second (nothing to keep, nothing judged),
    once more with 10 s. (outcome, evidence)."""
    for attempt, timeout_s in enumerate((1.0, 10.0)):
        where = tmp_path / f"attempt-{attempt}"
        where.mkdir()
        t = _transport(where, [{"say": "partial"}, {"hang": True}], *defects, **kw)
        ev, spoke = AcpEvidence(), []
        o = t.run_session(_request(where, timeout_s=timeout_s), on_text=spoke.append, evidence=ev)
        if spoke:
            break
    return o, ev


def test_the_deadline_cancels_then_truncates(tmp_path):
    o, ev = _spoke_then_hit_the_deadline(tmp_path)
    assert (o.status, o.error_class) == (OutcomeStatus.truncated, ErrorClass.timeout)
    assert ev.cancel_reason == "deadline" and o.text == "partial"


def test_an_agent_that_ignores_cancel_is_ended_after_the_bound(tmp_path):
    o, ev = _spoke_then_hit_the_deadline(tmp_path, "ignores-cancel", "ignores-eof", cancel_bound_s=0.5)
    assert (o.status, o.error_class) == (OutcomeStatus.truncated, ErrorClass.timeout)
    assert ev.cancel_sent_at is not None and ev.stop_reason is None and o.text == "partial"
    assert o.duration_s < 15


def test_auth_silence_is_ended_typed(tmp_path):
    t = _transport(tmp_path, [{"auth_signal": True}, {"error": {"code": -32000, "message": "Authentication required"}}], "auth-retry-forever", auth_stall_s=0.5)
    ev = AcpEvidence()
    o = t.run_session(_request(tmp_path, timeout_s=30), evidence=ev)
    assert (o.status, o.error_class) == (OutcomeStatus.blocked, ErrorClass.auth) and ev.auth_stalled
    assert o.duration_s < 15


def test_errors_and_stop_reasons_map(tmp_path):
    t = _transport(tmp_path, [{"error": {"code": -32603, "message": "Internal error: Prompt is too long", "data": {"errorKind": "invalid_request"}}}])
    o = t.run_session(_request(tmp_path))
    assert (o.status, o.error_class) == (OutcomeStatus.error, ErrorClass.context_overflow)
    t = _transport(tmp_path, [{"stop": "max_turn_requests"}])
    o = t.run_session(_request(tmp_path))
    assert (o.status, o.error_class) == (OutcomeStatus.truncated, ErrorClass.max_turns)
    t = _transport(tmp_path, [{"stop": "refusal"}])
    o = t.run_session(_request(tmp_path))
    assert (o.status, o.error_class) == (OutcomeStatus.error, ErrorClass.policy_violation)


def test_a_missing_agent_is_cli_not_found(tmp_path):
    from harnesscheck.core.contracts import CliNotFound

    t = AcpTransport(get_spec("acp-fake"), Settings(), profile=adhoc_profile("no-such-acp-agent-here --acp"), parent_env={"PATH": str(tmp_path)})
    with pytest.raises(CliNotFound):
        t.run_session(_request(tmp_path))


def test_the_key_and_endpoint_come_from_harness_settings_only(tmp_path):
    from pydantic import SecretStr

    t = _transport(tmp_path, [{"say": "x"}])
    t.settings = Settings(acp_api_key=SecretStr("hc-acp-key-1"), sandbox="off")  # the fake agent, as in _transport
    t.__init__(t.spec, t.settings, profile=t.profile, parent_env=t.parent_env)
    o = t.run_session(_request(tmp_path))
    env = next(r for r in _records(tmp_path) if r["kind"] == "invocation")["env"]
    assert o.status is OutcomeStatus.ok and env["ANTHROPIC_API_KEY"] == "hc-acp-key-1"
    assert "ANTHROPIC_BASE_URL" not in env, "no endpoint given: the agent keeps its own"
    assert "hc-acp-key-1" not in o.model_dump_json()


def test_home_from_copies_files_and_links_directories_into_the_agents_home(tmp_path):
    """A profile's `home_from` (what an agent would otherwise fetch at start, e.g. opencode's
    plugin package): a file is copied under HOME, a directory linked there, both in place
    before the agent's first message; a missing source or a path out of HOME is a ConfigError."""
    source = tmp_path / "prefill"
    (source / "node_modules" / "pkg").mkdir(parents=True)
    (source / "package.json").write_text('{"dependencies": {"pkg": "1.0.0"}}')
    home_from = {".config/agent/package.json": str(source / "package.json"), ".config/agent/node_modules": str(source / "node_modules")}
    t = _transport(tmp_path, [{"say": "x"}], home_from=home_from)
    seen = {}

    def observer(direction, message, evidence):
        home = tmp_path / "run" / "config-homes" / "home" / ".config" / "agent"
        seen.setdefault("manifest", (home / "package.json").read_text() if (home / "package.json").is_file() else None)
        seen.setdefault("link", os.readlink(home / "node_modules") if (home / "node_modules").is_symlink() else None)

    o = t.run_session(_request(tmp_path), observer=observer)
    assert o.status is OutcomeStatus.ok, o.message
    assert seen == {"manifest": '{"dependencies": {"pkg": "1.0.0"}}', "link": str(source / "node_modules")}
    for bad, match in (({"x/package.json": str(tmp_path / "absent.json")}, "not installed"), ({"../out": str(source / "package.json")}, "not beneath HOME")):
        with pytest.raises(ConfigError, match=match):
            _transport(tmp_path, [{"say": "x"}], home_from=bad).run_session(_request(tmp_path))


def test_home_from_in_a_reused_run_dir_replaces_what_the_agent_left_and_follows_no_link(tmp_path):
    """HOME persists between the sessions of one run dir: the second session seeds it again
    (no FileExistsError on the old link), and a link the agent left where the host writes
    (its config folder pointed outside) is replaced, never written through."""
    source, outside = tmp_path / "prefill", tmp_path / "outside"
    (source / "node_modules").mkdir(parents=True)
    (source / "package.json").write_text("{}")
    outside.mkdir()
    home_from = {".config/agent/package.json": str(source / "package.json"), ".config/agent/node_modules": str(source / "node_modules")}
    t = _transport(tmp_path, [{"say": "x"}], home_from=home_from)
    assert t.run_session(_request(tmp_path)).status is OutcomeStatus.ok
    config = tmp_path / "run" / "config-homes" / "home" / ".config"
    if config.exists():  # what a run dir keeps of the host's entries (rundir.forget_cli_state)
        import shutil

        shutil.rmtree(config)
    config.parent.mkdir(parents=True, exist_ok=True)
    config.symlink_to(outside, target_is_directory=True)  # as the agent could leave it
    o = t.run_session(_request(tmp_path))
    assert o.status is OutcomeStatus.ok, o.message
    assert list(outside.iterdir()) == [], "the host wrote through the agent's link"
