"""A batch as one trace: an `invoke_workflow` span for the batch and a span per task, whose W3C `traceparent` the
task's worker gets (`anges.telemetry.attached`), so each run is a child of its task's span on any machine."""

from __future__ import annotations

from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from anges.telemetry.facts import content, kind
from anges.telemetry.tracing import Telemetry

FAILED = "failed"


class BatchTrace:
    """The spans of one run of a batch (the driver's side)."""

    def __init__(self, telemetry: Telemetry, batch_id: str, tasks: int):
        self.telemetry = telemetry
        self.batch = telemetry.tracer.start_span(
            f"invoke_workflow {batch_id}", kind=SpanKind.INTERNAL,
            attributes={"gen_ai.operation.name": "invoke_workflow", "gen_ai.workflow.name": batch_id,
                        "anges.batch.id": batch_id, "anges.batch.tasks": tasks})
        self.tasks: dict[str, Span] = {}

    def task_started(self, task_id: str) -> str:
        """Start the task's span; the `traceparent` its worker's run goes under."""
        span = self.telemetry.tracer.start_span(f"batch_task {task_id}", context=trace.set_span_in_context(self.batch),
                                                attributes={"anges.batch.task": task_id})
        self.tasks[task_id] = span
        carrier: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(carrier, trace.set_span_in_context(span))
        return carrier.get("traceparent", "")

    def task_finished(self, task_id: str, row: dict, outcome: str) -> None:
        """End the task's span with how it ended: its status, its outcome and its check."""
        span = self.tasks.pop(task_id, None)
        if span is None:
            return
        attributes: dict[str, Any] = {"anges.run.status": kind(row["status"]), "anges.batch.outcome": kind(outcome)}
        if row.get("reason"):
            attributes["anges.run.stop_reason"] = kind(row["reason"])
        if row.get("check"):
            attributes["anges.batch.check"] = kind(row["check"])
        span.set_attributes(attributes)
        if outcome == FAILED or row.get("check") == FAILED:  # an error's words (a setup's output) only if captured
            words = content(str(row.get("error") or ""), [], 500) if self.telemetry.capture_content else ""
            span.set_status(Status(StatusCode.ERROR, words or kind(row.get("reason") or row.get("check") or FAILED)))
        span.end()

    def close(self, counts: dict[str, int]) -> None:
        """End the batch's span (and any task span left open) and send the trace."""
        for span in self.tasks.values():
            span.end()
        self.batch.set_attributes({f"anges.batch.{name}": count for name, count in counts.items()})
        self.batch.end()
        self.telemetry.flush()
