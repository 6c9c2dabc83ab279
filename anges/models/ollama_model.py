"""Ollama through its native chat API, `/api/chat`, with each request's context window (`num_ctx`) sized to the
prompt plus the reply.

Ollama gives a model a small window unless a request asks for more, and cuts a longer prompt from its start (where
the instructions are) without an error; its OpenAI-compatible API cannot ask for more. So this provider asks for
a window that fits the prompt (in powers of two, never less than the last one: a new size reloads the model), up
to the model's own (`/api/show`, or the preset's `context_window`), and asks Ollama to refuse rather than cut a
prompt that does not fit (`truncate: false`, for the versions that know it).
"""

from __future__ import annotations

import json
import os
from typing import Any
from urllib.parse import urlsplit

from anges.exceptions import ModelSetupError
from anges.models.attachments import attachments_of
from anges.models.base import Completion, Usage, estimate_tokens
from anges.models.provider import LOOKUP_TIMEOUT, Provider, logger
from anges.models.retry import CONTEXT_EXCEEDED, Failure, transport_failure
from anges.models.streaming import StreamEnded, current_sink
from anges.models.tokens import TokenGauge
from anges.models.window import Window

DEFAULT_HOST = "http://127.0.0.1:11434"
MIN_NUM_CTX = 2048
_FINISH = {"stop": "stop", "length": "length"}


def ollama_host(value: str | None) -> str:
    """The server an `OLLAMA_HOST` value names, as Ollama's own clients read it: `host`, `host:port`, or a URL;
    the port defaults to 11434 (80 or 443 for a URL with its scheme), the host to 127.0.0.1."""
    value = (value or "").strip().rstrip("/")
    if not value:
        return DEFAULT_HOST
    scheme, sep, rest = value.partition("://")
    if not sep:
        scheme, rest = "http", value
    port = {"http": 80, "https": 443}.get(scheme, 11434) if sep else 11434
    parts = urlsplit(f"{scheme}://{rest}")
    try:
        port = parts.port or port
    except ValueError:
        raise ModelSetupError(f"OLLAMA_HOST={value!r} is not a host, host:port or URL") from None
    host = parts.hostname or "127.0.0.1"
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host}:{port}{parts.path.rstrip('/')}"


class OllamaStatus(Exception):
    """Ollama answered an error status (or an error line in the middle of a stream: status 0)."""

    def __init__(self, status: int, message: str, headers: Any = None):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message
        self.headers = headers


class OllamaModel(Provider):
    """One user message holding the prompt, posted to `/api/chat` (streamed as JSON lines by default)."""

    provider = "ollama"

    @classmethod
    def asks_server(cls, preset) -> bool:
        return True

    def _make_client(self) -> Any:
        import httpx2

        url = self.preset.base_url or ollama_host(os.environ.get("OLLAMA_HOST"))
        self.base_url = url.rstrip("/").removesuffix("/v1").removesuffix("/api")
        self.label = f"Ollama at {self.base_url}"
        self.gauge = TokenGauge()
        """Estimates the prompt's tokens for `num_ctx`, corrected from each reply's `prompt_eval_count`."""
        self.num_ctx = 0
        """The window the last request asked for."""
        headers = dict(self.preset.headers)
        if key := self._api_key():  # ollama.com, or a server behind a proxy that wants one
            headers["Authorization"] = f"Bearer {key}"
        timeout = httpx2.Timeout(self.settings.request_timeout, connect=min(self.settings.request_timeout, 10.0))
        return httpx2.Client(base_url=self.base_url, headers=headers, timeout=timeout,
                            event_hooks=self.connections.event_hooks)

    def _complete(self, prompt: str, temperature: float) -> Completion:
        self.window()  # asked of the server once: it bounds num_ctx and scales the reply's room
        reply_tokens = self.reply_tokens
        body: dict[str, Any] = {
            "model": self.preset.model,
            "messages": [self._message(prompt)],
            "stream": self.settings.stream,
            "options": {"temperature": temperature, "num_ctx": self.context_for(prompt, reply_tokens),
                        "num_predict": reply_tokens},
            "truncate": False,  # refuse a prompt that does not fit instead of cutting its start (Ollama 0.12.5+)
            "shift": False,
        }
        if self.settings.json_mode:
            body["format"] = "json"
        final, text = self._streamed(body) if self.settings.stream else self._whole(body)
        usage = _usage(final, prompt, text)
        if not usage.estimated:
            self.gauge.observe(prompt, usage.input_tokens)
        reason = final.get("done_reason") or "stop"
        return self._reply(text, usage, final.get("model") or self.preset.model, _FINISH.get(reason, reason))

    def _message(self, prompt: str) -> dict[str, Any]:
        """The user message: the prompt's text, and the images its request attached (base64, as `/api/chat` takes
        them); the API takes no PDF."""
        message: dict[str, Any] = {"role": "user", "content": str(prompt)}
        if attached := attachments_of(prompt):
            if pdfs := [item.path for item in attached if item.mime_type == "application/pdf"]:
                raise ModelSetupError(f"{self.name}: Ollama's API takes images but no PDF ({', '.join(pdfs)}): send "
                                      "the request again without it, or choose another model (/model)")
            message["images"] = [item.base64 for item in attached]
        return message

    def context_for(self, prompt: str, reply_tokens: int) -> int:
        """`num_ctx` for a prompt: room for it and the reply, in powers of two, at least the last request's (each new
        size reloads the model), at most the model's window."""
        needed = self.gauge.estimate(prompt) + reply_tokens + 64
        size = max(MIN_NUM_CTX, 1 << (needed - 1).bit_length(), self.num_ctx)
        self.num_ctx = min(size, self.window().tokens)
        return self.num_ctx

    def _whole(self, body: dict) -> tuple[dict, str]:
        response = self.client.post("/api/chat", json=body)
        if response.status_code >= 400:
            raise OllamaStatus(response.status_code, _error_of(response.text), response.headers)
        final = response.json()
        if not isinstance(final, dict):
            raise StreamEnded("the reply was not a JSON object")
        _check_line(final)
        return final, (final.get("message") or {}).get("content") or ""

    def _streamed(self, body: dict) -> tuple[dict, str]:
        """The reply as JSON lines, each piece of text passed on at once; the last line (`done`) has the counts."""
        sink = current_sink()
        sink.begin()
        parts: list[str] = []
        lines = False
        with self.client.stream("POST", "/api/chat", json=body) as response:
            if response.status_code >= 400:
                raise OllamaStatus(response.status_code, _error_of(response.read().decode("utf-8", "replace")),
                                   response.headers)
            for line in response.iter_lines():
                if not line.strip():
                    continue
                chunk = json.loads(line)
                _check_line(chunk)
                if content := (chunk.get("message") or {}).get("content"):
                    parts.append(content)
                    sink(content)
                if chunk.get("done"):
                    return chunk, "".join(parts)
                lines = True
        raise StreamEnded("the reply stream ended before its last line" if lines else
                          "the reply stream was empty or not JSON (no line came)")

    def _classify(self, exc: BaseException) -> Failure | None:
        import httpx2

        if isinstance(exc, OllamaStatus):
            if CONTEXT_EXCEEDED.search(exc.message):
                return Failure.context(f"{self.label} says the prompt does not fit the model's context window: "
                                       f"{exc.message}", exc.status or None)
            if exc.status == 0:
                return Failure.transient(f"the model failed while answering: {exc.message}")
            if exc.status == 404:
                return Failure.setup(f"model {self.preset.model!r} not found at {self.base_url} (404): {exc.message}. "
                                     f"Pull it with `ollama pull {self.preset.model}`, or check the model id", 404)
            return self._status_failure(exc.status, exc.headers, exc.message)
        if isinstance(exc, httpx2.ConnectError):
            return Failure.transient(f"cannot connect to {self.label}: is Ollama running (`ollama serve`)? "
                                     "Set OLLAMA_HOST to reach another server")
        return transport_failure(exc)

    def _server_window(self) -> Window | None:
        """The model's context length, as `/api/show` tells it."""
        import httpx2

        try:
            response = self.client.post("/api/show", json={"model": self.preset.model}, timeout=LOOKUP_TIMEOUT)
            info = response.json().get("model_info") if response.status_code == 200 else None
        except (httpx2.HTTPError, ValueError, AttributeError) as exc:
            logger.info("%s did not say the context window of %s (%s)", self.label, self.preset.model, exc)
            return None
        lengths = [value for key, value in (info or {}).items()
                   if key.endswith(".context_length") and isinstance(value, int) and value > 0]
        return Window(lengths[0], "server", "Ollama /api/show") if lengths else None


def _check_line(chunk: Any) -> None:
    if not isinstance(chunk, dict):
        raise StreamEnded("a line of the reply was not a JSON object")
    if chunk.get("error"):
        raise OllamaStatus(0, str(chunk["error"]))


def _error_of(text: str) -> str:
    try:
        body = json.loads(text)
    except ValueError:
        return text.strip()[:300]
    return str(body.get("error", body)) if isinstance(body, dict) else text.strip()[:300]


def _usage(final: dict, prompt: str, text: str) -> Usage:
    prompt_tokens, output_tokens = final.get("prompt_eval_count"), final.get("eval_count")
    output_tokens = output_tokens if isinstance(output_tokens, int) else estimate_tokens(text)
    if not isinstance(prompt_tokens, int):  # an old Ollama leaves it out when the whole prompt was cached
        return Usage(estimate_tokens(prompt), output_tokens, estimated=True)
    return Usage(prompt_tokens, output_tokens)
