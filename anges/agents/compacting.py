"""Folding a stream's history now, at the user's word (`/compact`): the same rolling summary the loop folds into
when the window fills, of every event so far, keeping what the user names."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from anges.exceptions import RunStopped
from anges.prompt import summarize
from anges.prompt.history import folded_until, format_events
from anges.store.numbers import count_upto
from anges.util.waiting import wait_for

if TYPE_CHECKING:
    from anges.config.types import Config
    from anges.store.event_store import Store
    from anges.store.events import Event, EventStream, EventSummary


@dataclass(frozen=True)
class Compacted:
    """A fold made now: the summary, and the `history_folded` event recorded with it (what every view shows)."""

    summary: EventSummary
    event: Event


def compact(stream: EventStream, store: Store, config: Config, model: Callable[..., str], keep: str = "",
            stop: Callable[[], bool] = lambda: False) -> Compacted | None:
    """Fold events 1 to the last into the rolling summary (None when every event is folded already); RunStopped
    when `stop()` came first (nothing changes), model errors as they are, StreamBusy while a run holds the stream."""
    from anges.models.base import Usage
    from anges.models.pricing import cost

    with store.run_lock(stream.uid):
        end, first = len(stream.events_list), folded_until(stream) + 1
        if count_upto(stream, end) <= count_upto(stream, first - 1):  # nothing the model reads is left to fold
            return None
        request = summarize.fold_request(stream, end, config.prompt, keep.strip())
        prompt = f"{format_events(stream, 1, end, config.prompt)}\n\n{request}"
        summary = _call(lambda: summarize.fold(model, prompt, end, "asked", config.prompt), stop)
        if keep.strip():
            summary.data["keep"] = keep.strip()
        usage = summary.data.get("usage")
        spent = cost(Usage(**usage), getattr(model, "name", ""), config.prices) if isinstance(usage, dict) else None
        if spent is not None:
            summary.data["cost"] = round(spent, 8)
        stream.event_summaries_list.append(summary)
        event = summarize.folded_event(stream, summary, first)
        stream.add_event(event)
        store.sync(stream)
    return Compacted(summary, event)


def _call(work: Callable[[], EventSummary], stop: Callable[[], bool]) -> EventSummary:
    """`work()` on a thread of its own, given up at once when `stop()` (the call finishes alone, unused)."""
    result: list = []

    def run() -> None:
        try:
            result.append(work())
        except BaseException as exc:  # noqa: BLE001  (handed to the waiting thread)
            result.append(exc)

    thread = threading.Thread(target=run, name="anges-compact", daemon=True)
    thread.start()

    def finished(seconds: float) -> bool:
        thread.join(seconds)
        return not thread.is_alive()

    if wait_for(finished, stop) == "stopped":
        raise RunStopped("interrupt", "the fold was stopped: the history is as it was")
    if isinstance(result[0], BaseException):
        raise result[0]
    return result[0]
