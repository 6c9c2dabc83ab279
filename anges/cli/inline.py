"""Erasing the live part of the screen the way terminals really behave, so that no old frame stays on the screen
or lands in the scrollback.

Two things prompt_toolkit's inline renderer does not allow for:

- Erasing "to the end of the screen" from the top-left corner is taken by tmux (3.2 and later: `scroll-on-clear`)
  as clearing the screen, and it moves what the screen shows into the scrollback first. A live part drawn from the
  first row (`clear; anges`) was kept there on each redraw. `InlineOutput.erase_down` clears the row, then the rows
  below it from the next one: the same on every terminal, never from the corner.
- When the terminal gets narrower, most terminals (VTE, kitty, iTerm2, Windows Terminal, Alacritty, tmux) reflow
  what they show: a line longer than the new width takes several rows, the live part's lines included, so moving
  up as many rows as were drawn no longer reaches the top of the live part. xterm and the Linux console cut the
  lines instead. `rows_above` counts the rows the live part takes above the cursor after the terminal reflowed
  it; `Frame` erases that much before the next draw.
"""

from __future__ import annotations

import os
from itertools import zip_longest
from typing import TYPE_CHECKING

from prompt_toolkit.output.vt100 import Vt100_Output

if TYPE_CHECKING:
    from prompt_toolkit.application import Application
    from prompt_toolkit.data_structures import Point

ERASE_BELOW = "\x1b[K\x1b7\x1b[1B\x1b[J\x1b8"
"""Clear this row (the cursor is at its start), save the cursor, clear from the start of the next row down,
restore the cursor: never an erase from the top-left corner (ESC 7 and ESC 8 are the cursor save and restore every
terminal has)."""


class InlineOutput(Vt100_Output):
    """The terminal output of the live part: erases that no terminal takes for clearing the screen."""

    def erase_down(self) -> None:
        # prompt_toolkit erases down only from the start of a row (column 0)
        self.write_raw(ERASE_BELOW)


def reflows(environ: os._Environ | dict = os.environ) -> bool:
    """Whether the terminal rewraps its lines when it gets narrower: all but xterm and the Linux console (inside tmux
    or screen, the multiplexer's own behaviour counts: both reflow)."""
    if environ.get("TMUX") or environ.get("STY"):
        return True
    return not environ.get("XTERM_VERSION") and environ.get("TERM", "") != "linux"


def written(row: dict) -> int:
    """How many columns of a drawn row the terminal holds: up to its last character that is not a space."""
    filled = [x + 1 for x, cell in row.items() if cell.char not in (" ", "")]
    return max(filled, default=0)


def rows_above(widths: list[int], cursor: Point, width: int, reflowed: bool) -> int:
    """The rows the live part takes above the cursor once the terminal is `width` columns wide, its rows having held
    `widths` columns: each takes as many rows as it now needs when the terminal `reflowed` it, else one."""
    if not reflowed:
        return cursor.y
    width = max(width, 1)
    above = sum(max(1, -(-(widths[y] if y < len(widths) else 0) // width)) for y in range(cursor.y))
    return above + cursor.x // width


class Frame:
    """The live part as the terminal holds it: the columns each of its rows has held since it was last erased (a
    row redrawn shorter, its end erased, still rewraps at its old width in tmux)."""

    def __init__(self, app: Application):
        self.app = app
        self.widths: list[int] = []
        app.before_render += self.erase_if_resized
        app.after_render += self._drawn
        app._on_resize = app.invalidate  # type: ignore[method-assign]  # not its erase: ours, before the next draw

    def forget(self) -> None:
        """The live part was erased."""
        self.widths = []

    def _drawn(self, app: Application) -> None:
        drawn = app.renderer.last_rendered_screen
        if drawn is None:
            return
        rows = [written(drawn.data_buffer[y]) for y in range(drawn.height)]
        self.widths = [max(old, new) for old, new in zip_longest(self.widths, rows, fillvalue=0)]

    def erase_if_resized(self, _app: Application | None = None) -> None:
        """Erase the live part as the terminal shows it when the terminal changed size since it was drawn: before
        the next draw or print (the resize signal and the status line's next tick race: whichever comes first finds
        the old frame rewrapped)."""
        renderer, output = self.app.renderer, self.app.output
        size, before = output.get_size(), renderer._last_size  # the size it drew at last
        if before is None or renderer.last_rendered_screen is None or size == before:
            return
        reflowed = reflows() and size.columns < before.columns
        output.write_raw("\r")
        output.cursor_up(rows_above(self.widths, renderer._cursor_pos, size.columns, reflowed))
        output.erase_down()
        output.reset_attributes()
        output.enable_autowrap()
        output.flush()
        renderer.reset(leave_alternate_screen=False)
        self.forget()
