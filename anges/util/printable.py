"""Untrusted text made safe to print: control characters and escape sequences are shown, never obeyed.

Command output, model text, titles and file contents may hold escape sequences that clear the screen,
retitle the window or write the clipboard (OSC 52). Everything anges prints or exports from them passes
through `printable` first; anges' own colours are added afterwards.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterator
from typing import Any

_UNSAFE = re.compile("\r(?!\n)|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069"
                     "\ud800-\udfff]")
"""C0 controls but tab and newline (and the CR of a CRLF), DEL, C1 controls, the bidirectional overrides, and lone
surrogates (no terminal can be sent one)."""
_JSON_UNSAFE = re.compile("[\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
"""What json.dumps(..., ensure_ascii=False) leaves raw that a terminal may still act on."""


def printable(text: str) -> str:
    """`text` with each control character made visible: `^[` for ESC, `^G` for BEL, `^?` for DEL, `<U+009B>`
    for the C1 controls and bidirectional overrides; newlines, tabs and line-ending CRs are kept."""
    if not _UNSAFE.search(text):
        return text
    return _UNSAFE.sub(_shown, text)


_UNSEEN_CATEGORIES = frozenset(("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs", "Me"))
"""Controls, format characters (zero-width, bidirectional, tags), surrogates, private-use and unassigned code
points, line and paragraph separators, every space but the ASCII one, and marks drawn around other text (U+20DD)."""
BLANK_SYMBOLS = frozenset(("\u2800",))
"""Symbols drawn as nothing that no Unicode property calls invisible: the blank Braille pattern."""
MAX_STACKED_MARKS = 2
"""Combining marks shown on one letter (é, ệ); more spill over the lines around them in a browser: they are
marked instead."""


def visible(text: str) -> str:
    """`text` as a person asked to approve it must see it: `printable`, and every other character that shows as
    nothing or as a plain space (`unseen`), or over other text (more than two combining marks on a letter), marked
    `<U+200B>`: what shows is what runs."""
    text = printable(text)
    if text.isascii():
        return text
    return "".join(f"<U+{ord(char):04X}>" if hide else char for char, hide in _judged(text))


def hidden(text: str) -> list[str]:
    """The characters that are not ASCII and that `visible` marks in `text`, each once, in order."""
    if text.isascii():
        return []
    return list(dict.fromkeys(char for char, hide in _judged(text) if hide))


def _judged(text: str) -> Iterator[tuple[str, bool]]:
    """Each character of `text`, and whether `visible` marks it."""
    stacked = 0
    for char in text:
        stacked = stacked + 1 if unicodedata.combining(char) else 0
        yield char, char >= "\x80" and (stacked > MAX_STACKED_MARKS or unseen(char))


@functools.lru_cache(maxsize=4096)
def unseen(char: str) -> bool:
    """Whether a character is one a person cannot see, or sees as a plain space: Unicode's Default_Ignorable_Code_Point
    set (zero-width, bidirectional and other format characters, variation selectors, tags, fillers, the invisible
    Khmer vowels), the categories in `_UNSEEN_CATEGORIES`, and `BLANK_SYMBOLS`."""
    from anges.util.unicode_data import DEFAULT_IGNORABLE

    code = ord(char)
    return (unicodedata.category(char) in _UNSEEN_CATEGORIES or char in BLANK_SYMBOLS
            or any(first <= code <= last for first, last in DEFAULT_IGNORABLE))


def lookalike(char: str) -> str:
    """The ASCII text `char` can be taken for ("" for none): Cyrillic і for i, fullwidth ａ for a (UTS #39)."""
    return _lookalikes().get(char, "")


@functools.cache
def _lookalikes() -> dict[str, str]:
    from anges.util.unicode_data import LOOKALIKES

    return {char: like for like, chars in LOOKALIKES.items() for char in chars}


def unusable(text: str) -> str:
    """Why `text` cannot be a file name or a program's argument ("" when it can): a NUL byte, or a lone surrogate
    (which no encoding can write)."""
    if "\0" in text:
        return "a NUL byte"
    found = re.search("[\ud800-\udfff]", text)
    return f"<U+{ord(found.group()):04X}>, a lone surrogate (not a character)" if found else ""


def printable_texts(value: Any) -> Any:
    """`value` with each string in it, inside dicts and lists too, made `printable`."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {key: printable_texts(item) for key, item in value.items()}
    if isinstance(value, list):
        return [printable_texts(item) for item in value]
    return value


def printable_json(text: str) -> str:
    """JSON text (from `json.dumps(..., ensure_ascii=False)`) with the characters a terminal acts on escaped."""
    return _JSON_UNSAFE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def _shown(match: re.Match) -> str:
    code = ord(match.group())
    if code < 0x20:
        return "^" + chr(code + 0x40)
    if code == 0x7F:
        return "^?"
    return f"<U+{code:04X}>"


_ESCAPE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[ -/]*[0-~]")
"""CSI sequences (colours, cursor moves), OSC sequences (titles, links) and the other escapes."""


def strip_escapes(text: str) -> str:
    """`text` without terminal escape sequences."""
    return _ESCAPE.sub("", text)


def as_drawn(output: str) -> str:
    """A command's output as a terminal would leave its lines: colours and other escape sequences dropped, and of
    a line rewritten after a carriage return (a progress bar) only its last version."""
    lines = strip_escapes(output).split("\n")
    return "\n".join(line.rstrip("\r").rsplit("\r", 1)[-1] for line in lines)
