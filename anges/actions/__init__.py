"""Actions an agent can take; built-ins and the `Action` base class for your own."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from anges.actions.api import apis_for
from anges.actions.base import Action, ActionContext, LegacyAction, is_builtin_style
from anges.actions.edit import EditFile
from anges.actions.mime import ReadMimeFiles
from anges.actions.plan import UpdatePlan
from anges.actions.replies import AgentTextResponse, HelpNeeded, TaskComplete
from anges.actions.shell import RunShellCommand
from anges.prompt.parsing import Param

if TYPE_CHECKING:
    from anges.tools.mcp import MCPManager
    from anges.tools.openapi import APIs

# anges 0.1.x names
RunShellCMDAction = RunShellCommand
EditFileAction = EditFile
TaskCompleteAction = TaskComplete
AgentHelpNeededAction = HelpNeeded
AgentTextResponseAction = AgentTextResponse


def offered_actions(names: Iterable[str], mcp: MCPManager | None = None, given: Iterable[Action] = (),
                    apis: APIs | None = None, tools: bool = True) -> list[Action]:
    """The `given` actions, one of each action named (a registered name or module:Class; the first of a type
    wins), and with `tools`: USE_MCP_TOOL when `mcp` has a server with tools (or one that awaits the user's trust:
    the servers then start once the run has asked), CALL_API and DESCRIBE_API_OPERATION with `apis`."""
    from anges.registry import actions

    offered: dict[str, Action] = {action.type.upper(): action for action in given}
    for name in names:
        action = actions.get(name)()
        offered.setdefault(action.type.upper(), action)
    if tools and mcp is not None and (mcp.awaiting_trust() or any(mcp.tools().values())):
        from anges.actions.mcp import UseMCPTool

        offered.setdefault(UseMCPTool.type, UseMCPTool(mcp))
    if tools and apis is not None:
        from anges.actions.api import CallAPI, DescribeAPIOperation

        offered.setdefault(CallAPI.type, CallAPI(apis))
        offered.setdefault(DescribeAPIOperation.type, DescribeAPIOperation(apis))
    return list(offered.values())


__all__ = [
    "Action", "ActionContext", "Param", "LegacyAction", "apis_for", "is_builtin_style", "offered_actions",
    "RunShellCommand",
    "EditFile", "TaskComplete", "HelpNeeded", "AgentTextResponse", "ReadMimeFiles", "UpdatePlan", "RunShellCMDAction",
    "EditFileAction", "TaskCompleteAction", "AgentHelpNeededAction", "AgentTextResponseAction",
]
