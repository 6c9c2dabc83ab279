"""What a model call cost, from its token usage and the configured prices (US dollars per million tokens)."""

from __future__ import annotations

import re

from anges.config.types import Price
from anges.models.base import Usage

_SNAPSHOT = re.compile(r"(?:-\d{4}-\d{2}-\d{2}|-\d{8}|@\d{8}|@latest|-latest)$")


def price_for(model_id: str, prices: dict[str, Price]) -> Price | None:
    """The price of a model id: exact, else without a provider prefix, a path, or a dated snapshot suffix."""
    for candidate in _candidates(model_id):
        if candidate in prices:
            return prices[candidate]
    return None


def cost(usage: Usage | None, model_id: str, prices: dict[str, Price]) -> float | None:
    """Dollars for one call, or None when the usage or the model's price is unknown."""
    price = price_for(model_id, prices)
    if usage is None or price is None:
        return None
    cached = min(usage.cached_tokens, usage.input_tokens)
    cached_rate = price.cached_input or price.input
    dollars = ((usage.input_tokens - cached) * price.input + cached * cached_rate
               + usage.output_tokens * price.output)
    return dollars / 1_000_000


def _candidates(model_id: str) -> list[str]:
    names = [model_id, model_id.split(":", 1)[-1], model_id.rsplit("/", 1)[-1]]
    names += [_SNAPSHOT.sub("", name) for name in names]
    return list(dict.fromkeys(n for n in names if n))
