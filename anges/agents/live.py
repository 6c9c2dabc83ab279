"""The reply as it streams (its analysis, reasoning and answer so far), and then the output of the command it
runs, told to the agent's delta handlers.

Deltas are a side channel: nothing of them is stored, and the finished reply (and the command's result) is
recorded as it always is.
"""

from __future__ import annotations

import codecs
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from anges.models.cancel import CancelToken
from anges.prompt.parsing import partial_reply
from anges.safety.capture import SecretFilter
from anges.util.masking import mask_secrets, settled_length

SHOWN_FIELDS = ("analysis", "reasoning")
ANSWER_ACTIONS = ("TASK_COMPLETE", "AGENT_TEXT_RESPONSE", "HELP_NEEDED")
"""The actions whose `content` is the reply's answer: it streams too, as the field "answer"."""
MAX_READ_CHARS = 400_000
"""Past this much reply text no more is read for deltas."""
OUTPUT_KEPT_CHARS = 4000
"""How much of a running command's latest output an "output" delta carries."""
OUTPUT_EVERY = 0.1
"""Seconds between two "output" deltas of one command (what arrives meanwhile goes in the next)."""


@dataclass(frozen=True)
class ReplyDelta:
    """A reply's analysis, reasoning or answer grew as it streamed: what was added, and the texts so far (secrets
    masked)."""

    agent_id: str
    agent_type: str
    parent_ids: tuple[str, ...]
    call: int
    """Which model call of the agent's run it belongs to: a new number starts a new reply."""
    field: str
    """"analysis", "reasoning" or "answer"."""
    text: str
    """What was added to the field."""
    analysis: str
    reasoning: str
    restart: bool = False
    """The first delta of a retried attempt: what this call showed before is void."""
    answer: str = ""
    """The `content` of the reply's answer action so far (one of ANSWER_ACTIONS: the only action of its reply)."""
    answer_type: str = ""
    """That action's type, e.g. "TASK_COMPLETE"; "" until the answer streams."""
    output: str = ""
    """For the field "output" (a command the reply asked for is running): its latest output, both streams as they
    came (the last OUTPUT_KEPT_CHARS characters, secrets masked, raw: control characters and all)."""
    command: str = ""
    """For the field "output": the command."""

    @property
    def depth(self) -> int:
        return len(self.parent_ids)


class LiveReply:
    """The sink of one model call: gathers the text, reads its fields as far as they go and tells the handlers what
    grew. Reading stops once the actions begin with one that is no answer, or once the call is cancelled."""

    def __init__(self, handlers: Sequence[Callable[[ReplyDelta], None]], tag: dict, secrets: Sequence[str],
                 cancel: CancelToken):
        self.handlers = handlers
        self.tag = tag
        """agent_id, agent_type, parent_ids and call of every delta."""
        self.secrets = secrets
        self.cancel = cancel
        self._parts: list[str] = []
        self._size = 0
        self._shown = dict.fromkeys((*SHOWN_FIELDS, "answer"), "")
        self._answer_type = ""
        self._done = False
        self._restart = False

    def begin(self) -> None:
        """An attempt starts: read from scratch."""
        self._restart = self._restart or any(self._shown.values())
        self._parts, self._size, self._done = [], 0, False
        self._shown = dict.fromkeys((*SHOWN_FIELDS, "answer"), "")
        self._answer_type = ""

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
                self._grow(name, self._settled(value, finished))
        more = self._read_answer(fields["actions"]) if finished else True
        self._done = not more or self._size > MAX_READ_CHARS

    def _read_answer(self, actions) -> bool:
        """Tell the answer's `content` as it grows; False once the first action is known to be no answer."""
        first = actions[0] if isinstance(actions, list) and actions else None
        if first is None:
            return isinstance(actions, list)  # "[" so far
        kind = first.get("action_type", first.get("type")) if isinstance(first, dict) else None
        if not isinstance(kind, str):
            return kind is None and isinstance(first, dict) and len(actions) == 1
        kind = kind.strip().upper()
        if kind not in ANSWER_ACTIONS:  # perhaps one cut short: "TASK_CO"
            return len(actions) == 1 and any(name.startswith(kind) for name in ANSWER_ACTIONS)
        self._answer_type = kind
        content = first.get("content")
        if isinstance(content, str):
            self._grow("answer", self._settled(content, False))
        return True

    def _settled(self, value: str, whole: bool) -> str:
        """What of a field can be shown: masked, and without an end that may be the start of a secret."""
        return mask_secrets(value if whole else value[:settled_length(value, self.secrets)], self.secrets)

    def _grow(self, name: str, value: str) -> None:
        old = self._shown[name]
        if len(value) <= len(old) or not value.startswith(old):
            return
        self._shown[name] = value
        shown = self._shown
        delta = ReplyDelta(**self.tag, field=name, text=value[len(old):], restart=self._restart,
                           answer_type=self._answer_type, analysis=shown["analysis"], reasoning=shown["reasoning"],
                           answer=shown["answer"])
        self._restart = False
        for handler in self.handlers:
            handler(delta)


def told(handlers, delta: ReplyDelta, what: str) -> bool:
    """Give `delta` to each handler; False (logged) when one failed: a view that fails must not fail the run."""
    try:
        for handler in handlers:
            handler(delta)
    except Exception:
        logging.getLogger("anges.agent").warning("a delta handler failed on %s", what, exc_info=True)
        return False
    return True


class LiveOutput:
    """The sink of one command in the foreground: its output as it arrives, told to the handlers as the field
    "output" at most every OUTPUT_EVERY seconds (called with no bytes, it sends what waits once that time is up)."""

    def __init__(self, handlers: Sequence[Callable[[ReplyDelta], None]], tag: dict, secrets: Sequence[str],
                 command: str):
        self.handlers = handlers
        self.tag = tag
        self.command = command
        self._filter = SecretFilter(secrets)
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._kept = self._new = ""
        self._next = 0.0

    def __call__(self, chunk: bytes) -> None:
        if chunk:
            self._add(self._decoder.decode(self._filter.feed(chunk)))
        if self._new and time.monotonic() >= self._next:
            self._send()

    def flush(self) -> None:
        """The command ended: send what waits (an end held back in case it began a secret, too)."""
        self._add(self._decoder.decode(self._filter.flush(), final=True))
        if self._new:
            self._send()

    def _add(self, text: str) -> None:
        self._kept = (self._kept + text)[-OUTPUT_KEPT_CHARS:]
        self._new = (self._new + text)[-OUTPUT_KEPT_CHARS:]

    def _send(self) -> None:
        self._next = time.monotonic() + OUTPUT_EVERY
        delta = ReplyDelta(**self.tag, field="output", text=self._new, analysis="", reasoning="", output=self._kept,
                           command=self.command)
        self._new = ""
        if not told(self.handlers, delta, "a command's output"):
            self.handlers = ()
