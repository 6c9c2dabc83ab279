"""When and how the history is folded into its one rolling summary.

A fold asks the model to rewrite the history from the first event up to a point (the requests, the summary so
far and the events since) as one summary, which then stands in for all of it. It happens before a model call,
only when the events waiting to be folded fill the window, so the prompt's size stays flat and a finished
task costs no summary call.

The fold's prompt is the agent's own prompt (the fixed part and the whole history, byte for byte as the next step
would show them) with the request for the summary where the tail would be: the provider's cache serves it up to the
end of the history. The request names the events that stay in full after the summary.
"""

from __future__ import annotations

from anges.config.types import PromptConfig
from anges.exceptions import ModelReplyError
from anges.prompt.history import fold_window, folded_until, shown_count
from anges.prompt.parsing import strip_thinking
from anges.prompt.templates import render_template
from anges.store.events import Event, EventStream, EventSummary
from anges.store.numbers import count_upto
from anges.util.clipping import clip

SUMMARY_WORDS = 400
FOLDED = "history_folded"
"""The event that shows a fold in every view (the model does not read it: the summary itself is in its history)."""


def fold_due(stream: EventStream, config: PromptConfig, threshold: int) -> int | None:
    """The last event a fold should cover now, or None when the window is not full: a fold would take more than
    `history_window_chars` characters of history, or `threshold` events the model reads (0 = no count)."""
    window = fold_window(stream, config)
    full = 0 < config.history_window_chars < window.chars or (threshold > 0 and window.count >= threshold)
    return window.end if full and window.end else None


def fold_end(stream: EventStream, config: PromptConfig) -> int | None:
    """The last event a fold now would cover (all but the newest `recent_events_in_full` the model reads); None if
    it adds none."""
    return fold_window(stream, config).end or None


def fold_request(stream: EventStream, end: int, config: PromptConfig, keep: str = "") -> str:
    """What asks the model, after its history, for the rolling summary of events 1..`end` (and names the events that
    stay in full; `keep`: what the user asked it to keep, `/compact`)."""
    last, shown = shown_count(stream, end), shown_count(stream, len(stream.events_list))
    return render_template("summary.j2", config.template_dir, end=last, kept=(last + 1, shown) if shown > last else (),
                           max_words=SUMMARY_WORDS, has_summary=folded_until(stream) > 0, keep=keep)


def fold(model, prompt: str, end: int, reason: str, config: PromptConfig) -> EventSummary:
    """Ask the model for the rolling summary of events 1..`end` with `prompt` (cut to `max_summary_chars`); model
    errors (and FormatError for a reply cut off while thinking) propagate to the caller."""
    reply = model(prompt)
    text = strip_thinking(reply.strip()) if isinstance(reply, str) else ""
    if not text:
        raise ModelReplyError("the model returned an empty summary", kind="empty")
    usage = getattr(reply, "usage", None)
    data = {"reason": reason, "usage": usage.to_dict()} if usage else {"reason": reason}
    return EventSummary("rolling", 1, end, clip(text, config.max_summary_chars), data=data)


def fold_span(stream: EventStream, first: int, end: int) -> str:
    """`events 2–14`: the events at positions `first`..`end` by their numbers (the model's and every view's)."""
    low, high = count_upto(stream, first - 1) + 1, count_upto(stream, end)
    return f"events {low}–{high}" if high > low else f"event {high}"


def folded_event(stream: EventStream, summary: EventSummary, first: int) -> Event:
    """The `history_folded` event of a fold just kept: the events it took in (from position `first`, the first no
    summary covered before), why, and the summary's text."""
    span, chars = fold_span(stream, first, summary.end_event_idx), len(summary.summary)
    data: dict = {"events": span, "start_position": first, "end_position": summary.end_event_idx, "chars": chars}
    data.update((key, summary.data[key]) for key in ("reason", "keep") if key in summary.data)
    return Event(FOLDED, content=summary.summary, message=f"folded {span} into the summary ({chars:,} characters)",
                 data=data)
