"""The metrics: model-call duration and tokens (the GenAI conventions' names and buckets), action durations, runs."""

from __future__ import annotations

from typing import Any

from anges import __version__

DURATION_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]
TOKEN_BUCKETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864]
METRIC_KEYS = ("gen_ai.operation.name", "gen_ai.provider.name", "gen_ai.request.model", "gen_ai.response.model",
               "server.address", "server.port", "error.type")
"""The attributes of a model call that its metrics carry (low cardinality: no ids, no content)."""


class Instruments:
    """The meters anges records to."""

    def __init__(self, meter_provider: Any):
        meter = meter_provider.get_meter("anges", __version__)
        self.duration = meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s", description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS)
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}", description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS)
        self.actions = meter.create_histogram(
            "anges.action.duration", unit="s", description="How long an agent's action took to run.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS)
        self.runs = meter.create_counter("anges.runs", unit="{run}", description="Runs ended, by outcome.")

    def model_called(self, attributes: dict, duration: float, usage: Any) -> None:
        """A model call's duration and, when the provider said, its tokens."""
        shared = {key: attributes[key] for key in METRIC_KEYS if key in attributes}
        self.duration.record(duration, shared)
        if usage is not None and not usage.estimated:
            self.tokens.record(usage.input_tokens, {**shared, "gen_ai.token.type": "input"})
            self.tokens.record(usage.output_tokens, {**shared, "gen_ai.token.type": "output"})

    def action_ended(self, action_type: str, outcome: str, duration: float) -> None:
        self.actions.record(duration, {"gen_ai.tool.name": action_type, "anges.action.outcome": outcome})

    def run_ended(self, agent_type: str, status: str, reason: str) -> None:
        attributes = {"gen_ai.agent.name": agent_type, "anges.run.status": status}
        if reason:
            attributes["anges.run.stop_reason"] = reason
        self.runs.add(1, attributes)
