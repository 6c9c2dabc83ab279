"""Plug-ins: installed packages that add actions, model providers and agent types.

A plug-in is a module named by an entry point of the `anges.plugins` group whose hook functions are marked
`@hookimpl` (the hooks are the methods of `Hooks`). Plug-ins are loaded once, the first time a registry is
asked for a name it does not know or for all its names: never by `import anges` or `anges --help`.
See docs/plugins.md.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Protocol

import pluggy

GROUP = "anges.plugins"
hookspec = pluggy.HookspecMarker("anges")
hookimpl = pluggy.HookimplMarker("anges")
"""Marks a plug-in's hook functions: `@hookimpl def register_actions(register): register(MyAction)`."""

log = logging.getLogger(__name__)


class Register(Protocol):
    """Adds a class (or a `module:Class` path) to one registry, under `name` or the class's own."""

    def __call__(self, target: Any, name: str | None = None) -> None: ...


class Hooks:
    """The hooks a plug-in may implement. Each gets `register(cls, name=None)` of one registry."""

    @hookspec
    def register_actions(self, register: Register) -> None:
        """Add `Action` subclasses; the name is the class's `type` (RUN_SHELL_CMD style) unless given."""

    @hookspec
    def register_providers(self, register: Register) -> None:
        """Add model providers: `cls(preset, settings, retry, name=...)` returns a model (`f(prompt) -> str`)."""

    @hookspec
    def register_agent_types(self, register: Register) -> None:
        """Add `BaseAgent` subclasses; the name is the class's `agent_type` unless given."""


class Plugins:
    """The plug-in manager, loaded on first use, and what went wrong loading plug-ins."""

    def __init__(self) -> None:
        self._manager: pluggy.PluginManager | None = None
        self._lock = threading.RLock()
        self.failures: dict[str, str] = {}
        """Plug-in name -> why it was left out (it failed to import or has a hook anges does not know)."""
        self.generation = 0
        """Grows whenever the set of plug-ins changes, so registries know to ask the hooks again."""

    def manager(self) -> pluggy.PluginManager:
        """The plug-in manager, with the installed plug-ins loaded the first time."""
        with self._lock:
            if self._manager is None:
                self._manager = pluggy.PluginManager("anges")
                self._manager.add_hookspecs(Hooks)
                self._load_installed()
            return self._manager

    def register(self, plugin: object, name: str | None = None) -> None:
        """Add a plug-in object (a module or any object with hooks) from code, as an installed one would be."""
        with self._lock:
            self._add(plugin, name)
            self.generation += 1

    def unregister(self, plugin: object) -> None:
        """Remove a plug-in added with `register`; the registries forget its names."""
        with self._lock:
            self.manager().unregister(plugin)
            self.generation += 1

    def reload(self) -> None:
        """Find the installed plug-ins again (after installing one while the process runs)."""
        with self._lock:
            self._manager = None
            self.failures = {}
            self.generation += 1

    def call(self, hook: str, register: Register) -> None:
        """Call one hook of every plug-in; a plug-in whose hook fails is reported and the others still run."""
        for impl in getattr(self.manager().hook, hook).get_hookimpls():
            try:
                impl.function(register=register)
            except Exception as exc:  # noqa: BLE001  (someone else's code: report it, keep anges working)
                self._fail(impl.plugin_name, f"its {hook} hook failed: {type(exc).__name__}: {exc}")

    def _load_installed(self) -> None:
        from importlib.metadata import entry_points

        for entry in entry_points(group=GROUP):
            try:
                self._add(entry.load(), entry.name)
            except Exception as exc:  # noqa: BLE001  (a broken plug-in must not break anges)
                self._fail(entry.name, f"{type(exc).__name__}: {exc}")

    def _add(self, plugin: object, name: str | None) -> None:
        manager = self.manager()
        try:
            manager.register(plugin, name)
            manager.check_pending()  # a hook anges does not define is a misspelt one
        except pluggy.PluginValidationError as exc:
            if manager.is_registered(plugin):
                manager.unregister(plugin)
            raise ValueError(f"plug-in {name or plugin!r}: {exc}") from None

    def _fail(self, name: str, why: str) -> None:
        if name not in self.failures:
            self.failures[name] = why
            log.warning("anges plug-in %s is left out: %s", name, why)


plugins = Plugins()
"""The plug-ins of this process."""
