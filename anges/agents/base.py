"""`BaseAgent`: run → step → query the model → execute its actions → record, until a returning action."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

from anges.actions import Action, ActionContext, LegacyAction, apis_for, is_builtin_style, offered_actions
from anges.agents.budget import Budget, Ledger
from anges.agents.calls import ModelCalls
from anges.agents.checkpointing import StepCheckpoints
from anges.agents.completion import CompletionCheck
from anges.agents.delegation import Delegation
from anges.agents.history import History
from anges.agents.listening import Listener, listeners_for
from anges.agents.prompting import Prompter
from anges.agents.record import AgentMessage, cap_event, failed_action, mask_event, masked_title, with_outcome
from anges.agents.run import RunState, abandoned_run, explained, of_run, saved_notes, stop_event
from anges.config.loading import default_config
from anges.exceptions import RunStopped
from anges.hooks.dispatch import Hooks
from anges.models import get_model
from anges.prompt.parsing import ParsedReply
from anges.safety.run_safety import SafetyShare, run_secrets
from anges.store.event_store import EventStore, status_of
from anges.store.events import Event, EventStream, new_id

if TYPE_CHECKING:
    from anges.checkpoints import Checkpoints
    from anges.config.types import AgentConfig, Config
    from anges.safety.approval import Permit
    from anges.safety.run_safety import RunSafety
    from anges.tools.mcp import MCPManager
    from anges.tools.openapi import APIs

__all__ = ["AgentMessage", "BaseAgent"]


class BaseAgent(Delegation):
    """An agent that works on requests until a returning action (or a stop condition) ends each run."""

    agent_type = "default"
    template = "agents/default.j2"
    action_types: tuple[str, ...] = ("RUN_SHELL_CMD", "EDIT_FILE", "READ_MIME_FILES", "UPDATE_PLAN", "TASK_COMPLETE",
                                     "HELP_NEEDED", "AGENT_TEXT_RESPONSE")
    """The actions this type offers, by registered name (`extra_actions` in its config adds more)."""
    can_be_child = False
    """An orchestrator may start agents of this type (NEW_CHILD_AGENT <TYPE>)."""
    mcp_tools = True
    """Offer the tools of MCP servers and web APIs (USE_MCP_TOOL, CALL_API) when they are attached."""

    def __init__(self, parent_ids: Iterable[str] | None = None, inference_func: Callable | None = None,
                 event_stream: EventStream | None = None, cmd_init_dir: str | os.PathLike | None = None,
                 prefix_cmd: str = "", interrupt_check: Callable[[], bool] | None = None,
                 max_consecutive_actions_to_summarize: int | None = None, logging_level: int | None = None,
                 auto_entitle: bool = False, *, config: Config | None = None, store: EventStore | None = None,
                 notes: Iterable[str] = (), message_handlers: Iterable[Callable] = (), budget: Budget | None = None,
                 agent_config: AgentConfig | None = None, actions: Iterable[Action] | None = None,
                 mcp: MCPManager | None = None, apis: APIs | None = None, approval: Callable | str | None = None,
                 remaining_depth: int | None = None, delta_handlers: Iterable[Callable] = (),
                 parent_safety: RunSafety | None = None, listeners: Iterable[Listener] | None = None) -> None:
        self.config = config or default_config()
        self.agent_config = agent_config or self.config.agent(self.agent_type)
        if max_consecutive_actions_to_summarize is not None:
            self.agent_config = self.agent_config.model_copy(
                update={"max_consecutive_actions_to_summarize": max_consecutive_actions_to_summarize})
        self.logger = logging.getLogger(f"anges.agent.{self.agent_type}")
        if logging_level is not None:
            self.logger.setLevel(logging_level)
        self.inference_func = inference_func if inference_func is not None else get_model(
            config=self.config, agent_type=self.agent_type)
        self.store = store or EventStore()
        self.parent_ids = list(parent_ids or [])
        self.event_stream = event_stream
        self.uid = event_stream.uid if event_stream else new_id()  # the stream's id, known before the first run
        saved = event_stream.get_settings() if event_stream else {}  # a resumed stream keeps its settings
        self.cmd_init_dir = str(cmd_init_dir or saved.get("cmd_init_dir") or os.getcwd())
        self.prefix_cmd = prefix_cmd or saved.get("prefix_cmd") or ""
        self.interrupt_check = interrupt_check or (lambda: False)
        self.user_notes = list(notes) or saved_notes(saved)
        self.notes = list(self.agent_config.notes) + self.user_notes
        self.message_handlers: list[Callable] = list(message_handlers)
        self.listeners: list[Listener] = listeners_for(self.config) if listeners is None else list(listeners)
        """Told of each recorded event and model call (telemetry, `anges.agents.listening`); a child shares them."""
        self.auto_entitle, self.budget = auto_entitle or self.agent_config.auto_entitle, budget  # a parent's budget
        self.remaining_depth = self.agent_config.max_depth if remaining_depth is None else remaining_depth
        self.status, self.mcp = "new", mcp
        self.apis = apis if apis is not None else apis_for(self.config, self.cmd_init_dir)  # `tools.openapi`
        names = (*self.action_types, *self.agent_config.extra_actions) if actions is None else ()
        self.registered_actions: list[Action] = offered_actions(names, mcp, actions or (), self.apis, self.mcp_tools)
        self.agent_prompt_template, self.approval = self.template, approval
        """Who answers an `ask`: a channel `f(ApprovalRequest) -> Decision`, or a mode: ask, auto, deny."""
        self.run_safety: RunSafety | None = None
        """The sandbox, policy and approval gate of the current run (its child agents share them)."""
        self._share = SafetyShare(self.config, parent=parent_safety, apis=self.apis, store=self.store)
        self._calls = ModelCalls(self)
        self._prompter = Prompter(self, self._calls.sizing)
        self.delta_handlers = self._calls.delta_handlers
        self.delta_handlers.extend(delta_handlers)
        """Called with each `ReplyDelta` as a reply streams (`anges.agents.live`); a child agent shares them."""
        self._interrupted, self._interrupt_why = threading.Event(), ""
        self._checkpointing = StepCheckpoints(self.config.checkpoints)
        self.run_state: RunState | None = None
        """The request being run: its budget, ledger, action context and history (None before the first)."""
        self.secrets: list[str] = []
        """The secret values of the current run, masked in everything it records."""
        self.hooks = Hooks(self, self._interrupt_requested)
        """The run's hook points (`anges.hooks`): the loop tells them where it is; with no hooks, they do nothing."""

    def run_with_new_request(self, task_description: str, event_stream: EventStream | None = None) -> EventStream:
        """Record the request (new or follow-up) and work on it until the run ends; returns the stream."""
        self._interrupted.clear()  # before the sandbox is probed: a stop asked for meanwhile holds for this run
        self._interrupt_why, self.run_state = "", None
        self.run_safety = safety = self._share.begin(self.cmd_init_dir, self.approval, (event_stream or self).uid)
        stream = self._open_stream(event_stream)
        self.secrets, env = run_secrets(self.config, self.agent_config, self.mcp, self.apis, self.cmd_init_dir)
        with self.store.run_lock(stream.uid):
            self.store.clear_stop(stream.uid)
            if abandoned := abandoned_run(stream):
                self._record(abandoned)
            first = not stream.events_list
            if first and stream.title == stream.uid:
                stream.title = masked_title(task_description, self.secrets)
            kind = ("new_request" if first else "follow_up_request") + ("_from_parent" if self.parent_ids else "")
            facts = self._prompter.request_facts(self._interrupt_requested, task_description)  # window, AGENTS.md
            self._record(Event(kind, content=task_description, message=task_description, data=facts))
            self.run_state = state = self._new_state(stream, env)
            self._checkpointing.begin(stream.uid, self.parent_ids, safety.settings, self.stop_requested)
            if first and self.auto_entitle:
                state.history.entitle(task_description, self.secrets)
            try:
                self._run(task_description, not first)
            finally:
                self._share.end(safety)  # every process of the run ends here (a child's: with its parent)
                self._checkpointing.end()
        return stream

    def close(self) -> None:
        """End the background jobs kept running after a run (`safety.keep_background`)."""
        self._share.close()

    def handle_user_visible_messages(self, message: str) -> None:
        """Pass a user-visible message to every handler."""
        for handler in self.message_handlers:
            handler(message)

    def interrupt(self, why: str = "") -> None:
        """Ask the running request to stop (the running command is killed); `why` (e.g. "SIGTERM") is recorded."""
        self._interrupt_why = why
        self._interrupted.set()

    @property
    def checkpoints(self) -> Checkpoints:
        """Diff and undo of this agent's stream, from the checkpoints taken before its steps."""
        from anges.checkpoints import Checkpoints

        stream = self.event_stream or EventStream(uid=self.uid, parent_event_stream_uids=self.parent_ids)
        return Checkpoints(stream, self.store, self.config.checkpoints, self.config.prompt.template_dir)

    def render_prompt(self, feedback: str = "", limit: int = 0) -> str:
        """The full prompt for the next step (past `limit` characters, the middle of its history cut)."""
        return self._prompter.prompt(feedback, limit)

    # -- the loop: run → step → query → execute → record ------------------------------------------------------

    def _run(self, request: str, follow_up: bool) -> None:
        step: Callable[[], bool] = partial(self.hooks.begin, request, follow_up)  # first: the run's start hooks
        while True:
            try:
                if step():
                    return
                step = self._step
            except RunStopped as stop:
                self._record(stop_event(explained(stop, self.check_limits)))
                return
            except BaseException as exc:  # a bug or Ctrl-C: end the stream cleanly, then let it propagate
                reason = "interrupt" if isinstance(exc, KeyboardInterrupt) else "internal_error"
                self._record(stop_event(RunStopped(reason, f"{type(exc).__name__}: {exc}", error=repr(exc))))
                raise

    def _step(self) -> bool:
        """One reply and its actions; True when a returning action ended the run."""
        self.check_limits()
        of_run(self.run_state).history.before_step(self.agent_config.max_consecutive_actions_to_summarize)
        return self._execute(self._query())

    def _query(self) -> ParsedReply:
        """A valid reply from the model; an invalid or cut-off one is asked again, a bounded number of times."""
        return self._calls.ask()

    def _execute(self, reply: ParsedReply) -> bool:
        """The reply's actions in order, each past the completion check, hooks and gate; True if one ended the run."""
        actions, safety, state = self.actions_by_type(), of_run(self.run_safety), of_run(self.run_state)
        ctx = replace(state.context, reply=reply)
        state.completion.reply_starts(len(of_run(self.event_stream).events_list))
        for index, args in enumerate(reply.actions):
            self.check_limits()
            state.count_repeats(args)
            action, left = actions[args["action_type"]], len(reply.actions) - index - 1
            if (held := state.completion.held(action, args)) is not None:  # a TASK_COMPLETE held or dropped
                self._record_outcome(held, reply)
                return False
            if self.hooks.blocks(action.type, args, action.returning_action, left):
                return False  # a hook blocked it: the model reads why and plans again
            permit = safety.permit(ctx, action.type, args, left, self.readonly_shell)
            if permit is None:
                return False  # declined: the model reads why and plans again
            if self._run_action(action, args, replace(ctx, **safety.equipment(permit)), permit):
                return True
        return False

    def _run_action(self, action: Action, args: dict, ctx: ActionContext, permit: Permit | None = None) -> bool:
        """Run one action (an anges 0.1.x one through its adapter) and record its event; True if it ended the run."""
        self._checkpointing.before(action, args, ctx, len(of_run(self.event_stream).events_list) + 1)
        action = action if is_builtin_style(action) else LegacyAction(action, self)
        try:
            event = action.run(ctx, args)
        except (RunStopped, KeyboardInterrupt):
            raise
        except Exception as exc:  # an action's failure is a result the model sees, not the end of the run
            self.logger.debug("action %s failed", action.type, exc_info=True)
            self._record(failed := failed_action(action.type, ctx.reply, exc))
            self.hooks.after(action.type, args, failed)
            return False
        if event is not None:
            self._record_outcome(event, ctx.reply, permit, None if action.returning_action else args)
        return action.returning_action

    def _record_outcome(self, event: Event, reply: ParsedReply, permit: Permit | None = None,
                        args: dict | None = None) -> None:
        """Record an action's event with its reasoning, input and approval; then after_action hooks (`args` given)."""
        self._record(with_outcome(event, reply, permit, args))
        if args is not None:
            self.hooks.after(str(args["action_type"]), args, event)

    def _record(self, event: Event, notify: bool = True) -> None:
        """The bookkeeping every event gets once: usage, secrets masked, texts capped, stored, status, handlers."""
        self.hooks.ending(event)  # the event that ends the run: run_end hooks first, so it stays the stream's last
        if self.run_state is not None:
            self.run_state.note(event)
        self._checkpointing.attach(event)
        mask_event(event, self.secrets)
        cap_event(event, self.agent_config.event_text_cap)
        stream = of_run(self.event_stream)
        stream.add_event(event)
        self.store.sync(stream)
        self.status = status_of(event.type) or self.status
        for listener in self.listeners:
            listener.recorded(self, event)
        self.hooks.recorded(event)
        if notify and event.message:
            self.handle_user_visible_messages(AgentMessage(event.message, self, event))

    def check_limits(self) -> None:
        """Raise `RunStopped` when the run was interrupted or reached a limit."""
        if self._interrupt_requested():
            why = self._interrupt_why
            raise RunStopped("interrupt", f"the run was interrupted ({why})" if why else "the run was interrupted",
                             **({"by": why} if why else {}))
        if self.run_state is not None:
            self.run_state.check()

    def _interrupt_requested(self) -> bool:
        return self._interrupted.is_set() or self.interrupt_check() or self.store.stop_requested(self.uid)

    def stop_requested(self) -> bool:
        """True once the run must stop: an interrupt, a stop request through the store, or its time is up."""
        return self._interrupt_requested() or (self.run_state is not None and self.run_state.budget.expired())

    def _open_stream(self, event_stream: EventStream | None) -> EventStream:
        stream = event_stream or self.event_stream or EventStream(
            uid=self.uid, parent_event_stream_uids=self.parent_ids, agent_type=self.agent_type)
        stream.agent_type = stream.agent_type or self.agent_type
        stream.update_settings({"cmd_init_dir": self.cmd_init_dir, "prefix_cmd": self.prefix_cmd,
                                "agent_type": self.agent_type, "notes": self.user_notes,
                                "model": getattr(self.inference_func, "name", "")})
        self.event_stream, self.uid = stream, stream.uid
        self._prompter.new_run()
        return stream

    def _new_state(self, stream: EventStream, env: dict[str, str]) -> RunState:
        budget = Budget.for_request(self.agent_config, parent=self.budget)
        ledger = Ledger(budget, self.config.prices, getattr(self.inference_func, "name", ""))
        context = ActionContext(
            config=self._calls.sizing.actions, app_config=self.config, cwd=self.cmd_init_dir, agent_id=self.uid,
            prefix_cmd=self.prefix_cmd, interrupt_check=self.stop_requested, reply=ParsedReply("", "", [], ""),
            record=self._record, agent_type=self.agent_type, secrets=self.secrets, env=env, charge=ledger.charge,
            render_guide=self._prompter.guide, delegator=self, output_sink=self._calls.output_sink)
        history = History(stream, self.store, self._prompter, self._calls, self._record, self.logger)
        return RunState(self.agent_config, budget, ledger, context, history, CompletionCheck(self),
                        ending_jobs=self._share.ending_jobs)

    def actions_by_type(self) -> dict[str, Action]:
        """The actions this agent offers, by type (upper case)."""
        return {a.type.upper(): a for a in self.registered_actions}
