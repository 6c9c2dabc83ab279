"""The figures of `anges stats`, read from the store alone: what each run did, what it cost and where its time went.

Every figure is a fact the events recorded: the usage and cost the model calls put on them, `latency` (time in
the model), each command's `duration`, when an approval was asked and when it was answered, each event's time.
Where an older stream lacks a fact (anges 0.1.x recorded no usage, no durations), the figures count what is
missing instead of guessing it.
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from anges.store.events import (
    REQUEST_EVENT_TYPES,
    Event,
    EventStream,
    Loader,
    StepUsage,
    is_step,
    kind_of,
    status_of,
    walk,
)
from anges.store.results import APICall, FileEdit, ShellRun
from anges.util.clipping import one_line

SLOWEST = 5
"""How many of the slowest steps are kept."""
ENDED = ("completed", "answered", "help_needed", "interrupted")


@dataclass(frozen=True)
class Step:
    """One step (an action's event) and how long it took since the event before it: its model call and action."""

    stream_id: str
    number: int
    """The event's number in its stream, from 1."""
    what: str
    seconds: float
    model: float | None = None
    """Of which in the model (the reply that asked for it), when recorded."""
    command: float | None = None
    """Of which running the command, for a command (or waiting on the web API, for a CALL_API)."""


@dataclass
class Stats:
    """The figures of one run (a stream with its child agents' streams), or of several added up."""

    runs: int = 0
    requests: int = 0
    steps: int = 0
    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    estimated: bool = False
    """Some token counts are estimates (the model did not report usage)."""
    cost: float | None = None
    """US dollars; None when no call had a price."""
    wall: float = 0.0
    """Seconds from each request to the end of its run."""
    model_time: float = 0.0
    command_time: float = 0.0
    commands: int = 0
    approval_wait: float = 0.0
    approvals: int = 0
    api_calls: int = 0
    """Web API calls sent (CALL_API), and `api_time` the seconds they took."""
    api_time: float = 0.0
    ends: Counter = field(default_factory=Counter)
    """How the runs ended: completed, answered, help_needed, interrupted (REASON), unfinished."""
    missing: Counter = field(default_factory=Counter)
    """Facts the streams lack: usage (runs with steps but no recorded usage), model_time (model calls without a
    latency), command_time (commands without a duration), approval_answer (approvals never answered)."""
    slowest: list[Step] = field(default_factory=list)

    @property
    def cached_share(self) -> float | None:
        """The share of input tokens the provider read from its prompt cache."""
        return round(self.cached_tokens / self.input_tokens, 3) if self.input_tokens else None

    def add(self, other: Stats) -> None:
        """Add another run's figures to these."""
        for name in ("runs", "requests", "steps", "model_calls", "input_tokens", "output_tokens", "cached_tokens",
                     "wall", "model_time", "command_time", "commands", "approval_wait", "approvals", "api_calls",
                     "api_time"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.estimated = self.estimated or other.estimated
        if other.cost is not None:
            self.cost = (self.cost or 0.0) + other.cost
        self.ends.update(other.ends)
        self.missing.update(other.missing)
        self.slowest = heapq.nlargest(SLOWEST, self.slowest + other.slowest, key=lambda step: step.seconds)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready figures (seconds rounded to milliseconds)."""
        data = {name: getattr(self, name) for name in ("runs", "requests", "steps", "model_calls", "input_tokens",
                                                        "output_tokens", "cached_tokens", "estimated", "commands",
                                                        "approvals", "api_calls")}
        data.update({"cached_share": self.cached_share, "cost": None if self.cost is None else round(self.cost, 6),
                     "seconds": {"wall": round(self.wall, 3), "model": round(self.model_time, 3),
                                 "commands": round(self.command_time, 3), "api": round(self.api_time, 3),
                                 "approval_wait": round(self.approval_wait, 3)},
                     "ends": dict(self.ends), "missing": {name: n for name, n in self.missing.items() if n},
                     "slowest_steps": [{**vars(step), **{key: round(getattr(step, key), 3) for key in
                                                         ("seconds", "model", "command") if getattr(step, key)}}
                                       for step in self.slowest]})
        return data


def run_stats(stream: EventStream, load: Loader) -> Stats:
    """The figures of one stream, its child agents' streams included (read with `load`)."""
    stats = Stats(runs=1)
    previous: dict[str, Event] = {}
    numbers: dict[str, dict[int, int]] = {}
    asked: dict[tuple[str, Any], Event] = {}
    request: Event | None = None
    for depth, owner, event in walk(stream, load):
        if depth == 0:
            request = _follow_request(stats, request, event, previous.get(owner.uid))
        if owner.uid not in numbers:
            numbers[owner.uid] = {id(each): n for n, each in enumerate(owner.events_list, 1)}
        _count(stats, owner.uid, numbers[owner.uid][id(event)], event, previous.get(owner.uid), asked)
        previous[owner.uid] = event
    if request is not None:  # the last request has no end
        stats.ends["unfinished"] += 1
        stats.wall += _seconds(request, stream.events_list[-1])
    stats.missing["approval_answer"] += len(asked)
    if stats.steps and not stats.model_calls:  # anges 0.1.x recorded no facts at all; a later version records some
        stats.missing["usage" if not any(event.data for event in stream.events_list) else "calls"] += 1
    return stats


def _follow_request(stats: Stats, request: Event | None, event: Event, before: Event | None) -> Event | None:
    """Count requests and how each ended; the request still running after `event` (None when none is)."""
    if event.type in REQUEST_EVENT_TYPES:
        if request is not None:  # a new request before the last one ended (its process died)
            stats.ends["unfinished"] += 1
            stats.wall += _seconds(request, before or request)
        stats.requests += 1
        return event
    status = status_of(event.type)
    if request is not None and status in ENDED:
        reason = event.data.get("reason") if status == "interrupted" else None
        stats.ends[f"{status} ({reason})" if reason else status] += 1
        # a run whose process died is closed when the next one starts: it ended with its last event
        stats.wall += _seconds(request, before if reason == "abandoned" and before is not None else event)
        return None
    return request


def _count(stats: Stats, owner: str, number: int, event: Event, before: Event | None, asked: dict) -> None:
    """Add one event's facts: usage, time in the model and in its command, approvals, and whether it is a step."""
    usage = StepUsage.of(event.data)
    if usage is not None:
        stats.model_calls += usage.model_calls
        stats.input_tokens += usage.input_tokens
        stats.output_tokens += usage.output_tokens
        stats.cached_tokens += usage.cached_tokens
        stats.estimated = stats.estimated or usage.estimated
        if usage.cost is not None:
            stats.cost = (stats.cost or 0.0) + usage.cost
        if isinstance(event.data.get("latency"), (int, float)):
            stats.model_time += event.data["latency"]
        else:
            stats.missing["model_time"] += usage.model_calls
    command = _command_seconds(stats, event)
    call = APICall.of(event)
    if call is not None and call.sent:
        stats.api_calls += 1
        stats.api_time += call.duration
        command = call.duration
    key = (owner, event.data.get("request_id"))
    if event.type == "approval_requested":
        asked[key] = event
    elif event.type == "approval_decided" and key in asked:
        stats.approvals += 1
        stats.approval_wait += _seconds(asked.pop(key), event)
    if is_step(event) and before is not None:
        stats.steps += 1
        latency = event.data.get("latency")
        step = Step(owner, number, _what(event), _seconds(before, event),
                    latency if isinstance(latency, (int, float)) else None, command)
        stats.slowest = heapq.nlargest(SLOWEST, [*stats.slowest, step], key=lambda s: s.seconds)
    elif is_step(event):
        stats.steps += 1


def _command_seconds(stats: Stats, event: Event) -> float | None:
    """The command's duration when `event` is a command's result (and count it); None otherwise or when unknown."""
    if ShellRun.of(event) is None and not (event.type == "action" and not event.data):  # 0.1.x: no facts at all
        return None
    stats.commands += 1
    duration = event.data.get("duration")
    if not isinstance(duration, (int, float)):
        stats.missing["command_time"] += 1
        return None
    stats.command_time += duration
    return duration


def _what(event: Event) -> str:
    """A step in a few words: `RUN_SHELL_CMD pytest -q`, `EDIT_FILE REPLACE_TEXT app.py`, `TASK_COMPLETE`."""
    data = event.data
    action = str(data.get("action_type") or kind_of(event.type).action or kind_of(event.type).title)
    run, edit, call = ShellRun.of(event), FileEdit.of(event) if "directive" in data else None, APICall.of(event)
    subject = run.command if run else edit.directive if edit else f"{call.api}.{call.operation} {call.method}".strip() \
        if call else data.get("agent_id") or ""
    return one_line(f"{action} {subject}".strip(), 100)


def _seconds(start: Event, end: Event) -> float:
    return max(0.0, (end.created_at - start.created_at).total_seconds())
