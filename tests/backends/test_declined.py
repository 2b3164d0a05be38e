"""What a harness will not do is said, typed (HarnessTransport.declined) and in the outcome:
codex and cursor have no turn cap and no system-prompt channel, and a codex one-shot
(`HarnessLLM.complete`) still has its built-in tools. conformance selection.declines-stated
checks the session side per backend; this pins the one-shot."""

from __future__ import annotations

from harnesscheck.backends._harness import HarnessLLM
from harnesscheck.backends.claude_code import ClaudeCodeTransport
from harnesscheck.backends.codex import CodexTransport
from harnesscheck.backends.registry import get_spec
from harnesscheck.core.config import Settings
from harnesscheck.core.contracts import AgentSessionRequest, Capability
from harnesscheck.core.scope import ToolScope
from harnesscheck.testing.fakes import install_fake_cli


def test_codex_one_shot_says_its_builtins_stay_on(tmp_path):
    fake = install_fake_cli("codex", "success", tmp_path / "bin")
    t = CodexTransport(get_spec("codex"), Settings(), cli_path=fake.path, parent_env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    request = AgentSessionRequest(prompt="x", system="S", scope=ToolScope(root=tmp_path), max_iters=1)
    assert t.declined(request, one_shot=True) == (Capability.system_prompt, Capability.builtin_tools_off)
    out = HarnessLLM(t).complete("Say hi.", system="Be brief.")
    assert out.ok and "declined: system_prompt" in out.message and "builtin_tools_off" in out.message


def test_claude_declines_nothing(tmp_path):
    t = ClaudeCodeTransport(get_spec("claude-code"), Settings(), parent_env={})
    request = AgentSessionRequest(prompt="x", system="S", scope=ToolScope(root=tmp_path), max_iters=3)
    assert t.declined(request) == () and t.declined(request, one_shot=True) == ()
