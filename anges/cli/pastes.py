"""Large pastes in the input box: shown collapsed, `[pasted 30 lines]`, and sent whole.

The marker stands for the text in the box: Enter sends the text in its place; deleting the marker drops the paste;
a marker typed by hand (or one whose paste is gone) is sent as typed."""

from __future__ import annotations

import re

COLLAPSE_LINES = 10
"""A paste of more lines than this is collapsed."""
COLLAPSE_CHARS = 1000
"""So is one of more characters (a long line, a minified file)."""
MAX_PASTES = 100
"""Pastes kept for one request (the oldest go first: their markers are then sent as typed)."""


class Pastes:
    """The collapsed pastes of the request being written, by marker."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}

    def collapse(self, text: str) -> str:
        """What goes into the box for pasted `text`: a marker when it is large, else the text itself."""
        text = text.replace("\r\n", "\n").replace("\r", "\n")
        lines = text.count("\n") + (not text.endswith("\n"))
        if lines <= COLLAPSE_LINES and len(text) <= COLLAPSE_CHARS:
            return text
        size = f"{lines} lines" if lines > 1 else f"{len(text):,} characters"
        marker = f"[pasted {size}]"
        number = 1
        while marker in self.texts:
            number += 1
            marker = f"[pasted {size} #{number}]"
        if len(self.texts) >= MAX_PASTES:
            del self.texts[next(iter(self.texts))]
        self.texts[marker] = text
        return marker

    def expand(self, text: str) -> str:
        """`text` with each marker of a paste replaced by what was pasted."""
        if not self.texts:
            return text
        pattern = re.compile("|".join(re.escape(marker) for marker in sorted(self.texts, key=len, reverse=True)))
        return pattern.sub(lambda match: self.texts[match.group(0)], text)

    def clear(self) -> None:
        self.texts.clear()
