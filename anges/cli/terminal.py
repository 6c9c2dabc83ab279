"""Where anges draws: whether a stream is a terminal, its width and colour, and rich renderables turned into its text.

Every escape sequence anges writes comes from rich (the transcript) or prompt_toolkit (the live part of the
screen); none is written by hand. Untrusted text is made `printable` before it becomes a renderable, and it is
always put in `rich.text.Text` (never parsed as rich markup).
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TextIO

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

UNLIMITED = 100_000
"""The width of plain output (a pipe, a file): lines are never wrapped or cut there."""


def is_terminal(stream: TextIO) -> bool:
    """True when `stream` is an interactive terminal that understands escape sequences (not TERM=dumb)."""
    try:
        return stream.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):
        return False


def wants_colour(stream: TextIO) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (https://no-color.org)."""
    return is_terminal(stream) and not os.environ.get("NO_COLOR")


@dataclass(frozen=True)
class Display:
    """How to draw on one output stream: styled (a terminal), coloured, and as wide as that terminal."""

    stream: TextIO
    styled: bool
    colour: bool

    @classmethod
    def of(cls, stream: TextIO) -> Display:
        """The display of `stream`, as its terminal (or its absence) and the environment say."""
        return cls(stream, is_terminal(stream), wants_colour(stream))

    @classmethod
    def plain(cls, stream: TextIO) -> Display:
        """Plain text on `stream` whatever it is."""
        return cls(stream, False, False)

    def width(self) -> int:
        """The columns of this stream's terminal now (never stdout's: the transcript may be on stderr)."""
        return terminal_size(self.stream)[0] if self.styled else UNLIMITED

    def text(self, renderables: Iterable[RenderableType], width: int | None = None) -> str:
        """The renderables as this display shows them (ANSI on a terminal, plain text elsewhere), each line ended."""
        buffer = io.StringIO()
        console = self.console(buffer, width or self.width())
        for renderable in renderables:
            # console.print joins Text into a new Text that forgets whether it wraps: say it again
            console.print(renderable, no_wrap=getattr(renderable, "no_wrap", None),
                          overflow=getattr(renderable, "overflow", None))
        return buffer.getvalue()

    def console(self, file: TextIO, width: int) -> Console:
        """A rich console writing to `file` the way this display draws."""
        from rich.console import Console

        system: Literal["auto", "standard"] | None = ("auto" if self.colour else "standard") if self.styled else None
        return Console(file=file, width=width, force_terminal=self.styled, no_color=not self.colour,
                       color_system=system, highlight=False, markup=False,
                       emoji=False, soft_wrap=False, legacy_windows=False, force_jupyter=False,
                       _environ={"TERM": os.environ.get("TERM", "xterm"), "COLORTERM": os.environ.get("COLORTERM", "")})

    def write(self, renderables: Iterable[RenderableType]) -> None:
        """Draw the renderables on the stream now."""
        text = self.text(renderables)
        if text:
            self.stream.write(text)
            self.stream.flush()


def terminal_size(stream: TextIO) -> tuple[int, int]:
    """(columns, rows) of the terminal `stream` is on: COLUMNS and LINES when set, as `shutil` reads them, else the
    terminal's own (80 x 24 when it says 0 or is none)."""
    try:
        columns, rows = os.get_terminal_size(stream.fileno())
    except (OSError, ValueError, AttributeError):
        columns, rows = 0, 0
    return _positive(os.environ.get("COLUMNS"), columns or 80), _positive(os.environ.get("LINES"), rows or 24)


def _positive(text: str | None, default: int) -> int:
    try:
        return int(text) if text and int(text) > 0 else default
    except ValueError:
        return default


def seconds(value: float) -> str:
    """A duration as `4.2s` or `3m07s`."""
    if value < 60:
        return f"{value:.1f}s"
    minutes, rest = divmod(int(value), 60)
    return f"{minutes}m{rest:02d}s"
