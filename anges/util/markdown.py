"""Markdown that keeps code-like words as written: `greet/__init__.py`, `test_*.py` or `a*b*c` never turn into
emphasis. A markdown-it-py plug-in (`literal_code_words`) that every view rendering Markdown uses."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from markdown_it import MarkdownIt
    from markdown_it.rules_core import StateCore

_BACKTICKS = re.compile(r"`+")
_AUTOLINK = re.compile(r"(<[^<>\s]+>)")
"""Markdown reads no escapes in code spans and autolinks: nothing in them is escaped."""
_WORD = re.compile(r"(?:\\\S|[\w.*/~@+\-:=#%$])+")
"""A run of the characters a path, a glob or an identifier is made of (and of characters escaped already)."""
_DELIMITER = re.compile(r"\\.|([*_])")
_EMPHASIS = re.compile(r"(?P<lead>[*_]*)(?P<inner>.*?)(?P<trail>[*_]*)", re.DOTALL)
_CODE_LIKE = re.compile(r"/|__[^\W_]\w*__|(?:[^\W_]|[./])[*_]+(?:[^\W_]|[./])|^[*_]+[./]|[./][*_]+$|\.[^\W_]")
"""What makes a word with `*` or `_` code rather than emphasis: a path, a dunder, a delimiter inside a word or next
to a dot or slash (`test_*.py`, `*.py`, `src/**`), a file name's extension."""
_DUNDER = re.compile(r"__[^\W_]\w*__")


def literal_code_words(md: MarkdownIt) -> None:
    """Plug-in: the `*` and `_` of code-like words are escaped before the inline parse, so they show as written."""
    md.core.ruler.before("inline", "literal_code_words", _escape_inline)


def _escape_inline(state: StateCore) -> None:
    for token in state.tokens:
        if token.type == "inline":
            token.content = escape_code_words(token.content)


def escape_code_words(text: str) -> str:
    """`text` (inline Markdown) with the emphasis delimiters of its code-like words escaped."""
    parts, start = [], 0
    for left, right in _code_spans(text):
        parts += [_escaped_words(text[start:left]), text[left:right]]
        start = right
    parts.append(_escaped_words(text[start:]))
    return "".join(parts)


def _code_spans(text: str) -> list[tuple[int, int]]:
    """Where the code spans of `text` begin and end: a run of backticks up to the next run of the same length (in one
    pass: a run that is never closed is text)."""
    runs = [(match.start(), match.end()) for match in _BACKTICKS.finditer(text)]
    closer: list[int | None] = [None] * len(runs)
    seen: dict[int, int] = {}
    for index in range(len(runs) - 1, -1, -1):
        length = runs[index][1] - runs[index][0]
        closer[index], seen[length] = seen.get(length), index
    spans, index = [], 0
    while index < len(runs):
        end = closer[index]
        if end is None:
            index += 1
            continue
        spans.append((runs[index][0], runs[end][1]))
        index = end + 1
    return spans


def _escaped_words(text: str) -> str:
    pieces = _AUTOLINK.split(text)  # text, autolink, text, ...
    pieces[::2] = [_WORD.sub(_escaped_word, piece) for piece in pieces[::2]]
    return "".join(pieces)


def _escaped_word(match: re.Match[str]) -> str:
    word = match.group()
    if "*" not in word and "_" not in word:
        return word
    end = len(word.rstrip(".:"))  # the end of a sentence is not part of the word
    parts = _EMPHASIS.fullmatch(word[:end])
    assert parts is not None  # every text matches
    lead, inner, trail = parts.group("lead", "inner", "trail")
    if lead and trail == lead[::-1] and inner and not _DUNDER.fullmatch(word[:end]):
        return lead + _escaped_word_core(inner) + trail + word[end:]  # emphasis around the word: markup
    return _escaped_word_core(word[:end]) + word[end:]


def _escaped_word_core(word: str) -> str:
    if ("*" in word or "_" in word) and _CODE_LIKE.search(word):
        return _DELIMITER.sub(_escaped_delimiter, word)
    return word


def _escaped_delimiter(found: re.Match[str]) -> str:
    return "\\" + found.group(1) if found.group(1) else found.group()  # one escaped already stays as it is
