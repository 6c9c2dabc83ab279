"""The live bottom of the terminal while anges works: an inline prompt_toolkit application (never full screen).

From the top: the reply streaming in place, the panes (an approval being asked, queued requests), the status
line, and in a session the input box. Everything finished (the transcript) is printed above it and scrolls into
the terminal's own scrollback, where it stays after anges exits. Every method but `run` may be called from any
thread: the agent's, a child agent's, the approval gate's.
"""

from __future__ import annotations

import asyncio
import errno
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import TYPE_CHECKING

from prompt_toolkit.application import Application
from prompt_toolkit.data_structures import Size
from prompt_toolkit.filters import Condition
from prompt_toolkit.key_binding import KeyBindings, merge_key_bindings
from prompt_toolkit.layout import ConditionalContainer, HSplit, Layout, Window
from prompt_toolkit.layout.controls import FormattedTextControl
from prompt_toolkit.output.color_depth import ColorDepth
from prompt_toolkit.styles import Style
from prompt_toolkit.utils import get_cwidth

from anges.cli import keyboard
from anges.cli.inline import Frame, InlineOutput
from anges.cli.terminal import terminal_size
from anges.util.printable import printable

if TYPE_CHECKING:
    from prompt_toolkit.key_binding import KeyBindingsBase
    from prompt_toolkit.layout import Container

    from anges.cli.status import Status
    from anges.cli.terminal import Display

GONE = (errno.EIO, errno.EBADF, errno.ENXIO, errno.EPIPE)
"""What writing to (or reading from) a terminal that has closed raises."""
LIVE_LINES = 6
"""Lines of a streaming reply shown in place (its last ones)."""
TICK = 0.1
"""Seconds between two redraws of the status line while a request runs (its spinner and clock)."""
STYLE = Style.from_dict({"live": "italic ansibrightblack", "status": "ansicyan", "status.idle": "ansibrightblack",
                         "notice": "ansiyellow", "rule": "ansibrightblack", "prompt": "bold ansiblue",
                         "queued": "ansibrightblack", "approval": "", "approval.head": "bold ansiyellow",
                         "approval.keys": "bold", "hint": "ansibrightblack"})


class Pane:
    """A part of the live screen: what it draws and the keys it answers."""

    container: Container
    bindings: KeyBindingsBase | None = None


class Screen:
    """The live part of the terminal: a reply streaming, panes, the status line; the transcript printed above."""

    def __init__(self, display: Display, status: Status, above: Sequence[Pane] = (), below: Sequence[Pane] = (),
                 bindings: KeyBindingsBase | None = None, focus=None, extended_keys: bool = False):
        self.display = display
        self.extended_keys = extended_keys and sys.stdin.isatty() and display.styled
        """Ask the terminal to tell Shift-Enter from Enter while the screen is up (`anges.cli.keyboard`)."""
        self.status = status
        self.live = ""
        """The analysis and reasoning of the reply streaming now (printable), with the agent's tag."""
        self.notice = ""
        """A short message under the status line (Ctrl-C again to leave, ...), until `say` changes it."""
        self.key_at = 0.0
        """When the key being handled was pressed (monotonic seconds)."""
        self.typed_at = 0.0
        """When the last key was pressed that answered no question: typing, a paste, a key for the input box."""
        self._taken = False
        self._pending: deque[str] = deque()
        self._lock = threading.Lock()
        self._running = False
        self._closing = False
        self._resources = ExitStack()
        self.app = self._application(above, below, bindings, self._input())
        if self.extended_keys:
            keyboard.translate_input(self.app.input)
        if focus is not None:
            self.app.layout.focus(focus)

    # -- from any thread --------------------------------------------------------------------------------------

    def print(self, text: str) -> None:
        """Put `text` (whole lines, drawn by `display`) above the live part, into the scrollback."""
        if not text:
            return
        with self._lock:
            if not self._running:
                self._write(text)
                return
            self._pending.append(text)
        self._call(self._flush)

    def show_live(self, text: str) -> None:
        """The streaming reply's text so far (made printable here)."""
        self.live = printable(text)
        self.refresh()

    def say(self, notice: str) -> None:
        """A short message under the status line ("" removes it)."""
        self.notice = notice
        self.refresh()

    def refresh(self) -> None:
        """Draw the live part again soon (the state it shows changed)."""
        if self._running:
            self.app.invalidate()

    def in_loop(self, function: Callable[[], None]) -> None:
        """Call `function` on the screen's thread (at once when the screen is not up)."""
        if self._running:
            self._call(function)
        else:
            function()

    def close(self) -> None:
        """Leave `run` once what was printed so far is on the screen."""
        with self._lock:
            self._closing = True
            running = self._running
        if running:
            self._call(self._exit)

    # -- the main thread -----------------------------------------------------------------------------------------

    def run(self, started: Callable[[], None] | None = None) -> object:
        """Show the live part until `close` (or a key binding exits); `started` is called once it is up. Returns
        what the binding that exited gave `app.exit(result=...)`."""
        def pre_run() -> None:
            with self._lock:
                self._running = True
                if self._closing:
                    self.app.exit()
            self.app.create_background_task(self._tick())
            if self.extended_keys:
                keyboard.enable(self.display.stream)
            if started is not None:
                started()

        try:
            return self.app.run(pre_run=pre_run, handle_sigint=True)
        except EOFError:  # the terminal is gone (a hang-up points stdin at /dev/null)
            return None
        except OSError as exc:
            if exc.errno not in GONE:
                raise
            return None  # the terminal closed under us: the hang-up that follows stops the run
        finally:
            keyboard.disable()
            self._stopped()

    def _stopped(self) -> None:
        self._resources.close()
        with self._lock:
            self._running = False
            pending, self._pending = list(self._pending), deque()
        for text in pending:
            self._write(text)

    # -- inside the application's event loop --------------------------------------------------------------------

    def _call(self, function: Callable[[], None]) -> None:
        loop = self.app.loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(function)
            except RuntimeError:  # the loop closed meanwhile: `_stopped` writes what is pending
                pass

    def _flush(self) -> None:
        with self._lock:
            pending, self._pending = "".join(self._pending), deque()
        if not pending:
            return
        if not self.app.is_running:
            with self._lock:
                self._pending.appendleft(pending)
            return
        renderer = self.app.renderer
        self._frame.erase_if_resized()
        renderer.erase(leave_alternate_screen=False)
        self._frame.forget()
        self.app.output.write_raw(pending.replace("\n", "\r\n"))
        self.app.output.flush()
        renderer.reset(leave_alternate_screen=False)
        self.app.invalidate()

    def _exit(self) -> None:
        self._flush()
        if self.app.is_running and self.app.future is not None and not self.app.future.done():
            self.app.exit()

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK)
            if self.status.working:
                self.app.invalidate()

    def take_key(self) -> None:
        """The key being handled answered a question: it does not count as typing."""
        self._taken = True

    def _key_pressed(self, _processor) -> None:
        self.key_at, self._taken = time.monotonic(), False
        self.notice = ""  # a notice lasts until the next key (whose handler may say another)

    def _key_handled(self, _processor) -> None:
        if not self._taken:
            self.typed_at = self.key_at

    def _write(self, text: str) -> None:
        try:
            self.display.stream.write(text)
            self.display.stream.flush()
        except OSError as exc:
            if exc.errno not in GONE:
                raise

    # -- what it draws --------------------------------------------------------------------------------------------

    def _input(self):
        """Keys from the terminal on stdin; none (a pipe that stays empty) when stdin is no terminal."""
        from prompt_toolkit.input import create_input, create_pipe_input

        if sys.stdin.isatty():
            return create_input(sys.stdin)
        return self._resources.enter_context(create_pipe_input())

    def _application(self, above: Sequence[Pane], below: Sequence[Pane], bindings, keys_in) -> Application:
        live = Window(FormattedTextControl(self._live_text), dont_extend_height=True, wrap_lines=False)
        status = Window(FormattedTextControl(self._status_text), height=1, dont_extend_height=True)
        notice = ConditionalContainer(Window(FormattedTextControl(lambda: [("class:notice", self.notice)]),
                                             height=1), Condition(lambda: bool(self.notice)))
        parts = [ConditionalContainer(live, Condition(lambda: bool(self.live))),
                 *(pane.container for pane in above), status, notice, *(pane.container for pane in below)]
        self._parts = parts
        # of two bindings for the same key the later wins: a question's keys over the input box's, over the rest
        keys = [_stray_paste_end(), bindings, *(pane.bindings for pane in (*below, *above))]
        app: Application = Application(
            layout=Layout(HSplit(parts)), key_bindings=merge_key_bindings([k for k in keys if k]), full_screen=False,
            output=self._output(), input=keys_in, style=STYLE,
            color_depth=None if self.display.colour else ColorDepth.DEPTH_1_BIT, erase_when_done=True,
            mouse_support=False)
        self._frame = Frame(app)
        app.key_processor.before_key_press += self._key_pressed
        app.key_processor.after_key_press += self._key_handled
        app.ttimeoutlen = 0.05  # Esc alone stops a run at once; Alt-Enter arrives as one read anyway
        app.timeoutlen = 0.5
        return app

    def _output(self) -> InlineOutput:
        stream = self.display.stream

        def size() -> Size:
            columns, rows = terminal_size(stream)
            return Size(rows=rows, columns=columns)

        # no cursor position requests: their answers would arrive as input, and a test's terminal gives none
        return InlineOutput(stream, size, term=os.environ.get("TERM"), enable_cpr=False)

    def width(self) -> int:
        """The columns of the terminal now."""
        return self.app.output.get_size().columns

    def rows_for(self, container: Container) -> int:
        """The rows `container` (one of the live part's) may take now: the screen's, less what the rest of the live
        part takes and one more (a live part as tall as the screen scrolls it at each redraw)."""
        size = self.app.output.get_size()
        others = sum(part.preferred_height(size.columns, size.rows).preferred for part in self._parts
                     if part is not container)
        return max(size.rows - 1 - others, 1)

    def _live_text(self):
        return [("class:live", "\n".join(last_lines(self.live, max(self.width() - 1, 10))))]

    def _status_text(self):
        line = self.status.line(self.width() - 1)
        return [("class:status" if self.status.working else "class:status.idle", line)]


def _stray_paste_end() -> KeyBindings:
    """The end of a paste that was not in one: a pasted text that holds `ESC[201~` ends the paste early, and the
    terminal's own end follows the rest. Ignored, so that its Esc does not stop the run (what came between is typed
    text, and answers no question: see approvals.py)."""
    keys = KeyBindings()
    keys.add("escape", "[", "2", "0", "1", "~")(lambda event: None)
    return keys


def last_lines(text: str, width: int, count: int = LIVE_LINES) -> list[str]:
    """The last `count` lines of `text` wrapped to `width` columns (wide characters take two)."""
    return [line for paragraph in text.splitlines()[-count:] for line in wrap_columns(paragraph, width)][-count:]


def wrap_columns(paragraph: str, width: int) -> list[str]:
    """One line cut into lines of at most `width` columns (wide characters take two, a tab four)."""
    lines: list[str] = []
    line, used = "", 0
    for char in paragraph.expandtabs(4):
        size = get_cwidth(char)
        if used + size > width and line:
            lines.append(line)
            line, used = "", 0
        line, used = line + char, used + size
    lines.append(line)
    return lines

