"""The history's limits scaled to the room a model's context window leaves: what a small window gets of the
defaults, which are made for large ones."""

from __future__ import annotations

from anges.config.types import PromptConfig

AGENTS_MD_SHARE = 0.2
"""Of the prompt's room, what the project's AGENTS.md files may take."""
HISTORY_SHARES = {"history_window_chars": 0.3, "max_event_chars": 0.1, "max_summary_chars": 0.1,
                  "max_folded_request_chars": 0.1, "shrink_chars": 0.05}
"""Of the history's room, what each limit may take: the window of events waiting to be folded, each of the newest
events shown in full (`recent_events_in_full`, 5), the rolling summary and the requests shown beside it; an older
result longer than its share shrinks."""
TAIL_CHARS = 600
"""Kept for the prompt's tail (background jobs, the feedback on an invalid reply)."""
MIN_LIMIT = 200


def room_for_agents_md(config: PromptConfig, room: int) -> PromptConfig:
    """`config` for a prompt of at most `room` characters, before its fixed part is known: AGENTS.md capped."""
    return config.model_copy(update={
        "max_prompt_chars": min(config.max_prompt_chars, room),
        "max_agents_md_chars": min(config.max_agents_md_chars, int(room * AGENTS_MD_SHARE))})


def history_room(room: int, fixed: int) -> int:
    """The characters left for the history in a prompt of `room` characters whose fixed part takes `fixed`."""
    return max(room - fixed - TAIL_CHARS, 0)


def sized(config: PromptConfig, room: int, fixed: int) -> PromptConfig:
    """`config` with its history limits scaled down to what a prompt of `room` characters leaves after its fixed
    part: a limit is only ever lowered, and a limit of 0 (off) stays off."""
    history = history_room(room, fixed)
    update = {}
    for key, share in HISTORY_SHARES.items():
        value = getattr(config, key)
        if value > 0:
            update[key] = min(value, max(int(history * share), MIN_LIMIT))
    return room_for_agents_md(config, room).model_copy(update=update)
