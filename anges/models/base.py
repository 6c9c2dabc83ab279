"""The model contract: any callable `f(prompt, temperature=...) -> str` drives an agent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from anges.models.attachments import Attachment


@runtime_checkable
class Model(Protocol):
    """A model turns one prompt into one reply text."""

    def __call__(self, prompt: str, temperature: float = 0.0) -> str: ...


@dataclass
class Usage:
    """Token counts as reported by the provider (estimated only where `estimated` is true)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    estimated: bool = False

    def to_dict(self) -> dict:
        """The counts as the `usage` fact of an event."""
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "cached_tokens": self.cached_tokens, "estimated": self.estimated}


class Completion(str):
    """A reply text that also carries what the provider said about it.

    It is a `str`, so it satisfies the model contract; the agent reads the extra attributes when present.
    """

    usage: Usage | None
    model: str
    latency: float
    finish_reason: str
    retries: tuple[Retry, ...] = ()
    """The failed attempts before this reply, each retried after a wait (a provider's retry policy fills it in)."""

    def __new__(cls, text: str, usage: Usage | None = None, model: str = "", latency: float = 0.0,
                finish_reason: str = "stop") -> Completion:
        obj = super().__new__(cls, text)
        obj.usage = usage
        obj.model = model
        obj.latency = latency
        obj.finish_reason = finish_reason
        return obj


@dataclass(frozen=True)
class Retry:
    """A failed attempt of a model call that was tried again: when it failed, why, and the wait before the next."""

    at: float
    """Seconds since the epoch."""
    reason: str
    wait: float
    status: int | None = None
    """The HTTP status of the failed attempt, when it had one."""


@dataclass
class ModelCall:
    """One model call as an agent made it: the model, what it was asked, what came back or went wrong, and when."""

    model: Any
    """The callable asked (its `name`, `provider`, `preset` and `settings` describe it when it has them)."""
    prompt: str
    temperature: float
    started: float
    """Seconds since the epoch."""
    duration: float
    reply: str | None = None
    """The reply (a `Completion` says what it used); None when the call failed."""
    error: BaseException | None = None
    cost: float | None = None
    """US dollars, when prices are configured."""


class Prompt(str):
    """A prompt text that also says how a provider may cache it; any `str` is a valid prompt too.

    `breaks` are offsets where a provider that caches by blocks (Anthropic) may end a block: the end of the
    stable prefix (instructions, guides), the end of what the previous call cached, the end of this history (the end
    of the text, when only blank text follows it). `marks` are those of `breaks` worth a cache marker. `cache_key`
    names the run (OpenAI's `prompt_cache_key`).
    `local_facts` are the facts of where it was rendered that it states and another machine or folder would state
    otherwise (`workdir`, `python3`): a recording keeps them, and a replay reads its own in their place.
    `attachments` are the files the request being run attached (`anges.models.attachments`): each provider sends
    them after the text, so that the cached prefix stays as it was.
    """

    breaks: tuple[int, ...]
    marks: tuple[int, ...]
    cache_key: str
    local_facts: dict[str, str]
    attachments: tuple[Attachment, ...]

    def __new__(cls, text: str, breaks: tuple[int, ...] = (), marks: tuple[int, ...] = (),
                cache_key: str = "", local_facts: dict[str, str] | None = None,
                attachments: tuple[Attachment, ...] = ()) -> Prompt:
        obj = super().__new__(cls, text)
        obj.breaks = tuple(sorted({b for b in breaks if 0 < b <= len(text)}))
        obj.marks = tuple(m for m in marks if m in obj.breaks)
        obj.cache_key = cache_key
        obj.local_facts = dict(local_facts or {})
        obj.attachments = tuple(attachments)
        return obj


def estimate_tokens(text: str) -> int:
    """A rough token count (about four characters a token) for models that report none."""
    return (len(text) + 3) // 4
