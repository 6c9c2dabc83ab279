"""Python hooks: the plug-ins' hook functions (pluggy, `anges.plugins`), each given a read-only view of the run."""

from __future__ import annotations

import copy
import logging
import os
import sys
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

from anges.hooks.answers import Outcome, answer_outcome
from anges.util.waiting import future_done, wait_for

if TYPE_CHECKING:
    from anges.config.types import Config
    from anges.store.events import Event, EventStream

log = logging.getLogger("anges.hooks")
_warned: set[str] = set()
TIMEOUT = 60.0
"""Seconds a Python hook may take; then the run goes on without its answer (its thread cannot be ended)."""


class Spending(Protocol):
    """What a run used so far (an `anges.agents.budget.Budget`)."""

    model_calls: int
    tokens: int
    cost: float


@dataclass(frozen=True)
class RunView:
    """What a Python hook may read of the run: who runs it, where, the configuration, the stream's settings, the
    events so far and the usage. Events and settings are copies: a hook cannot change the run through them."""

    run_id: str
    agent_id: str
    agent_type: str
    parent_ids: tuple[str, ...]
    cwd: str
    config: Config
    """The whole configuration (frozen)."""
    _stream: EventStream
    _budget: Spending | None

    @property
    def events(self) -> tuple[Event, ...]:
        """The stream's events so far (copies)."""
        return tuple(copy.deepcopy(event) for event in self._stream.events_list)

    @property
    def settings(self) -> Mapping[str, Any]:
        """The stream's settings: working directory, agent type, model, notes."""
        return MappingProxyType(copy.deepcopy(self._stream.get_settings()))

    @property
    def usage(self) -> dict[str, Any]:
        """What the run (with its children) used so far: model calls, tokens, cost."""
        budget = self._budget
        if budget is None:
            return {"model_calls": 0, "tokens": 0, "cost": 0.0}
        return {"model_calls": budget.model_calls, "tokens": budget.tokens, "cost": round(budget.cost, 6)}


@dataclass(frozen=True)
class PythonHook:
    """One plug-in's function for one event."""

    plugin: str
    function: Callable[..., Any]
    argnames: tuple[str, ...]

    def run(self, view: RunView, data: dict, stop: Callable[[], bool]) -> Outcome:
        """Call it on a thread of its own (so a stop or its timeout ends the wait) and read its answer."""
        import time

        started = time.monotonic()
        arguments = {"run": view, "data": copy.deepcopy(data)}
        answer: Future = Future()

        def call() -> None:
            try:
                answer.set_result(self.function(**{name: arguments[name] for name in self.argnames}))
            except BaseException as exc:  # noqa: BLE001  (someone else's code: its failure is recorded)
                answer.set_exception(exc)

        threading.Thread(target=call, name=f"anges-hook-{self.plugin}", daemon=True).start()
        ended = wait_for(future_done(answer), stop, TIMEOUT)
        if ended == "timeout":
            outcome = Outcome("timeout", reason=f"it did not return within {TIMEOUT:g} s; the run went on without it")
        elif ended == "stopped":
            outcome = Outcome("stopped", reason="the run stopped before it returned")
        elif answer.exception() is not None:
            error = answer.exception()
            outcome = Outcome("failed", reason=f"{type(error).__name__}: {error}")
        else:
            outcome = answer_outcome(answer.result())
        outcome.duration = round(time.monotonic() - started, 3)
        return outcome


def python_hooks(config: Config) -> dict[str, list[PythonHook]] | None:
    """The Python hooks a run calls, by event: plug-ins named in `plugin_hooks` (or all, with `*`), the extensions in
    ANGES_HOME/extensions, and plug-ins registered from code. None when there are none (nothing is loaded)."""
    from_code = "anges.plugins" in sys.modules and "code" in sys.modules["anges.plugins"].plugins.sources.values()
    if not (config.plugin_hooks or from_code or os.path.isdir(_extensions_folder())):
        return None
    from anges.config.types import HOOK_EVENTS
    from anges.plugins import plugins

    manager, wanted = plugins.manager(), set(config.plugin_hooks)
    extensions = set(plugins.load_extensions())  # this ANGES_HOME's, loaded once per process

    def selected(name: str) -> bool:
        source = plugins.sources.get(name)
        return name in extensions or source == "code" or (source == "installed" and ("*" in wanted or name in wanted))

    for name in sorted(wanted - {"*"} - set(plugins.sources) - _warned):
        _warned.add(name)
        log.warning("plugin_hooks names %s, which is no installed plug-in (%s)", name,
                    plugins.failures.get(name, "not found"))
    found = {event: [PythonHook(impl.plugin_name, impl.function, tuple(impl.argnames))
                     for impl in reversed(getattr(manager.hook, event).get_hookimpls()) if selected(impl.plugin_name)]
             for event in HOOK_EVENTS}
    return {event: hooks for event, hooks in found.items() if hooks} or None


def _extensions_folder() -> str:
    from anges.config.loading import anges_home

    return str(anges_home() / "extensions")
