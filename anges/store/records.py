"""A stream as JSON-Lines records: the on-disk form `EventStore` writes and reads, versioned.

A stream file is a header line `{"kind": "header", "format": FORMAT, "uid", "created_at",
"parent_event_stream_uids", "agent_type", "title"}`, then one record per line: `event` (its 0-based `index`
and the `Event.to_dict()` fields), `summary`, `title` and `settings` (`agent_settings` and `agent_type`).
The last `title` and `settings` records win.

Format 3 also leaves out every field and fact at its default: an empty `reasoning`, `analysis`, `message` or
`content`, a `title` of null, token estimates of 0, empty `data`, the facts of a command's result at their
defaults (`"timed_out": false`, `"pid": null`, ..., an `input` that is only the command) and those of an
event's `approval` and `usage` (`anges.store.events.stored_facts`); `Event.from_record` fills them in, so an
event reads back as it was recorded. Format 2 left out only the `content` of
an event that is its facts rendered (a command's or an edit's result: `anges.store.events.derived_content`),
so a command's output is stored once; `Event.from_dict` rebuilds it. Format 1 (anges 0.2.0) stored it twice.
All three are read; a file of format 1 or 2 is rewritten in format 3 the next time its stream is written
(`MIGRATES_ON_WRITE`).
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from anges.exceptions import AngesError, InvalidStreamId
from anges.store.events import (
    Event,
    EventStream,
    EventSummary,
    derived_content,
    is_valid_id,
    status_of,
    stored_facts,
)
from anges.util.masking import mask_secrets, secret_values

log = logging.getLogger("anges.store.event_store")

FORMAT = 3
"""Version of the stream records written, in every header and meta file."""
READABLE = (1, 2, 3)
"""Versions read; the meta file is the same in all."""
MIGRATES_ON_WRITE = (1, 2)
"""Versions whose files are written whole, in FORMAT, the next time their stream is written."""
SUMMARY_KEYS = ("type", "start_event_idx", "end_event_idx")
_LINE = json.JSONEncoder(separators=(",", ":"), default=str)
"""Encodes each record (one encoder: `json.dumps` with options makes one per call, which costs more than the line)."""
_TEXT = (str, type(None))
_FIELD_TYPES: dict[str, dict[str, type | tuple[type, ...]]] = {
    "event": {"reasoning": _TEXT, "content": _TEXT, "title": _TEXT, "message": _TEXT, "analysis": _TEXT,
              "est_input_token": (int, float, type(None)), "est_output_token": (int, float, type(None)),
              "data": (dict, type(None)), "created_at": _TEXT},
    "summary": {"type": str, "start_event_idx": int, "end_event_idx": int, "summary": _TEXT, "data": (dict, type(None)),
                "created_at": _TEXT},
    "title": {"title": _TEXT},
    "settings": {"agent_settings": dict, "agent_type": _TEXT},
}
"""The type each field of a record must have; a field that is left out is fine unless _REQUIRED names it."""
_REQUIRED = {"summary": SUMMARY_KEYS, "settings": ("agent_settings",)}


@dataclass
class Parsed:
    """A stream read from its records, with what its store needs to go on appending to the file."""

    stream: EventStream
    stored_events: int
    """Event records in the file, unusable ones included: the index of the next event written."""
    status: str
    format: int


@dataclass
class Written:
    """What of an in-memory stream its file already holds; `new_records` gives the rest."""

    events: int
    """Items of `events_list` written."""
    summaries: int
    title: Any
    settings: dict
    agent_type: str
    status: str
    stored_events: int
    """Event records in the file: the index of the next event written."""
    format: int
    """Of the file: an older one is rewritten whole at the next write (MIGRATES_ON_WRITE)."""

    @classmethod
    def of(cls, stream: EventStream, stored_events: int, status: str, version: int = FORMAT) -> Written:
        """All of `stream`, in a file holding `stored_events` event records."""
        return cls(len(stream.events_list), len(stream.event_summaries_list), stream.title,
                   copy.deepcopy(stream.agent_settings), stream.agent_type, status, stored_events, version)

    def must_rewrite(self, stream: EventStream) -> bool:
        """True when appending cannot bring the file up to `stream`: history was removed in memory, or the file
        is in an older format."""
        return (len(stream.events_list) < self.events or len(stream.event_summaries_list) < self.summaries
                or self.format in MIGRATES_ON_WRITE)

    def behind(self, stream: EventStream) -> bool:
        """True when `stream` has something the file does not."""
        return (len(stream.events_list) > self.events or len(stream.event_summaries_list) > self.summaries
                or stream.title != self.title or stream.agent_type != self.agent_type
                or stream.agent_settings != self.settings)


def new_records(stream: EventStream, written: Written) -> tuple[list[dict], bool]:
    """The records that bring a file holding `written` up to `stream` (`written` is updated to match), and
    whether what the meta file holds changed (title, settings or status)."""
    out: list[dict] = []
    old_status = written.status
    if stream.title != written.title:
        out.append({"kind": "title", "title": stored_title(stream)})
        written.title = stream.title
    if stream.agent_settings != written.settings or stream.agent_type != written.agent_type:
        out.append({"kind": "settings", "agent_settings": stream.agent_settings, "agent_type": stream.agent_type})
        written.settings, written.agent_type = copy.deepcopy(stream.agent_settings), stream.agent_type
    meta_changed = bool(out)
    for event in stream.events_list[written.events:]:
        out.append(event_record(event, written.stored_events))
        written.stored_events += 1
        written.events += 1
        written.status = status_of(event.type) or written.status
        meta_changed = meta_changed or event.type == "task_interrupted"  # its reason is in the meta file
    out.extend(summary_record(summary) for summary in stream.event_summaries_list[written.summaries:])
    written.summaries = len(stream.event_summaries_list)
    return out, meta_changed or written.status != old_status


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
    reason: str = ""
    """Why an interrupted stream stopped (interrupt, timeout, event_limit, model_error, ...), when it says."""
    batch_id: str = ""
    """The batch that started this run (`anges batch`), and its task id; empty otherwise."""
    batch_task: str = ""
    folder: str = ""
    """The working directory its runs work in (empty for a stream written before anges kept it here)."""

    @classmethod
    def of(cls, uid: str, meta: dict, updated_at: datetime, status: str) -> StreamInfo:
        """The info of stream `uid` from its (valid) meta file, its file's time and its shown status."""
        reason = str(meta.get("reason") or "") if status == meta["status"] == "interrupted" else ""
        return cls(uid, str(meta["title"] if meta["title"] is not None else uid), parse_time(meta["created_at"]),
                   updated_at, list(meta["parent_event_stream_uids"]), meta["agent_type"] or "", status, reason,
                   str(meta.get("batch_id") or ""), str(meta.get("batch_task") or ""), str(meta.get("folder") or ""))

    def to_dict(self) -> dict:
        """A JSON-ready dict (times in ISO format)."""
        data = {**asdict(self), "created_at": self.created_at.isoformat(), "updated_at": self.updated_at.isoformat()}
        if not self.batch_id:
            del data["batch_id"], data["batch_task"]
        if not self.folder:
            del data["folder"]
        return data


# --- writing ----------------------------------------------------------------------------------------------------


def dumps(record: dict) -> bytes:
    """One JSON line; ASCII-escaped so any string (lone surrogates included) survives."""
    return (_LINE.encode(record) + "\n").encode("ascii")


def stored_title(stream: EventStream) -> Any:
    """The title as written to disk: with the values of secret environment variables masked.

    Titles are made from requests (by the agent, the web chat or the caller), so a secret typed into one would
    otherwise reach the meta file, `list`, `show` and exports.
    """
    return mask_secrets(stream.title, secret_values()) if isinstance(stream.title, str) else stream.title


def header(stream: EventStream) -> dict:
    return {"kind": "header", "format": FORMAT, "uid": stream.uid, "created_at": stream.created_at.isoformat(),
            "parent_event_stream_uids": list(stream.parent_event_stream_uids), "agent_type": stream.agent_type,
            "title": stored_title(stream)}


EVENT_DEFAULTS: dict[str, Any] = {"reasoning": "", "analysis": "", "message": "", "title": None,
                                  "est_input_token": 0, "est_output_token": 0, "data": {}}
"""Event fields a record leaves out at these values (`Event.from_dict` reads an absent one so)."""


def event_record(event: Event, index: int) -> dict:
    """The record of one event: the fields and facts that differ from their defaults; its content is left out
    when its facts rebuild it exactly."""
    fields = {**event.to_dict(), "data": stored_facts(event.type, event.data)}
    record = {"kind": "event", "index": index, **{key: value for key, value in fields.items()
                                                  if key not in EVENT_DEFAULTS or value != EVENT_DEFAULTS[key]}}
    if event.content == (derived_content(event) or ""):
        del record["content"]
    return record


def summary_record(summary: EventSummary) -> dict:
    return {"kind": "summary", **summary.to_dict()}


def stream_lines(stream: EventStream) -> list[bytes]:
    """The whole stream as lines: header, settings, events, summaries."""
    lines = [dumps(header(stream))]
    if stream.agent_settings:
        lines.append(dumps({"kind": "settings", "agent_settings": stream.agent_settings,
                            "agent_type": stream.agent_type}))
    lines.extend(dumps(event_record(e, i)) for i, e in enumerate(stream.events_list))
    lines.extend(dumps(summary_record(s)) for s in stream.event_summaries_list)
    return lines


def meta(stream: EventStream, status: str) -> dict:
    """The meta file: what a listing shows, so that listing never parses events."""
    last = stream.events_list[-1] if stream.events_list else None
    return {
        "format": FORMAT,
        "uid": stream.uid,
        "title": stored_title(stream),
        "status": status,
        **({"reason": str(last.data.get("reason") or "")}
           if status == "interrupted" and last is not None and last.type == "task_interrupted" else {}),
        "parent_event_stream_uids": list(stream.parent_event_stream_uids),
        "agent_type": stream.agent_type,
        "created_at": stream.created_at.isoformat(),
        **{key: stream.agent_settings[key] for key in ("batch_id", "batch_task") if key in stream.agent_settings},
        **({"folder": folder} if isinstance(folder := stream.agent_settings.get("cmd_init_dir"), str) else {}),
    }


def valid_meta(value: Any, uid: str) -> bool:
    return (
        isinstance(value, dict)
        and value.get("format") in READABLE
        and value.get("uid") == uid
        and isinstance(value.get("status"), str)
        and isinstance(value.get("parent_event_stream_uids"), list)
        and "title" in value
        and "agent_type" in value
        and "created_at" in value
    )


# --- reading ----------------------------------------------------------------------------------------------------


def numbered(data: bytes, source: str) -> Iterator[tuple[int, dict]]:
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


def records(data: bytes, source: str) -> Iterator[dict]:
    """The usable records of the complete lines of `data` (see `numbered` and `usable`)."""
    return (record for number, record in numbered(data, source) if usable(record, source, number))


def usable(record: dict, source: str, number: int) -> bool:
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


def is_event(record: dict) -> bool:
    return record.get("kind") == "event" and isinstance(record.get("type"), str)


def build(lines: Iterable[tuple[int, dict]], uid: str, source: str) -> Parsed:
    """A stream from its numbered records (header first).

    A record whose fields have the wrong type is skipped with a warning; a skipped event still counts, so the
    index of the next event written stays unique.
    """
    lines = iter(lines)
    first = next(lines, (0, {}))[1]
    version = check_header(first, source)
    stream = EventStream(uid=uid, parent_event_stream_uids=first.get("parent_event_stream_uids") or [],
                         agent_type=first.get("agent_type") or "")
    stream.title = first.get("title")
    stream.created_at = parse_time(first.get("created_at"))
    status = "new"
    stored = 0
    for number, record in lines:
        if is_event(record):
            stored += 1
        if not usable(record, source, number):
            continue
        if is_event(record):
            stream.events_list.append(Event.from_record(record))
            status = status_of(record["type"]) or status
        else:
            _apply(stream, record, source)
    return Parsed(stream, stored, status, version)


def check_header(first: dict | None, source: str) -> int:
    """The format version of a stream file from its first record; AngesError when it is not one we read."""
    if first is None or first.get("kind") != "header":
        raise AngesError(f"{source}: not an anges stream file (its first line is not a header)")
    if first.get("format") not in READABLE:
        raise AngesError(f"{source}: stream format {first.get('format')!r}; this anges reads formats "
                         f"{', '.join(map(str, READABLE))} (a newer anges wrote it?)")
    return first["format"]


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


def imported(raw: bytes, source: str, fresh_id: bool) -> EventStream:
    """The stream in an import file: anges 0.1.x JSON (`to_dict` form), our `export`, or our `.jsonl`."""
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    if data is None or (isinstance(data, dict) and data.get("kind") == "header"):
        return stream_from_jsonl(raw, source)
    return stream_from_dict(data, source, fresh_id)


def stream_from_dict(data: Any, source: str, fresh_id: bool) -> EventStream:
    """A stream in the 0.1.x `to_dict` form, refused (saying why) when it is not one; an invalid id is refused
    unless a fresh one will replace it."""
    check_stream_dict(data, source)
    uid = data.get("uid")
    if not fresh_id and uid is not None and not is_valid_id(uid):
        raise InvalidStreamId(f"{source}: invalid stream id {uid!r}; import it with a new id "
                              "(anges import --new-id, or new_id=True)")
    try:
        return EventStream.from_dict(data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise AngesError(f"{source}: not a valid anges event stream: {exc!r}") from None


def stream_from_jsonl(raw: bytes, source: str) -> EventStream:
    """A stream from a copy of one of our `.jsonl` files (its header names the uid)."""
    first = raw.split(b"\n", 1)[0]
    try:
        head = json.loads(first)
    except ValueError:
        raise AngesError(f"{source}: not a JSON stream file (neither a 0.1.x JSON stream nor JSON lines)") from None
    if not isinstance(head, dict) or head.get("kind") != "header":
        raise AngesError(f"{source}: not an anges stream file (expected a 0.1.x JSON stream or an anges .jsonl)")
    uid = head.get("uid")
    if not is_valid_id(uid):
        raise InvalidStreamId(f"{source}: invalid stream id {uid!r} in the header")
    return build(numbered(raw, source), uid, source).stream


def check_stream_dict(data: Any, source: str) -> None:
    """Refuse anything that is not a stream in the 0.1.x `to_dict` form, saying why."""
    if not isinstance(data, dict) or not isinstance(data.get("events_list"), list):
        raise AngesError(f"{source}: not an anges event stream (expected a JSON object with an 'events_list' list)")
    for i, event in enumerate(data["events_list"]):
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            raise AngesError(f"{source}: events_list[{i}] is not an event (an object with a 'type' string)")
    for i, summary in enumerate(data.get("event_summaries_list") or []):
        if not isinstance(summary, dict) or not all(key in summary for key in SUMMARY_KEYS):
            raise AngesError(f"{source}: event_summaries_list[{i}] is not a summary")


def parse_time(value: Any) -> datetime:
    try:
        return datetime.fromisoformat(value)
    except (TypeError, ValueError):
        return datetime.fromtimestamp(0)
