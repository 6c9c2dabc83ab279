"""Prompt rendering: the Jinja2 environment and the event history as the model reads it."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from anges.attached import Attached
from anges.clipping import clip
from anges.config import PromptConfig, resource_path
from anges.events import EVENT_KINDS

if TYPE_CHECKING:
    import jinja2

    from anges.events import Event, EventStream, EventSummary

_HIDDEN = frozenset(name for name, kind in EVENT_KINDS.items() if not kind.in_prompt)
"""Event types the model does not read (the event that follows says it all)."""
_caches: Attached[dict] = Attached()
"""Per stream: the formatted history up to the last summary, and the summaries in effect (both only grow)."""


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


def format_event(index: int, event: Event, config: PromptConfig | None, full: bool) -> str:
    """One event as `## Event N TYPE: ...` with its REASONING and CONTENT blocks."""
    content = event.content or ""
    if not full and config is not None:
        content = clip(content, config.max_event_chars, config.max_event_lines)
    parts = [f"## Event {index} TYPE: {event.type.upper()}"]
    if event.reasoning:
        reasoning = event.reasoning if full or config is None else clip(
            event.reasoning, config.max_event_chars, config.max_event_lines)
        parts.append(f"REASONING:\n{reasoning}")
    parts.append(f"CONTENT:\n{content}")
    return "\n".join(parts)


def format_event_stream(stream: EventStream, config: PromptConfig) -> str:
    """The history: summaries stand in for the ranges they cover; recent events in full, older ones cut.

    The part up to the last summary no longer changes, so it is formatted once and kept beside the stream:
    the cost of a step does not grow with the number of summaries.
    """
    events = stream.events_list
    summaries = covering_summaries(stream)
    settled = summaries[-1].end_event_idx if summaries else 0
    first_full = len(events) - config.recent_events_in_full + 1
    if settled >= first_full:
        return format_events(stream, 1, len(events), config) or "(no events yet)"
    key = (len(stream.event_summaries_list), settled, config.max_event_lines, config.max_event_chars)
    cache = _cache(stream)
    cached = cache.get("settled_history")
    if cached is None or cached[0] != key:
        cached = cache["settled_history"] = (key, format_events(stream, 1, settled, config))
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


def covering_summaries(stream: EventStream) -> list[EventSummary]:
    """The summaries in effect, in order: where ranges overlap, the one starting first (and widest) wins."""
    summaries = stream.event_summaries_list
    key = (len(summaries), id(summaries[-1]) if summaries else None)
    cache = _cache(stream)
    cached = cache.get("covering_summaries")
    if cached is None or cached[0] != key:
        cached = cache["covering_summaries"] = (key, _choose_summaries(summaries))
    return cached[1]


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


def _format_range(events: list, start: int, end: int, first_full: int, config: PromptConfig) -> list[str]:
    return [
        format_event(i, events[i - 1], config, full=i >= first_full)
        for i in range(start, end + 1)
        if events[i - 1].type not in _HIDDEN
    ]
