"""Machine-readable output of a run: JSON lines as events are recorded (`--output jsonl`) or one object (`json`).

JSON lines, one object each:
- `{"type": "run_started", "stream_id", "agent_type", "model", "request", "resumed", "cwd", "time"}`
- `{"type": "event", "stream_id", "agent_type", "parent_ids", "depth", "event": {Event.to_dict()}}` for each
  event, children's included, as it is recorded
- `{"type": "plan", "stream_id", "agent_type", "parent_ids", "depth", "plan": [{"step", "status"}, ...], "done",
  "total"}` after the event of each UPDATE_PLAN (every agent's: a child's plan is its own)
- `{"type": "delta", "stream_id", "agent_type", "parent_ids", "depth", "call", "field", "text"}` as a reply
  streams: `text` was added to its `field` ("analysis", "reasoning", or "answer": the `content` of a TASK_COMPLETE,
  AGENT_TEXT_RESPONSE or HELP_NEEDED); `call` numbers the agent's model calls
  (a new number starts a new reply), and `"restart": true` says a retried attempt starts the reply's text again.
  Deltas are not stored: the `event` lines that follow carry the finished reply
- `{"type": "run_finished", "stream_id", "status", "exit_code", "reason", "answer", "usage", "duration"}`

`json` prints a single object: the `run_finished` fields plus `request` and `events` (the event objects).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from anges.store.plans import Plan
from anges.util.jsonlines import JsonLines

if TYPE_CHECKING:
    from anges.agents import BaseAgent
    from anges.agents.outcome import Outcome


class JsonLinesOutput(JsonLines):
    """One JSON object per line on stdout, flushed at once so a parent process can follow along."""

    def watch(self, model):
        return model

    def started(self, agent: BaseAgent, request: str) -> None:
        stream = agent.event_stream
        self.emit({"type": "run_started", "stream_id": agent.uid, "agent_type": agent.agent_type,
                   "model": getattr(agent.inference_func, "name", ""), "request": _masked(request),
                   "resumed": bool(stream and stream.events_list), "cwd": agent.cmd_init_dir,
                   "time": datetime.now().isoformat()})

    def on_message(self, message) -> None:
        who = {"stream_id": message.agent_id, "agent_type": message.agent_type,
               "parent_ids": list(message.parent_ids), "depth": message.depth}
        self.emit({"type": "event", **who, "event": message.event.to_dict()})
        plan = Plan.of(message.event)
        if plan is not None:
            self.emit({"type": "plan", **who, "plan": plan.to_data(), "done": plan.done, "total": plan.total})

    def on_delta(self, delta) -> None:
        record = {"type": "delta", "stream_id": delta.agent_id, "agent_type": delta.agent_type,
                  "parent_ids": list(delta.parent_ids), "depth": delta.depth, "call": delta.call,
                  "field": delta.field, "text": delta.text}
        self.emit({**record, "restart": True} if delta.restart else record)

    def interrupting(self, signal_name: str) -> None:
        """Nothing to say: the `task_interrupted` event follows."""

    def finished(self, outcome: Outcome, exit_code: int) -> None:
        self.emit({"type": "run_finished", **summary(outcome, exit_code)})

    def close(self) -> None:
        """Nothing is buffered."""


class JsonOutput(JsonLinesOutput):
    """One JSON object when the run ends."""

    def started(self, agent: BaseAgent, request: str) -> None:
        """Silent until the end."""

    def on_message(self, message) -> None:
        """The events are read from the store when the run ends."""

    def on_delta(self, delta) -> None:
        """Only the finished run is printed."""

    def finished(self, outcome: Outcome, exit_code: int) -> None:
        events = [{"stream_id": stream.uid, "agent_type": stream.agent_type, "depth": depth, "event": event.to_dict()}
                  for depth, stream, event in outcome.events]
        self.emit({**summary(outcome, exit_code), "request": _masked(outcome.request), "events": events})


def summary(outcome: Outcome, exit_code: int) -> dict:
    """The facts of a finished run shared by both formats."""
    return {
        "stream_id": outcome.stream.uid,
        "status": outcome.status,
        "exit_code": exit_code,
        "reason": outcome.stop_reason,
        "answer": outcome.answer,
        "usage": outcome.usage(),
        "duration": round(outcome.duration, 3),
    }


def _masked(request: str) -> str:
    """The request as the events record it: with the values of secret environment variables masked."""
    from anges.util.masking import mask_secrets, secret_values

    return mask_secrets(request, secret_values())
