"""The reply as it streams: its analysis and reasoning so far, told to the agent's delta handlers.

Deltas are a side channel: nothing of them is stored, and the finished reply is recorded as it always is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from anges.models.cancel import CancelToken
from anges.prompt.parsing import partial_reply
from anges.util.masking import mask_secrets, settled_length

SHOWN_FIELDS = ("analysis", "reasoning")
MAX_READ_CHARS = 400_000
"""Past this much reply text no more is read for deltas (the actions come after the shown fields anyway)."""


@dataclass(frozen=True)
class ReplyDelta:
    """A reply's analysis or reasoning grew as it streamed: what was added, and both texts so far (secrets masked)."""

    agent_id: str
    agent_type: str
    parent_ids: tuple[str, ...]
    call: int
    """Which model call of the agent's run it belongs to: a new number starts a new reply."""
    field: str
    """"analysis" or "reasoning"."""
    text: str
    """What was added to the field."""
    analysis: str
    reasoning: str
    restart: bool = False
    """The first delta of a retried attempt: what this call showed before is void."""

    @property
    def depth(self) -> int:
        return len(self.parent_ids)


class LiveReply:
    """The sink of one model call: gathers the text, reads its fields as far as they go and tells the handlers what
    grew. Reading stops once the actions begin, or once the call is cancelled."""

    def __init__(self, handlers: Sequence[Callable[[ReplyDelta], None]], tag: dict, secrets: Sequence[str],
                 cancel: CancelToken):
        self.handlers = handlers
        self.tag = tag
        """agent_id, agent_type, parent_ids and call of every delta."""
        self.secrets = secrets
        self.cancel = cancel
        self._parts: list[str] = []
        self._size = 0
        self._shown = dict.fromkeys(SHOWN_FIELDS, "")
        self._done = False
        self._restart = False

    def begin(self) -> None:
        """An attempt starts: read from scratch."""
        self._restart = self._restart or any(self._shown.values())
        self._parts, self._size, self._done = [], 0, False
        self._shown = dict.fromkeys(SHOWN_FIELDS, "")

    def __call__(self, text: str) -> None:
        if self._done or self.cancel.cancelled:
            return
        self._parts.append(text)
        self._size += len(text)
        fields = partial_reply("".join(self._parts))
        finished = "actions" in fields  # the fields shown come before it: they are whole
        for name in SHOWN_FIELDS:
            value = fields.get(name)
            if isinstance(value, str):
                settled = value if finished else value[:settled_length(value, self.secrets)]
                self._grow(name, mask_secrets(settled, self.secrets))
        self._done = finished or self._size > MAX_READ_CHARS

    def _grow(self, name: str, value: str) -> None:
        old = self._shown[name]
        if len(value) <= len(old) or not value.startswith(old):
            return
        self._shown[name] = value
        delta = ReplyDelta(**self.tag, field=name, text=value[len(old):], restart=self._restart, **self._shown)
        self._restart = False
        for handler in self.handlers:
            handler(delta)
