"""What a person sees of a run: the transcript on stderr (live on a terminal), the final answer on stdout.

One `Transcript` draws a run's events with the shared `Renderer`: on a terminal above the live screen (the reply
streaming in place, the status line, approvals), elsewhere as plain lines.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from rich.text import Text

from anges.cli.render import SHOWN_STATUS, Renderer, ended_jobs, stop_text
from anges.cli.session import TranscriptOutput
from anges.cli.status import FOLDING, Status, WatchedModel
from anges.cli.terminal import Display, seconds
from anges.store.export import printable_event
from anges.util.printable import as_drawn, printable

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rich.console import RenderableType

    from anges.cli.screen import Screen


class Transcript:
    """A run's events as they are recorded, and our own notes: above the live screen when there is one."""

    def __init__(self, display: Display, verbose: bool = False, quiet: bool = False, status: Status | None = None):
        self.display = display
        self.quiet = quiet
        self.status = status or Status()
        self.renderer = Renderer(display.styled, verbose=verbose)
        self.screen: Screen | None = None
        """The live screen while one is up (set by whoever runs it)."""

    def watch(self, model):
        """The model, wrapped so the status line says what it does (on a terminal)."""
        return WatchedModel(model, self.status) if self.display.styled else model

    def on_message(self, message) -> None:
        """Message handler: draw the event the agent just recorded."""
        self.status.recorded(message.event, message.agent_id, message.depth)
        if self.quiet:
            return
        agent = f"{message.agent_type} {message.agent_id}" if message.depth else ""
        if self.screen is not None:
            self.screen.show_live("")
        self.print(self.renderer.event(message.event, message.depth, agent, live=True))

    def on_delta(self, delta) -> None:
        """Delta handler: the reply's analysis and reasoning so far, in place on the live screen (nothing is drawn
        without one; the step's event, drawn when it is recorded, takes their place)."""
        if self.quiet or self.screen is None:
            return
        tag = f"[{delta.agent_type} {delta.agent_id}] " if delta.depth else ""
        if delta.field == "fold":  # its event, when recorded, says what was folded
            self.status.doing(FOLDING, agent=delta.agent_id)
            self.screen.show_live(f"{tag}⇊ {FOLDING}: {delta.text} are being folded into the summary")
            return
        if delta.field == "output":
            self.screen.show_live(tag + as_drawn(delta.output))
            return
        fields = (delta.analysis, delta.reasoning, delta.answer)
        text = "\n".join(part.strip() for part in fields if part and part.strip())
        self.screen.show_live(tag + text)

    def note(self, text: str, style: str = "dim") -> None:
        """A line of our own (status, hints), unless quiet."""
        if not self.quiet:
            self.print([Text(printable(text), style)])

    def print(self, renderables: Sequence[RenderableType]) -> None:
        if not renderables:
            return
        if self.screen is not None:
            self.screen.print(self.display.text(renderables, self.screen.width()))
        else:
            self.display.write(renderables)


class TextOutput(TranscriptOutput):
    """The default output of a task: the transcript on stderr, the final answer on stdout, the stream id on stderr."""

    def __init__(self, verbose: bool = False, quiet: bool = False):
        self.answers = Display.of(sys.stdout)
        self.verbose = verbose
        self.transcript = Transcript(Display.of(sys.stderr), verbose=verbose, quiet=quiet)

    @property
    def live(self) -> bool:
        """Whether the live screen is drawn (the transcript goes to a terminal, and is not --quiet)."""
        return self.transcript.display.styled and not self.transcript.quiet

    def started(self, agent, request: str) -> None:
        self.transcript.renderer.cwd = agent.cmd_init_dir
        self.transcript.status.begin()
        if self.verbose:
            stream = agent.event_stream
            model = getattr(agent.inference_func, "name", "") or "model"
            self.transcript.note(f"stream {stream.uid} · {agent.agent_type} agent · {model} · in {agent.cmd_init_dir}")

    def interrupting(self, signal_name: str) -> None:
        self.transcript.status.doing("stopping")
        again = " (Ctrl-C again quits at once)" if signal_name in ("SIGINT", "Ctrl-C") else f" ({signal_name})"
        self.transcript.note(f"interrupting: stopping the agent and its command{again}", "bold yellow")

    def finished(self, outcome, exit_code: int) -> None:
        self.transcript.status.end()
        if outcome.answer is not None:
            renderer = Renderer(self.answers.styled)
            self.answers.write([renderer.answer(printable(outcome.answer))])
        elif self.transcript.quiet and outcome.final is not None:  # quiet, yet the user must learn why it stopped
            sys.stderr.write(f"anges: stopped: {stop_text(printable_event(outcome.final))}\n")
        self.transcript.note(status_line(outcome, jobs=outcome.answer is not None))  # the answer is not drawn above


def status_line(outcome, hint: bool = True, jobs: bool = False) -> str:
    """`completed in 4.2s · 3 model calls · 1,234 tokens · 62% of input cached · stream ID (resume: ...)`; the
    command that continues the run only with `hint`; the jobs the run ended (which its last event, when drawn,
    says) only with `jobs`."""
    usage = outcome.usage()
    word = SHOWN_STATUS.get(outcome.status, (outcome.status, ""))[0]
    parts = [f"{word} in {seconds(outcome.duration)}"]
    if usage["model_calls"]:
        parts.append(f"{usage['model_calls']} model call{'s' if usage['model_calls'] != 1 else ''}")
    tokens = usage["input_tokens"] + usage["output_tokens"]
    if tokens:
        parts.append(f"{tokens:,} tokens" + (" (estimated)" if usage["estimated"] else ""))
    if usage["cached_tokens"] and usage["cache_hit_ratio"] is not None:  # None: the server counted no input
        parts.append(f"{usage['cache_hit_ratio']:.0%} of input cached")
    if "cost" in usage:
        parts.append(f"${usage['cost']:.4f}")
    ended = ended_jobs(outcome.final) if jobs and outcome.final is not None else ""
    if ended:
        parts.append(ended)
    uid = outcome.stream.uid
    how = "reply with" if outcome.status == "help_needed" else "resume"
    parts.append(f"stream {uid} ({how}: anges --resume {uid} -q ...)" if hint else f"stream {uid}")
    return " · ".join(parts)
