"""Agent types: `BaseAgent` and the built-in types; `agent_class` finds any registered type by name."""

from __future__ import annotations

from typing import Any

from anges.agents.base import AgentMessage, BaseAgent


class DefaultAgent(BaseAgent):
    """The general agent: shell, file edits, and all three ways to answer."""

    agent_type = "default"
    template = "agents/default.j2"


class TaskExecutor(BaseAgent):
    """Carries out one well-defined task; reports completion or asks for help, never just chats."""

    agent_type = "task_executor"
    template = "agents/task_executor.j2"
    action_types = ("RUN_SHELL_CMD", "EDIT_FILE", "READ_MIME_FILES", "UPDATE_PLAN", "TASK_COMPLETE", "HELP_NEEDED")
    can_be_child = True


class TaskAnalyzer(BaseAgent):
    """Reads the environment and writes an Execution Plan or a Sub Task Plan; edits nothing."""

    agent_type = "task_analyzer"
    template = "agents/task_analyzer.j2"
    action_types = ("RUN_SHELL_CMD", "READ_MIME_FILES", "UPDATE_PLAN", "TASK_COMPLETE", "HELP_NEEDED",
                    "AGENT_TEXT_RESPONSE")
    can_be_child = True


def agent_class(agent_type: str) -> type[BaseAgent]:
    """The class of a registered agent type (or a module:Class path); an unknown name lists the valid ones."""
    from anges.registry import agent_types

    return agent_types.get(agent_type)


def __getattr__(name: str) -> Any:
    if name == "Orchestrator":
        return agent_class("orchestrator")
    if name == "AGENT_CLASSES":  # anges 0.2's table, now a snapshot of the registry
        from anges.registry import agent_types

        return dict(agent_types.classes())
    raise AttributeError(f"module 'anges.agents' has no attribute {name!r}")


__all__ = ["AgentMessage", "BaseAgent", "DefaultAgent", "TaskExecutor", "TaskAnalyzer", "Orchestrator", "agent_class"]
