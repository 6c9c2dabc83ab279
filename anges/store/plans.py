"""The plan an agent keeps (UPDATE_PLAN): its steps and their status, read from a `plan_updated` event's facts by
every view and by the prompt's tail."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from anges.store.results import Recorded

STATUSES = ("pending", "in_progress", "completed")
MARKS = {"completed": "✓", "in_progress": "▸", "pending": "○"}
"""How views tick a step off."""


@dataclass(frozen=True)
class PlanStep:
    """One step of a plan."""

    step: str
    status: str

    @property
    def done(self) -> bool:
        return self.status == "completed"


@dataclass(frozen=True)
class Plan:
    """The whole plan as an UPDATE_PLAN set it (each update replaces the list)."""

    steps: tuple[PlanStep, ...]

    @classmethod
    def of(cls, event: Recorded) -> Plan | None:
        """The plan a `plan_updated` event records, or None for any other event."""
        items = event.data.get("plan") if event.type == "plan_updated" else None
        if not isinstance(items, list):
            return None
        return cls(tuple(PlanStep(str(item.get("step", "")), str(item.get("status", "pending")))
                         for item in items if isinstance(item, dict)))

    @property
    def done(self) -> int:
        return sum(step.done for step in self.steps)

    @property
    def total(self) -> int:
        return len(self.steps)

    @property
    def open_steps(self) -> list[PlanStep]:
        """The steps not completed yet."""
        return [step for step in self.steps if not step.done]

    @property
    def current(self) -> PlanStep | None:
        """The step in progress (the first), else the first open one."""
        return next((s for s in self.steps if s.status == "in_progress"), None) or next(iter(self.open_steps), None)

    def progress(self) -> str:
        """`3 of 5 steps done`."""
        return f"{self.done} of {self.total} step{'' if self.total == 1 else 's'} done"

    def to_data(self) -> list[dict]:
        """The `plan` fact: [{"step", "status"}, ...]."""
        return [{"step": step.step, "status": step.status} for step in self.steps]


def current_plan(events: Sequence[Recorded]) -> Plan | None:
    """The latest plan of a stream's events, if there is one."""
    for event in reversed(events):
        if (plan := Plan.of(event)) is not None:
            return plan
    return None


def carried_plan(events: Sequence[Recorded]) -> Plan | None:
    """The plan a new request starts with: the latest one while it has open steps (a finished plan is over)."""
    plan = current_plan(events)
    return plan if plan is not None and plan.open_steps else None


def checklist(steps: Iterable[PlanStep]) -> list[str]:
    """`✓ step`, `▸ step`, `○ step`: one line per step."""
    return [f"{MARKS.get(step.status, '○')} {step.step}" for step in steps]
