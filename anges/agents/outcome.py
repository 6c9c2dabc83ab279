"""How one request ended: its status, its final event, the answer, and what it used (children included)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from anges.agents.budget import cache_hit_ratio
from anges.store.events import StepUsage

if TYPE_CHECKING:
    from anges.store.events import Event, EventStream


@dataclass
class Outcome:
    """How one request ended, and what it recorded (children included)."""

    stream: EventStream
    request: str
    status: str
    """completed, answered, help_needed or interrupted."""
    events: list[tuple[int, EventStream, Event]]
    """(depth, stream, event) of every event this request recorded, children in place."""
    duration: float

    @property
    def final(self) -> Event | None:
        """The last event of the top-level stream (the answer, help request or stop)."""
        return self.stream.events_list[-1] if self.stream.events_list else None

    @property
    def stop_reason(self) -> str | None:
        """Why the run was stopped (interrupt, timeout, model_setup, ...); None when it was not."""
        final = self.final
        return final.data.get("reason") if final is not None and final.type == "task_interrupted" else None

    @property
    def answer(self) -> str | None:
        """The completion report, text answer or help request; None when the run was stopped."""
        final = self.final
        return final.content if final is not None and self.status != "interrupted" else None

    def usage(self) -> dict:
        """Tokens (and the share of input read from the provider's cache), model calls and cost of the request,
        children included."""
        total: dict[str, Any] = {"input_tokens": 0, "output_tokens": 0, "cached_tokens": 0, "model_calls": 0,
                                 "estimated": False}
        cost = None
        for usage in filter(None, (StepUsage.of(event.data) for _, _, event in self.events)):
            for key in ("input_tokens", "output_tokens", "cached_tokens", "model_calls"):
                total[key] += getattr(usage, key)
            total["estimated"] = total["estimated"] or usage.estimated
            if usage.cost is not None:
                cost = (cost or 0.0) + usage.cost
        if cost is not None:
            total["cost"] = round(cost, 6)
        total["cache_hit_ratio"] = cache_hit_ratio(total["cached_tokens"], total["input_tokens"], total["estimated"])
        return total
