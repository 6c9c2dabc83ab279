"""`BaseAgent`: render the prompt, ask the model, parse, act, record, summarize, until a returning action."""

from __future__ import annotations

import json
import logging
import os
import platform
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from anges import summarize
from anges.actions import (
    Action,
    ActionContext,
    AgentTextResponse,
    EditFile,
    HelpNeeded,
    ReadMimeFiles,
    RunShellCommand,
    TaskComplete,
    is_builtin_style,
)
from anges.budget import Budget
from anges.config import AgentConfig, Config, default_config
from anges.events import RETURN_TO_PARENT_EVENT_TYPES, Event, EventStream, new_id, title_from
from anges.exceptions import FormatError, ModelError, ModelReplyError, ModelSetupError, RunStopped
from anges.models.cancel import CallThread, CancelToken
from anges.parsing import ParsedReply, parse_reply
from anges.prompt import clip, format_event_stream, render_template
from anges.store import EventStore, status_of, stream_status

if TYPE_CHECKING:
    from anges.approval import Permit
    from anges.mcp import MCPManager
    from anges.safety import Runners, RunSafety

MODEL_POLL_SECONDS = 0.1  # how often a pending model call looks for an interrupt


class AgentMessage(str):
    """A user-visible message, tagged with who is speaking."""

    def __new__(cls, text: str, agent: BaseAgent, event: Event):
        obj = super().__new__(cls, text)
        obj.agent_type = agent.agent_type
        obj.agent_id = agent.uid
        obj.parent_ids = list(agent.parent_ids)
        obj.depth = len(agent.parent_ids)
        obj.event = event
        return obj


@dataclass
class RunState:
    """Counters of the request being run."""

    request_index: int
    budget: Budget
    model_calls: int = 0
    last_action: str = ""
    repeats: int = 0
    pending_usage: dict = field(default_factory=dict)


class BaseAgent:
    """An agent that works on requests until a returning action (or a stop condition) ends each run."""

    agent_type = "default"
    template = "agents/default.j2"
    action_classes: tuple[type[Action], ...] = (RunShellCommand, EditFile, ReadMimeFiles, TaskComplete, HelpNeeded,
                                                AgentTextResponse)
    mcp_tools = True
    """Offer USE_MCP_TOOL when an MCP manager with tools is attached (`mcp=`)."""

    def __init__(self, parent_ids=None, inference_func: Callable | None = None, event_stream: EventStream | None = None,
                 cmd_init_dir: str | os.PathLike | None = None, prefix_cmd: str = "",
                 interrupt_check: Callable[[], bool] | None = None,
                 max_consecutive_actions_to_summarize: int | None = None, logging_level: int | None = None,
                 auto_entitle: bool = False, *, config: Config | None = None, store: EventStore | None = None,
                 notes: Iterable[str] = (), message_handlers: Iterable[Callable] = (), budget: Budget | None = None,
                 agent_config: AgentConfig | None = None, actions: Iterable[Action] | None = None,
                 mcp: MCPManager | None = None, approval: Callable | str | None = None):
        self.config = config or default_config()
        self.agent_config = agent_config or replace(self.config.agent(self.agent_type))
        if max_consecutive_actions_to_summarize is not None:
            self.agent_config.max_consecutive_actions_to_summarize = max_consecutive_actions_to_summarize
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
        self.status = "new"
        self.registered_actions: list[Action] = (list(actions) if actions is not None
                                                 else [cls() for cls in self.action_classes])
        self.mcp = mcp
        self._add_mcp_action()
        self.agent_prompt_template = self.template
        self._interrupted = threading.Event()
        self._interrupt_why = ""
        self._state: RunState | None = None
        self._secrets: list[str] = []
        self._calls: CallThread | None = None
        self._facts: dict | None = None
        self._env: dict[str, str] | None = None
        self.approval = approval
        """Who answers an `ask`: a channel `f(ApprovalRequest) -> Decision`, or a mode: ask, auto, deny."""
        self._safety: RunSafety | None = None
        self._parent_safety: RunSafety | None = None
        self._kept_runners: Runners | None = None

    # -- public API -------------------------------------------------------------------------------------------

    def run_with_new_request(self, task_description: str, event_stream: EventStream | None = None) -> EventStream:
        """Record the request (new or follow-up) and work on it until the run ends; returns the stream."""
        from anges.safety import secret_names
        from anges.shell import scrubbed_environment, secret_values

        owns_safety = self._parent_safety is None
        self._safety = self._parent_safety or self._new_safety()
        stream = self._open_stream(event_stream)
        self._interrupted.clear()
        self._interrupt_why = ""
        names = secret_names(self.config, self.mcp)
        self._secrets = secret_values(secret_names=names) + (self.mcp.secrets if self.mcp is not None else [])
        self._env = scrubbed_environment(self.agent_config.pass_env, names)
        with self.store.run_lock(stream.uid):
            self.store.clear_stop(stream.uid)
            self._close_abandoned_run()
            first = not stream.events_list
            if first and stream.title == stream.uid:
                stream.title = self._masked_title(task_description)
            kind = "new_request" if first else "follow_up_request"
            if self.parent_ids:
                kind += "_from_parent"
            self._record(Event(kind, content=task_description, message=task_description))
            budget = self.budget or Budget.for_request(self.agent_config)
            self._state = RunState(request_index=len(stream.events_list), budget=budget)
            if first and self.auto_entitle:
                self._entitle(task_description)
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

    def make_child(self, agent_type: str, event_stream: EventStream) -> BaseAgent:
        """A child agent that inherits this agent's model, config, store, directory, notes, handlers and limits."""
        from anges.agents import agent_class

        cls = agent_class(agent_type)
        extra = {"remaining_depth": self.remaining_depth - 1} if agent_type == "orchestrator" else {}
        child = cls(parent_ids=self.parent_ids + [self.uid], inference_func=self.inference_func,
                    event_stream=event_stream, cmd_init_dir=self.cmd_init_dir, prefix_cmd=self.prefix_cmd,
                    interrupt_check=self._stop_requested, config=self.config, store=self.store,
                    notes=self.user_notes, message_handlers=self.message_handlers,
                    budget=self._state.budget if self._state else None, mcp=self.mcp, approval=self.approval,
                    **extra)
        child._parent_safety = self._safety  # one sandbox, policy and approval channel for the whole tree
        return child

    def interrupt(self, why: str = "") -> None:
        """Ask the running request to stop (the running command is killed); `why` (e.g. "SIGTERM") is recorded."""
        self._interrupt_why = why
        self._interrupted.set()

    def render_prompt(self, feedback: str = "") -> str:
        """The full prompt for the next step."""
        facts = self._prompt_facts()
        return render_template(
            self.agent_prompt_template,
            self.config.prompt.template_dir,
            action_types=[a.type for a in self.registered_actions],
            action_guides=[a.guide_prompt for a in self.registered_actions],
            platform=facts,
            notes=self.notes,
            history=format_event_stream(self.event_stream, self.config.prompt),
            background_jobs=self._safety.job_lines() if self._safety else [],
            after_edit=bool(self.event_stream.events_list) and self.event_stream.events_list[-1].type == "edit_file",
            feedback=feedback,
            agent=self,
        )

    # -- the loop ---------------------------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            try:
                self._check_limits()
                reply = self._next_reply()
                if self._act(reply):
                    return
                self._summarize_actions_if_due()
            except RunStopped as stop:
                self._record_stop(stop)
                return
            except BaseException as exc:  # a bug or Ctrl-C: end the stream cleanly, then let it propagate
                reason = "interrupt" if isinstance(exc, KeyboardInterrupt) else "internal_error"
                self._record_stop(RunStopped(reason, f"{type(exc).__name__}: {exc}", error=repr(exc)))
                raise

    def _next_reply(self) -> ParsedReply:
        feedback, error = "", ""
        attempts = max(self.agent_config.max_invalid_replies, 1)
        for attempt in range(1, attempts + 1):
            prompt = self._prompt_within_budget(feedback)
            temperature = self.config.model_settings.temperature + 0.1 * (attempt - 1)
            try:
                text = self._call_model(prompt, temperature)
                return parse_reply(text, self._actions_by_type())
            except FormatError as exc:
                error = exc.feedback
            except ModelReplyError as exc:
                error = str(exc)
            self.logger.info("invalid reply (attempt %d of %d): %s", attempt, attempts, error)
            feedback = render_template("invalid_reply.j2", self.config.prompt.template_dir,
                                       error=error, attempt=attempt, max_attempts=attempts)
        raise RunStopped("invalid_replies", f"the model gave {attempts} invalid replies in a row; last error: {error}",
                         last_error=error)

    def _act(self, reply: ParsedReply) -> bool:
        actions = self._actions_by_type()
        for index, args in enumerate(reply.actions):
            self._check_limits()
            self._count_repeats(args)
            action = actions[args["action_type"]]
            permit = self._permit(action, args, reply, remaining=len(reply.actions) - index - 1)
            if permit is None:
                return False  # declined: the model reads why and plans again
            if self._dispatch(action, reply, args, permit):
                return True
        return False

    def _permit(self, action: Action, args: dict, reply: ParsedReply, remaining: int = 0) -> Permit | None:
        """The gate's answer for one action; a declined action is recorded (with the reason) and None returned."""
        gate = self._safety.gate
        permit = gate.check(self, action.type, args)
        if not permit.allowed or permit.request_id is not None:  # other approvals are facts on the action's event
            event = gate.decided_event(self, action.type, permit, skipped=0 if permit.allowed else remaining)
            event.reasoning = "" if permit.allowed else reply.reasoning
            self._record(event)
        return permit if permit.allowed else None

    def _dispatch(self, action: Action, reply: ParsedReply, args: dict, permit: Permit | None = None) -> bool:
        try:
            if not is_builtin_style(action):
                return self._dispatch_legacy(action, reply, args)
            event = action.run(self._action_context(reply, permit), args)
        except (RunStopped, KeyboardInterrupt):
            raise
        except Exception as exc:  # an action's failure is a result the model sees, not the end of the run
            self.logger.debug("action %s failed", action.type, exc_info=True)
            self._record(Event("action", reasoning=reply.reasoning, content=f"{action.type} FAILED: {exc}",
                               message=f"{action.type} failed: {exc}",
                               data={"action_type": action.type, "error": f"{type(exc).__name__}: {exc}"}))
            return False
        event.reasoning = event.reasoning or reply.reasoning
        event.analysis = event.analysis or reply.analysis
        if permit is not None and permit.facts():
            event.data.setdefault("approval", permit.facts())
        if event.type == "task_completion":
            self._summarize_task()
        self._record(event)
        return action.returning_action

    def _dispatch_legacy(self, action: Action, reply: ParsedReply, args: dict) -> bool:
        stream = self.event_stream
        before = len(stream.events_list)
        parsed = {"analysis": reply.analysis, "reasoning": reply.reasoning, "actions": reply.actions}
        result = action.handle_action_in_parsed_response(self._legacy_run_config(), parsed, args)
        added = stream.events_list[before:]
        for event in added:
            self._attach_usage(event)
            _mask_event(event, self._secrets)
            _cap_event(event, self.agent_config.event_text_cap)
            self.status = status_of(event.type) or self.status
        self.store.sync(stream)
        return result is not None or any(e.type in RETURN_TO_PARENT_EVENT_TYPES for e in added)

    # -- limits -----------------------------------------------------------------------------------------------

    def _check_limits(self) -> None:
        if self._interrupt_requested():
            why = self._interrupt_why
            raise RunStopped("interrupt", f"the run was interrupted ({why})" if why else "the run was interrupted",
                             **({"by": why} if why else {}))
        state = self._state
        state.budget.check()
        since_request = len(self.event_stream.events_list) - state.request_index
        limit = self.agent_config.max_number_of_events_to_exhaust
        if limit and since_request >= limit:
            raise RunStopped("event_limit", f"the run reached {limit} events since the last request", limit=limit)
        if self.agent_config.max_model_calls and state.model_calls >= self.agent_config.max_model_calls:
            raise RunStopped("model_call_limit", f"the run made {state.model_calls} model calls for one request",
                             limit=self.agent_config.max_model_calls)

    def _count_repeats(self, args: dict) -> None:
        key = json.dumps(args, sort_keys=True, default=str)
        state = self._state
        state.repeats = state.repeats + 1 if key == state.last_action else 1
        state.last_action = key
        limit = self.agent_config.max_repeated_actions
        if limit and state.repeats >= limit:
            raise RunStopped("repetition", f"the same action was requested {state.repeats} times in a row",
                             action=args)

    def _interrupt_requested(self) -> bool:
        return self._interrupted.is_set() or self.interrupt_check() or self.store.stop_requested(self.uid)

    def _stop_requested(self) -> bool:
        return self._interrupt_requested() or self._state.budget.expired()

    # -- model calls ------------------------------------------------------------------------------------------

    def _call_model(self, prompt: str, temperature: float | None = None, attach: bool = True):
        self._check_limits()
        state = self._state
        state.model_calls += 1
        if temperature is None:
            temperature = self.config.model_settings.temperature
        prompt = clip(prompt, self.config.prompt.max_prompt_chars)
        try:
            reply = self._while_watching(lambda: self.inference_func(prompt, temperature=temperature))
        except ModelReplyError as exc:
            state.budget.charge(exc.usage, None)
            raise
        except ModelSetupError as exc:  # a rejected key, an unknown model: retrying cannot help
            raise RunStopped("model_setup", f"the model is not usable: {exc}", error=str(exc)) from None
        except ModelError as exc:
            raise RunStopped("model_error", f"the model call failed: {exc}", error=str(exc)) from None
        self._account(reply if isinstance(reply, str) else "", attach)
        return reply

    def _while_watching(self, call: Callable):
        """Run a model call on the agent's call thread, so an interrupt or the time limit stops the run at once.

        The call runs under a cancel token: on a stop the provider drops its request and gives up retrying,
        and the thread is left to finish alone (a daemon: it cannot keep the process alive).
        """
        token = CancelToken()
        pending = self._calls.start(call, token) if self._calls is not None else None
        if pending is None:  # no thread yet, or it ended while idle
            self._calls = CallThread(f"anges-model-{self.uid}")
            pending = self._calls.start(call, token)
        while not pending.wait(MODEL_POLL_SECONDS):
            if self._interrupt_requested() or self._state.budget.expired():
                token.cancel()
                self._calls.close()
                self._calls = None
                self._check_limits()
                raise RunStopped("interrupt", "the run was interrupted")  # a stop that `_check_limits` did not see
        return pending.result()

    def _account(self, reply: str, attach: bool) -> None:
        from anges.models.base import Usage, estimate_tokens

        usage = getattr(reply, "usage", None) or Usage(0, estimate_tokens(reply), estimated=True)
        model_name = getattr(reply, "model", "") or getattr(self.inference_func, "name", "")
        cost = self.charge(usage, model_name)
        if not attach:
            return
        pending = self._state.pending_usage
        for key, value in usage.to_dict().items():
            if key != "estimated":
                pending[key] = pending.get(key, 0) + value
        pending["estimated"] = pending.get("estimated", False) or usage.estimated
        pending["model_calls"] = pending.get("model_calls", 0) + 1
        pending["latency"] = round(pending.get("latency", 0.0) + getattr(reply, "latency", 0.0), 4)
        if cost is not None:
            pending["cost"] = round(pending.get("cost", 0.0) + cost, 8)
        if model_name:
            pending["model"] = model_name

    def charge(self, usage, model_name: str) -> float | None:
        """Count a model call an action made itself (e.g. reading images) against the request's budget."""
        cost = self._cost(usage, model_name) if usage is not None else None
        if self._state is not None:
            self._state.budget.charge(usage, cost)
        return cost

    def _cost(self, usage, model_name: str) -> float | None:
        if not self.config.prices:
            return None
        from anges.models.pricing import cost

        return cost(usage, model_name, self.config.prices)

    def _attach_usage(self, event: Event) -> None:
        pending = self._state.pending_usage if self._state else {}
        if not pending:
            return
        event.data["usage"] = {k: v for k, v in pending.items() if k not in ("model", "latency", "cost")}
        for key in ("model", "latency", "cost"):
            if key in pending:
                event.data[key] = pending[key]
        event.est_input_token = pending.get("input_tokens", 0)
        event.est_output_token = pending.get("output_tokens", 0)
        self._state.pending_usage = {}

    def _prompt_within_budget(self, feedback: str) -> str:
        prompt = self.render_prompt(feedback)
        if len(prompt) > self.config.prompt.max_prompt_chars and self._summarize_segments(min_length=2):
            prompt = self.render_prompt(feedback)
        return prompt

    # -- recording --------------------------------------------------------------------------------------------

    def _record(self, event: Event) -> None:
        self._attach_usage(event)
        _mask_event(event, self._secrets)
        _cap_event(event, self.agent_config.event_text_cap)
        self.event_stream.add_event(event)
        self.store.sync(self.event_stream)
        self.status = status_of(event.type) or self.status
        if event.message:
            self.handle_user_visible_messages(AgentMessage(event.message, self, event))

    def _record_stop(self, stop: RunStopped) -> None:
        content = f"The run stopped: {stop}."
        self._record(Event("task_interrupted", content=content, message=content,
                           data={"reason": stop.reason, **_jsonable(stop.details)}))

    def _close_abandoned_run(self) -> None:
        """Record how the last run ended when its process died before it could (we hold the run lock now)."""
        if stream_status(self.event_stream.events_list) != "running":
            return
        content = ("The previous run on this stream ended without finishing: its process exited or was killed "
                   "before it could record how the run ended.")
        self._record(Event("task_interrupted", content=content, message=content, data={"reason": "abandoned"}))

    def _open_stream(self, event_stream: EventStream | None) -> EventStream:
        stream = event_stream or self.event_stream or EventStream(
            uid=self.uid, parent_event_stream_uids=self.parent_ids, agent_type=self.agent_type)
        stream.agent_type = stream.agent_type or self.agent_type
        stream.update_settings({"cmd_init_dir": self.cmd_init_dir, "prefix_cmd": self.prefix_cmd,
                                "agent_type": self.agent_type, "notes": self.user_notes,
                                "model": getattr(self.inference_func, "name", "")})
        self.event_stream, self.uid = stream, stream.uid
        self._facts = None
        self._render_guides()
        return stream

    # -- summaries and titles ---------------------------------------------------------------------------------

    def _summarize_actions_if_due(self) -> None:
        due = summarize.action_range_due(self.event_stream, self.agent_config.max_consecutive_actions_to_summarize,
                                         self.config.prompt.recent_events_in_full)
        if due:
            self._add_summary(*due, reason="actions")

    def _summarize_task(self) -> None:
        task = summarize.task_range(self.event_stream)
        if task:
            self._add_summary(*task, reason="task_completion")

    def _summarize_segments(self, min_length: int) -> bool:
        added = False
        for start, end in summarize.unsummarized_segments(self.event_stream, self.config.prompt.recent_events_in_full):
            if end - start + 1 >= min_length:
                added = self._add_summary(start, end, reason="prompt_size") or added
        return added

    def _add_summary(self, start: int, end: int, reason: str) -> bool:
        try:
            summary = summarize.make_summary(lambda prompt: self._call_model(prompt, attach=False), self.event_stream,
                                             start, end, reason, self.config.prompt)
        except (ModelError, RunStopped, FormatError) as exc:
            if isinstance(exc, RunStopped) and exc.reason == "interrupt":
                return False
            self.logger.info("summary of events %d-%d failed: %s", start, end, exc)
            note = f"summary of events {start} to {end} failed (the history is kept in full): {exc}"
            self._record(Event("summary_failed", content=str(exc), message=note,
                               data={"start": start, "end": end, "reason": reason, "error": str(exc)}))
            return False
        summary.summary = clip(summary.summary, self.config.prompt.max_summary_chars)
        self.event_stream.event_summaries_list.append(summary)
        self.store.sync(self.event_stream)
        return True

    def _entitle(self, request: str) -> None:
        prompt = render_template("title.j2", self.config.prompt.template_dir, request=request[:2000])
        try:
            title = self._call_model(prompt)
        except (ModelError, RunStopped, FormatError) as exc:
            self.logger.info("no title: %s", exc)
            return
        title = self._masked_title(str(title)).strip("\"'. …")
        if title:
            self.event_stream.title = title
            self.store.sync(self.event_stream)

    def _masked_title(self, text: str) -> str:
        """A one-line title from `text`, its secrets masked before it is cut (so no fragment of one is left)."""
        from anges.shell import mask_secrets

        return title_from(mask_secrets(text, self._secrets))

    # -- plumbing ---------------------------------------------------------------------------------------------

    def _actions_by_type(self) -> dict[str, Action]:
        return {a.type.upper(): a for a in self.registered_actions}

    def _render_guides(self) -> None:
        for action in self.registered_actions:
            if action.guide_template:
                action.guide_prompt = self.render_guide(action)

    def render_guide(self, action: Action) -> str:
        """The guide of one built-in action, rendered from its `guide_template`."""
        return render_template(
            action.guide_template, self.config.prompt.template_dir, shell=self._prompt_facts()["shell"],
            sandbox=self._prompt_facts()["sandbox"], default_timeout=int(self.agent_config.shell_cmd_timeout),
            max_timeout=int(self.agent_config.max_shell_cmd_timeout), agent=self, action=action)

    def _add_mcp_action(self) -> None:
        """Offer USE_MCP_TOOL when an MCP manager is attached and at least one of its servers has tools."""
        from anges.actions.mcp import UseMCPTool

        if not self.mcp_tools or self.mcp is None or any(isinstance(a, UseMCPTool) for a in self.registered_actions):
            return
        if any(self.mcp.tools().values()):
            self.registered_actions.append(UseMCPTool(self.mcp))

    def _prompt_facts(self) -> dict:
        if self._facts is None:  # once per run: they are part of the prompt's stable prefix
            from anges.shell import find_shell

            self._facts = {"os": platform.system(), "shell": os.path.basename(find_shell()),
                           "cwd": self.cmd_init_dir, "prefix_cmd": self.prefix_cmd,
                           "sandbox": self._safety.facts() if self._safety else None}
        return self._facts

    def _new_safety(self) -> RunSafety:
        from anges.safety import RunSafety

        return RunSafety(self.config.safety, self.cmd_init_dir, self.approval, runners=self._kept_runners)

    def _action_context(self, reply: ParsedReply, permit: Permit | None = None) -> ActionContext:
        runner = self._safety.runner_for(permit) if self._safety and permit else None
        return ActionContext(agent=self, config=self.agent_config, cwd=self.cmd_init_dir,
                             prefix_cmd=self.prefix_cmd, interrupt_check=self._stop_requested, reply=reply,
                             record=self._record, secrets=self._secrets, env=self._env, runner=runner,
                             sandbox=runner.settings if runner is not None else None,
                             escalated=permit is not None and permit.escalate,
                             checked_paths=permit.verdict.paths if permit is not None else None)

    def _legacy_run_config(self) -> dict:
        return {
            "event_stream": self.event_stream,
            "inference_func": self.inference_func,
            "cmd_init_dir": self.cmd_init_dir,
            "prefix_cmd": self.prefix_cmd,
            "agent_config": self.agent_config,
            "max_consecutive_actions_to_summarize": self.agent_config.max_consecutive_actions_to_summarize,
            "agent_message_base": f"Agent {self.uid}",
            "message_handler_func": self.handle_user_visible_messages,
            "logger": self.logger,
            "interrupt_check": self._stop_requested,
            "store": self.store,
            "agent": self,
        }


def _mask_event(event: Event, secrets: list[str]) -> None:
    """Replace known secret values in every text field of an event, structured data included."""
    if not secrets:
        return
    from anges.shell import mask_secrets

    for name in ("content", "message", "reasoning", "analysis"):
        setattr(event, name, mask_secrets(getattr(event, name) or "", secrets))
    data = json.dumps(event.data)
    if any(secret in data for secret in secrets):
        event.data = json.loads(mask_secrets(data, secrets))


def _cap_event(event: Event, limit: int) -> None:
    """Cut every text of an event to `limit` characters (after masking, so no secret is split); a diff past it
    becomes the number of lines it changes."""
    if limit <= 0:
        return
    diff = event.data.get("diff")
    if isinstance(diff, str) and len(diff) > limit:
        from anges.fileedit import summarize_diff

        summary = summarize_diff(diff)
        event.data["diff"] = summary
        event.content = (event.content or "").replace(diff, summary)
    for name in ("content", "message", "reasoning", "analysis"):
        text = getattr(event, name)
        if isinstance(text, str) and len(text) > limit:
            setattr(event, name, clip(text, limit))
    event.data = _clip_texts(event.data, limit)


def _clip_texts(value, limit: int):
    if isinstance(value, str):
        return clip(value, limit)
    if isinstance(value, dict):
        return {key: _clip_texts(item, limit) for key, item in value.items()}
    if isinstance(value, list):
        return [_clip_texts(item, limit) for item in value]
    return value


def _jsonable(details: dict) -> dict:
    return json.loads(json.dumps(details, default=str))
