"""OpenAI chat completions, and every endpoint that speaks them (DeepSeek, Ollama, vLLM, llama.cpp, OpenRouter, ...)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from anges.exceptions import ModelSetupError
from anges.models.attachments import attachments_of, openai_parts
from anges.models.base import Completion, Usage, estimate_tokens
from anges.models.provider import LOOKUP_TIMEOUT, Provider
from anges.models.retry import Failure
from anges.models.servers import COMPATIBLE, LLAMA_SERVER, OLLAMA, TOKENIZERS, Tokenizer, identify
from anges.models.streaming import CUT_SHORT, StreamEnded, current_sink
from anges.models.window import OLLAMA_OPENAI_WINDOW, Window, window_in_listing

NO_KEY = "no-key"
"""Sent as the key to local servers that need none (the SDK insists on one)."""
OPTIONAL_PARAMS = ("stream_options", "response_format")
"""What a compatible server may refuse and anges does without: usage is then estimated, JSON mode left to the
prompt."""
TOKENIZE_TIMEOUT = 10.0
"""Seconds a server may take to count the tokens of one piece of a prompt, busy with another request (then the
estimate takes over for the run). A stop does not wait for it: the count is given up at once."""
logger = logging.getLogger(__name__)


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

    @classmethod
    def asks_server(cls, preset) -> bool:
        """Every server but api.openai.com is asked (`/v1/models`)."""
        url = preset.base_url or os.environ.get("OPENAI_BASE_URL", "")
        return bool(url) and urlparse(url).hostname != "api.openai.com"

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
        self.refused: set[str] = set()
        """The optional parameters this server refused: never sent again."""
        self.server = COMPATIBLE
        """Which server it is (`anges.models.servers`), known once its window was asked."""
        self._tokenizing: Any = None
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
            "messages": [{"role": "user", "content": _content(prompt)}],
            "temperature": temperature,
        }
        # OpenAI's reasoning models take only max_completion_tokens; many compatible servers only max_tokens.
        params["max_completion_tokens" if self.official else "max_tokens"] = self.reply_tokens
        if self.settings.json_mode:
            params["response_format"] = {"type": "json_object"}
        key = getattr(prompt, "cache_key", "")
        send_key = self.official if self.preset.prompt_cache_key is None else self.preset.prompt_cache_key
        if key and send_key:
            params["prompt_cache_key"] = key
        reply = self._streamed(params) if self.settings.stream else self._whole(params)
        usage = _usage(reply.usage, prompt)
        if not reply.answered:
            self._refuse("the reply has no choices", "empty", usage)
        if reply.finish_reason == "content_filter":
            self._refuse("the reply was blocked by the content filter (finish reason content_filter)", "blocked", usage)
        if reply.refusal and not reply.text:
            self._refuse(f"the model refused: {reply.refusal}", "blocked", usage)
        if usage.estimated:
            usage.output_tokens = estimate_tokens(reply.text)
        return self._reply(reply.text, usage, reply.model or self.preset.model, reply.finish_reason or "stop")

    def _whole(self, params: dict[str, Any]) -> _Reply:
        response = self._create(params)
        reply = _Reply(model=getattr(response, "model", None) or "", usage=getattr(response, "usage", None))
        choices = getattr(response, "choices", None) or []
        if choices:
            message = getattr(choices[0], "message", None)
            reply.add(getattr(message, "content", None), getattr(message, "refusal", None),
                      getattr(choices[0], "finish_reason", None))
        return reply

    def _streamed(self, params: dict[str, Any]) -> _Reply:
        """The reply as server-sent chunks, each piece of text passed on at once; usage comes in the last chunk. A
        stream without a single chunk is asked again without streaming, which says what went wrong."""
        sink = current_sink()
        sink.begin()
        reply = _Reply()
        with self._create({**params, "stream": True, "stream_options": {"include_usage": True}}) as chunks:
            streamed = False
            for chunk in chunks:
                streamed = True
                reply.model = getattr(chunk, "model", None) or reply.model
                reply.usage = getattr(chunk, "usage", None) or reply.usage
                for choice in getattr(chunk, "choices", None) or []:
                    if getattr(choice, "index", 0):
                        continue
                    delta = getattr(choice, "delta", None)
                    content = getattr(delta, "content", None)
                    reply.add(content, getattr(delta, "refusal", None), getattr(choice, "finish_reason", None))
                    if content:
                        sink(content)
            if streamed and reply.answered and not reply.finish_reason:
                raise StreamEnded(CUT_SHORT)
        if not streamed:  # llama-cpp-python's server answers a prompt over its window so: it says why only unstreamed
            logger.info("%s sent an empty stream: asking once more without streaming", self.label)
            reply = self._whole(params)
            if reply.text:
                sink(reply.text)
        return reply

    def _create(self, params: dict[str, Any]) -> Any:
        """`chat.completions.create`, sent again at once without an optional parameter the server refused."""
        import openai

        params = {key: value for key, value in params.items() if key not in self.refused}
        try:
            return self.client.chat.completions.create(**params)
        except (openai.BadRequestError, openai.UnprocessableEntityError) as exc:
            said = f"{exc} {exc.body}"  # the message, and details such as a validation error's `loc`
            refused = next((key for key in OPTIONAL_PARAMS if key in params and key in said), None)
            if refused is None:
                raise
            self.refused.add(refused)
            logger.warning("%s refused %s; going on without it", self.label, refused)
            return self._create(params)

    def _classify(self, exc: BaseException) -> Failure | None:
        import openai

        return self._http_sdk_failure(exc, openai)

    def _server_window(self) -> Window | None:
        """What the server says of the model's window, and which server it is (`self.server`): llama-server's
        `/props` (the window of each slot, which may be less than the model's), vLLM's `max_model_len`,
        OpenRouter's and others' `context_length`; Ollama's OpenAI-compatible API serves its default window
        whatever the model has; llama-cpp-python's server cannot tell."""
        import openai

        if not self.asks_server(self.preset.model_copy(update={"base_url": self.base_url})):
            return None
        try:
            entries = [entry.to_dict() for entry in self.client.with_options(timeout=LOOKUP_TIMEOUT).models.list().data]
        except (openai.APIError, ValueError, TypeError, AttributeError) as exc:
            logger.info("%s did not list its models (%s): its context window is not known", self.label, exc)
            return None
        told = window_in_listing(entries, self.preset.model)
        entry = next((e for e in entries if e.get("id") == self.preset.model), entries[0] if entries else {})
        self.server = identify(entry, self.base_url)
        if self.server == LLAMA_SERVER:
            served = self._served_window()
            if served:
                return Window(served, "server", "llama-server /props")
        if self.server == OLLAMA and told is None:
            logger.warning("%s looks like Ollama's OpenAI-compatible API, which serves Ollama's default context window "
                           "(%d tokens assumed); `provider: ollama` sizes the window to each prompt (docs/models.md)",
                           self.label, OLLAMA_OPENAI_WINDOW)
            return Window(OLLAMA_OPENAI_WINDOW, "assumed", "Ollama's default for its OpenAI-compatible API")
        return Window(told, "server", f"{self.server} /v1/models") if told else None

    def _served_window(self) -> int | None:
        """llama.cpp's server: the context each of its slots has (`/props`), which may be less than the model's."""
        import httpx2

        try:
            props = httpx2.get(f"{self._root()}/props", headers=self._auth(), timeout=LOOKUP_TIMEOUT).json()
        except (httpx2.HTTPError, ValueError) as exc:
            logger.info("%s did not answer /props (%s)", self.label, exc)
            return None
        settings = props.get("default_generation_settings") if isinstance(props, dict) else None
        value = settings.get("n_ctx") if isinstance(settings, dict) else None
        return value if isinstance(value, int) and value > 0 else None

    def tokenizer(self) -> Callable[[str], int] | None:
        """llama-server's `/tokenize`, llama-cpp-python's `/extras/tokenize/count` or vLLM's `/tokenize` (the server
        is identified when its window is asked)."""
        self.window()
        found = TOKENIZERS.get(self.server)
        if found is None:
            return None
        return lambda text: self._count_tokens(found, text)

    def _count_tokens(self, tokenizer: Tokenizer, text: str) -> int:
        if self._tokenizing is None:  # one client, its connection kept: a count takes a millisecond, not a handshake
            import httpx2

            self._tokenizing = httpx2.Client(base_url=self._root(), headers=self._auth(), timeout=TOKENIZE_TIMEOUT,
                                             event_hooks=self.connections.event_hooks)
        response = self._tokenizing.post(tokenizer.path, json=tokenizer.body(self.preset.model, text))
        response.raise_for_status()
        return tokenizer.count(response.json())

    def _root(self) -> str:
        return self.base_url.removesuffix("/v1")

    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.client.api_key}"} if self.client.api_key != NO_KEY else {}


def _content(prompt: Any) -> Any:
    """The prompt's text, then the files its request attached (content parts)."""
    if not isinstance(prompt, str):
        return prompt
    attached = attachments_of(prompt)
    return [{"type": "text", "text": str(prompt)}, *openai_parts(attached)] if attached else str(prompt)


@dataclass
class _Reply:
    """What a chat completion said, whole or gathered from its chunks."""

    model: str = ""
    usage: Any = None
    parts: list[str] = field(default_factory=list)
    refusal: str = ""
    finish_reason: str = ""
    answered: bool = False
    """A choice came (a reply without any is empty)."""

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def add(self, text: str | None, refusal: str | None, finish_reason: str | None) -> None:
        self.answered = True
        if text:
            self.parts.append(text)
        self.refusal += refusal or ""
        self.finish_reason = finish_reason or self.finish_reason


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
