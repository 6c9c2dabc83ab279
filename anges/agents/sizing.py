"""An agent's prompts sized to its model's context window, and no prompt cut without the run saying so.

At the start of each run the model's window is looked up (a provider asks its server once), with the server's
tokenizer where it has one, and the history's limits are scaled to the room the window leaves after the reply's and
the fixed part's (`anges.prompt.sizing`). Each prompt must fit the room in tokens: counted by the server's
tokenizer, piece by piece, or estimated by kind of text from the counts the server reports. A reply that shows the
prompt did not fit (the server read fewer tokens than were sent, read the same number while the prompt grew,
shifted its context while it answered, or ran out of window in the reply) is not used: `check` raises
ContextExceeded, and the agent folds and asks again once, then stops (see `ModelCalls`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from anges.exceptions import ContextExceeded, RunStopped
from anges.models.tokens import MIN_SAMPLE_CHARS, PieceCounter, TokenGauge
from anges.models.window import Window, looked_through, prompt_room, reply_room, window_of
from anges.prompt.sizing import room_for_agents_md, sized
from anges.store.events import Event
from anges.util.waiting import wait_for

if TYPE_CHECKING:
    from anges.config.types import AgentConfig, Config, PromptConfig

SHELL_OUTPUT_SHARE = 0.8
"""Of an event's room in the history, what a command's output keeps (the rest: the command, its exit code, ...)."""
FLAT_RATE = 16
"""A prompt grown by N characters whose reported count grew by fewer than N / FLAT_RATE tokens was cut."""
SOURCES = {"preset": "set in its preset", "server": "as its server said", "known": "known for this model",
           "assumed": "assumed: nobody said", "model": "the model object's own",
           "lowered": "lowered after a prompt did not fit"}
"""What each source of a window means, for messages."""


class Sized(Protocol):
    """What sizing needs of the agent."""

    config: Config
    agent_config: AgentConfig
    inference_func: Callable[..., Any]


class Sizing:
    """The window of an agent's model, the count of tokens, and the limits of the current run."""

    def __init__(self, agent: Sized):
        self.agent = agent
        self.gauge = TokenGauge()
        self.counter: PieceCounter | None = None
        """Counts with the server's own tokenizer (None: the server has none, and the gauge estimates)."""
        self.window: Window | None = None
        """The model's context window (None: the model says nothing of one, and the configured limits hold)."""
        self.prompt: PromptConfig = agent.config.prompt
        """The prompt limits of the current run: the configured ones, scaled down for a small window."""
        self.actions: AgentConfig = agent.agent_config
        """The agent's settings for the actions of the current run (a command's output cap scaled down)."""
        self._stop: Callable[[], bool] = lambda: False
        self._last_step: tuple[int, int] | None = None
        """The characters of the last step's prompt and the prompt tokens its reply reported."""
        self._learned = False
        """The window was learned from the server's numbers in a run: later runs keep it."""

    def new_run(self, fixed_text: Callable[[], str], stop: Callable[[], bool]) -> dict:
        """Look up the window and the tokenizer (if not yet known) and scale the run's limits to them; the facts
        for the run's first event. `fixed_text()` renders the prompt's fixed part; `stop()` ends the wait."""
        config, actions = self.agent.config.prompt, self.agent.agent_config
        self.prompt, self.actions, self._stop, self._last_step = config, actions, stop, None
        if self.window is None or not self._learned:
            self.window, count = _lookup(self.agent.inference_func, stop)
            if count is not None and self.counter is None:
                self.counter = PieceCounter(count, self.gauge, self._name())
        if self.window is None:
            return {}
        room = self.room()
        self.prompt = room_for_agents_md(config, self.gauge.chars(room))  # AGENTS.md is in the fixed part: cap it
        fixed = fixed_text()
        history = self.gauge.chars(max(room - self.tokens(fixed), 0))
        self.prompt = sized(config, len(fixed) + history, len(fixed)).model_copy(
            update={"max_prompt_chars": config.max_prompt_chars})  # the room is in tokens: `fit` holds it
        cap = max(int(self.prompt.max_event_chars * SHELL_OUTPUT_SHARE), 100)
        self.actions = actions.model_copy(update={"shell_output_cap": min(actions.shell_output_cap, cap)})
        return {**self.window.facts(), "token_count": self.counted_by()}

    def counted_by(self) -> str:
        """How prompts are counted: "server" (its tokenizer) or "estimate"."""
        return "server" if self.counter is not None and not self.counter.failed else "estimate"

    def room(self) -> int:
        """The tokens a prompt may take (the window less the reply's room and a margin)."""
        window = self.window
        maximum = self.agent.config.model_settings.max_output_tokens
        return prompt_room(window.tokens, maximum) if window else 0

    def tokens(self, text: str) -> int:
        """The tokens of `text`: the server's count where it has a tokenizer (each piece asked once), else the
        estimate."""
        counted = self.counter.count(text, self._stop) if self.counter is not None else None
        return counted if counted is not None else self.gauge.estimate(text)

    def fit(self, prompt: str) -> int:
        """The characters of `prompt` that fit: all of it, or fewer, at its own rate of characters per token."""
        limit = self.prompt.max_prompt_chars
        if self.window is None:
            return min(len(prompt), limit)
        tokens, room = self.tokens(prompt), self.room()
        if tokens <= room:
            return min(len(prompt), limit)
        return min(limit, int(len(prompt) * room / tokens * 0.97))

    def reply_tokens(self) -> int:
        """The reply's room: `max_output_tokens`, less for a small window."""
        maximum = self.agent.config.model_settings.max_output_tokens
        return maximum if self.window is None else reply_room(self.window.tokens, maximum)

    def check(self, prompt: str, reply: Any, step: bool = False) -> None:
        """ContextExceeded when the reply shows the prompt did not fit (see the module); otherwise the reported
        count corrects the estimate. `step`: the prompt is a step's (a summary's is not compared with it)."""
        usage = getattr(reply, "usage", None)
        if usage is None or usage.estimated or usage.input_tokens <= 0:
            return
        kept, out, name = usage.input_tokens, usage.output_tokens, self._name()
        exact = self.counted_by() == "server"
        sent = self.tokens(prompt)
        about = "" if exact else "about "
        if (kept * 1.1 + 16 < sent) if exact else self.gauge.cut_short(prompt, kept):
            raise ContextExceeded(f"{name} read only {kept:,} of the {about}{sent:,} prompt tokens sent", sent=sent,
                                  kept=kept, kind="cut")
        last, self._last_step = self._last_step, (len(prompt), kept) if step else self._last_step
        if step and last and len(prompt) - last[0] >= MIN_SAMPLE_CHARS and kept - last[1] < (
                len(prompt) - last[0]) / FLAT_RATE:
            raise ContextExceeded(f"{name} read {kept:,} prompt tokens of a prompt that grew by "
                                  f"{len(prompt) - last[0]:,} characters since it read {last[1]:,}: it reads only "
                                  "part of it", sent=sent, kept=kept, kind="cut")
        window = self.window
        if window is not None and window.source == "server" and (
                kept + out > window.tokens or (kept + out == window.tokens and reply.finish_reason != "length")):
            raise ContextExceeded(f"{name} used {kept:,} prompt and {out:,} reply tokens, more than its window of "
                                  f"{window.tokens:,}: it dropped the start of the prompt while it answered (a context "
                                  "shift)", sent=sent, kept=kept, prompt_tokens=kept, kind="shifted")
        if window is not None and getattr(reply, "finish_reason", "") == "length" and (
                kept + out >= window.tokens - 16 or (window.source != "server" and out < self.reply_tokens() * 0.9)):
            raise ContextExceeded(f"{name}'s context window filled {out:,} tokens into the reply ({kept:,} prompt "
                                  f"tokens; {self.reply_tokens():,} were asked for the reply)", sent=sent, kept=kept,
                                  window=kept + out, prompt_tokens=kept, kind="full")
        if not exact:
            self.gauge.observe(prompt, kept)

    def exceeded(self, error: ContextExceeded, again: bool, prompt: str = "") -> Event:
        """After a prompt did not fit: the event that says so, the window set to the server's (where it named it) or
        lowered below that prompt's size for the rest of the run; RunStopped (naming the window) when it happens
        `again` right after a fold."""
        window, name = self.window, self._name()
        if error.prompt_tokens and prompt and self.counted_by() != "server":
            self.gauge.observe(prompt, error.prompt_tokens, exact=True)  # the server's own count of that prompt
        facts = {key: value for key, value in {
            "kind": error.kind, "sent_tokens": error.sent, "kept_tokens": error.kept, "server_window": error.window,
            "server_prompt_tokens": error.prompt_tokens, "detail": str(error)}.items() if value is not None}
        facts.update(window.facts() if window else {})
        sized = f"; anges sized prompts to a window of {window.tokens:,} tokens ({SOURCES[window.source]})" if (
            window) else ""
        if again:
            advice = ("The server's window is too small for the instructions and the newest events: give it a larger "
                      "one" if window and window.source == "server" else "Set the window the server really gives the "
                      "model as `context_window` in its preset")
            raise RunStopped("context_window", f"the prompt does not fit the context window of {name}, even with the "
                             f"history folded: {error}{sized}. {advice} (see docs/models.md)", **facts)
        self._learn(error, name)
        if self.window is not None:  # the event says the window the run uses from now on
            facts.update(self.window.facts(), sized_to=window.tokens if window else 0)
        under = f", with prompts kept under {self.room():,} tokens of a {self.window.tokens:,}-token window" if (
            self.window) else ""
        counted = ("; prompts are counted with its tokenizer" if self.counted_by() == "server" else
                   f"; by the server's count, anges' estimate of {error.sent:,} was low and is corrected" if (
                       error.prompt_tokens and error.sent and error.prompt_tokens > error.sent) else "")
        message = (f"{error}{sized}{counted}. The model did not read the whole prompt, or could not finish its reply, "
                   f"so the reply is not used: the history is folded and the model asked again{under}.")
        return Event("context_exceeded", content=message, message=message, data=facts)

    def _learn(self, error: ContextExceeded, name: str) -> None:
        window = self.window
        if error.window:
            detail = "its reply ran out of window" if error.kind == "full" else "its refusal"
            self.window = Window(min(error.window, window.tokens) if window else error.window, "server",
                                 f"{name}: {detail}")
        elif error.sent and error.kind in ("cut", "refused"):  # it did not take what was sent: its window is less
            self.window = Window(min(window.tokens, error.sent) if window else error.sent, "lowered")
        self._learned = True
        learn = looked_through(self.agent.inference_func, "learn_window")
        if learn is not None and self.window is not None:
            learn(self.window)  # the provider's reply room (and Ollama's num_ctx) follow

    def too_small(self, prompt: str) -> RunStopped:
        """The stop for a prompt that cannot be made to fit: its fixed part alone takes the room."""
        window = self.window or Window(0, "assumed")
        reply = self.reply_tokens()
        return RunStopped("context_window", f"the prompt's instructions alone (about {self.tokens(prompt):,} tokens, "
                          f"with the action guides and notes) do not fit the context window of {self._name()}: "
                          f"{window.tokens:,} tokens ({SOURCES.get(window.source, window.source)}), {reply:,} of "
                          "them kept for the reply. Use a model with a larger window, or set its real window as "
                          "`context_window` in its preset (see docs/models.md)", reply_tokens=reply, **window.facts())

    def _name(self) -> str:
        return getattr(self.agent.inference_func, "name", "") or "the model"


def _lookup(model: Any, stop: Callable[[], bool]) -> tuple[Window | None, Callable[[str], int] | None]:
    """`window_of(model)` and its server's tokenizer; on a thread of their own, given up when `stop()`, for a
    model that may ask its server."""
    tokenizer = looked_through(model, "tokenizer")
    if looked_through(model, "window") is None:
        return window_of(model), None
    found: dict[str, Any] = {}
    done = threading.Event()

    def find() -> None:
        try:
            found["window"] = window_of(model)
            found["count"] = tokenizer() if tokenizer is not None else None
        except BaseException as exc:  # handed to the waiting thread
            found["error"] = exc
        finally:
            done.set()

    threading.Thread(target=find, name="anges-window", daemon=True).start()
    if wait_for(done.wait, stop) != "done":
        return None, None
    if "error" in found:
        raise found["error"]
    return found["window"], found["count"]
