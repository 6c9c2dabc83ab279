"""`BaseAgent`: run → step → query the model → execute its actions → record, until a returning action."""

from __future__ import annotations

import logging
import os
import platform
import threading
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

from anges import registry
from anges.actions import Action, ActionContext, LegacyAction, is_builtin_style, offered_actions
from anges.agents.calls import ModelCalls
from anges.agents.history import History
from anges.agents.record import AgentMessage, cap_event, jsonable, mask_event
from anges.agents.run import RunState
from anges.budget import Budget, Ledger
from anges.config import default_config
from anges.events import Event, EventStream, new_id, title_from
from anges.exceptions import FormatError, ModelReplyError, RunStopped
from anges.parsing import ParsedReply, parse_reply
from anges.prompt import clip, format_event_stream, render_template
from anges.store import EventStore, status_of, stream_status

if TYPE_CHECKING:
    from anges.approval import Permit
    from anges.config_types import AgentConfig, Config
    from anges.mcp import MCPManager
    from anges.safety import Runners, RunSafety

__all__ = ["AgentMessage", "BaseAgent"]


class BaseAgent:
    """An agent that works on requests until a returning action (or a stop condition) ends each run."""

    agent_type = "default"
    template = "agents/default.j2"
    action_types: tuple[str, ...] = ("RUN_SHELL_CMD", "EDIT_FILE", "READ_MIME_FILES", "TASK_COMPLETE", "HELP_NEEDED",
                                     "AGENT_TEXT_RESPONSE")
    """The actions this type offers, by registered name (`extra_actions` in its config adds more)."""
    can_be_child = False
    """An orchestrator may start agents of this type (NEW_CHILD_AGENT <TYPE>)."""
    mcp_tools = True
    """Offer USE_MCP_TOOL when an MCP manager with tools is attached (`mcp=`)."""

    def __init__(self, parent_ids=None, inference_func: Callable | None = None, event_stream: EventStream | None = None,
                 cmd_init_dir: str | os.PathLike | None = None, prefix_cmd: str = "",
                 interrupt_check: Callable[[], bool] | None = None,
                 max_consecutive_actions_to_summarize: int | None = None, logging_level: int | None = None,
                 auto_entitle: bool = False, *, config: Config | None = None, store: EventStore | None = None,
                 notes: Iterable[str] = (), message_handlers: Iterable[Callable] = (), budget: Budget | None = None,
                 agent_config: AgentConfig | None = None, actions: Iterable[Action] | None = None,
                 mcp: MCPManager | None = None, approval: Callable | str | None = None,
                 remaining_depth: int | None = None):
        self.config = config or default_config()
        self.agent_config = agent_config or self.config.agent(self.agent_type)
        if max_consecutive_actions_to_summarize is not None:
            self.agent_config = self.agent_config.model_copy(
                update={"max_consecutive_actions_to_summarize": max_consecutive_actions_to_summarize})
        self.logger = logging.getLogger(f"anges.agent.{self.agent_type}")
        if logging_level is not None:
            self.logger.setLevel(logging_level)
        if inference_func is None:
            from anges.models import get_model

            inference_func = get_model(config=self.config, agent_type=self.agent_type)
        self.inference_func = inference_func
        self.store = store or EventStore()
        self.parent_ids = list(parent_ids or [])
        self.event_stream = event_stream
        self.uid = event_stream.uid if event_stream else new_id()  # the stream's id, known before the first run
        saved = event_stream.get_settings() if event_stream else {}  # a resumed stream keeps its settings
        self.cmd_init_dir = str(cmd_init_dir or saved.get("cmd_init_dir") or os.getcwd())
        self.prefix_cmd = prefix_cmd or saved.get("prefix_cmd") or ""
        self.interrupt_check = interrupt_check or (lambda: False)
        saved_notes = saved.get("notes") or []
        self.user_notes = list(notes) or ([saved_notes] if isinstance(saved_notes, str) else list(saved_notes))
        self.notes = list(self.agent_config.notes) + self.user_notes
        self.message_handlers: list[Callable] = list(message_handlers)
        self.auto_entitle = auto_entitle or self.agent_config.auto_entitle
        self.budget = budget
        """The budget this agent's requests draw from besides their own (a parent's)."""
        self.remaining_depth = self.agent_config.max_depth if remaining_depth is None else remaining_depth
        self.status = "new"
        self.mcp = mcp
        names = (*self.action_types, *self.agent_config.extra_actions) if actions is None else ()
        self.registered_actions: list[Action] = offered_actions(names, mcp if self.mcp_tools else None, actions or ())
        self.agent_prompt_template = self.template
        self.approval = approval
        """Who answers an `ask`: a channel `f(ApprovalRequest) -> Decision`, or a mode: ask, auto, deny."""
        self._interrupted = threading.Event()
        self._interrupt_why = ""
        self._state: RunState | None = None
        self._secrets: list[str] = []
        self._calls = ModelCalls(f"anges-model-{self.uid}")
        self._facts: dict | None = None
        self._safety: RunSafety | None = None
        self._parent_safety: RunSafety | None = None
        self._kept_runners: Runners | None = None

    # -- public API -------------------------------------------------------------------------------------------

    def run_with_new_request(self, task_description: str, event_stream: EventStream | None = None) -> EventStream:
        """Record the request (new or follow-up) and work on it until the run ends; returns the stream."""
        from anges.shell import scrubbed_environment, secret_values

        owns_safety = self._parent_safety is None
        self._safety = self._parent_safety or self._new_safety()
        stream = self._open_stream(event_stream)
        self._interrupted.clear()
        self._interrupt_why, self._state = "", None
        self._secrets = secret_values() + (self.mcp.secrets if self.mcp is not None else [])
        env = scrubbed_environment(self.agent_config.pass_env)
        with self.store.run_lock(stream.uid):
            self.store.clear_stop(stream.uid)
            self._close_abandoned_run()
            first = not stream.events_list
            if first and stream.title == stream.uid:
                stream.title = self._masked_title(task_description)
            kind = ("new_request" if first else "follow_up_request") + ("_from_parent" if self.parent_ids else "")
            self._record(Event(kind, content=task_description, message=task_description))
            self._state = self._new_state(env)
            if first and self.auto_entitle:
                self._state.history.entitle(task_description, self._masked_title)
            try:
                self._run()
            finally:
                if owns_safety:
                    self._kept_runners = self._safety.end()  # every process of the run ends here
        return stream

    def close(self) -> None:
        """End the background jobs kept running after a run (`safety.keep_background`)."""
        kept, self._kept_runners = self._kept_runners, None
        if kept is not None:
            kept.close()

    def handle_user_visible_messages(self, message: str) -> None:
        """Pass a user-visible message to every handler."""
        for handler in self.message_handlers:
            handler(message)

    def interrupt(self, why: str = "") -> None:
        """Ask the running request to stop (the running command is killed); `why` (e.g. "SIGTERM") is recorded."""
        self._interrupt_why = why
        self._interrupted.set()

    def make_child(self, agent_type: str, event_stream: EventStream) -> BaseAgent:
        """A child agent that inherits this agent's model, config, store, directory, notes, handlers, limits and
        safety (one sandbox, policy and approval channel for the whole tree)."""
        child = registry.agent_types.get(agent_type)(
            parent_ids=self.parent_ids + [self.uid], inference_func=self.inference_func, event_stream=event_stream,
            cmd_init_dir=self.cmd_init_dir, prefix_cmd=self.prefix_cmd, interrupt_check=self._stop_requested,
            config=self.config, store=self.store, notes=self.user_notes, message_handlers=self.message_handlers,
            budget=self._state.budget if self._state else None, mcp=self.mcp, approval=self.approval,
            remaining_depth=self.remaining_depth - 1)
        child._parent_safety = self._safety
        return child

    def child_types(self, any_depth: bool = False) -> list[str]:
        """The agent types (upper case) this agent may start; those that delegate too only while depth is left."""
        return [name.upper() for name, cls in registry.agent_types.classes() if cls.can_be_child and (
            any_depth or self.remaining_depth > 0 or "CALL_CHILD_AGENT" not in cls.action_types)]

    def render_prompt(self, feedback: str = "") -> str:
        """The full prompt for the next step."""
        events = self.event_stream.events_list
        return render_template(
            self.agent_prompt_template, self.config.prompt.template_dir,
            action_types=[a.type for a in self.registered_actions],
            action_guides=[a.guide_prompt for a in self.registered_actions], platform=self._prompt_facts(),
            notes=self.notes, history=format_event_stream(self.event_stream, self.config.prompt),
            background_jobs=self._safety.job_lines() if self._safety else [],
            after_edit=bool(events) and events[-1].type == "edit_file", feedback=feedback, agent=self)

    def render_guide(self, action: Action) -> str:
        """The guide of one built-in action, rendered from its `guide_template`."""
        facts = self._prompt_facts()
        return render_template(
            action.guide_template, self.config.prompt.template_dir, shell=facts["shell"], sandbox=facts["sandbox"],
            default_timeout=int(self.agent_config.shell_cmd_timeout),
            max_timeout=int(self.agent_config.max_shell_cmd_timeout), agent=self, action=action)

    # -- the loop: run → step → query → execute → record ------------------------------------------------------

    def _run(self) -> None:
        while True:
            try:
                if self._step():
                    return
            except RunStopped as stop:
                self._record_stop(self._explained(stop))
                return
            except BaseException as exc:  # a bug or Ctrl-C: end the stream cleanly, then let it propagate
                reason = "interrupt" if isinstance(exc, KeyboardInterrupt) else "internal_error"
                self._record_stop(RunStopped(reason, f"{type(exc).__name__}: {exc}", error=repr(exc)))
                raise

    def _step(self) -> bool:
        """One reply and its actions; True when a returning action ended the run."""
        self._check_limits()
        if self._execute(self._query()):
            return True
        self._state.history.summarize_actions_if_due(self.agent_config.max_consecutive_actions_to_summarize)
        return False

    def _query(self) -> ParsedReply:
        """A valid reply from the model; an invalid one is sent back with feedback, a bounded number of times."""
        feedback, error = "", ""
        attempts = max(self.agent_config.max_invalid_replies, 1)
        for attempt in range(1, attempts + 1):
            prompt = self.render_prompt(feedback)
            if len(prompt) > self.config.prompt.max_prompt_chars and self._state.history.shorten():
                prompt = self.render_prompt(feedback)
            temperature = self.config.model_settings.temperature + 0.1 * (attempt - 1)
            try:
                return parse_reply(self._call_model(prompt, temperature), self._actions_by_type())
            except FormatError as exc:
                error = exc.feedback
            except ModelReplyError as exc:
                error = str(exc)
            self.logger.info("invalid reply (attempt %d of %d): %s", attempt, attempts, error)
            feedback = render_template("invalid_reply.j2", self.config.prompt.template_dir,
                                       error=error, attempt=attempt, max_attempts=attempts)
        raise RunStopped("invalid_replies", f"the model gave {attempts} invalid replies in a row; last error: {error}",
                         last_error=error)

    def _execute(self, reply: ParsedReply) -> bool:
        """The reply's actions in order, each through the approval gate; True when one ended the run."""
        actions = self._actions_by_type()
        ctx = replace(self._state.context, reply=reply)
        for index, args in enumerate(reply.actions):
            self._check_limits()
            self._state.count_repeats(args)
            action = actions[args["action_type"]]
            permit = self._safety.permit(ctx, action.type, args, remaining=len(reply.actions) - index - 1)
            if permit is None:
                return False  # declined: the model reads why and plans again
            if self._run_action(action, args, self._safety.equip(ctx, permit), permit):
                return True
        return False

    def _run_action(self, action: Action, args: dict, ctx: ActionContext, permit: Permit | None = None) -> bool:
        """Run one action and record its event; True when it ended the run."""
        action = action if is_builtin_style(action) else LegacyAction(action, self)
        try:
            event = action.run(ctx, args)
        except (RunStopped, KeyboardInterrupt):
            raise
        except Exception as exc:  # an action's failure is a result the model sees, not the end of the run
            self.logger.debug("action %s failed", action.type, exc_info=True)
            self._record(Event("action", reasoning=ctx.reply.reasoning, content=f"{action.type} FAILED: {exc}",
                               message=f"{action.type} failed: {exc}",
                               data={"action_type": action.type, "error": f"{type(exc).__name__}: {exc}"}))
            return False
        if event is not None:
            self._record_outcome(event, ctx.reply, permit)
        return action.returning_action

    def _record_outcome(self, event: Event, reply: ParsedReply, permit: Permit | None = None) -> None:
        """Record an action's event with the reply's reasoning and the approval it got (a task's end is summarized)."""
        event.reasoning = event.reasoning or reply.reasoning
        event.analysis = event.analysis or reply.analysis
        if permit is not None and permit.facts():
            event.data.setdefault("approval", permit.facts())
        if event.type == "task_completion":
            self._state.history.summarize_task()
        self._record(event)

    def _record(self, event: Event, notify: bool = True) -> None:
        """The bookkeeping every event gets once: usage, secrets masked, texts capped, stored, status, handlers."""
        if self._state is not None:
            self._state.ledger.attach(event)
        mask_event(event, self._secrets)
        cap_event(event, self.agent_config.event_text_cap)
        self.event_stream.add_event(event)
        self.store.sync(self.event_stream)
        self.status = status_of(event.type) or self.status
        if notify and event.message:
            self.handle_user_visible_messages(AgentMessage(event.message, self, event))

    # -- limits and stops -------------------------------------------------------------------------------------

    def _check_limits(self) -> None:
        if self._interrupt_requested():
            why = self._interrupt_why
            raise RunStopped("interrupt", f"the run was interrupted ({why})" if why else "the run was interrupted",
                             **({"by": why} if why else {}))
        self._state.check(len(self.event_stream.events_list))

    def _explained(self, stop: RunStopped) -> RunStopped:
        """A stop noticed while waiting (on an approval, say), as the limits tell it: which interrupt, or the
        time limit."""
        if stop.reason == "interrupt":
            try:
                self._check_limits()
            except RunStopped as precise:
                return precise
        return stop

    def _interrupt_requested(self) -> bool:
        return self._interrupted.is_set() or self.interrupt_check() or self.store.stop_requested(self.uid)

    def _stop_requested(self) -> bool:
        return self._interrupt_requested() or self._state.budget.expired()

    def _record_stop(self, stop: RunStopped) -> None:
        content = f"The run stopped: {stop}."
        self._record(Event("task_interrupted", content=content, message=content,
                           data={"reason": stop.reason, **jsonable(stop.details)}))

    # -- model calls ------------------------------------------------------------------------------------------

    def _call_model(self, prompt: str, temperature: float | None = None, attach: bool = True):
        self._check_limits()
        temperature = self.config.model_settings.temperature if temperature is None else temperature
        prompt = clip(prompt, self.config.prompt.max_prompt_chars)
        reply = self._calls.call(lambda: self.inference_func(prompt, temperature=temperature), self._stop_requested,
                                 self._check_limits, self._state.budget)
        self._state.ledger.count(reply if isinstance(reply, str) else "", attach)
        return reply

    def _masked_title(self, text: str) -> str:
        """A one-line title from `text`, its secrets masked before it is cut (so no fragment of one is left)."""
        from anges.shell import mask_secrets

        return title_from(mask_secrets(text, self._secrets))

    # -- setting up a run -------------------------------------------------------------------------------------

    def _open_stream(self, event_stream: EventStream | None) -> EventStream:
        stream = event_stream or self.event_stream or EventStream(
            uid=self.uid, parent_event_stream_uids=self.parent_ids, agent_type=self.agent_type)
        stream.agent_type = stream.agent_type or self.agent_type
        stream.update_settings({"cmd_init_dir": self.cmd_init_dir, "prefix_cmd": self.prefix_cmd,
                                "agent_type": self.agent_type, "notes": self.user_notes,
                                "model": getattr(self.inference_func, "name", "")})
        self.event_stream, self.uid = stream, stream.uid
        self._facts = None
        for action in self.registered_actions:
            if action.guide_template:
                action.guide_prompt = self.render_guide(action)
        return stream

    def _close_abandoned_run(self) -> None:
        """Record how the last run ended when its process died before it could (we hold the run lock now)."""
        if stream_status(self.event_stream.events_list) != "running":
            return
        content = ("The previous run on this stream ended without finishing: its process exited or was killed "
                   "before it could record how the run ended.")
        self._record(Event("task_interrupted", content=content, message=content, data={"reason": "abandoned"}))

    def _new_state(self, env: dict[str, str]) -> RunState:
        budget = Budget.for_request(self.agent_config, parent=self.budget)
        ledger = Ledger(budget, self.config.prices, getattr(self.inference_func, "name", ""))
        context = ActionContext(
            config=self.agent_config, app_config=self.config, cwd=self.cmd_init_dir, prefix_cmd=self.prefix_cmd,
            interrupt_check=self._stop_requested, reply=None, record=self._record, agent_id=self.uid,
            agent_type=self.agent_type, secrets=self._secrets, env=env, charge=ledger.charge,
            render_guide=self.render_guide, delegator=self)
        history = History(self.event_stream, self.store, self.config.prompt, self._call_model, self._record,
                          self.logger)
        return RunState(self.agent_config, len(self.event_stream.events_list), budget, ledger, context, history)

    def _new_safety(self) -> RunSafety:
        from anges.safety import RunSafety

        return RunSafety(self.config.safety, self.cmd_init_dir, self.approval, runners=self._kept_runners)

    def _actions_by_type(self) -> dict[str, Action]:
        return {a.type.upper(): a for a in self.registered_actions}

    def _prompt_facts(self) -> dict:
        if self._facts is None:  # once per run: they are part of the prompt's stable prefix
            from anges.shell import find_shell

            self._facts = {"os": platform.system(), "shell": os.path.basename(find_shell()),
                           "cwd": self.cmd_init_dir, "prefix_cmd": self.prefix_cmd,
                           "sandbox": self._safety.facts() if self._safety else None}
        return self._facts
