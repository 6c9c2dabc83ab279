"""The interactive session (`anges` on a terminal, or `anges -i`): an input box under the transcript, one request
at a time on a thread of its own while what is typed meanwhile waits its turn, slash commands, Esc to stop.

The input box shows before anything heavy is loaded (the renderer, the configuration, the store, the agent): they
are made once it is drawn, and a request typed before they are ready waits for them.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
from typing import TYPE_CHECKING, TypeVar

from prompt_toolkit.completion import ThreadedCompleter
from prompt_toolkit.filters import Condition
from prompt_toolkit.key_binding import KeyBindings
from prompt_toolkit.layout import ConditionalContainer, Window
from prompt_toolkit.layout.controls import FormattedTextControl

from anges import __version__
from anges.cli.approvals import ApprovalPane
from anges.cli.composer import Completions, Composer, History
from anges.cli.mentions import Mentions
from anges.cli.pager import Pager
from anges.cli.picker import Picker
from anges.cli.screen import Pane, Screen
from anges.cli.session import Session, TranscriptOutput, exit_code, interrupt_on_signals
from anges.cli.status import Status
from anges.cli.terminal import Display
from anges.exceptions import AngesError, UsageError
from anges.util.clipping import one_line
from anges.util.printable import printable

if TYPE_CHECKING:
    from anges.cli.build import Setup
    from anges.cli.transcript import Transcript
    from anges.store.events import EventStream

T = TypeVar("T")
LEAVE_AGAIN = 3.0
"""Seconds in which a second Ctrl-C at an empty input box leaves."""
STOPPING = "stopping the run (its command ends within a second)"
ECHO_LINES = 12
"""Lines of a long request (a paste) shown in the transcript; all of it is sent and recorded."""
WELCOME = "Enter sends · Alt-Enter: new line · /help · @file · Esc stops · Ctrl-D leaves"


def run_session(args: argparse.Namespace, first: str | None) -> int:
    """The session until the person leaves; the exit code (4 when a signal ended it, 2 when it could not start)."""
    return Interactive(args).run(first)


class SessionOutput(TranscriptOutput):
    """Where the session's requests report: all of it into the transcript, the answer too."""

    def __init__(self, transcript: Transcript):
        self.transcript = transcript

    def started(self, agent, request: str) -> None:
        self.transcript.renderer.cwd = agent.cmd_init_dir

    def interrupting(self, why: str) -> None:
        self.transcript.status.doing("stopping")

    def finished(self, outcome, code: int) -> None:
        from anges.cli.transcript import status_line

        if outcome.answer is not None:
            self.transcript.print(self.transcript.renderer.event(outcome.final))
        self.transcript.note(status_line(outcome, hint=False))


class Typed(str):
    """Text the person typed into the box (a `!command` in it runs as one; a custom command's request never does)."""


class QueuePane(Pane):
    """Requests typed while one runs, shown until their turn."""

    def __init__(self, queue: list[str]):
        self.queue = queue
        text = FormattedTextControl(lambda: [("class:queued", "\n".join(
            f"⧗ queued: {one_line(text, 100)}  (Esc: back into the box, unsent)" for text in self.queue))])
        self.container = ConditionalContainer(Window(text, dont_extend_height=True), Condition(lambda: bool(queue)))


class Interactive:
    """One person's session: the screen, the agent of the stream being worked on, the queue."""

    def __init__(self, args: argparse.Namespace):
        from anges.config.loading import anges_home

        self.args = args
        self.display = Display.of(sys.stderr)
        self.status = Status(model="starting…")
        self._transcript: Transcript | None = None
        self._output: SessionOutput | None = None
        self._setup: Setup | None = None
        self._session: Session | None = None
        self.ready = threading.Event()
        self.exit = 0
        self.queue: list[str] = []
        self.running = False
        self.leaving = False
        self._ctrl_c_at = 0.0
        self.cancel: threading.Event | None = None
        """Set by Esc: what a command does at length (a `/compact` fold) stops."""
        self._commands = threading.Lock()
        self._sent_commands = threading.Condition()
        self._pending_commands: list[str] = []
        """The names of the slash commands sent and not yet done: a request or a `!command` sent after them waits
        for them (`/model`, then a request)."""
        self.approvals = ApprovalPane(give_back=lambda text: self.composer.box.buffer.insert_text(text))
        self.picker = Picker(lambda: self.screen)
        self.mentions = Mentions(self.cwd, self._hidden)
        completions = Completions(self.cwd, self.complete, self.mentions.find)
        self.composer = Composer(History(str(anges_home() / "history")), ThreadedCompleter(completions), self.send,
                                 say=lambda text: self.screen.say(text))
        self.pager = Pager(lambda: self.screen, lambda: self._session.agent.event_stream if self._session else None)
        self.screen = Screen(self.display, self.status, above=[self.approvals, self.picker, self.pager,
                                                               QueuePane(self.queue)],
                             below=[self.composer], bindings=self._keys(), focus=self.composer.box,
                             extended_keys=True)
        self.approvals.attach(self.screen)

    # -- what is made once the input box shows -------------------------------------------------------------------

    @property
    def transcript(self) -> Transcript:
        """What the session shows above the input box."""
        return _made(self._transcript, "transcript")

    @property
    def output(self) -> SessionOutput:
        return _made(self._output, "transcript")

    @property
    def setup(self) -> Setup:
        """The configuration, the store and how agents are built."""
        return _made(self._setup, "configuration")

    @property
    def session(self) -> Session:
        """The agent of the stream being worked on."""
        return _made(self._session, "agent")

    @property
    def stream(self) -> EventStream:
        """The stream being worked on."""
        return _made(self.session.agent.event_stream, "stream")

    def loaded(self) -> bool:
        """The configuration is loaded (completions that need it wait for it)."""
        return self._setup is not None

    # -- the session's life ----------------------------------------------------------------------------------------

    def run(self, first: str | None) -> int:
        try:
            with interrupt_on_signals(self.on_signal):
                self.screen.run(started=lambda: self._started(first))
        finally:
            if self._transcript is not None:
                self._transcript.screen = None
            self._end()
        return self.exit

    def _started(self, first: str | None) -> None:
        """Once the input box is drawn (the first draw follows at once): the welcome, and the rest set up."""
        def after_the_first_draw() -> None:
            from anges.cli.transcript import Transcript

            self._transcript = Transcript(self.display, verbose=bool(self.args.verbose), status=self.status)
            self._transcript.screen = self.screen
            self._output = SessionOutput(self._transcript)
            self._transcript.note(f"anges {__version__} · {WELCOME}")
            threading.Thread(target=self._prepare, args=(first,), name="anges-setup", daemon=True).start()

        asyncio.get_running_loop().call_soon(after_the_first_draw)  # `started` runs on the screen's loop

    def _prepare(self, first: str | None) -> None:
        """Load the configuration, open the stream (its earlier steps drawn first) and build the agent."""
        from anges.cli.build import Setup

        try:
            self._setup = Setup(self.args)
            self.use(self._setup.stream(self.args.resume))
        except (AngesError, UsageError) as exc:
            self.fail(exc)
            self.exit = 2
            self.screen.close()
        finally:
            self.ready.set()
        self.mentions.prepare()
        if first is not None and self._session is not None:
            self.screen.in_loop(lambda: self.send(first))

    def use(self, stream: EventStream, show_earlier: bool = True, new_model: bool = False) -> None:
        """Work on `stream` from now on (its earlier steps drawn first), with an agent built as set up now: the
        model of the agent before it, or the one set up (`new_model`, or there is no agent yet)."""
        from anges.cli.build import close_agent
        from anges.cli.runs import stream_transcript
        from anges.store.plans import carried_plan

        if show_earlier and stream.events_list:
            self.transcript.print(stream_transcript(stream, self.setup.store, self.display.styled))
        old = self._session.agent if self._session is not None else None
        model = old.inference_func if old is not None and not new_model else None
        agent = self.setup.agent(stream, self.output, channel=self.approvals, model=model)
        if self._session is None:
            self._session = Session(agent, self.output)
        else:
            self._session.agent = agent
        close_agent(old)
        self.approvals.root = agent.uid
        self.status.describe(agent, self.setup.config.safety)
        self.status.plan = carried_plan(stream.events_list)
        self.screen.refresh()

    def _end(self) -> None:
        """After the screen: stop what still runs, end the agent's processes."""
        from anges.cli.build import close_agent

        session = self._session
        if session is None:
            return
        if self.running:
            session.interrupt("leaving")
            deadline = time.monotonic() + 10
            while self.running and time.monotonic() < deadline:
                time.sleep(0.02)
        close_agent(session.agent)
        stream = session.agent.event_stream
        if session.ended_by:
            self.exit = 4
        elif stream is not None and stream.events_list and self._transcript is not None:
            self._transcript.note(f"continue later with: anges --resume {stream.uid}")

    def leave(self) -> None:
        """Leave the session (after stopping the request that runs)."""
        self.leaving = True
        if self.running and self._session is not None:
            self._session.interrupt("leaving")
        else:
            self.screen.close()

    def on_signal(self, name: str) -> None:
        """SIGTERM or SIGHUP (SIGINT, with no terminal in raw mode): stop the request and end the session."""
        if self._session is not None:
            self._session.ended_by = name if name != "SIGINT" else ""
        if self.running and self._session is not None:
            self._session.interrupt(name)
            self.leaving = name != "SIGINT"
        elif name != "SIGINT":
            self.screen.close()

    # -- requests --------------------------------------------------------------------------------------------------

    def send(self, text: str) -> None:
        """What the person sent (on the screen's thread): a slash command, a request or a `!command`, or one to
        queue."""
        if text.strip().startswith("/"):
            self._command(text.strip())
        else:
            self.request(text, typed=True)

    def request(self, text: str, echo: bool = True, typed: bool = False) -> None:
        """Send `text` (a `!command` when `typed` so), or queue it while a run works; on the screen's thread."""
        text = Typed(text) if typed else text
        if self.running:
            self.queue.append(text)
        else:
            self._start(text, echo)

    def _start(self, text: str, echo: bool = True) -> None:
        self.running = True
        self.status.begin()
        if echo:
            self._echo(text)
        shell = isinstance(text, Typed) and text.strip().startswith("!")
        work = self._shell if shell else self._work
        threading.Thread(target=work, args=(text,), name="anges-run", daemon=True).start()

    def _shell(self, line: str) -> None:
        """A `!command`: run in the sandbox, drawn, and recorded for the model's next step."""
        from anges.agents.user_command import run_user_command

        self._after_sent_commands()
        command = line.strip()[1:].strip()
        try:
            if self._session is None or not command:
                if self._session is not None:
                    self.say("!COMMAND runs COMMAND in the working directory, in the sandbox (e.g. !git status)")
                return
            session = self._session
            session.stopping = False
            self.status.doing(f"running {one_line(command, 80)} (yours)")
            event = run_user_command(session.agent, command, stop=lambda: session.stopping)
            self.screen.show_live("")
            self.status.recorded(event)
            self.transcript.print(self.transcript.renderer.event(event))
            self.say("the agent reads it (and its output) at its next step", "dim")
        except (AngesError, UsageError, ValueError, OSError) as exc:
            self.screen.show_live("")
            self.fail(exc)
        except Exception as exc:  # noqa: BLE001  (a session survives a failed command)
            self.fail(exc, unexpected=True)
        finally:
            self.status.end()
            self.screen.in_loop(self._finished)

    def _work(self, text: str) -> None:
        self._after_sent_commands()
        try:
            if self._session is None:  # the session could not start: that was said, and it closes
                return
            outcome = self._session.run(self._attached(text) if isinstance(text, Typed) else text)
            self.output.finished(outcome, exit_code(outcome))
        except (AngesError, UsageError) as exc:
            self.fail(exc)
        except Exception as exc:  # noqa: BLE001  (a session survives a failed request)
            self.fail(exc, unexpected=True)
        finally:
            self.status.end()
            self.screen.in_loop(self._finished)

    def _after_sent_commands(self) -> None:
        """Wait until the agent is ready and the slash commands sent before are done (`/model`, then a request)."""
        self.ready.wait()
        with self._sent_commands:
            if self._pending_commands:
                self.status.doing(printable(f"waiting for {', '.join(self._pending_commands)}"))
            self._sent_commands.wait_for(lambda: not self._pending_commands)

    def _attached(self, text: str) -> str:
        """The request with the files it mentions (`@path`) attached, each said."""
        text, said = self.mentions.attach(text, self.setup.config.prompt.template_dir)
        for line in said:
            self.say(line, "dim")
        return text

    def _hidden(self):
        """The sandbox's rule of the places it hides (None before the configuration is loaded)."""
        from anges.safety.sandbox import SandboxSettings

        if not self.loaded():
            return None
        return SandboxSettings.for_run(self.setup.config.safety, self.cwd()).is_hidden

    def _finished(self) -> None:
        self.running = False
        if self.screen.notice == STOPPING:
            self.screen.say("")
        if self.leaving or (self._session is not None and self._session.ended_by):
            self.screen.close()
        elif self.queue:
            self._start(self.queue.pop(0))
        self.screen.refresh()

    def stop(self, why: str) -> None:
        """Stop the running request; what was queued comes back into the input box, unsent."""
        if self._session is not None and not self._session.stopping:
            self._session.interrupt(why)
        if self.queue:
            self.composer.text = "\n".join([*self.queue, self.composer.text]).strip("\n")
            self.queue.clear()
        self.screen.say(STOPPING)

    def fail(self, exc: BaseException, unexpected: bool = False) -> None:
        """Say what went wrong, in one line (the traceback with -v)."""
        what = f"unexpected error: {type(exc).__name__}: " if unexpected else ""
        self.transcript.note(f"anges: {what}{printable(str(exc))}", "bold red")
        if unexpected and self.args.verbose:
            import traceback

            self.transcript.note("".join(traceback.format_exception(exc)), "red")

    # -- slash commands --------------------------------------------------------------------------------------------

    def _echo(self, text: str) -> None:
        """What the person sent, into the transcript."""
        from rich.text import Text

        lines = text.strip().splitlines()
        if len(lines) > ECHO_LINES:
            lines = [*lines[:ECHO_LINES - 1], f"… {len(lines) - ECHO_LINES + 1} more lines (all of them sent)"]
        self.transcript.print([Text(), Text("› ", "bold blue") + Text("\n  ".join(lines), "bold")])

    def _command(self, line: str) -> None:
        self._echo(line)
        with self._sent_commands:
            self._pending_commands.append(line.split()[0])
        threading.Thread(target=self._run_command, args=(line,), name="anges-command", daemon=True).start()

    def _run_command(self, line: str) -> None:
        from anges.cli.every_command import run_command

        try:
            self.run_in_background(lambda: run_command(self, line))
        finally:
            with self._sent_commands:
                self._pending_commands.remove(line.split()[0])
                self._sent_commands.notify_all()

    def run_in_background(self, work) -> None:
        """Run a command's `work` here, one at a time, once the agent is ready; its errors are said."""
        with self._commands:
            self.ready.wait()
            if self._session is None:
                return
            try:
                work()
            except (AngesError, UsageError) as exc:
                self.fail(exc)
            except Exception as exc:  # noqa: BLE001  (a session survives a failed command)
                self.fail(exc, unexpected=True)

    def complete(self, before: str):
        from anges.cli.every_command import completions

        return completions(self, before)

    def edit(self, text: str) -> None:
        """Put `text` into the input box to be edited (on the screen's thread)."""
        self.composer.text = text
        self.screen.refresh()

    def cwd(self) -> str:
        session = self._session
        return session.agent.cmd_init_dir if session is not None else "."

    def say(self, text: str, style: str = "") -> None:
        """A line of a command's answer, into the transcript."""
        self.transcript.note(text, style)

    # -- keys ------------------------------------------------------------------------------------------------------

    def _keys(self) -> KeyBindings:
        keys = KeyBindings()
        running = Condition(lambda: self.running)
        empty = Condition(lambda: not self.composer.text)

        @keys.add("escape", filter=running | Condition(lambda: self.cancel is not None))
        def _(event) -> None:
            if self.running:
                self.stop("Esc")
            elif self.cancel is not None:
                self.cancel.set()

        @keys.add("c-c")
        @keys.add("<sigint>")
        def _(event) -> None:
            if self.running:
                self.stop("Ctrl-C")
            elif self.composer.text:
                self.composer.text = ""
            elif time.monotonic() - self._ctrl_c_at < LEAVE_AGAIN:
                self.leave()
            else:
                self._ctrl_c_at = time.monotonic()
                self.screen.say("Ctrl-C again leaves (or Ctrl-D)")

        @keys.add("c-o")
        def _(event) -> None:
            self.pager.show_last()

        @keys.add("escape", "escape", filter=empty & ~running & Condition(lambda: self.cancel is None))
        def _(event) -> None:
            self._command("/rewind")

        @keys.add("c-d", filter=empty)
        def _(event) -> None:
            self.leave()

        @keys.add("up", filter=empty & Condition(lambda: bool(self.queue)))
        def _(event) -> None:
            self.composer.text = self.queue.pop()

        return keys


def _made(part: T | None, what: str) -> T:
    if part is None:
        raise RuntimeError(f"the session's {what} is not ready yet")
    return part
