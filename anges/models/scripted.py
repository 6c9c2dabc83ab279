"""A model that replays given replies: for tests, examples and benchmarks."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from anges.exceptions import ModelError, ModelSetupError
from anges.models.base import Completion, Usage, estimate_tokens
from anges.models.streaming import replay_into_sink

# The first line of the summary request (which ends a fold's prompt) and of the title prompt; lets scripted models
# answer them by rule.
SUMMARY_PROMPT_MARK = "# Summarize the agent's progress"
TITLE_PROMPT_MARK = "# Name this conversation"


def is_summary_prompt(prompt: str) -> bool:
    """Whether `prompt` asks for the rolling summary: it ends with the summary request, after the whole history."""
    at = prompt.rfind("\n" + SUMMARY_PROMPT_MARK + "\n")
    return at >= 0 and "\n## Event " not in prompt[at:]

Reply = str | dict | list | Exception | Callable[[str], Any]


class ScriptedModel:
    """Answers each call with the next scripted reply; summary and title prompts are answered by rule.

    A reply may be a string, a JSON-able object (sent as JSON text), an exception (raised), or a callable
    receiving the prompt. `prompts` keeps every prompt received, in order. A listener of the call (streaming)
    gets the reply in a few pieces. A `context_window` (tokens) makes the agent size its prompts to it.
    """

    name = "scripted"

    def __init__(self, replies: Iterable[Reply] = (), summary: str | None = "Summary: the steps so far ran as shown.",
                 title: str | None = "Scripted task", context_window: int = 0):
        self._replies = list(replies)
        self.context_window = context_window
        self._lock = threading.Lock()
        self.summary = summary
        self.title = title
        self.prompts: list[str] = []
        self.calls = 0

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedModel:
        """Load replies from a JSON file: a list of replies, or {"replies": [...], "summary": ..., "title": ...}."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ModelSetupError(f"cannot read scripted replies from {path}: {exc}") from None
        if isinstance(data, list):
            data = {"replies": data}
        if isinstance(data, dict) and isinstance(data.get("replies"), list):
            extra = {k: data[k] for k in ("summary", "title", "context_window") if k in data}
            model = cls(data["replies"], **extra)
            model.name = f"scripted:{path}"  # what get_model needs to build it again
            return model
        raise ModelSetupError(f"{path}: expected a JSON list of replies or an object with a 'replies' list")

    def enqueue(self, *replies: Reply) -> None:
        """Add replies to the end of the script."""
        with self._lock:
            self._replies.extend(replies)

    @property
    def remaining(self) -> int:
        return len(self._replies)

    def __call__(self, prompt: str, temperature: float = 0.0) -> Completion:
        with self._lock:
            self.prompts.append(prompt)
            self.calls += 1
            reply: Reply | None = self._rule_reply(prompt)
            if reply is None:
                if not self._replies:
                    raise ModelError(f"scripted model has no reply left for call {self.calls}")
                reply = self._replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        if callable(reply):
            reply = reply(prompt)
        text = reply if isinstance(reply, str) else json.dumps(reply)
        replay_into_sink(text)
        usage = Usage(estimate_tokens(prompt), estimate_tokens(text), estimated=True)
        return Completion(text, usage=usage, model=self.name)

    def _rule_reply(self, prompt: str) -> str | None:
        if self.summary is not None and is_summary_prompt(prompt):
            return self.summary
        if self.title is not None and prompt.startswith(TITLE_PROMPT_MARK):
            return self.title
        return None
