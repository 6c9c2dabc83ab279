"""Actions an agent can take; built-ins and the `Action` base class for your own."""

from anges.actions.base import Action, ActionContext, is_builtin_style
from anges.actions.edit import EditFile
from anges.actions.mime import ReadMimeFiles
from anges.actions.replies import AgentTextResponse, HelpNeeded, TaskComplete
from anges.actions.shell import RunShellCommand

# anges 0.1.x names
RunShellCMDAction = RunShellCommand
EditFileAction = EditFile
TaskCompleteAction = TaskComplete
AgentHelpNeededAction = HelpNeeded
AgentTextResponseAction = AgentTextResponse

__all__ = [
    "Action", "ActionContext", "is_builtin_style", "RunShellCommand", "EditFile", "TaskComplete", "HelpNeeded",
    "AgentTextResponse", "ReadMimeFiles", "RunShellCMDAction", "EditFileAction", "TaskCompleteAction",
    "AgentHelpNeededAction", "AgentTextResponseAction",
]
