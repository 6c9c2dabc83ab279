"""The limits of one request and the ledger of what its model calls used.

A child agent's request has a budget of its own (its agent type's limits) that also draws from its
parent's, so a tree of agents never spends more than the request at its root allows.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from anges.exceptions import RunStopped
from anges.models.base import Usage, estimate_tokens

if TYPE_CHECKING:
    from anges.config.types import AgentConfig, Price
    from anges.store.events import Event


@dataclass
class Budget:
    """Time, model calls, tokens and cost left for a request; a child's spending counts against its parent's too."""

    timeout: float = 0
    max_model_calls: int = 0
    max_tokens: int = 0
    max_cost: float = 0.0
    parent: Budget | None = None
    started: float = field(default_factory=time.monotonic)
    model_calls: int = 0
    tokens: int = 0
    cost: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @classmethod
    def for_request(cls, config: AgentConfig, parent: Budget | None = None) -> Budget:
        """A fresh budget from an `AgentConfig`'s limits, drawing from `parent` too when given."""
        return cls(config.timeout, config.max_model_calls, config.max_tokens, config.max_cost, parent)

    def expired(self) -> bool:
        """True when the wall-clock limit (this request's or an ancestor's) has passed."""
        mine = bool(self.timeout) and time.monotonic() - self.started > self.timeout
        return mine or (self.parent is not None and self.parent.expired())

    def check(self) -> None:
        """Raise `RunStopped` if any limit (the parent's first) is reached."""
        if self.parent is not None:
            self.parent.check()
        if self.expired():
            raise RunStopped("timeout", f"the request ran out of time ({self.timeout:g} s)", limit=self.timeout)
        if self.max_model_calls and self.model_calls >= self.max_model_calls:
            raise RunStopped("model_call_limit", f"the request used all {self.max_model_calls} model calls it may make",
                             limit=self.max_model_calls)
        if self.max_tokens and self.tokens >= self.max_tokens:
            raise RunStopped("budget", f"the request used {self.tokens} tokens of its {self.max_tokens}-token budget",
                             limit=self.max_tokens, spent=self.tokens)
        if self.max_cost and self.cost >= self.max_cost:
            raise RunStopped("budget", f"the request spent ${self.cost:.4f} of its ${self.max_cost:g} budget",
                             limit=self.max_cost, spent=round(self.cost, 6))

    def charge(self, usage: Usage | None, cost: float | None) -> None:
        """Count one model call and what it used, here and in every ancestor."""
        with self._lock:
            self.model_calls += 1
            if usage is not None:
                self.tokens += usage.input_tokens + usage.output_tokens
            self.cost += cost or 0.0
        if self.parent is not None:
            self.parent.charge(usage, cost)


class Ledger:
    """Charges each model call of a request to its budget, and puts the usage on the next recorded event."""

    def __init__(self, budget: Budget, prices: dict[str, Price], model_name: str = ""):
        self.budget = budget
        self.prices = prices
        self.model_name = model_name
        """Who answers when a reply does not say (the model's `name`)."""
        self.pending: dict = {}

    def count(self, reply: str, prompt: str = "", attach: bool = True) -> float | None:
        """Charge one model call by its reply (a `Completion` says what it used; a plain string's tokens, the
        `prompt`'s and its own, are estimated), and (unless not `attach`) put it on the next recorded event: the
        agent's calls, summaries and titles too, all show in a run's usage. Returns its cost when prices are set."""
        usage = estimated(getattr(reply, "usage", None) or Usage(), prompt, reply)
        model_name = getattr(reply, "model", "") or self.model_name
        cost = self.charge(usage, model_name)
        if not attach:
            return cost
        pending = self.pending
        for key, value in usage.to_dict().items():
            if key != "estimated":
                pending[key] = pending.get(key, 0) + value
        pending["estimated"] = pending.get("estimated", False) or usage.estimated
        pending["model_calls"] = pending.get("model_calls", 0) + 1
        pending["latency"] = round(pending.get("latency", 0.0) + getattr(reply, "latency", 0.0), 4)
        if cost is not None:
            pending["cost"] = round(pending.get("cost", 0.0) + cost, 8)
        if model_name:
            pending["model"] = model_name
        return cost

    def charge(self, usage: Usage | None, model_name: str) -> float | None:
        """Count a model call against the budget (also one an action made itself); its cost when its price is known
        (configured, or built in: `anges.models.pricing`)."""
        cost = None
        if usage is not None:
            from anges.models.pricing import cost as price

            cost = price(usage, model_name, self.prices)
        self.budget.charge(usage, cost)
        return cost

    def attach(self, event: Event) -> None:
        """Put the usage of the calls since the last recorded event on `event`."""
        pending, self.pending = self.pending, {}
        if not pending:
            return
        event.data["usage"] = {k: v for k, v in pending.items() if k not in ("model", "latency", "cost")}
        for key in ("model", "latency", "cost"):
            if key in pending:
                event.data[key] = pending[key]
        event.est_input_token = pending.get("input_tokens", 0)
        event.est_output_token = pending.get("output_tokens", 0)


def estimated(usage: Usage, prompt: str, reply: str) -> Usage:
    """`usage` with the counts a provider did not report (a plug-in's plain text, a server that sends no usage)
    estimated from the prompt and the reply, and marked so."""
    missing = {}
    if usage.input_tokens <= 0 and prompt:
        missing["input_tokens"] = estimate_tokens(prompt)
    if usage.output_tokens <= 0 and reply:
        missing["output_tokens"] = estimate_tokens(reply)
    return replace(usage, **missing, estimated=True) if missing else usage


def cache_hit_ratio(cached_tokens: int, input_tokens: int, estimated: bool = False) -> float | None:
    """The share of input tokens the provider read from its prompt cache (None before any input, or when the input
    was `estimated`: a share of a guess says nothing)."""
    return round(cached_tokens / input_tokens, 3) if input_tokens > 0 and not estimated else None
