"""The returning actions: TASK_COMPLETE, HELP_NEEDED, AGENT_TEXT_RESPONSE."""

from __future__ import annotations

from anges.actions.base import Action, ActionContext
from anges.prompt.parsing import Param
from anges.store.events import Event


class _ReturningAction(Action):
    user_visible = True
    unique_action = True
    returning_action = True
    params = {"content": Param(str, non_empty=True)}
    event_type = ""

    def may_change_files(self, args: dict) -> bool:
        return False

    def run(self, ctx: ActionContext, args: dict) -> Event:
        content = args["content"]
        return Event(type=self.event_type, content=content, message=content, data={"action_type": self.type})


class TaskComplete(_ReturningAction):
    """The task is done; `content` reports what was done and how it was checked."""

    type = "TASK_COMPLETE"
    event_type = "task_completion"
    guide_template = "actions/task_complete.j2"
    may_end_reply = True
    params = {**_ReturningAction.params, "only_if_succeeded": Param(bool, required=False)}


class HelpNeeded(_ReturningAction):
    """The agent is blocked and asks the user."""

    type = "HELP_NEEDED"
    event_type = "agent_requested_help"
    guide_template = "actions/help_needed.j2"


class AgentTextResponse(_ReturningAction):
    """An answer in text."""

    type = "AGENT_TEXT_RESPONSE"
    event_type = "agent_text_response"
    guide_template = "actions/agent_text_response.j2"
