"""OpenTelemetry traces and metrics: spans collected with the SDK's in-memory exporter from real runs (scripted
models, a real provider SDK against a wire server, real commands), and exported over OTLP/HTTP to a receiver."""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from otlp_receiver import OTLPReceiver
from test_batch import complete, reply, shell
from test_orchestrator import RoutedModel, child
from wire_servers import TEST_KEY, sleeper

from anges.agents import DefaultAgent, Orchestrator
from anges.config.loading import load_config
from anges.config.types import ModelPreset, ModelSettings, RetryConfig
from anges.models.openai_model import OpenAIModel
from anges.models.scripted import ScriptedModel
from anges.telemetry.tracing import Telemetry

SECRET = "hunter2-very-secret-value"


class Collected:
    """An SDK tracer and meter provider that keep everything in memory, and the `Telemetry` feeding them."""

    def __init__(self, capture_content=False):
        self.spans = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.telemetry = Telemetry(tracer_provider, MeterProvider(metric_readers=[self.reader]), capture_content)

    def finished(self):
        self.telemetry.flush()
        return list(self.spans.get_finished_spans())

    def named(self, prefix):
        return [span for span in self.finished() if span.name.startswith(prefix)]

    def metrics(self):
        self.telemetry.flush()
        found = {}
        for resource in self.reader.get_metrics_data().resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    found[metric.name] = list(metric.data.data_points)
        return found


def config_with(**safety):
    return load_config(overrides={"safety": safety} if safety else None)


def parent_of(span):
    return span.parent.span_id if span.parent else None


def all_attribute_text(spans):
    return json.dumps([dict(span.attributes) for span in spans], default=str)


def test_a_run_is_a_tree_of_model_calls_actions_and_approvals_with_their_facts(tmp_path):
    collected = Collected()
    declined = []

    def channel(request):
        if "sudo" in request.subject:
            declined.append(request.subject)
            return "deny"
        return "allow"

    replies = [shell("echo hi; exit 3"),
               reply({"action_type": "EDIT_FILE", "directive_line": "NEW_FILE notes.txt", "content": "a\nb\n"}),
               shell("sudo true"), complete("All done.")]
    agent = DefaultAgent(inference_func=ScriptedModel(replies), cmd_init_dir=tmp_path,
                         config=config_with(approval="ask"), approval=channel, listeners=[collected.telemetry])
    stream = agent.run_with_new_request("say hi and take notes")

    assert declined == ["sudo true"]
    (run,) = collected.named("invoke_agent")
    assert run.name == "invoke_agent default" and run.parent is None
    assert run.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert run.attributes["gen_ai.agent.id"] == stream.uid == run.attributes["gen_ai.conversation.id"]
    assert run.attributes["anges.run.status"] == "completed" and run.status.status_code != StatusCode.ERROR
    children = [span for span in collected.finished() if span is not run]
    assert all(parent_of(span) == run.context.span_id for span in children)
    assert all(span.context.trace_id == run.context.trace_id for span in children)
    assert all(run.start_time <= span.start_time <= span.end_time <= run.end_time for span in children)

    calls = collected.named("chat ")
    assert len(calls) == 4 and all(span.name == "chat scripted" for span in calls)
    assert {span.attributes["gen_ai.provider.name"] for span in calls} == {"scripted"}
    assert sum(span.attributes["gen_ai.usage.output_tokens"] for span in calls) == \
        run.attributes["gen_ai.usage.output_tokens"] > 0

    (command,) = [s for s in collected.named("execute_tool RUN_SHELL_CMD")]
    assert command.attributes["anges.command.exit_code"] == 3
    assert command.attributes["gen_ai.tool.type"] == "function"
    assert command.attributes["anges.sandbox"] in ("workspace", "none")
    assert command.attributes["anges.escalated"] is False
    assert command.status.status_code == StatusCode.ERROR and command.attributes["error.type"] == "nonzero_exit"
    recorded = stream.events_list[[e.type for e in stream.events_list].index("action")]
    assert command.attributes["anges.command.duration"] == recorded.data["duration"]
    assert command.end_time - command.start_time >= recorded.data["duration"] * 1e9 - 1e6

    (edit,) = collected.named("execute_tool EDIT_FILE")
    assert edit.attributes["anges.edit.operation"] and edit.attributes["anges.edit.lines_added"] == 2
    assert edit.status.status_code != StatusCode.ERROR

    refusal = [s for s in collected.named("approval ") if s.attributes.get("anges.approval.decision") == "deny"]
    assert len(refusal) == 1
    assert refusal[0].name == "approval RUN_SHELL_CMD" and refusal[0].status.status_code == StatusCode.ERROR
    assert refusal[0].attributes["anges.approval.by"] == "callback"
    assert refusal[0].attributes["anges.approval.rule"].startswith("safety.default_rules")
    assert refusal[0].attributes["anges.approval.waited"] >= 0
    assert not any("sudo" in str(span.attributes.get("gen_ai.tool.name")) for span in collected.named("execute_tool"))
    (done,) = collected.named("execute_tool TASK_COMPLETE")
    assert done.end_time <= run.end_time

    # no content by default: no prompt, reply, request, command or output in any attribute
    text = all_attribute_text(collected.finished())
    for content in ("say hi", "echo hi", "hi\\n", "All done", "notes.txt", "gen_ai.input.messages", '"next"'):
        assert content not in text

    metrics = collected.metrics()
    assert len(metrics["gen_ai.client.operation.duration"]) == 1
    assert metrics["gen_ai.client.operation.duration"][0].count == 4
    assert "gen_ai.client.token.usage" not in metrics  # a scripted model's usage is estimated: not reported
    actions = {point.attributes["gen_ai.tool.name"]: point for point in metrics["anges.action.duration"]}
    assert set(actions) == {"RUN_SHELL_CMD", "EDIT_FILE", "TASK_COMPLETE"}
    runs = metrics["anges.runs"]
    assert [(dict(p.attributes), p.value) for p in runs] == [
        ({"gen_ai.agent.name": "default", "anges.run.status": "completed"}, 1)]


def test_a_child_agents_run_is_a_child_of_its_parents_delegating_step(tmp_path):
    collected = Collected()
    model = RoutedModel(orchestrator=[reply(child("NEW_CHILD_AGENT TASK_EXECUTOR", "touch made.txt")),
                                      complete("made it")],
                        task_executor=[shell("touch made.txt"), complete("touched")])
    agent = Orchestrator(inference_func=model, cmd_init_dir=tmp_path, config=load_config(),
                         listeners=[collected.telemetry])
    agent.run_with_new_request("make a file")

    runs = {span.attributes["gen_ai.agent.name"]: span for span in collected.named("invoke_agent")}
    assert set(runs) == {"orchestrator", "task_executor"}
    (delegation,) = collected.named("execute_tool CALL_CHILD_AGENT")
    assert parent_of(delegation) == runs["orchestrator"].context.span_id
    assert parent_of(runs["task_executor"]) == delegation.context.span_id
    assert delegation.attributes["anges.child.agent_id"] == runs["task_executor"].attributes["gen_ai.agent.id"]
    assert delegation.attributes["anges.child.exit_type"] == "task_completion"
    assert delegation.start_time <= runs["task_executor"].start_time <= runs["task_executor"].end_time \
        <= delegation.end_time
    (command,) = collected.named("execute_tool RUN_SHELL_CMD")
    assert parent_of(command) == runs["task_executor"].context.span_id
    child_calls = [s for s in collected.named("chat") if parent_of(s) == runs["task_executor"].context.span_id]
    assert len(child_calls) == 2
    assert len({span.context.trace_id for span in collected.finished()}) == 1


def test_a_retried_model_call_is_one_span_with_its_retries_usage_and_cost(tmp_path, openai_server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", TEST_KEY)
    openai_server.enqueue_error(429, headers={"Retry-After": "0"})
    openai_server.enqueue_text(json.dumps(complete("Answered.")), input_tokens=1200, output_tokens=40,
                               cached_tokens=1000)
    model = OpenAIModel(ModelPreset("openai", "gpt-test", base_url=openai_server.base_url,
                                    api_key_env="OPENAI_API_KEY"), ModelSettings(), RetryConfig(3, 10, 0.01, 0.01),
                        sleep=sleeper()[1])
    config = load_config(overrides={"prices": {"gpt-test": {"input": 2.0, "output": 8.0, "cached_input": 0.5}}})
    collected = Collected()
    agent = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=config, listeners=[collected.telemetry])
    stream = agent.run_with_new_request("answer")

    assert len(openai_server.requests) == 2
    (call,) = collected.named("chat ")
    assert call.name == "chat gpt-test" and call.kind.name == "CLIENT"
    facts = call.attributes
    assert facts["gen_ai.provider.name"] == "openai" and facts["gen_ai.request.model"] == "gpt-test"
    assert facts["server.address"] == "127.0.0.1" and facts["server.port"] == int(openai_server.url.rsplit(":", 1)[1])
    assert (facts["gen_ai.usage.input_tokens"], facts["gen_ai.usage.output_tokens"],
            facts["gen_ai.usage.cache_read.input_tokens"]) == (1200, 40, 1000)
    assert facts["anges.usage.estimated"] is False and facts["gen_ai.response.finish_reasons"] == ("stop",)
    assert facts["anges.model.attempts"] == 2
    (retry,) = call.events
    assert retry.name == "retry" and retry.attributes["http.response.status_code"] == 429
    assert "anges.retry.reason" not in retry.attributes  # its words only when content is captured
    assert call.start_time <= retry.timestamp <= call.end_time
    assert facts["anges.cost.usd"] == pytest.approx(stream.events_list[-1].data["cost"])
    assert facts["anges.cost.usd"] == pytest.approx((200 * 2.0 + 1000 * 0.5 + 40 * 8.0) / 1e6)

    tokens = {p.attributes["gen_ai.token.type"]: p for p in collected.metrics()["gen_ai.client.token.usage"]}
    assert (tokens["input"].sum, tokens["output"].sum) == (1200, 40)
    assert tokens["input"].attributes["gen_ai.provider.name"] == "openai"


def test_content_goes_into_spans_only_when_asked_and_masked_like_the_record(tmp_path, monkeypatch):
    monkeypatch.setenv("DEPLOY_TOKEN", SECRET)
    collected = Collected(capture_content=True)
    agent = DefaultAgent(inference_func=ScriptedModel([shell("echo $HOME; echo " + SECRET), complete("Said it.")]),
                         cmd_init_dir=tmp_path, config=config_with(approval="auto"), listeners=[collected.telemetry])
    agent.run_with_new_request(f"print {SECRET} please")

    spans = collected.finished()
    assert SECRET not in all_attribute_text(spans)
    (run,) = collected.named("invoke_agent")
    request = json.loads(run.attributes["gen_ai.input.messages"])
    assert request == [{"role": "user", "parts": [{"type": "text", "content": "print [REDACTED] please"}]}]
    assert json.loads(run.attributes["gen_ai.output.messages"])[0]["parts"][0]["content"] == "Said it."
    first = collected.named("chat")[0]
    assert "# History" in first.attributes["gen_ai.input.messages"]
    assert "RUN_SHELL_CMD" in first.attributes["gen_ai.output.messages"]
    (command,) = collected.named("execute_tool RUN_SHELL_CMD")
    assert json.loads(command.attributes["gen_ai.tool.call.arguments"]) == {"command": "echo $HOME; echo [REDACTED]"}
    assert "[REDACTED]" in command.attributes["gen_ai.tool.call.result"]


def test_a_long_prompt_is_cut_in_its_span(tmp_path):
    collected = Collected(capture_content=True)
    collected.telemetry.max_content_chars = 500
    agent = DefaultAgent(inference_func=ScriptedModel([complete("ok")]), cmd_init_dir=tmp_path,
                         config=load_config(), listeners=[collected.telemetry])
    agent.run_with_new_request("x" * 5000)
    (run,) = collected.named("invoke_agent")
    text = json.loads(run.attributes["gen_ai.input.messages"])[0]["parts"][0]["content"]
    assert len(text) <= 500 and "characters cut" in text


def test_with_telemetry_off_nothing_of_it_is_imported():
    script = textwrap.dedent("""
        import sys, tempfile
        from anges.agents import DefaultAgent
        from anges.config.loading import load_config
        from anges.models.scripted import ScriptedModel
        reply = '{"reasoning": "r", "actions": [{"action_type": "RUN_SHELL_CMD", "command": "true"}]}'
        done = '{"reasoning": "r", "actions": [{"action_type": "TASK_COMPLETE", "content": "ok"}]}'
        agent = DefaultAgent(inference_func=ScriptedModel([reply, done]), cmd_init_dir=tempfile.mkdtemp(),
                             config=load_config())
        agent.run_with_new_request("go")
        assert agent.status == "completed" and agent.listeners == []
        print(sorted(name for name in sys.modules if name.startswith(("opentelemetry", "anges.telemetry"))))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                         env=os.environ.copy(), check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def write_config(home, text):
    (home / "config.yaml").write_text(((home / "config.yaml").read_text() if (home / "config.yaml").exists() else "")
                                      + text)


def test_a_cli_run_exports_its_spans_and_metrics_over_otlp_http(tmp_path, anges_home):
    script = tmp_path / "script.json"
    script.write_text(json.dumps([shell("echo exported"), complete("Exported.")]))
    with OTLPReceiver() as receiver:
        write_config(anges_home, f"telemetry: {{enabled: true, endpoint: '{receiver.url}'}}\n")
        out = subprocess.run([sys.executable, "-m", "anges", "--model", f"scripted:{script}", "--path", str(tmp_path),
                              "-q", "say exported"], capture_output=True, text=True, timeout=60, check=False,
                             env={**os.environ, "OTEL_SERVICE_NAME": "anges-under-test"})
        assert out.returncode == 0, out.stderr
        spans = receiver.wait_for(lambda found: any(s.name.startswith("invoke_agent") for s in found))
        metrics = receiver.metrics
    (run,) = [span for span in spans if span.name == "invoke_agent default"]
    assert run.parent_id == "" and run.attributes["anges.run.status"] == "completed"
    assert run.resource["service.name"] == "anges-under-test" and run.resource["service.version"]
    names = sorted(span.name for span in spans if span is not run)
    assert names == ["chat scripted", "chat scripted", "execute_tool RUN_SHELL_CMD", "execute_tool TASK_COMPLETE"]
    assert all(span.parent_id == run.span_id and span.trace_id == run.trace_id for span in spans if span is not run)
    (command,) = [span for span in spans if span.name == "execute_tool RUN_SHELL_CMD"]
    assert command.attributes["anges.command.exit_code"] == 0 and command.status != 2
    assert {"gen_ai.client.operation.duration", "anges.action.duration", "anges.runs"} <= set(metrics)
    assert metrics["anges.runs"] == [{"gen_ai.agent.name": "default", "anges.run.status": "completed"}]


def test_the_console_exporter_shows_the_spans_on_stderr_without_a_collector(tmp_path, anges_home):
    script = tmp_path / "script.json"
    script.write_text(json.dumps([shell("echo traced"), complete("Traced.")]))
    write_config(anges_home, "telemetry: {enabled: true}\n")  # no endpoint, no collector anywhere

    def run(**variables):
        return subprocess.run([sys.executable, "-m", "anges", "--model", f"scripted:{script}", "-q", "trace me"],
                              capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
                              env={**os.environ, **variables})

    out = run(OTEL_TRACES_EXPORTER="console", OTEL_METRICS_EXPORTER="none")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "Traced.", "spans never go to stdout, the answer's (or a protocol's)"
    names = re.findall(r'^    "name": "([^"]+)",$', out.stderr, flags=re.M)
    assert sorted(names) == ["chat scripted", "chat scripted", "execute_tool RUN_SHELL_CMD",
                             "execute_tool TASK_COMPLETE", "invoke_agent default"]
    assert "did not take" not in out.stderr, "nothing was sent to a collector"

    wrong = run(OTEL_TRACES_EXPORTER="zipkin")
    assert wrong.returncode == 2 and "OTEL_TRACES_EXPORTER=zipkin: anges exports otlp, console or none" in wrong.stderr


def test_a_traceparent_in_the_environment_makes_the_run_part_of_that_trace(tmp_path, anges_home):
    script = tmp_path / "script.json"
    script.write_text(json.dumps([complete("Joined.")]))
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with OTLPReceiver() as receiver:
        write_config(anges_home, f"telemetry: {{enabled: true, endpoint: '{receiver.url}', metrics: false}}\n")
        out = subprocess.run([sys.executable, "-m", "anges", "--model", f"scripted:{script}", "-q", "join"],
                             capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
                             env={**os.environ, "TRACEPARENT": parent})
        assert out.returncode == 0, out.stderr
        spans = receiver.wait_for(lambda found: any(s.name.startswith("invoke_agent") for s in found))
    (run,) = [span for span in spans if span.name.startswith("invoke_agent")]
    assert (run.trace_id, run.parent_id) == ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")


def test_without_the_sdk_enabling_telemetry_says_what_to_install(tmp_path, anges_home):
    write_config(anges_home, "telemetry: {enabled: true}\n")
    hide = textwrap.dedent("""
        import sys
        class Hide:
            def find_spec(self, name, path=None, target=None):
                if name == "opentelemetry" or name.startswith("opentelemetry."):
                    raise ImportError(f"No module named {name!r}")
        sys.meta_path.insert(0, Hide())
        from anges.cli.main import main
        sys.exit(main(["--model", "scripted:" + sys.argv[1], "-q", "hello"]))
    """)
    script = tmp_path / "script.json"
    script.write_text(json.dumps([complete()]))
    out = subprocess.run([sys.executable, "-c", hide, str(script)], capture_output=True, text=True, timeout=60,
                         check=False, cwd=tmp_path)
    assert out.returncode == 2
    assert "telemetry.enabled is true, but the OpenTelemetry SDK" in out.stderr
    assert "pipx install --force '.[otel]'" in out.stderr and "Traceback" not in out.stderr


def test_a_batch_is_one_trace_and_each_run_is_under_its_tasks_span_across_worker_processes(tmp_path, anges_home):
    script = tmp_path / "script.json"
    script.write_text(json.dumps([shell("echo 42 > answer.txt"), complete("Wrote it.")]))
    tasks = [{"id": "right", "task": "write 42", "check": "grep -qx 42 answer.txt"},
             {"id": "wrong", "task": "write 42", "check": "grep -qx 43 answer.txt"}]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps({**task, "model": f"scripted:{script}"}) + "\n"
                                                  for task in tasks))
    with OTLPReceiver() as receiver:
        write_config(anges_home, f"telemetry: {{enabled: true, endpoint: '{receiver.url}', metrics: false}}\n")
        out = subprocess.run([sys.executable, "-m", "anges", "batch", "tasks.jsonl", "--batch-id", "traced",
                              "--sandbox", "off"], capture_output=True, text=True, timeout=120, check=False,
                             cwd=tmp_path)
        assert out.returncode == 5, out.stderr
        spans = receiver.wait_for(lambda found: sum(s.name.startswith("invoke_agent") for s in found) == 2
                                  and any(s.name.startswith("invoke_workflow") for s in found))
    (batch,) = [span for span in spans if span.name == "invoke_workflow traced"]
    assert batch.parent_id == "" and batch.attributes["gen_ai.workflow.name"] == "traced"
    assert batch.attributes["anges.batch.checks_passed"] == 1 and batch.attributes["anges.batch.checks_failed"] == 1
    tasks = {span.attributes["anges.batch.task"]: span for span in spans if span.name.startswith("batch_task ")}
    assert set(tasks) == {"right", "wrong"}
    assert all(task.parent_id == batch.span_id and task.trace_id == batch.trace_id for task in tasks.values())
    assert tasks["right"].attributes["anges.batch.check"] == "passed" and tasks["right"].status != 2
    assert tasks["wrong"].attributes["anges.batch.check"] == "failed" and tasks["wrong"].status == 2
    runs = [span for span in spans if span.name.startswith("invoke_agent")]
    assert {run.parent_id for run in runs} == {task.span_id for task in tasks.values()}
    assert {span.trace_id for span in spans} == {batch.trace_id}
    assert {run.resource["process.pid"] for run in runs}.isdisjoint({batch.resource["process.pid"]})
    commands = [span for span in spans if span.name == "execute_tool RUN_SHELL_CMD"]
    assert {command.parent_id for command in commands} == {run.span_id for run in runs}


def test_the_collectors_headers_are_a_secret_the_agents_commands_do_not_get(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"Authorization=Bearer {SECRET}")
    agent = DefaultAgent(inference_func=ScriptedModel([shell("env"), complete()]), cmd_init_dir=tmp_path,
                         config=config_with(approval="auto"))
    stream = agent.run_with_new_request("show the environment")
    (command,) = [event for event in stream.events_list if event.type == "action"]
    assert "OTEL_EXPORTER_OTLP_HEADERS" not in command.data["stdout"]
    assert SECRET not in json.dumps([event.to_dict() for event in stream.events_list])


def test_children_running_at_once_each_go_under_their_own_delegating_step(tmp_path):
    collected = Collected()
    model = RoutedModel(orchestrator=[reply(child("NEW_CHILD_AGENT TASK_EXECUTOR", "one"),
                                            child("NEW_CHILD_AGENT TASK_EXECUTOR", "two")),
                                      reply({"action_type": "WAIT_FOR_CHILDREN"}), complete("both")],
                        task_executor=[complete("mine"), complete("mine")])
    agent = Orchestrator(inference_func=model, cmd_init_dir=tmp_path, config=load_config(),
                         listeners=[collected.telemetry])
    agent.run_with_new_request("two at once")

    steps = {span.attributes["anges.child.agent_id"]: span for span in collected.named("execute_tool CALL_CHILD")}
    children = [span for span in collected.named("invoke_agent task_executor")]
    assert len(steps) == len(children) == 2
    for run in children:
        assert parent_of(run) == steps[run.attributes["gen_ai.agent.id"]].context.span_id


def test_a_run_stopped_by_a_limit_is_an_error_and_one_stopped_by_the_user_is_not(tmp_path):
    collected = Collected()
    limited = load_config(overrides={"agents": {"common": {"max_number_of_events_to_exhaust": 1}}})
    DefaultAgent(inference_func=ScriptedModel([shell("true"), shell("true")]), cmd_init_dir=tmp_path,
                 config=limited, listeners=[collected.telemetry]).run_with_new_request("go on")
    stopped = DefaultAgent(inference_func=ScriptedModel([shell("true")]), cmd_init_dir=tmp_path,
                           config=load_config(), listeners=[collected.telemetry],
                           interrupt_check=lambda: True)
    stopped.run_with_new_request("stop at once")
    runs = {span.attributes["anges.run.stop_reason"]: span for span in collected.named("invoke_agent")}
    assert runs["event_limit"].status.status_code == StatusCode.ERROR
    assert runs["event_limit"].attributes["error.type"] == "event_limit"
    assert runs["interrupt"].status.status_code != StatusCode.ERROR and "error.type" not in runs["interrupt"].attributes
    counted = {p.attributes.get("anges.run.stop_reason"): p.value for p in collected.metrics()["anges.runs"]}
    assert counted == {"event_limit": 1, "interrupt": 1}


def test_a_collector_that_cannot_be_reached_costs_the_spans_and_one_line_not_the_run(tmp_path, anges_home):
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    write_config(anges_home, f"telemetry: {{enabled: true, endpoint: 'http://127.0.0.1:{closed}'}}\n")
    script = tmp_path / "script.json"
    script.write_text(json.dumps([complete("Done anyway.")]))
    out = subprocess.run([sys.executable, "-m", "anges", "--model", f"scripted:{script}", "-q", "go"],
                         capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == "Done anyway."
    lines = [line for line in out.stderr.splitlines() if "telemetry" in line]
    assert lines == [f"telemetry: the collector at http://127.0.0.1:{closed}/v1/traces did not take the last spans "
                     "within 2 s; they are lost"]
    assert "Traceback" not in out.stderr and "Transient error" not in out.stderr
