"""The agent loop, driven by a scripted model and real commands in temp dirs."""

import json
import os
import threading
import time

import pytest
from helpers import pids_running, sleep_token, wait_for_pid

from anges.actions import Action
from anges.agents import DefaultAgent, TaskAnalyzer, TaskExecutor
from anges.config.loading import load_config
from anges.exceptions import ModelError
from anges.models.scripted import ScriptedModel, is_summary_prompt
from anges.store.event_store import EventStore
from anges.store.events import Event, EventStream


def reply(*actions, reasoning="because"):
    return {"analysis": "looking", "reasoning": reasoning, "actions": list(actions)}


def shell(command, **extra):
    return {"action_type": "RUN_SHELL_CMD", "command": command, **extra}


def complete(content="done"):
    return reply({"action_type": "TASK_COMPLETE", "content": content})


def make_agent(tmp_path, replies, agent_class=DefaultAgent, config=None, **kwargs):
    model = replies if isinstance(replies, ScriptedModel) else ScriptedModel(replies)
    agent = agent_class(inference_func=model, cmd_init_dir=tmp_path, config=config or load_config(), **kwargs)
    return agent, model


def types(stream):
    return [e.type for e in stream.events_list]


def test_shell_edit_and_complete_are_recorded_and_persisted(tmp_path):
    agent, model = make_agent(tmp_path, [
        reply({"action_type": "EDIT_FILE", "directive_line": "NEW_FILE hello.py", "content": "print('hi')\n"}),
        reply(shell("python3 hello.py")),
        complete("printed hi"),
    ])
    stream = agent.run_with_new_request("write and run hello.py")
    assert types(stream) == ["new_request", "edit_file", "action", "task_completion"]
    assert (tmp_path / "hello.py").read_text() == "print('hi')\n"
    run = stream.events_list[2]
    assert run.data["exit_code"] == 0 and "hi" in run.content and run.data["command"] == "python3 hello.py"
    created = stream.events_list[1].content  # a new file comes back as its size and first lines, not a diff
    assert created == "NEW_FILE hello.py\nCreated hello.py: 1 line, 12 bytes. Its lines:\nprint('hi')"
    assert agent.status == "completed"
    loaded = EventStore().load(stream.uid)
    assert types(loaded) == types(stream)
    assert loaded.events_list[-1].content == "printed hi"
    # after the edit, the next prompt asked the model to check the diff
    assert "You edited a file" in model.prompts[1] and "You edited a file" not in model.prompts[2]


def test_every_edit_directive_through_the_loop(tmp_path):
    (tmp_path / "f.txt").write_text("a\nb\nc\n")
    edits = [
        ("INSERT_LINES f.txt 0", "start\n", None),
        ("INSERT_LINES f.txt -1", "end\n", None),
        ("REPLACE_LINES f.txt 2-2", "A\n", None),
        ("REMOVE_LINES f.txt 3-3", "", None),
        ("REPLACE_TEXT f.txt", "C\n", "c\n"),
    ]
    replies = [reply({"action_type": "EDIT_FILE", "directive_line": d, "content": c,
                      **({"old_text": o} if o else {})}) for d, c, o in edits]
    agent, _ = make_agent(tmp_path, replies + [complete()])
    stream = agent.run_with_new_request("edit")
    assert (tmp_path / "f.txt").read_text() == "start\nA\nC\nend\n"
    assert all(e.data.get("error") is None for e in stream.events_list if e.type == "edit_file")


def test_failed_edit_is_shown_to_the_model_and_changes_nothing(tmp_path):
    (tmp_path / "f.txt").write_text("one\n")
    agent, model = make_agent(tmp_path, [
        reply({"action_type": "EDIT_FILE", "directive_line": "REMOVE_LINES f.txt 5-9"}),
        complete(),
    ])
    stream = agent.run_with_new_request("edit")
    event = stream.events_list[1]
    assert "EDIT FAILED" in event.content and event.data["error"]
    assert (tmp_path / "f.txt").read_text() == "one\n"
    assert "EDIT FAILED" in model.prompts[1]


@pytest.mark.parametrize("action_type,event_type,status", [
    ("TASK_COMPLETE", "task_completion", "completed"),
    ("HELP_NEEDED", "agent_requested_help", "help_needed"),
    ("AGENT_TEXT_RESPONSE", "agent_text_response", "answered"),
])
def test_returning_actions_end_the_run(tmp_path, action_type, event_type, status):
    messages = []
    agent, _ = make_agent(tmp_path, [reply({"action_type": action_type, "content": "the answer"})],
                          message_handlers=[messages.append])
    stream = agent.run_with_new_request("question?")
    assert types(stream) == ["new_request", event_type]
    assert agent.status == status
    assert messages[-1] == "the answer" and messages[-1].agent_type == "default"


def test_empty_content_is_a_validation_error_then_recovers(tmp_path):
    agent, model = make_agent(tmp_path, [reply({"action_type": "TASK_COMPLETE", "content": "  "}), complete("ok")])
    stream = agent.run_with_new_request("go")
    assert types(stream) == ["new_request", "reply_rejected", "task_completion"]
    assert "content" in model.prompts[1] and "could not be used" in model.prompts[1]


def test_follow_up_uses_the_same_stream(tmp_path):
    agent, model = make_agent(tmp_path, [complete("first"), complete("second")])
    stream = agent.run_with_new_request("one")
    agent.run_with_new_request("two")
    assert types(stream) == ["new_request", "task_completion", "follow_up_request", "task_completion"]
    assert "two" in model.prompts[-1] and "one" in model.prompts[-1]
    resumed, _ = make_agent(tmp_path, [complete("third")], event_stream=EventStore().load(stream.uid))
    resumed.run_with_new_request("three")
    assert types(EventStore().load(stream.uid))[-2:] == ["follow_up_request", "task_completion"]


def test_invalid_replies_exhausted_end_cleanly(tmp_path):
    agent, model = make_agent(tmp_path, ["not json", "null", "[1, 2]"])
    stream = agent.run_with_new_request("go")
    last = stream.events_list[-1]
    assert last.type == "task_interrupted" and last.data["reason"] == "invalid_replies"
    assert last.data["last_error"]
    assert model.calls == 3 and agent.status == "interrupted"


def test_model_error_ends_with_interrupted_event(tmp_path):
    agent, _ = make_agent(tmp_path, [reply(shell("echo hi")), ModelError("provider down (503)")])
    stream = agent.run_with_new_request("go")
    assert types(stream) == ["new_request", "action", "task_interrupted"]
    assert stream.events_list[-1].data["reason"] == "model_error"
    assert "503" in stream.events_list[-1].content


def test_event_limit_since_last_request(tmp_path):
    config = load_config(overrides={"agents": {"common": {"max_number_of_events_to_exhaust": 3,
                                                          "max_repeated_actions": 0}}})
    agent, _ = make_agent(tmp_path, [reply(shell(f"echo {i}")) for i in range(10)], config=config)
    stream = agent.run_with_new_request("loop")
    assert types(stream) == ["new_request", "action", "action", "action", "task_interrupted"]
    assert stream.events_list[-1].data == {"reason": "event_limit", "limit": 3}


@pytest.mark.parametrize("limit, says", [(1, "reached 1 step since"), (2, "reached 2 steps since")])
def test_the_event_limit_says_how_many_steps_in_words(tmp_path, limit, says):
    config = load_config(overrides={"agents": {"common": {"max_number_of_events_to_exhaust": limit}}})
    agent, _ = make_agent(tmp_path, [reply(shell(f"echo {i}")) for i in range(3)], config=config)
    assert says in agent.run_with_new_request("loop").events_list[-1].content


def test_model_call_cap_ends_a_loop_that_adds_no_events(tmp_path):
    config = load_config(overrides={"agents": {"common": {"max_model_calls": 4, "max_invalid_replies": 100}}})
    agent, model = make_agent(tmp_path, ["garbage"] * 10, config=config)
    stream = agent.run_with_new_request("go")
    assert stream.events_list[-1].data["reason"] == "model_call_limit"
    assert model.calls == 4


def test_repetition_breaker(tmp_path):
    config = load_config(overrides={"agents": {"common": {"max_repeated_actions": 3}}})
    agent, _ = make_agent(tmp_path, [reply(shell("ls"))] * 5, config=config)
    stream = agent.run_with_new_request("go")
    assert types(stream) == ["new_request", "action", "action", "task_interrupted"]
    assert stream.events_list[-1].data["reason"] == "repetition"


def test_wall_clock_timeout_kills_the_running_command(tmp_path):
    config = load_config(overrides={"agents": {"common": {"timeout": 1}}})
    agent, _ = make_agent(tmp_path, [reply(shell("sleep 30"))], config=config)
    started = time.monotonic()
    stream = agent.run_with_new_request("go")
    assert time.monotonic() - started < 5
    assert stream.events_list[-2].data["interrupted"] is True
    assert stream.events_list[-1].data["reason"] == "timeout"


def test_interrupt_during_sleep_kills_the_process_group(tmp_path):
    pid_file, token = tmp_path / "pid", sleep_token()
    agent, _ = make_agent(tmp_path, [reply(shell(f"sleep {token} & echo $! > '{pid_file}'; wait"))])
    result = {}
    worker = threading.Thread(target=lambda: result.setdefault("stream", agent.run_with_new_request("sleep")))
    worker.start()
    wait_for_pid(pid_file)
    started = time.monotonic()
    agent.interrupt()
    worker.join(5)
    assert not worker.is_alive() and time.monotonic() - started < 2
    stream = result["stream"]
    assert stream.events_list[-1].type == "task_interrupted" and stream.events_list[-1].data["reason"] == "interrupt"
    assert not pids_running(token)


def test_interrupt_check_callable_is_polled_every_step(tmp_path):
    calls = []
    agent, model = make_agent(tmp_path, [reply(shell("echo 1")), reply(shell("echo 2")), complete()],
                              interrupt_check=lambda: len(calls) >= 1)
    agent.message_handlers.append(calls.append)
    stream = agent.run_with_new_request("go")
    assert types(stream)[-1] == "task_interrupted" and model.calls == 0


def test_usage_and_model_are_recorded_on_events(tmp_path):
    agent, _ = make_agent(tmp_path, [reply(shell("true")), complete()])
    stream = agent.run_with_new_request("go")
    event = stream.events_list[1]
    assert event.data["usage"]["model_calls"] == 1
    assert event.data["usage"]["input_tokens"] > 0 and event.est_input_token == event.data["usage"]["input_tokens"]
    assert event.data["model"] == "scripted"


def test_a_reasoning_models_think_block_is_dropped_from_summaries_and_titles(tmp_path):
    model = ScriptedModel([reply(shell("echo a")), reply(shell("echo b")), complete()],
                          summary="<think>\nWhat happened? Two echoes.\n</think>\nRan two echo commands.",
                          title="<thinking>A short title.</thinking>\nEcho twice")
    config = load_config(overrides={"agents": {"common": {"max_consecutive_actions_to_summarize": 2}},
                                    "prompt": {"recent_events_in_full": 1}})
    agent, _ = make_agent(tmp_path, model, auto_entitle=True, config=config)
    stream = agent.run_with_new_request("go")
    assert [s.summary for s in stream.event_summaries_list] == ["Ran two echo commands."]
    assert stream.title == "Echo twice"


def test_failed_summary_keeps_history_and_is_recorded(tmp_path):
    config = load_config(overrides={"agents": {"common": {"max_consecutive_actions_to_summarize": 2}},
                                    "prompt": {"recent_events_in_full": 0}})

    def summary_fails(prompt):
        raise ModelError("summary endpoint down")

    model = ScriptedModel([reply(shell("echo a")), reply(shell("echo b")), complete()], summary=None)
    model.enqueue()
    agent, _ = make_agent(tmp_path, model, config=config)
    original = model.__call__

    def call(prompt, temperature=0.0):
        if is_summary_prompt(prompt):
            return summary_fails(prompt)
        return original(prompt, temperature)

    agent.inference_func = call
    stream = agent.run_with_new_request("go")
    failed = [e for e in stream.events_list if e.type == "summary_failed"]
    assert failed and "summary endpoint down" in failed[0].data["error"]
    assert stream.event_summaries_list == []
    assert stream.events_list[-1].type == "task_completion"
    assert "SUMMARY_FAILED" not in model.prompts[-1]


def test_custom_action_with_the_legacy_interface(tmp_path):
    class ShoutAction(Action):
        def __init__(self):
            self.type = "SHOUT"
            self.guide_prompt = "### SHOUT: say `content` loudly"
            self.user_visible = True
            self.unique_action = False
            self.returning_action = False

        def handle_action_in_parsed_response(self, run_config, parsed_response_dict, action_json):
            event = Event(type="action", reasoning=parsed_response_dict["reasoning"],
                          content=action_json["content"].upper(), message="shouted")
            run_config["event_stream"].events_list.append(event)
            run_config["message_handler_func"]("shouted")

    messages = []
    agent, model = make_agent(tmp_path, [reply({"action_type": "shout", "content": "hey"}), complete()],
                              message_handlers=[messages.append])
    agent.registered_actions.append(ShoutAction())
    stream = agent.run_with_new_request("go")
    assert "### SHOUT" in model.prompts[0] and "SHOUT" in model.prompts[0].split("`actions` holds one or more of:")[1]
    assert stream.events_list[1].content == "HEY" and "shouted" in messages
    assert EventStore().load(stream.uid).events_list[1].content == "HEY"


def test_custom_returning_legacy_action_ends_the_run(tmp_path):
    class Finish(Action):
        type = "FINISH"
        unique_action = True
        returning_action = True

        def handle_action_in_parsed_response(self, run_config, parsed_response_dict, action_json):
            run_config["event_stream"].events_list.append(Event("task_completion", content="fin"))
            return run_config["event_stream"]

    agent, _ = make_agent(tmp_path, [reply({"action_type": "FINISH"})])
    agent.registered_actions.append(Finish())
    stream = agent.run_with_new_request("go")
    assert types(stream) == ["new_request", "task_completion"] and agent.status == "completed"


def test_prompt_prefix_is_stable_and_holds_notes_and_platform(tmp_path):
    agent, model = make_agent(tmp_path, [reply(shell("echo one")), reply(shell("echo two")), complete()],
                              notes=["always use tabs"])
    agent.run_with_new_request("go")
    prefixes = [p.split("# History")[0] for p in model.prompts]
    assert prefixes[0] == prefixes[1] == prefixes[2]
    assert "always use tabs" in prefixes[0] and str(tmp_path) in prefixes[0]
    for action_type in ("RUN_SHELL_CMD", "EDIT_FILE", "TASK_COMPLETE", "HELP_NEEDED", "AGENT_TEXT_RESPONSE"):
        assert f"## {action_type}" in prefixes[0]
    assert "## Event 1 TYPE: NEW_REQUEST" in model.prompts[0]
    assert "## Event 2 TYPE: RUN_SHELL_CMD" in model.prompts[1] and "REASONING:" in model.prompts[1]


def test_user_template_dir_overrides_packaged_templates(tmp_path, work):
    templates = tmp_path / "templates" / "agents"  # beside the working directory, not in it: a template is code
    templates.mkdir(parents=True)
    (templates / "default.j2").write_text("CUSTOM {{ action_types | join(',') }}\n{{ history }}")
    config = load_config(overrides={"prompt": {"template_dir": str(tmp_path / "templates")}})
    agent, model = make_agent(work, [complete()], config=config)
    agent.run_with_new_request("go")
    assert model.prompts[0].startswith("CUSTOM RUN_SHELL_CMD,EDIT_FILE")


def test_a_legacy_action_cannot_record_a_secret(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMINI_API_KEY", "AIza-legacy-SECRET-0987654321")

    class Leaky(Action):
        type = "LEAKY"

        def handle_action_in_parsed_response(self, run_config, parsed_response_dict, action_json):
            run_config["event_stream"].events_list.append(Event("action", content=os.environ["GEMINI_API_KEY"]))

    agent, model = make_agent(tmp_path, [reply({"action_type": "LEAKY"}), complete()])
    agent.registered_actions.append(Leaky())
    stream = agent.run_with_new_request("go")
    assert stream.events_list[1].content == "[REDACTED]"
    assert "AIza-legacy-SECRET" not in json.dumps(EventStore().export(stream.uid))


def test_secrets_never_reach_prompts_or_events(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-SECRET-1234567890")
    agent, model = make_agent(tmp_path, [reply(shell("echo key=$OPENAI_API_KEY; echo sk-test-SECRET-1234567890")),
                                         complete()])
    stream = agent.run_with_new_request("print the key")
    dumped = json.dumps(stream.to_dict())
    assert "sk-test-SECRET-1234567890" not in dumped
    assert all("sk-test-SECRET-1234567890" not in p for p in model.prompts)


def test_auto_title(tmp_path):
    agent, _ = make_agent(tmp_path, ScriptedModel([complete()], title="Fix the flaky test"), auto_entitle=True)
    stream = agent.run_with_new_request("please fix the flaky test in ci")
    assert stream.title == "Fix the flaky test"
    assert EventStore().info(stream.uid).title == "Fix the flaky test"


def test_agent_types_offer_their_actions(tmp_path):
    executor, model = make_agent(tmp_path, [reply({"action_type": "AGENT_TEXT_RESPONSE", "content": "hi"}),
                                            complete("executed")], agent_class=TaskExecutor)
    stream = executor.run_with_new_request("do it")
    assert "AGENT_TEXT_RESPONSE" not in model.prompts[0]
    assert types(stream) == ["new_request", "reply_rejected", "task_completion"] and "unknown" in model.prompts[1].lower()

    analyzer, model = make_agent(tmp_path, [
        reply({"action_type": "EDIT_FILE", "directive_line": "NEW_FILE x", "content": "x"}),
        complete("## Execution Plan\n1. do")], agent_class=TaskAnalyzer)
    stream = analyzer.run_with_new_request("plan it")
    assert "## EDIT_FILE" not in model.prompts[0] and "Execution Plan" in model.prompts[0]
    assert not (tmp_path / "x").exists() and stream.events_list[-1].content.startswith("## Execution Plan")


def test_two_runs_on_one_stream_are_refused(tmp_path):
    from anges.exceptions import StreamBusy

    gate = threading.Event()

    def slow(prompt):
        gate.wait(5)
        return json.dumps(complete())

    stream = EventStream()
    first, _ = make_agent(tmp_path, [slow], event_stream=stream)
    worker = threading.Thread(target=first.run_with_new_request, args=("one",))
    worker.start()
    time.sleep(0.3)
    second, _ = make_agent(tmp_path, [complete()], event_stream=EventStore().load(stream.uid))
    with pytest.raises(StreamBusy):
        second.run_with_new_request("two")
    gate.set()
    worker.join(5)


def test_stop_requested_through_the_store_from_another_process(tmp_path):
    import subprocess
    import sys

    pid_file, token = tmp_path / "pid", sleep_token()
    agent, _ = make_agent(tmp_path, [reply(shell(f"sleep {token} & echo $! > '{pid_file}'; wait"))])
    worker = threading.Thread(target=agent.run_with_new_request, args=("sleep",))
    worker.start()
    wait_for_pid(pid_file)
    subprocess.run([sys.executable, "-c", f"from anges.store.event_store import EventStore; EventStore().request_stop({agent.uid!r})"],
                   check=True)
    worker.join(5)
    assert not worker.is_alive()
    stream = EventStore().load(agent.uid)
    assert stream.events_list[-1].data["reason"] == "interrupt"
    assert not pids_running(token)
    follow, _ = make_agent(tmp_path, [complete("again")], event_stream=stream)
    assert follow.run_with_new_request("continue").events_list[-1].type == "task_completion", "a new run clears the stop"


def test_token_budget_ends_the_run(tmp_path):
    config = load_config(overrides={"agents": {"common": {"max_tokens": 1500, "max_repeated_actions": 0}}})
    agent, model = make_agent(tmp_path, [reply(shell(f"echo {i}")) for i in range(20)], config=config)
    stream = agent.run_with_new_request("go")
    stop = stream.events_list[-1]
    assert stop.type == "task_interrupted" and stop.data["reason"] == "budget"
    assert stop.data["spent"] >= 1500 and stop.data["limit"] == 1500
    assert model.calls < 20


def test_a_model_of_plain_text_is_charged_for_its_prompts_too(tmp_path):
    """A plug-in provider or an `inference_func` returns a bare string: the prompt it read counts (estimated)."""
    prompts = []

    def plain(prompt, temperature=0.0):
        prompts.append(prompt)
        return json.dumps(reply(shell(f"echo {len(prompts)}")))

    def answer(prompt, temperature=0.0):
        prompts.append(prompt)
        return json.dumps(complete())

    DefaultAgent(inference_func=answer, cmd_init_dir=tmp_path).run_with_new_request("go")
    budget = 3 * len(prompts.pop()) // 4  # three prompts' worth: the replies alone (a few tokens each) never reach it
    config = load_config(overrides={"agents": {"common": {"max_tokens": budget, "max_repeated_actions": 0,
                                                           "max_number_of_events_to_exhaust": 20}}})
    stream = DefaultAgent(inference_func=plain, cmd_init_dir=tmp_path, config=config).run_with_new_request("go")

    usage = stream.events_list[1].data["usage"]
    assert usage["estimated"] is True
    assert usage["input_tokens"] == (len(prompts[0]) + 3) // 4 and usage["output_tokens"] > 0
    stop = stream.events_list[-1]
    assert stop.data["reason"] == "budget" and 2 <= len(prompts) <= 4


def test_cost_budget_uses_configured_prices(tmp_path):
    config = load_config(overrides={"prices": {"scripted": {"input": 1000.0, "output": 1000.0}},
                                    "agents": {"common": {"max_cost": 2.0, "max_repeated_actions": 0}}})
    agent, model = make_agent(tmp_path, [reply(shell(f"echo {i}")) for i in range(20)], config=config)
    stream = agent.run_with_new_request("go")
    costs = [e.data["cost"] for e in stream.events_list if "cost" in e.data]
    assert costs and all(c > 0 for c in costs)
    expected = sum(e.data["usage"]["input_tokens"] + e.data["usage"]["output_tokens"]
                   for e in stream.events_list if "usage" in e.data) * 1000.0 / 1e6
    assert sum(costs) == pytest.approx(expected)
    assert stream.events_list[-1].data["reason"] == "budget" and sum(costs) >= 2.0


def test_an_action_that_raises_is_a_result_the_model_sees(tmp_path):
    class Broken(Action):
        type = "BROKEN"

        def run(self, ctx, args):
            raise OSError("disk on fire")

    agent, model = make_agent(tmp_path, [reply({"action_type": "BROKEN"}), complete("recovered")])
    agent.registered_actions.append(Broken())
    stream = agent.run_with_new_request("go")
    assert types(stream) == ["new_request", "action", "task_completion"]
    assert "disk on fire" in stream.events_list[1].data["error"] and "BROKEN FAILED" in model.prompts[1]


def test_a_missing_working_directory_is_reported_not_raised(tmp_path):
    agent, model = make_agent(tmp_path / "gone", [reply(shell("ls")), complete()])
    stream = agent.run_with_new_request("go")
    assert stream.events_list[1].data["error"] and stream.events_list[-1].type == "task_completion"


def test_a_bug_in_the_loop_still_ends_the_stream_cleanly(tmp_path, work):
    templates = tmp_path / "t" / "agents"
    templates.mkdir(parents=True)
    (templates / "default.j2").write_text("{{ no_such_variable }}")
    config = load_config(overrides={"prompt": {"template_dir": str(tmp_path / "t")}})
    agent, _ = make_agent(work, [complete()], config=config)
    with pytest.raises(Exception, match="no_such_variable"):
        agent.run_with_new_request("go")
    stream = EventStore().load(agent.uid)
    assert types(stream) == ["new_request", "task_interrupted"]
    assert stream.events_list[-1].data["reason"] == "internal_error"


def test_interrupt_while_the_model_is_thinking_stops_at_once(tmp_path):
    release = threading.Event()

    def slow_model(prompt, temperature=0.0):
        release.wait(30)
        return json.dumps(complete("too late"))

    agent, _ = make_agent(tmp_path, ScriptedModel([]))
    agent.inference_func = slow_model
    result = {}
    worker = threading.Thread(target=lambda: result.setdefault("stream", agent.run_with_new_request("think")))
    worker.start()
    time.sleep(0.3)
    started = time.monotonic()
    agent.interrupt()
    worker.join(5)
    release.set()
    assert not worker.is_alive() and time.monotonic() - started < 2
    assert types(result["stream"]) == ["new_request", "task_interrupted"]
    assert result["stream"].events_list[-1].data["reason"] == "interrupt"


def test_the_time_limit_cuts_a_hanging_model_call(tmp_path):
    release = threading.Event()
    config = load_config(overrides={"agents": {"common": {"timeout": 0.5}}})
    agent, _ = make_agent(tmp_path, ScriptedModel([]), config=config)
    agent.inference_func = lambda prompt, temperature=0.0: release.wait(30) and "{}"
    started = time.monotonic()
    stream = agent.run_with_new_request("hang")
    release.set()
    assert time.monotonic() - started < 3
    assert stream.events_list[-1].data["reason"] == "timeout"


def test_the_public_attributes_of_an_agent(tmp_path):
    agent, _ = make_agent(tmp_path, [complete()])
    uid = agent.uid
    assert uid and agent.status == "new" and agent.event_stream is None
    assert {"RUN_SHELL_CMD", "EDIT_FILE", "TASK_COMPLETE", "HELP_NEEDED", "AGENT_TEXT_RESPONSE",
            "READ_MIME_FILES", "UPDATE_PLAN"} == {a.type for a in agent.registered_actions}
    assert agent.agent_prompt_template == "agents/default.j2" and agent.agent_config.shell_cmd_timeout == 600
    stream = agent.run_with_new_request("go")
    assert stream.uid == uid == agent.uid and agent.event_stream is stream and agent.status == "completed"


def test_a_resumed_stream_keeps_its_directory_prefix_and_notes(tmp_path):
    first, _ = make_agent(tmp_path, [complete()], notes=["be brief"], prefix_cmd="env FOO=1")
    stream = first.run_with_new_request("one")
    resumed = DefaultAgent(inference_func=ScriptedModel([complete()]), event_stream=EventStore().load(stream.uid),
                           config=load_config())
    assert (resumed.cmd_init_dir, resumed.prefix_cmd, resumed.user_notes) == (str(tmp_path), "env FOO=1",
                                                                              ["be brief"])
    resumed.run_with_new_request("two")
    assert EventStore().load(stream.uid).get_settings()["notes"] == ["be brief"]


def test_tokens_usable_by_commands_are_still_masked_in_the_record(tmp_path, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_exampleTOKEN1234567890")
    config = load_config(overrides={"agents": {"common": {"pass_env": ["GITHUB_TOKEN"]}}})
    agent, model = make_agent(tmp_path, [reply(shell("echo $GITHUB_TOKEN")), complete()], config=config)
    stream = agent.run_with_new_request("use the token")
    assert "[REDACTED]" in stream.events_list[1].data["stdout"], "the command could read it (passed through)"
    assert "ghp_exampleTOKEN" not in json.dumps(stream.to_dict()) and "ghp_exampleTOKEN" not in model.prompts[1]


def test_an_agent_answers_whether_to_stop_before_its_first_run(tmp_path):
    """`stop_requested` is handed to children and callbacks as an interrupt check: it must answer at any time."""
    from anges.exceptions import RunStopped

    agent, _ = make_agent(tmp_path, [complete()])
    assert agent.stop_requested() is False
    agent.check_limits()  # no run, no limit reached
    agent.interrupt("SIGTERM")
    assert agent.stop_requested() is True
    with pytest.raises(RunStopped, match=r"interrupted \(SIGTERM\)"):
        agent.check_limits()


def test_rendering_a_prompt_before_the_first_run_says_what_is_missing(tmp_path):
    agent, _ = make_agent(tmp_path, [complete()])
    with pytest.raises(RuntimeError, match=r"has not started a run yet: call run_with_new_request\(\) first"):
        agent.render_prompt()
    stream = agent.run_with_new_request("go")
    assert "go" in agent.render_prompt() and agent.event_stream is stream
