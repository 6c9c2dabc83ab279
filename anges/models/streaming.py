"""Streaming a reply: a model hands each piece of text to the listener of the call as it arrives.

The agent runs a call under `listening(sink)` (on the call's own thread); a provider that streams takes
`current_sink()`, calls `begin()` at the start of each attempt (a retry starts the text again) and the sink with
each piece of text. Replayed and scripted replies arrive in a few pieces too. Without a listener nothing happens.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol


class StreamEnded(Exception):
    """A stream that ended before it said what a reply needs (a proxy's empty answer, a connection the server closed
    before the reply's finish reason): a dropped connection, worth another try."""


CUT_SHORT = "the reply stream ended before the reply did (no finish reason came): the connection closed early"


class Sink(Protocol):
    """Where the pieces of one call's reply go."""

    def begin(self) -> None:
        """An attempt starts: what earlier attempts sent is void."""

    def __call__(self, text: str) -> None: ...


class _Nowhere:
    def begin(self) -> None:
        pass

    def __call__(self, text: str) -> None:
        pass


NOWHERE: Sink = _Nowhere()
_current: ContextVar[Sink] = ContextVar("anges_reply_sink", default=NOWHERE)


def current_sink() -> Sink:
    """The sink of the call running in this context (one that drops everything when no one listens)."""
    return _current.get()


@contextmanager
def listening(sink: Sink) -> Iterator[Sink]:
    """Run the block's model calls with their reply text going to `sink` as it arrives."""
    reset = _current.set(sink)
    try:
        yield sink
    finally:
        _current.reset(reset)


def pieces(text: str, size: int = 64) -> Iterator[str]:
    """A finished text in pieces of about `size` characters, cut after a space where one is near."""
    start = 0
    while start < len(text):
        end = min(start + size, len(text))
        space = text.rfind(" ", start + size // 2, end)
        end = space + 1 if space >= 0 and end < len(text) else end
        yield text[start:end]
        start = end


def replay_into_sink(text: str) -> None:
    """Send a finished reply (replayed, scripted) to the current sink in a few pieces, as a stream would."""
    sink = current_sink()
    if sink is NOWHERE:
        return
    sink.begin()
    for piece in pieces(text):
        sink(piece)
