"""With `capture_content: false` nothing of what a run says leaves in telemetry: no text of the request, the reply, a
command, a path or an error's message, in any attribute, event, status description or metric; errors go by their
kind. Checked on everything the SDK exports: the spans and metrics as JSON, and the OTLP bodies sent over HTTP."""

import json
import subprocess
import sys

import pytest
from opentelemetry.trace import StatusCode
from otlp_receiver import OTLPReceiver
from test_batch import complete, reply, shell
from test_telemetry import Collected, write_config
from wire_servers import TEST_KEY, sleeper

from anges import Decision
from anges.agents import DefaultAgent
from anges.config.loading import load_config
from anges.config.types import ModelPreset, ModelSettings, RetryConfig
from anges.models.openai_model import OpenAIModel
from anges.models.scripted import ScriptedModel

REQUEST, REPLY, COMMAND, PATH, OUTPUT, FEEDBACK, QUOTED = (f"zq{word}7781" for word in (
    "request", "reply", "command", "path", "output", "feedback", "quoted"))
MARKERS = (REQUEST, REPLY, COMMAND, PATH, OUTPUT, FEEDBACK, QUOTED)


def exported(collected: Collected) -> str:
    """Everything the SDK would export: each finished span as JSON (name, attributes, events, status, resource)
    and the metrics."""
    spans = collected.finished()
    metrics = collected.reader.get_metrics_data()
    return "\n".join([*(span.to_json() for span in spans), metrics.to_json() if metrics else ""])


def openai_model(server):
    return OpenAIModel(ModelPreset("openai", "gpt-test", base_url=server.base_url, api_key_env="OPENAI_API_KEY"),
                       ModelSettings(), RetryConfig(3, 10, 0.01, 0.01), sleep=sleeper()[1])


def test_without_content_capture_no_text_of_the_run_is_exported(tmp_path, openai_server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", TEST_KEY)
    openai_server.enqueue_error(429, headers={"Retry-After": "0"}, message=f"slow down, {QUOTED} was too much")
    openai_server.enqueue_text(json.dumps(shell(f"echo {OUTPUT}; ls /nowhere/{COMMAND}; exit 3")))
    openai_server.enqueue_text(json.dumps(reply({"action_type": "EDIT_FILE",
                                                 "directive_line": f"REPLACE_LINES missing-{PATH}.txt 1-1",
                                                 "content": REPLY})))
    openai_server.enqueue_text(json.dumps(shell(f"sudo echo {COMMAND}")))
    openai_server.enqueue_error(400, message=f"invalid request: the prompt said {QUOTED}")
    collected = Collected()

    def decline(request):
        return Decision("deny", feedback=FEEDBACK)

    agent = DefaultAgent(inference_func=openai_model(openai_server), cmd_init_dir=tmp_path,
                         config=load_config(overrides={"safety": {"approval": "ask"}}), approval=decline,
                         listeners=[collected.telemetry])
    stream = agent.run_with_new_request(f"please {REQUEST}")
    assert stream.events_list[-1].type == "task_interrupted"  # the 400 ended it
    limited = load_config(overrides={"agents": {"common": {"max_number_of_events_to_exhaust": 1}}})
    DefaultAgent(inference_func=ScriptedModel([shell(f"echo {OUTPUT}"), shell("true")]), cmd_init_dir=tmp_path,
                 config=limited, listeners=[collected.telemetry]).run_with_new_request(f"go on, {REQUEST}")

    text = exported(collected)
    assert [marker for marker in MARKERS if marker in text] == []
    spans = collected.finished()
    failed = {span.name: span.status for span in spans if span.status.status_code == StatusCode.ERROR}
    # every failure still says what kind it was
    assert failed["execute_tool RUN_SHELL_CMD"].description == "nonzero_exit"
    assert failed["execute_tool EDIT_FILE"].description == "action_error"
    assert failed["approval RUN_SHELL_CMD"].description == "deny by callback"
    assert failed["chat gpt-test"].description == "model_setup"
    assert any(span.status.description == "event_limit" for span in spans if span.name == "invoke_agent default")
    (retry,) = [event for span in spans for event in span.events if event.name == "retry"]
    assert dict(retry.attributes) == {"anges.retry.wait": pytest.approx(0.0, abs=0.1),
                                      "http.response.status_code": 429}


def test_with_content_capture_the_words_of_an_error_are_exported_masked(tmp_path, openai_server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", TEST_KEY)
    openai_server.enqueue_error(429, headers={"Retry-After": "0"}, message=f"slow down, {QUOTED} was too much")
    openai_server.enqueue_text(json.dumps(shell(f"ls /nowhere/{PATH}")))
    openai_server.enqueue_text(json.dumps(complete("done")))
    collected = Collected(capture_content=True)
    DefaultAgent(inference_func=openai_model(openai_server), cmd_init_dir=tmp_path, config=load_config(),
                 listeners=[collected.telemetry]).run_with_new_request(REQUEST)

    spans = collected.finished()
    (retry,) = [event for span in spans for event in span.events if event.name == "retry"]
    assert QUOTED in retry.attributes["anges.retry.reason"]
    (command,) = [span for span in spans if span.name == "execute_tool RUN_SHELL_CMD"]
    assert command.status.description.startswith("exit code 2")


def test_an_error_whose_reason_is_a_sentence_goes_by_its_class():
    from anges.telemetry.facts import error_type, kind

    class Refused(Exception):
        reason = f"the server said: {QUOTED} is not allowed"

    class Stopped(Exception):
        reason = "event_limit"

    assert error_type(Refused("x")) == "Refused" and error_type(Stopped("x")) == "event_limit"
    assert kind(f"/home/me/{PATH}.txt") == "other" and kind("safety.default_rules[5]") == "safety.default_rules[5]"
    assert kind(f"rm -rf {PATH}") == "other" and kind("x" * 101) == "other"


def test_a_batch_exports_no_output_of_its_setup_or_check(tmp_path, anges_home):
    script = tmp_path / "script.json"
    script.write_text(json.dumps([complete(REPLY)]))
    tasks = [{"id": "setup", "task": REQUEST, "setup": f"echo {OUTPUT}; exit 4"},
             {"id": "check", "task": REQUEST, "check": f"echo {OUTPUT} {PATH}; exit 1"}]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps({**task, "model": f"scripted:{script}"}) + "\n"
                                                  for task in tasks))
    with OTLPReceiver() as receiver:
        write_config(anges_home, f"telemetry: {{enabled: true, endpoint: '{receiver.url}'}}\n")
        out = subprocess.run([sys.executable, "-m", "anges", "batch", "tasks.jsonl", "--batch-id", "quiet",
                              "--sandbox", "off"], capture_output=True, text=True, timeout=120, check=False,
                             cwd=tmp_path)
        assert out.returncode != 0, out.stderr
        spans = receiver.wait_for(lambda found: any(s.name.startswith("invoke_workflow") for s in found)
                                  and sum(s.name.startswith("batch_task") for s in found) == 2)
        bodies = b"".join(receiver.bodies)
    assert [marker for marker in MARKERS if marker.encode() in bodies] == []
    failed = {span.attributes["anges.batch.task"]: span.status for span in spans if span.name.startswith("batch_task")}
    assert failed == {"setup": 2, "check": 2}
