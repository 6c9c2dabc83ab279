"""The model servers people run on their own machines, as an OpenAI-compatible endpoint shows them: which one it
is, where it counts tokens, and what its refusal of a prompt over its window says (docs/models.md has the table).

- llama.cpp's `llama-server`: its `/v1/models` entry has `meta` (owned by "llamacpp"); `/props` tells the window
  of each slot; `POST /tokenize {"content": ...}` gives the tokens; an over-window prompt gets a 400 with
  `n_prompt_tokens` and `n_ctx`.
- llama-cpp-python's server (`python -m llama_cpp.server`): its models are owned by "me" and tell no window;
  `POST /extras/tokenize/count {"input": ...}` counts; a 400 says "maximum context length is N tokens ... (P in the
  messages, ...)", but only to a request that does not stream: a stream gets an empty 200.
- vLLM: `max_model_len` in its listing; `POST /tokenize {"prompt": ...}` counts; its 400 names both numbers.
- Ollama's OpenAI-compatible API: models owned by "library", port 11434; no tokenizer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

LLAMA_SERVER = "llama-server"
LLAMA_CPP_PYTHON = "llama-cpp-python"
VLLM = "vLLM"
OLLAMA = "Ollama"
COMPATIBLE = "OpenAI-compatible"


@dataclass(frozen=True)
class Tokenizer:
    """Where a server counts tokens, and how to ask it."""

    path: str
    """Below the server's root (the base URL without `/v1`)."""
    field: str
    """The request's field that holds the text."""
    extra: tuple[tuple[str, Any], ...] = ()

    def body(self, model: str, text: str) -> dict:
        return {"model": model, self.field: text, **dict(self.extra)}

    @staticmethod
    def count(answer: Any) -> int:
        """The count in the server's answer (`count`, or the length of `tokens`); ValueError when there is none."""
        if isinstance(answer, dict):
            if isinstance(answer.get("count"), int):
                return answer["count"]
            if isinstance(answer.get("tokens"), list):
                return len(answer["tokens"])
        raise ValueError(f"no token count in the answer: {str(answer)[:200]}")


TOKENIZERS = {
    LLAMA_SERVER: Tokenizer("/tokenize", "content", (("add_special", False),)),
    LLAMA_CPP_PYTHON: Tokenizer("/extras/tokenize/count", "input"),
    VLLM: Tokenizer("/tokenize", "prompt", (("add_special_tokens", False),)),
}
"""The servers that count tokens with the model's own tokenizer."""


def identify(entry: dict, base_url: str) -> str:
    """Which server a `/v1/models` entry (of the model served) comes from."""
    owner = entry.get("owned_by")
    if "meta" in entry or owner == "llamacpp":
        return LLAMA_SERVER
    if owner == "vllm" or "max_model_len" in entry:
        return VLLM
    if owner == "me":  # llama-cpp-python lists every model as owned by "me", and nothing else does
        return LLAMA_CPP_PYTHON
    if owner == "library" or urlparse(base_url).port == 11434:
        return OLLAMA
    return COMPATIBLE


_WINDOW_SAID = (r"maximum context length is (\d+) tokens", r"available context size \((\d+) tokens\)",
                r"max context size \((\d+) tokens\)", r"context window of (\d+)", r"(\d+) maximum context length",
                r"tokens > (\d+) maximum")
_PROMPT_SAID = (r"\((\d+) in the messages", r"prompt contains (?:at least )?(\d+) input tokens",
                r"request has (\d+) input tokens", r"request \((\d+) tokens\)", r"input \((\d+) tokens\)",
                r"prompt is too long: (\d+) tokens", r"Requested tokens \((\d+)\)", r"Prompt contains (\d+) tokens")


def refusal_numbers(message: str, body: Any = None) -> tuple[int | None, int | None]:
    """The window and the prompt's tokens a server's refusal names (None where it names none): llama-server's
    `n_ctx` and `n_prompt_tokens`, or the numbers in the message of llama-cpp-python, vLLM, OpenAI, Anthropic."""
    error = body.get("error", body) if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("n_ctx"), int):
        prompt = error.get("n_prompt_tokens")
        return error["n_ctx"], prompt if isinstance(prompt, int) else None
    return _first(_WINDOW_SAID, message), _first(_PROMPT_SAID, message)


def _first(patterns: tuple[str, ...], text: str) -> int | None:
    for pattern in patterns:
        match = re.search(pattern, text, re.IGNORECASE)
        if match:
            return int(match.group(1))
    return None
