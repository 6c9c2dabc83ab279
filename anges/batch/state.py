"""A batch's folder, `ANGES_HOME/data/batches/<batch id>/`: its lock, its append-only log and its results.

`log.jsonl` has one line when a task's run starts (`{"kind": "start", "task", "stream_id", "time"}`) and one
when it ends (`{"kind": "end", "task", "stream_id", "status", "error", "wall_time", "time"}`, and for a task with
a check, `check`: how it went, null when it did not run; `anges.batch.checks`), so a later
`anges batch` of the same batch knows each task's stream. A run whose `anges batch` was killed has no end line;
the next `anges batch` writes it (`"recovered": true`), its wall time read from the stream's last event.
`results.jsonl` is rewritten at the end of each run of the batch; `work/<task id>/` are the work directories of
the local engine; `ray.log` is what Ray itself printed while the batch ran on it.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from anges.config.loading import anges_home
from anges.exceptions import BatchError
from anges.store.events import is_valid_id
from anges.store.fileops import make_private_dirs
from anges.util.paths import links_on_the_way, links_text, open_file, resolve, write_file

MAX_ERROR_CHARS = 2000


@dataclass
class TaskRecord:
    """What the log says of one task: its latest stream and how its latest run ended."""

    stream_id: str | None = None
    status: str | None = None
    """The end status of the latest run ("error" = it never got to run the agent); None while unknown."""
    error: str | None = None
    wall_time: float = 0.0
    """Seconds spent on the latest stream, over every run of the batch that worked on it."""
    has_check: bool = False
    """The task has a check (the log of its latest run says)."""
    check: dict | None = None
    """How the task's check went after the latest run (`anges.batch.checks.run_check`); None: it did not run."""
    open_since: float | None = None
    """When a run started that the log has no end for (its `anges batch` was killed): the time of its start."""


class BatchState:
    """The folder of one batch."""

    def __init__(self, batch_id: str, root: Path | None = None):
        if not is_valid_id(batch_id):
            raise BatchError(f"invalid batch id {batch_id[:80]!r}: use 1-64 letters, digits, '-' or '_'")
        self.batch_id = batch_id
        self.root = (root or anges_home() / "data" / "batches") / batch_id
        self.log_path = self.root / "log.jsonl"
        self.results_path = self.root / "results.jsonl"
        self._records: dict[str, TaskRecord] | None = None

    def work_dir(self, task_id: str) -> Path:
        return self.root / "work" / task_id

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the batch while it runs: a second `anges batch` of the same batch is refused."""
        make_private_dirs(self.root)
        fd = open_file(str(self.root / "lock"), os.O_RDWR | os.O_CREAT)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise BatchError(f"batch {self.batch_id} is already running in another process") from None
            yield
        finally:
            os.close(fd)

    def started(self, task_id: str, stream_id: str) -> None:
        self._append({"kind": "start", "task": task_id, "stream_id": stream_id})

    def ended(self, task_id: str, stream_id: str | None, status: str, error: str | None, wall_time: float,
              check: dict | None = None, has_check: bool = False, recovered: bool = False) -> None:
        """Log the end of a task's run; `check` is how its check went (None: it did not run), if it `has_check`;
        `recovered` marks the end of a run whose `anges batch` was killed, logged by the next one."""
        self._append({"kind": "end", "task": task_id, "stream_id": stream_id, "status": status,
                      "error": (error or "")[:MAX_ERROR_CHARS] or None, "wall_time": round(wall_time, 3),
                      **({"check": check} if has_check else {}), **({"recovered": True} if recovered else {})})

    def records(self) -> dict[str, TaskRecord]:
        """Each task's record, folded from the log once (a torn last line is ignored), then kept up to date."""
        if self._records is None:
            self._records = {}
            try:
                lines = self.log_path.read_bytes().split(b"\n")
            except FileNotFoundError:
                lines = []
            for line in lines:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if isinstance(entry, dict) and isinstance(entry.get("task"), str):
                    _fold(self._records.setdefault(entry["task"], TaskRecord()), entry)
        return self._records

    def write_results(self, results: list[dict]) -> None:
        """Replace results.jsonl at once (temp file and rename)."""
        write_jsonl(self.results_path, results)

    def _append(self, entry: dict) -> None:
        _fold(self.records().setdefault(entry["task"], TaskRecord()), entry)
        make_private_dirs(self.root)
        line = json.dumps({**entry, "time": round(time.time(), 3)}, ensure_ascii=True) + "\n"
        fd = open_file(str(self.log_path), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


def write_jsonl(path: Path, rows: list[dict]) -> None:
    """Write rows as JSON lines through a temp file and a rename, so readers never see half a file."""
    text = "".join(json.dumps(row, ensure_ascii=False, default=str) + "\n" for row in rows)
    write_file(str(path), text.encode("utf-8", errors="replace"), 0o644)


def write_results(rows: list[dict], target: str | None) -> None:
    """`anges batch --output`: the result rows as JSON lines on stdout (`-`) or in a file (none: nowhere)."""
    if target == "-":
        for row in rows:
            sys.stdout.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
        sys.stdout.flush()
    elif target:
        links = links_on_the_way(target, [resolve(os.getcwd())])  # a task working in "." could have made one
        if links:
            raise BatchError(f"not written: {links_text(links)}, and anges never writes through a link (a task's "
                             "command may have made it): remove it, or name another file")
        try:
            write_jsonl(Path(target).expanduser(), rows)
        except OSError as exc:
            raise BatchError(f"cannot write {target}: {exc.strerror or exc}") from None


def _fold(record: TaskRecord, entry: dict) -> None:
    stream_id = entry.get("stream_id")
    if entry.get("kind") == "start":
        if stream_id != record.stream_id:
            record.wall_time = 0.0
        record.stream_id, record.status, record.error, record.check = stream_id, None, None, None
        record.has_check = False
        when = entry.get("time")
        record.open_since = float(when) if isinstance(when, (int, float)) else None
    elif entry.get("kind") == "end":
        if stream_id != record.stream_id:
            record.wall_time = 0.0
        record.stream_id, record.open_since = stream_id, None
        record.status, record.error = entry.get("status"), entry.get("error")
        record.has_check = "check" in entry
        record.check = entry["check"] if isinstance(entry.get("check"), dict) else None
        wall = entry.get("wall_time")
        record.wall_time += wall if isinstance(wall, (int, float)) else 0.0
