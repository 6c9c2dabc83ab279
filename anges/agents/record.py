"""What recording does to an event (secrets masked, texts capped), the message handlers' tag, a masked title."""

from __future__ import annotations

import json
from typing import Any, Protocol

from anges.store.events import Event, title_from
from anges.tools.fileedit import summarize_diff
from anges.util.clipping import clip
from anges.util.masking import mask_secrets


class Speaker(Protocol):
    """Who a message is from: the agent's type, id and parents."""

    @property
    def agent_type(self) -> str: ...
    @property
    def uid(self) -> str: ...
    @property
    def parent_ids(self) -> list[str]: ...


class AgentMessage(str):
    """A user-visible message, tagged with who is speaking."""

    agent_type: str
    agent_id: str
    parent_ids: list[str]
    depth: int
    event: Event

    def __new__(cls, text: str, agent: Speaker, event: Event) -> AgentMessage:
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


def mask_event(event: Event, secrets: list[str]) -> None:
    """Replace known secret values in every text field of an event, structured data included."""
    if not secrets:
        return
    for name in ("content", "message", "reasoning", "analysis"):
        setattr(event, name, mask_secrets(getattr(event, name) or "", secrets))
    data = json.dumps(event.data)
    if any(secret in data for secret in secrets):
        event.data = json.loads(mask_secrets(data, secrets))


def cap_event(event: Event, limit: int) -> None:
    """Cut every text of an event to `limit` characters (after masking, so no secret is split); a diff past it
    becomes the number of lines it changes."""
    if limit <= 0:
        return
    diff = event.data.get("diff")
    if isinstance(diff, str) and len(diff) > limit:
        summary = summarize_diff(diff)
        event.data["diff"] = summary
        event.content = (event.content or "").replace(diff, summary)
    for name in ("content", "message", "reasoning", "analysis"):
        text = getattr(event, name)
        if isinstance(text, str) and len(text) > limit:
            setattr(event, name, clip(text, limit))
    event.data = _clip_texts(event.data, limit)


def _clip_texts(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        return clip(value, limit)
    if isinstance(value, dict):
        return {key: _clip_texts(item, limit) for key, item in value.items()}
    if isinstance(value, list):
        return [_clip_texts(item, limit) for item in value]
    return value
