"""The orchestrator: plans with analyzers, delegates to executors and nested orchestrators, re-plans."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from anges.actions.child import CallChildAgent, ChildRun
from anges.agents.base import BaseAgent
from anges.parsing import ParsedReply


class Orchestrator(BaseAgent):
    """Delegates rather than acts; children of one reply run concurrently."""

    agent_type = "orchestrator"
    template = "agents/orchestrator.j2"
    action_types = ("CALL_CHILD_AGENT", "TASK_COMPLETE", "HELP_NEEDED", "AGENT_TEXT_RESPONSE")
    can_be_child = True
    mcp_tools = False  # it delegates; its children get the tools

    def _execute(self, reply: ParsedReply) -> bool:
        calls = [a for a in reply.actions if a["action_type"] == CallChildAgent.type]
        if len(calls) < 2 or len(calls) != len(reply.actions):
            return super()._execute(reply)
        for args in calls:
            self._check_limits()
            self._state.count_repeats(args)
        action = self._actions_by_type()[CallChildAgent.type]
        ctx = replace(self._state.context, reply=reply)
        permitted = [(args, permit) for args in calls if (permit := self.run_safety.permit(ctx, action.type, args))]
        prepared = [(action.prepare(ctx, args), permit) for args, permit in permitted]
        runs = [item for item, _ in prepared if isinstance(item, ChildRun)]
        workers = max(1, min(self.agent_config.max_concurrent_children, len(runs)))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="anges-child") as pool:
            finished = iter(list(pool.map(action.execute, runs)))
        for item, permit in prepared:
            event = action.finish(next(finished)) if isinstance(item, ChildRun) else item
            self._record_outcome(event, reply, permit)
        return False
