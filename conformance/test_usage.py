"""Usage, cost and served model: counted once, never fabricated, main chain only."""

from __future__ import annotations

import pytest

from harnesscheck.core.contracts import Capability as C
from harnesscheck.core.contracts import CostSource, ErrorClass, Kind, ModelVerdict, OutcomeStatus, Usage
from harnesscheck.kit.catalog import check


@check("usage.counted-once-per-message", requires=[C.usage_reporting], incident="D11")
def test_usage_counted_once(but):
    """Usage repeated on every streamed chunk of a message is counted once (the last report wins)."""
    run = but.run("repeated_usage")
    expected = run.facts.usage
    assert expected is not None, "the scenario states its usage"
    got = run.outcome.usage
    assert (got.input, got.output) == (expected.input, expected.output), (
        f"usage {got.input}/{got.output} != {expected.input}/{expected.output} (in/out): summed per streamed line?"
    )


@check("usage.cache-and-reasoning-tokens-reported", requires=[C.usage_reporting], kinds=[Kind.api])
def test_cache_and_reasoning_tokens_reported(but):
    """Cache reads, cache writes and reasoning tokens the model API reported reach the outcome's usage, each in
    its own field and summed over the session's turns: never dropped, never counted as fresh input.

    Judged against what the scripted upstream served, per wire: Anthropic's cache_read_input_tokens /
    cache_creation_input_tokens, OpenAI's prompt_tokens_details.cached_tokens (and cache_write_tokens where
    an endpoint reports it), completion_tokens_details / output_tokens_details.reasoning_tokens. A field a
    wire cannot carry is served and judged as 0, and the cell says so. Api kinds only: the harness CLIs'
    cache counts are judged by their own fixtures' usage, not by this scenario."""
    run = but.run("cached_usage")
    expected = run.facts.usage
    assert expected is not None and expected.cache_read, "kit premise: the scenario serves cache reads"
    got = run.outcome.usage
    wrong = {name: f"{getattr(got, name)} (served {getattr(expected, name)})" for name in Usage.model_fields if getattr(got, name) != getattr(expected, name)}
    assert not wrong, f"usage over two turns differs from what the model API served: {wrong}"
    carried = but.usage_fields()
    if carried is not None:
        absent = [name for name in Usage.model_fields if name not in carried]
        if absent:
            but.note(f"{but.spec.id}'s wire reports no {', '.join(absent)}: served and judged as 0")


@check("usage.cache-breakpoints-placed", requires=[C.prompt_caching], kinds=[Kind.api])
def test_cache_breakpoints_placed(but):
    """A backend declaring prompt_caching marks the first two system blocks and the last two non-system
    messages of every request as prompt-cache breakpoints, and nothing else (at most four a request).

    Judged on the requests the scripted upstream received (a two-turn tool session with a system prompt):
    the second request's breakpoints move with the conversation, so a cache written by one turn is read
    by the next. The OpenAI wires have no breakpoint (their servers cache prefixes by themselves): those
    columns do not declare prompt_caching and say why."""
    run = but.run("tool_calls", system="You are a careful code reader.")
    marks = but.cache_breakpoints(run)
    if marks is None:
        but.skip("adapter-not-implemented", f"the kit cannot see {but.spec.id}'s request bodies at {but.level}")
    shapes = but.request_shapes(run)
    assert len(marks) >= 2, f"kit premise: a two-turn session made {len(marks)} request(s)"
    for n, (where, shape) in enumerate(zip(marks, shapes), 1):
        want = [f"system[{i}]" for i in range(min(2, shape["system"]))]
        want += [f"messages[{i}]" for i in range(max(0, shape["messages"] - 2), shape["messages"])]
        assert where == want, f"request {n} of {len(marks)}: cache breakpoints at {where or 'nowhere'}, expected {want}"


def _vendor_figure_seen(but, run) -> None:
    """Skips the cell when the kit could not read what the CLI printed (the loopback level, a
    backend not built on harnesscheck's providers): the vendor's figure is then unknown, and
    neither a figure nor its absence can be judged."""
    if getattr(run, "stdout_lines", ()) is None:
        but.skip("adapter-not-implemented", f"the kit cannot see the CLI's stdout under {but.spec.id} at {but.level}: the vendor's cost figure is unknown")


@check("usage.cost-never-fabricated", incident=["I5", "C3"])
def test_cost_never_fabricated(but):
    """A dollar figure appears only with its true source; with no vendor or price-table figure it is None."""
    run = but.shared_run("success")
    cost = run.outcome.cost
    _vendor_figure_seen(but, run)
    if run.facts.cost_usd is None:
        assert cost.usd is None, f"cost {cost.usd} USD (source {cost.source}) was fabricated: nothing reported it"
        assert cost.source == CostSource.none
    else:
        assert cost.usd == pytest.approx(run.facts.cost_usd, rel=1e-6), f"cost {cost.usd} != reported {run.facts.cost_usd}"
        assert cost.source != CostSource.none
    if but.kind is Kind.harness:
        assert cost.source != CostSource.api, "a harness never prices tokens itself"


@check("usage.vendor-cost-reported", requires=[C.cost_reporting], incident="I5")
def test_vendor_cost_reported(but):
    """A backend claiming cost_reporting passes the vendor's figure through with a non-api source."""
    run = but.shared_run("success")
    _vendor_figure_seen(but, run)
    assert run.facts.cost_usd is not None, "the scenario carries a vendor cost"
    assert run.outcome.cost.usd == pytest.approx(run.facts.cost_usd, rel=1e-6)
    assert run.outcome.cost.source in (CostSource.subscription, CostSource.reported)


@check("usage.served-model-reported", requires=[C.served_model_reporting], incident="I5")
def test_served_model_reported(but):
    """The served model is read from the backend's own report, and matches the request."""
    run = but.shared_run("success")
    assert run.outcome.served_model == run.facts.served_model, f"served {run.outcome.served_model!r}, the backend reported {run.facts.served_model!r}"
    if run.outcome.requested_model:
        assert run.outcome.model_verdict == ModelVerdict.match


@check("usage.served-model-mismatch-flagged", requires=[C.served_model_reporting], incident="I5")
def test_served_model_mismatch_flagged(but):
    """A served model different from the requested one is flagged mismatch, never reported as a match."""
    run = but.shared_run("served_model_mismatch")
    assert run.outcome.served_model == run.facts.served_model
    assert run.outcome.model_verdict == ModelVerdict.mismatch, f"verdict {run.outcome.model_verdict}"


@check("usage.helper-model-not-served", requires=[C.served_model_reporting], incident="D12")
def test_helper_model_not_served(but):
    """A helper or sub-agent model never becomes the served model; its usage is reported apart."""
    run = but.run("helper_model")
    assert run.facts.helper_models, "the scenario has a helper model"
    assert run.outcome.served_model == run.facts.served_model, f"served {run.outcome.served_model!r}: read from a helper model instead of the main chain"
    assert set(run.facts.helper_models) <= set(run.outcome.helper_usage), "helper usage is reported separately"
    if run.facts.usage is not None:
        assert run.outcome.usage.input == run.facts.usage.input, "helper tokens were added to the main usage"


#: The model a host asks for in the guard check (dated-suffix free, so no alias logic applies).
GUARDED_MODEL = "hc-requested-model-1"


@check("usage.mismatch-policy-applied", incident="I5")
def test_mismatch_policy_applied(but):
    """Under HARNESS_MODEL_MISMATCH=fail, a session whose backend saw another model answer than the
    requested one ends error/invalid_request naming the served model; a session whose served model
    the backend could not see is not failed for it, and is never called a match.

    Judged by effects, any wording: the upstream serves another model than the one asked for. A
    backend that reports a served model (the true one, or a guess), a `mismatch`, or names the
    served model in its message has seen, or claims to have seen, which model answered, so an ok
    session means the guard was never applied, whatever verdict it gives. One that reports none
    must not fail the session for it; its outcome's `model_verdict` (not `match`) is the host's
    warning. A session whose served model is the requested one is never failed for it."""
    fail = {"model_mismatch": "fail"}
    run = but.run("served_model_mismatch", model=GUARDED_MODEL, settings=fail)
    o, served = run.outcome, run.facts.served_model
    assert served and served != GUARDED_MODEL, f"kit premise: the upstream serves another model than {GUARDED_MODEL}"
    if o.served_model is not None or o.model_verdict == ModelVerdict.mismatch or served in o.message:
        assert (o.status, o.error_class) == (OutcomeStatus.error, ErrorClass.invalid_request), (
            f"the outcome names {o.served_model!r} as served for {GUARDED_MODEL!r} (the upstream served {served!r}, "
            f"verdict {o.model_verdict}) under HARNESS_MODEL_MISMATCH=fail, yet ends {o.status}/{o.error_class}: "
            "the guard was not applied"
        )
        assert served in o.message, f"the message does not name the served model {served!r}: {o.message!r}"
    else:
        assert o.status == OutcomeStatus.ok, f"{o.status}/{o.error_class}: a served model the backend could not see failed the session ({o.message!r})"
        assert o.model_verdict != ModelVerdict.match, f"verdict `match` for {GUARDED_MODEL!r} with no served model seen"
    run = but.run("success", model=GUARDED_MODEL, settings=fail)
    o = run.outcome
    if o.served_model is None or o.model_verdict == ModelVerdict.match:
        assert o.status == OutcomeStatus.ok, f"{o.status}/{o.error_class}: a session with no mismatching served model seen was failed ({o.message!r})"


@check("usage.served-model-never-guessed", declines=C.served_model_reporting, incident="I5")
def test_served_model_never_guessed(but):
    """A backend that does not report the served model never guesses it: the outcome names the model the
    upstream actually served, or none, and a model it could not see is never judged a match.

    Runs for the backends that do not declare served_model_reporting (the others are judged by
    usage.served-model-reported): the upstream serves another model than the one asked for, so the
    requested model echoed as the served one, or a `match` verdict without a served model, is a claim
    the backend cannot back."""
    run = but.run("served_model_mismatch", model=GUARDED_MODEL)
    o = run.outcome
    served = run.facts.served_model
    assert served and served != GUARDED_MODEL, f"kit premise: the upstream serves another model than {GUARDED_MODEL}"
    assert o.served_model in (None, served), (
        f"the outcome says {o.served_model!r} was served; the upstream served {served!r} for {GUARDED_MODEL!r}: "
        "a served model the backend does not report must be left empty, not guessed"
    )
    if o.served_model is None:
        assert o.model_verdict != ModelVerdict.match, f"model verdict `match` for {GUARDED_MODEL!r} with no served model seen (the upstream served {served!r})"


@check("usage.option-refused-before-request")
def test_option_refused_before_request(but):
    """A request option the model cannot take (a reasoning effort for a model that does not reason,
    by the shipped model metadata) is refused with a typed error naming the option, before any
    work: no request, no CLI. A backend that passes no options at all refuses every option so."""
    from harnesscheck.core.contracts import CapabilityUnsupported, RequestOptions
    from harnesscheck.core.models import PROVIDER_OF_MODE, example_model

    provider = PROVIDER_OF_MODE.get(but.spec.api_mode or "", "openai")
    model = example_model(provider, reasoning=False)
    if model is None:
        but.skip("env-missing", f"the model metadata snapshot names no non-reasoning {provider} model")
    transport = but.transport()
    request = but.request(model=model, options=RequestOptions(reasoning_effort="low"))
    with pytest.raises(CapabilityUnsupported) as err:
        transport.run_session(request)
    assert "reasoning_effort" in str(err.value), f"the refusal must name the option: {err.value}"
    assert but.spawned() == [], "the CLI was started before the option was refused"


@check("usage.over-context-never-sent", kinds=[Kind.api])
def test_over_context_never_sent(but):
    """A request the model's context window cannot hold (by the shipped model metadata: the
    smallest window among the provider's tool-calling models, and a prompt of more than twice
    that many words) ends the session `context_overflow` before it is sent: the model server
    never sees it, so no tokens are billed for a request that can only fail."""
    from harnesscheck.core.models import metadata_provider, smallest_context_model

    provider = metadata_provider(but.spec.id, but.spec.api_mode)
    smallest = smallest_context_model(provider) if provider else None
    if smallest is None:
        but.skip("env-missing", f"the model metadata snapshot lists no context window for {but.spec.id}'s models")
    model, window = smallest
    run = but.run("success", prompt="word " * (2 * window + 64), model=model)
    assert run.model_calls == 0, (
        f"the request reached the model server ({run.model_calls} requests) although {provider}/{model}'s "
        f"context window is {window} tokens and the prompt is at least {window + 32}"
    )
    assert run.outcome.error_class is ErrorClass.context_overflow, (
        f"the over-long request ended {run.outcome.status.value}/{run.outcome.error_class}: {run.outcome.message[:200]}"
    )


@check("usage.thinking-carried-back", kinds=[Kind.api])
def test_thinking_carried_back(but):
    """A reasoning model's thought survives a tool turn: the turn's thinking (an Anthropic
    thinking block with its signature, a Responses reasoning item with its encrypted content) is
    streamed to the host as `thought` events, and the next request carries it back unchanged.
    Dropped or altered, the provider refuses the next turn or the
    model loses its reasoning (doc/SPEC-api.md, Thinking)."""
    from harnesscheck.kit.api_adapter import THOUGHT

    events: list = []
    run = but.run("thinking_tool_turn", events=events)
    carried = but.thinking_carried_back(run)
    if carried is None:
        but.skip("unsupported-by-backend", f"{but.spec.id}'s wire carries no reasoning content back")
    assert run.outcome.status is OutcomeStatus.ok, f"the session ended {run.outcome.status.value}: {run.outcome.message[:200]}"
    thought = "".join(getattr(e, "text", "") or "" for e in events if getattr(e, "kind", None) == "thought")
    assert thought == THOUGHT, f"the thought streamed to the host was {thought!r}, the model thought {THOUGHT!r}"
    assert len(carried) == 1, f"the request after the tool turn carried {len(carried)} reasoning items back, not the one given"
    item = carried[0]
    sealed = item.get("signature") or item.get("encrypted_content")
    assert sealed == "sig-hc-scripted-thinking", (
        f"the reasoning went back without its signature/encrypted content intact ({sealed!r}): the provider would refuse it"
    )


@check("usage.cost-from-metadata-rates", kinds=[Kind.api])
def test_cost_from_metadata_rates(but):
    """A session on a model the shipped metadata prices reports exactly the metadata's rates times
    the usage the provider served (input, output, cache reads and writes, each at its own
    rate), with the snapshot named as the figure's basis: never a cache read billed as input,
    never a figure from another table."""
    from harnesscheck.core.models import PROVIDER_OF_MODE, example_priced_model

    provider = PROVIDER_OF_MODE.get(but.spec.api_mode or "")
    info = example_priced_model(provider) if provider else None
    if info is None:
        but.skip("unsupported-by-backend", f"{but.spec.id} bills no wire at the list prices of the model metadata")
    run = but.run("priced_success", model=info.model)
    served = run.facts.usage
    rates = (
        (served.input, info.input_per_m),
        (served.output, info.output_per_m),
        (served.cache_read, info.cache_read_per_m),
        (served.cache_write, info.cache_write_per_m or 0.0),
    )
    expected = sum(tokens * rate for tokens, rate in rates) / 1_000_000
    cost = run.outcome.cost
    assert run.outcome.status is OutcomeStatus.ok, f"the session ended {run.outcome.status.value}: {run.outcome.message[:200]}"
    assert cost.usd is not None, f"no cost for {info.provider}/{info.model}, which the metadata prices ({info.source})"
    assert cost.usd == pytest.approx(expected, rel=1e-6), (
        f"cost {cost.usd} USD for {served} on {info.provider}/{info.model}; the metadata's rates give {expected:.8f} "
        f"(per million: input {info.input_per_m}, output {info.output_per_m}, cache read {info.cache_read_per_m}, "
        f"cache write {info.cache_write_per_m})"
    )
    assert cost.source == CostSource.api and cost.basis and info.model in cost.basis, (
        f"the figure's source/basis ({cost.source}, {cost.basis!r}) must name the snapshot and the model"
    )
