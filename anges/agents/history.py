"""Keeping the history short: summaries when actions pile up, after a task, or when the prompt is too long."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from anges import summarize
from anges.agents.record import masked_title
from anges.clipping import clip
from anges.events import Event, EventStream
from anges.exceptions import FormatError, ModelError, RunStopped
from anges.parsing import strip_thinking
from anges.prompt import render_template

if TYPE_CHECKING:
    from anges.config_types import PromptConfig
    from anges.store import EventStore


class History:
    """The summaries and the title of one stream. A summary that fails is recorded; it never stops the run."""

    def __init__(self, stream: EventStream, store: EventStore, config: PromptConfig, call: Callable[..., str],
                 record: Callable[[Event], None], logger: logging.Logger):
        self.stream = stream
        self.store = store
        self.config = config
        self.call = call
        """`call(prompt, attach=...)`: the agent's model call."""
        self.record = record
        self.logger = logger

    def summarize_actions_if_due(self, threshold: int) -> None:
        """Summarize the newest run of actions once it is `threshold` events long."""
        due = summarize.action_range_due(self.stream, threshold, self.config.recent_events_in_full)
        if due:
            self.add_summary(*due, reason="actions")

    def summarize_task(self) -> None:
        """Summarize the task about to complete."""
        task = summarize.task_range(self.stream)
        if task:
            self.add_summary(*task, reason="task_completion")

    def shorten(self) -> bool:
        """Summarize every unsummarized run of two or more events (the prompt is too long); True if one was added."""
        added = False
        for start, end in summarize.unsummarized_segments(self.stream, self.config.recent_events_in_full):
            if end - start + 1 >= 2:
                added = self.add_summary(start, end, reason="prompt_size") or added
        return added

    def add_summary(self, start: int, end: int, reason: str) -> bool:
        """Ask the model for a summary of events `start`..`end` and keep it; False (and a recorded event) if not."""
        try:
            summary = summarize.make_summary(lambda prompt: self.call(prompt, attach=False), self.stream, start, end,
                                             reason, self.config)
        except (ModelError, RunStopped, FormatError) as exc:
            if isinstance(exc, RunStopped) and exc.reason == "interrupt":
                return False
            self.logger.info("summary of events %d-%d failed: %s", start, end, exc)
            note = f"summary of events {start} to {end} failed (the history is kept in full): {exc}"
            self.record(Event("summary_failed", content=str(exc), message=note,
                              data={"start": start, "end": end, "reason": reason, "error": str(exc)}))
            return False
        summary.summary = clip(summary.summary, self.config.max_summary_chars)
        self.stream.event_summaries_list.append(summary)
        self.store.sync(self.stream)
        return True

    def entitle(self, request: str, secrets: list[str]) -> None:
        """Give the stream a model-written title (secrets masked); keep the old one when the model gives none."""
        prompt = render_template("title.j2", self.config.template_dir, request=request[:2000])
        try:
            title = strip_thinking(str(self.call(prompt)).strip())
        except (ModelError, RunStopped, FormatError) as exc:
            self.logger.info("no title: %s", exc)
            return
        title = masked_title(str(title), secrets).strip("\"'. …")
        if title:
            self.stream.title = title
            self.store.sync(self.stream)
