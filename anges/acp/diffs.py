"""An edit's unified diff as the old and new text ACP `diff` content carries."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MAX_FILE_BYTES = 1_000_000
"""Larger files are shown by the changed parts only."""

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass
class Hunk:
    """One `@@` block: where it starts in the new file, and its lines on each side (with their ends)."""

    new_start: int
    old: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)


def parse(diff: str) -> tuple[list[Hunk], bool]:
    """The hunks of a unified diff, and whether it creates the file (its old side is /dev/null)."""
    hunks: list[Hunk] = []
    created = False
    last: list[list[str]] = []
    for line in diff.splitlines(keepends=True):
        if line.startswith("--- "):
            created = line[4:].strip() == "/dev/null"
            continue
        if line.startswith("+++ "):
            continue
        match = _HUNK.match(line)
        if match:
            hunks.append(Hunk(int(match[3])))
            continue
        if not hunks:
            continue
        hunk, body = hunks[-1], line[1:]
        if line.startswith("\\"):  # "\ No newline at end of file": the line before ends without one
            for side in last:
                side[-1] = side[-1].rstrip("\n")
            continue
        last = {" ": [hunk.old, hunk.new], "-": [hunk.old], "+": [hunk.new]}.get(line[:1], [])
        for side in last:
            side.append(body if body.endswith("\n") else body + "\n")
    return hunks, created


def hunk_texts(diff: str) -> list[tuple[str | None, str]]:
    """(old, new) text of each changed part, with the diff's context lines; old is None for a new file."""
    hunks, created = parse(diff)
    return [(None if created else "".join(h.old), "".join(h.new)) for h in hunks]


def file_texts(path: str, diff: str) -> tuple[str | None, str] | None:
    """(old, new) text of the whole file: the file as it is now and the diff undone; None when the file no longer
    matches the diff (changed since), is too large, or cannot be read."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_FILE_BYTES:
        return None
    try:
        new = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    hunks, created = parse(diff)
    if not hunks:
        return None
    lines = new.splitlines(keepends=True)
    for hunk in reversed(hunks):
        start = hunk.new_start - 1 if hunk.new else hunk.new_start
        if lines[start:start + len(hunk.new)] != hunk.new:
            return None
        lines[start:start + len(hunk.new)] = hunk.old
    return (None if created else "".join(lines)), new
