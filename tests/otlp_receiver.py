"""A small OTLP/HTTP receiver on 127.0.0.1: takes what an OpenTelemetry exporter POSTs to /v1/traces and
/v1/metrics, decodes it with opentelemetry-proto and keeps the spans and metric names.

    with OTLPReceiver() as receiver:
        ... export to receiver.url ...
        receiver.wait_for(lambda spans: any(s.name.startswith("invoke_agent") for s in spans))
"""

from __future__ import annotations

import gzip
import threading
import time
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    start: int
    end: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    status: int
    """0 unset, 1 ok, 2 error."""
    events: list[str] = field(default_factory=list)


def value_of(any_value) -> Any:
    """A plain Python value from an OTLP AnyValue."""
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [value_of(item) for item in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


def attributes_of(pairs) -> dict[str, Any]:
    return {pair.key: value_of(pair.value) for pair in pairs}


class OTLPReceiver:
    """Collects the spans and metric names sent to it."""

    def __init__(self):
        self.spans: list[ReceivedSpan] = []
        self.metrics: dict[str, list] = {}
        self.requests = 0
        self.bodies: list[bytes] = []
        """Every request's body as it came (decompressed): all that was exported, to search for text."""
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                encoding = (self.headers.get("Content-Encoding") or "").lower()
                body = gzip.decompress(body) if encoding == "gzip" else zlib.decompress(body) if \
                    encoding == "deflate" else body
                receiver.bodies.append(body)
                if self.path == "/v1/traces":
                    receiver._take_spans(ExportTraceServiceRequest.FromString(body))
                    reply = ExportTraceServiceResponse()
                elif self.path == "/v1/metrics":
                    receiver._take_metrics(ExportMetricsServiceRequest.FromString(body))
                    reply = ExportMetricsServiceResponse()
                else:
                    self.send_error(404)
                    return
                data = reply.SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> OTLPReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def wait_for(self, ready, timeout: float = 20) -> list[ReceivedSpan]:
        """The spans once `ready(spans)` is true; AssertionError after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                spans = list(self.spans)
            if ready(spans):
                return spans
            assert time.monotonic() < deadline, f"spans never got ready: {[s.name for s in spans]}"
            time.sleep(0.05)

    def _take_spans(self, request) -> None:
        with self._lock:
            self.requests += 1
            for resource_spans in request.resource_spans:
                resource = attributes_of(resource_spans.resource.attributes)
                for scope in resource_spans.scope_spans:
                    for span in scope.spans:
                        self.spans.append(ReceivedSpan(
                            span.name, span.trace_id.hex(), span.span_id.hex(), span.parent_span_id.hex(),
                            span.start_time_unix_nano, span.end_time_unix_nano, attributes_of(span.attributes),
                            resource, span.status.code, [event.name for event in span.events]))

    def _take_metrics(self, request) -> None:
        with self._lock:
            for resource_metrics in request.resource_metrics:
                for scope in resource_metrics.scope_metrics:
                    for metric in scope.metrics:
                        kind = metric.WhichOneof("data")
                        points = getattr(metric, kind).data_points
                        self.metrics.setdefault(metric.name, []).extend(
                            attributes_of(point.attributes) for point in points)
