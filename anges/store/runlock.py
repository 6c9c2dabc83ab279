"""Which process runs a stream now, and asking it to stop: the `<uid>.lock` and `<uid>.stop` side files.

A run holds an exclusive flock on `<uid>.lock` while it is active (the kernel releases it when the holder exits
or dies) and writes its name there (`{"pid", "started", "host"}`). A stop request is the file `<uid>.stop`,
which the running agent polls.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from anges.exceptions import StreamBusy
from anges.store.fileops import try_lock, write_all

LOCK_ATTEMPTS = 5
"""is_running() holds a shared lock for a few microseconds; a run starting at that instant retries briefly."""


class RunLocks:
    """The run locks and stop requests of the streams whose side files `path(uid, suffix)` names."""

    def __init__(self, path: Callable[[str, str], Path], make_root: Callable[[], None]):
        self.path = path
        self.make_root = make_root

    @contextmanager
    def hold(self, uid: str) -> Iterator[None]:
        """Hold the exclusive "a run is active" lock of `uid`; StreamBusy at once if it is held elsewhere."""
        path = self.path(uid, ".lock")
        self.make_root()
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            if not try_lock(fd, fcntl.LOCK_EX, LOCK_ATTEMPTS):
                owner = self.owner(uid)
                where = f" (process {owner['pid']} on {owner['host']})" if owner else ""
                raise StreamBusy(f"stream {uid!r} is busy: a run is already active on it{where}")
            os.ftruncate(fd, 0)
            write_all(fd, json.dumps(_this_process()).encode())
            yield
        finally:
            os.close(fd)

    def owner(self, uid: str) -> dict | None:
        """The process running `uid` (`pid`, `started`: its start time in clock ticks, `host`); None when none is."""
        if not self.is_running(uid):
            return None
        try:
            fd = os.open(self.path(uid, ".lock"), os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        with os.fdopen(fd, "rb") as file:
            raw = file.read(4096)
        try:
            owner = json.loads(raw)
        except ValueError:
            return None  # the run is starting and has not written its name yet
        return owner if isinstance(owner, dict) and isinstance(owner.get("pid"), int) else None

    def is_running(self, uid: str) -> bool:
        """True while some process (this one included) holds the run lock of `uid`."""
        try:
            fd = os.open(self.path(uid, ".lock"), os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return False
        try:
            return not try_lock(fd, fcntl.LOCK_SH, 1)
        finally:
            os.close(fd)

    def request_stop(self, uid: str) -> None:
        """Ask the run active on `uid` to stop (its agent polls `stop_requested`)."""
        os.close(os.open(self.path(uid, ".stop"), os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600))

    def clear_stop(self, uid: str) -> None:
        """Forget a stop request (a new run starts)."""
        with suppress(FileNotFoundError):
            os.unlink(self.path(uid, ".stop"))


def _this_process() -> dict:
    return {"pid": os.getpid(), "started": _process_start(os.getpid()), "host": socket.gethostname()}


def _process_start(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since boot (/proc/PID/stat); None where that is unknown.

    With the pid it names one process: a pid reused by a later process has another start time.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            stat_line = file.read()
    except OSError:
        return None
    fields = stat_line[stat_line.rfind(b")") + 2:].split()
    return int(fields[19]) if len(fields) > 19 else None
