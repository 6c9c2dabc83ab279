"""The limits of one request, shared by an agent and all its descendants."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from anges.exceptions import RunStopped
from anges.models.base import Usage


@dataclass
class Budget:
    """Time, model calls, tokens and cost left for a request tree; children draw from their parent's."""

    timeout: float = 0
    max_model_calls: int = 0
    max_tokens: int = 0
    max_cost: float = 0.0
    started: float = field(default_factory=time.monotonic)
    model_calls: int = 0
    tokens: int = 0
    cost: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @classmethod
    def for_request(cls, config) -> Budget:
        """A fresh budget from an `AgentConfig`'s limits."""
        return cls(config.timeout, config.max_model_calls, config.max_tokens, config.max_cost)

    def expired(self) -> bool:
        """True when the wall-clock limit has passed."""
        return bool(self.timeout) and time.monotonic() - self.started > self.timeout

    def check(self) -> None:
        """Raise `RunStopped` if any limit is reached."""
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
        """Count one model call and what it used."""
        with self._lock:
            self.model_calls += 1
            if usage is not None:
                self.tokens += usage.input_tokens + usage.output_tokens
            self.cost += cost or 0.0

    def remaining_seconds(self) -> float | None:
        """Seconds left, or None without a time limit."""
        return max(self.timeout - (time.monotonic() - self.started), 0.0) if self.timeout else None
