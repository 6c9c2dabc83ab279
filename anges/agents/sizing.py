"""An agent's prompts sized to its model's context window, and no prompt cut without the run saying so.

At the start of each run the model's window is looked up (a provider asks its server once) and the history's limits
are scaled to the room it leaves after the reply's and the fixed part's (`anges.prompt.sizing`). Each prompt must fit
`limit()` characters, by an estimate of its tokens that the provider's reported counts correct as the run goes. A
reply whose reported prompt tokens are far fewer than were sent came from a model that did not read the whole
prompt: `check` raises ContextExceeded, and the agent folds and asks again once, then stops (see `ModelCalls`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from anges.exceptions import ContextExceeded, RunStopped
from anges.models.window import TokenGauge, Window, prompt_room, reply_room, window_of
from anges.prompt.sizing import room_for_agents_md, sized
from anges.store.events import Event
from anges.util.waiting import wait_for

if TYPE_CHECKING:
    from anges.config.types import AgentConfig, Config, PromptConfig

SHELL_OUTPUT_SHARE = 0.8
"""Of an event's room in the history, what a command's output keeps (the rest: the command, its exit code, ...)."""
_SOURCES = {"preset": "set in its preset", "server": "as its server reported", "known": "known for this model",
            "assumed": "assumed: nobody said", "model": "the model object's own",
            "lowered": "lowered after the server cut a prompt"}


class Sized(Protocol):
    """What sizing needs of the agent."""

    config: Config
    agent_config: AgentConfig
    inference_func: Callable[..., Any]


class Sizing:
    """The window of an agent's model, the estimate of tokens, and the limits of the current run."""

    def __init__(self, agent: Sized):
        self.agent = agent
        self.gauge = TokenGauge()
        self.window: Window | None = None
        """The model's context window (None: the model says nothing of one, and the configured limits hold)."""
        self.prompt: PromptConfig = agent.config.prompt
        """The prompt limits of the current run: the configured ones, scaled down for a small window."""
        self.actions: AgentConfig = agent.agent_config
        """The agent's settings for the actions of the current run (a command's output cap scaled down)."""

    def new_run(self, fixed_size: Callable[[], int], stop: Callable[[], bool]) -> dict:
        """Look up the window (if not yet known) and scale the run's limits to it; the facts for the run's first
        event. `fixed_size()` measures the prompt's fixed part; `stop()` ends the wait for the server."""
        config, actions = self.agent.config.prompt, self.agent.agent_config
        self.prompt, self.actions = config, actions
        if self.window is None or self.window.source != "lowered":
            self.window = _lookup(self.agent.inference_func, stop)
        if self.window is None:
            return {}
        room = self._room(self.window)
        self.prompt = room_for_agents_md(config, room)  # the fixed part holds AGENTS.md: cap it before measuring
        self.prompt = sized(config, room, fixed_size())
        cap = max(int(self.prompt.max_event_chars * SHELL_OUTPUT_SHARE), 100)
        self.actions = actions.model_copy(update={"shell_output_cap": min(actions.shell_output_cap, cap)})
        return self.window.facts()

    def limit(self) -> int:
        """The most characters a prompt may have now (the estimate is corrected as the run goes)."""
        window = self.window
        return self.prompt.max_prompt_chars if window is None else min(self.prompt.max_prompt_chars, self._room(window))

    def reply_tokens(self) -> int:
        """The reply's room: `max_output_tokens`, less for a small window."""
        maximum = self.agent.config.model_settings.max_output_tokens
        return maximum if self.window is None else reply_room(self.window.tokens, maximum)

    def check(self, prompt: str, reply: Any) -> None:
        """ContextExceeded when the reply's reported prompt tokens are too few for the prompt sent (the server cut
        it); otherwise the count corrects the estimate."""
        usage = getattr(reply, "usage", None)
        if usage is None or usage.estimated or usage.input_tokens <= 0:
            return
        if self.gauge.cut_short(len(prompt), usage.input_tokens):
            sent = self.gauge.tokens(len(prompt))
            raise ContextExceeded(f"{self._name()} read only {usage.input_tokens:,} of the about {sent:,} prompt "
                                  "tokens sent", sent=sent, kept=usage.input_tokens)
        self.gauge.observe(len(prompt), usage.input_tokens)

    def exceeded(self, error: ContextExceeded, again: bool) -> Event:
        """After a prompt did not fit: the event that says so, the window lowered below that prompt's size for the
        rest of the run; RunStopped (naming the window) when it happens `again` right after a fold."""
        window = self.window
        facts = {"sent_tokens": error.sent, "kept_tokens": error.kept, "detail": str(error),
                 **(window.facts() if window else {})}
        sized = f"; anges sized prompts to a window of {window.tokens:,} tokens ({_SOURCES[window.source]})" if (
            window) else ""
        if again:
            raise RunStopped("context_window", f"the prompt does not fit the context window of {self._name()}, even "
                             f"with the history folded: {error}{sized}. Set the window the server really gives the "
                             "model as `context_window` in its preset (see docs/models.md)", **facts)
        if error.sent:
            self.window = Window(min(window.tokens, error.sent) if window else error.sent, "lowered")
        under = f", with prompts kept under {self.window.tokens:,} tokens" if self.window else ""
        message = (f"{error}{sized}. The model did not read the whole prompt, so its reply is not used: the history "
                   f"is folded and the model asked again{under}.")
        return Event("context_exceeded", content=message, message=message, data=facts)

    def too_small(self, prompt: str) -> RunStopped:
        """The stop for a prompt that cannot be made to fit: its fixed part alone takes the room."""
        window = self.window or Window(0, "assumed")
        reply = self.reply_tokens()
        return RunStopped("context_window", f"the prompt's instructions alone (about "
                          f"{self.gauge.tokens(len(prompt)):,} tokens, with the action guides and notes) do not fit "
                          f"the context window of {self._name()}: {window.tokens:,} tokens "
                          f"({_SOURCES.get(window.source, window.source)}), {reply:,} of them kept for the reply. Use "
                          "a model with a larger window, or set its real window as `context_window` in its preset "
                          "(see docs/models.md)", reply_tokens=reply, **window.facts())

    def _room(self, window: Window) -> int:
        maximum = self.agent.config.model_settings.max_output_tokens
        return self.gauge.chars(prompt_room(window.tokens, maximum))

    def _name(self) -> str:
        return getattr(self.agent.inference_func, "name", "") or "the model"


def _lookup(model: Any, stop: Callable[[], bool]) -> Window | None:
    """`window_of(model)`; on a thread of its own, given up when `stop()`, for a model that may ask its server."""
    if not _may_ask(model):
        return window_of(model)
    found: dict[str, Any] = {}
    done = threading.Event()

    def find() -> None:
        try:
            found["window"] = window_of(model)
        except BaseException as exc:  # handed to the waiting thread
            found["error"] = exc
        finally:
            done.set()

    threading.Thread(target=find, name="anges-window", daemon=True).start()
    if wait_for(done.wait, stop) != "done":
        return None
    if "error" in found:
        raise found["error"]
    return found["window"]


def _may_ask(model: Any) -> bool:
    """Whether a model (or one it wraps) has a `window()` to call, which may ask a server."""
    for _ in range(8):
        if model is None:
            return False
        if callable(getattr(model, "window", None)):
            return True
        model = getattr(model, "inner", None)
    return False
