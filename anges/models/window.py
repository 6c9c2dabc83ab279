"""A model's context window: how large it is, and who said so.

A model's window comes from its preset (`context_window`), else from its server where the server can tell
(Ollama's `/api/show`, an OpenAI-compatible `/v1/models` entry), else from the small table of known hosted
models below, else it is assumed. The prompt is sized to it, leaving room for the reply (docs/models.md).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

KNOWN_WINDOWS: tuple[tuple[str, int], ...] = (
    ("gpt-4.1", 1_047_576),
    ("gpt-5", 400_000),
    ("gpt-4o", 128_000),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o4", 200_000),
    ("claude", 200_000),
    ("gemini", 1_048_576),
    ("deepseek", 128_000),
)
"""Model id prefixes of known hosted models and their windows in tokens (a `vendor/` prefix is ignored)."""
ASSUMED_LOCAL = 8_192
"""The window assumed for an unknown model on this machine or the local network (set `context_window` instead)."""
ASSUMED_HOSTED = 128_000
"""The window assumed for an unknown hosted model."""
OLLAMA_OPENAI_WINDOW = 4_096
"""Ollama's default context length, which its OpenAI-compatible API cannot change (`provider: ollama` can)."""
MIN_REPLY_TOKENS = 256


@dataclass(frozen=True)
class Window:
    """A context window in tokens and where the number came from."""

    tokens: int
    source: str
    """preset, server, known, assumed, model (a model object's own `context_window`) or lowered (after a prompt did
    not fit a window the server did not name)."""
    detail: str = field(default="", compare=False)
    """Who said it, where that helps: "llama-server /props", "vLLM max_model_len", "the server's refusal", ..."""

    def facts(self) -> dict:
        """The window as the data of the run's first event."""
        facts: dict = {"context_window": self.tokens, "context_window_source": self.source}
        if self.detail:
            facts["context_window_detail"] = self.detail
        return facts

    def describe(self) -> str:
        """`8,192 tokens (server: llama-server /props)`: the window and where it came from, for people."""
        return f"{self.tokens:,} tokens ({self.source}{': ' + self.detail if self.detail else ''})"


def known_window(model_id: str) -> int | None:
    """The window of a known hosted model (by its id's prefix); None for others."""
    name = model_id.lower().rpartition("/")[2]
    return next((tokens for prefix, tokens in KNOWN_WINDOWS if name.startswith(prefix)), None)


def assumed_window(base_url: str) -> Window:
    """The window assumed for a model nobody told about: small on this machine or the local network."""
    return Window(ASSUMED_LOCAL if is_local(base_url) else ASSUMED_HOSTED, "assumed")


def is_local(url: str) -> bool:
    """Whether a URL names this machine or the local network (a loopback, private or one-word host name)."""
    host = urlsplit(url if "//" in url else f"//{url}").hostname or ""
    if not host or host == "localhost" or host.endswith((".local", ".localhost", ".lan", ".internal")):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return "." not in host
    return address.is_loopback or address.is_private or address.is_link_local or address.is_unspecified


def reply_room(window: int, max_output_tokens: int) -> int:
    """Tokens kept for the reply: `max_output_tokens`, but no more than a quarter of a small window."""
    return max(min(max_output_tokens, window // 4), min(MIN_REPLY_TOKENS, max_output_tokens))


def prompt_room(window: int, max_output_tokens: int) -> int:
    """Tokens a prompt may take: the window less the reply's room and a margin for the chat template around it."""
    margin = min(64 + window // 50, 2048)
    return max(window - reply_room(window, max_output_tokens) - margin, 0)


def window_in_listing(entries: list[dict], model_id: str) -> int | None:
    """The window an OpenAI-compatible `/v1/models` listing gives the model (the only entry, when the ids differ):
    vLLM's `max_model_len`, `context_length` or `context_window` (OpenRouter, Groq, ...), Mistral's
    `max_context_length`, llama.cpp's `meta.n_ctx` or `meta.n_ctx_train`."""
    entry = next((e for e in entries if e.get("id") == model_id), entries[0] if len(entries) == 1 else None)
    if entry is None:
        return None
    meta = entry.get("meta")
    meta = meta if isinstance(meta, dict) else {}
    for value in (entry.get("max_model_len"), entry.get("context_length"), entry.get("context_window"),
                  entry.get("max_context_length"), meta.get("n_ctx"), meta.get("n_ctx_train")):
        if isinstance(value, int) and value > 0:
            return value
    return None


def window_of(model: Any) -> Window | None:
    """A model's window: what its `window()` says (a provider asks its server once), or its `context_window` in
    tokens; None when it says nothing (a plain function). Wrappers with an `inner` model are looked through."""
    for _ in range(8):
        if model is None:
            return None
        find = getattr(model, "window", None)
        if callable(find):
            return find()
        tokens = getattr(model, "context_window", None)
        if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0:
            return Window(tokens, "model")
        model = getattr(model, "inner", None)
    return None


def looked_through(model: Any, name: str) -> Any:
    """The callable `name` of a model, or of one it wraps (`inner`); None when none has one."""
    for _ in range(8):
        if model is None:
            return None
        found = getattr(model, name, None)
        if callable(found):
            return found
        model = getattr(model, "inner", None)
    return None
