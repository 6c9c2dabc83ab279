"""A step seen whole, over the live part: Ctrl-O opens the last step's analysis, reasoning and full output (the
transcript shows their first and last lines); ← and → (or p and n) go to the step before or after, ↑ ↓ PgUp PgDn
Home End scroll, q or Esc closes it. It is part of the live screen, so it leaves nothing in the scrollback."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from prompt_toolkit.filters import Condition
from prompt_toolkit.key_binding import KeyBindings
from prompt_toolkit.layout import ConditionalContainer, Window
from prompt_toolkit.layout.controls import FormattedTextControl

from anges.cli.screen import Pane, Screen, wrap_columns
from anges.util.printable import as_drawn, printable

if TYPE_CHECKING:  # the store is loaded after the input box shows (start-up)
    from anges.store.events import Event, EventStream
    from anges.store.results import ShellRun

MAX_READ = 4 * 1024 * 1024
"""Of a command's full-output file, the bytes read (its end, when it holds more)."""
HINT = "  ←→ step · ↑↓ PgUp PgDn scroll · q close"


class Pager(Pane):
    """The steps of the stream `stream_of()` gives, one at a time, in full."""

    def __init__(self, screen_of: Callable[[], Screen], stream_of: Callable[[], EventStream | None]):
        self.screen_of = screen_of
        self.stream_of = stream_of
        self.steps: list[tuple[int, Event]] = []
        self.index = 0
        self.top = 0
        self.lines: list[str] = []
        self.window = Window(FormattedTextControl(self._text, focusable=True, show_cursor=False),
                             dont_extend_height=True, wrap_lines=False)
        self.container = ConditionalContainer(self.window, Condition(lambda: self.open))
        self.bindings = self._keys()
        self._previous: Window | None = None
        self.open = False

    def show_last(self) -> None:
        """Open on the last step or fold (on the screen's thread); says so when there is none yet."""
        from anges.store.events import is_step
        from anges.store.numbers import counts

        stream = self.stream_of()
        events = stream.events_list if stream is not None else []
        numbers = counts(events, len(events))
        self.steps = [(numbers[position], event) for position, event in enumerate(events, 1)
                      if is_step(event) or event.type == "history_folded"]
        screen = self.screen_of()
        if not self.steps:
            screen.say("no step to show yet")
            return
        layout = screen.app.layout
        self._previous, self.open = layout.current_window, True
        self._go(len(self.steps) - 1)
        layout.focus(self.window)

    def _go(self, index: int) -> None:
        self.index = max(0, min(index, len(self.steps) - 1))
        self.top = 0
        number, event = self.steps[self.index]
        self.lines = step_lines(number, event)
        self.screen_of().refresh()

    def _close(self) -> None:
        self.open = False
        try:
            if self._previous is not None:
                self.screen_of().app.layout.focus(self._previous)
        except ValueError:
            pass
        self.screen_of().refresh()

    def _rows(self) -> int:
        return max(self.screen_of().rows_for(self.container) - 2, 1)  # the head and the hint

    def _text(self):
        if not self.open:
            return []
        screen = self.screen_of()
        width, rows = max(screen.width() - 1, 10), self._rows()
        wrapped = [piece for line in self.lines for piece in wrap_columns(line, width)]
        self.top = max(0, min(self.top, len(wrapped) - rows))
        number, event = self.steps[self.index]
        what = f"the fold of {event.data.get('events', 'events')}" if event.type == "history_folded" else \
            f"step {number}"
        head = f"{what} ({self.index + 1} of {len(self.steps)}) · lines {self.top + 1}-" \
               f"{min(self.top + rows, len(wrapped))} of {len(wrapped)}"
        fragments = [("class:approval.head", head[:width]), ("", "\n")]
        for line in wrapped[self.top:self.top + rows]:
            fragments += [("", line), ("", "\n")]
        return fragments + [("class:hint", HINT[:width])]

    def _keys(self) -> KeyBindings:
        keys = KeyBindings()
        paging = Condition(lambda: self.open)

        def scroll(by: Callable[[], int]):
            def handler(event) -> None:
                self.top = max(0, self.top + by())
            return handler

        for name, by in (("up", lambda: -1), ("down", lambda: 1), ("pageup", lambda: -self._rows()),
                         ("pagedown", lambda: self._rows()), ("space", lambda: self._rows()),
                         ("home", lambda: -10**9), ("end", lambda: 10**9)):
            keys.add(name, filter=paging)(scroll(by))
        for name, step in (("left", -1), ("p", -1), ("right", 1), ("n", 1)):
            keys.add(name, filter=paging)(lambda event, step=step: self._go(self.index + step))
        for name in ("q", "c-o"):
            keys.add(name, filter=paging)(lambda event: self._close())
        keys.add("escape", filter=paging, eager=True)(lambda event: self._close())
        keys.add("<any>", filter=paging)(lambda event: None)  # nothing else while it is open
        return keys


def step_lines(number: int, event: Event) -> list[str]:
    """A step whole, as printable lines: what it was, the analysis, the reasoning, then all of its output that is
    kept (a command's full-output file while it exists), or its diff, or its text."""
    from anges.store.results import FileEdit, ShellRun

    lines = [event.title] if event.title else [event.message] if event.type == "history_folded" else []
    for label, text in (("analysis", event.analysis), ("reasoning", event.reasoning)):
        if (text or "").strip():
            lines += [f"{label}:", *("  " + line for line in text.strip().splitlines())]
    shell, edit = ShellRun.of(event), FileEdit.of(event)
    if shell is not None:
        lines += [f"$ {shell.command}", *as_drawn(_full_output(shell)).splitlines(), f"({shell.ending()})"]
    elif edit is not None:
        lines += (edit.diff or edit.error or "").splitlines()
    else:
        lines += (event.content or "").splitlines()
    return [printable(line) for line in lines]


def _full_output(shell: ShellRun) -> str:
    """The command's whole output when its full-output file is still there (its last MAX_READ bytes), else what the
    record kept."""
    if shell.cut and shell.output_path:
        try:  # read only, and not through a link a command put there: what it wrote is shown, never run
            with os.fdopen(os.open(shell.output_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK), "rb") as file:
                size = os.fstat(file.fileno()).st_size
                file.seek(max(size - MAX_READ, 0))
                return file.read().decode(errors="replace")
        except OSError:
            pass
    return shell.output()
