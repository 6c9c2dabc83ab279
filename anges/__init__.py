"""anges: an LLM-powered engineering agent. Importing this package is cheap: names load on first use."""

from importlib import import_module

__version__ = "0.2.0"

_EXPORTS = {
    "Event": "anges.store.events",
    "EventSummary": "anges.store.events",
    "EventStream": "anges.store.events",
    "RETURN_TO_PARENT_EVENT_TYPES": "anges.store.events",
    "EventStore": "anges.store.event_store",
    "Store": "anges.store.event_store",
    "load_config": "anges.config.loading",
    "Config": "anges.config.types",
    "Model": "anges.models.base",
    "Completion": "anges.models.base",
    "Usage": "anges.models.base",
    "ScriptedModel": "anges.models.scripted",
    "get_model": "anges.models",
    "Action": "anges.actions",
    "ActionContext": "anges.actions",
    "Param": "anges.actions",
    "Decision": "anges.safety.approval",
    "ApprovalRequest": "anges.safety.approval",
    "BaseAgent": "anges.agents",
    "DefaultAgent": "anges.agents",
    "TaskExecutor": "anges.agents",
    "TaskAnalyzer": "anges.agents",
    "Orchestrator": "anges.agents",
}

__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'anges' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
