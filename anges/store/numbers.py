"""The one numbering of a stream's events: the number the model's history gives each event it reads.

Events are numbered 1, 2, 3, ... in the order they were recorded, counting only the events the model reads
(`EventKind.in_prompt`): an approval request, a hook's run, a failed summary or a prompt over the window takes no
number, so the history has no gaps. Every view and command that names an event uses these numbers too: the history
and the `workspace_restored` text the model reads, `/steps`, `/diff N`, `/undo N`, `anges diff --step`,
`anges undo --to`, `anges stats` and the web chat. A number never changes once given (streams only grow at their end).

A stream's *position* of an event (1-based, every event counted) is its place in the file, what checkpoints and
summaries record; `count_upto` gives the number at a position.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from anges.store.attached import Attached
from anges.store.events import EVENT_KINDS

if TYPE_CHECKING:
    from anges.store.events import Event, EventStream

UNNUMBERED = frozenset(name for name, kind in EVENT_KINDS.items() if not kind.in_prompt)
"""Event types the model does not read (what follows says it all): they take no number."""
_counts: Attached[list[int]] = Attached()
"""Per stream: `counts[p]` is how many of its first `p` events are numbered (kept as the stream grows)."""


def numbered(event: Event) -> bool:
    """Whether `event` has a number (the model reads it)."""
    return event.type not in UNNUMBERED


def counts(events: Sequence[Event], end: int) -> list[int]:
    """For each position p in 0..`end`: how many of events 1..p are numbered (the number of the last of them)."""
    found = [0]
    for event in events[:end]:
        found.append(found[-1] + numbered(event))
    return found


def count_upto(stream: EventStream, position: int) -> int:
    """How many of the stream's events 1..`position` are numbered: the number of the event at `position` when it has
    one, else of the last before it that has. Kept beside the stream, so a growing stream is counted once."""
    events = stream.events_list
    known = _counts.get(stream)
    if known is None or len(known) - 1 > len(events):  # a new stream, or one that was cut (an old-format rewrite)
        known = [0]
        _counts.set(stream, known)
    for event in events[len(known) - 1:]:
        known.append(known[-1] + numbered(event))
    return known[max(0, min(position, len(events)))]
