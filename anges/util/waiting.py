"""The one wait for work running elsewhere (a model call, an MCP tool call, a person's approval) that a Ctrl-C,
a Stop or a time limit must cut short within a second."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

POLL_SECONDS = 0.1
"""How often `wait_for` asks whether to stop waiting."""


def wait_for(done: Callable[[float], bool], stop: Callable[[], bool], timeout: float | None = None) -> str:
    """Wait until `done(seconds)` (which blocks up to `seconds`) says the work is done, asking `stop()` every
    POLL_SECONDS: "done", "stopped" (as soon as `stop()` is true) or "timeout" (after `timeout` seconds)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = POLL_SECONDS if deadline is None else min(POLL_SECONDS, max(deadline - time.monotonic(), 0.0))
        if done(left):
            return "done"
        if stop():
            return "stopped"
        if deadline is not None and time.monotonic() >= deadline:
            return "timeout"


def future_done(future: Any) -> Callable[[float], bool]:
    """`done` for `wait_for` from a concurrent.futures.Future."""
    import concurrent.futures

    return lambda seconds: bool(concurrent.futures.wait([future], timeout=seconds).done)
