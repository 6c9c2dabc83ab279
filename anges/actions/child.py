"""CALL_CHILD_AGENT: delegate a request to a new or resumed child agent."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from anges.actions.base import Action, ActionContext
from anges.events import Event, EventStream
from anges.exceptions import InvalidStreamId, StreamNotFound
from anges.parsing import Param

if TYPE_CHECKING:
    from anges.store import EventStore


class Delegator(Protocol):
    """What CALL_CHILD_AGENT needs of the agent that delegates."""

    uid: str
    parent_ids: list[str]
    store: EventStore

    def child_types(self, any_depth: bool = False) -> list[str]:
        """The agent types (upper case) this agent may start now (or at any depth)."""

    def make_child(self, agent_type: str, event_stream: EventStream) -> Any:
        """A child agent of that type on that stream, sharing this agent's model, limits and safety."""


@dataclass
class ChildRun:
    """A child agent ready to run, and the request it gets."""

    agent: Any
    request: str


class CallChildAgent(Action):
    """Starts or resumes a child agent and records its report."""

    type = "CALL_CHILD_AGENT"
    guide_template = "actions/call_child_agent.j2"
    params = {"directive": Param(str, non_empty=True), "agent_input": Param(str, non_empty=True)}

    def run(self, ctx: ActionContext, args: dict) -> Event:
        prepared = self.prepare(ctx, args)
        if isinstance(prepared, Event):
            return prepared
        return self.finish(self.execute(prepared))

    def prepare(self, ctx: ActionContext, args: dict) -> ChildRun | Event:
        """Build the child and record `new_child_agent`/`resume_child_agent` and `child_agent_running`."""
        words = args["directive"].split()
        verb = words[0].upper() if words else ""
        target = words[1] if len(words) == 2 else ""
        if verb == "NEW_CHILD_AGENT" and target:
            return self._new_child(ctx, target.upper(), args)
        if verb == "RESUME_CHILD_AGENT" and target:
            return self._resumed_child(ctx, target, args)
        return _error(f"directive {args['directive']!r} is not valid: use `NEW_CHILD_AGENT <TYPE>` "
                      f"(TYPE one of {', '.join(_parent(ctx).child_types())}) or `RESUME_CHILD_AGENT <child id>`")

    def execute(self, child: ChildRun) -> ChildRun:
        """Run the child until it returns."""
        child.agent.run_with_new_request(child.request)
        return child

    def finish(self, child: ChildRun) -> Event:
        """The parent's `child_agent_<exit type>` event carrying the child's final content."""
        stream = child.agent.event_stream
        exit_event = stream.events_list[-1]
        who = f"{child.agent.agent_type} {stream.uid}"
        return Event(
            type=f"child_agent_{exit_event.type}",
            content=f"Child agent {who} returned ({exit_event.type}):\n{exit_event.content}",
            message=f"child agent {who} returned: {exit_event.type}",
            data={"agent_id": stream.uid, "agent_type": child.agent.agent_type, "exit_type": exit_event.type,
                  **({"reason": exit_event.data["reason"]} if "reason" in exit_event.data else {})},
        )

    def _new_child(self, ctx: ActionContext, child_type: str, args: dict) -> ChildRun | Event:
        parent = _parent(ctx)
        allowed = parent.child_types()
        if child_type not in allowed:
            why = " (the nesting depth limit is reached)" if child_type in parent.child_types(any_depth=True) else ""
            return _error(f"cannot start a child of type {child_type!r}{why}; valid types: {', '.join(allowed)}")
        stream = EventStream(parent_event_stream_uids=parent.parent_ids + [parent.uid], agent_type=child_type.lower())
        return self._announce(ctx, "new_child_agent", parent.make_child(child_type.lower(), stream), args)

    def _resumed_child(self, ctx: ActionContext, child_id: str, args: dict) -> ChildRun | Event:
        parent = _parent(ctx)
        try:
            stream = parent.store.load(child_id)
        except (StreamNotFound, InvalidStreamId):
            stream = None
        if stream is None or stream.parent_event_stream_uids[-1:] != [parent.uid]:
            return _error(f"{child_id!r} is not one of your child agents; resume only ids from your "
                          f"NEW_CHILD_AGENT results, or start a new child")
        if stream.agent_type.upper() not in parent.child_types(any_depth=True):
            return _error(f"child {child_id!r} has agent type {stream.agent_type!r}, which cannot be resumed")
        return self._announce(ctx, "resume_child_agent", parent.make_child(stream.agent_type, stream), args)

    def _announce(self, ctx: ActionContext, kind: str, child, args: dict) -> ChildRun:
        stream = child.event_stream
        child.store.sync(stream)
        info = {"agent_id": stream.uid, "starting_from": len(stream.events_list)}
        verb = "starts" if kind == "new_child_agent" else "resumes"
        ctx.record(Event(kind, reasoning=ctx.reply.reasoning, content=args["agent_input"],
                         message=f"{verb} child agent {child.agent_type} {stream.uid}",
                         data={"agent_id": stream.uid, "agent_type": child.agent_type, "directive": args["directive"]}))

        running = f"child agent {child.agent_type} {stream.uid} is running"
        ctx.record(Event("child_agent_running", reasoning=json.dumps(info), content=running, message=running,
                         data=info))
        return ChildRun(child, args["agent_input"])


def _parent(ctx: ActionContext) -> Delegator:
    if ctx.delegator is None:
        raise RuntimeError("CALL_CHILD_AGENT needs an agent that can start child agents")
    return ctx.delegator


def _error(message: str) -> Event:
    return Event("action", content=f"CALL_CHILD_AGENT FAILED: {message}", message=f"could not delegate: {message}",
                 data={"action_type": "CALL_CHILD_AGENT", "error": message})

