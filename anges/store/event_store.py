"""EventStore: event streams as append-only JSON-Lines files, the single source of truth.

On disk, under `root` (default `ANGES_HOME/data/event_streams`), each stream has:

- `<uid>.jsonl`: its records (`anges.store.records` describes them and their format versions).
- `<uid>.meta.json`: title, status (and why an interrupted stream stopped), parents, agent type and
  created_at, rewritten atomically only when one of them changes, so listing never parses events. Rebuilt
  from the `.jsonl` when missing or bad.
  A run of `anges batch` also has `batch_id` and `batch_task` there (from its settings).
- `<uid>.lock` and `<uid>.stop`: whether a run is active and who runs it, and stop requests (`anges.store.runlock`).
  A stream whose last status is `running` while nobody holds the lock belongs to a run that died (SIGKILL, a
  crash, a full disk): it reads as `interrupted`.

Every record is one `os.write` on an `O_APPEND` descriptor under an exclusive `flock`, so a crash
loses at most the line being written, and readers (shared lock) always see whole records. What a store
has written of each in-memory stream it keeps beside the stream (the stream itself holds no store).
"""

from __future__ import annotations

import builtins
import errno
import fcntl
import json
import logging
import os
import stat
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from anges.config.loading import anges_home
from anges.exceptions import AngesError, InvalidStreamId, StreamExists, StreamNotFound
from anges.store import records
from anges.store.attached import Attached
from anges.store.events import Event, EventStream, is_valid_id, set_default_loader, status_of, stream_status
from anges.store.events import new_id as make_id
from anges.store.fileops import make_private_dirs, pread_all, remove_temps, replace_file, temp_copy, write_all
from anges.store.outputs import remove_trees
from anges.store.records import FORMAT, StreamInfo
from anges.store.runlock import RunLocks

__all__ = ["FORMAT", "Cursor", "EventStore", "Store", "StreamInfo", "status_of", "stream_status"]

log = logging.getLogger(__name__)


class Store(Protocol):
    """What agents and live views need of a store: an in-memory or SQLite store that does this will do."""

    def load(self, uid: str) -> EventStream: ...
    def sync(self, stream: EventStream) -> list[Event]: ...
    def run_lock(self, uid: str) -> AbstractContextManager[None]: ...
    def stop_requested(self, uid: str) -> bool: ...
    def clear_stop(self, uid: str) -> None: ...
    def read_records(self, uid: str, cursor: Any = None) -> tuple[list[dict], Any]: ...


@dataclass(frozen=True)
class Cursor:
    """How far a live reader got in one stream file; callers pass back what `read_records` returned."""

    ident: tuple[int, int]
    offset: int


@dataclass
class _Mark:
    """How much of one in-memory stream a store (at `root`) has persisted, and where in which file."""

    root: Path
    uid: str
    ident: tuple[int, int]  # (st_dev, st_ino) of the file `offset` refers to
    offset: int  # bytes of that file accounted for; it ends there with a whole line
    written: records.Written


_marks: Attached[_Mark] = Attached()
"""Per in-memory stream; shared by the stores of one process, as a stream may be loaded by one and synced by
another of the same root."""


class EventStore:
    """Event streams on disk: one append-only JSON-Lines file per stream plus a tiny meta file."""

    def __init__(self, root: str | os.PathLike | None = None):
        base = Path(root).expanduser() if root is not None else anges_home() / "data" / "event_streams"
        self.root = Path(os.path.abspath(base))
        self.runs = RunLocks(self._path, self._make_root)

    def __repr__(self) -> str:
        return f"EventStore({str(self.root)!r})"

    # --- writing -----------------------------------------------------------------------------------

    def sync(self, stream: EventStream) -> list[Event]:
        """Append what is new in `stream` since it was last synced, saved or loaded; return the new events."""
        path = self._appended(stream.uid)  # appending opens it with O_NOFOLLOW
        mark = self._mark(stream)
        if mark is None or mark.written.must_rewrite(stream):
            # A stream this store has not seen (or whose history was rewritten in memory) is written whole.
            self._write_whole(stream, replace=True)
            return list(stream.events_list)
        if not mark.written.behind(stream):
            return []
        opened = self._open_for_append(path, stream.uid)
        if opened is None:  # deleted since: write it again
            self._write_whole(stream, replace=True)
            return list(stream.events_list)
        fd, st = opened
        try:
            return self._append(fd, st, str(path), stream, mark)
        finally:
            os.close(fd)

    def save(self, stream: EventStream) -> None:
        """Write a whole stream at once, creating or replacing it atomically (temp file + rename)."""
        self._write_whole(stream, replace=True)

    def import_file(self, path: str | os.PathLike, new_id: bool = False) -> EventStream:
        """Import a stream file: anges 0.1.x JSON (`to_dict` form), our `export`, or our `.jsonl`."""
        try:
            raw = Path(path).read_bytes()
        except OSError as exc:
            raise AngesError(f"{path}: cannot read: {exc.strerror or exc}") from None
        return self._import_stream(records.imported(raw, str(path), new_id), new_id)

    def import_dict(self, data: dict, new_id: bool = False, source: str = "import") -> EventStream:
        """Import a stream in the 0.1.x `to_dict` form; refuse an existing id unless `new_id` (then a fresh id)."""
        return self._import_stream(records.stream_from_dict(data, source, new_id), new_id)

    def _import_stream(self, stream: EventStream, fresh_id: bool) -> EventStream:
        if fresh_id:
            stream.uid = make_id()
        self._write_whole(stream, replace=False)
        last = stream.events_list[-1].created_at if stream.events_list else stream.created_at
        if last.timestamp() < time.time():  # listings date a stream by its file: its last event, not the import
            os.utime(self._path(stream.uid), (last.timestamp(), last.timestamp()))
        return stream

    # --- reading -----------------------------------------------------------------------------------

    def load(self, uid: str) -> EventStream:
        """The stream `uid` as last persisted (a torn last line from a crash is skipped with a warning)."""
        path = self._path(uid, check_link=False)
        data, ident = self._read(path, uid)
        parsed = records.build(records.numbered(data, str(path)), uid, str(path))
        complete = data.rfind(b"\n") + 1  # a torn tail is caught up (and ended) at the next append
        written = records.Written.of(parsed.stream, parsed.stored_events, parsed.status, parsed.format)
        _marks.set(parsed.stream, _Mark(self.root, uid, ident, complete, written))
        return parsed.stream

    def exists(self, uid: str) -> bool:
        """True when the store holds a stream `uid`."""
        try:
            return stat.S_ISREG(os.stat(self._path(uid), follow_symlinks=False).st_mode)
        except FileNotFoundError:
            return False

    def export(self, uid: str) -> dict:
        """The stream in anges 0.1.x's `to_dict` JSON form (0.1.x's `EventStream.from_dict` loads it)."""
        return self.load(uid).to_dict()

    def read_records(self, uid: str, cursor: Cursor | None = None) -> tuple[list[dict], Cursor]:
        """The records written since `cursor` (None: all), up to the last complete line, and the cursor after them.

        When the file was replaced since `cursor` (a whole rewrite), reading starts over: the first record
        returned is then the header, which tells the caller to start over too.
        """
        if cursor is not None and not isinstance(cursor, Cursor):
            raise ValueError(f"not a cursor of this store: {cursor!r}")
        path = self._path(uid, check_link=False)
        fd = self._open_read(path, uid)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            st = os.fstat(fd)
            ident = (st.st_dev, st.st_ino)
            offset = cursor.offset if cursor is not None and cursor.ident == ident else 0
            if offset > st.st_size or (offset and os.pread(fd, 1, offset - 1) != b"\n"):
                offset = 0
            data = pread_all(fd, offset, st.st_size - offset)
        finally:
            os.close(fd)
        end = data.rfind(b"\n") + 1
        return list(records.records(data[:end], str(path))), Cursor(ident, offset + end)

    def info(self, uid: str) -> StreamInfo:
        """Title, status, parents, type and times of one stream, without reading its events."""
        path = self._path(uid)
        try:
            st = os.stat(path, follow_symlinks=False)
        except FileNotFoundError:
            raise StreamNotFound(f"no stream {uid!r} in {self.root}") from None
        return self._info(uid, st)

    def list(self) -> list[StreamInfo]:
        """Every stream, most recently updated first; reads only meta files and a stat of each stream file."""
        infos = [info for info in map(self._entry_info, self._entries()) if info is not None]
        infos.sort(key=lambda info: info.updated_at, reverse=True)
        return infos

    def children(self, uid: str) -> builtins.list[StreamInfo]:
        """The streams whose direct parent (last of their parent ids) is `uid`."""
        if not self.exists(uid):
            raise StreamNotFound(f"no stream {uid!r} in {self.root}")
        return [info for info in self.list() if info.parent_ids and info.parent_ids[-1] == uid]

    # --- deleting, runs and stop requests -----------------------------------------------------------

    def delete(self, uid: str) -> builtins.list[str]:
        """Remove a stream, all its descendants and their side files; return the removed ids.

        Raises StreamBusy, removing nothing, when a run is active on any of them.
        """
        if not self.exists(uid):
            raise StreamNotFound(f"no stream {uid!r} in {self.root}")
        doomed = self._descendants(uid)
        with ExitStack() as locks:
            for each in doomed:
                locks.enter_context(self.run_lock(each))
            for each in reversed(doomed):  # deepest first: an interrupted delete leaves no orphans
                for suffix in (".jsonl", ".meta.json", ".lock", ".stop"):
                    with suppress(FileNotFoundError):
                        os.unlink(self._path(each, suffix))
            remove_temps(self.root, doomed)  # what crashed writers left behind for these streams
            remove_trees(self.root, doomed)  # the files their histories pointed to
        return doomed

    def run_lock(self, uid: str) -> AbstractContextManager[None]:
        """Hold the exclusive "a run is active" lock of `uid`; StreamBusy at once if it is held elsewhere.

        The lock is an flock on `<uid>.lock`: the kernel releases it when the holder exits or dies.
        """
        return self.runs.hold(uid)

    def owner(self, uid: str) -> dict | None:
        """The process running `uid` (`pid`, `started`: its start time in clock ticks, `host`); None when none is."""
        return self.runs.owner(uid)

    def is_running(self, uid: str) -> bool:
        """True while some process (this one included) holds the run lock of `uid`."""
        return self.runs.is_running(uid)

    def shown_status(self, uid: str, stored: str) -> str:
        """`stored`, except that a stream left `running` by a run that is no longer active reads `interrupted`."""
        return "interrupted" if stored == "running" and not self.is_running(uid) else stored

    def request_stop(self, uid: str) -> None:
        """Ask the run active on `uid`, in any process, to stop: its agent polls `stop_requested`."""
        if not self.exists(uid):
            raise StreamNotFound(f"no stream {uid!r} in {self.root}")
        self.runs.request_stop(uid)

    def stop_requested(self, uid: str) -> bool:
        """True when a stop was requested for `uid` since its run started."""
        if not is_valid_id(uid):
            raise InvalidStreamId(f"invalid stream id {repr(uid)[:80]}")
        return os.path.exists(f"{self.root}/{uid}.stop")  # polled often: no Path objects, one stat

    def clear_stop(self, uid: str) -> None:
        """Forget a stop request (a new run starts)."""
        self.runs.clear_stop(uid)

    # --- internals: paths and files ---------------------------------------------------------------

    def _path(self, uid: object, suffix: str = ".jsonl", check_link: bool = True) -> Path:
        """The file of stream `uid`; InvalidStreamId unless the id is well-formed and the path stays in root.

        A valid id has no separator or dot, so the path can only lead out of root through a symlink at its
        last component: `check_link` refuses one here (an lstat), and every open uses O_NOFOLLOW against races
        (so the frequent paths, appending and reading, skip the lstat).
        """
        if not is_valid_id(uid):
            raise InvalidStreamId(f"invalid stream id {repr(uid)[:80]}: use 1-64 letters, digits, '-' or '_'")
        path = self.root / f"{uid}{suffix}"
        if check_link:
            try:
                if stat.S_ISLNK(os.lstat(path).st_mode):
                    raise self._symlink(uid, path)
            except (FileNotFoundError, NotADirectoryError):
                pass
        return path

    def _appended(self, uid: str) -> str:
        """`_path(uid, check_link=False)` as a string: made at every append, so without a Path."""
        return f"{self.root}/{uid}.jsonl" if is_valid_id(uid) else str(self._path(uid, check_link=False))

    def _symlink(self, uid: str, path: str | Path) -> InvalidStreamId:
        return InvalidStreamId(f"stream {uid!r}: {path} is a symlink, which could lead out of {self.root}")

    def _make_root(self) -> None:
        make_private_dirs(self.root)

    def _open(self, path: str | Path, uid: str, flags: int) -> int:
        """`os.open` with O_NOFOLLOW: a symlink is refused (InvalidStreamId), a missing file is FileNotFoundError."""
        try:
            return os.open(path, flags | os.O_NOFOLLOW)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise self._symlink(uid, path) from None
            raise

    def _open_read(self, path: Path, uid: str) -> int:
        try:
            return self._open(path, uid, os.O_RDONLY)
        except FileNotFoundError:
            raise StreamNotFound(f"no stream {uid!r} in {self.root}") from None

    def _read(self, path: Path, uid: str) -> tuple[bytes, tuple[int, int]]:
        """The whole stream file under a shared lock, and its identity."""
        fd = self._open_read(path, uid)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            st = os.fstat(fd)
            return pread_all(fd, 0, st.st_size), (st.st_dev, st.st_ino)
        finally:
            os.close(fd)

    def _open_for_append(self, path: str | Path, uid: str) -> tuple[int, os.stat_result] | None:
        """An O_APPEND descriptor of the current `path`, exclusively locked, and its stat; None if it is gone.

        A file replaced (renamed over) or deleted while we waited for the lock has no links left: then the
        file now at `path` is opened instead.
        """
        while True:
            try:
                fd = self._open(path, uid, os.O_RDWR | os.O_APPEND)
            except FileNotFoundError:
                return None
            fcntl.flock(fd, fcntl.LOCK_EX)
            st = os.fstat(fd)
            if st.st_nlink:
                return fd, st
            os.close(fd)

    @contextmanager
    def _locked_if_exists(self, path: Path) -> Iterator[None]:
        """Hold an exclusive lock on the file at `path`, if there is one."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            yield
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    # --- internals: writing -----------------------------------------------------------------------

    def _write_whole(self, stream: EventStream, replace: bool) -> None:
        """Write the complete stream to a temp file, then publish it by rename (or by link when not replacing)."""
        path = self._path(stream.uid)
        self._make_root()
        data = b"".join(records.stream_lines(stream))
        status = stream_status(stream.events_list)
        temp = temp_copy(path, data, durable=replace and path.exists())
        try:
            st = os.stat(temp)
            if replace:
                with self._locked_if_exists(path):
                    os.replace(temp, path)
                    self._write_meta(stream, status)
            else:
                _link_new(temp, path, stream.uid)
                self._write_meta(stream, status)
        finally:
            with suppress(FileNotFoundError):
                os.unlink(temp)
        written = records.Written.of(stream, len(stream.events_list), status)
        _marks.set(stream, _Mark(self.root, stream.uid, (st.st_dev, st.st_ino), len(data), written))

    def _append(self, fd: int, st: os.stat_result, source: str, stream: EventStream,
                mark: _Mark) -> builtins.list[Event]:
        """Write the new records of `stream` to the locked `fd`, one write each; update the mark and meta."""
        _catch_up(fd, st, source, mark)
        written = stream.events_list[mark.written.events:]
        new, meta_changed = records.new_records(stream, mark.written)
        for record in new:
            data = records.dumps(record)
            write_all(fd, data)
            mark.offset += len(data)
        if meta_changed:
            self._write_meta(stream, mark.written.status)
        return written

    def _write_meta(self, stream: EventStream, status: str) -> None:
        replace_file(self._path(stream.uid, ".meta.json"), records.dumps(records.meta(stream, status)))

    def _mark(self, stream: EventStream) -> _Mark | None:
        """The stream's mark if it was made by a store at this root for this uid."""
        mark = _marks.get(stream)
        return mark if mark is not None and mark.root == self.root and mark.uid == stream.uid else None

    # --- internals: listing -----------------------------------------------------------------------

    def _entries(self) -> builtins.list[os.DirEntry]:
        try:
            with os.scandir(self.root) as entries:
                return [e for e in entries if e.name.endswith(".jsonl") and is_valid_id(e.name[:-6])]
        except FileNotFoundError:
            return []

    def _entry_info(self, entry: os.DirEntry) -> StreamInfo | None:
        """The info of one directory entry; None (with a warning if corrupt) when it is not a usable stream."""
        try:
            st = entry.stat(follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode):
                return None
            return self._info(entry.name[:-6], st)
        except (FileNotFoundError, StreamNotFound):
            return None  # deleted while we listed
        except AngesError as exc:
            log.warning("skipping %s: %s", entry.path, exc)
            return None

    def _info(self, uid: str, st: os.stat_result) -> StreamInfo:
        meta = self._read_meta(uid) or self._rebuild_meta(uid)
        return StreamInfo.of(uid, meta, datetime.fromtimestamp(st.st_mtime), self.shown_status(uid, meta["status"]))

    def _read_meta(self, uid: str) -> dict | None:
        """The meta file of `uid`, or None when it is missing or not valid."""
        try:
            fd = os.open(self.root / f"{uid}.meta.json", os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return None
        with os.fdopen(fd, "rb") as file:
            raw = file.read()
        try:
            meta = json.loads(raw)
        except ValueError:
            return None
        return meta if records.valid_meta(meta, uid) else None

    def _rebuild_meta(self, uid: str) -> dict:
        """Rewrite the meta file of `uid` from its stream file (under the stream's exclusive lock)."""
        path = self._path(uid)
        fd = self._open_read(path, uid)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            data = pread_all(fd, 0, os.fstat(fd).st_size)
            parsed = records.build(records.numbered(data, str(path)), uid, str(path))
            meta = records.meta(parsed.stream, parsed.status)
            replace_file(self._path(uid, ".meta.json"), records.dumps(meta))
        finally:
            os.close(fd)
        log.info("rebuilt the meta file of stream %s", uid)
        return meta

    def _descendants(self, uid: str) -> builtins.list[str]:
        """`uid` then every stream below it (breadth first), found through the parent ids in meta files."""
        infos = self.list()
        found, queue = [uid], [uid]
        while queue:
            parent = queue.pop(0)
            for info in infos:
                if parent in info.parent_ids and info.uid not in found:
                    found.append(info.uid)
                    queue.append(info.uid)
        return found


# --- module helpers ---------------------------------------------------------------------------------------------


def _catch_up(fd: int, st: os.stat_result, source: str, mark: _Mark) -> None:
    """Account for what others appended since our mark, and end a torn last line so ours starts clean.

    Nothing to read (the common case) when the file still ends where our last write did.
    """
    if (st.st_dev, st.st_ino) != mark.ident or st.st_size < mark.offset:
        mark.ident, mark.offset, mark.written.stored_events = (st.st_dev, st.st_ino), 0, 0
    if st.st_size > mark.offset:
        new = pread_all(fd, mark.offset, st.st_size - mark.offset)
        mark.written.stored_events += sum(1 for _, record in records.numbered(new, source) if records.is_event(record))
        mark.offset = st.st_size
        if not new.endswith(b"\n"):
            write_all(fd, b"\n")
            mark.offset += 1


def _link_new(temp: Path, path: Path, uid: str) -> None:
    """Publish `temp` as `path` only if no stream is there yet."""
    try:
        os.link(temp, path)
    except FileExistsError:
        raise StreamExists(f"stream {uid!r} already exists; import it with a new id to keep both "
                           "(anges import --new-id, or new_id=True)") from None


def _load_from_default_store(uid: str) -> EventStream:
    return EventStore().load(uid)


set_default_loader(_load_from_default_store)
