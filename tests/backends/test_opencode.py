"""opencode transport: the pure parser over every fixture, the config/argv/env builder, the
pre-filled plugin dir (no session may reach a registry), and sessions through the fake
`opencode` (argv, env, stdin, per-run HOME and XDG dirs, the bridge as its only MCP server)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _replay import assert_no_canary, build, hostile_worktree, parent_env, run_parser

from harnesscheck.backends.loopback_endpoint import LoopbackEndpoint
from harnesscheck.backends.opencode import (
    BUILTIN_TOOLS,
    LOOPBACK_PRICE,
    OFF_SWITCHES,
    PLUGIN_DEPS_DIR,
    PLUGIN_PACKAGE,
    OpencodeParser,
    OpencodeTransport,
    error_class,
    plugin_deps_ready,
    render_config,
)
from harnesscheck.backends.registry import get_spec, kit_profile_of_cli
from harnesscheck.core.config import Settings
from harnesscheck.core.contracts import (
    AgentSessionRequest,
    ConfigError,
    CostSource,
    ErrorClass,
    ModelVerdict,
    OutcomeStatus,
)
from harnesscheck.core.paths import fixtures_dir
from harnesscheck.core.scope import ToolScope
from harnesscheck.testing.fakes import install_fake_cli

SCENARIOS = sorted(p.stem for p in (fixtures_dir() / "opencode").glob("*.json"))


def replay_outcome(scenario: str, model: str | None = None):
    return run_parser(OpencodeParser(requested_model=model), build("opencode", scenario, model))


def test_every_fixture_has_provenance():
    assert len(SCENARIOS) >= 20
    for name in SCENARIOS:
        prov = json.loads((fixtures_dir() / "opencode" / f"{name}.json").read_text())["provenance"]
        assert prov["cli"] == "opencode" and prov["cli_version"] == "1.18.33" and prov["date"]
        assert prov["source"] == "observed-here" or prov["source"].startswith("reference:"), name


@pytest.mark.parametrize(
    ("scenario", "status", "cls"),
    [
        ("success", OutcomeStatus.ok, None),
        ("tool_calls", OutcomeStatus.ok, None),
        ("unknown_events", OutcomeStatus.ok, None),
        ("malformed_line", OutcomeStatus.ok, None),
        ("not_logged_in", OutcomeStatus.blocked, ErrorClass.auth),
        ("auth_401", OutcomeStatus.blocked, ErrorClass.auth),
        ("usage_limit", OutcomeStatus.blocked, ErrorClass.quota),
        ("rate_limit_429", OutcomeStatus.error, ErrorClass.rate_limit),
        ("overloaded_529", OutcomeStatus.error, ErrorClass.overloaded),
        ("context_overflow", OutcomeStatus.error, ErrorClass.context_overflow),
        ("model_not_found", OutcomeStatus.error, ErrorClass.model_unavailable),
        ("network_error", OutcomeStatus.error, ErrorClass.network),
        ("exit0_is_error", OutcomeStatus.error, ErrorClass.unknown),
        ("truncated_last_line", OutcomeStatus.error, ErrorClass.protocol),
        ("crash_no_result", OutcomeStatus.error, ErrorClass.cli_crash),
    ],
)
def test_fixture_outcomes(scenario, status, cls):
    out = replay_outcome(scenario)
    assert (out.status, out.error_class) == (status, cls), out.message
    if cls is ErrorClass.auth:
        assert out.retryable is False


def test_success_reads_text_usage_and_cost_from_step_finish():
    out = replay_outcome("success")
    assert out.text == "The answer is 42." and out.iterations == 1 and out.terminal_event_seen
    assert (out.usage.input, out.usage.output, out.usage.cache_read, out.usage.cache_write) == (120, 30, 7, 0)
    assert out.cost.usd == pytest.approx(SUCCESS_COST) and out.cost.source is CostSource.reported
    assert out.served_model is None and out.model_verdict is ModelVerdict.unverified


#: What the real 1.18.33 printed for the success turn with the loopback model priced
#: (opencode.LOOPBACK_PRICE: 120 input, 30 output, 7 cache-read tokens).
SUCCESS_COST = (120 * 3.0 + 30 * 15.0 + 7 * 0.3) / 1e6


def test_an_unpriced_model_reports_cost_unknown_never_zero():
    """opencode 1.18.33 prints `cost: 0` for a model it has no price for (the recorded
    tool_calls turns, no price configured): the outcome says unknown, not $0."""
    out = replay_outcome("tool_calls")
    assert out.usage.total > 0
    assert out.cost.usd is None and out.cost.source is CostSource.none
    parser = OpencodeParser()
    parser.feed(json.dumps({"type": "step_finish", "part": {"reason": "stop", "cost": 0, "tokens": {"input": 0, "output": 0}}}))
    assert parser.cost_usd == 0.0  # no tokens used: nothing to price, $0 is the figure


def test_tool_events_split_bridge_from_builtins():
    out = replay_outcome("tool_calls")
    assert out.text == "README greets you." and out.tool_calls == 2 and sorted(out.tools_used) == ["list_dir", "read_file"]
    assert out.native_tool_calls == [] and out.usage.input == 120 + 140 + 160
    native = replay_outcome("native_tool_use")
    assert native.native_tool_calls == ["read", "bash", "write", "other_query"]


def test_exit_zero_without_a_final_step_finish_is_never_success():
    parser = OpencodeParser()
    for line in build("opencode", "tool_calls").stdout.decode().splitlines()[:4]:  # up to the tool-calls step
        parser.feed(line)
    from harnesscheck.contain.process import Ending, ProcessResult

    out = parser.outcome(
        ProcessResult(exit_code=0, signal=None, duration_s=1.0, ending=Ending.exited, stderr_tail="", partial_tail=None, orphan_suspected=False)
    )
    assert out.status is OutcomeStatus.error and out.error_class is ErrorClass.protocol
    assert "without a final step_finish" in out.message


def test_error_classes_read_names_status_then_words():
    assert error_class({"name": "ProviderAuthError", "data": {"message": "x"}})[0] is ErrorClass.auth
    assert error_class({"name": "APIError", "data": {"message": "nope", "statusCode": 401}})[0] is ErrorClass.auth
    assert error_class({"name": "APIError", "data": {"message": "slow down", "statusCode": 429}})[0] is ErrorClass.rate_limit
    assert error_class({"name": "APIError", "data": {"message": "boom", "statusCode": 502}})[0] is ErrorClass.server_error
    assert error_class({"name": "APIError", "data": {"message": "Monthly usage limit reached", "statusCode": 403}})[0] is ErrorClass.quota
    assert error_class({"name": "APIError", "data": {"message": "bad", "statusCode": 400}})[0] is ErrorClass.invalid_request
    assert error_class({"name": "UnknownError"})[0] is ErrorClass.unknown


def test_config_switches_every_builtin_off_and_names_only_the_bridge():
    cfg = render_config(bridge=(["/py", "-m", "bridge", "--spec", "/run/spec.json"], {"A": "1"}))
    assert set(BUILTIN_TOOLS) <= {k for k, v in cfg["tools"].items() if v is False}
    assert len(BUILTIN_TOOLS) == 10
    assert {"bash", "edit", "webfetch", "read"} <= {k for k, v in cfg["permission"].items() if v == "deny"}
    assert cfg["mcp"] == {
        "bridge": {
            "type": "local",
            "command": ["/py", "-m", "bridge", "--spec", "/run/spec.json"],
            "environment": {"A": "1"},
            "enabled": True,
            "timeout": 30000,
        }
    }
    assert cfg["autoupdate"] is False and cfg["share"] == "disabled"
    assert render_config(bridge=None)["mcp"] == {}


# ---------------------------------------------------------------------------------------
# Sessions through the fake opencode


def raw_records(fake) -> list[dict]:
    """Every record line the fake wrote (FakeCli.records() keeps the invocations only)."""
    if not fake.record_path.is_file():
        return []
    return [json.loads(line) for line in fake.record_path.read_text(encoding="utf-8").split("\n") if line.strip()]


def session(tmp_path, scenario="success", *, prompt="hi", model=None, system=None, loopback=None, cls=OpencodeTransport, env=None, timeout_s=30.0):
    wt = hostile_worktree(tmp_path)
    fake = install_fake_cli("opencode", scenario, tmp_path / "bin")
    transport = cls(
        get_spec("opencode"), Settings(), cli_path=fake.path, parent_env=env or parent_env(tmp_path / "home"), linger_s=0.5, term_grace_s=1.0, loopback=loopback
    )
    request = AgentSessionRequest(prompt=prompt, system=system, model=model, scope=ToolScope(root=wt), timeout_s=timeout_s, run_dir=tmp_path / "run")
    return transport.run_session(request), fake, wt


def test_session_argv_env_stdin(tmp_path):
    out, fake, wt = session(tmp_path, system="CONTRACT-TEXT", model="anthropic/claude-sonnet-4-5")
    assert out.ok and out.text == "The answer is 42." and out.backend == "opencode"
    rec = fake.last()
    argv = rec["argv"][1:]
    assert argv[:5] == ["run", "--format", "json", "--title", f"harnesscheck {out.session_id}"]
    assert argv[5:8] == ["--print-logs", "--log-level", "ERROR"]  # the retried stream errors are only in its log
    assert argv[8:10] == ["-m", "anthropic/claude-sonnet-4-5"]
    assert "--" not in argv and not any("CONTRACT-TEXT" in a for a in argv)  # the prompt is never on argv
    assert rec["stdin_type"] == "pipe" and rec["stdin"].startswith("# Instructions\n\nCONTRACT-TEXT")
    assert rec["stdin"].endswith("# Task\n\nhi")
    assert_no_canary(rec)
    env = rec["env"]
    home = (tmp_path / "run" / "home").resolve()
    assert env["HOME"] == str(home)
    for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"):
        assert Path(env[var]).is_relative_to(home), var
    assert Path(env["OPENCODE_CONFIG"]) == (tmp_path / "run" / "opencode.json").resolve()
    assert all(env.get(k) == v for k, v in OFF_SWITCHES.items())
    assert not Path(rec["cwd"]).resolve().is_relative_to(wt.resolve())


def test_prompt_can_never_become_a_flag(tmp_path):
    evil = "--model=evil/x --print-logs"
    out, fake, _ = session(tmp_path, prompt=evil)
    rec = fake.last()
    assert not any(evil in a for a in rec["argv"]) and rec["stdin"].endswith(evil)  # stdin: never a flag


def test_huge_prompt_goes_on_stdin(tmp_path):
    prompt = "x" * 150_000
    out, fake, _ = session(tmp_path, prompt=prompt)
    rec = fake.last()
    assert rec["stdin_type"] == "pipe" and rec["stdin"].endswith("# Task\n\n" + prompt) and "--" not in rec["argv"]


def test_loopback_provider_points_at_127_0_0_1(tmp_path):
    out, fake, _ = session(tmp_path, loopback=LoopbackEndpoint("http://127.0.0.1:9"))
    rec = fake.last()
    cfg = json.loads(Path(rec["env"]["OPENCODE_CONFIG"]).read_text())
    provider = cfg["provider"]["harnesscheck"]
    assert provider["npm"] == "@ai-sdk/openai-compatible" and provider["options"]["baseURL"] == "http://127.0.0.1:9/v1"
    assert cfg["model"] == "harnesscheck/loopback-model" and rec["argv"][9:11] == ["-m", "harnesscheck/loopback-model"]
    assert cfg["mcp"]["bridge"]["type"] == "local"
    assert provider["models"]["loopback-model"]["cost"] == LOOPBACK_PRICE  # so opencode prints a vendor figure


def test_session_config_dir_is_the_prefilled_plugin_and_nothing_is_fetched(tmp_path):
    """The session's config dir holds the pre-fill's manifest and lock and a link to its
    node_modules: the fake (like opencode 1.18.33) then installs nothing; no npm cache appears."""
    out, fake, _ = session(tmp_path)
    assert out.ok
    config_dir = tmp_path / "run" / "home" / ".config" / "opencode"
    deps = fake.path.parent / PLUGIN_DEPS_DIR
    assert (config_dir / "node_modules").is_symlink() and (config_dir / "node_modules").resolve() == (deps / "node_modules").resolve()
    assert json.loads((config_dir / "package.json").read_text())["dependencies"] == {PLUGIN_PACKAGE: "1.18.33"}
    assert plugin_deps_ready(deps, "1.18.33")
    assert not [r for r in raw_records(fake) if r.get("kind") == "registry_fetch"]
    assert not (tmp_path / "run" / "home" / ".npm").exists()


class _LeavesThePluginToDownload(OpencodeTransport):
    def prefill(self, config_dir, deps, root=None):
        config_dir.mkdir(parents=True, exist_ok=True)


def test_a_session_without_the_prefill_would_download_and_the_fake_shows_it(tmp_path):
    """The known-bad variant that leaves the plugin to opencode: the fake records the fetch
    (as the real CLI did here, npm's cache in the session HOME); the host removes that cache
    with the rest of what the CLI wrote in its HOME after the session (rundir.forget_cli_state)."""
    out, fake, _ = session(tmp_path, cls=_LeavesThePluginToDownload)
    fetched = [r for r in raw_records(fake) if r.get("kind") == "registry_fetch"]
    assert fetched and fetched[0]["package"] == PLUGIN_PACKAGE
    assert not (tmp_path / "run" / "home" / ".npm").exists()


def test_missing_prefill_refuses_the_session_before_anything_runs(tmp_path, monkeypatch):
    # an empty harnesscheck cache: on a machine where install-clis ran, its pre-fill is found there
    monkeypatch.setenv("HARNESSCHECK_CACHE", str(tmp_path / "empty-cache"))
    wt = hostile_worktree(tmp_path)
    fake = install_fake_cli("opencode", "success", tmp_path / "bin")
    import shutil

    shutil.rmtree(fake.path.parent / PLUGIN_DEPS_DIR)
    transport = OpencodeTransport(get_spec("opencode"), Settings(), cli_path=fake.path, parent_env=parent_env(tmp_path / "home"))
    request = AgentSessionRequest(prompt="hi", scope=ToolScope(root=wt), timeout_s=30, run_dir=tmp_path / "run")
    with pytest.raises(ConfigError) as err:
        transport.run_session(request)
    assert "install-clis" in str(err.value.fix) and PLUGIN_PACKAGE in str(err.value)
    assert not [r for r in fake.records() if r.get("kind") == "invocation" and r["argv"][1:2] != ["--version"]]


def test_bridge_calls_go_through_the_bridge(tmp_path):
    out, fake, _ = session(tmp_path, "tool_calls")
    assert out.ok, out.message
    assert out.tool_calls == 2 and sorted(out.tools_used) == ["list_dir", "read_file"]
    results = [r for r in raw_records(fake) if r.get("kind") == "mcp_result"]
    assert results and all(r["server"] == "bridge" and not r["is_error"] for r in results)
    assert out.audit is not None and out.audit.clean, out.audit


def test_native_tool_use_is_flagged_by_the_audit(tmp_path):
    out, fake, _ = session(tmp_path, "native_tool_use")
    codes = {f.code for f in out.audit.flags}
    assert {"native_tool_use", "native_shell", "foreign_mcp_tool"} <= codes and not out.audit.clean


def test_a_fatal_error_that_never_exits_ends_the_session(tmp_path):
    out, _, _ = session(tmp_path, "usage_limit", timeout_s=20)
    assert out.status is OutcomeStatus.blocked and out.error_class is ErrorClass.quota
    assert out.duration_s < 10


def test_the_scripted_server_answers_a_title_request_outside_the_script():
    """opencode's tool-less title request (before each turn, when no --title names the
    session) gets a title, is not a turn, and leaves the scripted turn to the real request."""
    import urllib.request

    from harnesscheck.loopback.scenario import Scenario, ServedUsage, ToolCall, Turn
    from harnesscheck.loopback.server import ScriptedModelServer

    script = Scenario("t", (Turn(tool_calls=(ToolCall("read_file", {"path": "README.md"}),), usage=ServedUsage(5, 5, 0, 0)),))

    def post(srv, body):
        req = urllib.request.Request(srv.base_url + "/v1/chat/completions", data=json.dumps(body).encode(), headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())

    with ScriptedModelServer(script) as srv:
        title = post(
            srv,
            {
                "model": "m",
                "messages": [
                    {"role": "system", "content": "You are a title generator. You output ONLY a thread title."},
                    {"role": "user", "content": "Generate a title for this conversation:\n"},
                ],
            },
        )
        assert title["choices"][0]["message"]["content"] == "harnesscheck session"
        assert not title["choices"][0]["message"].get("tool_calls")
        turn = post(
            srv,
            {
                "model": "m",
                "messages": [{"role": "user", "content": "go"}],
                "tools": [{"type": "function", "function": {"name": "bridge_read_file", "parameters": {}}}],
            },
        )
        assert turn["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "bridge_read_file"
        assert [r.side_request for r in srv.requests] == ["title", None]
        turns = srv.turn_requests()
        assert len(turns) == 1 and turns[0].tools == ["bridge_read_file"]
        assert srv.served_usage_total().input == 5


def test_install_clis_counts_a_missing_plugin_prefill_as_not_installed(tmp_path):
    """`install-clis` pre-fills the plugin beside the CLI; a release without it is missing."""
    from harnesscheck.loopback import install
    from harnesscheck.testing.fakes import fake_plugin_deps

    c = install.PinnedCli("opencode", "opencode", "opencode-ai", "1.18.33")
    deps = install.runtime_deps("opencode")  # the backend's kit profile, read through the registry
    assert (deps.dirname, deps.package) == (PLUGIN_DEPS_DIR, PLUGIN_PACKAGE)
    assert not install.runtime_deps_ready(tmp_path, c)
    fake_plugin_deps(tmp_path, "1.18.33")
    assert install.runtime_deps_ready(tmp_path, c)
    assert not install.runtime_deps_ready(tmp_path, install.PinnedCli("opencode", "opencode", "opencode-ai", "1.18.34"))
    other = install.PinnedCli("codex", "codex", "@openai/codex", "0.171.0")
    assert install.runtime_deps_ready(tmp_path / "nowhere", other)  # nothing to pre-fill


def test_postinstall_of_the_form_node_dot_slash_file_is_run(tmp_path):
    """opencode-ai's `node ./postinstall.mjs` is the package's own file: run, with node, in its dir."""
    from harnesscheck.loopback import install

    pkg = tmp_path / "node_modules" / "opencode-ai"
    pkg.mkdir(parents=True)
    (pkg / "package.json").write_text(json.dumps({"scripts": {"postinstall": "node ./postinstall.mjs"}}))
    (pkg / "postinstall.mjs").write_text("require('fs').writeFileSync('ran', 'yes')\n")
    c = install.PinnedCli("opencode", "opencode", "opencode-ai", "1.18.33")
    import shutil

    node = shutil.which("node")
    if node is None:
        pytest.skip("no node here")
    (pkg / "postinstall.mjs").write_text("import fs from 'fs'; fs.writeFileSync('ran', 'yes')\n")
    assert install.run_postinstall(tmp_path, c, node) == 0 and (pkg / "ran").read_text() == "yes"
    # what the real one does (it runs `opencode --version`): dirs in HOME, the XDG dirs and the temp dir
    writes = (
        "import fs from 'fs'; import os from 'os'; import path from 'path';\n"
        "const dirs = [os.homedir(), os.tmpdir(), process.env.XDG_DATA_HOME || path.join(os.homedir(), '.local/share')];\n"
        "for (const d of dirs) fs.mkdirSync(path.join(d, 'opencode'), {recursive: true});\n"
        "fs.writeFileSync('ran2', dirs.join('\\n'));\n"
    )
    (pkg / "postinstall.mjs").write_text(writes)
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    tmp.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(home))
        mp.setenv("TMPDIR", str(tmp))
        mp.delenv("XDG_DATA_HOME", raising=False)
        assert install.run_postinstall(tmp_path, c, node) == 0
    assert (pkg / "ran2").is_file() and not any(home.iterdir()) and not any(tmp.iterdir()), "the postinstall wrote into the user's HOME or temp dir"
    assert not any(Path(d).exists() for d in (pkg / "ran2").read_text().splitlines()), "its scratch HOME was not removed"
    (pkg / "package.json").write_text(json.dumps({"scripts": {"postinstall": "node ../evil.mjs"}}))
    assert install.run_postinstall(tmp_path, c, node) == 3


def test_real_opencode_at_loopback_reaches_no_registry(tmp_path):
    """With the pinned real opencode (skipped without it): one turn against the scripted
    server, built-ins off at the wire, and no registry contact: no npm process among its
    descendants, no npm cache in the session HOME (1.18.33 leaves `~/.npm/_cacache` when it
    installs its plugin), the plugin link intact."""
    from harnesscheck.backends.loopback_endpoint import DUMMY_KEY
    from harnesscheck.loopback.adapter import DescendantWatcher, loopback_scenario, wrapper_binds, write_wrapper
    from harnesscheck.loopback.clis import require_pinned_cli
    from harnesscheck.loopback.server import ScriptedModelServer

    binary, why = require_pinned_cli("opencode")
    if binary is None:
        pytest.skip(why)
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / "README.md").write_text("hello from the worktree\n")

    class _Ws:
        def scope(self, read_only=True):
            return ToolScope(root=wt, read_only=read_only)

    wrapper, record = write_wrapper(tmp_path / "bin", binary.path, "opencode")
    with ScriptedModelServer(loopback_scenario("opencode", "success", _Ws(), profile=kit_profile_of_cli("opencode")), expected_key=DUMMY_KEY) as srv:
        watcher = DescendantWatcher(record).start()
        transport = OpencodeTransport(get_spec("opencode"), Settings(), cli_path=wrapper, loopback=LoopbackEndpoint(srv.base_url))
        read_only, writable = wrapper_binds(wrapper, binary.path)  # sandboxed (the default): the real CLI, the record
        transport.bind_in_sandbox(read_only=read_only, writable=writable)
        request = AgentSessionRequest(prompt="Say the answer.", scope=_Ws().scope(), timeout_s=240, run_dir=tmp_path / "run")
        out = transport.run_session(request)
        seen = watcher.stop()
        turns = srv.turn_requests()
    assert out.ok and out.text == "The answer is 42.", out.message
    assert turns and sorted(turns[0].tools) == ["bridge_grep", "bridge_list_dir", "bridge_read_file"]
    assert not [r for r in srv.requests if r.side_request], "a title request preceded the turn (no --title?)"
    npm = [p["argv"] for p in seen if any("npm" in Path(a).name or a.endswith("npm-cli.js") for a in p["argv"][:2])]
    assert not npm, f"an npm process ran: {npm}"
    home = tmp_path / "run" / "home"
    assert not (home / ".npm").exists(), "npm's cache appeared in the session HOME: the plugin was fetched"
    assert (home / ".config" / "opencode" / "node_modules").is_symlink()
