"""Dollar cost of an API call from the shipped, dated price table (prices.json).

Contract (doc/SPEC-api.md): `cost_usd(model, usage)` prices a known model exactly from the
table; an unknown model (or no model) gives None: never a guess. A dated snapshot id
(`claude-haiku-4-5-20251001`, `gpt-4.1-mini-2025-04-14`) prices as its listed base id.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

from harnesscheck.contracts import Usage

PRICE_TABLE = Path(__file__).with_name("prices.json")
_DATED = re.compile(r"^(?P<base>.+?)-(?:\d{8}|\d{4}-\d{2}-\d{2})$")


@cache
def price_table() -> dict:
    """The shipped table: {"as_of", "models": {id: {input, output, cache_read, cache_write}}}."""
    return json.loads(PRICE_TABLE.read_text(encoding="utf-8"))


def prices_for(model: str | None) -> dict[str, float] | None:
    """The per-million-token prices of a model, or None when the table does not list it."""
    if not model:
        return None
    models = price_table()["models"]
    name = model.strip().lower()
    if name in models:
        return models[name]
    dated = _DATED.match(name)
    if dated and dated["base"] in models:
        return models[dated["base"]]
    return None


def cost_usd(model: str | None, usage: Usage) -> float | None:
    """Dollars for this usage of this model; None for an unknown model."""
    prices = prices_for(model)
    if prices is None:
        return None
    total = (
        usage.input * prices["input"]
        + usage.output * prices["output"]
        + usage.cache_read * prices["cache_read"]
        + usage.cache_write * prices["cache_write"]
    ) / 1_000_000
    return round(total, 8)
