"""What the SDK-backed models share: credentials, the retry loop, timing, and turning replies into Completions."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn

from anges.config.loading import anges_home
from anges.exceptions import ModelReplyError, ModelSetupError
from anges.models.attachments import attachments_of, explain_refusal
from anges.models.base import Completion, Retry, Usage
from anges.models.cancel import CancelToken, Connections, current_token, watching
from anges.models.retry import (
    CONTEXT_EXCEEDED,
    TRANSIENT_STATUSES,
    Failure,
    call_with_retry,
    retry_after_seconds,
    transport_failure,
)
from anges.models.servers import refusal_numbers
from anges.models.window import Window, assumed_window, known_window, reply_room
from anges.util.clipping import one_line

if TYPE_CHECKING:
    from anges.config.types import ModelPreset, ModelSettings, RetryConfig

KEY_ALIASES = {"GEMINI_API_KEY": ("GOOGLE_API_KEY",), "GOOGLE_API_KEY": ("GEMINI_API_KEY",)}
"""Environment variables an SDK accepts in place of the one a preset names."""

logger = logging.getLogger(__name__)
LOOKUP_TIMEOUT = 5.0
"""Seconds a server may take to say what the model's context window is."""
_STATUS_WORDS = {408: "request timeout", 409: "conflict", 429: "rate limited", 503: "overloaded", 529: "overloaded"}


def env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes")


def key_env_names(preset: ModelPreset) -> tuple[str, ...]:
    """The environment variables that may hold the preset's key, in the order they are tried."""
    if not preset.api_key_env:
        return ()
    return (preset.api_key_env,) + KEY_ALIASES.get(preset.api_key_env, ())


def has_credentials(preset: ModelPreset) -> bool:
    """Whether the environment holds what the preset needs to authenticate (for `auto`), as its provider says."""
    check = getattr(_provider_class(preset), "has_credentials", None)
    return check(preset) if check is not None else True


def credential_hint(preset: ModelPreset) -> str:
    """The environment variables that would give the preset credentials, for a message (empty: none needed)."""
    hint = getattr(_provider_class(preset), "credential_hint", None)
    return hint(preset) if hint is not None else ""


def _provider_class(preset: ModelPreset) -> type:
    from anges.registry import providers

    return providers.get(preset.provider)


def config_hint() -> str:
    return f"`model:` in {anges_home() / 'config.yaml'} or --model"


class Provider:
    """A model reached through a provider SDK: subclasses make the client and do one attempt of one call."""

    provider: ClassVar[str] = ""
    """The wire format it speaks (openai, gemini, anthropic): how READ_MIME_FILES builds its inputs."""
    default_key_env: ClassVar[str] = ""
    """The key variable of `PROVIDER:MODEL-ID` names that no preset stands for."""
    label: str = ""
    """Who answers, for messages: "OpenAI", "Gemini", "the server at http://...", ... (set by `_make_client`)."""
    base_url: str = ""
    """The endpoint the client talks to (set by `_make_client`)."""

    def __init__(self, preset: ModelPreset, settings: ModelSettings | None = None, retry: RetryConfig | None = None,
                 *, name: str = "", sleep: Callable[[float], object] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        from anges.config.types import ModelSettings, RetryConfig

        self.preset = preset
        self.settings = settings or ModelSettings()
        self.retry = retry or RetryConfig()
        self.name = name or f"{self.provider}:{preset.model}"
        """One line naming the model for events and the CLI; `get_model(name)` builds the same model again."""
        self.sleep = sleep
        """Waits between attempts (None: a wait that a cancel cuts short)."""
        self.clock = clock
        self.connections = Connections()
        """The client's connections, dropped when a call is cancelled (`_make_client` hooks the client up)."""
        self.key_env = ""
        """The environment variable the API key came from (empty: no key)."""
        self._window: Window | None = None
        self._window_lock = threading.Lock()
        if not preset.model:
            raise ModelSetupError(
                f"{self.name}: no model id: set `model:` in the preset or use {self.provider}:MODEL-ID")
        self.client = self._make_client()

    def __call__(self, prompt: str, temperature: float | None = None, *,
                 cancel: CancelToken | None = None) -> Completion:
        """One reply to one prompt, retried by the policy; `temperature` None means `model_settings.temperature`.

        Setting `cancel` (default: the token of `anges.models.cancel.cancellable`) drops the request in flight
        and ends the call with ModelCancelled.
        """
        temperature = self.settings.temperature if temperature is None else temperature
        cancel = cancel or current_token()
        start = time.monotonic()
        retries: list[Retry] = []
        with watching(cancel, self.connections.abort):
            attached = attachments_of(prompt)
            classify = (lambda exc: explain_refusal(self._classify(exc), attached)) if attached else self._classify
            completion = call_with_retry(lambda: self._complete(prompt, temperature), classify, self.retry,
                                         label=self.name, sleep=self.sleep, clock=self.clock, cancel=cancel,
                                         on_retry=lambda failure, wait: retries.append(
                                             Retry(time.time(), failure.reason, wait, failure.status)))
        completion.latency = time.monotonic() - start
        completion.retries = tuple(retries)
        return completion

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"

    def window(self) -> Window:
        """The model's context window: the preset's `context_window`, else what the server says (asked once), else
        the known window of the model, else an assumed one."""
        with self._window_lock:
            if self._window is None:
                self._window = self._find_window()
            return self._window

    @property
    def reply_tokens(self) -> int:
        """The reply's room: `max_output_tokens`, scaled down for a small window once the window is known."""
        window = self._window
        maximum = self.settings.max_output_tokens
        return reply_room(window.tokens, maximum) if window is not None else maximum

    def learn_window(self, window: Window) -> None:
        """The window the server turned out to have (its refusal named it): the reply's room follows it."""
        with self._window_lock:
            self._window = window

    def tokenizer(self) -> Callable[[str], int] | None:
        """A function that counts a text's tokens with the server's own tokenizer (None: the server has none)."""
        return None

    def _find_window(self) -> Window:
        told = self._server_window()  # asked even when the preset names a window: it may be more than is served
        preset = self.preset.context_window
        if preset and told and told.source == "server" and told.tokens < preset:
            logger.warning("%s: the preset's context_window (%s tokens) is more than %s serves (%s tokens, %s): "
                           "prompts are sized to %s tokens; set context_window to at most that (docs/models.md)",
                           self.name, f"{preset:,}", self.label, f"{told.tokens:,}", told.detail, f"{told.tokens:,}")
            return Window(told.tokens, "server", f"{told.detail}; the preset says {preset:,}")
        if preset:
            return Window(preset, "preset")
        if told:
            return told
        known = known_window(self.preset.model)
        return Window(known, "known") if known else assumed_window(self.base_url)

    def _server_window(self) -> Window | None:
        """The window the server says the model has, and where it said it (None: it cannot tell, or did not
        answer)."""
        return None

    @classmethod
    def asks_server(cls, preset: ModelPreset) -> bool:
        """Whether the model's window is asked of its server (when the preset names none)."""
        return False

    @classmethod
    def uses_vertex(cls, preset: ModelPreset) -> bool:
        """Vertex AI instead of an API key."""
        return preset.vertex

    @classmethod
    def has_credentials(cls, preset: ModelPreset) -> bool:
        """Whether the environment holds what the preset needs to authenticate (for `auto`)."""
        if cls.uses_vertex(preset):
            return bool(preset.project or os.environ.get("GOOGLE_CLOUD_PROJECT"))
        return not preset.api_key_env or any(os.environ.get(name) for name in key_env_names(preset))

    @classmethod
    def credential_hint(cls, preset: ModelPreset) -> str:
        """The environment variables that would give the preset credentials, for a message."""
        return " or ".join(key_env_names(preset))

    def _make_client(self) -> Any:
        raise NotImplementedError

    def _complete(self, prompt: str, temperature: float) -> Completion:
        raise NotImplementedError

    def _classify(self, exc: BaseException) -> Failure | None:
        return transport_failure(exc)

    def _api_key(self) -> str | None:
        """The key from the preset's environment variable; a setup error naming the variable when it is unset."""
        names = key_env_names(self.preset)
        for name in names:
            if os.environ.get(name):
                self.key_env = name
                return os.environ[name].strip()
        if not names:
            return None
        raise ModelSetupError(f"{self.name} needs an API key: set {' or '.join(names)} (or choose another model "
                              f"with {config_hint()})")

    def _key_hint(self) -> str:
        if self.key_env:
            return self.key_env
        if self.preset.api_key_env:
            return f"{self.preset.api_key_env} (it is not set, so no key was sent)"
        return "api_key_env in the preset (it names no variable, so no key was sent)"

    def _reply(self, text: str | None, usage: Usage, model: str, finish_reason: str) -> Completion:
        """The Completion for a reply text (reasoning blocks and all: the parser reads them), or ModelReplyError
        when it is empty. A reply cut off at max_output_tokens (finish reason "length") is returned as it is, even
        empty: the agent asks for a shorter one."""
        text = text or ""
        if not text.strip() and finish_reason != "length":
            self._refuse(f"empty reply (finish reason: {finish_reason})", "empty", usage)
        return Completion(text, usage=usage, model=model or self.preset.model, finish_reason=finish_reason)

    def _refuse(self, message: str, kind: str, usage: Usage | None) -> NoReturn:
        error = ModelReplyError(f"{self.name}: {message}", kind=kind)
        error.usage = usage  # a refused reply still costs tokens
        raise error

    def _status_failure(self, status: int, headers: Mapping[str, str] | None, detail: str = "",
                        retry_after: float | None = None, body: Any = None) -> Failure:
        """Classify an HTTP error status, with what to fix for the ones that retrying cannot; a refusal of a prompt
        over the window carries the numbers the server said (`body`: the error's JSON)."""
        detail = one_line(str(detail), 300)
        said = f": {detail}" if detail else ""
        model = self.preset.model
        if status in (400, 413, 422) and CONTEXT_EXCEEDED.search(detail):
            window, prompt_tokens = refusal_numbers(detail, body)
            return Failure.context(f"{self.label} says the prompt does not fit the model's context window ({status})"
                                   f"{said}", status, window, prompt_tokens)
        if status in TRANSIENT_STATUSES or status >= 500:
            word = _STATUS_WORDS.get(status, "server error")
            wait = retry_after if retry_after is not None else retry_after_seconds(headers)
            return Failure.transient(f"{word} ({status}){said}", status, wait)
        if status == 401:
            return Failure.setup(f"{self.label} rejected the API key (401). Check {self._key_hint()}.", status)
        if status == 403:
            return Failure.setup(f"{self.label} denied access (403){said}. Check that the key in {self._key_hint()} "
                                 f"may use model {model!r}.", status)
        if status == 404:
            return Failure.setup(f"model {model!r} not found at {self.base_url} (404): check the model id{said}",
                                 status)
        if status == 402:
            return Failure.setup(f"{self.label} asks for payment (402){said}: check the account's billing", status)
        if status == 400:
            return Failure.setup(f"{self.label} rejected the request as invalid (400){said}", status)
        return Failure.fatal(f"{self.label} answered {status}{said}", status)

    def _http_sdk_failure(self, exc: BaseException, sdk: Any) -> Failure | None:
        """Classify the errors of the OpenAI and Anthropic SDKs, which share their shape."""
        if isinstance(exc, sdk.APITimeoutError):
            return Failure.transient("timed out")
        if isinstance(exc, sdk.APIConnectionError):
            return Failure.transient(f"connection failed ({exc})")
        if isinstance(exc, sdk.APIStatusError):
            return self._status_failure(exc.status_code, exc.response.headers, _body_message(exc.body) or str(exc),
                                        body=exc.body)
        return transport_failure(exc)


def _body_message(body: object) -> str:
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return error["message"]
        if isinstance(error, str):
            return error
    return body if isinstance(body, str) else ""
