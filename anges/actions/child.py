"""CALL_CHILD_AGENT: delegate a request to a new or resumed child agent."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from anges.actions.base import Action, ActionContext, Delegator
from anges.exceptions import InvalidStreamId, StreamNotFound
from anges.prompt.parsing import Param
from anges.store.events import Event, EventStream
from anges.store.outputs import save, stream_folder
from anges.store.results import took
from anges.util.clipping import clip, shorten

TASK_CHARS = 100
"""The most of a child's first request line its reports repeat."""


@dataclass
class ChildRun:
    """A child agent ready to run, the request it gets, and the reply that asked for it."""

    agent: Any
    request: str
    ctx: ActionContext
    kind: str = "new_child_agent"
    """new_child_agent or resume_child_agent."""
    directive: str = ""
    approval: dict = field(default_factory=dict)
    """The approval facts of the action that started it (recorded on its `new_child_agent` event)."""
    start: int = 0
    """Events its stream had when it started: what it records from there on is this run."""

    @property
    def name(self) -> str:
        """How the model calls it: `TASK_EXECUTOR k3Jd9aQw2LxZ`."""
        return f"{self.agent.agent_type.upper()} {self.agent.event_stream.uid}"

    @property
    def task(self) -> str:
        """The first line of its request, as its reports name it."""
        return shorten(next((line.strip() for line in self.request.splitlines() if line.strip()), ""), TASK_CHARS)

    @property
    def label(self) -> str:
        """Who it is and what it does: `TASK_EXECUTOR k3Jd9aQw2LxZ (make the tests pass)`."""
        return f"{self.name} ({self.task})"


class CallChildAgent(Action):
    """Starts or resumes a child agent and records its report."""

    type = "CALL_CHILD_AGENT"
    guide_template = "actions/call_child_agent.j2"
    params = {"directive": Param(str, non_empty=True), "agent_input": Param(str, non_empty=True)}

    def run(self, ctx: ActionContext, args: dict) -> Event:
        prepared = self.prepare(ctx, args)
        if isinstance(prepared, Event):
            return prepared
        self.requested(prepared)
        self.started(prepared)
        return self.finish(self.execute(prepared))

    def prepare(self, ctx: ActionContext, args: dict) -> ChildRun | Event:
        """The child the action asks for, built but not started; or the error event when it cannot be had."""
        words = args["directive"].split()
        verb = words[0].upper() if words else ""
        target = words[1] if len(words) == 2 else ""
        if verb == "NEW_CHILD_AGENT" and target:
            return self._new_child(ctx, target.upper(), args)
        if verb == "RESUME_CHILD_AGENT" and target:
            return self._resumed_child(ctx, target, args)
        return error(f"directive {args['directive']!r} is not valid: use `NEW_CHILD_AGENT <TYPE>` "
                     f"(TYPE one of {', '.join(_parent(ctx).child_types())}) or `RESUME_CHILD_AGENT <child id>`")

    def requested(self, child: ChildRun, queued: bool = False) -> None:
        """Record `new_child_agent` or `resume_child_agent` (the request) on the parent's stream; `queued`: it waits
        for a running child to return before it starts."""
        stream, ctx = child.agent.event_stream, child.ctx
        verb = "queues" if queued else "starts" if child.kind == "new_child_agent" else "resumes"
        data = {"agent_id": stream.uid, "agent_type": child.agent.agent_type, "directive": child.directive,
                **({"queued": True} if queued else {})}
        ctx.record(Event(child.kind, reasoning=ctx.reply.reasoning, analysis=ctx.reply.analysis, content=child.request,
                         message=f"{verb} child agent {child.agent.agent_type} {stream.uid}",
                         data={**data, **({"approval": child.approval} if child.approval else {})}))

    def queued(self, child: ChildRun, running: int) -> None:
        """Record `queued_child_agent`: the child waits until one of the `running` children returns."""
        text = f"Child agent {child.name} is queued: it starts when one of your {running} running children returns."
        child.ctx.record(Event("queued_child_agent", content=text, message=text,
                               data={"agent_id": child.agent.event_stream.uid}))

    def started(self, child: ChildRun) -> None:
        """Record `child_agent_running` on the parent's stream, where the child's events of this run begin."""
        stream = child.agent.event_stream
        child.agent.store.sync(stream)
        child.start = len(stream.events_list)
        running = f"Child agent {child.name} is running."
        child.ctx.record(Event("child_agent_running", content=running, message=running,
                               data={"agent_id": stream.uid, "starting_from": child.start}))

    def execute(self, child: ChildRun) -> ChildRun:
        """Run the child until it returns."""
        child.agent.run_with_new_request(child.request)
        return child

    def finish(self, child: ChildRun, others: str = "") -> Event:
        """The parent's `child_agent_<exit type>` event carrying the child's final content; `others` says what the
        parent's other children are doing."""
        stream = child.agent.event_stream
        exit_event = stream.events_list[-1]
        request = stream.events_list[min(child.start, len(stream.events_list) - 1)]
        after = took((exit_event.created_at - request.created_at).total_seconds())
        report, saved = _bounded(exit_event.content, child.ctx)
        content = f"Child agent {child.label} returned ({exit_event.type}) after {after}:\n" \
            f"{report}{_open_plan(child.agent.run_state)}"
        return Event(
            type=f"child_agent_{exit_event.type}",
            content=f"{content}\n\n{others}" if others else content,
            message=f"child agent {child.agent.agent_type} {stream.uid} returned: {exit_event.type}",
            data={"agent_id": stream.uid, "agent_type": child.agent.agent_type, "exit_type": exit_event.type,
                  **({"reason": exit_event.data["reason"]} if "reason" in exit_event.data else {}), **saved},
        )

    def _new_child(self, ctx: ActionContext, child_type: str, args: dict) -> ChildRun | Event:
        parent = _parent(ctx)
        allowed = parent.child_types()
        if child_type not in allowed:
            why = " (the nesting depth limit is reached)" if child_type in parent.child_types(any_depth=True) else ""
            return error(f"cannot start a child of type {child_type!r}{why}; valid types: {', '.join(allowed)}")
        stream = EventStream(parent_event_stream_uids=parent.parent_ids + [parent.uid], agent_type=child_type.lower())
        child = parent.make_child(child_type.lower(), stream)
        return ChildRun(child, args["agent_input"], ctx, "new_child_agent", args["directive"])

    def _resumed_child(self, ctx: ActionContext, child_id: str, args: dict) -> ChildRun | Event:
        parent = _parent(ctx)
        try:
            stream = parent.store.load(child_id)
        except (StreamNotFound, InvalidStreamId):
            stream = None
        if stream is None or stream.parent_event_stream_uids[-1:] != [parent.uid]:
            return error(f"{child_id!r} is not one of your child agents; resume only ids from your "
                         f"NEW_CHILD_AGENT results, or start a new child")
        if stream.agent_type.upper() not in parent.child_types(any_depth=True):
            return error(f"child {child_id!r} has agent type {stream.agent_type!r}, which cannot be resumed")
        child = parent.make_child(stream.agent_type, stream)
        return ChildRun(child, args["agent_input"], ctx, "resume_child_agent", args["directive"])


class WaitForChildren(Action):
    """Lets the running child agents go on; an orchestrator's next turn comes when one returns."""

    type = "WAIT_FOR_CHILDREN"
    guide_template = "actions/wait_for_children.j2"
    unique_action = True
    params: dict[str, Param] = {}

    def run(self, ctx: ActionContext, args: dict) -> Event:
        """Reached only when no child runs (an orchestrator waits for running ones itself)."""
        return error("no child agent is running, so there is nothing to wait for: start one with CALL_CHILD_AGENT, "
                     "or end your turn", action_type=self.type)

    def waiting(self, running: list[ChildRun], queued: list[ChildRun]) -> Event:
        """The event of a wait for the next child to return (it keeps the reply's reasoning: the plan)."""
        names = [child.label for child in running] + [f"queued {child.label}" for child in queued]
        text = f"Waiting for the next child agent to return: {'; '.join(names)}."
        return Event("action", content=text, message="waits for its child agents",
                     data={"action_type": self.type,
                           "waiting_for": [child.agent.event_stream.uid for child in (*running, *queued)]})


def _open_plan(state: Any) -> str:
    """What a child's plan left open when it returned (its parent reads it with the report)."""
    plan = state.plan if state is not None else None
    if plan is None or not plan.open_steps:
        return ""
    steps = "; ".join(step.step for step in plan.open_steps)
    return f"\n(Its plan: {plan.progress()}; open: {steps}.)"


def _bounded(report: str, ctx: ActionContext) -> tuple[str, dict]:
    """A child's report as its parent reads it: bounded like a command's output (`shell_output_cap`), its head and
    tail, with the whole in a file beside the parent's stream; and the facts of that file (`report_path`)."""
    limit = max(ctx.config.shell_output_cap, 1000)
    if len(report) <= limit:
        return report, {}
    folder = stream_folder(ctx.outputs, ctx.agent_id) if ctx.outputs else None
    path = save(folder, "anges-report-", report, ".md") if folder else None
    where = f"in {path}" if path else "in the child's own history only"
    facts = {"report_path": path} if path else {}
    return f"{clip(report, limit)}\nFULL REPORT: {len(report)} characters, {where}.", facts


def _parent(ctx: ActionContext) -> Delegator:
    if ctx.delegator is None:
        raise RuntimeError("CALL_CHILD_AGENT needs an agent that can start child agents")
    return ctx.delegator


def error(message: str, action_type: str = CallChildAgent.type) -> Event:
    """The event of a delegation that could not be done, telling the model why."""
    return Event("action", content=f"{action_type} FAILED: {message}", message=f"could not delegate: {message}",
                 data={"action_type": action_type, "error": message})
