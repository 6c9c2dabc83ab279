"""What a model call cost, from its token usage and a price (US dollars per million tokens): the configured one
(`prices:`), else the built-in price of a well-known model of the built-in providers (`BUILT_IN`)."""

from __future__ import annotations

import re
from functools import lru_cache

from anges.config.types import Price
from anges.models.base import Usage

_SNAPSHOT = re.compile(r"(?:-\d{4}-\d{2}-\d{2}|-\d{8}|@\d{8}|@latest|-latest)$")

PRICES_AS_OF = "2026-11-29"
"""When BUILT_IN was read from the providers' own pricing pages (docs/models.md#prices names them)."""
BUILT_IN: dict[str, Price] = {
    name: Price(input=rates[0], output=rates[1], cached_input=rates[2]) for name, rates in {
        # OpenAI (platform.openai.com/docs/pricing): input, output, cached input
        "gpt-5": (1.25, 10.0, 0.125), "gpt-5-mini": (0.25, 2.0, 0.025), "gpt-5-nano": (0.05, 0.40, 0.005),
        "gpt-4.1": (2.0, 8.0, 0.50), "gpt-4.1-mini": (0.40, 1.60, 0.10), "gpt-4.1-nano": (0.10, 0.40, 0.025),
        "gpt-4o": (2.50, 10.0, 1.25), "gpt-4o-mini": (0.15, 0.60, 0.075),
        "o3": (2.0, 8.0, 0.50), "o4-mini": (1.10, 4.40, 0.275),
        # Anthropic (platform.claude.com/docs/en/about-claude/pricing): input, output, cache hits
        "claude-opus-5": (5.0, 25.0, 0.50), "claude-opus-4-8": (5.0, 25.0, 0.50), "claude-opus-4-7": (5.0, 25.0, 0.50),
        "claude-opus-4-6": (5.0, 25.0, 0.50), "claude-opus-4-5": (5.0, 25.0, 0.50),
        "claude-opus-4-1": (15.0, 75.0, 1.50), "claude-opus-4": (15.0, 75.0, 1.50),
        "claude-sonnet-5-5": (2.0, 10.0, 0.20), "claude-sonnet-5": (2.0, 10.0, 0.20),
        "claude-sonnet-4-6": (3.0, 15.0, 0.30), "claude-sonnet-4-5": (3.0, 15.0, 0.30),
        "claude-sonnet-4": (3.0, 15.0, 0.30), "claude-3-7-sonnet": (3.0, 15.0, 0.30),
        "claude-haiku-4-5": (1.0, 5.0, 0.10), "claude-3-5-haiku": (0.80, 4.0, 0.08),
        # Google (ai.google.dev/gemini-api/docs/pricing), prompts up to 200k tokens: input, output, cached input
        "gemini-3.8-flash": (0.75, 3.75, 0.075),  # the price Google gives until 2026-12-31
        "gemini-2.5-pro": (1.25, 10.0, 0.125), "gemini-2.5-flash": (0.30, 2.50, 0.03),
        "gemini-2.5-flash-lite": (0.10, 0.40, 0.01),
        # DeepSeek (api-docs.deepseek.com/quick_start/pricing): input (cache miss), output, input (cache hit)
        "deepseek-chat": (0.28, 0.42, 0.028), "deepseek-reasoner": (0.28, 0.42, 0.028),
    }.items()}
"""Prices of the well-known models of the built-in providers, dated PRICES_AS_OF: `/cost`, the status line and
the record show money without configuration. A configured price wins (a discount, a new rate, a local server that
serves a model under one of these names: price it 0)."""


def price_for(model_id: str, prices: dict[str, Price]) -> Price | None:
    """The price of a model id: exact, else without a provider prefix, a path, or a dated snapshot suffix; from
    `prices` (the configured ones), else from BUILT_IN."""
    for table in (prices, BUILT_IN):
        for candidate in _candidates(model_id):
            if candidate in table:
                return table[candidate]
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


@lru_cache(maxsize=64)
def _candidates(model_id: str) -> tuple[str, ...]:
    """The names a model id's price may be listed under (each model call asks: worked out once per id)."""
    names = [model_id, model_id.split(":", 1)[-1], model_id.rsplit("/", 1)[-1]]
    names += [_SNAPSHOT.sub("", name) for name in names]
    names += [re.sub(r"(\d)\.(\d)", r"\1-\2", name) for name in names if name.startswith("claude")]  # OpenRouter's
    return tuple(dict.fromkeys(n for n in names if n))
