"""The event history as the model reads it.

The history is the user's requests and one rolling summary for the events folded so far, then every later event
as `format_event` shows it, numbered as the model reads them (an event it does not read takes no number). An event
is shown the same way at every step, so between two folds the history only grows at its end, and so does the head
of the prompt (`templates.split_prompt`): the provider's prefix cache hits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from anges.config.types import PromptConfig
from anges.prompt import shrinking
from anges.prompt.shrinking import Candidate, whole
from anges.store.attached import Attached
from anges.store.events import EVENT_KINDS, REQUEST_EVENT_TYPES, kind_of
from anges.store.turns import reasoning_after, turn_reasoning
from anges.util.clipping import clip, omission

if TYPE_CHECKING:
    from anges.store.events import Event, EventStream, EventSummary

_HIDDEN = frozenset(name for name, kind in EVENT_KINDS.items() if not kind.in_prompt)
"""Event types the model does not read (the event that follows says it all)."""
_caches: Attached[dict] = Attached()
"""Per stream: the summaries in effect, and the history as formatted so far (see `_Formatted`)."""


def format_event(index: int, event: Event, config: PromptConfig | None = None, reasoning: str | None = None,
                 content: str | None = None) -> str:
    """One event as `## Event N TYPE: LABEL` with its REASONING (`reasoning`, when given: "" leaves it out) and
    CONTENT blocks (`content`, when given, instead of its own). With a `config`, texts are cut to its limits; a
    request is shown whole."""
    content = (event.content or "") if content is None else content
    reasoning = event.reasoning if reasoning is None else reasoning
    if config is not None:
        reasoning = clip(reasoning, config.max_event_chars, config.max_event_lines)
        if event.type not in REQUEST_EVENT_TYPES:
            content = clip(content, config.max_event_chars, config.max_event_lines)
    parts = [f"## Event {index} TYPE: {history_label(event)}"]
    if reasoning:
        parts.append(f"REASONING:\n{reasoning}")
    parts.append(f"CONTENT:\n{content}")
    return "\n".join(parts)


def history_label(event: Event) -> str:
    """What the history calls an event: the name of the action that recorded it, as its guide spells it
    (RUN_SHELL_CMD, TASK_COMPLETE, ...; a 0.1.x `action` is a RUN_SHELL_CMD), else its type in capitals."""
    named = event.data.get("action_type")
    if isinstance(named, str) and named:
        return named.upper()
    return kind_of(event.type).action or event.type.upper()


def format_event_stream(stream: EventStream, config: PromptConfig) -> str:
    """The history: the folded part (requests and the rolling summary), then each later event.

    Both parts are kept beside the stream and the second only grows, so a step formats only its new events.
    """
    formatted = _formatted(stream, config)
    return "\n\n".join(part for part in (formatted.folded, *formatted.blocks) if part) or "(no events yet)"


def shown_count(stream: EventStream, end: int) -> int:
    """How many of events 1..`end` the model reads: the number the history gives the last of them."""
    return _shown_counts(stream.events_list, end)[end]


@dataclass(frozen=True)
class FoldWindow:
    """The events a fold would take now: those shown since the last fold but the newest `recent_events_in_full`
    shown ones (events the model does not read count for nothing)."""

    count: int
    """How many the model reads."""
    chars: int
    """The characters of the history they fill."""
    end: int
    """The last of them (its index in the stream, 1-based); 0 when there is none."""


def fold_window(stream: EventStream, config: PromptConfig) -> FoldWindow:
    """The events a fold would take now, and the room they take (see `FoldWindow`)."""
    formatted = _formatted(stream, config)
    count = max(len(formatted.indexes) - config.recent_events_in_full, 0)
    chars = sum(len(block) + 2 for block in formatted.blocks[:count])
    return FoldWindow(count, chars, formatted.indexes[count - 1] if count else 0)


def shrink_candidates(stream: EventStream, config: PromptConfig) -> list[Candidate]:
    """The results shown in full since the last fold whose block is longer than `shrink_chars`, and that the record
    still has whole (`shrinking.whole`): what each would save, what follows it, and the replies since."""
    formatted = _formatted(stream, config)
    blocks, events = formatted.blocks, stream.events_list
    found: list[Candidate] = []
    large = {position for position, block in enumerate(blocks) if len(block) > config.shrink_chars > 0}
    if not large:
        return found
    first = min(large)
    after = sum(len(block) + 2 for block in blocks[first + 1:])
    turns = sum("usage" in event.data for event in events[formatted.indexes[first]:])
    for position in range(first, len(blocks)):
        index = formatted.indexes[position]
        saved = _saving(formatted, events, position, config) if position in large else 0
        if saved > 0:
            found.append(Candidate(index, saved, after, turns))
        if position + 1 < len(blocks):
            after -= len(blocks[position + 1]) + 2
            turns -= sum("usage" in event.data for event in events[index:formatted.indexes[position + 1]])
    return found


def _saving(formatted: _Formatted, events: list, position: int, config: PromptConfig) -> int:
    """What shrinking the event shown at `position` would save (measured once); 0 when it cannot shrink."""
    index = formatted.indexes[position]
    if index not in formatted.savings:
        event = events[index - 1]
        saved = 0
        if index not in formatted.shrunk and shrinking.shrinkable(event) and whole(event) != (None, ""):
            smaller = format_event(formatted.numbers[position], event, config, formatted.reasonings[position],
                                   shrinking.shrunk(event, "", config))
            saved = len(formatted.blocks[position]) - len(smaller)
        formatted.savings[index] = saved
    return formatted.savings[index]


def folded_until(stream: EventStream) -> int:
    """The last event (1-based) a summary covers; 0 when none does."""
    summaries = covering_summaries(stream)
    return summaries[-1].end_event_idx if summaries else 0


def format_events(stream: EventStream, start: int, end: int, config: PromptConfig) -> str:
    """Events `start`..`end` (1-based, inclusive) as the history shows them: a summary that falls inside the range
    stands in for its events, after the requests among them."""
    events = stream.events_list
    numbers = _shown_counts(events, end)
    blocks: list[str] = []
    position = start
    for summary in covering_summaries(stream):
        if summary.start_event_idx < position or summary.end_event_idx > end:
            continue
        blocks.extend(_format_range(events, position, summary.start_event_idx - 1, config, numbers))
        blocks.extend(_format_summary(events, summary, config, numbers))
        position = summary.end_event_idx + 1
    blocks.extend(_format_range(events, position, end, config, numbers))
    return "\n\n".join(blocks)


def covering_summaries(stream: EventStream) -> list[EventSummary]:
    """The summaries in effect, in order: where ranges overlap, the one starting first (and widest) wins, so
    each rolling summary replaces the ones before it."""
    summaries = stream.event_summaries_list
    key = (len(summaries), id(summaries[-1]) if summaries else None)
    cache = _cache(stream)
    cached = cache.get("covering_summaries")
    if cached is None or cached[0] != key:
        cached = cache["covering_summaries"] = (key, _choose_summaries(summaries))
    return cached[1]


@dataclass
class _Formatted:
    """The history of one stream as formatted so far: what the summaries cover, then one block per later event."""

    key: tuple
    folded: str
    settled: int
    """The last event the summaries cover."""
    indexes: list[int] = field(default_factory=list)
    blocks: list[str] = field(default_factory=list)
    numbers: list[int] = field(default_factory=list)
    reasonings: list[str] = field(default_factory=list)
    """Of each block: the event's number, and the reasoning it shows."""
    shrunk: set[int] = field(default_factory=set)
    """The events (stream indexes) shown shrunk (see `anges.prompt.shrinking`)."""
    savings: dict[int, int] = field(default_factory=dict)
    """What shrinking an event would save, once measured."""
    upto: int = 0
    """The last event formatted."""
    shown: int = 0
    """How many of the events formatted the model reads (the number of the last one shown)."""
    reasoning: str = ""
    """The reasoning in effect after event `upto` (see `anges.store.events.reasoning_after`)."""


def _formatted(stream: EventStream, config: PromptConfig) -> _Formatted:
    events = stream.events_list
    settled = folded_until(stream)
    key = (len(stream.event_summaries_list), settled, config)
    cache = _cache(stream)
    formatted = cache.get("history")
    if formatted is None or formatted.key != key or formatted.upto > len(events):
        formatted = cache["history"] = _Formatted(key, format_events(stream, 1, settled, config), settled,
                                                  upto=settled, shown=_shown_counts(events, settled)[settled])
    for index in range(formatted.upto + 1, len(events) + 1):
        event = events[index - 1]
        if event.type == shrinking.SHRINKS:
            _shrink(formatted, events, event.data.get("events") or [], config)
        elif event.type not in _HIDDEN:
            formatted.shown += 1
            reasoning = turn_reasoning(event, formatted.reasoning)
            formatted.indexes.append(index)
            formatted.numbers.append(formatted.shown)
            formatted.reasonings.append(reasoning)
            formatted.blocks.append(format_event(formatted.shown, event, config, reasoning))
        formatted.reasoning = reasoning_after(event, formatted.reasoning)
    formatted.upto = len(events)
    return formatted


def _shrink(formatted: _Formatted, events: list, batch: list, config: PromptConfig) -> None:
    """Show the events of a `results_shrunk` batch shrunk from now on (those folded meanwhile need nothing)."""
    positions = {index: position for position, index in enumerate(formatted.indexes)}
    for index, path in batch:
        position = positions.get(index)
        if position is not None and isinstance(path, str):
            formatted.blocks[position] = format_event(formatted.numbers[position], events[index - 1], config,
                                                      formatted.reasonings[position],
                                                      shrinking.shrunk(events[index - 1], path, config))
            formatted.shrunk.add(index)
            formatted.savings[index] = 0


def _cache(stream: EventStream) -> dict:
    cache = _caches.get(stream)
    if cache is None:
        cache = {}
        _caches.set(stream, cache)
    return cache


def _choose_summaries(summaries: list[EventSummary]) -> list[EventSummary]:
    chosen: list = []
    for summary in sorted(summaries, key=lambda s: (s.start_event_idx, -s.end_event_idx)):
        if not chosen or summary.start_event_idx > chosen[-1].end_event_idx:
            chosen.append(summary)
    return chosen


def _shown_counts(events: list, end: int) -> list[int]:
    """For each n in 0..`end`: how many of events 1..n the model reads."""
    counts = [0]
    for event in events[:end]:
        counts.append(counts[-1] + (event.type not in _HIDDEN))
    return counts


def _format_range(events: list, start: int, end: int, config: PromptConfig, numbers: list[int]) -> list[str]:
    """Events `start`..`end` in full; the first shown one has its reasoning, each later one only a new reasoning."""
    blocks, previous = [], ""
    for index in range(start, end + 1):
        event = events[index - 1]
        if event.type not in _HIDDEN:
            blocks.append(format_event(numbers[index], event, config, turn_reasoning(event, previous)))
        previous = reasoning_after(event, previous)
    return blocks


def _format_summary(events: list, summary: EventSummary, config: PromptConfig, numbers: list[int]) -> list[str]:
    """The requests a summary covers (the newest that fit `max_folded_request_chars`, the latest always), then
    the summary itself."""
    requests = [i for i in range(summary.start_event_idx, summary.end_event_idx + 1)
                if events[i - 1].type in REQUEST_EVENT_TYPES]
    shown: list[str] = []
    room = config.max_folded_request_chars
    for index in reversed(requests):
        block = format_event(numbers[index], events[index - 1], config)
        if shown and len(block) > room:
            break
        shown.insert(0, block)
        room -= len(block)
    left_out = len(requests) - len(shown)
    marker = [omission(left_out, "earlier requests (in the summary)").strip()] if left_out else []
    heading = f"## Summary of Events {numbers[summary.start_event_idx - 1] + 1} to {numbers[summary.end_event_idx]}"
    return [*marker, *shown, f"{heading}\n{summary.summary}"]
