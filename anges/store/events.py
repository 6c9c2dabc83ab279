"""Events, summaries and event streams: the record of everything an agent did."""

from __future__ import annotations

import json
import re
import secrets
import string
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeGuard

from anges.exceptions import InvalidStreamId, StreamNotFound
from anges.store.results import COMMAND_DEFAULTS, APICall, FileEdit, ShellRun
from anges.util.printable import strip_escapes
from anges.util.titles import task_title

RETURN_TO_PARENT_EVENT_TYPES = ["task_interrupted", "task_completion", "agent_requested_help", "agent_text_response"]
REQUEST_EVENT_TYPES = ("new_request", "follow_up_request", "new_request_from_parent", "follow_up_request_from_parent")
NOT_STEPS = (*REQUEST_EVENT_TYPES, "user_command", "conversation_rewound", "workspace_restored", "approval_requested")
SETTINGS_KEYS: tuple[str, ...] = ("cmd_init_dir", "model", "prefix_cmd", "agent_type", "notes", "mcp_config")
SETTINGS_KEYS += ("batch_id", "batch_task")  # a run started by `anges batch`: its batch and task ids

_ID_ALPHABET = string.ascii_letters + string.digits
_ID_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")
def new_id(length: int = 12) -> str:
    """A random URL-safe id."""
    return "".join(secrets.choice(_ID_ALPHABET) for _ in range(length))


def is_valid_id(uid: object) -> TypeGuard[str]:
    """True when `uid` may name a stream: 1-64 letters, digits, '-' or '_'."""
    return isinstance(uid, str) and _ID_PATTERN.fullmatch(uid) is not None


def title_from(text: str, limit: int = 80) -> str:
    """A one-line title made from a request, cut at a word boundary (`anges.util.titles`)."""
    return task_title(text, limit)


def _parse_time(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(value)
    except (TypeError, ValueError):
        return datetime.now()


class Event:
    """One step of an agent's history: a request, an action and its result, or an exit."""

    def __init__(self, type: str, reasoning: str = "", content: str = "", title: str | None = None,
                 message: str = "", analysis: str = "", est_input_token: int = 0, est_output_token: int = 0,
                 data: dict | None = None, created_at: datetime | None = None):
        self.type = type
        self.reasoning = reasoning
        self.content = content
        self.title = title
        self.message = strip_escapes(message or "")
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
        """Build an event from `to_dict` output, tolerating the fields 0.1.x left out; a content the store left
        out (see `derived_content`) is rebuilt from the facts."""
        event = cls(
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
        if "content" not in d:
            event.content = derived_content(event) or ""
        return event

    @classmethod
    def from_record(cls, record: dict) -> Event:
        """Build an event from a stream file's record, whose fields and facts at their defaults may be left out
        (`stored_facts`): they are filled in, so the event reads as it did when it was recorded."""
        data = record.get("data")
        return cls.from_dict({**record, "data": full_facts(record["type"], data if isinstance(data, dict) else {})})


class EventSummary:
    """A summary standing in for events `start_event_idx`..`end_event_idx` (1-based, inclusive)."""

    def __init__(self, type: str, start_event_idx: int, end_event_idx: int, summary: str,
                 created_at: datetime | None = None, data: dict | None = None):
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
        """The anges 0.1.x summary fields, plus `data` when it has any."""
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
        """Build a summary from `to_dict` output."""
        return cls(d["type"], d["start_event_idx"], d["end_event_idx"], d.get("summary") or "",
                   created_at=_parse_time(d.get("created_at")), data=d.get("data") or {})


class EventStream:
    """The ordered events and summaries of one agent conversation."""

    def __init__(self, title: str | None = None, uid: str | None = None,
                 parent_event_stream_uids: Iterable[str] | None = None, agent_type: str = ""):
        self.events_list: list[Event] = []
        self.event_summaries_list: list[EventSummary] = []
        self.created_at = datetime.now()
        self.uid = uid or new_id()
        self.title: str | None = title or self.uid
        """None only in a stream read from a file that has no title (anges 0.1.x could write one)."""
        self.parent_event_stream_uids: list[str] = list(parent_event_stream_uids or [])
        self.agent_type = agent_type
        self.agent_settings: dict[str, Any] = {}

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

    def get_event_list_including_children_events(self, starting_from: int = 0, load: Loader | None = None
                                                 ) -> list[Event]:
        """This stream's events from `starting_from` with each child's events in place, up to its return.

        Children are read with `load` (a store's `load`); by default from the default store.
        """
        until_return = bool(self.parent_event_stream_uids)
        return [event for _, _, event in walk(self, load or default_loader, starting_from, until_return=until_return)]

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


Loader = Callable[[str], EventStream]
"""Reads a stream by id (a store's `load`); raises StreamNotFound or InvalidStreamId."""
_default_load: Loader | None = None


def set_default_loader(load: Loader) -> None:
    """Where streams read their children when given no loader: `anges.store.event_store` sets the default store's `load`
    (events know nothing of storage)."""
    global _default_load
    _default_load = load


def default_loader(uid: str) -> EventStream:
    """Read a stream with the loader `set_default_loader` set."""
    if _default_load is None:
        raise StreamNotFound(f"no store to read stream {uid!r} from: pass a loader (a store's `load`)")
    return _default_load(uid)


def walk(stream: EventStream, load: Loader, start: int = 0, depth: int = 0, until_return: bool = False,
         _loaded: dict | None = None) -> Iterator[tuple[int, EventStream, Event]]:
    """(depth, stream, event) from event `start` on, each child's events (up to its return) right after the
    `child_agent_running` event that ran it. Children are read with `load`, once each; a missing one is skipped."""
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
                loaded[child_id] = load(child_id)
            except (StreamNotFound, InvalidStreamId):
                loaded[child_id] = None
        if loaded[child_id] is not None:
            yield from walk(loaded[child_id], load, child_start, depth + 1, True, loaded)


def child_reference(event: Event) -> tuple[str | None, int]:
    """The (child stream id, starting index) a `child_agent_running` event points at."""
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


# --- the vocabulary: what each kind of event is, and typed readers of the facts in `Event.data` -------------


@dataclass(frozen=True)
class EventKind:
    """What one event type means to the programs that read a stream (reports, views, the prompt)."""

    title: str
    """How a report heads an event of this type."""
    group: str = "other"
    """How views classify it (see `group_of`)."""
    status: str | None = None
    """The stream status it sets (running, completed, help_needed, answered, interrupted); None: unchanged."""
    in_prompt: bool = True
    """False for events the model does not read (what follows says it all)."""
    in_report: bool = True
    """False for bookkeeping a transcript or an export leaves out."""
    action: str = ""  # the name (as the guides spell it) of the action that records it, if one does


EVENT_KINDS: dict[str, EventKind] = {
    "new_request": EventKind("Request", "request", "running"),
    "follow_up_request": EventKind("Follow-up request", "request", "running"),
    "new_request_from_parent": EventKind("Request from the parent agent", "request", "running"),
    "follow_up_request_from_parent": EventKind("Follow-up from the parent agent", "request", "running"),
    "action": EventKind("Command", "shell", action="RUN_SHELL_CMD"),  # the action's own name in `data` wins
    "edit_file": EventKind("File edit", "edit", action="EDIT_FILE"),
    "task_completion": EventKind("Task completed", "answer", "completed", action="TASK_COMPLETE"),
    "agent_requested_help": EventKind("Help needed", "answer", "help_needed", action="HELP_NEEDED"),
    "agent_text_response": EventKind("Answer", "answer", "answered", action="AGENT_TEXT_RESPONSE"),
    "task_interrupted": EventKind("Stopped", "interrupted", "interrupted"),
    "approval_requested": EventKind("Approval requested", "approval", in_prompt=False),
    "approval_decided": EventKind("Approval decision", "approval"),
    "new_child_agent": EventKind("Child agent started", "child_start"),
    "resume_child_agent": EventKind("Child agent resumed", "child_start"),
    "child_agent_running": EventKind("Child agent running", "child_running", in_report=False),
    "queued_child_agent": EventKind("Child agent queued", in_report=False),  # its request's event says it is queued
    "summary_failed": EventKind("Summary failed", in_prompt=False, in_report=False),
    "results_shrunk": EventKind("Old results shrunk", in_prompt=False, in_report=False),
    "context_exceeded": EventKind("Prompt over the context window", in_prompt=False),
    "reply_rejected": EventKind("Reply rejected", "rejected", in_prompt=False),  # the model reads the feedback
    "workspace_restored": EventKind("Files restored (undo)", "restore"),
    "hook_ran": EventKind("Hook", "hook", in_prompt=False),  # hook_feedback's reason or context: the model reads it
    "hook_feedback": EventKind("Hook", "hook"), "history_folded": EventKind("History folded", "fold", in_prompt=False),
    "plan_updated": EventKind("Plan", "plan", action="UPDATE_PLAN"),
    "completion_held": EventKind("Completion held", "held"),
    "completion_dropped": EventKind("Completion dropped", "held"),
    "user_command": EventKind("User's command", "shell"), "conversation_rewound": EventKind("Rewound", "restore"),
}
"""Every event type anges records, but a parent's `child_agent_<exit type>` (see `kind_of`)."""
_CHILD_RETURN = EventKind("Child agent returned", "child_exit")


STOPPED = "The run stopped: "
"""How the content of a `task_interrupted` event begins (`interrupted_event`)."""


def kind_of(event_type: str) -> EventKind:
    """The entry of EVENT_KINDS for `event_type`; a child's return and unknown types (0.1.x actions) too."""
    return EVENT_KINDS.get(event_type) or (
        _CHILD_RETURN if event_type.startswith("child_agent_") else EventKind(event_type))


def group_of(event: Event) -> str:
    """request, shell, tool, api, edit, answer, interrupted, approval, child_start, child_running, child_exit, restore,
    hook, plan, held, rejected or other: what views show an event as."""
    if event.type == "action":
        data = event.data
        shell = isinstance(data.get("command"), str)  # as `ShellRun.of` reads a command's result
        api = data.get("action_type") == "CALL_API"  # as `APICall.of` reads a web API call's
        return "shell" if shell else "api" if api else "tool" if "server" in data and "tool" in data else "other"
    return kind_of(event.type).group


def interrupted_event(reason: str, why: str, **facts: Any) -> Event:
    """A `task_interrupted` event: the run stopped for `reason` (interrupt, timeout, event_limit, ...), `why` says
    it in words."""
    content = f"{STOPPED}{why.rstrip('.')}."
    return Event("task_interrupted", content=content, message=content, data={"reason": reason, **facts})


def stop_explanation(event: Event) -> str:
    """Why a `task_interrupted` event's run stopped, without the words every such event begins with."""
    return event.content.removeprefix(STOPPED)


def is_step(event: Event, answer: bool = True) -> bool:
    """An action of the model, as step limits and counts see it: not a request, not bookkeeping, not an undo, not the
    approval that came before an action (a declined action's decision is its only event, so it counts); with
    `answer=False` not the answer that ends a run either (what status lines count)."""
    kind = kind_of(event.type)  # bookkeeping (summary_failed, context_exceeded) is not in the report or the prompt
    if not (kind.in_report and kind.in_prompt) or event.type in NOT_STEPS or (
            not answer and event.type in RETURN_TO_PARENT_EVENT_TYPES):
        return False
    data = event.data or {}
    if event.type == "hook_feedback":  # a blocked action's only event counts; a context is the action's own step
        return data.get("effect") == "blocked"
    return event.type != "approval_decided" or (data.get("decision") != "allow" and data.get("rule") != "trust")


def status_of(event_type: str) -> str | None:
    """The stream status an event of this type sets, or None when it leaves the status as it was."""
    return kind_of(event_type).status


def stream_status(events: Iterable[Event]) -> str:
    """The status a sequence of events leaves a stream in ("new" when none sets one)."""
    status = "new"
    for event in events:
        status = status_of(event.type) or status
    return status


def shown_path(path: str, cwd: str) -> str:
    """`path` relative to `cwd` when it is inside it (how views show the files an agent touched)."""
    base = cwd.rstrip("/")
    return path[len(base) + 1:] if base and path.startswith(base + "/") else path


def derived_content(event: Event) -> str | None:
    """The content `event` has when it is made from its facts alone (a command's, an edit's or a web API call's
    result); None for other events. The store leaves such a content out and `Event.from_dict` rebuilds it."""
    facts = ShellRun.of(event) or (FileEdit.of(event) if "directive" in event.data else None) or APICall.of(event)
    return facts.text() if facts is not None else None


NESTED_DEFAULTS: dict[str, dict[str, Any]] = {"approval": {"request_id": None, "escalated": False},
                                              "usage": {"cached_tokens": 0, "estimated": False}}
"""Facts inside `approval` and `usage` that a record leaves out at these values."""


def action_input(args: dict) -> dict:
    """The `input` fact of an action's event: the arguments the model gave it (what a replay shows it was asked)."""
    return {key: value for key, value in args.items() if key != "action_type"}


def _defaults(event_type: str, data: dict) -> dict[str, Any]:
    if event_type == "action" and isinstance(data.get("command"), str):
        return {**COMMAND_DEFAULTS, "input": {"command": data["command"]}}  # a command asked for with no option
    return {}


def stored_facts(event_type: str, data: dict) -> dict:
    """`data` without the facts at their defaults (what a record keeps; `full_facts` gives them back)."""
    defaults = _defaults(event_type, data)
    kept = {key: value for key, value in data.items() if key not in defaults or not _same(value, defaults[key])}
    for key, inner in NESTED_DEFAULTS.items():
        if isinstance(kept.get(key), dict):
            kept[key] = {k: v for k, v in kept[key].items() if k not in inner or not _same(v, inner[k])}
    return kept


def full_facts(event_type: str, data: dict) -> dict:
    """`data` with every fact a record may leave out filled in at its default (a copy)."""
    full = {**_defaults(event_type, data), **data}
    for key, inner in NESTED_DEFAULTS.items():
        if isinstance(full.get(key), dict):
            full[key] = {**inner, **full[key]}
    return full


def _same(value: Any, default: Any) -> bool:
    """Equal and of the same type (0 is not False, 0.0 is not None)."""
    return value == default and type(value) is type(default)


@dataclass(frozen=True)
class StepUsage:
    """The model usage recorded on an event (the calls that led to it): tokens, calls, model, cost."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    model_calls: int = 0
    estimated: bool = False
    model: str = ""
    cost: float | None = None

    @classmethod
    def of(cls, data: dict) -> StepUsage | None:
        """The usage in an event's data, or None when it records none."""
        usage, cost = data.get("usage"), data.get("cost")
        if not isinstance(usage, dict) or not usage:
            return None
        count = lambda key: int(usage.get(key) or 0)
        return cls(count("input_tokens"), count("output_tokens"), count("cached_tokens"), count("model_calls"),
                   bool(usage.get("estimated")), str(data.get("model") or ""),
                   float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) else None)

    def line(self) -> str:
        """`1,234 input / 56 output tokens (estimated) · MODEL · $0.0012`."""
        parts = [f"{self.input_tokens:,} input / {self.output_tokens:,} output tokens"
                 + (" (estimated)" if self.estimated else ""), self.model]
        parts.append(f"${self.cost:.4f}" if self.cost is not None else "")
        return " · ".join(part for part in parts if part)


@dataclass(frozen=True)
class ChildReturn:
    """The facts of a parent's `child_agent_<exit type>` event: which child returned, and how."""

    agent_id: str
    agent_type: str
    exit_type: str
    reason: str = ""
    """Why the child was stopped (its `task_interrupted` reason), if it was."""

    @classmethod
    def of(cls, event: Event) -> ChildReturn | None:
        """The facts of `event`, or None when it is not a child's return."""
        if kind_of(event.type) is not _CHILD_RETURN:
            return None
        data = event.data
        return cls(str(data.get("agent_id") or ""), str(data.get("agent_type") or "child"),
                   str(data.get("exit_type") or event.type[len("child_agent_"):]), str(data.get("reason") or ""))

    @property
    def status(self) -> str:
        """The child's stream status after it returned (completed, answered, ...; its exit type if unknown)."""
        return status_of(self.exit_type) or self.exit_type
