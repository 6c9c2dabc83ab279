"""Small file operations the store builds on: whole writes and reads, private temp files, locks without waiting."""

from __future__ import annotations

import fcntl
import os
import time
from contextlib import suppress
from pathlib import Path

from anges.store.events import new_id
from anges.util.paths import make_dirs, write_file

LOCK_PAUSE = 0.004
"""Between attempts to take a held lock (is_running() holds a shared one for a few microseconds)."""


def write_all(fd: int, data: bytes) -> None:
    """Write `data` (one write call unless the kernel writes less)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def pread_all(fd: int, offset: int, size: int) -> bytes:
    """`size` bytes from `offset` (fewer at the end of the file)."""
    chunks = []
    while size > 0:
        chunk = os.pread(fd, size, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def make_private_dirs(path: Path) -> None:
    """Create `path` and its missing parents, each with mode 0o700 (never through a link: `make_dirs`)."""
    make_dirs(str(path), 0o700)


def temp_copy(path: Path, data: bytes, durable: bool = False) -> Path:
    """A new 0o600 temp file beside `path` holding `data` (`.NAME.RANDOM.tmp`)."""
    temp = path.with_name(f".{path.name}.{new_id(8)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        write_all(fd, data)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    return temp


def remove_temps(directory: Path, stems: list[str]) -> None:
    """Remove the temp files `temp_copy` made for the files named `STEM.*` in `directory` (a crash leaves them)."""
    prefixes = tuple(f".{stem}." for stem in stems)
    with os.scandir(directory) as entries:
        for entry in entries:
            if entry.name.startswith(prefixes) and entry.name.endswith(".tmp"):
                with suppress(FileNotFoundError):
                    os.unlink(entry.path)


def replace_file(path: Path, data: bytes) -> None:
    """Replace `path` with `data` atomically (a link there is replaced, never written through: `write_file`)."""
    write_file(str(path), data)


def try_lock(fd: int, operation: int, attempts: int) -> bool:
    """Take an flock without blocking, retrying briefly; False if it stays held elsewhere."""
    for attempt in range(attempts):
        try:
            fcntl.flock(fd, operation | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if attempt + 1 < attempts:
                time.sleep(LOCK_PAUSE)
    return False
