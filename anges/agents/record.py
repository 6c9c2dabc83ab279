"""What recording does to an event (secrets masked, texts capped), the message handlers' tag, a masked title."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Protocol

from anges.store.events import ChildReturn, Event, action_input, title_from
from anges.tools.fileedit import summarize_diff
from anges.util.clipping import clip
from anges.util.masking import mask_secrets

if TYPE_CHECKING:
    from anges.prompt.parsing import ParsedReply
    from anges.safety.approval import Permit


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


def with_outcome(event: Event, reply: ParsedReply, permit: Permit | None = None, args: dict | None = None) -> Event:
    """An action's event with the reply's reasoning, the action's input (`args`) and the approval it got."""
    event.reasoning = event.reasoning or reply.reasoning
    event.analysis = event.analysis or reply.analysis
    if args is not None and ChildReturn.of(event) is None:  # a child's return: its start event has the input
        event.data.setdefault("input", action_input(args))
    if permit is not None and permit.facts():
        event.data.setdefault("approval", permit.facts())
    return event


def failed_action(action_type: str, reply: ParsedReply, exc: Exception) -> Event:
    """The event of an action that raised: a result the model reads, not the end of the run."""
    return Event("action", reasoning=reply.reasoning, content=f"{action_type} FAILED: {exc}",
                 message=f"{action_type} failed: {exc}",
                 data={"action_type": action_type, "error": f"{type(exc).__name__}: {exc}"})


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
