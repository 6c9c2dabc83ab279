"""Old bulky results, shrunk in batches.

A command's long result, a child agent's long brief or report rides along in every later prompt. Once the model has
read it and built on it (`SHRINK_AFTER` replies later), it may shrink to its head and tail and the path of a file
that holds it whole. Shrinking changes the history in its middle, and a provider's prompt cache reads no further than
the first change: so results shrink in batches, only when what a batch saves is at least what follows its first
result (that part is sent again at full price once). A batch is recorded as a `results_shrunk` event, which the
model does not read: the history shows the same at every later step, and when the stream is resumed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from anges.store.events import ChildReturn
from anges.store.results import ShellRun
from anges.util.clipping import clip

if TYPE_CHECKING:
    from anges.config.types import PromptConfig
    from anges.store.events import Event

SHRINKS = "results_shrunk"
"""The event type that records a batch: `data["events"]` lists `[index, path]` pairs."""
SHRINK_AFTER = 2
"""Replies of the model after a result (one read it, the next built on it) before it may shrink."""
KEPT_CHARS, KEPT_LINES = 1200, 12
"""What a shrunk result keeps of its output (a brief or a report: of its text), head and tail."""
BREAK_EVEN = 1.0
"""A batch shrinks when what it saves is at least this many times what follows its first result."""
CHILD_STARTS = ("new_child_agent", "resume_child_agent")


@dataclass(frozen=True)
class Candidate:
    """A result in the history that could shrink now."""

    index: int
    """Its event's index in the stream (1-based)."""
    saved: int
    """Characters it would save."""
    after: int
    """Characters of the history after it."""
    turns: int
    """Replies of the model since it was recorded."""


def shrinkable(event: Event) -> bool:
    """Whether `event` is of a kind that shrinks: a command's result, a child's brief or report."""
    return ShellRun.of(event) is not None or event.type in CHILD_STARTS or ChildReturn.of(event) is not None


def whole(event: Event) -> tuple[str | None, str]:
    """Where `event`'s result is whole: the path of a file that holds it (None when there is none yet) and the text
    to save in one otherwise ("" when the record no longer has it whole: it cannot shrink)."""
    run = ShellRun.of(event)
    if run is None:
        saved = event.data.get("report_path")
        return (saved, "") if isinstance(saved, str) and os.path.isfile(saved) else (None, event.content)
    if run.cut:
        return (run.output_path, "") if run.output_path and os.path.isfile(run.output_path) else (None, "")
    return None, run.output()


def shrunk(event: Event, path: str, config: PromptConfig) -> str:
    """`event`'s content as the history shows it once shrunk: a command's line and how it ended, then the head and
    tail of its output (a brief or report: of its text; at most a third of `shrink_chars`), then where the whole
    is."""
    content = event.content or ""
    head, body = "", content
    if ShellRun.of(event) is not None:
        starts = [at for at in (content.find("\nSTDOUT:\n"), content.find("\nSTDERR:\n")) if at >= 0]
        head, body = (content[:min(starts)], content[min(starts):]) if starts else (content, "")
    kept = clip(body, min(KEPT_CHARS, config.shrink_chars // 3), KEPT_LINES)
    return f"{head}{kept}\nSHRUNK: only the start and the end are shown here; the whole is in {path}."


def batch(candidates: list[Candidate], config: PromptConfig) -> list[Candidate]:
    """The results to shrink now: of the candidates old enough, the most (from some point of the history on) that
    together save at least `BREAK_EVEN` times what follows the first of them; [] when none do."""
    if config.shrink_chars <= 0:
        return []
    ready = [c for c in candidates if c.turns >= SHRINK_AFTER and c.saved > 0]
    for start, first in enumerate(ready):
        if sum(c.saved for c in ready[start:]) >= BREAK_EVEN * first.after:
            return ready[start:]
    return []
