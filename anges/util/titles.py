"""Titles made from a task's words that tell tasks apart: a leading "In /some/dir," is dropped (the chat's working
directory says where), and a long absolute path is cut to its last two parts."""

from __future__ import annotations

import re

from anges.util.clipping import one_line

_LEADING_PLACE = re.compile(
    r"(?:in|inside|within|under|from)\s+(?:the\s+)?(?:(?:directory|folder|repo|repository|project|workspace)\s+)?"
    r"[`'\"]?(?:~|\.{1,2})?/[^\s,;:`'\"]*[`'\"]?(?:\s*[,;:]\s*|\s+-\s+|\s+)", re.IGNORECASE)
_LONG_PATH = re.compile(r"(?<![\w./~:-])(?:~|)/(?:[^\s/]+/){2,}[^\s/]*")


def task_title(text: str, limit: int = 80) -> str:
    """A one-line title for a task, cut at a word boundary within `limit` characters."""
    flat = " ".join(text.split())
    place = _LEADING_PLACE.match(flat)
    if place and place.end() < len(flat):
        rest = flat[place.end():]
        flat = rest[0].upper() + rest[1:]
    return one_line(_LONG_PATH.sub(_last_parts, flat), limit)


def _last_parts(found: re.Match[str]) -> str:
    path = found.group()
    parts = path.rstrip("/").split("/")
    return "…/" + "/".join(parts[-2:]) + ("/" if path.endswith("/") else "")
