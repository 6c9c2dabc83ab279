"""Delegation: which agent types an agent may start, and what a child inherits from its parent."""

from __future__ import annotations

from typing import TYPE_CHECKING

from anges import registry

if TYPE_CHECKING:
    from anges.agents.base import BaseAgent
    from anges.events import EventStream


class Delegation:
    """The part of `BaseAgent` that starts child agents (CALL_CHILD_AGENT uses it through `ActionContext`)."""

    children_run_concurrently = False
    """Children run while the agent waits for the next to return (the orchestrator); otherwise one at a time, each
    until it returns."""

    def make_child(self: BaseAgent, agent_type: str, event_stream: EventStream) -> BaseAgent:
        """A child agent that inherits this agent's model, config, store, directory, notes, handlers (delta handlers
        too), limits and safety (one sandbox, policy and approval channel for the whole tree)."""
        child = registry.agent_types.get(agent_type)(
            parent_ids=self.parent_ids + [self.uid], inference_func=self.inference_func, event_stream=event_stream,
            cmd_init_dir=self.cmd_init_dir, prefix_cmd=self.prefix_cmd, interrupt_check=self._stop_requested,
            config=self.config, store=self.store, notes=self.user_notes, message_handlers=self.message_handlers,
            budget=self._state.budget if self._state else None, mcp=self.mcp, approval=self.approval,
            remaining_depth=self.remaining_depth - 1)
        child._share.parent = self.run_safety
        child.delta_handlers.extend(self.delta_handlers)
        return child

    def child_types(self: BaseAgent, any_depth: bool = False) -> list[str]:
        """The agent types (upper case) this agent may start; those that delegate too only while depth is left."""
        return [name.upper() for name, cls in registry.agent_types.classes() if cls.can_be_child and (
            any_depth or self.remaining_depth > 0 or "CALL_CHILD_AGENT" not in cls.action_types)]
