"""The parity ratchet: selecting provider `api` changes nothing on the wire.

For each api_mode and each representative call (plain text, system prompt, max tokens,
tools, tool results incl. a refusal), the HTTP request sent through
`resolve_provider(Settings(backend="api", api_mode=...))` is byte-identical to the one the
`LLM` client sends when used directly (same method, path, body bytes and headers, apart
from the per-request timeout headers, which carry the session's remaining time). Each
request is also pinned with a syrupy snapshot (tests/backends/__snapshots__/test_parity.ambr):
a change to any request byte fails until the snapshot is deliberately updated with
`pytest tests/backends/test_parity.py --snapshot-update`.
"""

from __future__ import annotations

import json
import re

import api_wire as W
import pytest
import respx
import respx_httpx2  # noqa: F401  (registers the "httpx2" respx mocker)

from harnesscheck.backends.api import tool_specs
from harnesscheck.backends.llm import LLM
from harnesscheck.backends.registry import resolve_provider
from harnesscheck.core.config import Settings
from harnesscheck.core.contracts import AgentSessionRequest
from harnesscheck.core.scope import ToolScope

MODES = list(W.PATHS)
PROMPT = "What does src/a.py print?"
SYSTEM = "You are a careful code reader. Answer in one sentence."

#: Headers that differ between two identical calls: the SDK's per-request timeout echo
#: (the loop passes the session's remaining time).
VOLATILE = {"x-stainless-timeout", "x-stainless-read-timeout"}
#: Headers that depend on the machine running the tests, left out of the snapshots only.
MACHINE = {"x-stainless-os", "x-stainless-arch", "x-stainless-runtime", "x-stainless-runtime-version"}
AUTH = {"authorization", "x-api-key"}
#: Headers that carry the installed SDK's own version: an upgrade within the allowed range
#: changes them and nothing the host controls, so the snapshot pins their shape only.
SDK_VERSIONED = {"user-agent", "x-stainless-package-version"}
_VERSION = re.compile(r"\d+(?:\.\d+)+(?:[-.+]?[0-9A-Za-z.]+)?")
#: The API version the SDK sends by default (anthropic-version): the SDK's choice, which an
#: upgrade may move; the snapshot pins that the header is sent.
SDK_DEFAULTED = {"anthropic-version"}
#: Derived from the body's serialisation (key order, separators are the SDK's): the snapshot
#: pins the parsed body instead, and the byte comparison above still compares every byte.
DERIVED = {"content-length"}


def sdk_neutral(name: str, value: str) -> str:
    """The one place SDK-version noise is normalised: `Anthropic/Python 2.15.0` -> `Anthropic/Python <sdk version>`."""
    if name in SDK_DEFAULTED:
        return "<sdk default>"
    return _VERSION.sub("<sdk version>", value) if name in SDK_VERSIONED else value


@pytest.fixture
def worktree(tmp_path):
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("print('hello')\n")
    return root


@pytest.fixture
def env(monkeypatch):
    def set_for(mode: str) -> None:
        for name, value in zip(W.KEY_VARS[mode], (W.CANARY_KEY, W.base_url(mode))):
            monkeypatch.setenv(name, value)

    return set_for


def capture(mode: str, turns: list[W.Turn], action) -> list:
    """Run `action` against a scripted endpoint; the requests it sent, in order."""
    with respx.mock(using="httpx2", assert_all_mocked=True) as router:
        route = router.post(W.url(mode)).mock(side_effect=W.script(mode, turns))
        action()
        return [call.request for call in route.calls]


def wire(request) -> dict:
    """What parity compares: method, path, body bytes, headers minus the volatile ones."""
    return {
        "method": request.method,
        "path": request.url.path,
        "body": request.content,
        "headers": {k: v for k, v in request.headers.items() if k.lower() not in VOLATILE},
    }


def pinned(request) -> dict:
    """What the snapshot pins: the same, with the key masked, machine headers left out and the
    body parsed (its values, cache breakpoints included, not the SDK's key order or spacing)."""
    headers = {}
    for k, v in sorted(request.headers.items()):
        k = k.lower()
        if k in VOLATILE or k in MACHINE or k in DERIVED:
            continue
        headers[k] = v.replace(W.CANARY_KEY, "<api key>") if k in AUTH else sdk_neutral(k, v)
    return {"method": request.method, "path": request.url.path, "headers": headers, "body": json.loads(request.content)}


def direct(mode: str, **kwargs):
    llm = LLM(mode, api_key=W.CANARY_KEY, base_url=W.base_url(mode), model=W.MODELS[mode])
    return lambda: llm.create(**kwargs)


def provider(mode: str) -> object:
    return resolve_provider(Settings(backend="api", api_mode=mode, model=W.MODELS[mode]))


ONE_SHOT_CASES = {
    "plain_text": ({}, {}),
    "system_prompt": ({"system": SYSTEM}, {"system": SYSTEM}),
    "max_tokens": ({"max_tokens": 321}, {"max_tokens": 321}),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", list(ONE_SHOT_CASES))
def test_one_shot_requests_are_byte_identical(mode, case, env, snapshot):
    env(mode)
    complete_kwargs, llm_kwargs = ONE_SHOT_CASES[case]
    turns = [W.Turn(text="It prints hello.")]
    via_provider = capture(mode, turns, lambda: provider(mode).complete(PROMPT, **complete_kwargs))
    via_llm = capture(mode, turns, direct(mode, messages=[{"role": "user", "content": PROMPT}], **llm_kwargs))
    assert len(via_provider) == len(via_llm) == 1
    assert wire(via_provider[0]) == wire(via_llm[0])
    assert pinned(via_provider[0]) == snapshot


TOOL_TURNS = [
    W.Turn(text="Reading it.", tool_calls=[("call_1", "read_file", {"path": "src/a.py"}), ("call_2", "read_file", {"path": "/etc/passwd"})]),
    W.Turn(text="It prints hello."),
]


@pytest.mark.parametrize("mode", MODES)
def test_session_requests_with_tools_and_tool_results_are_byte_identical(mode, env, worktree, tmp_path, snapshot):
    env(mode)
    scope = ToolScope(root=worktree)
    request = AgentSessionRequest(prompt=PROMPT, system=SYSTEM, scope=scope, run_dir=tmp_path / "run")
    via_provider = capture(mode, list(TOOL_TURNS), lambda: provider(mode).run_session(request))
    assert len(via_provider) == 2

    tools = tool_specs(scope)
    user = {"role": "user", "content": PROMPT}
    first = capture(mode, TOOL_TURNS[:1], direct(mode, messages=[user], system=SYSTEM, tools=tools))
    # The history written by hand in the canonical shape: what the loop must have built.
    history = [
        user,
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Reading it."},
                {"type": "tool_use", "id": "call_1", "name": "read_file", "input": {"path": "src/a.py"}},
                {"type": "tool_use", "id": "call_2", "name": "read_file", "input": {"path": "/etc/passwd"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": _allowed_text(via_provider[1], mode)},
                {"type": "tool_result", "tool_use_id": "call_2", "content": _refusal_text(via_provider[1], mode), "is_error": True},
            ],
        },
    ]
    second = capture(mode, TOOL_TURNS[1:], direct(mode, messages=history, system=SYSTEM, tools=tools))

    assert wire(via_provider[0]) == wire(first[0]), "tools request differs"
    assert wire(via_provider[1]) == wire(second[0]), "tool results request differs"
    assert [pinned(r) for r in via_provider] == snapshot


def _results(request, mode: str) -> list[str]:
    body = json.loads(request.content)
    if mode == "anthropic_messages":
        return [b["content"] for b in body["messages"][-1]["content"]]
    if mode == "chat_completions":
        return [m["content"] for m in body["messages"] if m["role"] == "tool"]
    return [i["output"] for i in body["input"] if i.get("type") == "function_call_output"]


def _allowed_text(request, mode: str) -> str:
    text = _results(request, mode)[0]
    assert "print('hello')" in text
    return text


def _refusal_text(request, mode: str) -> str:
    text = _results(request, mode)[1]
    assert text.startswith("refused: ")
    return text


def test_a_changed_byte_is_caught():
    """The comparison itself is strict: one changed body byte or header makes a difference."""

    class Req:
        method = "POST"

        class url:
            path = "/v1/messages"

        def __init__(self, body: bytes, headers: dict):
            self.content, self.headers = body, headers

    base = wire(Req(b'{"a":1}', {"content-type": "application/json", "x-stainless-timeout": "5"}))
    assert base == wire(Req(b'{"a":1}', {"content-type": "application/json", "x-stainless-timeout": "9"}))
    assert base != wire(Req(b'{"a": 1}', {"content-type": "application/json"}))
    assert base != wire(Req(b'{"a":1}', {"content-type": "application/json", "anthropic-beta": "x"}))


EPHEMERAL = {"type": "ephemeral"}


def _marked(body: dict) -> list[str]:
    """Where a request carries cache breakpoints: `system[i]`, `messages[i]` (its last block)."""
    where = [f"system[{i}]" for i, b in enumerate(body.get("system") or []) if b.get("cache_control") == EPHEMERAL]
    for i, message in enumerate(body.get("messages", [])):
        content = message.get("content")
        if isinstance(content, list):
            assert all("cache_control" not in b for b in content[:-1]), f"messages[{i}]: a breakpoint not on the last block"
            if content and content[-1].get("cache_control") == EPHEMERAL:
                where.append(f"messages[{i}]")
    return where


def test_anthropic_requests_carry_cache_breakpoints(env, worktree, tmp_path):
    """Prompt caching (the provider-layer seed): the first two system blocks and the last two
    non-system messages carry `cache_control: ephemeral`, nothing else does (four at most)."""
    mode = "anthropic_messages"
    env(mode)
    scope = ToolScope(root=worktree)
    request = AgentSessionRequest(prompt=PROMPT, system=SYSTEM, scope=scope, run_dir=tmp_path / "run")
    first, second = capture(mode, list(TOOL_TURNS), lambda: provider(mode).run_session(request))
    assert _marked(json.loads(first.content)) == ["system[0]", "messages[0]"]
    assert _marked(json.loads(second.content)) == ["system[0]", "messages[1]", "messages[2]"]
    blocks = ["tools: read_file", "rules: be brief", "project: a.py prints"]
    history = [{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"}, {"role": "user", "content": "three"}]
    (sent,) = capture(mode, [W.Turn(text="ok")], direct(mode, messages=history, system=blocks))
    body = json.loads(sent.content)
    assert [b["text"] for b in body["system"]] == blocks, "the system blocks keep their order"
    assert _marked(body) == ["system[0]", "system[1]", "messages[1]", "messages[2]"]
    assert history[1] == {"role": "assistant", "content": "two"}, "the caller's messages are not changed"


@pytest.mark.parametrize("mode", ["chat_completions", "responses"])
def test_openai_requests_carry_no_cache_markers(mode, env, worktree, tmp_path):
    """The OpenAI wires have no breakpoint (their servers cache prefixes by themselves): nothing
    Anthropic-specific leaks into their bodies, and a list system prompt keeps its blocks' order."""
    env(mode)
    scope = ToolScope(root=worktree)
    request = AgentSessionRequest(prompt=PROMPT, system=SYSTEM, scope=scope, run_dir=tmp_path / "run")
    for sent in capture(mode, list(TOOL_TURNS), lambda: provider(mode).run_session(request)):
        assert b"cache_control" not in sent.content
    (sent,) = capture(mode, [W.Turn(text="ok")], direct(mode, messages=[{"role": "user", "content": "hi"}], system=["a", "b"]))
    body = json.loads(sent.content)
    if mode == "chat_completions":
        assert body["messages"][:2] == [{"role": "system", "content": "a"}, {"role": "system", "content": "b"}]
    else:
        assert body["instructions"] == "a\n\nb"


#: Per wire, every request option it takes, at a value the SDK accepts: the spelling on the wire
#: is pinned by the snapshot (doc/SPEC-api.md, Request options).
OPTION_CASES = {
    "anthropic_messages": {"thinking_budget": 2048, "max_output_tokens": 8000, "reasoning_effort": "high"},
    "chat_completions": {"reasoning_effort": "low", "max_output_tokens": 900, "temperature": 0.5},
    "responses": {"reasoning_effort": "medium", "reasoning_summary": "auto", "max_output_tokens": 900, "temperature": 0.5},
}


@pytest.mark.parametrize("mode", MODES)
def test_request_options_are_byte_identical_and_pinned(mode, env, snapshot):
    """Each option of a wire, through the provider's complete() and through LLM directly: the
    same bytes, and the snapshot pins how the wire spells each one."""
    from harnesscheck.core.contracts import RequestOptions

    env(mode)
    options = RequestOptions(**OPTION_CASES[mode])
    assert set(options.given()) == set(__import__("harnesscheck.backends.llm", fromlist=["WIRE_OPTIONS"]).WIRE_OPTIONS[mode]), (
        "every option the wire takes is in the case"
    )
    turns = [W.Turn(text="It prints hello.")]
    # a reasoning model that also takes a temperature, by the snapshot (so no option is refused)
    model = {"anthropic_messages": "claude-sonnet-4-5", "chat_completions": "gpt-5-chat-latest", "responses": "gpt-5-chat-latest"}[mode]
    via_provider = capture(mode, turns, lambda: resolve_provider(Settings(backend="api", api_mode=mode, model=model)).complete(PROMPT, options=options))
    llm = LLM(mode, api_key=W.CANARY_KEY, base_url=W.base_url(mode), model=model)
    via_llm = capture(mode, turns, lambda: llm.create(messages=[{"role": "user", "content": PROMPT}], options=options))
    assert len(via_provider) == len(via_llm) == 1
    assert wire(via_provider[0]) == wire(via_llm[0])
    assert pinned(via_provider[0]) == snapshot
