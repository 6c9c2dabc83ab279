"""One request being run: where it started, its budget, ledger and action context, and its limits."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from anges.agents.record import jsonable
from anges.exceptions import RunStopped
from anges.store.events import RETURN_TO_PARENT_EVENT_TYPES, Event, EventStream, interrupted_event, is_step
from anges.store.plans import Plan, carried_plan

if TYPE_CHECKING:
    from anges.actions.base import ActionContext
    from anges.agents.budget import Budget, Ledger
    from anges.agents.completion import CompletionCheck
    from anges.agents.history import History
    from anges.config.types import AgentConfig

T = TypeVar("T")
_KEY = json.JSONEncoder(sort_keys=True, default=str)
"""An action's arguments as one string, to tell a repeat (one encoder, not one per step as `json.dumps` makes)."""


@dataclass
class RunState:
    """The request being run. The model-call limit, like every other budget limit, is counted by `budget`."""

    limits: AgentConfig
    budget: Budget
    ledger: Ledger
    context: ActionContext
    history: History
    completion: CompletionCheck
    """Judges each TASK_COMPLETE before it takes effect (`anges.agents.completion`)."""
    last_action: str = ""
    repeats: int = 0
    steps: int = 0
    """The run's events that are steps (`events.is_step`: not approvals before an action, not bookkeeping)."""
    ending_jobs: Callable[[], list[dict]] = list
    """The background jobs still running that the end of the run will end (pid and command)."""
    plan: Plan | None = None
    """The plan the agent works to (UPDATE_PLAN): its latest, or an earlier request's that still has open steps."""

    def __post_init__(self) -> None:
        self.plan = carried_plan(self.history.stream.events_list)

    def note(self, event: Event) -> None:
        """Take a new event into the run's accounts: the usage it carries, whether it is a step, the plan it sets,
        and on the event that ends the run (an answer, a stop), the jobs the run ends with it (`ended_jobs`)."""
        self.ledger.attach(event)
        self.steps += is_step(event)
        self.plan = Plan.of(event) or self.plan
        ended = self.ending_jobs() if event.type in RETURN_TO_PARENT_EVENT_TYPES else []
        if ended:
            event.data["ended_jobs"] = ended

    def check(self) -> None:
        """Raise `RunStopped` when the budget or the step limit is reached."""
        self.budget.check()
        limit = self.limits.max_number_of_events_to_exhaust
        if limit and self.steps >= limit:
            steps = "1 step" if limit == 1 else f"{limit} steps"
            raise RunStopped("event_limit", f"the run reached {steps} since the last request", limit=limit)

    def count_repeats(self, args: dict) -> None:
        """Raise `RunStopped` when the same action comes `max_repeated_actions` times in a row."""
        key = _KEY.encode(args)
        self.repeats = self.repeats + 1 if key == self.last_action else 1
        self.last_action = key
        limit = self.limits.max_repeated_actions
        if limit and self.repeats >= limit:
            raise RunStopped("repetition", f"the same action was requested {self.repeats} times in a row",
                             action=args)


def of_run(value: T | None) -> T:
    """A part of the agent's current run (its state, stream or safety); a clear error before its first run."""
    if value is None:
        raise RuntimeError("the agent has not started a run yet: call run_with_new_request() first")
    return value


def explained(stop: RunStopped, check_limits: Callable[[], None]) -> RunStopped:
    """A stop noticed while waiting (on an approval, say) as the limits tell it: which interrupt, or the time."""
    if stop.reason == "interrupt":
        try:
            check_limits()
        except RunStopped as precise:
            return precise
    return stop


def abandoned_run(stream: EventStream) -> Event | None:
    """The `task_interrupted` event for a stream whose last run's process died before it could record how the run
    ended (call it holding the stream's run lock); None when the last run ended properly."""
    from anges.store.event_store import stream_status

    if stream_status(stream.events_list) != "running":
        return None
    content = ("The previous run on this stream ended without finishing: its process exited or was killed "
               "before it could record how the run ended.")
    return Event("task_interrupted", content=content, message=content, data={"reason": "abandoned"})


def stop_event(stop: RunStopped) -> Event:
    """The `task_interrupted` event that records how a run stopped."""
    return interrupted_event(stop.reason, str(stop), **jsonable(stop.details))


def saved_notes(settings: dict) -> list[str]:
    """The user's notes a stream's settings remember (anges 0.1.x kept one string)."""
    notes = settings.get("notes") or []
    return [notes] if isinstance(notes, str) else list(notes)
