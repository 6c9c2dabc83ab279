"""When and how the history is condensed into summaries."""

from __future__ import annotations

from anges.config import PromptConfig
from anges.events import REQUEST_EVENT_TYPES, EventStream, EventSummary
from anges.exceptions import ModelReplyError
from anges.parsing import strip_thinking
from anges.prompt import covering_summaries, format_events, render_template

SUMMARY_WORDS = 300


def unsummarized_segments(stream: EventStream, keep_recent: int) -> list[tuple[int, int]]:
    """Maximal runs of events (1-based, inclusive) that no summary covers and no user request interrupts.

    The last `keep_recent` events are left out: the model needs them in full.
    """
    covered_until = {s.start_event_idx: s.end_event_idx for s in covering_summaries(stream)}
    last = len(stream.events_list) - keep_recent
    segments: list[tuple[int, int]] = []
    start = None
    index = 1
    while index <= last:
        if index in covered_until:
            start = _close(segments, start, index - 1)
            index = covered_until[index] + 1
            continue
        if stream.events_list[index - 1].type in REQUEST_EVENT_TYPES:
            start = _close(segments, start, index - 1)
        elif start is None:
            start = index
        index += 1
    _close(segments, start, last)
    return segments


def _close(segments: list, start: int | None, end: int) -> None:
    if start is not None and end >= start:
        segments.append((start, end))


def action_range_due(stream: EventStream, threshold: int, keep_recent: int) -> tuple[int, int] | None:
    """The newest unsummarized run of actions once it reaches `threshold` events (a backward scan)."""
    if threshold <= 0:
        return None
    summaries = covering_summaries(stream)
    floor = summaries[-1].end_event_idx if summaries else 0
    end = len(stream.events_list) - keep_recent
    start = end
    while start > floor and start - 1 >= 1 and stream.events_list[start - 1].type not in REQUEST_EVENT_TYPES:
        start -= 1
    start += 1
    return (start, end) if end - start + 1 >= threshold else None


def task_range(stream: EventStream) -> tuple[int, int] | None:
    """The events of the task about to complete: from after its request to the latest event."""
    events = stream.events_list
    for index in range(len(events), 0, -1):
        if events[index - 1].type in REQUEST_EVENT_TYPES:
            start, end = index + 1, len(events)
            return (start, end) if end - start >= 1 else None
    return None


def summary_prompt(stream: EventStream, start: int, end: int, reason: str, config: PromptConfig) -> str:
    """The prompt that asks the model to summarize events `start`..`end`."""
    return render_template("summary.j2", config.template_dir, start=start, end=end, reason=reason,
                           max_words=SUMMARY_WORDS, events=format_events(stream, start, end, config))


def make_summary(model, stream: EventStream, start: int, end: int, reason: str, config: PromptConfig) -> EventSummary:
    """Ask the model for a summary of events `start`..`end`; model errors (and FormatError for a reply cut off
    while thinking) propagate to the caller."""
    reply = model(summary_prompt(stream, start, end, reason, config))
    text = strip_thinking(reply.strip()) if isinstance(reply, str) else ""
    if not text:
        raise ModelReplyError("the model returned an empty summary", kind="empty")
    usage = getattr(reply, "usage", None)
    data = {"reason": reason, "usage": usage.to_dict()} if usage else {"reason": reason}
    kind = "task_completion" if reason == "task_completion" else "actions"
    return EventSummary(kind, start, end, text, data=data)
