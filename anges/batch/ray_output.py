"""What Ray itself prints while a batch runs on it, kept out of the batch's output: in the batch's `ray.log`."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from anges.util.paths import open_file, write_file

LOG_CAP = 4 * 2**20
"""Bytes of `ray_output`'s log kept after the batch (its end)."""


@contextmanager
def ray_output(log: Path) -> Iterator[TextIO]:
    """Inside, whatever is written to file descriptor 2 (Ray's own warnings, its raylet's and workers' lines, a lost
    node's traceback: printed by Ray's C++ core and Python loggers alike) goes to `log`; the stream yielded writes
    to the real stderr, for the batch's own display."""
    from anges.store.fileops import make_private_dirs

    make_private_dirs(log.parent)
    sys.stderr.flush()
    target = open_file(str(log), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    saved = os.dup(2)
    shown = os.fdopen(os.dup(saved), "w", buffering=1, encoding=sys.stderr.encoding or "utf-8", errors="replace")
    os.dup2(target, 2)
    os.close(target)
    try:
        yield shown
    finally:
        sys.stderr.flush()
        shown.close()
        os.dup2(saved, 2)
        os.close(saved)
        _keep_end(log, LOG_CAP)


def _keep_end(path: Path, cap: int) -> None:
    """Cut a file to its last `cap` bytes (logs are appended to; their end matters)."""
    try:
        if path.stat().st_size <= cap:
            return
        with open(path, "rb") as file:
            file.seek(-cap, os.SEEK_END)
            end = file.read()
        write_file(str(path), end)
    except OSError:
        return
