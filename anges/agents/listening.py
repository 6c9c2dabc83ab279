"""Listeners: told of each event an agent records and of each model call it makes, as it happens.

Telemetry listens this way (`anges.telemetry`); the agent loop calls its listeners from two places only, `_record`
and the model calls, and a child agent tells its parent's listeners.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from anges.config.types import Config
    from anges.models.base import ModelCall
    from anges.store.events import Event


class Listener(Protocol):
    """Hears what an agent does: `agent` has `uid`, `agent_type`, `parent_ids`, `secrets` and `inference_func`."""

    def recorded(self, agent: Any, event: Event) -> None:
        """An event was recorded (secrets masked, texts capped)."""

    def model_called(self, agent: Any, call: ModelCall) -> None:
        """A model call ended, with its reply or its error."""


def listeners_for(config: Config) -> list[Listener]:
    """The listeners the configuration asks for: telemetry when `telemetry.enabled` (nothing is imported when not)."""
    if not config.telemetry.enabled:
        return []
    from anges.telemetry import telemetry_for

    found = telemetry_for(config.telemetry)
    return [found] if found is not None else []
