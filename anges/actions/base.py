"""The `Action` interface: what an action is called, how it is explained to the model, and what it does."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from anges.config import AgentConfig
    from anges.events import Event
    from anges.parsing import Param, ParsedReply
    from anges.sandbox import CommandRunner, SandboxSettings


@dataclass
class ActionContext:
    """What an action may use while it runs."""

    agent: Any
    config: AgentConfig
    cwd: str
    prefix_cmd: str
    interrupt_check: Callable[[], bool]
    reply: ParsedReply
    record: Callable[[Event], None]
    """Record an extra event before the action's own (e.g. a child agent starting)."""
    secrets: list[str] = field(default_factory=list)
    env: dict[str, str] | None = None
    """The environment commands run with (model credentials removed unless passed through)."""
    runner: CommandRunner | None = None
    """The run's command runner this action's commands go through (None: this process starts them)."""
    sandbox: SandboxSettings | None = None
    """What the runner's sandbox allows; None when the command runs without one."""
    escalated: bool = False
    """The command was approved to run outside the sandbox."""
    checked_paths: tuple[str, ...] | None = None
    """The resolved paths the policy judged for this action: it reads and writes these, or refuses (None: not
    checked, e.g. an action run directly)."""


class Action:
    """One kind of action a model may ask for.

    Built-in actions implement `run(ctx, args) -> Event` and leave the bookkeeping (recording, notifying,
    persisting, summarizing) to the agent. Actions written for anges 0.1.x implement
    `handle_action_in_parsed_response(run_config, parsed_response_dict, action_json)` instead, append
    their own `Event` to `run_config["event_stream"]`, and return the stream when they end the run.
    """

    type = ""
    guide_prompt = ""
    user_visible = False
    unique_action = False
    returning_action = False
    params: dict[str, Param] = {}
    guide_template = ""
    """A template under prompt_templates/actions/ rendered into `guide_prompt` by the agent."""

    def __init__(self):
        self.guide_prompt = type(self).guide_prompt

    def run(self, ctx: ActionContext, args: dict) -> Event:
        """Carry out the action and return the event to record."""
        raise NotImplementedError

    def handle_action_in_parsed_response(self, run_config: dict, parsed_response_dict: dict, action_json: dict):
        """The anges 0.1.x interface: record the event yourself; return the stream if the run ends."""
        name = type(self).__name__
        raise NotImplementedError(f"{name} implements neither run() nor handle_action_in_parsed_response()")


def is_builtin_style(action: Action) -> bool:
    """True when the action implements `run` (the agent records its event)."""
    return type(action).run is not Action.run
