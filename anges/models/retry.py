"""One retry policy for every provider: transient failures back off, the rest fail at once."""

from __future__ import annotations

import email.utils
import json
import logging
import random
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from anges.config.types import RetryConfig
from anges.exceptions import ContextExceeded, ModelCancelled, ModelError, ModelSetupError
from anges.models.cancel import CancelToken
from anges.models.streaming import StreamEnded

logger = logging.getLogger(__name__)
T = TypeVar("T")

TRANSIENT_STATUSES = frozenset({408, 409, 425, 429})
"""4xx statuses worth another try (timeout, conflict, too early, rate limit); every 5xx is too."""

CONTEXT_EXCEEDED = re.compile(
    r"context[ _](length|window|size)|maximum context|context_length_exceeded|prompt is too long|too many tokens"
    r"|input length exceeds|exceeds? the (maximum|available) (number of )?(context|tokens|input)", re.IGNORECASE)
"""How servers say a prompt does not fit the model's window (OpenAI, vLLM, llama.cpp, Ollama, Anthropic, Gemini)."""

_TIMEOUT_NAMES = frozenset({"TimeoutException", "Timeout", "TimeoutError"})
_CONNECTION_NAMES = frozenset({"TransportError", "NetworkError", "ConnectionError", "RemoteProtocolError"})


@dataclass
class Failure:
    """One failed attempt, classified in provider-neutral terms."""

    reason: str
    """What happened, for people: "rate limited (429)", "timed out", "OpenAI rejected the API key (401). ..."."""
    retryable: bool
    status: int | None = None
    retry_after: float | None = None
    """Seconds the server asked us to wait, if it said."""
    error: type[ModelError] = ModelError
    """Raised when the failure is not retryable."""
    details: dict = field(default_factory=dict)
    """Passed to `error` (a prompt over the window: the server's numbers)."""

    @classmethod
    def transient(cls, reason: str, status: int | None = None, retry_after: float | None = None) -> Failure:
        return cls(reason, True, status, retry_after)

    @classmethod
    def setup(cls, reason: str, status: int | None = None) -> Failure:
        return cls(reason, False, status, error=ModelSetupError)

    @classmethod
    def fatal(cls, reason: str, status: int | None = None) -> Failure:
        return cls(reason, False, status)

    @classmethod
    def context(cls, reason: str, status: int | None = None, window: int | None = None,
                prompt_tokens: int | None = None) -> Failure:
        """The prompt does not fit the model's window (the server's `window` and count of the prompt, where it said
        them): asking again as it is cannot help (the agent folds first)."""
        return cls(reason, False, status, error=ContextExceeded,
                   details={"window": window, "prompt_tokens": prompt_tokens})


def transport_failure(exc: BaseException | None) -> Failure | None:
    """Timeouts, dropped connections and unreadable replies of the HTTP libraries the SDKs use (httpx, httpx2,
    requests)."""
    for _ in range(5):
        if exc is None:
            return None
        if isinstance(exc, json.JSONDecodeError):  # a 200 whose body is empty or not JSON (a proxy's error page)
            return Failure.transient("the reply was not JSON (an empty or garbled body)")
        if isinstance(exc, StreamEnded):
            return Failure.transient(str(exc))
        names = {cls.__name__ for cls in type(exc).__mro__}
        if names & _TIMEOUT_NAMES:
            return Failure.transient("timed out")
        if names & _CONNECTION_NAMES:
            return Failure.transient(f"connection failed ({type(exc).__name__})")
        exc = exc.__cause__
    return None


def retry_after_seconds(headers: Mapping[str, str] | None, now: float | None = None) -> float | None:
    """The wait a response asks for: `retry-after-ms`, or `Retry-After` in seconds or as an HTTP date."""
    if not headers:
        return None
    lower = {str(k).lower(): str(v) for k, v in headers.items()}
    try:
        return max(0.0, float(lower["retry-after-ms"]) / 1000)
    except (KeyError, ValueError):
        pass
    value = lower.get("retry-after", "").strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def backoff(attempt: int, config: RetryConfig, rand: Callable[[], float] = random.random) -> float:
    """Exponential backoff with jitter before attempt `attempt + 1` (attempt counts from 1)."""
    ceiling = min(config.max_backoff, config.initial_backoff * 2 ** (attempt - 1))
    return ceiling * (0.5 + rand() / 2)


def call_with_retry(
    attempt: Callable[[], T],
    classify: Callable[[BaseException], Failure | None],
    config: RetryConfig,
    *,
    label: str = "model call",
    sleep: Callable[[float], object] | None = None,
    clock: Callable[[], float] = time.monotonic,
    cancel: CancelToken | None = None,
    on_retry: Callable[[Failure, float], object] | None = None,
) -> T:
    """Run `attempt` until it succeeds, a failure is not retryable, the policy's bounds are reached, or `cancel`
    is set (ModelCancelled; the wait between attempts ends at once).

    `classify` turns an exception into a `Failure`; exceptions it returns None for propagate unchanged.
    `on_retry(failure, wait)` hears of each failure that is tried again, before the wait.
    """
    if sleep is None:
        sleep = cancel.wait if cancel is not None else time.sleep
    start = clock()
    number = 0
    while True:
        number += 1
        _check_cancel(cancel, label)
        try:
            return attempt()
        except Exception as exc:
            _check_cancel(cancel, label, exc)
            failure = classify(exc)
            if failure is None:
                raise
            error = exc
        elapsed = clock() - start
        if not failure.retryable:
            raise failure.error(f"{label}: {failure.reason}", **failure.details) from error
        if number >= config.max_attempts:
            raise ModelError(
                f"{label}: gave up after {number} attempts in {elapsed:.1f}s; last: {failure.reason}"
            ) from error
        wait = failure.retry_after if failure.retry_after is not None else backoff(number, config)
        if elapsed + wait > config.max_total_seconds:
            asked = " (as the server asked)" if failure.retry_after is not None else ""
            raise ModelError(
                f"{label}: gave up after {number} attempts in {elapsed:.1f}s; last: {failure.reason}; "
                f"waiting {wait:.1f}s more{asked} would pass retry.max_total_seconds ({config.max_total_seconds:g})"
            ) from error
        logger.warning("%s: %s; retrying in %.1fs (attempt %d of %d)", label, failure.reason, wait, number + 1,
                       config.max_attempts)
        if on_retry is not None:
            on_retry(failure, wait)
        sleep(wait)


def _check_cancel(cancel: CancelToken | None, label: str, error: BaseException | None = None) -> None:
    if cancel is not None and cancel.cancelled:
        raise ModelCancelled(f"{label}: cancelled") from error
