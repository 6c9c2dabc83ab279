"""Sending a prepared call: the credential added, redirects followed only within the base URL (refused elsewhere),
429 and 5xx tried again as the server asks (bounded; idempotent methods only unless configured), the whole exchange
under a time limit and cut short by a stop within a second."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any
from urllib.parse import urljoin

from anges.tools.openapi.calls import Prepared, confined

IDEMPOTENT = ("GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE")
MAX_RETRY_WAIT = 60.0
"""A server that asks for a longer wait (Retry-After) is not tried again: the model reads its answer."""
MAX_REDIRECTS = 5
WAIT_MARGIN = 5.0
"""Seconds past the attempt's timeout before the exchange is abandoned (a server trickling bytes)."""
SHOWN_HEADERS = ("content-type", "content-length", "location", "retry-after", "link", "etag", "last-modified",
                 "x-request-id", "request-id", "x-total-count", "www-authenticate", "ratelimit-remaining",
                 "ratelimit-reset", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset")
"""The headers of a response the model reads (never Set-Cookie)."""
USER_AGENT = "anges (OpenAPI tool)"


@dataclass(frozen=True)
class Sending:
    """How one source's calls are sent."""

    base_url: str
    headers: dict[str, str]
    """The credential's and the configured headers (secret: never shown or recorded)."""
    query: tuple[tuple[str, str], ...] = ()
    """The credential's query parameter, if it goes there (never shown or recorded)."""
    timeout: float = 30.0
    retries: int = 2
    retry_non_idempotent: bool = False
    max_body: int = 10_000_000


@dataclass
class Received:
    """What came back (or why nothing did: `error` is timeout, connection, redirect_refused or interrupted)."""

    url: str
    status: int | None = None
    reason: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    size: int = 0
    """Bytes of the body read (at most the cap)."""
    truncated: bool = False
    """The body was longer than the cap: the rest was not read."""
    attempts: int = 1
    duration: float = 0.0
    error: str = ""
    message: str = ""


class _Masked(logging.Filter):
    """Masks the credentials in what the HTTP library logs (`-v` prints each request's URL: a key in the query)."""

    def __init__(self) -> None:
        super().__init__()
        self.secrets: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        from anges.util.masking import mask_secrets

        if self.secrets:
            record.msg, record.args = mask_secrets(record.getMessage(), self.secrets), None
        return True


_MASKED = _Masked()


def mask_logs(secrets: list[str]) -> None:
    """Mask these secrets in what the HTTP library logs, from now on in this process."""
    logger = logging.getLogger("httpx2")
    if _MASKED not in logger.filters:
        logger.addFilter(_MASKED)
    _MASKED.secrets.update(secrets)


def send(prepared: Prepared, sending: Sending, stop: Callable[[], bool]) -> Received:
    """Send `prepared` and return what came back; never raises for what the network or the server does."""
    import httpx2

    from anges.models.cancel import Connections

    started, connections = time.monotonic(), Connections()
    retryable = prepared.method in IDEMPOTENT or sending.retry_non_idempotent
    method, url, body, attempts, redirects = prepared.method, prepared.url, prepared.body, 0, 0
    timeout = httpx2.Timeout(sending.timeout, connect=min(sending.timeout, 10.0))
    with httpx2.Client(timeout=timeout, follow_redirects=False, event_hooks=connections.event_hooks,
                       verify=_tls()) as client:
        while True:
            attempts += 1
            request = client.build_request(method, url, params=_params(url, sending.query), content=body,
                                           headers=[("User-Agent", USER_AGENT), *prepared.headers,
                                                    *sending.headers.items()])
            outcome, value = _exchange(client, request, sending, stop, connections)
            done = Received(url, attempts=attempts, duration=time.monotonic() - started)
            if outcome == "stopped":
                return _failed(done, "interrupted", "the run was stopped before the answer came")
            if outcome == "done":
                _fill(done, value)
            elif outcome == "timeout" or _is_timeout(value):
                _failed(done, "timeout", f"no answer within {sending.timeout:g} s")
            else:
                _failed(done, "connection", f"{type(value).__name__}: {value or 'the connection failed'}")
            wait = _retry_wait(done, attempts, sending.retries) if retryable else None
            if wait is not None:
                if not _pause(wait, stop):
                    return _failed(done, "interrupted", "the run was stopped while waiting to try again")
                continue
            target = None if done.error else _redirect(done, method)
            if target is None:
                return done
            redirects += 1
            if not confined(target, sending.base_url) or redirects > MAX_REDIRECTS:
                why = f"outside {sending.base_url}" if redirects <= MAX_REDIRECTS else f"past {MAX_REDIRECTS} redirects"
                return _failed(done, "redirect_refused", f"the server redirected to {target}, {why}: not followed")
            if done.status == 303:
                method, body = "GET", None
            url, attempts = target, 0


@lru_cache(maxsize=1)
def _tls() -> Any:
    """One TLS context for every call (making one takes a good part of a second)."""
    import httpx2

    return httpx2.create_ssl_context()


def _retry_wait(done: Received, attempts: int, retries: int) -> float | None:
    """Seconds to wait before trying again (as Retry-After asks, else backing off); None: do not."""
    from anges.models.retry import retry_after_seconds

    if attempts > retries or not (done.error == "connection" or done.status == 429 or (done.status or 0) >= 500):
        return None
    asked = retry_after_seconds(done.headers) if not done.error else None
    if asked is None:
        return min(0.5 * 2 ** (attempts - 1), 8.0)
    return asked if asked <= MAX_RETRY_WAIT else None


def _params(url: str, query: tuple[tuple[str, str], ...]) -> Any:
    """The URL's own query with the credential's parameter added (httpx replaces the URL's query with `params`)."""
    if not query:
        return None
    from urllib.parse import parse_qsl, urlsplit

    return [*parse_qsl(urlsplit(url).query, keep_blank_values=True), *query]


def _exchange(client, request, sending: Sending, stop: Callable[[], bool], connections) -> tuple[str, Any]:
    """One request and its body (up to the cap), on a thread of its own: ("done", the facts), ("error", exception),
    ("stopped", None) or ("timeout", None)."""
    from anges.util.waiting import future_done, wait_for

    future: Future = Future()

    def run() -> None:
        import httpx2

        try:
            response = client.send(request, stream=True)
            try:
                body, truncated = bytearray(), False
                for chunk in response.iter_raw() if request.method == "HEAD" else response.iter_bytes():
                    room = sending.max_body - len(body)
                    body += chunk[:max(room, 0)]
                    if len(chunk) > room:
                        truncated = True
                        break
            finally:
                response.close()
            future.set_result((response.status_code, response.reason_phrase, dict(response.headers), bytes(body),
                               truncated))
        except httpx2.HTTPError as exc:  # the network's or the server's doing: the model reads it
            future.set_exception(exc)
        except BaseException as exc:  # noqa: BLE001 - anything else is a bug, raised in the waiting thread
            future.set_exception(_Bug(exc))

    threading.Thread(target=run, name="anges-openapi-call", daemon=True).start()
    ended = wait_for(future_done(future), stop, sending.timeout + WAIT_MARGIN)
    if ended != "done":
        connections.abort()
        return ("stopped" if ended == "stopped" else "timeout"), None
    error = future.exception()
    if isinstance(error, _Bug):
        raise error.error
    return ("error", error) if error is not None else ("done", future.result())


class _Bug(Exception):
    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


def _fill(done: Received, facts: tuple) -> None:
    status, reason, headers, body, truncated = facts
    lower = {key.lower(): value for key, value in headers.items()}
    done.status, done.reason, done.body, done.size, done.truncated = status, reason, body, len(body), truncated
    done.headers = {key: lower[key] for key in SHOWN_HEADERS if key in lower}


def _redirect(done: Received, method: str) -> str | None:
    """Where a redirect that anges may follow points (None: not a redirect, or one to show the model as it is: a 301
    or 302 after a method other than GET and HEAD)."""
    location = done.headers.get("location")
    if done.status not in (301, 302, 303, 307, 308) or not location:
        return None
    if done.status in (301, 302) and method not in ("GET", "HEAD"):
        return None
    return urljoin(done.url, location)


def _failed(done: Received, error: str, message: str) -> Received:
    done.error, done.message = error, message
    return done


def _is_timeout(exc: BaseException) -> bool:
    return any(cls.__name__ in ("TimeoutException", "TimeoutError") for cls in type(exc).__mro__)


def _pause(seconds: float, stop: Callable[[], bool]) -> bool:
    """Wait `seconds`; False as soon as `stop()` is true."""
    from anges.util.waiting import wait_for

    event = threading.Event()
    return wait_for(event.wait, stop, seconds) != "stopped"
