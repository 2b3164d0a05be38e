"""Request options and reasoning (doc/SPEC-api.md, "Request options" and "Thinking"): each
option spelled as its wire spells it, refused before any request where the wire, the model or
the backend cannot honour it; a reasoning model's thinking decoded, shown as thought events,
and carried back on the next request (signature / encrypted content intact)."""

from __future__ import annotations

import json

import api_wire as W
import pytest
import respx
import respx_httpx2  # noqa: F401

from harnesscheck.backends.registry import resolve_provider
from harnesscheck.core.config import Settings
from harnesscheck.core.contracts import AgentSessionRequest, OptionUnsupported, RequestOptions
from harnesscheck.core.events import run_with_events
from harnesscheck.core.scope import ToolScope

MODES = list(W.PATHS)
#: A reasoning model the snapshot knows for each wire's provider (metadata decides what it takes).
REASONING = {"anthropic_messages": "claude-sonnet-4-5", "chat_completions": "gpt-5", "responses": "gpt-5"}


def transport(monkeypatch, mode, model):
    key_var, url_var = W.KEY_VARS[mode]
    monkeypatch.setenv(key_var, W.CANARY_KEY)
    monkeypatch.setenv(url_var, W.base_url(mode))
    t = resolve_provider(Settings(backend="api", api_mode=mode, model=model))
    t.llm._sleep = lambda s: None
    return t


def request(tmp_path, **kw):
    root = tmp_path / "repo"
    root.mkdir(exist_ok=True)
    (root / "a.txt").write_text("alpha\n")
    return AgentSessionRequest(prompt="go", scope=ToolScope(root=root), run_dir=tmp_path / "run", **kw)


def bodies(route):
    return [json.loads(call.request.content) for call in route.calls]


@pytest.mark.parametrize(
    ("mode", "options", "spelled"),
    [
        (
            "anthropic_messages",
            dict(thinking_budget=2048, max_output_tokens=8000, reasoning_effort="high"),
            {"thinking": {"type": "enabled", "budget_tokens": 2048}, "max_tokens": 8000, "output_config": {"effort": "high"}},
        ),
        ("chat_completions", dict(reasoning_effort="low", max_output_tokens=900), {"reasoning_effort": "low", "max_completion_tokens": 900}),
        (
            "responses",
            dict(reasoning_effort="high", reasoning_summary="auto", max_output_tokens=700),
            {"reasoning": {"effort": "high", "summary": "auto"}, "include": ["reasoning.encrypted_content"], "max_output_tokens": 700},
        ),
    ],
)
def test_each_option_is_spelled_as_its_wire_spells_it(monkeypatch, tmp_path, mode, options, spelled):
    with respx.mock(using="httpx2", assert_all_mocked=True) as router:
        route = router.post(W.url(mode)).mock(side_effect=W.script(mode, [W.Turn(text="ok")]))
        out = transport(monkeypatch, mode, REASONING[mode]).run_session(request(tmp_path, options=RequestOptions(**options)))
    assert out.ok
    body = bodies(route)[0]
    assert {k: body.get(k) for k in spelled} == spelled


@pytest.mark.parametrize(
    ("mode", "model", "options", "option"),
    [
        ("chat_completions", "gpt-5", dict(thinking_budget=2048), "thinking_budget"),  # no such option on the wire
        ("responses", "gpt-5", dict(thinking_budget=2048), "thinking_budget"),
        ("anthropic_messages", "claude-sonnet-4-5", dict(temperature=0.5), "temperature"),  # not on this wire's SDK
        ("anthropic_messages", "claude-sonnet-4-5", dict(reasoning_effort="minimal"), "reasoning_effort"),
        ("chat_completions", "gpt-4.1-mini", dict(reasoning_effort="low"), "reasoning_effort"),  # not a reasoning model
        ("anthropic_messages", "claude-haiku-4-5", dict(max_output_tokens=10_000_000), "max_output_tokens"),  # over its limit
        ("anthropic_messages", "claude-sonnet-4-5", dict(thinking_budget=4096, max_output_tokens=4096), "thinking_budget"),
    ],
)
def test_an_option_that_cannot_be_honoured_is_refused_before_any_request(monkeypatch, tmp_path, mode, model, options, option):
    with respx.mock(using="httpx2", assert_all_mocked=True, assert_all_called=False) as router:
        route = router.post(W.url(mode)).mock(side_effect=W.script(mode, [W.Turn(text="ok")]))
        with pytest.raises(OptionUnsupported) as err:
            transport(monkeypatch, mode, model).run_session(request(tmp_path, options=RequestOptions(**options)))
    assert route.call_count == 0, "nothing may reach the wire before the refusal"
    assert err.value.option == option and option in err.value.message and model in err.value.message


def test_backends_that_cannot_pass_options_refuse_them_up_front(tmp_path):
    with pytest.raises(OptionUnsupported, match="temperature"):
        resolve_provider(Settings(backend="fake")).run_session(request(tmp_path, options=RequestOptions(temperature=0.1)))
    with pytest.raises(OptionUnsupported, match="claude takes no reasoning_effort"):
        resolve_provider(Settings(backend="claude-code", cli=tmp_path / "no-claude")).run_session(
            request(tmp_path, options=RequestOptions(reasoning_effort="low"))
        )


@pytest.mark.parametrize("mode", ["anthropic_messages", "responses"])
def test_thinking_is_decoded_shown_as_thought_and_carried_back_after_a_tool_turn(monkeypatch, tmp_path, mode):
    turns = [W.Turn(thinking="I should read a.txt first.", tool_calls=[("c1", "read_file", {"path": "a.txt"})]), W.Turn(text="It says alpha.")]
    events = []
    with respx.mock(using="httpx2", assert_all_mocked=True) as router:
        route = router.post(W.url(mode)).mock(side_effect=W.script(mode, turns))
        out = run_with_events(transport(monkeypatch, mode, REASONING[mode]), request(tmp_path), events.append)
    assert out.ok and out.text == "It says alpha."
    assert "".join(e.text for e in events if e.kind == "thought") == "I should read a.txt first."
    second = bodies(route)[1]
    if mode == "anthropic_messages":
        assistant = [m for m in second["messages"] if m["role"] == "assistant"][-1]
        assert assistant["content"][0] == {"type": "thinking", "thinking": "I should read a.txt first.", "signature": W.Turn().signature}, (
            "the thinking block goes back first, signed"
        )
        assert assistant["content"][1]["type"] == "tool_use"
    else:
        reasoning = [i for i in second["input"] if i.get("type") == "reasoning"]
        assert len(reasoning) == 1 and reasoning[0]["id"] == "rs_1" and reasoning[0]["encrypted_content"] == W.Turn().signature
        kinds = [i.get("type") for i in second["input"]]
        assert kinds.index("reasoning") < kinds.index("function_call"), "the reasoning item precedes its call"


def test_token_floor_counts_half_the_letter_runs_of_every_string():
    from harnesscheck.backends.llm import token_floor

    assert token_floor("") == 0
    assert token_floor("one two three four") == 2
    assert token_floor("one", [{"content": "two three"}], {"tools": ({"name": "four"},)}) == 2
    assert token_floor("a,b;c d") == 2 and token_floor("1234 5678") == 0  # digits and punctuation add no floor
    assert token_floor("日本語のテキスト") == 0  # one run of letters: a floor, never an estimate


def test_a_tool_result_that_overflows_the_window_ends_the_session_before_the_next_request(monkeypatch, tmp_path):
    """The second request (the transcript with a huge tool result) is refused, never sent; the
    first went out because it fit."""
    from harnesscheck.core.contracts import ErrorClass, OutcomeStatus
    from harnesscheck.core.models import model_info

    window = model_info("openai", "gpt-4").context
    req = request(tmp_path)
    (req.scope.root / "big.txt").write_text("word " * (2 * window + 64))
    turns = [W.Turn(tool_calls=[("c1", "read_file", {"path": "big.txt"})]), W.Turn(text="never")]
    with respx.mock(using="httpx2", assert_all_mocked=True) as router:
        route = router.post(W.url("chat_completions")).mock(side_effect=W.script("chat_completions", turns))
        t = transport(monkeypatch, "chat_completions", "gpt-4")
        out = t.run_session(req)
    assert out.error_class is ErrorClass.context_overflow, f"{out.status.value}: {out.message[:200]}"
    assert route.call_count == 1, "the over-long second request reached the wire"
    assert out.status is OutcomeStatus.error and "context window of 8192" in out.message


def test_a_model_the_snapshot_does_not_know_is_never_refused_for_length(monkeypatch, tmp_path):
    with respx.mock(using="httpx2", assert_all_mocked=True) as router:
        route = router.post(W.url("chat_completions")).mock(side_effect=W.script("chat_completions", [W.Turn(text="ok")]))
        out = transport(monkeypatch, "chat_completions", "no-such-model-x").run_session(request(tmp_path).model_copy(update={"prompt": "word " * 100_000}))
    assert out.ok and route.call_count == 1


def test_chat_completions_reasoning_content_is_shown_as_thought_and_never_sent_back(monkeypatch, tmp_path):
    """The de-facto `reasoning_content` deltas of OpenAI-compatible reasoning servers are thought
    events; the next request carries none of it (those servers refuse it in a request)."""
    turns = [W.Turn(thinking="Let me read a.txt.", tool_calls=[("c1", "read_file", {"path": "a.txt"})]), W.Turn(text="It says alpha.")]
    events = []
    with respx.mock(using="httpx2", assert_all_mocked=True) as router:
        route = router.post(W.url("chat_completions")).mock(side_effect=W.script("chat_completions", turns))
        out = run_with_events(transport(monkeypatch, "chat_completions", "gpt-5"), request(tmp_path), events.append)
    assert out.ok and out.text == "It says alpha."
    assert "".join(e.text for e in events if e.kind == "thought") == "Let me read a.txt."
    assert "Let me read a.txt." not in json.dumps(bodies(route)[1])
