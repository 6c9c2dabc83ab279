"""The OpenTelemetry SDK set up from `telemetry:`: one tracer and one meter provider per process, exporting over
OTLP/HTTP to the configured endpoint (or the one the OTEL_EXPORTER_OTLP_* variables name), or, as
OTEL_TRACES_EXPORTER and OTEL_METRICS_EXPORTER say, to stderr (`console`) or nowhere (`none`)."""

from __future__ import annotations

import atexit
import logging
import os
import socket
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from anges import __version__
from anges.config.types import TelemetryConfig
from anges.exceptions import ConfigError

if TYPE_CHECKING:
    from anges.telemetry.tracing import Telemetry

CLOSE_SECONDS = 2.0
"""At exit, the most time given to sending what is left (a collector that does not answer must not hold anges)."""
log = logging.getLogger("anges.telemetry")
MISSING = ("telemetry.enabled is true, but the OpenTelemetry SDK and its OTLP exporter are not installed: "
           "install anges with its otel extra (in the anges checkout: pipx install --force '.[otel]', uv tool install "
           "--force '.[otel]' or pip install '.[otel]'), or set telemetry.enabled: false")
EXPORTERS = ("otlp", "console", "none")
"""What OTEL_TRACES_EXPORTER and OTEL_METRICS_EXPORTER may name (a comma-separated list; default otlp)."""


def from_config(config: TelemetryConfig) -> Telemetry:
    """A `Telemetry` exporting to the configured collector; closed (what is left sent) when the process exits."""
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor
    except ImportError as exc:
        raise ConfigError(f"{MISSING} ({exc})") from None
    from anges.telemetry.tracing import Telemetry

    span_exporters = exporters("OTEL_TRACES_EXPORTER")
    metric_exporters = exporters("OTEL_METRICS_EXPORTER") if config.metrics else []

    # which process and machine sent a span: a batch's runs come from its workers, on Ray from other nodes
    resource = Resource.create({"service.version": __version__, "process.pid": os.getpid(),
                                "host.name": socket.gethostname()})
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):  # no OTEL_SERVICE_NAME
        resource = resource.merge(Resource({"service.name": "anges"}))
    tracer_provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    spans = None
    if "otlp" in span_exporters:
        spans = _reporting(OTLPSpanExporter)(endpoint=_endpoint(config.endpoint, "traces"))
        tracer_provider.add_span_processor(BatchSpanProcessor(spans))
    if "console" in span_exporters:  # each span as it ends, on stderr (stdout is the answer's, or a protocol's)
        tracer_provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
    makers: dict[str, Callable] = {
        "otlp": lambda: _reporting(OTLPMetricExporter)(endpoint=_endpoint(config.endpoint, "metrics")),
        "console": lambda: ConsoleMetricExporter(out=sys.stderr)}
    readers = [PeriodicExportingMetricReader(makers[name]()) for name in metric_exporters if name in makers]
    meter_provider = MeterProvider(resource=resource, metric_readers=readers, shutdown_on_exit=False) if readers \
        else None

    def close() -> None:
        def shut() -> None:
            tracer_provider.shutdown()
            if meter_provider is not None:
                meter_provider.shutdown()

        closing = threading.Thread(target=shut, name="anges-telemetry-close", daemon=True)
        closing.start()
        closing.join(CLOSE_SECONDS)
        if closing.is_alive():
            log.warning("telemetry: the collector at %s did not take the last spans within %g s; they are lost",
                        spans.endpoint if spans is not None else "the exporter", CLOSE_SECONDS)

    telemetry = Telemetry(tracer_provider, meter_provider, config.capture_content, config.max_content_chars, close)
    atexit.register(telemetry.close)
    if not logging.getLogger().handlers:  # nothing shows log records (no -v): the exporters' retries stay quiet
        logging.getLogger("opentelemetry").setLevel(logging.ERROR)
    return telemetry


def exporters(variable: str) -> list[str]:
    """The exporters an OTEL_*_EXPORTER variable names (otlp when it is not set); ConfigError for one anges lacks."""
    names = [name.strip().lower() for name in os.environ.get(variable, "otlp").split(",") if name.strip()]
    unknown = [name for name in names if name not in EXPORTERS]
    if unknown:
        raise ConfigError(f"{variable}={os.environ[variable]}: anges exports {', '.join(EXPORTERS[:-1])} or "
                          f"{EXPORTERS[-1]}, not {', '.join(unknown)}")
    return names


def _reporting(exporter: type) -> type:
    """`exporter` saying once, as a warning of anges, that the collector did not take what it sent."""

    class Reporting(exporter):
        said = False

        @property
        def endpoint(self) -> str:
            return str(getattr(self, "_endpoint", "") or "the OTLP endpoint")

        def export(self, batch, *args, **kwargs):
            result = super().export(batch, *args, **kwargs)
            if getattr(result, "name", "") == "FAILURE" and not self.said:
                self.said = True
                log.warning("telemetry: the collector at %s did not take what was sent (more failures are not "
                            "reported; -v shows why)", self.endpoint)
            return result

    return Reporting


def _endpoint(base: str, signal: str) -> str | None:
    """The URL of one signal under the configured base URL; None lets the exporter read OTEL_EXPORTER_OTLP_*."""
    if not base:
        return None
    return f"{base.rstrip('/')}/v1/{signal}"


def disabled() -> bool:
    """OTEL_SDK_DISABLED=true turns telemetry off whatever the configuration says (the SDK's own switch)."""
    return os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"
