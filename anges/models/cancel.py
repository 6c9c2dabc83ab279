"""Abandoning a model call: a token the caller sets, honoured by the retry loop and by the HTTP connections.

The agent runs each model call under a `CancelToken` (`cancellable(token)`); a provider picks it up with
`current_token()`, stops retrying when it is set, and drops its connections so a request the server holds
open (or a reply being streamed) ends at once instead of at the read timeout.
"""

from __future__ import annotations

import queue
import socket
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext, suppress
from contextvars import ContextVar
from typing import Any

IDLE_SECONDS = 60.0
"""A `CallThread` with no work for this long ends (the next call starts another)."""


class CancelToken:
    """Set once to abandon a call: waits on it wake, and callbacks registered with `on_cancel` run."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], object]] = []

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self) -> None:
        """Set the token and run the registered callbacks (once)."""
        with self._lock:
            if self._event.is_set():
                return
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`; True (at once) when the token is set."""
        return self._event.wait(seconds)

    @contextmanager
    def on_cancel(self, callback: Callable[[], object]) -> Iterator[None]:
        """Run `callback` if the token is set inside the block (at once if it already is)."""
        with self._lock:
            already = self._event.is_set()
            if not already:
                self._callbacks.append(callback)
        if already:
            callback()
        try:
            yield
        finally:
            with self._lock, suppress(ValueError):
                self._callbacks.remove(callback)


_current: ContextVar[CancelToken | None] = ContextVar("anges_cancel_token", default=None)


def current_token() -> CancelToken | None:
    """The token of the model call running in this context, if its caller gave one."""
    return _current.get()


@contextmanager
def cancellable(token: CancelToken) -> Iterator[CancelToken]:
    """Run the block's model calls under `token`."""
    reset = _current.set(token)
    try:
        yield token
    finally:
        _current.reset(reset)


def watching(token: CancelToken | None, callback: Callable[[], object]):
    """`token.on_cancel(callback)`, or nothing without a token."""
    return token.on_cancel(callback) if token is not None else nullcontext()


class Connections:
    """The sockets an httpx client opens, so that a cancel can shut them down and wake the call blocked on one.

    Give the client `event_hooks=connections.event_hooks`; it traces each connection as it is made
    (httpcore's `trace` extension). `abort()` shuts down every open one: a concurrent call of the same
    client sees a dropped connection, which the retry policy treats as transient.
    """

    def __init__(self) -> None:
        self._sockets: weakref.WeakSet[socket.socket] = weakref.WeakSet()
        self._lock = threading.Lock()

    @property
    def event_hooks(self) -> dict[str, list[Callable[[Any], None]]]:
        return {"request": [self._trace_request]}

    def abort(self) -> None:
        """Shut down every connection the client has open (a blocked read returns at once)."""
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            with suppress(OSError):  # already closed
                socket.socket.shutdown(sock, socket.SHUT_RDWR)

    def _trace_request(self, request: Any) -> None:
        inner = request.extensions.get("trace")

        def trace(name: str, info: dict) -> None:
            if name.endswith(("connect_tcp.complete", "start_tls.complete")):
                self._add(info.get("return_value"))
            if inner is not None:
                inner(name, info)

        request.extensions["trace"] = trace

    def _add(self, stream: Any) -> None:
        sock = stream.get_extra_info("socket") if hasattr(stream, "get_extra_info") else None
        if isinstance(sock, socket.socket):
            with self._lock:
                self._sockets.add(sock)


class Pending:
    """A call handed to a `CallThread`: wait for it, then take its result (or its exception)."""

    def __init__(self, call: Callable[[], Any], token: CancelToken):
        self.call = call
        self.token = token
        self._done = threading.Event()
        self._outcome: tuple[bool, Any] = (False, None)

    def wait(self, seconds: float) -> bool:
        """True once the call has ended."""
        return self._done.wait(seconds)

    def result(self) -> Any:
        """The call's return value; its exception is raised here."""
        ok, value = self._outcome
        if not ok:
            raise value
        return value

    def run(self) -> None:
        with cancellable(self.token):
            try:
                self._outcome = (True, self.call())
            except BaseException as exc:  # handed to whoever waits, in its own thread
                self._outcome = (False, exc)
        self._done.set()


class CallThread:
    """A daemon thread that runs calls one after another, each under its cancel token.

    Being a daemon, a call that ignores its token cannot keep the process from exiting; the thread ends
    when `close`d or after IDLE_SECONDS without work.
    """

    def __init__(self, name: str):
        self._calls: queue.Queue[Pending | None] = queue.Queue()
        self._lock = threading.Lock()
        self._open = True
        threading.Thread(target=self._serve, name=name, daemon=True).start()

    def start(self, call: Callable[[], Any], token: CancelToken) -> Pending | None:
        """Queue `call`; None when the thread has ended (start another)."""
        with self._lock:
            if not self._open:
                return None
            pending = Pending(call, token)
            self._calls.put(pending)
            return pending

    def close(self) -> None:
        """End the thread once its current call (if any) returns."""
        with self._lock:
            self._open = False
            self._calls.put(None)

    def _serve(self) -> None:
        while True:
            try:
                pending = self._calls.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                with self._lock:
                    if self._calls.empty():
                        self._open = False
                        return
                continue
            if pending is None:
                return
            pending.run()
