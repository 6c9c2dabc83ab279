"""Delegation: which agent types an agent may start, and what a child inherits from its parent."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from anges import registry

if TYPE_CHECKING:
    from anges.agents.run import RunState
    from anges.config.types import Config
    from anges.safety.run_safety import RunSafety
    from anges.store.event_store import Store
    from anges.store.events import EventStream
    from anges.tools.mcp import MCPManager
    from anges.tools.openapi import APIs


class Parent(Protocol):
    """What a child agent inherits from the agent that starts it."""

    uid: str
    parent_ids: list[str]
    inference_func: Callable[..., Any]
    cmd_init_dir: str
    prefix_cmd: str
    config: Config
    store: Store
    user_notes: list[str]
    message_handlers: list[Callable]
    delta_handlers: list[Callable]
    listeners: list
    run_state: RunState | None
    run_safety: RunSafety | None
    mcp: MCPManager | None
    apis: APIs | None
    approval: Callable | str | None
    remaining_depth: int

    def stop_requested(self) -> bool: ...


class Delegation:
    """The part of `BaseAgent` that starts child agents (CALL_CHILD_AGENT uses it through `ActionContext`)."""

    children_run_concurrently = False
    """Children run while the agent waits for the next to return (the orchestrator); otherwise one at a time, each
    until it returns."""
    readonly_shell = False
    """It delegates every change: its own commands run in the read-only sandbox, never asked about, never let out
    (a deny rule still holds)."""
    working_siblings: Callable[[], list[str]] | None = None
    """Set by a parent whose children run at once: its other children working in this agent's folder now."""

    def siblings(self) -> list[str]:
        """The parent's other children working in this agent's folder at this moment (`TASK_EXECUTOR id (task)`)."""
        return self.working_siblings() if self.working_siblings is not None else []

    def make_child(self: Parent, agent_type: str, event_stream: EventStream) -> Any:
        """A child agent that inherits this agent's model, config, store, directory, notes, handlers (delta handlers
        and listeners too), limits, tools (MCP servers, web APIs) and safety (one sandbox, policy and approval channel
        for the whole tree)."""
        return registry.agent_types.get(agent_type)(
            parent_ids=self.parent_ids + [self.uid], inference_func=self.inference_func, event_stream=event_stream,
            cmd_init_dir=self.cmd_init_dir, prefix_cmd=self.prefix_cmd, interrupt_check=self.stop_requested,
            config=self.config, store=self.store, notes=self.user_notes, message_handlers=self.message_handlers,
            delta_handlers=self.delta_handlers, budget=self.run_state.budget if self.run_state else None,
            mcp=self.mcp, apis=self.apis, approval=self.approval, parent_safety=self.run_safety,
            remaining_depth=self.remaining_depth - 1, listeners=self.listeners)

    def running_children(self) -> list[dict]:
        """The children started and not returned yet (an orchestrator's): name, task, state (running or queued) and
        the progress of their plan ("" without one)."""
        return []

    def child_types(self: Parent, any_depth: bool = False) -> list[str]:
        """The agent types (upper case) this agent may start; those that delegate too only while depth is left."""
        return [name.upper() for name, cls in registry.agent_types.classes() if cls.can_be_child and (
            any_depth or self.remaining_depth > 0 or "CALL_CHILD_AGENT" not in cls.action_types)]
