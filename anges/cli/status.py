"""The status line of a run as it works: the model, the sandbox, elapsed time, steps, tokens, cost and cache hits."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field

from anges.cli.terminal import seconds
from anges.models.base import estimate_tokens
from anges.store.plans import Plan
from anges.util.clipping import one_line, shorten
from anges.util.printable import printable

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
RUNNING = "running "
"""How the activity of a command begins: `running ls -la`."""
FOLDING = "compacting…"
"""What an agent does while its history is folded (the fold's model call is no step's thinking)."""


@dataclass
class Usage:
    """Tokens, model calls, cost and cached input added up over events (a request's, or a whole session's)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    model_calls: int = 0
    cost: float | None = None
    steps: int = 0
    """Actions taken; the answer that ends a run is not one (`is_step`)."""
    runs_ended: int = 0
    """Runs that ended (completed, answered, asked for help or stopped), a child agent's too."""
    estimated: bool = False
    """Some input tokens were estimated (the model reported none)."""

    def add(self, event) -> None:
        """Count one recorded event (its step, and the model usage that led to it)."""
        from anges.store.events import RETURN_TO_PARENT_EVENT_TYPES, StepUsage, is_step

        self.steps += is_step(event, answer=False)
        self.runs_ended += event.type in RETURN_TO_PARENT_EVENT_TYPES
        self.charge(StepUsage.of(event.data))

    def charge(self, usage) -> None:
        """Count the model usage of one event (a `StepUsage`; None: it records none)."""
        if usage is None:
            return
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.cached_tokens += usage.cached_tokens
        self.model_calls += usage.model_calls
        self.estimated = self.estimated or usage.estimated
        if usage.cost is not None:
            self.cost = (self.cost or 0.0) + usage.cost

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def cache_hits(self) -> float | None:
        """The share of input tokens read from the provider's cache (None before any input)."""
        from anges.agents.budget import cache_hit_ratio

        return cache_hit_ratio(self.cached_tokens, self.input_tokens, self.estimated)

    def parts(self) -> list[str]:
        """`3 steps`, `4,210 tokens`, `$0.0123`, `62% cached`: what there is to say."""
        parts = [f"{self.steps} step{'s' if self.steps != 1 else ''}"]
        if self.tokens:
            parts.append(f"{self.tokens:,} tokens")
        if self.cost is not None:
            parts.append(f"${self.cost:.4f}")
        if self.cached_tokens and self.cache_hits is not None:
            parts.append(f"{self.cache_hits:.0%} cached")
        return parts


@dataclass
class Status:
    """What the status line says; updated from the agent's threads, read by the screen's."""

    model: str = ""
    sandbox: str = ""
    approval: str = ""
    activity: str = ""
    """thinking, running `ls`, waiting for 2 child agents, stopping...; empty when no request runs."""
    started: float = 0.0
    runs: int = 0
    """Requests begun so far: what a model call of an earlier one says is not this one's."""
    run: Usage = field(default_factory=Usage)
    session: Usage = field(default_factory=Usage)
    plan: Plan | None = None
    """The top agent's plan, while it has steps (`plan 2/5` on the line)."""
    window: dict = field(default_factory=dict)
    """The model's context window as the run's events last said it (`context_window`, `context_window_source`,
    `context_window_detail`, `token_count`): what the status line and `/status` show."""
    prompt_tokens: int = 0
    """The input tokens of the last model call (as its server counted them, else estimated): how full the window is."""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    held: str = ""
    """What the line says whatever the agents do (a question waiting for the user's answer); "" when nothing."""
    agents: dict[str, str] = field(default_factory=dict, repr=False)
    """What each agent of the request's tree does now, by its id, the latest last (the line says the latest)."""
    children: set[str] = field(default_factory=set, repr=False)
    """The child agents running (their parents wait for them)."""

    def describe(self, agent, safety) -> None:
        """Say which model the agent uses and which sandbox and approval mode its run gets."""
        name = getattr(agent.inference_func, "name", "") or "model"
        scheme, colon, rest = name.partition(":")
        if colon and "/" in rest:  # scripted:FILE, replay:FILE: the file's name says enough
            name = f"{scheme}:{rest.rsplit('/', 1)[-1]}"
        with self.lock:
            self.model = name
            self.sandbox, self.approval = safety.sandbox, safety.approval or "ask"

    def begin(self) -> None:
        """A request starts."""
        with self.lock:
            self.run, self.started, self.activity = Usage(), time.monotonic(), "thinking"
            self.runs += 1
            self.held = ""
            self.agents.clear()
            self.children.clear()

    def end(self) -> None:
        """The request ended."""
        with self.lock:
            self.activity = ""

    def recorded(self, event, agent: str = "", depth: int = 0) -> None:
        """An event was recorded by `agent` (any agent of the tree: `depth` 0 is the top one's): the command it ran,
        or the step it took, is done (what it does next, it says); one that tells the model's window updates it, and
        the top agent's plan update the plan."""
        from anges.store.events import ChildReturn, ShellRun

        plan = Plan.of(event) if depth == 0 else None
        with self.lock:
            self.run.add(event)
            self.session.add(event)
            if not self.agents.get(agent, "").startswith(RUNNING) or ShellRun.of(event) is not None:
                self.agents.pop(agent, None)
            if event.type == "child_agent_running":
                self.children.add(str(event.data.get("agent_id", "")))
            elif (returned := ChildReturn.of(event)) is not None:
                self.children.discard(returned.agent_id)
            data = event.data if isinstance(getattr(event, "data", None), dict) else {}
            if isinstance(data.get("context_window"), int):
                self.window = {key: data[key] for key in WINDOW_FACTS if key in data}
            if plan is not None:
                self.plan = plan if plan.total else None
            self._settle()

    def charged(self, usage: dict | None, cost: float | None) -> None:
        """Model usage outside a request (a `/compact` fold): the session's totals count it."""
        from anges.store.events import StepUsage

        with self.lock:
            self.session.charge(StepUsage.of({"usage": usage, "cost": cost}))

    def window_text(self) -> str:
        """`8,192-token window (server) ▰▰▰▱▱▱▱▱▱▱ 34%`: the window, where it came from and how full the last
        prompt made it (empty before a run said it)."""
        tokens = self.window.get("context_window")
        if not tokens:
            return ""
        text = f"{tokens:,}-token window ({self.window.get('context_window_source', '?')})"
        return f"{text} {gauge(self.fill)}" if self.fill is not None else text

    @property
    def fill(self) -> float | None:
        """The share of the window the last prompt took (None before a model call, or with no window known)."""
        tokens = self.window.get("context_window")
        return min(self.prompt_tokens / tokens, 1.0) if tokens and self.prompt_tokens else None

    def prompted(self, tokens: int) -> None:
        """A model call read `tokens` input tokens."""
        with self.lock:
            self.prompt_tokens = tokens

    def doing(self, activity: str, run: int | None = None, agent: str | None = None) -> None:
        """What the request does now (`agent`: what that agent of it does, "" to say it does nothing the line can
        name); unless it is stopping or over, or `run` (a number of `runs`) is an earlier one's (a dropped model call
        can end after its request)."""
        with self.lock:
            if self.activity in ("", "stopping") or run not in (None, self.runs):
                return
            if agent is None:
                self.activity = activity
                return
            if activity == "thinking" and self.agents.get(agent) == FOLDING:
                return
            self.agents.pop(agent, None)
            if activity:
                self.agents[agent] = activity
            self._settle()

    def hold(self, activity: str) -> None:
        """Say `activity` (a question asked) whatever the agents do, until `hold("")`."""
        with self.lock:
            self.held = activity
            self._settle()

    def _settle(self) -> None:
        if self.activity in ("", "stopping"):
            return
        waiting = len(self.children)
        self.activity = self.held or next(reversed(self.agents.values()), "") or (
            f"waiting for {waiting} child agent{'s' if waiting != 1 else ''}" if waiting else "working")

    @property
    def working(self) -> bool:
        return bool(self.activity)

    def line(self, width: int = 1000, now: float | None = None) -> str:
        """`⠹ thinking · 12.4s · 3 steps · 4,210 tokens · $0.0123 · 62% cached · openai:gpt-4.1 · sandbox workspace`
        while a request runs, the settings and the session's totals between requests; what fits in `width` (the
        activity is shortened to make room, then the last parts go)."""
        now = time.monotonic() if now is None else now
        with self.lock:
            window = self.window_text()
            model = shorten(self.model or "no model", 40)
            settings = [model, *([window] if window else []), f"sandbox {self.sandbox}", f"approval {self.approval}"]
            if not self.activity:
                done = self.session.parts()
                parts = [f"session: {done[0]}", *done[1:], *settings] if self.session.steps or self.session.runs_ended \
                    else settings
                return _fit(parts, width)
            glyph = SPINNER[int(now * 10) % len(SPINNER)]
            activity = self.activity
            plan = [f"plan {self.plan.done}/{self.plan.total}"] if self.plan is not None else []
            parts = [seconds(now - self.started), *plan, *self.run.parts(), *settings[:-1], "Esc stops"]
        for keep in range(len(parts), 0, -1):
            rest = " · " + " · ".join(parts[:keep])
            room = width - len(rest) - 2
            if room >= min(len(activity), 24):
                return f"{glyph} {shorten(activity, room)}{rest}"
        return _fit([f"{glyph} {activity}", *parts[:1]], width)


def gauge(share: float, cells: int = 10) -> str:
    """`▰▰▰▱▱▱▱▱▱▱ 34%`: a share drawn as a bar."""
    full = min(round(share * cells), cells)
    return "▰" * full + "▱" * (cells - full) + f" {share:.0%}"


WINDOW_FACTS = ("context_window", "context_window_source", "context_window_detail", "token_count")


def _fit(parts: list[str], width: int) -> str:
    line = " · ".join(parts)
    return line if len(line) <= width else shorten(line, width)


class WatchedModel:
    """A model wrapped so the status line says when it is thinking and what its reply runs next."""

    def __init__(self, model, status: Status):
        self.model = model
        self.status = status
        self.name = getattr(model, "name", "")

    def __call__(self, prompt: str, temperature: float = 0.0):
        from anges.agents.calls import calling_agent

        run, agent = self.status.runs, calling_agent()
        self.status.doing("thinking", run, agent)
        reply = None
        try:
            reply = self.model(prompt, temperature=temperature)
            usage = getattr(reply, "usage", None)
            tokens = getattr(usage, "input_tokens", 0) if usage is not None else 0
            self.status.prompted(tokens if isinstance(tokens, int) and tokens > 0 else estimate_tokens(str(prompt)))
            return reply
        finally:
            self.status.doing(printable(activity(reply)), run, agent)

    def __getattr__(self, name: str):
        return getattr(self.model, name)


def activity(reply) -> str:
    """What runs after a model reply: the first command it asks for, or generic work."""
    try:
        actions = json.loads(reply).get("actions") or []
        command = next(a["command"] for a in actions if a.get("action_type", "").upper() == "RUN_SHELL_CMD")
    except (TypeError, ValueError, AttributeError, KeyError, StopIteration):
        return "working"
    return f"{RUNNING}{one_line(str(command), 80)}"
