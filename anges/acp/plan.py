"""The session's plan as the entries of an ACP `plan` update: the top agent's UPDATE_PLAN, or for an orchestrator
that keeps none, the first list of its reasoning (its plan tracker before UPDATE_PLAN existed)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from acp.schema import PlanEntry, PlanEntryStatus

    from anges.store.plans import Plan

_BOXED = re.compile(r"^\s*(?:(?:\d+[.)]|[-*•])\s+)?\[(?P<box>[ xX~/-])\]\s*(?P<text>\S.*?)\s*$")
_LISTED = re.compile(r"^\s*(?:\d+[.)]|[-*•])\s+(?P<text>\S.*?)\s*$")
_DONE = re.compile(r"\((?:done|completed?|finished)\b[^)]*\)|✓|✅|\bDONE\b", re.IGNORECASE)
_ACTIVE = re.compile(r"\((?:in progress|running|current|now|doing)\b[^)]*\)|⏳|\bIN PROGRESS\b", re.IGNORECASE)
_STATUSES: dict[str, PlanEntryStatus] = {"completed": "completed", "in_progress": "in_progress", "pending": "pending"}
_BOX_STATUS: dict[str, PlanEntryStatus] = {"x": "completed", "X": "completed", "~": "in_progress",
                                           "/": "in_progress", "-": "in_progress", " ": "pending"}


class SessionPlan:
    """The plan the session shows: the entries last sent, and whether the top agent keeps one with UPDATE_PLAN (then
    its reasoning is no longer read for one)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, PlanEntryStatus]] = []
        self.explicit = False

    def updated(self, plan: Plan) -> list[PlanEntry] | None:
        """The entries of the top agent's new plan; None when they are what was sent last."""
        self.explicit = True
        return self._changed([(step.step, _STATUSES.get(step.status, "pending")) for step in plan.steps])

    def from_reasoning(self, reasoning: str) -> list[PlanEntry] | None:
        """The entries of an orchestrator's plan tracker in its reasoning, when it keeps no plan and it changed."""
        return None if self.explicit else self._changed(plan_entries(reasoning or "")) or None

    def _changed(self, entries: list[tuple[str, PlanEntryStatus]]) -> list[PlanEntry] | None:
        if entries == self.sent:
            return None
        from acp import plan_entry

        self.sent = entries
        return [plan_entry(step, status=status) for step, status in entries]


def child_progress(plan: Plan) -> str:
    """How a child's plan shows on the call that runs it: `Its plan: 3 of 5 steps done (now: ...).`"""
    now = f" (now: {plan.current.step})" if plan.current is not None else ""
    return f"Its plan: {plan.progress()}{now}."


def plan_entries(text: str) -> list[tuple[str, PlanEntryStatus]]:
    """(step, status) of each item of the first list in `text` (numbered, bulleted or [ ] boxes); a list of one
    item is not a plan. Status: completed, in_progress or pending, from a box or words like (done), (in progress)."""
    entries: list[tuple[str, PlanEntryStatus]] = []
    for line in text.splitlines():
        boxed = _BOXED.match(line)
        listed = boxed or _LISTED.match(line)
        if listed:
            step = listed["text"]
            status = _BOX_STATUS[boxed["box"]] if boxed else _status(step)
            entries.append((step, status))
        elif entries and line.strip():
            break
    return entries if len(entries) > 1 else []


def _status(step: str) -> PlanEntryStatus:
    if _DONE.search(step):
        return "completed"
    if _ACTIVE.search(step):
        return "in_progress"
    return "pending"
