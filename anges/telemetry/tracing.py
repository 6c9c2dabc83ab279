"""`Telemetry`: a listener (`anges.agents.listening`) that turns what agents do into OpenTelemetry spans and metrics.

A run is an `invoke_agent` span; each model call a `chat` (or `generate_content`) span under it, each action an
`execute_tool` span, each approval an `approval` span. A child agent's run is a child of its parent's
CALL_CHILD_AGENT span. Spans are made from the events as they are recorded, with the times they happened, on a
thread of their own (`handoff.py`): the agent's loop only hands each event over.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from anges import __version__
from anges.store.events import REQUEST_EVENT_TYPES, ChildReturn, Event, kind_of
from anges.store.results import ShellRun
from anges.telemetry import facts
from anges.telemetry.handoff import Handoff
from anges.telemetry.instruments import Instruments

ENDED = ("completed", "answered", "help_needed", "interrupted")
"""The stream statuses that end a run."""
MODELS_KEPT = 16
"""How many models' descriptions are kept (one per model object: a web chat makes one per run)."""
USER_STOP = "interrupt"
"""A run stopped by Ctrl-C or Stop did not fail."""


@dataclass(frozen=True)
class _Agent:
    """What telemetry reads of an agent, taken when it hands an event over (the agent goes on meanwhile)."""

    uid: str
    agent_type: str
    parent_ids: tuple[str, ...]
    secrets: list[str]
    inference_func: Any

    @classmethod
    def of(cls, agent: Any) -> _Agent:
        return cls(agent.uid, agent.agent_type, tuple(agent.parent_ids), agent.secrets, agent.inference_func)


@dataclass
class _Open:
    """The open spans of one agent's run and when it last did something (where its next action's span starts)."""

    run: Span | None = None
    context: Any = None
    """The context whose span is `run`: where the run's model calls and actions go."""
    mark: int = field(default_factory=time.time_ns)
    delegations: dict[str, Span] = field(default_factory=dict)
    """The CALL_CHILD_AGENT span of each child running, by the child's id."""
    approvals: dict[str, Span] = field(default_factory=dict)
    tokens: list[int] = field(default_factory=lambda: [0, 0])


class Telemetry:
    """Spans and metrics of every agent it listens to (a whole agent tree shares one)."""

    def __init__(self, tracer_provider: Any, meter_provider: Any = None, capture_content: bool = False,
                 max_content_chars: int = 20000, on_close: Any = None):
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self.tracer = tracer_provider.get_tracer("anges", __version__)
        self.instruments = Instruments(meter_provider) if meter_provider is not None else None
        self.capture_content = capture_content
        self.max_content_chars = max_content_chars
        self.on_close = on_close
        self._open: dict[str, _Open] = {}
        """The open spans of each agent (touched on the hand-off's thread only)."""
        self._models: dict[int, tuple[Any, dict]] = {}
        self._handoff = Handoff()

    # --- the listener ---------------------------------------------------------------------------------------

    def recorded(self, agent: Any, event: Event) -> None:
        """Make or end the spans an event stands for (on the telemetry thread; a failure there is logged)."""
        ambient = otel_context.get_current() if event.type in REQUEST_EVENT_TYPES else None
        self._handoff(self._recorded, _Agent.of(agent), event, time.time_ns(), ambient)

    def model_called(self, agent: Any, call: Any) -> None:
        """A `chat` span for one model call, and its duration and tokens as metrics."""
        self._handoff(self._model_called, _Agent.of(agent), call)

    def flush(self) -> None:
        """Make the spans of everything heard so far, and export what is buffered now."""
        self._handoff.drain()
        for provider in (self.tracer_provider, self.meter_provider):
            if provider is not None and hasattr(provider, "force_flush"):
                provider.force_flush()

    def close(self) -> None:
        """Export what is left and stop the exporters (once)."""
        self._handoff.drain()
        close, self.on_close = self.on_close, None
        if close is not None:
            close()

    # --- events -------------------------------------------------------------------------------------------

    def _recorded(self, agent: _Agent, event: Event, now: int, ambient: Any) -> None:
        state = self._open.get(agent.uid)
        data = event.data
        if event.type in REQUEST_EVENT_TYPES:
            state = self._open.setdefault(agent.uid, _Open())
            self._begin_run(agent, state, event, now, ambient)
        elif state is None:
            return  # no run open: the end of one whose process died, recorded as the next begins
        elif event.type == "approval_requested":
            state.approvals[str(data.get("request_id"))] = self._span(
                f"approval {data.get('action_type', '')}", state, now, facts.approval_attributes(data))
        elif event.type == "approval_decided":
            self._decided(state, event, now)
        elif event.type in ("new_child_agent", "resume_child_agent"):
            state.delegations[str(data.get("agent_id"))] = self._span(
                "execute_tool CALL_CHILD_AGENT", state, state.mark, facts.action_attributes(event))
        elif (child := ChildReturn.of(event)) is not None:
            self._action(agent, state, event, now, state.delegations.pop(child.agent_id, None))
        elif facts.tool_name(event):
            self._action(agent, state, event, now)
        if kind_of(event.type).status in ENDED and state.run is not None:
            self._end_run(agent, state, state.run, event, now)
        state.mark = now

    def _begin_run(self, agent: _Agent, state: _Open, event: Event, now: int, ambient: Any) -> None:
        if state.run is not None:  # the last run ended without an event saying so
            state.run.end(end_time=now)
        model = self._described(agent.inference_func)
        attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent.agent_type,
                      "gen_ai.agent.id": agent.uid, "gen_ai.conversation.id": agent.uid,
                      "gen_ai.provider.name": model["gen_ai.provider.name"],
                      "gen_ai.request.model": model["gen_ai.request.model"], "anges.request.kind": event.type}
        if self.capture_content:
            attributes["gen_ai.input.messages"] = facts.messages("user", event.content, agent.secrets,
                                                                 self.max_content_chars)
        state.tokens = [0, 0]
        state.run = self.tracer.start_span(f"invoke_agent {agent.agent_type}", context=self._parent(agent, ambient),
                                           kind=SpanKind.INTERNAL, start_time=now, attributes=attributes)
        state.context = trace.set_span_in_context(state.run)

    def _end_run(self, agent: _Agent, state: _Open, span: Span, event: Event, now: int) -> None:
        status = kind_of(event.type).status or ""
        reason = facts.kind(event.data.get("reason") or "stopped") if status == "interrupted" else ""
        span.set_attributes({"anges.run.status": status, "gen_ai.usage.input_tokens": state.tokens[0],
                             "gen_ai.usage.output_tokens": state.tokens[1]})
        if reason:
            span.set_attribute("anges.run.stop_reason", reason)
        if reason and reason != USER_STOP:
            span.set_attributes({"error.type": reason})
            span.set_status(Status(StatusCode.ERROR, self._described_error(reason, event.content, agent)))
        elif self.capture_content:
            span.set_attribute("gen_ai.output.messages", facts.messages("assistant", event.content, agent.secrets,
                                                                        self.max_content_chars))
        for left in (*state.delegations.values(), *state.approvals.values()):
            left.end(end_time=now)
        span.end(end_time=now)
        if self.instruments is not None:
            self.instruments.run_ended(agent.agent_type, status, reason)
        self._open.pop(agent.uid, None)

    def _decided(self, state: _Open, event: Event, now: int) -> None:
        data = event.data
        span = state.approvals.pop(str(data.get("request_id")), None)
        if span is None:  # decided at once (a rule, --approval deny, nobody to ask): no wait
            span = self._span(f"approval {data.get('action_type', '')}", state, now, {})
        span.set_attributes(facts.approval_attributes(data))
        span.set_attribute("anges.approval.waited", (now - _start(span, now)) / 1e9)
        if data.get("decision") != "allow":
            decided = f"{facts.kind(data.get('decision'))} by {facts.kind(data.get('by'))}"
            span.set_status(Status(StatusCode.ERROR, decided))
        span.end(end_time=now)

    def _action(self, agent: _Agent, state: _Open, event: Event, now: int, span: Span | None = None) -> None:
        """An action's span, ending now: from the agent's last doing (a command's: its recorded duration), or the
        `span` its start opened (a child agent's)."""
        run = ShellRun.of(event)
        attributes = facts.action_attributes(event, run)
        failure = facts.action_failure(event, run)
        if failure is not None:
            attributes["error.type"] = failure[0]
        if self.capture_content:
            attributes["gen_ai.tool.call.arguments"] = facts.arguments(event)
            attributes["gen_ai.tool.call.result"] = facts.content(event.content, agent.secrets,
                                                                  self.max_content_chars)
        if span is None:
            start = state.mark
            if run is not None and "duration" in event.data:
                start = max(start, now - int(run.duration * 1e9))
            span = self._span(f"execute_tool {attributes['gen_ai.tool.name']}", state, start, attributes)
        else:
            span.set_attributes(attributes)  # how the child ended
        if failure is not None:
            span.set_status(Status(StatusCode.ERROR, self._described_error(failure[0], failure[1], agent)))
        span.end(end_time=now)
        if self.instruments is not None:
            self.instruments.action_ended(attributes["gen_ai.tool.name"], failure[0] if failure else "ok",
                                          (now - _start(span, now)) / 1e9)

    # --- model calls ----------------------------------------------------------------------------------------

    def _model_called(self, agent: _Agent, call: Any) -> None:
        state = self._open.get(agent.uid) or _Open()  # a call outside a run is a trace of its own
        model = self._described(call.model)
        attributes = {**model, "gen_ai.request.temperature": call.temperature}
        reply = call.reply
        if reply is not None:
            attributes.update(facts.reply_attributes(reply, call.cost))
        if call.error is not None:
            attributes["error.type"] = facts.error_type(call.error)
        if self.capture_content:
            attributes["gen_ai.input.messages"] = facts.messages("user", call.prompt, agent.secrets,
                                                                 self.max_content_chars)
            if reply is not None:
                attributes["gen_ai.output.messages"] = facts.messages(
                    "assistant", reply, agent.secrets, self.max_content_chars, getattr(reply, "finish_reason", ""))
        start = int(call.started * 1e9)
        end = start + int(call.duration * 1e9)
        span = self._span(f"{model['gen_ai.operation.name']} {model['gen_ai.request.model']}", state, start,
                          attributes, SpanKind.CLIENT)
        for retry in getattr(reply, "retries", ()):
            span.add_event("retry", self._retry_attributes(retry, agent), timestamp=int(retry.at * 1e9))
        if call.error is not None:
            span.set_status(Status(StatusCode.ERROR, self._described_error(attributes["error.type"], str(call.error),
                                                                           agent)))
        span.end(end_time=end)
        state.mark = max(state.mark, end)
        usage = getattr(reply, "usage", None)
        if usage is not None:
            state.tokens[0] += usage.input_tokens
            state.tokens[1] += usage.output_tokens
        if self.instruments is not None:
            self.instruments.model_called(attributes, call.duration, usage)

    # --- helpers ------------------------------------------------------------------------------------------

    def _described_error(self, kind: str, text: str, agent: _Agent) -> str:
        """A failed span's status description: the error's kind, and its text (masked, cut) only when content is
        captured: an error's words may quote the request, name a file or hold a command's output."""
        return facts.content(text, agent.secrets, 500) if self.capture_content else kind

    def _retry_attributes(self, retry: Any, agent: _Agent) -> dict[str, Any]:
        """A retry event's facts: the wait and the HTTP status; why, in words, only when content is captured."""
        found: dict[str, Any] = {"anges.retry.wait": retry.wait}
        if getattr(retry, "status", None) is not None:
            found["http.response.status_code"] = retry.status
        if self.capture_content:
            found["anges.retry.reason"] = facts.content(retry.reason, agent.secrets, 500)
        return found

    def _described(self, model: Any) -> dict[str, Any]:
        """`facts.describe_model`, kept for the last few models (a run asks for it on every call)."""
        key = id(model)
        known = self._models.get(key)
        if known is None or known[0] is not model:
            if len(self._models) >= MODELS_KEPT:
                self._models.pop(next(iter(self._models)))
            known = self._models[key] = (model, facts.describe_model(model))
        return known[1]

    def _span(self, name: str, state: _Open, start: int, attributes: dict, kind: SpanKind = SpanKind.INTERNAL
              ) -> Span:
        """A span started at `start` under the run's span."""
        parent = state.context if state.run is not None else None  # a call before any run: a trace of its own
        return self.tracer.start_span(name, context=parent, kind=kind, start_time=start, attributes=attributes)

    def _parent(self, agent: _Agent, ambient: Any) -> otel_context.Context:
        """Where a run's span goes: under the parent agent's CALL_CHILD_AGENT span (or its run), else the span that
        was current where the run started (a batch task's, the caller's), else the TRACEPARENT variable's."""
        if agent.parent_ids:
            parent = self._open.get(agent.parent_ids[-1])
            span = (parent.delegations.get(agent.uid) or parent.run) if parent is not None else None
            if span is not None:
                return trace.set_span_in_context(span)
        if not trace.get_current_span(ambient).get_span_context().is_valid and os.environ.get("TRACEPARENT"):
            return TraceContextTextMapPropagator().extract({"traceparent": os.environ["TRACEPARENT"]})
        return ambient


def _start(span: Span, default: int) -> int:
    """When a span started (a span the sampler dropped does not say)."""
    return getattr(span, "start_time", None) or default
