"""Keeping the history short: the rolling summary, folded when the window is full or the prompt too long; old bulky
results shrunk in batches (`anges.prompt.shrinking`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from anges.agents.record import masked_title
from anges.exceptions import FormatError, ModelError, RunStopped
from anges.prompt import shrinking, summarize
from anges.prompt.history import folded_until, shrink_candidates
from anges.prompt.parsing import strip_thinking
from anges.prompt.templates import render_template
from anges.store import outputs
from anges.store.events import Event, EventStream

if TYPE_CHECKING:
    from anges.agents.sizing import Sizing
    from anges.config.types import PromptConfig
    from anges.store.event_store import EventStore


class Prompts(Protocol):
    """What a fold needs of the agent's prompts: the run's limits, and its prompt with a request for a tail."""

    @property
    def sizing(self) -> Sizing: ...

    def asking(self, request: str) -> str: ...

    def prompt(self, feedback: str = "", limit: int = 0) -> str: ...


class Calls(Protocol):
    """What a fold needs of the agent's model calls (`anges.agents.calls.ModelCalls`)."""

    def reply(self, prompt: str) -> str:
        """The agent's model call (it counts the call, like every other)."""

    def tell(self, field: str, text: str) -> None:
        """Tell the views, as a delta, what the run does between replies."""


class History:
    """The rolling summary and the title of one stream. A fold is recorded as a `history_folded` event, a fold that
    fails as a `summary_failed` one; neither stops the run."""

    def __init__(self, stream: EventStream, store: EventStore, prompts: Prompts, calls: Calls,
                 record: Callable[[Event], None], logger: logging.Logger):
        self.stream = stream
        self.store = store
        self.prompts = prompts
        self.call = calls.reply
        self.tell = calls.tell
        self.record = record
        self.logger = logger
        self._retry_at = 0
        """After a failed fold, the stream length at which the next one may be tried."""

    @property
    def config(self) -> PromptConfig:
        """The run's prompt limits (scaled to the model's context window)."""
        return self.prompts.sizing.prompt

    def before_step(self, threshold: int) -> None:
        """Keep the history short before a model call: fold it into the rolling summary when the window is full (see
        `summarize.fold_due`), else shrink old bulky results when a batch is due (see `anges.prompt.shrinking`)."""
        end = summarize.fold_due(self.stream, self.config, threshold)
        if end is not None and len(self.stream.events_list) >= self._retry_at:
            if self.fold(end, reason="window"):
                return
            self._retry_at = len(self.stream.events_list) + max(threshold // 2, 1)
        self.shrink()

    def shrink(self) -> None:
        """Shrink the batch of old bulky results that is due, if one is: each one's whole text saved first, where no
        file holds it yet (one that cannot be saved stays as it is)."""
        chosen = shrinking.batch(shrink_candidates(self.stream, self.config), self.config)
        folder = outputs.folder_of(self.store, self.stream) if chosen else None
        done = []
        for candidate in chosen:
            path, text = shrinking.whole(self.stream.events_list[candidate.index - 1])
            if path is None and folder is not None:
                path = outputs.save(folder, "anges-whole-", text)
            if path is not None:
                done.append([candidate.index, path])
        if done:
            self.record(Event(shrinking.SHRINKS, data={"events": done}))

    def shorten(self) -> bool:
        """Fold all but the newest events (the prompt is too long); True if the history got a new summary."""
        end = summarize.fold_end(self.stream, self.config)
        return end is not None and self.fold(end, reason="prompt_size")

    def fold(self, end: int, reason: str) -> bool:
        """Ask the model for the rolling summary of events 1..`end` and keep it; False (and a recorded event) if
        it gives none. The views are told it starts (a `fold` delta) and shown what it folded (its event)."""
        first = folded_until(self.stream) + 1
        self.tell("fold", summarize.fold_span(self.stream, first, end))
        try:
            prompt = self.prompts.asking(summarize.fold_request(self.stream, end, self.config))
            summary = summarize.fold(self.call, prompt, end, reason, self.config)
        except (ModelError, RunStopped, FormatError) as exc:
            if isinstance(exc, RunStopped) and exc.reason == "interrupt":
                raise
            self.logger.info("summary of events 1-%d failed: %s", end, exc)
            note = f"summary of events 1 to {end} failed (the history is kept in full): {exc}"
            self.record(Event("summary_failed", content=str(exc), message=note,
                              data={"start": 1, "end": end, "reason": reason, "error": str(exc)}))
            return False
        self.stream.event_summaries_list.append(summary)
        self.record(summarize.folded_event(self.stream, summary, first))  # it syncs the stream
        outputs.prune(outputs.folder_of(self.store, self.stream), self.prompts.prompt())  # what it no longer names
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
