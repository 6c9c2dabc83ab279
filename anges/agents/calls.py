"""An agent's model calls: on a thread of their own, so a stop ends the wait at once; provider errors as stops; the
reply asked again when it is invalid or cut off; its text streamed to the delta handlers as it arrives."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from anges.agents.live import LiveOutput, LiveReply, ReplyDelta, told
from anges.agents.run import of_run
from anges.agents.sizing import Sizing
from anges.exceptions import ContextExceeded, FormatError, ModelError, ModelReplyError, ModelSetupError, RunStopped
from anges.models.base import ModelCall
from anges.models.cancel import CallThread, CancelToken
from anges.models.streaming import NOWHERE, listening
from anges.prompt.parsing import ParsedReply, parse_reply
from anges.prompt.templates import render_template
from anges.store.events import Event
from anges.util.clipping import clip, shorten
from anges.util.waiting import wait_for

FIT_ATTEMPTS = 3
"""Times a prompt over the window is cut and measured again before the run stops."""

if TYPE_CHECKING:
    from anges.actions.base import Action
    from anges.agents.listening import Listener
    from anges.agents.run import RunState
    from anges.config.types import AgentConfig, Config


MODEL_THREAD_PREFIX = "anges-model-"
"""An agent calls its model on the thread `anges-model-<its id>`."""


def calling_agent() -> str:
    """The id of the agent whose model call runs on this thread ("" when none does): several agents of a tree share
    one model, and what it is asked tells it nothing of who asks."""
    name = threading.current_thread().name
    return name[len(MODEL_THREAD_PREFIX):] if name.startswith(MODEL_THREAD_PREFIX) else ""


class Caller(Protocol):
    """What model calls need of the agent that makes them."""

    uid: str
    agent_type: str
    parent_ids: list[str]
    config: Config
    agent_config: AgentConfig
    logger: logging.Logger
    inference_func: Callable[..., Any]
    run_state: RunState | None
    secrets: list[str]
    listeners: list[Listener]

    def render_prompt(self, feedback: str = "", limit: int = 0) -> str: ...

    def check_limits(self) -> None: ...

    def stop_requested(self) -> bool: ...

    def actions_by_type(self) -> dict[str, Action]: ...


class ModelCalls:
    """Runs an agent's model calls one at a time on its call thread, each under a cancel token.

    On a stop the provider drops its request (a stream is closed) and gives up retrying, and the thread is left to
    finish alone (a daemon: it cannot keep the process alive).
    """

    def __init__(self, agent: Caller):
        self.agent = agent
        self.delta_handlers: list[Callable[[ReplyDelta], None]] = []
        """Called with each `ReplyDelta` of the agent's replies as they stream (on the call's thread)."""
        self.count = 0
        """Model calls made so far (the `call` number of the deltas)."""
        self.sizing = Sizing(agent)
        """The model's context window and the run's prompt limits."""
        self._thread: CallThread | None = None

    def ask(self) -> ParsedReply:
        """A valid reply from the model; an invalid or cut-off one is sent back with feedback, a bounded number of
        times (`max_invalid_replies`, `max_cut_off_replies`)."""
        agent = self.agent
        limits = agent.agent_config
        feedback, error, problem, invalid, cut, exceeded = "", "", "", 0, 0, 0
        while True:
            prompt = self._prompt(feedback)
            temperature = agent.config.model_settings.temperature + 0.1 * invalid
            reply = ""
            try:
                reply = self.reply(prompt, temperature, live=True)
                if getattr(reply, "finish_reason", "") == "length":
                    cut += 1
                    feedback = self._cut_off(cut, max(limits.max_cut_off_replies, 1))
                    continue
                return parse_reply(reply, agent.actions_by_type())
            except ContextExceeded as exc:  # the model did not read the whole prompt: its reply is not used
                exceeded += 1
                state = of_run(agent.run_state)
                state.context.record(self.sizing.exceeded(exc, again=exceeded > 1, prompt=prompt))
                state.history.shorten()
                continue
            except FormatError as exc:
                error, problem = exc.feedback, _problem(exc.feedback, reply)
            except ModelReplyError as exc:
                error = problem = str(exc)
            invalid += 1
            attempts = max(limits.max_invalid_replies, 1)
            agent.logger.info("invalid reply (attempt %d of %d): %s", invalid, attempts, error)
            if invalid >= attempts:
                raise RunStopped("invalid_replies", f"the model gave {attempts} invalid replies in a row; {problem}",
                                 last_error=error)
            of_run(agent.run_state).context.record(rejected(error, reply, invalid, attempts))
            feedback = render_template("invalid_reply.j2", agent.config.prompt.template_dir, error=error,
                                       attempt=invalid, max_attempts=attempts)

    def _prompt(self, feedback: str) -> str:
        """The prompt for the next step, within the window: a fold first, then the middle of the history cut (at
        most a few times, each measured again); RunStopped when even that cannot make it fit a model's window
        (without one, `reply` cuts the prompt's middle to `prompt.max_prompt_chars`)."""
        agent, sizing = self.agent, self.sizing
        prompt = agent.render_prompt(feedback)
        if sizing.fit(prompt) < len(prompt) and of_run(agent.run_state).history.shorten():
            prompt = agent.render_prompt(feedback)
        for _ in range(FIT_ATTEMPTS):
            limit = sizing.fit(prompt)
            if limit >= len(prompt):
                return prompt
            fitted = agent.render_prompt(feedback, limit)
            if len(fitted) >= len(prompt):
                break
            prompt = fitted
        if sizing.window is not None and sizing.fit(prompt) < len(prompt):
            raise sizing.too_small(prompt)
        return prompt

    def reply(self, prompt: str, temperature: float | None = None, attach: bool = True, live: bool = False) -> str:
        """One model call, charged to the run (its usage put on the next event when `attach`); `live` streams its
        analysis and reasoning to the delta handlers. ContextExceeded when the prompt did not fit the window."""
        agent = self.agent
        agent.check_limits()
        ledger = of_run(agent.run_state).ledger
        temperature = agent.config.model_settings.temperature if temperature is None else temperature
        prompt = clip(prompt, self.sizing.fit(prompt))
        started = time.time()
        try:
            reply = self.call(lambda: agent.inference_func(prompt, temperature=temperature), agent.stop_requested,
                              agent.check_limits, live)
        except BaseException as exc:
            if isinstance(exc, ContextExceeded):
                exc.sent = exc.sent or self.sizing.tokens(prompt)
            self._tell(prompt, temperature, started, error=exc)
            raise
        cost = ledger.count(reply if isinstance(reply, str) else "", prompt, attach)
        self._tell(prompt, temperature, started, reply, cost=cost)
        self.sizing.check(prompt, reply, step=live)
        return reply

    def _tell(self, prompt: str, temperature: float, started: float, reply: str | None = None,
              error: BaseException | None = None, cost: float | None = None) -> None:
        """Tell the listeners (if any) of a model call that ended."""
        agent = self.agent
        if agent.listeners:
            call = ModelCall(agent.inference_func, prompt, temperature, started, time.time() - started, reply, error,
                             cost)
            for listener in agent.listeners:
                listener.model_called(agent, call)

    def call(self, call: Callable[[], str], stop_requested: Callable[[], bool], check_limits: Callable[[], None],
             live: bool = False) -> str:
        """The reply of `call()`; RunStopped on a stop (`check_limits` says which) or a provider error."""
        try:
            return self._watch(call, stop_requested, check_limits, live)
        except (ModelReplyError, ContextExceeded) as exc:
            of_run(self.agent.run_state).budget.charge(exc.usage, None)  # a refused reply still cost tokens
            raise
        except ModelSetupError as exc:  # a rejected key, an unknown model: retrying cannot help
            raise RunStopped("model_setup", f"the model is not usable: {exc}", error=str(exc)) from None
        except ModelError as exc:
            raise RunStopped("model_error", f"the model call failed: {exc}", error=str(exc)) from None

    def _cut_off(self, count: int, limit: int) -> str:
        """The feedback after a reply cut off at max_output_tokens; RunStopped after `limit` in a row."""
        agent = self.agent
        tokens = self.sizing.reply_tokens()
        if count >= limit:
            raise RunStopped("reply_cut_off", f"the model's reply was cut off at max_output_tokens ({tokens}) "
                             f"{count} times in a row", limit=limit, max_output_tokens=tokens)
        agent.logger.info("reply cut off at max_output_tokens (%d of %d)", count, limit)
        return render_template("cut_off_reply.j2", agent.config.prompt.template_dir, attempt=count,
                               max_attempts=limit, max_output_tokens=tokens, action_types=list(agent.actions_by_type()))

    def _watch(self, call: Callable[[], str], stop_requested: Callable[[], bool], check_limits: Callable[[], None],
               live: bool) -> str:
        token = CancelToken()
        self.count += 1
        sink = self._sink(token) if live and self.delta_handlers else NOWHERE

        def streamed() -> str:
            with listening(sink):
                return call()

        thread = self._thread
        pending = thread.start(streamed, token) if thread is not None else None
        if thread is None or pending is None:  # no thread yet, or it ended while idle
            self._thread = thread = CallThread(f"{MODEL_THREAD_PREFIX}{self.agent.uid}")
            pending = thread.start(streamed, token)
        if pending is None:
            raise RuntimeError("a new model call thread took no call")
        if wait_for(pending.wait, stop_requested) == "stopped":
            token.cancel()
            thread.close()
            self._thread = None
            check_limits()
            raise RunStopped("interrupt", "the run was interrupted")  # a stop that `check_limits` did not see
        return pending.result()

    def _sink(self, token: CancelToken) -> LiveReply:
        return LiveReply(self.delta_handlers, self._tag(), self.agent.secrets, token)

    def output_sink(self, command: str) -> LiveOutput | None:
        """Where a command the last reply asked for sends its output as it runs; None when no one listens."""
        if not self.delta_handlers:
            return None
        return LiveOutput(self.delta_handlers, self._tag(), self.agent.secrets, command)

    def tell(self, field: str, text: str) -> None:
        """Tell the delta handlers what the run does between replies (`fold`: the history is being folded, `text`
        says which events); a view that fails does not fail the run."""
        told(self.delta_handlers, ReplyDelta(**self._tag(), field=field, text=text, analysis="", reasoning=""),
             f"a {field} delta")

    def _tag(self) -> dict:
        agent = self.agent
        return {"agent_id": agent.uid, "agent_type": agent.agent_type, "parent_ids": tuple(agent.parent_ids),
                "call": self.count}


def rejected(feedback: str, reply, attempt: int, attempts: int) -> Event:
    """The `reply_rejected` event of an invalid reply the model is asked again for: why, and how the reply began."""
    why = shorten(_why(feedback), 300)
    text = f"reply rejected: {why} (asked again)"
    return Event("reply_rejected", content=text, message=text,
                 data={"reason": why, "began": _began(reply), "attempt": attempt, "max_attempts": attempts})


def _problem(feedback: str, reply) -> str:
    """What was wrong with an invalid reply, told to a person: how the reply began, and why."""
    return f'last reply: "{_began(reply)}" ({_why(feedback)})'


def _why(feedback: str) -> str:
    """The feedback's first sentence, told to a person (written to the model, so "Your reply ..." becomes "it ...")."""
    why = re.split(r"(?<=\.)\s", feedback.strip(), maxsplit=1)[0].rstrip(".")
    return re.sub(r"^Your reply's\b", "its", re.sub(r"^Your reply\b", "it", why))


def _began(reply) -> str:
    return shorten(" ".join(str(reply).split()), 80)
