"""The orchestrator: plans with analyzers, delegates to executors and nested orchestrators, re-plans."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from anges.actions import AgentTextResponse, HelpNeeded, TaskComplete
from anges.actions.child import CallChildAgent, ChildRun
from anges.agents import AGENT_CLASSES
from anges.agents.base import BaseAgent
from anges.events import Event
from anges.parsing import ParsedReply


class Orchestrator(BaseAgent):
    """Delegates rather than acts; children of one reply run concurrently."""

    agent_type = "orchestrator"
    template = "agents/orchestrator.j2"
    action_classes = (CallChildAgent, TaskComplete, HelpNeeded, AgentTextResponse)
    mcp_tools = False  # it delegates; its children get the tools

    def __init__(self, *args, remaining_depth: int | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.remaining_depth = self.agent_config.max_depth if remaining_depth is None else remaining_depth

    def child_types(self) -> list[str]:
        """The child agent types this orchestrator may start."""
        types = ["TASK_ANALYZER", "TASK_EXECUTOR"]
        return types + ["ORCHESTRATOR"] if self.remaining_depth > 0 else types

    def _act(self, reply: ParsedReply) -> bool:
        calls = [a for a in reply.actions if a["action_type"] == CallChildAgent.type]
        if len(calls) < 2 or len(calls) != len(reply.actions):
            return super()._act(reply)
        for args in calls:
            self._check_limits()
            self._count_repeats(args)
        action = self._actions_by_type()[CallChildAgent.type]
        ctx = self._action_context(reply)
        permitted = [args for args in calls if self._permit(action, args, reply) is not None]
        prepared = [action.prepare(ctx, args) for args in permitted]
        runs = [p for p in prepared if isinstance(p, ChildRun)]
        workers = max(1, min(self.agent_config.max_concurrent_children, len(runs)))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="anges-child") as pool:
            finished = iter(list(pool.map(action.execute, runs)))
        for item in prepared:
            event = action.finish(next(finished)) if isinstance(item, ChildRun) else item
            self._record_reply_event(event, reply)
        return False

    def _record_reply_event(self, event: Event, reply: ParsedReply) -> None:
        event.reasoning = event.reasoning or reply.reasoning
        self._record(event)


AGENT_CLASSES["orchestrator"] = Orchestrator
