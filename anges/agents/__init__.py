"""Agent types and the one registry that builds them."""

from __future__ import annotations

from anges.actions import AgentTextResponse, EditFile, HelpNeeded, ReadMimeFiles, RunShellCommand, TaskComplete
from anges.agents.base import AgentMessage, BaseAgent


class DefaultAgent(BaseAgent):
    """The general agent: shell, file edits, and all three ways to answer."""

    agent_type = "default"
    template = "agents/default.j2"


class TaskExecutor(BaseAgent):
    """Carries out one well-defined task; reports completion or asks for help, never just chats."""

    agent_type = "task_executor"
    template = "agents/task_executor.j2"
    action_classes = (RunShellCommand, EditFile, ReadMimeFiles, TaskComplete, HelpNeeded)


class TaskAnalyzer(BaseAgent):
    """Reads the environment and writes an Execution Plan or a Sub Task Plan; edits nothing."""

    agent_type = "task_analyzer"
    template = "agents/task_analyzer.j2"
    action_classes = (RunShellCommand, ReadMimeFiles, TaskComplete, HelpNeeded, AgentTextResponse)


AGENT_CLASSES: dict[str, type[BaseAgent]] = {
    "default": DefaultAgent,
    "task_executor": TaskExecutor,
    "task_analyzer": TaskAnalyzer,
}


def agent_class(agent_type: str) -> type[BaseAgent]:
    """The class of a registered agent type; an unknown name lists the valid ones."""
    key = agent_type.lower()
    if key == "orchestrator" and key not in AGENT_CLASSES:
        from anges.agents.orchestrator import Orchestrator  # noqa: F401  (registers itself)
    try:
        return AGENT_CLASSES[key]
    except KeyError:
        raise ValueError(f"unknown agent type {agent_type!r}; valid: {', '.join(sorted(AGENT_CLASSES))}") from None


def __getattr__(name: str):
    if name == "Orchestrator":
        return agent_class("orchestrator")
    raise AttributeError(name)


__all__ = ["AgentMessage", "BaseAgent", "DefaultAgent", "TaskExecutor", "TaskAnalyzer", "Orchestrator",
           "AGENT_CLASSES", "agent_class"]
