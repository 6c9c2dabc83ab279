"""The registries of actions, model providers and agent types: a registered name or a `module:Class` path.

Built-ins are listed by import path and imported on first use. Plug-ins (`anges.plugins`) add theirs the
first time a registry is asked for a name it does not know, or for all its names; code can `register`
its own classes too. An unknown name is an error that lists the valid ones.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from importlib import import_module
from typing import Any

from anges.exceptions import ConfigError, ModelSetupError


class Registry:
    """Names of one kind of thing -> classes; built-ins first, then those registered in code, then plug-ins'."""

    def __init__(self, kind: str, hook: str, builtins: dict[str, str], *, name_attr: str, base: str = "",
                 key: Callable[[str], str] = str.lower, error: type[Exception] = ConfigError):
        self.kind = kind
        """What the names name, for messages: "action", "provider", "agent type"."""
        self.hook = hook
        self.name_attr = name_attr
        self.key = key
        self.error = error
        self._base = base
        self._builtins: dict[str, Any] = {key(name): path for name, path in builtins.items()}
        self._registered: dict[str, Any] = {}
        self._from_plugins: dict[str, Any] = {}
        self._plugins_seen = -1
        self._lock = threading.RLock()

    def get(self, name: str) -> Any:
        """The class a name stands for (a `module:Class` path is imported); an unknown name lists the known ones."""
        if ":" in name:
            return self._checked(_import(name, self), name)
        key = self.key(name)
        with self._lock:
            source = self._builtins if key in self._builtins else self._source(key)
            if source is None:
                raise self.error(f"unknown {self.kind} {name!r} (known: {', '.join(self.names())}){_left_out()}")
            target = source[key]
            if isinstance(target, str):
                target = source[key] = self._checked(_import(target, self), name)
            return target

    def __contains__(self, name: str) -> bool:
        if ":" in name:
            try:
                return bool(self.get(name))
            except self.error:
                return False
        key = self.key(name)
        return key in self._builtins or self._source(key) is not None

    @property
    def builtin_names(self) -> tuple[str, ...]:
        """The names anges itself provides (no plug-in is loaded to tell them)."""
        return tuple(self._builtins)

    def names(self) -> list[str]:
        """Every name: built-ins, then those registered in code, then the plug-ins' (loading the plug-ins)."""
        with self._lock:
            self._refresh()
            return [*self._builtins, *self._registered, *self._from_plugins]

    def classes(self) -> list[tuple[str, Any]]:
        """Every (name, class), in the order of `names()`."""
        return [(name, self.get(name)) for name in self.names()]

    def register(self, target: Any, name: str | None = None) -> None:
        """Add a class (or a `module:Class` path) from code; the name defaults to the class's own."""
        with self._lock:
            key = self._name_of(target, name)
            taken = self._builtins.get(key, self._registered.get(key))
            if taken is not None and taken is not target:
                raise ValueError(f"the {self.kind} name {key!r} is taken")
            self._registered[key] = target

    def unregister(self, name: str) -> None:
        """Remove a name registered in code."""
        with self._lock:
            self._registered.pop(self.key(name), None)

    def _source(self, key: str) -> dict[str, Any] | None:
        """The table that holds a name besides the built-ins, after asking the plug-ins (if they changed)."""
        with self._lock:
            self._refresh()
            for table in (self._registered, self._from_plugins):
                if key in table:
                    return table
            return None

    def _refresh(self) -> None:
        from anges.plugins import plugins

        plugins.manager()  # loads the installed plug-ins the first time, which may change the generation
        if self._plugins_seen != plugins.generation:
            self._from_plugins = {}
            plugins.call(self.hook, self._add_from_plugin)
            self._plugins_seen = plugins.generation

    def _add_from_plugin(self, target: Any, name: str | None = None) -> None:
        key = self._name_of(target, name)
        if key in self._builtins or key in self._registered or key in self._from_plugins:
            raise ValueError(f"the {self.kind} name {key!r} is taken")
        self._from_plugins[key] = target

    def _name_of(self, target: Any, name: str | None) -> str:
        name = name or getattr(target, self.name_attr, "")
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.kind} needs a name: pass name= or set {self.name_attr} on the class")
        return self.key(name)

    def _checked(self, target: Any, name: str) -> Any:
        if self._base:
            base = _import(self._base, self)
            if not (isinstance(target, type) and issubclass(target, base)):
                raise self.error(f"{self.kind} {name!r} is not a subclass of {base.__name__}")
        elif not callable(target):
            raise self.error(f"{self.kind} {name!r} is not callable")
        return target


def _import(path: str, registry: Registry) -> Any:
    module_name, _, attribute = path.partition(":")
    try:
        module = import_module(module_name)
    except ImportError as exc:
        raise registry.error(f"{registry.kind} {path!r}: cannot import {module_name}: {exc}") from None
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise registry.error(f"{registry.kind} {path!r}: {module_name} has no {attribute!r}") from None


def _left_out() -> str:
    from anges.plugins import plugins

    return "".join(f"; plug-in {name!r} was left out: {why}" for name, why in plugins.failures.items())


actions = Registry("action", "register_actions", {
    "RUN_SHELL_CMD": "anges.actions.shell:RunShellCommand",
    "EDIT_FILE": "anges.actions.edit:EditFile",
    "READ_MIME_FILES": "anges.actions.mime:ReadMimeFiles",
    "UPDATE_PLAN": "anges.actions.plan:UpdatePlan",
    "TASK_COMPLETE": "anges.actions.replies:TaskComplete",
    "HELP_NEEDED": "anges.actions.replies:HelpNeeded",
    "AGENT_TEXT_RESPONSE": "anges.actions.replies:AgentTextResponse",
    "CALL_CHILD_AGENT": "anges.actions.child:CallChildAgent",
    "WAIT_FOR_CHILDREN": "anges.actions.child:WaitForChildren",
}, name_attr="type", base="anges.actions.base:Action", key=str.upper)
"""Action types (RUN_SHELL_CMD, ...) -> `Action` subclasses. USE_MCP_TOOL, CALL_API and DESCRIBE_API_OPERATION are not
here: they need the MCP servers or the web APIs."""

providers = Registry("provider", "register_providers", {
    "openai": "anges.models.openai_model:OpenAIModel",
    "gemini": "anges.models.gemini_model:GeminiModel",
    "anthropic": "anges.models.anthropic_model:AnthropicModel",
    "ollama": "anges.models.ollama_model:OllamaModel",
}, name_attr="provider", error=ModelSetupError)
"""Provider names (a preset's `provider`) -> classes called as `cls(preset, settings, retry, name=...)`."""

agent_types = Registry("agent type", "register_agent_types", {
    "default": "anges.agents:DefaultAgent",
    "task_analyzer": "anges.agents:TaskAnalyzer",
    "task_executor": "anges.agents:TaskExecutor",
    "orchestrator": "anges.agents.orchestrator:Orchestrator",
}, name_attr="agent_type", base="anges.agents.base:BaseAgent")
"""Agent types (--agent, `agents.<type>` in the config, NEW_CHILD_AGENT <TYPE>) -> `BaseAgent` subclasses."""
