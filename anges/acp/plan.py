"""The orchestrator's plan tracker (the first list in its reasoning) as the entries of an ACP `plan` update."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from acp.schema import PlanEntryStatus

_BOXED = re.compile(r"^\s*(?:(?:\d+[.)]|[-*•])\s+)?\[(?P<box>[ xX~/-])\]\s*(?P<text>\S.*?)\s*$")
_LISTED = re.compile(r"^\s*(?:\d+[.)]|[-*•])\s+(?P<text>\S.*?)\s*$")
_DONE = re.compile(r"\((?:done|completed?|finished)\b[^)]*\)|✓|✅|\bDONE\b", re.IGNORECASE)
_ACTIVE = re.compile(r"\((?:in progress|running|current|now|doing)\b[^)]*\)|⏳|\bIN PROGRESS\b", re.IGNORECASE)
_BOX_STATUS: dict[str, PlanEntryStatus] = {"x": "completed", "X": "completed", "~": "in_progress",
                                           "/": "in_progress", "-": "in_progress", " ": "pending"}


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
