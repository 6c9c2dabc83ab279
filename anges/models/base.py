"""The model contract: any callable `f(prompt, temperature=...) -> str` drives an agent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


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

    def __new__(cls, text: str, usage: Usage | None = None, model: str = "", latency: float = 0.0,
                finish_reason: str = "stop"):
        obj = super().__new__(cls, text)
        obj.usage = usage
        obj.model = model
        obj.latency = latency
        obj.finish_reason = finish_reason
        return obj


def estimate_tokens(text: str) -> int:
    """A rough token count (about four characters a token) for models that report none."""
    return (len(text) + 3) // 4
