"""When and how the history is folded into its one rolling summary.

A fold asks the model to rewrite the history from the first event up to a point (the requests, the summary so
far and the events since) as one summary, which then stands in for all of it. It happens before a model call,
only when the events waiting to be folded fill the window, so the prompt's size stays flat and a finished
task costs no summary call.
"""

from __future__ import annotations

from anges.config.types import PromptConfig
from anges.exceptions import ModelReplyError
from anges.prompt.history import folded_until, format_events, history_window, shown_count
from anges.prompt.parsing import strip_thinking
from anges.prompt.templates import render_template
from anges.store.events import EventStream, EventSummary
from anges.util.clipping import clip

SUMMARY_WORDS = 400


def fold_due(stream: EventStream, config: PromptConfig, threshold: int) -> int | None:
    """The last event a fold should cover now, or None when the window is not full: a fold would take
    `threshold` events (0 = no count) or more than `history_window_chars` characters of history."""
    count, chars = history_window(stream, config)
    full = (threshold > 0 and count >= threshold) or 0 < config.history_window_chars < chars
    return fold_end(stream, config) if full else None


def fold_end(stream: EventStream, config: PromptConfig) -> int | None:
    """The last event a fold now would cover (all but the newest `recent_events_in_full`); None if it adds none."""
    end = len(stream.events_list) - config.recent_events_in_full
    return end if end > folded_until(stream) else None


def fold_prompt(stream: EventStream, end: int, config: PromptConfig, keep: str = "") -> str:
    """The prompt that asks the model for the rolling summary of events 1..`end` (`keep`: what the user asked it
    to keep, `/compact`)."""
    return render_template("summary.j2", config.template_dir, end=shown_count(stream, end), max_words=SUMMARY_WORDS,
                           has_summary=folded_until(stream) > 0, history=format_events(stream, 1, end, config),
                           keep=keep)


def fold(model, stream: EventStream, end: int, reason: str, config: PromptConfig, keep: str = "") -> EventSummary:
    """Ask the model for the rolling summary of events 1..`end` (cut to `max_summary_chars`); model errors (and
    FormatError for a reply cut off while thinking) propagate to the caller."""
    reply = model(fold_prompt(stream, end, config, keep))
    text = strip_thinking(reply.strip()) if isinstance(reply, str) else ""
    if not text:
        raise ModelReplyError("the model returned an empty summary", kind="empty")
    usage = getattr(reply, "usage", None)
    data = {"reason": reason, "usage": usage.to_dict()} if usage else {"reason": reason}
    return EventSummary("rolling", 1, end, clip(text, config.max_summary_chars), data=data)
