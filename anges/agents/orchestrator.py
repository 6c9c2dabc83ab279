"""The orchestrator: plans with analyzers, delegates to executors and nested orchestrators, re-plans.

Its children run while it waits: at most `max_concurrent_children` at a time (more wait their turn), and the
orchestrator gets a turn each time one returns, so it can react to a failure while the others go on. A reply that
neither starts, resumes nor waits for a child (its own commands, a plan) comes back at once.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from anges.actions.child import CallChildAgent, ChildRun, WaitForChildren, error
from anges.agents.base import BaseAgent
from anges.agents.run import of_run
from anges.safety.run_safety import read_only_bwrap
from anges.util.waiting import wait_for

if TYPE_CHECKING:
    from anges.actions.base import Action, ActionContext
    from anges.prompt.parsing import ParsedReply
    from anges.safety.approval import Permit

STOPPED_BY_PARENT = "the parent agent ended its turn"


class Children:
    """The children an orchestrator started and that have not returned yet: running (at most `limit`) or waiting."""

    def __init__(self, limit: int, action: CallChildAgent):
        self.limit = max(limit, 1)
        self.action = action
        self.waiting: deque[ChildRun] = deque()
        self.running: dict[concurrent.futures.Future, ChildRun] = {}
        self.working: tuple[ChildRun, ...] = ()
        """The children whose run goes on, as their own threads read them (replaced whole, never changed)."""
        self._working_lock = threading.Lock()
        self.stops: dict[str, threading.Event] = {}
        self.failures: dict[str, str] = {}
        """Why a child's run raised (its own stream says, unless it failed before recording anything)."""
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    def __bool__(self) -> bool:
        return bool(self.waiting or self.running)

    def ids(self) -> set[str]:
        """The stream ids of the children not returned yet."""
        return {child.agent.uid for child in (*self.waiting, *self.running.values())}

    def add(self, child: ChildRun) -> None:
        """Record the child's request; start it now if fewer than `limit` run, else (said so) when one returns."""
        stop, inherited = threading.Event(), child.agent.interrupt_check
        child.agent.interrupt_check = lambda: stop.is_set() or inherited()  # holds even before its run begins
        self.stops[child.agent.uid] = stop
        child.agent.working_siblings = lambda: [other.label for other in self.working if other is not child
                                                and other.agent.cmd_init_dir == child.agent.cmd_init_dir]
        self.action.requested(child, queued=len(self.running) >= self.limit)
        self.waiting.append(child)
        self.start_waiting()
        if child in self.waiting:
            self.action.queued(child, len(self.running))

    def start_waiting(self) -> None:
        """Start waiting children while there is room (each said to run on the parent's stream first)."""
        while self.waiting and len(self.running) < self.limit:
            child = self.waiting.popleft()
            self.action.started(child)
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(self.limit, thread_name_prefix="anges-child")
            self._work(child, True)
            self.running[self._pool.submit(self._execute, child)] = child

    def _execute(self, child: ChildRun) -> ChildRun:
        try:
            return self.action.execute(child)
        finally:
            self._work(child, False)

    def _work(self, child: ChildRun, working: bool) -> None:
        with self._working_lock:
            others = tuple(other for other in self.working if other is not child)
            self.working = (*others, child) if working else others

    def returned(self, stop: Callable[[], bool]) -> list[ChildRun]:
        """Wait until a running child returns (or `stop()`); the children that have returned, in starting order."""
        def some_done(seconds: float) -> bool:
            return bool(concurrent.futures.wait(self.running, seconds, concurrent.futures.FIRST_COMPLETED).done)

        if self.running:
            wait_for(some_done, stop)
        return self._collect([future for future in self.running if future.done()])

    def stop(self, why: str) -> tuple[list[ChildRun], list[ChildRun]]:
        """Interrupt every running child and wait for it to return; (those that ran, those that never started)."""
        never_started, self.waiting = list(self.waiting), deque()
        for child in self.running.values():
            self.stops[child.agent.uid].set()
            child.agent.interrupt(why)
        concurrent.futures.wait(self.running)
        return self._collect(list(self.running)), never_started

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None

    def _collect(self, futures: list) -> list[ChildRun]:
        done = []
        for future in futures:
            child = self.running.pop(future)
            self.stops.pop(child.agent.uid, None)
            failure = future.exception()
            if failure is not None:
                self.failures[child.agent.uid] = f"{type(failure).__name__}: {failure}"
            done.append(child)
        return done


class Orchestrator(BaseAgent):
    """Delegates rather than acts; its children run while it waits, and it gets a turn as each returns."""

    agent_type = "orchestrator"
    template = "agents/orchestrator.j2"
    action_types = ("CALL_CHILD_AGENT", "WAIT_FOR_CHILDREN", "RUN_SHELL_CMD", "UPDATE_PLAN", "TASK_COMPLETE",
                    "HELP_NEEDED", "AGENT_TEXT_RESPONSE")
    can_be_child = True
    mcp_tools = False  # it delegates; its children get the tools
    children_run_concurrently = True
    readonly_shell = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not read_only_bwrap(self.config.safety, self.cmd_init_dir):  # its shell is the read-only sandbox's, or none
            self.registered_actions = [a for a in self.registered_actions if a.type != "RUN_SHELL_CMD"]
        action = self.actions_by_type().get(CallChildAgent.type) or CallChildAgent()
        self._children = Children(self.agent_config.max_concurrent_children, action)
        self._finish = action.finish

    def _step(self) -> bool:
        try:
            return super()._step()
        except BaseException:  # the run stops (a limit, an interrupt, a bug): its children stop first
            self._stop_children("the parent agent stopped")
            raise

    def _execute(self, reply: ParsedReply) -> bool:
        """The reply's actions (starting a child does not wait for it); then, when the reply started, resumed or
        waited for a child and none of its actions went wrong, wait until a child returns. Otherwise (its own
        commands, say) the results come back at once."""
        stream = of_run(self.event_stream)
        before = len(stream.events_list)
        if super()._execute(reply):
            return True
        delegated = any(a["action_type"] in (CallChildAgent.type, WaitForChildren.type) for a in reply.actions)
        if self._children and delegated and not any(e.data.get("error") or e.data.get("decision") == "deny"
                                                    for e in stream.events_list[before:]):
            self._record_returns(self._children.returned(self.stop_requested))
        return False

    def running_children(self) -> list[dict]:
        team = self._children
        return [_progress(child, "running") for child in list(team.running.values())] + \
            [_progress(child, "queued") for child in list(team.waiting)]

    def _run_action(self, action: Action, args: dict, ctx: ActionContext, permit: Permit | None = None) -> bool:
        if action.returning_action:  # the turn ends (its completion was accepted): the children stop first
            self._stop_children(STOPPED_BY_PARENT)
        if isinstance(action, WaitForChildren) and self._children:  # the wait comes once the whole reply has run
            team = self._children
            self._record_outcome(action.waiting(list(team.running.values()), list(team.waiting)), ctx.reply, permit)
            return False
        if not isinstance(action, CallChildAgent):
            return super()._run_action(action, args, ctx, permit)
        self._checkpointing.before(action, args, ctx, len(of_run(self.event_stream).events_list) + 1)
        try:
            prepared = action.prepare(ctx, args)
        except Exception as exc:  # as with any action: a failure is a result the model reads
            prepared = error(f"{type(exc).__name__}: {exc}")
        if isinstance(prepared, ChildRun) and prepared.agent.uid in self._children.ids():
            prepared = error(f"child {prepared.agent.uid} has not returned yet: resume it after its report, or "
                             "start another child")
        if isinstance(prepared, ChildRun):
            prepared.approval = permit.facts() if permit is not None else {}
            self._children.add(prepared)
        else:
            self._record_outcome(prepared, ctx.reply, permit)
        return False

    def _record_returns(self, children: list[ChildRun], stopped: bool = False) -> None:
        """Record each returned child's report (with what the other children are doing), then start waiting ones."""
        team = self._children
        others = "" if stopped else _others(list(team.running.values()), list(team.waiting))
        for child in children:
            failure = team.failures.pop(child.agent.uid, None)
            if failure is not None and len(child.agent.event_stream.events_list) <= child.start:
                self._record(error(f"child agent {child.name} could not run: {failure}"))
            else:
                self._record(self._finish(child, others))
        if self.run_state is not None:
            self.run_state.repeats = 0  # waiting again after a child returned is not the same step repeated
        team.start_waiting()
        if not team:
            team.close()

    def _stop_children(self, why: str) -> None:
        if not self._children:
            return
        ran, never_started = self._children.stop(why)
        self._record_returns(ran, stopped=True)
        for child in never_started:
            self._record(error(f"the child agent asked for with {child.directive!r} was not started: {why} first"))


def _progress(child: ChildRun, state: str) -> dict:
    run = child.agent.run_state
    plan = run.plan if run is not None and state == "running" else None
    return {"name": child.name, "task": child.task, "state": state,
            "plan": plan.progress() if plan is not None and plan.total else ""}


def _others(running: list[ChildRun], waiting: list[ChildRun]) -> str:
    if not running and not waiting:
        return "No other child agent is running."
    parts = [f"Still running: {'; '.join(c.label for c in running)}." if running else "",
             f"Waiting to start: {'; '.join(c.label for c in waiting)}." if waiting else ""]
    return " ".join(part for part in parts if part)
