"""The message handlers' tag of a recorded event, a title with its secrets masked, details made JSON."""

from __future__ import annotations

import json
from typing import Any

from anges.events import Event, title_from
from anges.masking import mask_secrets


class AgentMessage(str):
    """A user-visible message, tagged with who is speaking."""

    def __new__(cls, text: str, agent: Any, event: Event):
        obj = super().__new__(cls, text)
        obj.agent_type = agent.agent_type
        obj.agent_id = agent.uid
        obj.parent_ids = list(agent.parent_ids)
        obj.depth = len(agent.parent_ids)
        obj.event = event
        return obj


def masked_title(text: str, secrets: list[str]) -> str:
    """A one-line title from `text`, its secrets masked before it is cut (so no fragment of one is left)."""
    return title_from(mask_secrets(text, secrets))


def jsonable(details: dict) -> dict:
    """`details` as plain JSON values (anything else becomes its string)."""
    return json.loads(json.dumps(details, default=str))
