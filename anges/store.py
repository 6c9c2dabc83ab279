"""EventStore: event streams as append-only JSON-Lines files, the single source of truth.

On disk, under `root` (default `ANGES_HOME/data/event_streams`), each stream has:

- `<uid>.jsonl`: a header line `{"kind": "header", "format": 1, "uid", "created_at",
  "parent_event_stream_uids", "agent_type", "title"}`, then one record per line: `event` (with its
  0-based `index` and the `Event.to_dict()` fields), `summary`, `title` and `settings`
  (`agent_settings` and `agent_type`). The last `title` and `settings` records win.
- `<uid>.meta.json`: title, status, parents, agent type and created_at, rewritten atomically only when
  one of them changes, so listing never parses events. Rebuilt from the `.jsonl` when missing or bad.
  A run of `anges batch` also has `batch_id` and `batch_task` there (from its settings).
- `<uid>.lock`: the side file `run_lock` flocks while a run is active; it names the run's process
  (`{"pid", "started", "host"}`). A stream whose last status is `running` while nobody holds the lock
  belongs to a run that died (SIGKILL, a crash, a full disk): it reads as `interrupted`.

Every record is one `os.write` on an `O_APPEND` descriptor under an exclusive `flock`, so a crash
loses at most the line being written, and readers (shared lock) always see whole records.
"""

from __future__ import annotations

import copy
import fcntl
import json
import logging
import os
import socket
import stat
import time
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from anges.config import anges_home
from anges.events import REQUEST_EVENT_TYPES, Event, EventStream, EventSummary, is_valid_id
from anges.events import new_id as make_id
from anges.exceptions import AngesError, InvalidStreamId, StreamBusy, StreamExists, StreamNotFound

log = logging.getLogger(__name__)

FORMAT = 1
"""Version of the on-disk format, written in every header and meta file; a later version adds a migration."""

_EXIT_STATUS = {
    "task_completion": "completed",
    "agent_requested_help": "help_needed",
    "agent_text_response": "answered",
    "task_interrupted": "interrupted",
}
_SUMMARY_KEYS = ("type", "start_event_idx", "end_event_idx")
# is_running() holds a shared lock for a few microseconds; a run starting at that instant retries briefly.
_LOCK_ATTEMPTS = 5
_LOCK_PAUSE = 0.004


def status_of(event_type: str) -> str | None:
    """The stream status an event of this type sets, or None when it leaves the status as it was."""
    if event_type in REQUEST_EVENT_TYPES:
        return "running"
    return _EXIT_STATUS.get(event_type)


def stream_status(events: Iterable[Event]) -> str:
    """The status a sequence of events leaves a stream in ("new" when none sets one)."""
    status = "new"
    for event in events:
        status = status_of(event.type) or status
    return status


@dataclass
class StreamInfo:
    """What a listing shows of one stream, read from its meta file and a stat of its stream file."""

    uid: str
    title: str
    created_at: datetime
    updated_at: datetime
    parent_ids: list[str]
    agent_type: str
    status: str
    """new, running, completed, help_needed, answered or interrupted."""
    batch_id: str = ""
    """The batch that started this run (`anges batch`), and its task id; empty otherwise."""
    batch_task: str = ""

    def to_dict(self) -> dict:
        """A JSON-ready dict (times in ISO format)."""
        return {
            "uid": self.uid,
            "title": self.title,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "parent_ids": list(self.parent_ids),
            "agent_type": self.agent_type,
            "status": self.status,
            **({"batch_id": self.batch_id, "batch_task": self.batch_task} if self.batch_id else {}),
        }


@dataclass
class _Mark:
    """How much of one in-memory stream a store has persisted; kept on the stream as `_store_mark`."""

    root: Path
    uid: str
    ident: tuple[int, int]  # (st_dev, st_ino) of the file `offset` refers to
    offset: int  # bytes of that file accounted for
    stored_events: int  # event records in the file up to `offset`: the next event's index
    events: int  # items of stream.events_list persisted
    summaries: int
    title: Any
    settings: dict
    agent_type: str
    status: str


class EventStore:
    """Event streams on disk: one append-only JSON-Lines file per stream plus a tiny meta file."""

    def __init__(self, root: str | os.PathLike | None = None):
        base = Path(root).expanduser() if root is not None else anges_home() / "data" / "event_streams"
        self.root = Path(os.path.abspath(base))

    def __repr__(self) -> str:
        return f"EventStore({str(self.root)!r})"

    # --- writing -----------------------------------------------------------------------------------

    def sync(self, stream: EventStream) -> list[Event]:
        """Append what is new in `stream` since it was last synced, saved or loaded; return the new events."""
        path = self._path(stream.uid)
        stream.store = self
        mark = self._mark(stream)
        if mark is None or _shrunk(stream, mark):
            # A stream this store has not seen (or whose history was rewritten in memory) is written whole.
            self._write_whole(stream, replace=True)
            return list(stream.events_list)
        if not _has_news(stream, mark):
            return []
        fd = self._open_for_append(path)
        if fd is None:  # deleted since: write it again
            self._write_whole(stream, replace=True)
            return list(stream.events_list)
        try:
            return self._append(fd, str(path), stream, mark)
        finally:
            os.close(fd)

    def save(self, stream: EventStream) -> None:
        """Write a whole stream at once, creating or replacing it atomically (temp file + rename)."""
        self._path(stream.uid)
        stream.store = self
        self._write_whole(stream, replace=True)

    def import_file(self, path: str | os.PathLike, new_id: bool = False) -> EventStream:
        """Import a stream file: anges 0.1.x JSON (`to_dict` form), our `export`, or our `.jsonl`."""
        try:
            raw = Path(path).read_bytes()
        except OSError as exc:
            raise AngesError(f"{path}: cannot read: {exc.strerror or exc}") from None
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
        if data is None or (isinstance(data, dict) and data.get("kind") == "header"):
            return self._import_stream(_stream_from_jsonl(raw, str(path)), new_id)
        return self.import_dict(data, new_id=new_id, source=str(path))

    def import_dict(self, data: dict, new_id: bool = False, source: str = "import") -> EventStream:
        """Import a stream in the 0.1.x `to_dict` form; refuse an existing id unless `new_id` (then a fresh id)."""
        _check_stream_dict(data, source)
        uid = data.get("uid")
        if not new_id and uid is not None and not is_valid_id(uid):
            raise InvalidStreamId(f"{source}: invalid stream id {uid!r}; import it with a new id "
                                  "(anges import --new-id, or new_id=True)")
        try:
            stream = EventStream.from_dict(data)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise AngesError(f"{source}: not a valid anges event stream: {exc!r}") from None
        return self._import_stream(stream, new_id)

    def _import_stream(self, stream: EventStream, fresh_id: bool) -> EventStream:
        if fresh_id:
            stream.uid = make_id()
        self._path(stream.uid)
        stream.store = self
        self._write_whole(stream, replace=False)
        last = stream.events_list[-1].created_at if stream.events_list else stream.created_at
        if last.timestamp() < time.time():  # listings date a stream by its file: its last event, not the import
            os.utime(self._path(stream.uid), (last.timestamp(), last.timestamp()))
        return stream

    # --- reading -----------------------------------------------------------------------------------

    def load(self, uid: str) -> EventStream:
        """The stream `uid` as last persisted (a torn last line from a crash is skipped with a warning)."""
        path = self._path(uid)
        data, ident = self._read(path, uid)
        stream, stored_events, status = _build(_lines(data, str(path)), uid, str(path))
        stream._store_mark = self._new_mark(stream, ident, len(data), stored_events, status)
        stream.store = self
        return stream

    def exists(self, uid: str) -> bool:
        """True when the store holds a stream `uid`."""
        try:
            return stat.S_ISREG(os.stat(self._path(uid), follow_symlinks=False).st_mode)
        except FileNotFoundError:
            return False

    def export(self, uid: str) -> dict:
        """The stream in anges 0.1.x's `to_dict` JSON form (0.1.x's `EventStream.from_dict` loads it)."""
        return self.load(uid).to_dict()

    def read_records(self, uid: str, offset: int = 0) -> tuple[list[dict], int]:
        """Records from byte `offset` to the last complete line, and the offset after them (for live views).

        An offset that no longer fits the file (it was replaced) restarts from 0: the first record
        returned is then the header, which tells the caller to start over.
        """
        path = self._path(uid)
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise ValueError(f"offset must be a non-negative integer, got {offset!r}")
        fd = self._open_read(path, uid)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            size = os.fstat(fd).st_size
            if offset > size or (offset and os.pread(fd, 1, offset - 1) != b"\n"):
                offset = 0
            data = _pread_all(fd, offset, size - offset)
        finally:
            os.close(fd)
        end = data.rfind(b"\n") + 1
        return list(_records(data[:end], str(path))), offset + end

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

    def children(self, uid: str) -> list[StreamInfo]:
        """The streams whose direct parent (last of their parent ids) is `uid`."""
        if not self.exists(uid):
            raise StreamNotFound(f"no stream {uid!r} in {self.root}")
        return [info for info in self.list() if info.parent_ids and info.parent_ids[-1] == uid]

    # --- deleting and locking ---------------------------------------------------------------------

    def delete(self, uid: str) -> list[str]:
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
            self._remove_leftover_temps(doomed)
        return doomed

    def _remove_leftover_temps(self, uids: list[str]) -> None:
        """Remove temp files that crashed writers left behind for these streams."""
        prefixes = tuple(f".{uid}." for uid in uids)
        with os.scandir(self.root) as entries:
            for entry in entries:
                if entry.name.startswith(prefixes) and entry.name.endswith(".tmp"):
                    with suppress(FileNotFoundError):
                        os.unlink(entry.path)

    @contextmanager
    def run_lock(self, uid: str) -> Iterator[None]:
        """Hold the exclusive "a run is active" lock of `uid`; StreamBusy at once if it is held elsewhere.

        The lock is an flock on `<uid>.lock`: the kernel releases it when the holder exits or dies.
        """
        path = self._path(uid, ".lock")
        self._make_root()
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            if not _try_lock(fd, fcntl.LOCK_EX, _LOCK_ATTEMPTS):
                owner = self.owner(uid)
                where = f" (process {owner['pid']} on {owner['host']})" if owner else ""
                raise StreamBusy(f"stream {uid!r} is busy: a run is already active on it{where}")
            os.ftruncate(fd, 0)
            _write_all(fd, json.dumps(_this_process()).encode())
            yield
        finally:
            os.close(fd)

    def owner(self, uid: str) -> dict | None:
        """The process running `uid` (`pid`, `started`: its start time in clock ticks, `host`); None when none is."""
        if not self.is_running(uid):
            return None
        try:
            fd = os.open(self._path(uid, ".lock"), os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        with os.fdopen(fd, "rb") as file:
            raw = file.read(4096)
        try:
            owner = json.loads(raw)
        except ValueError:
            return None  # the run is starting and has not written its name yet
        return owner if isinstance(owner, dict) and isinstance(owner.get("pid"), int) else None

    def shown_status(self, uid: str, stored: str) -> str:
        """`stored`, except that a stream left `running` by a run that is no longer active reads `interrupted`."""
        return "interrupted" if stored == "running" and not self.is_running(uid) else stored

    def request_stop(self, uid: str) -> None:
        """Ask the run active on `uid`, in any process, to stop: its agent polls `stop_requested`."""
        if not self.exists(uid):
            raise StreamNotFound(f"no stream {uid!r} in {self.root}")
        os.close(os.open(self._path(uid, ".stop"), os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600))

    def stop_requested(self, uid: str) -> bool:
        """True when a stop was requested for `uid` since its run started."""
        if not is_valid_id(uid):
            raise InvalidStreamId(f"invalid stream id {repr(uid)[:80]}")
        return os.path.exists(f"{self.root}/{uid}.stop")  # polled often: no Path objects, one stat

    def clear_stop(self, uid: str) -> None:
        """Forget a stop request (a new run starts)."""
        with suppress(FileNotFoundError):
            os.unlink(self._path(uid, ".stop"))

    def is_running(self, uid: str) -> bool:
        """True while some process (this one included) holds the run lock of `uid`."""
        try:
            fd = os.open(self._path(uid, ".lock"), os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return False
        try:
            return not _try_lock(fd, fcntl.LOCK_SH, 1)
        finally:
            os.close(fd)

    # --- internals: paths and files ---------------------------------------------------------------

    def _path(self, uid: object, suffix: str = ".jsonl") -> Path:
        """The file of stream `uid`; InvalidStreamId unless the id is well-formed and the path stays in root.

        A valid id has no separator or dot, so the path can only lead out of root through a symlink at
        its last component: that is refused here, and every open uses O_NOFOLLOW against races.
        """
        if not is_valid_id(uid):
            raise InvalidStreamId(f"invalid stream id {repr(uid)[:80]}: use 1-64 letters, digits, '-' or '_'")
        path = self.root / f"{uid}{suffix}"
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                raise InvalidStreamId(f"stream {uid!r}: {path} is a symlink, which could lead out of {self.root}")
        except (FileNotFoundError, NotADirectoryError):
            pass
        return path

    def _make_root(self) -> None:
        """Create root and its missing parents, each with mode 0o700."""
        missing = []
        path = self.root
        while not path.is_dir():
            missing.append(path)
            path = path.parent
        for directory in reversed(missing):
            with suppress(FileExistsError):
                directory.mkdir(mode=0o700)

    def _temp_copy(self, path: Path, data: bytes, durable: bool = False) -> Path:
        """A new 0o600 temp file beside `path` holding `data`."""
        temp = path.with_name(f".{path.name}.{make_id(8)}.tmp")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            _write_all(fd, data)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        return temp

    def _replace_file(self, path: Path, data: bytes) -> None:
        """Replace `path` with `data` atomically."""
        temp = self._temp_copy(path, data)
        try:
            os.replace(temp, path)
        except OSError:
            os.unlink(temp)
            raise

    def _open_read(self, path: Path, uid: str) -> int:
        try:
            return os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            raise StreamNotFound(f"no stream {uid!r} in {self.root}") from None

    def _read(self, path: Path, uid: str) -> tuple[bytes, tuple[int, int]]:
        """The whole stream file under a shared lock, and its identity."""
        fd = self._open_read(path, uid)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            st = os.fstat(fd)
            return _pread_all(fd, 0, st.st_size), (st.st_dev, st.st_ino)
        finally:
            os.close(fd)

    def _open_for_append(self, path: Path) -> int | None:
        """An O_APPEND descriptor of the current `path`, exclusively locked; None if the file is gone."""
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW)
            except FileNotFoundError:
                return None
            fcntl.flock(fd, fcntl.LOCK_EX)
            opened = os.fstat(fd)
            try:
                current = os.stat(path, follow_symlinks=False)
            except FileNotFoundError:
                current = None
            if current is not None and (current.st_dev, current.st_ino) == (opened.st_dev, opened.st_ino):
                return fd
            os.close(fd)  # replaced or deleted while we waited for the lock
            if current is None:
                return None

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
        self._make_root()
        path = self._path(stream.uid)
        data = b"".join(_stream_lines(stream))
        status = stream_status(stream.events_list)
        temp = self._temp_copy(path, data, durable=replace and path.exists())
        try:
            ident = _identity(temp)
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
        stream._store_mark = self._new_mark(stream, ident, len(data), len(stream.events_list), status)

    def _append(self, fd: int, source: str, stream: EventStream, mark: _Mark) -> list[Event]:
        """Write the new records of `stream` to the locked `fd`, one write each; update the mark and meta."""
        _catch_up(fd, source, mark)
        old_status = mark.status
        meta_changed = False
        if stream.title != mark.title:
            _append_record(fd, mark, {"kind": "title", "title": _stored_title(stream)})
            mark.title = stream.title
            meta_changed = True
        if stream.agent_settings != mark.settings or stream.agent_type != mark.agent_type:
            record = {"kind": "settings", "agent_settings": stream.agent_settings, "agent_type": stream.agent_type}
            _append_record(fd, mark, record)
            mark.settings, mark.agent_type = copy.deepcopy(stream.agent_settings), stream.agent_type
            meta_changed = True
        written = stream.events_list[mark.events :]
        for event in written:
            _append_record(fd, mark, _event_record(event, mark.stored_events))
            mark.stored_events += 1
            mark.events += 1
            mark.status = status_of(event.type) or mark.status
        for summary in stream.event_summaries_list[mark.summaries :]:
            _append_record(fd, mark, {"kind": "summary", **summary.to_dict()})
            mark.summaries += 1
        if meta_changed or mark.status != old_status:
            self._write_meta(stream, mark.status)
        return written

    def _write_meta(self, stream: EventStream, status: str) -> None:
        self._replace_file(self._path(stream.uid, ".meta.json"), _dumps(_meta(stream, status)))

    def _new_mark(self, stream: EventStream, ident: tuple[int, int], offset: int, stored: int, status: str) -> _Mark:
        return _Mark(
            self.root,
            stream.uid,
            ident,
            offset,
            stored,
            len(stream.events_list),
            len(stream.event_summaries_list),
            stream.title,
            copy.deepcopy(stream.agent_settings),
            stream.agent_type,
            status,
        )

    def _mark(self, stream: EventStream) -> _Mark | None:
        """The stream's mark if it was made by a store at this root for this uid."""
        mark = getattr(stream, "_store_mark", None)
        if isinstance(mark, _Mark) and mark.root == self.root and mark.uid == stream.uid:
            return mark
        return None

    # --- internals: listing -----------------------------------------------------------------------

    def _entries(self) -> list[os.DirEntry]:
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
        return StreamInfo(
            uid=uid,
            title=str(meta["title"] if meta["title"] is not None else uid),
            created_at=_time(meta["created_at"]),
            updated_at=datetime.fromtimestamp(st.st_mtime),
            parent_ids=list(meta["parent_event_stream_uids"]),
            agent_type=meta["agent_type"] or "",
            status=self.shown_status(uid, meta["status"]),
            batch_id=str(meta.get("batch_id") or ""),
            batch_task=str(meta.get("batch_task") or ""),
        )

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
        return meta if _valid_meta(meta, uid) else None

    def _rebuild_meta(self, uid: str) -> dict:
        """Rewrite the meta file of `uid` from its stream file (under the stream's exclusive lock)."""
        path = self._path(uid)
        fd = self._open_read(path, uid)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            data = _pread_all(fd, 0, os.fstat(fd).st_size)
            stream, _, status = _build(_lines(data, str(path)), uid, str(path))
            meta = _meta(stream, status)
            self._replace_file(self._path(uid, ".meta.json"), _dumps(meta))
        finally:
            os.close(fd)
        log.info("rebuilt the meta file of stream %s", uid)
        return meta

    def _descendants(self, uid: str) -> list[str]:
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


# --- module helpers: records ------------------------------------------------------------------------


def _dumps(record: dict) -> bytes:
    """One JSON line; ASCII-escaped so any string (lone surrogates included) survives."""
    return (json.dumps(record, separators=(",", ":"), default=str) + "\n").encode("ascii")


def _header(stream: EventStream) -> dict:
    return {
        "kind": "header",
        "format": FORMAT,
        "uid": stream.uid,
        "created_at": stream.created_at.isoformat(),
        "parent_event_stream_uids": list(stream.parent_event_stream_uids),
        "agent_type": stream.agent_type,
        "title": _stored_title(stream),
    }


def _stored_title(stream: EventStream) -> Any:
    """The title as written to disk: with the values of secret environment variables masked.

    Titles are made from requests (by the agent, the web chat or the caller), so a secret typed into one would
    otherwise reach the meta file, `list`, `show` and exports.
    """
    if not isinstance(stream.title, str):
        return stream.title
    from anges.shell import mask_secrets, secret_values

    return mask_secrets(stream.title, secret_values())


def _event_record(event: Event, index: int) -> dict:
    return {"kind": "event", "index": index, **event.to_dict()}


def _stream_lines(stream: EventStream) -> list[bytes]:
    """The whole stream as lines: header, settings, events, summaries."""
    lines = [_dumps(_header(stream))]
    if stream.agent_settings:
        lines.append(
            _dumps({"kind": "settings", "agent_settings": stream.agent_settings, "agent_type": stream.agent_type})
        )
    lines.extend(_dumps(_event_record(e, i)) for i, e in enumerate(stream.events_list))
    lines.extend(_dumps({"kind": "summary", **s.to_dict()}) for s in stream.event_summaries_list)
    return lines


def _meta(stream: EventStream, status: str) -> dict:
    return {
        "format": FORMAT,
        "uid": stream.uid,
        "title": _stored_title(stream),
        "status": status,
        "parent_event_stream_uids": list(stream.parent_event_stream_uids),
        "agent_type": stream.agent_type,
        "created_at": stream.created_at.isoformat(),
        **{key: stream.agent_settings[key] for key in ("batch_id", "batch_task") if key in stream.agent_settings},
    }


def _valid_meta(meta: Any, uid: str) -> bool:
    return (
        isinstance(meta, dict)
        and meta.get("format") == FORMAT
        and meta.get("uid") == uid
        and isinstance(meta.get("status"), str)
        and isinstance(meta.get("parent_event_stream_uids"), list)
        and "title" in meta
        and "agent_type" in meta
        and "created_at" in meta
    )


def _lines(data: bytes, source: str) -> Iterator[tuple[int, dict]]:
    """(line number, record) of the complete lines of `data`; torn or corrupt lines are skipped with a warning."""
    lines = data.split(b"\n")
    if lines[-1]:
        log.warning("%s: skipping an incomplete last line (%d bytes), likely cut by a crash", source, len(lines[-1]))
    for number, line in enumerate(lines[:-1], 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            log.warning("%s: skipping unreadable line %d, likely cut by a crash", source, number)
            continue
        if isinstance(record, dict) and isinstance(record.get("kind"), str):
            yield number, record
        else:
            log.warning("%s: skipping line %d: not a record", source, number)


def _records(data: bytes, source: str) -> Iterator[dict]:
    """The usable records of the complete lines of `data` (see `_lines` and `_usable`)."""
    return (record for number, record in _lines(data, source) if _usable(record, source, number))


_TEXT = (str, type(None))
_FIELD_TYPES = {
    "event": {"reasoning": _TEXT, "content": _TEXT, "title": _TEXT, "message": _TEXT, "analysis": _TEXT,
              "est_input_token": (int, float, type(None)), "est_output_token": (int, float, type(None)),
              "data": (dict, type(None)), "created_at": _TEXT},
    "summary": {"type": str, "start_event_idx": int, "end_event_idx": int, "summary": _TEXT, "data": (dict, type(None)),
                "created_at": _TEXT},
    "title": {"title": _TEXT},
    "settings": {"agent_settings": dict, "agent_type": _TEXT},
}
"""The type each field of a record must have; a field that is left out is fine unless _REQUIRED names it."""
_REQUIRED = {"summary": _SUMMARY_KEYS, "settings": ("agent_settings",)}


def _usable(record: dict, source: str, number: int) -> bool:
    """False, with a warning naming the line, for a record whose fields have the wrong type."""
    kind = record["kind"]
    for name in _REQUIRED.get(kind, ()):
        if name not in record:
            log.warning("%s: skipping line %d: a %s record without %r", source, number, kind, name)
            return False
    for name, types in _FIELD_TYPES.get(kind, {}).items():
        value = record.get(name)
        if name in record and (not isinstance(value, types) or isinstance(value, bool)):
            log.warning("%s: skipping line %d: the %s record's %r is %s", source, number, kind, name,
                        type(value).__name__)
            return False
    return True


def _is_event(record: dict) -> bool:
    return record.get("kind") == "event" and isinstance(record.get("type"), str)


def _build(lines: Iterable[tuple[int, dict]], uid: str, source: str) -> tuple[EventStream, int, str]:
    """A stream from its numbered records (header first), with its number of event records and its status.

    A record whose fields have the wrong type is skipped with a warning; a skipped event still counts, so the
    index of the next event written stays unique.
    """
    lines = iter(lines)
    header = next(lines, (0, None))[1]
    _check_header(header, source)
    stream = EventStream(
        title=header.get("title"),
        uid=uid,
        parent_event_stream_uids=header.get("parent_event_stream_uids") or [],
        agent_type=header.get("agent_type") or "",
    )
    stream.title = header.get("title")
    stream.created_at = _time(header.get("created_at"))
    status = "new"
    stored = 0
    for number, record in lines:
        if _is_event(record):
            stored += 1
        if not _usable(record, source, number):
            continue
        if _is_event(record):
            stream.events_list.append(Event.from_dict(record))
            status = status_of(record["type"]) or status
        else:
            _apply(stream, record, source)
    return stream, stored, status


def _check_header(header: dict | None, source: str) -> None:
    if header is None or header.get("kind") != "header":
        raise AngesError(f"{source}: not an anges stream file (its first line is not a header)")
    if header.get("format") != FORMAT:
        raise AngesError(f"{source}: stream format {header.get('format')!r}; this anges reads format {FORMAT}")


def _apply(stream: EventStream, record: dict, source: str) -> None:
    """Apply a non-event record to `stream`."""
    kind = record["kind"]
    if kind == "summary":
        stream.event_summaries_list.append(EventSummary.from_dict(record))
    elif kind == "title":
        stream.title = record.get("title")
    elif kind == "settings":
        stream.agent_settings = dict(record["agent_settings"])
        stream.agent_type = record.get("agent_type", stream.agent_type) or ""
    else:
        log.warning("%s: skipping a record of unexpected kind %r", source, kind)


def _stream_from_jsonl(raw: bytes, source: str) -> EventStream:
    """A stream from a copy of one of our `.jsonl` files (its header names the uid)."""
    first = raw.split(b"\n", 1)[0]
    try:
        header = json.loads(first)
    except ValueError:
        raise AngesError(f"{source}: not a JSON stream file (neither a 0.1.x JSON stream nor JSON lines)") from None
    if not isinstance(header, dict) or header.get("kind") != "header":
        raise AngesError(f"{source}: not an anges stream file (expected a 0.1.x JSON stream or an anges .jsonl)")
    uid = header.get("uid")
    if not is_valid_id(uid):
        raise InvalidStreamId(f"{source}: invalid stream id {uid!r} in the header")
    return _build(_lines(raw, source), uid, source)[0]


def _check_stream_dict(data: Any, source: str) -> None:
    """Refuse anything that is not a stream in the 0.1.x `to_dict` form, saying why."""
    if not isinstance(data, dict) or not isinstance(data.get("events_list"), list):
        raise AngesError(f"{source}: not an anges event stream (expected a JSON object with an 'events_list' list)")
    for i, event in enumerate(data["events_list"]):
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            raise AngesError(f"{source}: events_list[{i}] is not an event (an object with a 'type' string)")
    for i, summary in enumerate(data.get("event_summaries_list") or []):
        if not isinstance(summary, dict) or not all(key in summary for key in _SUMMARY_KEYS):
            raise AngesError(f"{source}: event_summaries_list[{i}] is not a summary")


def _time(value: Any) -> datetime:
    try:
        return datetime.fromisoformat(value)
    except (TypeError, ValueError):
        return datetime.fromtimestamp(0)


def _has_news(stream: EventStream, mark: _Mark) -> bool:
    return (
        len(stream.events_list) > mark.events
        or len(stream.event_summaries_list) > mark.summaries
        or stream.title != mark.title
        or stream.agent_type != mark.agent_type
        or stream.agent_settings != mark.settings
    )


def _shrunk(stream: EventStream, mark: _Mark) -> bool:
    """True when events or summaries were removed in memory: appending cannot express that."""
    return len(stream.events_list) < mark.events or len(stream.event_summaries_list) < mark.summaries


# --- module helpers: low-level file operations ------------------------------------------------------


def _write_all(fd: int, data: bytes) -> None:
    """Write `data` (one write call unless the kernel writes less)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _pread_all(fd: int, offset: int, size: int) -> bytes:
    chunks = []
    while size > 0:
        chunk = os.pread(fd, size, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _append_record(fd: int, mark: _Mark, record: dict) -> None:
    data = _dumps(record)
    _write_all(fd, data)
    mark.offset += len(data)


def _catch_up(fd: int, source: str, mark: _Mark) -> None:
    """Account for what others appended since our mark, and end a torn last line so ours starts clean."""
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino) != mark.ident or st.st_size < mark.offset:
        mark.ident, mark.offset, mark.stored_events = (st.st_dev, st.st_ino), 0, 0
    if st.st_size > mark.offset:
        new = _pread_all(fd, mark.offset, st.st_size - mark.offset)
        mark.stored_events += sum(1 for _, record in _lines(new, source) if _is_event(record))
        mark.offset = st.st_size
    if st.st_size and os.pread(fd, 1, st.st_size - 1) != b"\n":
        _write_all(fd, b"\n")
        mark.offset += 1


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


def _try_lock(fd: int, operation: int, attempts: int) -> bool:
    """Take an flock without blocking, retrying briefly; False if it stays held elsewhere."""
    for attempt in range(attempts):
        try:
            fcntl.flock(fd, operation | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if attempt + 1 < attempts:
                time.sleep(_LOCK_PAUSE)
    return False


def _identity(path: Path) -> tuple[int, int]:
    st = os.stat(path, follow_symlinks=False)
    return st.st_dev, st.st_ino


def _link_new(temp: Path, path: Path, uid: str) -> None:
    """Publish `temp` as `path` only if no stream is there yet."""
    try:
        os.link(temp, path)
    except FileExistsError:
        raise StreamExists(f"stream {uid!r} already exists; import it with a new id to keep both "
                           "(anges import --new-id, or new_id=True)") from None
