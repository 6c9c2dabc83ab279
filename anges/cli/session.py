"""A command-line session: one agent on one stream, request after request, stopped cleanly by Ctrl-C."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from anges.agents import BaseAgent
    from anges.agents.outcome import Outcome

EXIT_WORDS = ("exit", "quit")
EXIT_BY_STATUS = {"completed": 0, "answered": 0, "help_needed": 3, "interrupted": 4}
EXIT_BY_STOP_REASON = {"model_setup": 2}
"""Stops that are configuration errors: the provider rejected the key, the model id or the request."""


def exit_code(outcome: Outcome) -> int:
    """The exit code of a request that ended this way (see anges --help)."""
    return EXIT_BY_STOP_REASON.get(outcome.stop_reason or "", EXIT_BY_STATUS.get(outcome.status, 1))


class Output(Protocol):
    """Where a session reports: the text transcript, JSON lines or one JSON object."""

    def watch(self, model): ...
    def on_message(self, message) -> None: ...
    def on_delta(self, delta) -> None: ...
    def started(self, agent: BaseAgent, request: str) -> None: ...
    def interrupting(self, signal_name: str) -> None: ...
    def finished(self, outcome: Outcome, exit_code: int) -> None: ...
    def close(self) -> None: ...


class TranscriptOutput:
    """An output whose messages, streamed pieces and model calls all go into its `transcript`."""

    transcript: Any

    def watch(self, model):
        return self.transcript.watch(model)

    def on_message(self, message) -> None:
        self.transcript.on_message(message)

    def on_delta(self, delta) -> None:
        self.transcript.on_delta(delta)

    def close(self) -> None:
        """Nothing is left open."""


class Session:
    """Runs requests on one agent and its stream (a session may replace the agent between requests); SIGTERM and
    SIGHUP, or a stop key, interrupt the request, and the signals end the session."""

    def __init__(self, agent: BaseAgent, output: Output):
        self.agent = agent
        self.output = output
        self.ended_by = ""
        """The signal (SIGTERM, SIGHUP) that ended the session, if one did: no more requests should follow."""
        self.stopping = False
        """A stop was asked for the request running now."""

    def run(self, request: str) -> Outcome:
        """Work on one request until the agent returns or is stopped (on the calling thread)."""
        from anges.agents.outcome import Outcome
        from anges.store.events import walk

        agent = self.agent
        start = len(agent.event_stream.events_list) if agent.event_stream is not None else 0
        began = time.monotonic()
        self.stopping = False
        self.output.started(agent, request)
        try:
            stream = agent.run_with_new_request(request)
        finally:
            self.stopping = False
        events = list(walk(stream, agent.store.load, start))
        return Outcome(stream, request, agent.status, events, time.monotonic() - began)

    def interrupt(self, why: str) -> None:
        """Stop the running request: `why` is the signal (SIGINT, SIGTERM, SIGHUP) or the key (Esc, Ctrl-C)."""
        if why in ("SIGTERM", "SIGHUP"):
            self.ended_by = why
        self.stopping = True
        self.agent.interrupt(why)
        self.output.interrupting(why)


STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


@contextmanager
def interrupt_on_signals(interrupt: Callable[[str], None]) -> Iterator[None]:
    """Inside, the first SIGINT, SIGTERM or SIGHUP calls `interrupt(signal name)` (on a thread of its own); the next
    raises KeyboardInterrupt. After SIGHUP (the terminal closed) nothing more is read from or written to the
    terminal."""
    received = 0
    terminal = [fd for fd in (0, 1, 2) if os.isatty(fd)]  # asked now: a hung-up terminal no longer says it is one

    def handle(signum, frame):
        nonlocal received
        received += 1
        if received > 1:
            raise KeyboardInterrupt
        name = signal.Signals(signum).name
        if name == "SIGHUP":
            _leave_terminal(terminal)
        # not here: a handler runs on the main thread between two of its bytecodes, maybe while it holds a lock
        # that `interrupt` takes (the screen's, the status line's)
        threading.Thread(target=interrupt, args=(name,), name="anges-interrupt", daemon=True).start()

    previous = {sig: signal.signal(sig, handle) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _leave_terminal(fds: list[int]) -> None:
    """Point these standard streams (the terminal's) at /dev/null: writes to a hung-up terminal fail."""
    devnull = os.open(os.devnull, os.O_RDWR)
    try:
        for fd in fds:
            os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def read_lines(prompt: str, history: Path | None) -> Iterator[str]:
    """Requests typed by the user until exit, quit or end of input; readline editing and history on a terminal."""
    terminal = sys.stdin.isatty()
    if terminal:
        import readline

        if history is not None:
            _load_history(readline, history)
    try:
        while True:
            try:
                line = input(prompt if terminal else "")
            except EOFError:
                if terminal:
                    sys.stderr.write("\n")
                return
            except KeyboardInterrupt:  # at the prompt: drop the line, like a shell
                sys.stderr.write("\n" if terminal else "")
                continue
            text = line.strip()
            if text.lower().removeprefix("/") in EXIT_WORDS:
                return
            if text:
                yield text
    finally:
        if terminal and history is not None:
            _save_history(readline, history)


def _load_history(readline, path: Path) -> None:
    readline.set_history_length(1000)
    try:
        readline.read_history_file(path)
    except OSError:
        pass  # no history yet


def _save_history(readline, path: Path) -> None:
    from anges.util.paths import write_file

    lines = [readline.get_history_item(index) for index in range(1, readline.get_current_history_length() + 1)]
    text = "".join(f"{line}\n" for line in lines if line is not None)
    try:
        write_file(str(path), text.encode("utf-8", errors="replace"), 0o600, parents=True)  # never through a link
    except OSError:
        pass  # a read-only home must not break the session
