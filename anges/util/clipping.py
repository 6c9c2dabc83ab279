"""Cutting text to a size: the head and tail around one omission marker, so the model reads one kind of cut."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def omission(count: int, unit: str = "characters") -> str:
    """The marker standing in for what was cut: `\\n... [N characters cut] ...\\n`."""
    return f"\n... [{count} {unit} cut] ...\n"


def line_omission(lines: int, size: int) -> str:
    """The marker standing in for whole lines cut from a command's output: `\\n... [N lines (M bytes) cut] ...\\n`."""
    return omission(lines, f"lines ({size} bytes)")


def cut_at_lines(head: bytes, tail: bytes, size: int, budget: int) -> tuple[bytes, bytes]:
    """What to keep of a text of `size` bytes, given its first bytes `head` and its last bytes `tail`: a head and a
    tail of at most `budget` bytes together, each cut at a line end unless that would waste half its share (one
    huge line is cut where it must be). The text itself when it fits."""
    if size <= budget:
        return head[:size], b""
    share = budget // 2
    start = head[:share]
    end = start.rfind(b"\n") + 1
    if end > share // 2:
        start = start[:end]
    room = budget - len(start)
    rest = tail[len(tail) - room:] if room > 0 else b""
    begin = rest.find(b"\n") + 1
    at_line_start = len(tail) > room and tail[len(tail) - room - 1:len(tail) - room] == b"\n"
    if not at_line_start and 0 < begin < len(rest) and begin <= len(rest) // 2:
        rest = rest[begin:]
    return start, rest


def clipped(text: str, limit: int = 0, lines: int = 0) -> tuple[str, int]:
    """`text` cut to its head and tail around one `omission` marker, and the number of characters cut.

    The result is at most `limit` characters, marker included, and at most `lines` lines plus the marker
    (half from the start, half from the end); 0 means no limit of that kind.
    """
    too_many_lines = lines > 0 and text.count("\n") >= lines
    if not too_many_lines and (limit <= 0 or len(text) <= limit):
        return text, 0
    head = tail = text
    if too_many_lines:
        keep = max(lines // 2, 1)
        head = "\n".join(text.split("\n", keep)[:keep])
        tail = "\n".join(text.rsplit("\n", keep)[-keep:])
    if limit > 0:
        room = limit - len(omission(len(text)))  # the marker is never longer than with this count
        if room < 2:
            return text[:limit], len(text) - limit
        head, tail = _at_line_ends(text, min(len(head), room - room // 2), min(len(tail), room // 2))
    cut = len(text) - len(head) - len(tail)
    return head + omission(cut) + tail, cut


def _at_line_ends(text: str, head: int, tail: int) -> tuple[str, str]:
    """The first `head` and last `tail` characters of `text`, each cut back to a line end (a line start) unless it
    already is one or that would waste half of it (one long line is cut where it must be): a cut splits no line it
    need not."""
    if 0 < head < len(text) and text[head] != "\n" and (end := text.rfind("\n", 0, head)) >= head // 2:
        head = end
    start = len(text) - tail
    if 0 < start < len(text) and text[start - 1] != "\n" and 0 <= (begin := text.find("\n", start)) - start < tail // 2:
        start = begin + 1
    return text[:head], text[start:]


def clip(text: str, limit: int = 0, lines: int = 0) -> str:
    """`text` within `limit` characters (marker included) and `lines` lines: see `clipped`."""
    if (limit <= 0 or len(text) <= limit) and (lines <= 0 or text.count("\n") < lines):
        return text  # the common case, on every step's history: no tuple, no second call
    return clipped(text, limit, lines)[0]


def clip_lines(lines: list[T], limit: int, mark: Callable[[int], T]) -> list[T]:
    """The first and last of `lines` when there are more than `limit` (+1: the marker takes a line anyway),
    with `mark(number cut)` between them (a terminal view's own marker)."""
    if len(lines) <= limit + 1:
        return lines
    head = max(limit // 2, 1)
    tail = max(limit - head, 1)
    return lines[:head] + [mark(len(lines) - head - tail)] + lines[-tail:]


def shorten(text: str, limit: int, at_word: bool = False) -> str:
    """The start of `text` within `limit` characters, ending in `…` when it was cut (for one-line labels);
    `at_word` cuts at the last space instead of mid-word (unless that would keep less than half)."""
    if len(text) <= limit:
        return text
    head = text[: max(limit - 1, 0)]
    if at_word and not text[len(head)].isspace():
        space = head.rfind(" ")
        head = (head[:space] if space > limit // 2 else head).rstrip()
    return head + "…"


def one_line(text: str, limit: int) -> str:
    """`text` with its whitespace runs made single spaces, then `shorten`ed at a word boundary (titles)."""
    return shorten(" ".join(text.split()), limit, at_word=True)
