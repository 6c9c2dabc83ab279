"""What changed in a folder since the last look, from the kernel (inotify): a watch on each folder (names made,
removed, renamed, files written) and on each covered file (written or linked through any of its hard links). Linux
only; where inotify cannot serve (another system, the user's watch limit reached) there is no `Watcher` and every
checkpoint asks git."""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field

IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE = 0x2, 0x4, 0x8
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x40, 0x80, 0x100, 0x200
IN_DELETE_SELF, IN_MOVE_SELF = 0x400, 0x800
IN_Q_OVERFLOW, IN_IGNORED, IN_ONLYDIR, IN_DONT_FOLLOW, IN_ISDIR = 0x4000, 0x8000, 0x01000000, 0x02000000, 0x40000000
IN_NONBLOCK, IN_CLOEXEC = os.O_NONBLOCK, os.O_CLOEXEC
FILE_EVENTS = IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_DELETE_SELF | IN_MOVE_SELF
FOLDER_EVENTS = FILE_EVENTS | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_ONLYDIR
_EVENT = struct.Struct("iIII")


class Unwatchable(OSError):
    """inotify cannot watch this folder (no inotify, or the watch limit reached)."""


@dataclass
class Seen:
    """What the events since the last look say."""

    paths: set[str] = field(default_factory=set)
    """Files (relative) that may have changed: written, made, removed or renamed."""
    everything: bool = False
    """Events were lost (the queue overflowed) or folders changed: only a full look can tell."""


class Watcher:
    """inotify watches on one folder's subfolders and covered files."""

    def __init__(self, root: str):
        self.root = root
        self._libc = _libc()
        fd = self._libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise Unwatchable(_errno(), "inotify is not available")
        self.fd = fd
        self._folders: dict[int, str] = {}
        self._files: dict[int, set[str]] = {}
        self._watched: set[str] = set()

    def watch_folder(self, folder: str) -> bool:
        """Watch the folder `folder` (relative, "" or ending with /) for names made, removed and written; True when
        it was not watched under that name before."""
        wd = self._add(folder, FOLDER_EVENTS | IN_DONT_FOLLOW)
        if wd < 0 or self._folders.get(wd) == folder:
            return False
        self._folders[wd] = folder
        return True

    def watch_file(self, path: str) -> None:
        """Watch the file `path` (relative) itself: a write through another hard link of it is seen too."""
        if path in self._watched:
            return
        wd = self._add(path, FILE_EVENTS | IN_DONT_FOLLOW)
        if wd >= 0:
            self._files.setdefault(wd, set()).add(path)
            self._watched.add(path)

    def forget_file(self, path: str) -> None:
        """`path` is to be watched again when next asked (it was replaced: its watch follows the old file)."""
        self._watched.discard(path)

    def seen(self) -> Seen:
        """What changed since the last call (reads the events waiting, never blocks)."""
        seen = Seen()
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return seen
            offset = 0
            while offset < len(data):
                wd, mask, _cookie, size = _EVENT.unpack_from(data, offset)
                name = os.fsdecode(data[offset + _EVENT.size:offset + _EVENT.size + size].rstrip(b"\0"))
                offset += _EVENT.size + size
                self._take(seen, wd, mask, name)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _take(self, seen: Seen, wd: int, mask: int, name: str) -> None:
        if mask & IN_Q_OVERFLOW:
            seen.everything = True
        elif wd in self._folders:
            if mask & IN_IGNORED:
                del self._folders[wd]
            if mask & (IN_ISDIR | IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED):
                seen.everything = True  # a folder made, removed, renamed or chmodded: only a full look can tell
            elif name:
                seen.paths.add(self._folders[wd] + name)
        elif wd in self._files:
            seen.paths.update(self._files[wd])
            if mask & IN_IGNORED:
                for path in self._files.pop(wd):
                    self._watched.discard(path)

    def _add(self, path: str, mask: int) -> int:
        wd = self._libc.inotify_add_watch(self.fd, os.fsencode(os.path.join(self.root, path)), mask)
        if wd < 0:
            code = _errno()
            if code in (28, 24):  # ENOSPC, EMFILE: the user's watch limit
                raise Unwatchable(code, "the inotify watch limit is reached (fs.inotify.max_user_watches)")
        return wd


def _libc():
    import ctypes
    import ctypes.util

    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if not hasattr(libc, "inotify_init1"):
        raise Unwatchable(38, "this system has no inotify")
    return libc


def _errno() -> int:
    import ctypes

    return ctypes.get_errno()
