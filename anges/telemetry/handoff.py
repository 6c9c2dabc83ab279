"""The hand-off: telemetry's work done on a thread of its own, in the order it was handed over, a batch every
`PERIOD` seconds, so a traced agent loop only appends to a queue (the OpenTelemetry SDK's spans and metrics cost
tens of microseconds each, and waking a thread for every event would make the loop wait for it)."""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

log = logging.getLogger("anges.telemetry")

PERIOD = 0.05
"""Seconds between two batches of work."""
MAX_WAITING = 10_000
"""Work items waiting at most; past that new ones are dropped (and counted) rather than growing without bound."""
DRAIN_SECONDS = 60.0
"""The longest `drain` waits for the worker."""


class Handoff:
    """One worker thread, started on first use, doing what it is handed in order; a failure is logged, never raised."""

    def __init__(self, name: str = "anges-telemetry", period: float = PERIOD, limit: int = MAX_WAITING):
        self.name = name
        self.period = period
        self.limit = limit
        self.dropped = 0
        """Work items dropped because too many were waiting."""
        self._items: deque = deque()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def __call__(self, work: Callable[..., Any], *args: Any) -> None:
        """Do `work(*args)` on the worker thread, after everything handed over before it."""
        if self._thread is None:
            self._start()
        if len(self._items) >= self.limit:
            self.dropped += 1
            if self.dropped == 1:
                log.warning("telemetry: more than %d items waiting; dropping the newest", self.limit)
            return
        self._items.append((work, args))

    def drain(self) -> None:
        """Wait until everything handed over so far is done."""
        if self._thread is None:
            return
        done = threading.Event()
        self._items.append((done.set, ()))
        self._wake.set()
        done.wait(DRAIN_SECONDS)

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name=self.name, daemon=True)
                self._thread.start()

    def _work(self) -> None:
        while True:
            self._wake.wait(self.period)
            self._wake.clear()
            while self._items:
                work, args = self._items.popleft()
                try:
                    work(*args)
                except Exception:  # noqa: BLE001  (telemetry must not break the runs it watches)
                    log.warning("telemetry: %s failed", getattr(work, "__name__", work), exc_info=True)
