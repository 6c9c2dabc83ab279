"""Per-step framework overhead of the agent loop: 1,000 scripted steps that each run `true`.

Framework time = the whole step minus the model call minus the shell command. Checkpoints (before each
command) are off unless --checkpoints: their cost is `checkpoints.py`'s to measure. Run:
    python benchmarks/overhead.py [--steps 1000] [--telemetry] [--checkpoints] [--hooks N]

With --telemetry the run is traced (`pip install 'anges[otel]'`): every model call, command and the run become spans
through the SDK's batch span processor (exported on its own thread, to an exporter that counts and drops them), and
the metrics are recorded. The spans are made on the telemetry thread; the process's CPU per step counts that work
wherever it ran.

With --hooks N, N command hooks (`true`) run after each command (`after_action`): each a process outside the sandbox.
Without it, no hook is configured: the run pays for none.
"""

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("ANGES_HOME", tempfile.mkdtemp(prefix="anges-bench-"))

import anges.safety.shell  # noqa: E402
from anges.agents import DefaultAgent  # noqa: E402
from anges.config.loading import load_config  # noqa: E402
from anges.models.scripted import is_summary_prompt  # noqa: E402

STEP = '{"reasoning": "step", "actions": [{"action_type": "RUN_SHELL_CMD", "command": "true"}]}'
DONE = '{"reasoning": "done", "actions": [{"action_type": "TASK_COMPLETE", "content": "done"}]}'


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--telemetry", action="store_true", help="trace the run (OpenTelemetry SDK)")
    parser.add_argument("--checkpoints", action="store_true", help="take a checkpoint before each step (the default)")
    parser.add_argument("--hooks", type=int, default=0, metavar="N", help="N after_action command hooks per step")
    options = parser.parse_args()
    steps = options.steps
    listeners, exported = (traced() if options.telemetry else (None, None))

    step_starts: list[float] = []
    model_time: list[float] = []
    shell_time: list[float] = []

    def model(prompt: str, temperature: float = 0.0) -> str:
        started = time.perf_counter()
        if is_summary_prompt(prompt):
            reply = "Ran `true` several times; each exited 0."
        else:
            step_starts.append(started)
            reply = STEP if len(step_starts) <= steps else DONE
        model_time.append(time.perf_counter() - started)
        return reply

    real_run = anges.safety.shell.run_command

    def timed_run(*args, **kwargs):
        started = time.perf_counter()
        try:
            return real_run(*args, **kwargs)
        finally:
            shell_time.append(time.perf_counter() - started)

    anges.safety.shell.run_command = timed_run
    config = load_config(overrides={"agents": {"common": {
        "max_number_of_events_to_exhaust": 0, "max_model_calls": 0, "max_repeated_actions": 0}},
        "checkpoints": {"enabled": options.checkpoints},
        "hooks": [{"event": "after_action", "command": "true"}] * options.hooks})
    with tempfile.TemporaryDirectory() as work:
        agent = DefaultAgent(inference_func=model, cmd_init_dir=work, config=config, listeners=listeners)
        started, cpu = time.perf_counter(), time.process_time()
        agent.run_with_new_request("run true many times")
        if listeners:
            listeners[0].flush()  # the spans made on the telemetry thread count too
        total, cpu = time.perf_counter() - started, time.process_time() - cpu

    # Step i spans from its model call to the next one; summary calls and their model time fall inside.
    spans = [b - a for a, b in zip(step_starts, step_starts[1:])][:steps]
    per_step_model = sum(model_time) / len(spans)
    framework = [span - shell - per_step_model for span, shell in zip(spans, shell_time)]
    # Medians of the first and last 100 steps: robust to the scheduler noise of a shared 2-core machine.
    first, last = statistics.median(framework[:100]), statistics.median(framework[-100:])
    summaries = len(agent.event_stream.event_summaries_list)
    print(f"steps: {len(spans)}  events: {len(agent.event_stream.events_list)}  summaries: {summaries}  "
          f"total: {total:.2f} s")
    print(f"framework per step: mean {statistics.mean(framework) * 1e3:.3f} ms, "
          f"p50 {statistics.median(framework) * 1e3:.3f} ms, "
          f"median of first 100 {first * 1e3:.3f} ms, of last 100 {last * 1e3:.3f} ms (ratio {last / first:.2f})")
    print(f"shell round-trip (`true`): mean {statistics.mean(shell_time) * 1e3:.3f} ms, "
          f"p50 {statistics.median(shell_time) * 1e3:.3f} ms")
    print(f"this process's CPU per step (all threads, the model and the shell's pipes included): "
          f"{cpu / len(spans) * 1e3:.3f} ms")
    if listeners:
        print(f"telemetry: {exported()} spans exported")


def traced():
    """A `Telemetry` on the SDK with the batch span processor; and how many spans its exporter got."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    from anges.telemetry.tracing import Telemetry

    class Counted(SpanExporter):
        count = 0

        def export(self, spans):
            Counted.count += len(spans)
            return SpanExportResult.SUCCESS

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(Counted()))
    telemetry = Telemetry(tracer_provider, MeterProvider(metric_readers=[InMemoryMetricReader()]))
    return [telemetry], lambda: Counted.count


if __name__ == "__main__":
    main()
