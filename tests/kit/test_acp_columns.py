"""The ACP matrix columns: install-clis pins the ACP agents' own packages, a profile's built-ins
script the acp.* checks' local writes and commands at loopback, and harnesscheck's own ACP agent
(`acp serve --backend fake`) is driven by a prompt script at the offline level."""

from __future__ import annotations

import json

import pytest

from harnesscheck.backends.acp import builtin_profile
from harnesscheck.kit.acp_adapter import loopback_turns, prompt_script
from harnesscheck.kit.session import SkipCell
from harnesscheck.loopback.install import manifest_versioned, pinned_clis


def test_install_clis_pins_each_acp_package_once():
    pins = [(c.package, c.version) for c in pinned_clis()]
    assert ("@agentclientprotocol/claude-agent-acp", "0.101.0") in pins
    assert ("@zed-industries/codex-acp", "0.16.0") in pins
    assert len(pins) == len(set(pins)), "gemini --acp and opencode acp reuse the CLIs' pins, never a second install"
    by_name = {c.cli_name: c for c in pinned_clis()}
    # the cache dir is <cli_name>@<version>, where the profiles' {clis} paths look
    assert by_name["claude-agent-acp"].version == "0.101.0" and by_name["codex-acp"].version == "0.16.0"


def test_codex_acp_is_versioned_by_its_manifest():
    assert manifest_versioned() == frozenset({"codex-acp"})


def test_builtin_calls_script_writes_and_commands():
    calls = builtin_profile("claude-agent-acp-builtins").builtin_calls
    turns = loopback_turns([{"write": "/x/a.txt", "content": "hi", "via": "local"}, {"shell": "env > /x/e"}], "agent", calls)
    write, shell = turns[0].tool_calls[0], turns[1].tool_calls[0]
    assert (write.name, write.input, write.builtin) == ("Write", {"file_path": "/x/a.txt", "content": "hi"}, True)
    assert (shell.name, shell.input, shell.builtin) == ("Bash", {"command": "env > /x/e"}, True)
    assert turns[-1].text == "done"


def test_without_builtin_calls_a_command_skips_with_the_reason():
    with pytest.raises(SkipCell) as info:
        loopback_turns([{"shell": "true"}], "gemini", builtin_profile("gemini").builtin_calls)
    assert "'shell'" in info.value.message and "builtin_calls: none" in info.value.message


def test_prompt_script_is_a_fake_script():
    from harnesscheck.backends.fake import FakeScript

    text = prompt_script(
        {
            "steps": [
                {"say": "hi"},
                {"mcp": "list_dir", "arguments": {"path": "."}},
                {"write": "/e/w.txt", "content": "x"},
                {"shell": "touch /e/s"},
                {"error": {"code": -32000, "message": "Authentication required"}},
            ]
        }
    )
    script = FakeScript.from_prompt(text)
    assert script is not None
    # a text-only turn is the final answer: the text goes with the next call
    assert script.turns[0].text == "hi" and [c.name for c in script.turns[0].tool_calls] == ["list_dir"]
    assert [c.name for t in script.turns for c in t.tool_calls] == ["list_dir", "write_file", "shell"]
    assert script.turns[3].error is not None and script.turns[3].error.value == "auth"
    with pytest.raises(SkipCell):
        prompt_script({"steps": [{"spawn": "sleep 1"}]})


def test_harnesscheck_acp_serve_is_a_column(tmp_path):
    from harnesscheck.backends.acp import AcpEvidence, AcpTransport
    from harnesscheck.backends.registry import get_spec
    from harnesscheck.core.config import Settings
    from harnesscheck.core.contracts import AgentSessionRequest, OutcomeStatus
    from harnesscheck.core.scope import ToolScope

    spec = get_spec("acp-harnesscheck")
    transport = AcpTransport(spec, Settings())
    root = tmp_path / "root"
    root.mkdir()
    ev = AcpEvidence()
    outcome = transport.run_session(
        AgentSessionRequest(
            prompt=json.dumps({"turns": [{"text": "scripted by the prompt"}]}), scope=ToolScope(name="t", root=root), timeout_s=60, run_dir=tmp_path / "run"
        ),
        evidence=ev,
    )
    assert outcome.status == OutcomeStatus.ok, outcome.message
    assert "scripted by the prompt" in outcome.text
    assert ev.mode_set == "ask" and ev.ending == "exited"


def test_an_unknown_agents_shell_and_write_are_learned_from_the_wire():
    from harnesscheck.kit.acp_adapter import learn_builtin_calls

    anthropic = json.dumps(
        {
            "tools": [
                {"name": "Bash", "input_schema": {"properties": {"command": {}, "timeout": {}}, "required": ["command"]}},
                {"name": "Write", "input_schema": {"properties": {"file_path": {}, "content": {}}, "required": ["file_path", "content"]}},
                {"name": "mcp__bridge__write_file", "input_schema": {"properties": {"path": {}, "content": {}}, "required": ["path", "content"]}},
                {"name": "Edit", "input_schema": {"properties": {"file_path": {}, "old_string": {}}, "required": ["file_path", "old_string"]}},
            ]
        }
    )
    gemini = json.dumps(
        {"tools": [{"functionDeclarations": [{"name": "run_shell_command", "parametersJsonSchema": {"properties": {"command": {}}, "required": ["command"]}}]}]}
    )
    scope = {"read_file", "write_file", "list_dir", "grep", "edit_file"}
    learned = learn_builtin_calls([anthropic], scope)
    assert (learned["shell"].name, learned["write"].name) == ("Bash", "Write")  # never the bridge's write_file
    assert learned["write"].arguments == {"file_path": "{path}", "content": "{content}"}
    assert learn_builtin_calls([gemini], scope)["shell"].name == "run_shell_command"
    assert learn_builtin_calls(["not json", json.dumps({"tools": []})], scope) == {}


def test_an_agent_by_command_line_can_say_it_has_no_tools_of_its_own():
    from harnesscheck.backends.acp.profile import adhoc_profile
    from harnesscheck.backends.registry import get_spec

    profile = adhoc_profile("--hc-builtins-off --hc-wire=responses my-agent --acp")
    assert profile.builtins_off and profile.wire == "responses" and profile.command == ["my-agent", "--acp"]
    assert not adhoc_profile("my-agent").builtins_off
    assert get_spec("acp:--hc-builtins-off my-agent").supports("builtin_tools_off")


def test_the_acp_sessions_at_loopback_get_the_short_session_env(tmp_path, monkeypatch):
    """Both ACP sessions the loopback level starts itself (learning an unknown agent's tools, an
    acp.* check's run) inject SHORT_SESSION_ENV, as the exec wrapper gives it to a CLI there."""
    import sys

    import harnesscheck.kit.acp_adapter as acp_adapter
    from harnesscheck.backends.registry import get_spec
    from harnesscheck.loopback.adapter import SHORT_SESSION_ENV

    built = []

    def run_acp_session(adapter, transport, *args, **kwargs):
        built.append(dict(transport.injections))
        return "ran"

    monkeypatch.setattr(acp_adapter, "run_acp_session", run_acp_session)
    adapter = acp_adapter.AcpLoopbackLevel()(get_spec(f"acp:{sys.executable} -c pass"), "loopback", tmp_path)
    assert adapter.acp_run([{"mcp": "list_dir", "arguments": {"path": "."}}]) == "ran"
    assert len(built) == 2, "the tools learned first, then the check's session"
    assert all(injected.items() >= SHORT_SESSION_ENV.items() for injected in built), built
