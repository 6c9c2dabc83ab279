"""Lines too long for the screen, wrapped under their gutter: a command's output under its `│`, a diff's code right
of its `+` and `-` column, a command after its `$`. Cut at the edge, a line could hide the very change being made;
wrapped by the terminal, its rest would fall to column 0, under the gutter."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.cells import cell_len
from rich.text import Text

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderResult


class Wrapped:
    """`head` then `body`, folded at the width left after it; each further piece after `rest` (by default, `head`
    again)."""

    def __init__(self, head: Text | str, body: Text, rest: Text | str | None = None):
        self.head = Text(head) if isinstance(head, str) else head
        self.body = body
        rest = self.head if rest is None else rest
        self.rest = Text(rest) if isinstance(rest, str) else rest

    @property
    def plain(self) -> str:
        """The text on one line (what a test or a search reads)."""
        return self.head.plain + self.body.plain

    def __str__(self) -> str:
        return self.plain

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = max(options.max_width - max(self.head.cell_len, self.rest.cell_len), 1)
        for number, piece in enumerate(fold(self.body, width)):
            yield Text.assemble(self.head if number == 0 else self.rest, piece, no_wrap=True, overflow="crop")


def fold(text: Text, width: int) -> list[Text]:
    """`text` in pieces of at most `width` columns (wide characters take two), cut between characters, every space
    kept; one piece when it fits."""
    offsets, used = [], 0
    for index, char in enumerate(text.plain):
        size = cell_len(char)
        if used + size > width and used:
            offsets.append(index)
            used = 0
        used += size
    return list(text.divide(offsets)) if offsets else [text]
