"""deepseek transport: the pure parser over every fixture, the Cordis composition, the driver
(against a stand-in SDK), the key's one source, sessions through the fake driver, install-clis's
pip runtime, and (when installed) the real 0.2.1rc2 runtime against the scripted server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _replay import assert_no_canary, build, hostile_worktree, parent_env, run_parser

from harnesscheck.backends import deepseek as ds
from harnesscheck.backends.deepseek import DeepSeekParser, DeepSeekTransport, composition_patch
from harnesscheck.backends.registry import get_spec
from harnesscheck.contain.process import Ending, LineAction, ProcessResult
from harnesscheck.core.config import Settings
from harnesscheck.core.contracts import AgentSessionRequest, CliNotFound, ErrorClass, OutcomeStatus
from harnesscheck.core.paths import fixtures_dir
from harnesscheck.core.scope import ToolScope
from harnesscheck.testing.fakes import install_fake_cli

SCENARIOS = sorted(p.stem for p in (fixtures_dir() / "deepseek").glob("*.json"))
KEY = "sk-deepseek-test-key-0123456789"


def replay(scenario: str, **kw):
    return run_parser(DeepSeekParser(**kw), build("deepseek", scenario))


def test_every_fixture_has_provenance_from_the_real_runtime():
    for name in SCENARIOS:
        prov = json.loads((fixtures_dir() / "deepseek" / f"{name}.json").read_text())["provenance"]
        assert prov["cli"] == "deepseek" and prov["cli_version"] == "0.2.1rc2" and prov["date"], name
        assert prov["source"] == "observed-here", name  # recorded here, or derived from a recording (notes say which)
        assert "/tmp/" not in json.dumps(prov) and "127.0.0.1:" not in (fixtures_dir() / "deepseek" / f"{name}.json").read_text().replace("127.0.0.1:PORT", "")


@pytest.mark.parametrize(
    ("scenario", "status", "cls"),
    [
        ("success", OutcomeStatus.ok, None),
        ("tool_calls", OutcomeStatus.ok, None),
        ("auth_401", OutcomeStatus.blocked, ErrorClass.auth),
        ("not_logged_in", OutcomeStatus.blocked, ErrorClass.auth),
        ("rate_limit_429", OutcomeStatus.error, ErrorClass.rate_limit),
        ("overloaded_529", OutcomeStatus.error, ErrorClass.overloaded),
        ("exit0_is_error", OutcomeStatus.error, ErrorClass.protocol),
        ("unknown_events", OutcomeStatus.ok, None),
    ],
)
def test_classification(scenario, status, cls):
    out = replay(scenario)
    assert (out.status, out.error_class) == (status, cls), out.message
    if status is not OutcomeStatus.ok:
        assert not out.text.strip() or status is OutcomeStatus.truncated


def test_empty_answer_with_finish_reason_error_is_never_success():
    parser = DeepSeekParser()
    parser.feed(json.dumps({"type": "run_result", "session_id": "s", "final_response": "", "finish_reason": "error"}))
    out = parser.outcome(ProcessResult(ending=Ending.linger, exit_code=0, signal=None, stderr_tail="", duration_s=0.1))
    assert out.status is OutcomeStatus.error and out.error_class is ErrorClass.protocol
    parser = DeepSeekParser()
    parser.feed(json.dumps({"type": "run_result", "session_id": "s", "final_response": "  ", "finish_reason": "completed"}))
    assert parser.outcome(ProcessResult(ending=Ending.linger, exit_code=0, signal=None, stderr_tail="", duration_s=0.1)).status is OutcomeStatus.error


def test_max_tokens_is_truncated_and_sdk_errors_are_classified():
    def one(line):
        p = DeepSeekParser()
        assert p.feed(json.dumps(line)) is LineAction.TERMINAL
        return p.outcome(ProcessResult(ending=Ending.linger, exit_code=0, signal=None, stderr_tail="", duration_s=0.1))

    out = one({"type": "run_result", "final_response": "half", "finish_reason": "max-tokens"})
    assert out.status is OutcomeStatus.truncated and out.text == "half"
    assert one({"type": "run_error", "error": "TimeoutError", "message": "initialize timed out"}).error_class is ErrorClass.timeout
    crash = one({"type": "run_error", "error": "TransportClosedError", "message": "runtime stdout closed\nexit code: 1"})
    assert (crash.status, crash.error_class) == (OutcomeStatus.error, ErrorClass.cli_crash)


def test_usage_is_counted_once_per_message_and_text_is_the_final_response():
    out = replay("tool_calls")
    assert out.text == "The file says hello." and out.iterations == 2 and out.tool_calls == 1
    assert out.tools_used == ["read_file"] and (out.usage.input, out.usage.output) == (22, 14)


def test_turn_cap_stops_at_the_step_beyond_max_iters():
    out = run_parser(DeepSeekParser(max_steps=2), build("deepseek", "max_turns"))
    assert (out.status, out.error_class) == (OutcomeStatus.truncated, ErrorClass.max_turns)
    assert out.iterations == 2


def test_composition_turns_every_tool_plugin_and_phone_home_off_and_adds_only_the_bridge():
    patch = composition_patch(bridge=(["/usr/bin/python3", "-I", "-m", "harnesscheck.bridge"], {}), system="SYS")
    off = {p["id"] for p in patch if p.get("disabled") is True}
    assert set(ds.TOOL_PLUGINS) <= off and set(ds.NETWORK_PLUGINS) <= off
    assert {"tool-bash", "tool-fs", "tool-web", "tool-subagent", "tool-workflow", "session-telemetry-otel"} <= off
    inserts = [e for p in patch for e in p.get("insert", [])]
    assert [e["name"] for e in inserts] == ["@deepseek-ai/dsh-mcp-client"]
    assert inserts[0]["config"]["serverName"] == "bridge" and inserts[0]["config"]["failOnStartupError"] is True
    assert {"id": "system-prompt", "config": {"personaPrefix": "SYS"}} in patch
    assert not [p for p in composition_patch(bridge=None, system=None) if "insert" in p]  # one-shots: no tools at all


# -- the driver (a stand-in SDK: the real one is exercised at loopback) --------------------

STUB = """
class Note:
    def __init__(self, method, payload): self.method, self.payload = method, payload
class Result:
    def __init__(self, **kw): self.__dict__.update(kw)
class DeepSeekHarness:
    def __init__(self, **kw):
        import json, os
        print(json.dumps({"stub_kwargs": {k: v for k, v in kw.items() if k != "api_key"}, "key_given": bool(kw.get("api_key")),
                          "env_key": os.environ.get("DEEPSEEK_API_KEY")}), flush=True)
    def run(self, prompt, on_notification=None):
        if prompt == "raise":
            raise RuntimeError("the runtime said no")
        ev = {"type": "assistant/message", "data": {"message": {"content": [{"type": "text", "text": "hi"}]}, "stream": [1, 2]}}
        on_notification(Note("session.event", {"sessionId": "s1", "event": ev}))
        return Result(session_id="s1", final_response="hi", finish_reason="completed", events=[ev], notifications=[1])
    def close(self): pass
"""


def _stub_sdk(tmp_path) -> Path:
    sdk = tmp_path / "sdk"
    (sdk / "deepseek_harness").mkdir(parents=True)
    (sdk / "deepseek_harness" / "__init__.py").write_text(STUB)
    info = sdk / "deepseek_harness_sdk-0.2.1rc2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: deepseek-harness-sdk\nVersion: 0.2.1rc2\n")
    return sdk


def _drive(sdk: Path, request: dict, *args: str):
    return subprocess.run(
        [sys.executable, "-I", str(ds.DRIVER), "--sdk", str(sdk), *args],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )


def test_driver_forwards_notifications_then_the_run_result(tmp_path):
    sdk = _stub_sdk(tmp_path)
    proc = _drive(sdk, {"prompt": "go", "cwd": str(tmp_path), "dsh_home": str(tmp_path / "h"), "api_key": KEY})
    lines = [json.loads(x) for x in proc.stdout.splitlines()]
    assert proc.returncode == 0, proc.stderr
    assert lines[0]["key_given"] is True and lines[0]["env_key"] is None  # the key is an argument, not inherited
    assert lines[0]["stub_kwargs"]["request_timeout_seconds"] is None
    assert lines[1]["method"] == "session.event" and "stream" not in lines[1]["params"]["event"]["data"]
    assert lines[-1] == {"type": "run_result", "session_id": "s1", "final_response": "hi", "finish_reason": "completed", "events": 1, "notifications": 1}
    assert KEY not in proc.stdout
    assert _drive(sdk, {}, "--version").stdout.strip() == "deepseek-harness-sdk 0.2.1rc2"


def test_driver_reports_what_the_sdk_raised(tmp_path):
    proc = _drive(_stub_sdk(tmp_path), {"prompt": "raise", "cwd": str(tmp_path), "dsh_home": str(tmp_path)})
    last = json.loads(proc.stdout.splitlines()[-1])
    assert proc.returncode == 1 and last["type"] == "run_error" and last["error"] == "RuntimeError"
    assert "the runtime said no" in last["message"]


# -- sessions through the fake driver --------------------------------------------------


def session(tmp_path, scenario, *, settings=None, env=None, system=None, timeout_s=30.0):
    wt = hostile_worktree(tmp_path)
    fake = install_fake_cli("deepseek", scenario, tmp_path / "bin")
    host = env or {
        **parent_env(tmp_path / "home"),
        "ANTHROPIC_API_KEY": "sk-ant-host-key-must-not-be-used",
        "OPENAI_API_KEY": "sk-openai-host-key-must-not-be-used",
        "DEEPSEEK_API_KEY": "sk-host-deepseek-env-key",
    }
    transport = DeepSeekTransport(get_spec("deepseek"), settings or Settings(), cli_path=fake.path, parent_env=host, linger_s=0.5, term_grace_s=1.0)
    request = AgentSessionRequest(prompt="hi", system=system, scope=ToolScope(root=wt), timeout_s=timeout_s, run_dir=tmp_path / "run")
    return transport.run_session(request), fake


def test_the_key_comes_from_the_setting_only_and_never_reaches_argv_env_or_outcome(tmp_path):
    out, fake = session(tmp_path, "success", settings=Settings(deepseek_api_key=KEY))
    assert out.ok and out.text == "Hello from the scripted model." and out.cli_version
    rec = fake.last()
    assert_no_canary(rec)
    body = json.loads(rec["stdin"])
    assert body["api_key"] == KEY  # on stdin, once
    assert KEY not in json.dumps(rec["argv"]) and KEY not in json.dumps(rec["env"])
    assert not [k for k in rec["env"] if k.startswith(("ANTHROPIC_", "OPENAI_", "DEEPSEEK_"))]
    assert KEY not in out.model_dump_json()
    for path in (tmp_path / "run").rglob("*"):
        if path.is_file() and path.name != "bridge-spec.json":
            assert KEY not in path.read_text(errors="replace"), path


def test_no_setting_means_no_key_even_with_host_keys_set(tmp_path):
    out, fake = session(tmp_path, "success")
    assert json.loads(fake.last()["stdin"])["api_key"] is None


def test_patch_and_env_of_a_session(tmp_path):
    out, fake = session(tmp_path, "success", system="CONTRACT")
    rec = fake.last()
    body = json.loads(rec["stdin"])
    patch = json.loads(Path(body["patches"][0]).read_text()) if Path(body["patches"][0]).exists() else None
    patch = patch or json.loads(next(iter(rec["mcp_configs"].values())))
    assert {"id": "tool-bash", "disabled": True} in patch and {"id": "system-prompt", "config": {"personaPrefix": "CONTRACT"}} in patch
    assert rec["env"]["DSH_MAX_TOKENS_AS_SUCCESS"] == "false" and rec["env"]["HOME"].startswith(str((tmp_path / "run").resolve()))
    assert Path(body["dsh_home"]).is_relative_to((tmp_path / "run").resolve()) and body["prompt"] == "hi"
    assert Path(body["cwd"]).resolve() != (tmp_path / "wt").resolve()


def test_a_bridge_that_never_listed_its_tools_blocks(tmp_path):
    out, _ = session(tmp_path, "mcp_failed")
    assert (out.status, out.error_class) == (OutcomeStatus.blocked, ErrorClass.mcp_unavailable)


def test_missing_sdk_is_a_typed_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESSCHECK_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(ds, "host_sdk_dir", lambda: None)
    with pytest.raises(CliNotFound):
        DeepSeekTransport(get_spec("deepseek"), Settings()).cli()
    sdk = _stub_sdk(tmp_path)
    assert ds.installed_sdk_version(sdk) is None  # no runtime executable: not an install
    (sdk / "deepseek_harness_runtime" / "runtime").mkdir(parents=True)
    (sdk / "deepseek_harness_runtime" / "runtime" / "deepseek-harness-sdk-runtime-linux-x64").write_text("")
    info = DeepSeekTransport(get_spec("deepseek"), Settings(cli=sdk)).cli()
    assert (info.path, info.version) == (sdk, "0.2.1rc2")


def test_install_clis_uses_pip_target_exact_pins_no_deps(tmp_path, monkeypatch):
    from harnesscheck.loopback import install

    calls = []
    monkeypatch.setattr(install.subprocess, "run", lambda argv, **kw: calls.append(argv) or subprocess.CompletedProcess(argv, 1))
    assert install.install_pip_runtime(tmp_path, "deepseek") == 3
    argv = calls[0]
    assert argv[:4] == [sys.executable, "-m", "pip", "install"] and "--no-deps" in argv
    assert argv[argv.index("--target") + 1] == str(tmp_path / "deepseek@0.2.1rc2")
    assert argv[-2:] == ["deepseek-harness-sdk==0.2.1rc2", "deepseek-harness-runtime-bin==0.2.1rc2"]
    monkeypatch.setattr(ds, "installed_sdk_version", lambda p: "0.2.1rc2")
    calls.clear()
    assert install.install_pip_runtime(tmp_path, "deepseek") == 0 and not calls  # present: nothing runs


# -- the real runtime (when install-clis put it in the cache) --------------------------------


def test_real_runtime_offers_only_the_bridge_and_reads_through_it(tmp_path):
    if ds.installed_sdk_version(ds.sdk_dir()) is None:
        pytest.skip(f"deepseek 0.2.1rc2 is not installed in {ds.sdk_dir()} (run `harnesscheck install-clis --backend deepseek`)")
    from harnesscheck.backends.loopback_endpoint import LoopbackEndpoint
    from harnesscheck.loopback.scenario import named_scenario
    from harnesscheck.loopback.server import ScriptedModelServer

    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / "hello.txt").write_text("hello there\n")
    with ScriptedModelServer(named_scenario("tool_calls"), expected_key="loopback-dummy-key-0001") as srv:
        transport = DeepSeekTransport(
            get_spec("deepseek"),
            Settings(),
            loopback=LoopbackEndpoint(srv.base_url, "loopback-dummy-key-0001"),
            parent_env={**parent_env(tmp_path / "home"), "ANTHROPIC_API_KEY": "sk-ant-not-this"},
        )
        out = transport.run_session(
            AgentSessionRequest(prompt="read hello.txt", system="SYSTEM-MARK", scope=ToolScope(root=wt), timeout_s=240, run_dir=tmp_path / "run")
        )
        turns = srv.turn_requests()
    assert out.ok and out.text == "The file says hello." and out.tools_used == ["read_file"], out.message
    assert [r.tools for r in turns] == [["mcp__bridge__grep", "mcp__bridge__list_dir", "mcp__bridge__read_file"]] * 2
    assert all(r.credential_matches for r in turns) and all("SYSTEM-MARK" in r.body_text for r in turns)
    assert [r.path for r in srv.requests] == ["/v1/messages", "/v1/messages"]  # nothing else was called


def test_launcher_runs_the_driver_on_its_sdk_and_is_rewritten_only_when_it_changes(tmp_path):
    sdk = _stub_sdk(tmp_path)
    launcher = ds.ensure_launcher(sdk)
    assert launcher == sdk / ds.LAUNCHER_NAME
    mtime = launcher.stat().st_mtime_ns
    assert ds.ensure_launcher(sdk).stat().st_mtime_ns == mtime
    proc = subprocess.run(
        [str(launcher), "--sdk", "-"],
        input=json.dumps({"prompt": "go", "cwd": str(tmp_path), "dsh_home": str(tmp_path)}),
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert json.loads(proc.stdout.splitlines()[-1])["type"] == "run_result", proc.stderr
    assert subprocess.run([str(launcher), "--version"], capture_output=True, text=True, timeout=60).stdout.strip() == "deepseek-harness-sdk 0.2.1rc2"


def test_the_runtimes_retry_ladder_is_off_the_host_owns_retries():
    assert {"id": "llm-retry", "disabled": True} in composition_patch(bridge=None, system=None)
