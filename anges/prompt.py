"""Prompt rendering: the Jinja2 environment and the event history as the model reads it."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from anges.config import PromptConfig, resource_path

if TYPE_CHECKING:
    import jinja2

    from anges.events import Event, EventStream

HIDDEN_EVENT_TYPES = ("summary_failed", "approval_requested")  # the decision that follows says it all


@lru_cache(maxsize=8)
def environment(template_dir: str = "") -> jinja2.Environment:
    """The template environment: the user's `template_dir` first, then the packaged templates."""
    import jinja2

    search = [template_dir] if template_dir else []
    search.append(str(resource_path("prompt_templates")))
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(search),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=False,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render_template(name: str, template_dir: str = "", **context) -> str:
    """Render one template (a file name under the template search path, or inline source with `{{`)."""
    env = environment(template_dir)
    template = env.from_string(name) if "{{" in name or "{%" in name else env.get_template(name)
    return template.render(**context)


def truncate(text: str, max_lines: int, max_chars: int) -> str:
    """Keep the head and tail of `text` within both limits; the mark says how much was cut."""
    if len(text) <= max_chars and text.count("\n") < max_lines:
        return text
    keep_lines, keep_chars = max(max_lines // 2, 1), max(max_chars // 2, 1)
    head = "\n".join(text[:keep_chars].split("\n")[:keep_lines])
    tail = "\n".join(text[-keep_chars:].split("\n")[-keep_lines:])
    cut = text[len(head): len(text) - len(tail)]
    if cut.startswith("\n") and cut.endswith("\n") and len(cut) > 1:
        mark = f"{cut.count(chr(10)) - 1} whole lines ({len(cut) - 2} characters) cut"
    else:
        mark = f"{len(cut)} characters cut"
    return f"{head}\n... [{mark}] ...\n{tail}"


def clip(text: str, limit: int) -> str:
    """`text` within `limit` characters, mark included: its head and tail around `[... N characters cut ...]`."""
    if len(text) <= limit:
        return text
    room = limit - len(_cut_mark(len(text)))  # the mark is never longer than with this count
    if room < 2:
        return text[:limit]
    head, tail = room - room // 2, room // 2
    return text[:head] + _cut_mark(len(text) - room) + text[len(text) - tail:]


def _cut_mark(count: int) -> str:
    return f"\n... [{count} characters cut] ...\n"


def format_event(index: int, event: Event, config: PromptConfig | None, full: bool) -> str:
    """One event as `## Event N TYPE: ...` with its REASONING and CONTENT blocks."""
    content = event.content or ""
    if not full and config is not None:
        content = truncate(content, config.max_event_lines, config.max_event_chars)
    parts = [f"## Event {index} TYPE: {event.type.upper()}"]
    if event.reasoning:
        reasoning = event.reasoning if full or config is None else truncate(
            event.reasoning, config.max_event_lines, config.max_event_chars)
        parts.append(f"REASONING:\n{reasoning}")
    parts.append(f"CONTENT:\n{content}")
    return "\n".join(parts)


def format_event_stream(stream: EventStream, config: PromptConfig) -> str:
    """The history: summaries stand in for the ranges they cover; recent events in full, older ones cut.

    The part up to the last summary no longer changes, so it is formatted once and kept in `stream.cache`:
    the cost of a step does not grow with the number of summaries.
    """
    events = stream.events_list
    summaries = covering_summaries(stream)
    settled = summaries[-1].end_event_idx if summaries else 0
    first_full = len(events) - config.recent_events_in_full + 1
    if settled >= first_full:
        return format_events(stream, 1, len(events), config) or "(no events yet)"
    key = (len(stream.event_summaries_list), settled, config.max_event_lines, config.max_event_chars)
    cached = stream.cache.get("settled_history")
    if cached is None or cached[0] != key:
        cached = (key, format_events(stream, 1, settled, config))
        stream.cache["settled_history"] = cached
    tail = _format_range(events, settled + 1, len(events), first_full, config)
    return "\n\n".join(part for part in (cached[1], *tail) if part) or "(no events yet)"


def format_events(stream: EventStream, start: int, end: int, config: PromptConfig) -> str:
    """Events `start`..`end` (1-based, inclusive), with the summaries that fall inside the range."""
    events = stream.events_list
    first_full = len(events) - config.recent_events_in_full + 1
    blocks: list[str] = []
    position = start
    for summary in covering_summaries(stream):
        if summary.start_event_idx < position or summary.end_event_idx > end:
            continue
        blocks.extend(_format_range(events, position, summary.start_event_idx - 1, first_full, config))
        blocks.append(f"## Summary of Events {summary.start_event_idx} to {summary.end_event_idx}\n{summary.summary}")
        position = summary.end_event_idx + 1
    blocks.extend(_format_range(events, position, end, first_full, config))
    return "\n\n".join(blocks)


def covering_summaries(stream: EventStream) -> list:
    """The summaries in effect, in order: where ranges overlap, the one starting first (and widest) wins."""
    summaries = stream.event_summaries_list
    key = (len(summaries), id(summaries[-1]) if summaries else None)
    cached = stream.cache.get("covering_summaries")
    if cached is None or cached[0] != key:
        cached = (key, _choose_summaries(summaries))
        stream.cache["covering_summaries"] = cached
    return cached[1]


def _choose_summaries(summaries: list) -> list:
    chosen: list = []
    for summary in sorted(summaries, key=lambda s: (s.start_event_idx, -s.end_event_idx)):
        if not chosen or summary.start_event_idx > chosen[-1].end_event_idx:
            chosen.append(summary)
    return chosen


def _format_range(events: list, start: int, end: int, first_full: int, config: PromptConfig) -> list[str]:
    return [
        format_event(i, events[i - 1], config, full=i >= first_full)
        for i in range(start, end + 1)
        if events[i - 1].type not in HIDDEN_EVENT_TYPES
    ]
