"""A task's result, read from the store (the single source of truth) and the batch log."""

from __future__ import annotations

from typing import TYPE_CHECKING

from anges.exceptions import InvalidStreamId, StreamNotFound
from anges.store.event_store import stream_status
from anges.store.events import RETURN_TO_PARENT_EVENT_TYPES, Event, is_step, walk

if TYPE_CHECKING:
    from anges.batch.state import TaskRecord
    from anges.batch.tasks import TaskSpec
    from anges.store.event_store import EventStore
    from anges.store.events import EventStream

MAX_ANSWER_CHARS = 20_000
SUCCEEDED = ("completed", "answered")
STOP_REASON = "interrupt"
"""The `task_interrupted` reason of Ctrl-C and Stop: such a task is unfinished, not failed."""


def outcome(row: dict) -> str:
    """succeeded, failed (its check failed too) or unfinished (stopped, cut off or never run: a later run of the batch
    does it)."""
    status = row["status"]
    if status in SUCCEEDED:
        return "failed" if row.get("check") == "failed" else "succeeded"
    if status in ("not_run", "running") or (status == "interrupted" and row.get("reason") == STOP_REASON):
        return "unfinished"
    return "failed"


def task_result(store: EventStore, spec: TaskSpec, record: TaskRecord | None) -> dict:
    """One line of results.jsonl: the facts of the task's latest stream (children included)."""
    row = {"id": spec.id, "status": "not_run", "reason": None, "steps": 0, "model_calls": 0,
           "tokens": {"input": 0, "output": 0, "cached": 0}, "cost": None,
           "wall_time": round(record.wall_time, 3) if record else 0.0,
           "stream_id": record.stream_id if record else None, "answer": None, "error": None}
    stream = _load(store, record.stream_id) if record and record.stream_id else None
    if stream is not None:
        _add_stream_facts(row, stream, store)
    if record is not None and record.status == "error":
        row["status"], row["error"] = "error", record.error
    if spec.check:
        check = record.check if record is not None else None
        row["check"] = check["status"] if check else None
        row["check_detail"] = {k: v for k, v in check.items() if k != "status"} if check else None
    return row


def check_counts(rows: list[dict]) -> dict[str, int]:
    """How the checks went: passed, failed (timed out included), not_run (the task has a check that did not run)."""
    counts = {"passed": 0, "failed": 0, "not_run": 0}
    for row in rows:
        if "check" in row:
            counts[row["check"] or "not_run"] += 1
    return counts


def pass_rate(counts: dict[str, int]) -> str:
    """`2 of 3 passed (67%)`, and how many did not run."""
    ran = counts["passed"] + counts["failed"]
    text = f"{counts['passed']} of {ran} passed" + (f" ({100 * counts['passed'] / ran:.0f}%)" if ran else "")
    return text + (f"; {counts['not_run']} not run" if counts["not_run"] else "")


def final_event(stream: EventStream) -> Event | None:
    """The event that ended the stream's latest request, or None while it is unfinished."""
    last = stream.events_list[-1] if stream.events_list else None
    return last if last is not None and last.type in RETURN_TO_PARENT_EVENT_TYPES else None


def _add_stream_facts(row: dict, stream: EventStream, store: EventStore) -> None:
    from anges.agents.outcome import Outcome

    status = stream_status(stream.events_list)
    final = final_event(stream)
    usage = Outcome(stream, "", status, list(walk(stream, store.load)), 0.0).usage()
    row.update(
        status=status,
        reason=final.data.get("reason") if final is not None and final.type == "task_interrupted" else None,
        steps=sum(map(is_step, stream.events_list)),
        model_calls=usage["model_calls"],
        tokens={"input": usage["input_tokens"], "output": usage["output_tokens"], "cached": usage["cached_tokens"]},
        cost=usage.get("cost"),
        answer=_clip(final.content) if final is not None and final.type != "task_interrupted" else None,
    )


def _load(store: EventStore, uid: str) -> EventStream | None:
    try:
        return store.load(uid)
    except (StreamNotFound, InvalidStreamId):
        return None


def _clip(text: str) -> str:
    if len(text) <= MAX_ANSWER_CHARS:
        return text
    cut = len(text) - MAX_ANSWER_CHARS
    return text[:MAX_ANSWER_CHARS] + f"\n... [{cut} characters cut; the whole answer is in the stream]"
