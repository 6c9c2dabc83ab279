"""Turns: every event of one reply carries the reply's reasoning, and each view shows it once, with the first."""

from __future__ import annotations

from typing import TYPE_CHECKING

from anges.store.events import REQUEST_EVENT_TYPES

if TYPE_CHECKING:
    from anges.store.events import Event


def turn_reasoning(event: Event, previous: str) -> str:
    """The reasoning a view shows with `event`: "" when it is the `previous` one (see `reasoning_after`)."""
    return "" if event.reasoning == previous else event.reasoning


def reasoning_after(event: Event, previous: str) -> str:
    """The reasoning in effect after `event`, given the one in effect before it: a request starts a new turn;
    events without a reasoning of their own (approvals, bookkeeping) leave it as it was."""
    if event.type in REQUEST_EVENT_TYPES:
        return ""
    if not event.reasoning or event.type == "child_agent_running":  # whose reasoning field holds JSON (0.1.x)
        return previous
    return event.reasoning
