"""A fake backend scripted by its prompt, for driving `harnesscheck acp serve` as a subprocess.

`--backend acp_fakes:spec` (with tests/ on PYTHONPATH): the registry's `module:factory` form.
A prompt that is a JSON object `{"turns": [{"text", "tool_calls": [[name, args]], "delay_s",
"error"}], "repeat_last"}` becomes the fake's script for that step; any other prompt runs the
fake's default script (one "ok" turn). Everything else is the real FakeTransport: the tool
loop through dispatch, cancellation, limits.
"""

from __future__ import annotations

from harnesscheck.backends.fake import FakeScript, FakeTransport
from harnesscheck.backends.registry import get_spec
from harnesscheck.core.contracts import Kind, ProviderSpec


def spec() -> ProviderSpec:
    return ProviderSpec(
        id="acp-prompt-fake",
        kind=Kind.api,
        label="fake scripted by its prompt (tests)",
        factory="acp_fakes:PromptScriptedFake",
        capabilities=get_spec("fake").capabilities,
    )


def script_from(prompt: str) -> FakeScript | None:
    return FakeScript.from_prompt(prompt)


class PromptScriptedFake(FakeTransport):
    def run_session(self, request, *, cancel=None, on_text=None, script=None):
        return super().run_session(request, cancel=cancel, on_text=on_text, script=script or script_from(request.prompt))
