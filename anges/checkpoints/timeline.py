"""The checkpoints of one stream, in the order they were taken: an append-only JSON-lines file.

Three kinds of entry: `step` (before a step that can change files: what follows, up to the next entry, is that
step's doing), `undo` (before an undo was applied) and `end` (a run or an undo ended: what follows, up to the next
entry, is someone else's doing).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields
from datetime import datetime
from pathlib import Path

from anges.checkpoints.snapshot import LeftOut, Snapshot
from anges.util.paths import open_file

MAX_TAILS = 256


@dataclass
class Entry:
    """One checkpoint of a stream: the commit of each folder it covers, and what it left out."""

    id: int
    """1, 2, ... in the order of the stream's checkpoints; a step's event names it (`data["checkpoint"]["id"]`)."""
    kind: str
    roots: dict[str, str]
    """Folder -> the commit holding it."""
    left_out: dict[str, dict] = field(default_factory=dict)
    """Folder -> what was left out of it (a `LeftOut` as a dict); only folders where something was."""
    time: str = ""
    event: int = 0
    """The position (1-based, every event counted) the step's event was expected to take in the stream (views name
    it by its number: `anges.store.numbers`)."""
    action: str = ""
    subject: str = ""
    """The step's command, file or tool, on one line."""
    outside: bool = False
    """The step could write beyond the covered folders: run outside the sandbox, an MCP tool, a plug-in."""
    error: str = ""
    """Why a folder is missing from `roots`."""
    to: int = 0
    """An undo: the id of the entry it restored."""

    def left_out_of(self, root: str) -> LeftOut:
        return LeftOut.from_dict(self.left_out.get(root))


class Timeline:
    """The checkpoint entries of one stream (its file is only appended to, under the store's lock)."""

    def __init__(self, path: Path):
        self.path = path
        self._fd = -1
        """The file, open for appending after the first append (kept: one write per entry)."""

    def __del__(self) -> None:
        if getattr(self, "_fd", -1) >= 0:
            os.close(self._fd)

    def entries(self) -> list[Entry]:
        """Every entry, oldest first (a torn last line, from a crash, is skipped)."""
        try:
            lines = self.path.read_bytes().splitlines()
        except FileNotFoundError:
            return []
        entries: list[Entry] = []
        previous: dict[str, dict] = {}
        for line in lines:
            try:
                data = json.loads(line)
                entry = Entry(**data)
            except (ValueError, TypeError):
                continue
            entry.left_out = {**{root: value for root, value in previous.items() if root in entry.roots},
                              **entry.left_out}  # unchanged lists are written once
            entry.left_out = {root: value for root, value in entry.left_out.items() if value}
            previous = entry.left_out
            entries.append(entry)
        return entries

    def append(self, kind: str, snapshots: dict[str, Snapshot], **facts) -> Entry:
        """Record a new entry of `snapshots` (the caller holds the store's lock)."""
        last_id, previous = self._last()
        left_out = {root: snap.left_out.to_dict() for root, snap in snapshots.items()}
        entry = Entry(id=last_id + 1, kind=kind,
                      roots={root: snap.commit for root, snap in snapshots.items()},
                      left_out={root: value for root, value in left_out.items() if value != previous.get(root, {})},
                      time=datetime.now().isoformat(timespec="seconds"), **facts)
        line = json.dumps({f.name: value for f in fields(entry)  # written at once: no deep copy (asdict's)
                           if (value := getattr(entry, f.name)) or f.name in ("id", "kind", "roots")}) + "\n"
        if self._fd < 0:
            self._fd = open_file(str(self.path), os.O_WRONLY | os.O_APPEND | os.O_CREAT, parents=True)
        os.write(self._fd, line.encode())
        size = os.fstat(self._fd).st_size
        entry.left_out = {root: value for root, value in left_out.items() if value}
        if len(_tails) >= MAX_TAILS:
            _tails.clear()
        _tails[str(self.path)] = (size, entry.id, entry.left_out)
        return entry

    def _last(self) -> tuple[int, dict]:
        """The id and left-out lists of the last entry; read again only if someone else appended since."""
        try:
            size = os.stat(self.path).st_size
        except FileNotFoundError:
            return 0, {}
        cached = _tails.get(str(self.path))
        if cached is not None and cached[0] == size:
            return cached[1], cached[2]
        entries = self.entries()
        return (entries[-1].id, entries[-1].left_out) if entries else (0, {})


_tails: dict[str, tuple[int, int, dict]] = {}
"""Per timeline file: its size after this process's last append, that entry's id and left-out lists (so an
append does not read the whole file again)."""
