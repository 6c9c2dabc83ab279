"""Telemetry: OpenTelemetry traces and metrics of what agents do (`telemetry:` in the config), and `anges stats`,
figures read from the store alone.

- `tracing.py`: `Telemetry`, the listener that turns recorded events and model calls into spans, on the thread of
  `handoff.py`; `facts.py` their attributes; `instruments.py` the metrics; `exporting.py` the SDK and its OTLP
  exporters, set up from the config
- `batches.py`: a batch as one trace, a span per task, the context handed to the workers
- `stats.py`: steps, calls, tokens, cost and where the time went, per run and in total, from the streams

Nothing of OpenTelemetry is imported until telemetry is enabled.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from anges.config.types import TelemetryConfig
    from anges.telemetry.tracing import Telemetry

_made: dict[TelemetryConfig, Telemetry] = {}
_lock = threading.Lock()


def telemetry_for(config: TelemetryConfig) -> Telemetry | None:
    """This process's `Telemetry` for the configuration (made once); None when OTEL_SDK_DISABLED is true.

    Raises ConfigError when the OpenTelemetry SDK is not installed (`pip install 'anges[otel]'`).
    """
    from anges.telemetry.exporting import disabled, from_config

    if disabled():
        return None
    with _lock:
        if config not in _made:
            _made[config] = from_config(config)
        return _made[config]


def flush() -> None:
    """Export what this process's telemetry has buffered (a Ray worker lives on after its task)."""
    with _lock:
        made = list(_made.values())
    for telemetry in made:
        telemetry.flush()


def shutdown() -> None:
    """Send what is left and stop this process's exporters (done at exit anyway); telemetry starts afresh after."""
    with _lock:
        made = list(_made.values())
        _made.clear()
    for telemetry in made:
        telemetry.close()


@contextmanager
def attached(traceparent: str) -> Iterator[None]:
    """Inside, runs started on this thread are children of the span `traceparent` names (W3C Trace Context)."""
    if not traceparent:
        yield
        return
    from opentelemetry import context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    token = context.attach(TraceContextTextMapPropagator().extract({"traceparent": traceparent}))
    try:
        yield
    finally:
        context.detach(token)
