"""Events, summaries and event streams: the record of everything an agent did."""

from __future__ import annotations

import re
import secrets
import string
from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from anges.store import EventStore

RETURN_TO_PARENT_EVENT_TYPES = ["task_interrupted", "task_completion", "agent_requested_help", "agent_text_response"]
REQUEST_EVENT_TYPES = ("new_request", "follow_up_request", "new_request_from_parent", "follow_up_request_from_parent")
SETTINGS_KEYS = ("cmd_init_dir", "model", "prefix_cmd", "agent_type", "notes", "mcp_config")
SETTINGS_KEYS += ("batch_id", "batch_task")  # a run started by `anges batch`: its batch and task ids

_ID_ALPHABET = string.ascii_letters + string.digits
_ID_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")
_ANSI_ESCAPE = re.compile(r"\x1B(?:[@-Z\\-_]|\[[0-?]*[ -/]*[@-~])")


def new_id(length: int = 12) -> str:
    """A random URL-safe id."""
    return "".join(secrets.choice(_ID_ALPHABET) for _ in range(length))


def is_valid_id(uid: object) -> bool:
    """True when `uid` may name a stream: 1-64 letters, digits, '-' or '_'."""
    return isinstance(uid, str) and _ID_PATTERN.fullmatch(uid) is not None


def title_from(text: str, limit: int = 80) -> str:
    """A one-line title made from a request."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def strip_ansi(text: str) -> str:
    """Remove terminal escape sequences."""
    return _ANSI_ESCAPE.sub("", text)


def _parse_time(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(value)
    except (TypeError, ValueError):
        return datetime.now()


class Event:
    """One step of an agent's history: a request, an action and its result, or an exit."""

    def __init__(self, type, reasoning="", content="", title=None, message="", analysis="",
                 est_input_token=0, est_output_token=0, data: dict | None = None,
                 created_at: datetime | None = None):
        self.type = type
        self.reasoning = reasoning
        self.content = content
        self.title = title
        self.message = strip_ansi(message or "")
        self.analysis = analysis
        self.est_input_token = est_input_token
        self.est_output_token = est_output_token
        self.data: dict[str, Any] = dict(data or {})
        self.created_at = created_at or datetime.now()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Event):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return f"Event(type={self.type!r}, content={self.content[:60]!r})"

    def to_dict(self) -> dict:
        """The 0.1.x event fields, plus `data` (structured facts)."""
        return {
            "type": self.type,
            "reasoning": self.reasoning,
            "content": self.content,
            "title": self.title,
            "message": self.message,
            "analysis": self.analysis,
            "est_input_token": self.est_input_token,
            "est_output_token": self.est_output_token,
            "created_at": self.created_at.isoformat(),
            "data": self.data,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Event:
        """Build an event from `to_dict` output, tolerating the fields 0.1.x left out."""
        return cls(
            type=d["type"],
            reasoning=d.get("reasoning") or "",
            content=d.get("content") or "",
            title=d.get("title"),
            message=d.get("message") or "",
            analysis=d.get("analysis") or "",
            est_input_token=d.get("est_input_token") or 0,
            est_output_token=d.get("est_output_token") or 0,
            data=d.get("data") or {},
            created_at=_parse_time(d.get("created_at")),
        )


class EventSummary:
    """A summary standing in for events `start_event_idx`..`end_event_idx` (1-based, inclusive)."""

    def __init__(self, type, start_event_idx, end_event_idx, summary, created_at: datetime | None = None,
                 data: dict | None = None):
        self.type = type
        self.data: dict[str, Any] = dict(data or {})
        self.start_event_idx = start_event_idx
        self.end_event_idx = end_event_idx
        self.summary = summary
        self.created_at = created_at or datetime.now()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EventSummary):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return f"EventSummary({self.type!r}, {self.start_event_idx}-{self.end_event_idx})"

    def to_dict(self) -> dict:
        return {
            "type": self.type,
            "start_event_idx": self.start_event_idx,
            "end_event_idx": self.end_event_idx,
            "summary": self.summary,
            "created_at": self.created_at.isoformat(),
            **({"data": self.data} if self.data else {}),
        }

    @classmethod
    def from_dict(cls, d: dict) -> EventSummary:
        return cls(d["type"], d["start_event_idx"], d["end_event_idx"], d.get("summary") or "",
                   created_at=_parse_time(d.get("created_at")), data=d.get("data") or {})


class EventStream:
    """The ordered events and summaries of one agent conversation."""

    def __init__(self, title=None, uid=None, parent_event_stream_uids=None, agent_type=""):
        self.events_list: list[Event] = []
        self.event_summaries_list: list[EventSummary] = []
        self.created_at = datetime.now()
        self.uid = uid or new_id()
        self.title = title or self.uid
        self.parent_event_stream_uids: list[str] = list(parent_event_stream_uids or [])
        self.agent_type = agent_type
        self.agent_settings: dict[str, Any] = {}
        self.store: EventStore | None = None  # where children are looked up; set by the store
        self.cache: dict[str, Any] = {}  # derived data (formatted history); never serialized

    def __repr__(self) -> str:
        return f"EventStream(uid={self.uid!r}, title={self.title!r}, events={len(self.events_list)})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EventStream):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    def add_event(self, event: Event) -> None:
        """Append an event in memory (the agent persists it through its store)."""
        self.events_list.append(event)

    def update_settings(self, settings: dict) -> None:
        """Merge the known agent settings keys (working dir, model, prefix, agent type, notes, MCP config)."""
        self.agent_settings.update({k: v for k, v in settings.items() if k in SETTINGS_KEYS})

    def get_settings(self) -> dict:
        """A copy of the agent settings."""
        return dict(self.agent_settings)

    def get_event_list_including_children_events(self, starting_from: int = 0) -> list[Event]:
        """This stream's events from `starting_from` with each child's events in place, up to its return."""
        until_return = bool(self.parent_event_stream_uids)
        return [event for _, _, event in walk(self, starting_from, until_return=until_return)]

    def to_dict(self) -> dict:
        """The anges 0.1.x JSON form (also what `export` writes)."""
        return {
            "events_list": [e.to_dict() for e in self.events_list],
            "event_summaries_list": [s.to_dict() for s in self.event_summaries_list],
            "title": self.title,
            "created_at": self.created_at.isoformat(),
            "uid": self.uid,
            "parent_event_stream_uids": self.parent_event_stream_uids,
            "agent_type": self.agent_type,
            "agent_settings": self.agent_settings,
        }

    @classmethod
    def from_dict(cls, d: dict) -> EventStream:
        """Rebuild a stream from `to_dict` output (ours or anges 0.1.x's)."""
        stream = cls(title=d.get("title"), uid=d.get("uid"),
                     parent_event_stream_uids=d.get("parent_event_stream_uids") or [],
                     agent_type=d.get("agent_type") or "")
        stream.created_at = _parse_time(d.get("created_at"))
        stream.events_list = [Event.from_dict(e) for e in d.get("events_list") or []]
        stream.event_summaries_list = [EventSummary.from_dict(s) for s in d.get("event_summaries_list") or []]
        stream.agent_settings = dict(d.get("agent_settings") or {})
        return stream


def walk(stream: EventStream, start: int = 0, store: EventStore | None = None, depth: int = 0,
         until_return: bool = False, _loaded: dict | None = None) -> Iterator[tuple[int, EventStream, Event]]:
    """(depth, stream, event) from event `start` on, each child's events (up to its return) right after the
    `child_agent_running` event that ran it. Children load from `store` (default: the stream's), once each."""
    from anges.exceptions import InvalidStreamId, StreamNotFound

    if store is None:
        from anges.store import EventStore

        store = stream.store or EventStore()
    loaded = {} if _loaded is None else _loaded
    for event in stream.events_list[start:]:
        yield depth, stream, event
        if until_return and event.type in RETURN_TO_PARENT_EVENT_TYPES:
            return
        child_id, child_start = child_reference(event) if event.type == "child_agent_running" else (None, 0)
        if child_id is None:
            continue
        if child_id not in loaded:
            try:
                loaded[child_id] = store.load(child_id)
            except (StreamNotFound, InvalidStreamId):
                loaded[child_id] = None
        if loaded[child_id] is not None:
            yield from walk(loaded[child_id], child_start, store, depth + 1, True, loaded)


def child_reference(event: Event) -> tuple[str | None, int]:
    """The (child stream id, starting index) a `child_agent_running` event points at."""
    import json

    info = event.data if event.data.get("agent_id") else None
    if info is None:
        try:
            info = json.loads(event.reasoning)
        except (TypeError, ValueError):
            return None, 0
    if not isinstance(info, dict) or not is_valid_id(info.get("agent_id")):
        return None, 0
    start = info.get("starting_from", 0)
    return info["agent_id"], start if isinstance(start, int) and start >= 0 else 0
