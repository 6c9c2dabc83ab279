"""OpenAI chat completions, and every endpoint that speaks them (DeepSeek, Ollama, vLLM, llama.cpp, OpenRouter, ...)."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlparse

from anges.exceptions import ModelSetupError
from anges.models.base import Completion, Usage, estimate_tokens
from anges.models.provider import Provider
from anges.models.retry import Failure

NO_KEY = "no-key"
"""Sent as the key to local servers that need none (the SDK insists on one)."""


class OpenAIModel(Provider):
    """One user message holding the prompt, through `client.chat.completions.create`."""

    provider = "openai"
    default_key_env = "OPENAI_API_KEY"

    @classmethod
    def has_credentials(cls, preset) -> bool:
        """A key, or OPENAI_BASE_URL naming an OpenAI-compatible server for a preset without a base_url."""
        return super().has_credentials(preset) or (not preset.base_url and bool(os.environ.get("OPENAI_BASE_URL")))

    @classmethod
    def credential_hint(cls, preset) -> str:
        hint = super().credential_hint(preset)
        return hint + " (or OPENAI_BASE_URL for an OpenAI-compatible server)" if not preset.base_url else hint

    def _make_client(self) -> Any:
        import openai

        client = openai.OpenAI(
            api_key=self._api_key() or NO_KEY,
            base_url=self.preset.base_url or None,  # None: the SDK reads OPENAI_BASE_URL
            timeout=self.settings.request_timeout,
            max_retries=0,
            default_headers=self.preset.headers or None,
            http_client=openai.DefaultHttpxClient(event_hooks=self.connections.event_hooks),
        )
        self.base_url = str(client.base_url).rstrip("/")
        self.official = urlparse(self.base_url).hostname == "api.openai.com"
        self.label = "OpenAI" if self.official else f"the server at {self.base_url}"
        return client

    def _api_key(self) -> str | None:
        try:
            return super()._api_key()
        except ModelSetupError:
            if not self.preset.base_url and os.environ.get("OPENAI_BASE_URL"):
                return None  # a local OpenAI-compatible server named by the SDK's own variable
            raise

    def _complete(self, prompt: str, temperature: float) -> Completion:
        params: dict[str, Any] = {
            "model": self.preset.model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": temperature,
        }
        # OpenAI's reasoning models take only max_completion_tokens; many compatible servers only max_tokens.
        params["max_completion_tokens" if self.official else "max_tokens"] = self.settings.max_output_tokens
        if self.settings.json_mode:
            params["response_format"] = {"type": "json_object"}
        response = self.client.chat.completions.create(**params)
        usage = _usage(getattr(response, "usage", None), prompt)
        model = getattr(response, "model", None) or self.preset.model
        choices = getattr(response, "choices", None) or []
        if not choices:
            self._refuse("the reply has no choices", "empty", usage)
        choice = choices[0]
        message = getattr(choice, "message", None)
        content = getattr(message, "content", None)
        finish_reason = getattr(choice, "finish_reason", None) or "stop"
        if finish_reason == "content_filter":
            self._refuse("the reply was blocked by the content filter (finish reason content_filter)", "blocked", usage)
        refusal = getattr(message, "refusal", None)
        if refusal and not content:
            self._refuse(f"the model refused: {refusal}", "blocked", usage)
        if usage.estimated:
            usage.output_tokens = estimate_tokens(content or "")
        return self._reply(content, usage, model, finish_reason)

    def _classify(self, exc: BaseException) -> Failure | None:
        import openai

        return self._http_sdk_failure(exc, openai)


def _usage(usage: Any, prompt: str) -> Usage:
    if usage is None:
        return Usage(input_tokens=estimate_tokens(prompt), estimated=True)
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) or getattr(usage, "prompt_cache_hit_tokens", None) or 0
    return Usage(
        input_tokens=getattr(usage, "prompt_tokens", 0) or 0,
        output_tokens=getattr(usage, "completion_tokens", 0) or 0,
        cached_tokens=cached,
    )
