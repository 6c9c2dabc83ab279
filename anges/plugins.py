"""Plug-ins: installed packages (and files in ANGES_HOME/extensions) that add actions, model providers and agent
types, and act at the points of a run.

A plug-in is a module named by an entry point of the `anges.plugins` group, or a `.py` file in ANGES_HOME/extensions,
whose hook functions are marked `@hookimpl` (the hooks are the methods of `Hooks`). Plug-ins are loaded once, the
first time a registry is asked for a name it does not know or for all its names, or a run has Python hooks to call:
never by `import anges` or `anges --help`. See docs/plugins.md and docs/hooks.md.
"""

from __future__ import annotations

import logging
import os
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

    # The points of a run (docs/hooks.md). Each gets `run` (an `anges.hooks.RunView`: read-only) and `data` (what a
    # command hook reads on stdin), and returns None (go on), `anges.hooks.Block(reason)`, `anges.hooks.Context(text)`
    # or a dict as a command hook prints it.

    @hookspec
    def run_start(self, run: Any, data: dict) -> Any:
        """A run starts (a new request or a follow-up); a `Context` is read by the model."""

    @hookspec
    def request(self, run: Any, data: dict) -> Any:
        """The request, before the model reads it (`data["request"]`): a `Block` refuses it, a `Context` adds to it."""

    @hookspec
    def before_action(self, run: Any, data: dict) -> Any:
        """An action is about to run (`data["action"]`): a `Block` stops it, and the model reads the reason."""

    @hookspec
    def after_action(self, run: Any, data: dict) -> Any:
        """An action ran (`data["result"]`): a `Context` is read by the model with the result."""

    @hookspec
    def before_complete(self, run: Any, data: dict) -> Any:
        """The model ends the run (TASK_COMPLETE, HELP_NEEDED, an answer): a `Block` sends it back with the reason."""

    @hookspec
    def run_end(self, run: Any, data: dict) -> Any:
        """The run ended (`data["outcome"]`)."""

    @hookspec
    def approval_needed(self, run: Any, data: dict) -> Any:
        """A person is asked to approve something (`data["approval"]`)."""


class Plugins:
    """The plug-in manager, loaded on first use, and what went wrong loading plug-ins."""

    def __init__(self) -> None:
        self._manager: pluggy.PluginManager | None = None
        self._lock = threading.RLock()
        self.failures: dict[str, str] = {}
        """Plug-in name -> why it was left out (it failed to import or has a hook anges does not know)."""
        self.generation = 0
        """Grows whenever the set of plug-ins changes, so registries know to ask the hooks again."""
        self.sources: dict[str, str] = {}
        """Plug-in name -> where it came from: installed, extension or code (`register`)."""

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
            self.sources[self.manager().get_name(plugin) or str(name)] = "code"
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
            self.failures, self.sources = {}, {}
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
                self.sources[entry.name] = "installed"
            except Exception as exc:  # noqa: BLE001  (a broken plug-in must not break anges)
                self._fail(entry.name, f"{type(exc).__name__}: {exc}")
        self.load_extensions()

    def load_extensions(self) -> list[str]:
        """Load the files of ANGES_HOME/extensions not loaded yet (a changed one is not loaded again: restart); the
        names of the extensions there now (`extension:FILE-NAME`)."""
        names = []
        with self._lock:
            for path in extension_files():
                name = f"extension:{path}"
                names.append(name)
                if name in self.sources or name in self.failures:
                    continue
                try:
                    self._add(_import_file(path, name), name)
                    self.sources[name] = "extension"
                    self.generation += 1
                except Exception as exc:  # noqa: BLE001  (a broken extension must not break anges)
                    self._fail(name, f"{type(exc).__name__}: {exc}")
        return names

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


def extensions_folder() -> str:
    """ANGES_HOME/extensions (ANGES_HOME as `anges.config.anges_home` finds it: this module sits below config)."""
    return os.path.join(os.path.expanduser(os.environ.get("ANGES_HOME") or os.path.join("~", ".anges")), "extensions")


def extension_files() -> list[str]:
    """The `.py` files of ANGES_HOME/extensions, sorted by name (none when the folder does not exist)."""
    folder = extensions_folder()
    try:
        names = sorted(entry.name for entry in os.scandir(folder) if entry.name.endswith(".py") and entry.is_file())
    except OSError:
        return []
    return [os.path.join(folder, name) for name in names if not name.startswith((".", "_"))]


def _import_file(path: str, name: str) -> Any:
    """The module in a file that is not on the import path (an extension), imported once under its own name."""
    import hashlib
    import importlib.util
    import sys

    stem = os.path.splitext(os.path.basename(path))[0]
    module_name = f"anges_extensions.{stem}_{hashlib.sha256(path.encode()).hexdigest()[:8]}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


plugins = Plugins()
"""The plug-ins of this process."""
