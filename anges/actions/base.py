"""The `Action` interface: what an action is called, how it is explained to the model, and what it does."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from anges.store.events import RETURN_TO_PARENT_EVENT_TYPES

if TYPE_CHECKING:
    from anges.config.types import AgentConfig, Config
    from anges.models.base import Usage
    from anges.prompt.parsing import Param, ParsedReply
    from anges.safety.command_runner import CommandRunner
    from anges.safety.sandbox import SandboxSettings
    from anges.store.event_store import Store
    from anges.store.events import Event, EventStream


class Delegator(Protocol):
    """What CALL_CHILD_AGENT needs of the agent that delegates."""

    @property
    def uid(self) -> str: ...
    @property
    def parent_ids(self) -> list[str]: ...
    @property
    def store(self) -> Store: ...

    def child_types(self, any_depth: bool = False) -> list[str]:
        """The agent types (upper case) this agent may start now (or at any depth)."""

    def make_child(self, agent_type: str, event_stream: EventStream) -> Any:
        """A child agent of that type on that stream, sharing this agent's model, limits and safety."""


class OutputSink(Protocol):
    """Where a command in the foreground sends its output as it runs."""

    def __call__(self, chunk: bytes) -> None:
        """A piece of output (no bytes: nothing new, a chance to send what waits)."""

    def flush(self) -> None:
        """The command ended: send what waits."""


def _no_charge(usage: Usage | None, model_name: str) -> float | None:
    return None


@dataclass
class ActionContext:
    """What an action may use while it runs (and what the approval gate knows of who is asking)."""

    config: AgentConfig
    """The agent type's settings: timeouts, output caps."""
    app_config: Config
    """The whole configuration (the mime reader's model, the safety section, ...)."""
    cwd: str
    prefix_cmd: str
    interrupt_check: Callable[[], bool]
    """True once the run must stop: a long action checks it and returns early."""
    reply: ParsedReply
    record: Callable[..., None]
    """Record an extra event before the action's own (e.g. a child agent starting): `record(event)`."""
    agent_id: str = ""
    agent_type: str = ""
    secrets: list[str] = field(default_factory=list)
    env: dict[str, str] | None = None
    """The environment commands run with (model credentials removed unless passed through)."""
    charge: Callable[[Usage | None, str], float | None] = _no_charge
    """Count a model call the action makes itself (e.g. reading images) against the request; returns its cost."""
    render_guide: Callable[[Action], str] | None = None
    """Render an action's guide again, e.g. after its tools changed."""
    delegator: Delegator | None = None
    """The agent, as far as starting and resuming child agents goes (CALL_CHILD_AGENT)."""
    runner: CommandRunner | None = None
    """The run's command runner this action's commands go through (None: this process starts them)."""
    sandbox: SandboxSettings | None = None
    """What the runner's sandbox allows; None when the command runs without one."""
    escalated: bool = False
    """The command was approved to run outside the sandbox."""
    checked_paths: tuple[str, ...] | None = None
    """The resolved paths the policy judged for this action: it reads and writes these, or refuses (None: not
    checked, e.g. an action run directly)."""
    can_escalate: bool = True
    """A command may ask to run outside the sandbox (someone can approve it in this session)."""
    output_dir: str | None = None
    """Where a command's full output and log go when not in `runner`'s scratch directory (an escalated command's go
    to the sandbox's, which sandboxed commands can read)."""
    outputs: str | None = None
    """The agent tree's folder of the files its history points to (`anges.store.outputs`): a command's whole output,
    a long command, a child's whole report. None: they go to `output_dir` and last until the request ends."""
    output_sink: Callable[[str], OutputSink | None] | None = None
    """`output_sink(command)`: where a command in the foreground sends its output as it runs (the delta handlers');
    None, or a None sink, when no one watches."""


class Action:
    """One kind of action a model may ask for.

    Actions implement `run(ctx, args) -> Event` and leave the bookkeeping (recording, notifying, persisting,
    summarizing) to the agent. Actions written for anges 0.1.x implement
    `handle_action_in_parsed_response(run_config, parsed_response_dict, action_json)` instead, append
    their own `Event` to `run_config["event_stream"]`, and return the stream when they end the run; the
    agent runs them through `LegacyAction`.
    """

    type = ""
    guide_prompt = ""
    user_visible = False
    unique_action = False
    returning_action = False
    may_end_reply = False
    """A unique action that may also come last in a reply of other actions (TASK_COMPLETE)."""
    params: dict[str, Param] = {}
    guide_template = ""
    """A template under prompt_templates/actions/ rendered into `guide_prompt` by the agent."""

    def __init__(self) -> None:
        self.guide_prompt = type(self).guide_prompt

    def run(self, ctx: ActionContext, args: dict) -> Event | None:
        """Carry out the action and return the event to record."""
        raise NotImplementedError

    def may_change_files(self, args: dict) -> bool:
        """Whether running it with `args` can change files (then a checkpoint is taken first); yes unless known."""
        return True

    def handle_action_in_parsed_response(self, run_config: dict, parsed_response_dict: dict,
                                         action_json: dict) -> EventStream | None:
        """The anges 0.1.x interface: record the event yourself; return the stream if the run ends."""
        name = type(self).__name__
        raise NotImplementedError(f"{name} implements neither run() nor handle_action_in_parsed_response()")


def is_builtin_style(action: Action) -> bool:
    """True when the action implements `run` (the agent records its event)."""
    return type(action).run is not Action.run


class Host(Protocol):
    """What an anges 0.1.x action reaches of its agent (through `run_config`)."""

    @property
    def event_stream(self) -> EventStream | None: ...
    @property
    def inference_func(self) -> Callable[..., Any]: ...
    @property
    def logger(self) -> logging.Logger: ...
    @property
    def store(self) -> Store: ...

    def handle_user_visible_messages(self, message: str) -> None: ...


class LegacyAction(Action):
    """An anges 0.1.x action behind `run`: the events it appends are taken back and recorded like any other.

    They are recorded without notifying the message handlers, since such an action calls them itself.
    """

    def __init__(self, action: Action, agent: Host):
        self.action = action
        self.agent = agent
        self.type = action.type
        self.guide_prompt = action.guide_prompt
        self.user_visible = action.user_visible
        self.unique_action = action.unique_action
        self.returning_action = action.returning_action
        self.params = getattr(action, "params", {})

    def run(self, ctx: ActionContext, args: dict) -> None:
        stream = self.agent.event_stream
        if stream is None:
            raise RuntimeError("an anges 0.1.x action runs only while its agent runs on a stream")
        before = len(stream.events_list)
        parsed = {"analysis": ctx.reply.analysis, "reasoning": ctx.reply.reasoning, "actions": ctx.reply.actions}
        result = None
        try:
            result = self.action.handle_action_in_parsed_response(self._run_config(ctx), parsed, args)
        finally:
            added = stream.events_list[before:]
            del stream.events_list[before:]
            for event in added:
                ctx.record(event, notify=False)
        self.returning_action = result is not None or any(e.type in RETURN_TO_PARENT_EVENT_TYPES for e in added)

    def _run_config(self, ctx: ActionContext) -> dict:
        agent = self.agent
        return {
            "event_stream": agent.event_stream,
            "inference_func": agent.inference_func,
            "cmd_init_dir": ctx.cwd,
            "prefix_cmd": ctx.prefix_cmd,
            "agent_config": ctx.config,
            "max_consecutive_actions_to_summarize": ctx.config.max_consecutive_actions_to_summarize,
            "agent_message_base": f"Agent {ctx.agent_id}",
            "message_handler_func": agent.handle_user_visible_messages,
            "logger": agent.logger,
            "interrupt_check": ctx.interrupt_check,
            "store": agent.store,
            "agent": agent,
        }
