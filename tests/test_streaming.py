"""Streaming in the agent: deltas through `agent.delta_handlers` (never stored), a stop in the middle of a stream,
replies cut off at the output limit, the cacheable prompt, and what the CLI reports (jsonl `delta` lines, the
cache-hit ratio)."""

import json
import os
import re
import subprocess
import sys
import threading
import time

import pytest
from test_orchestrator import RoutedModel, child
from test_orchestrator import complete as child_complete
from wire_servers import TEST_KEY

from anges.agents import DefaultAgent, Orchestrator
from anges.config.loading import load_config
from anges.config.types import ModelPreset, ModelSettings
from anges.models.openai_model import OpenAIModel
from anges.models.replay import ReplayModel, with_recording
from anges.models.scripted import ScriptedModel
from anges.store.event_store import EventStore
from anges.store.events import EventStream

ANGES = [sys.executable, "-m", "anges"]
ANALYSIS = "The directory holds a small Python project; its tests are under tests/ and nothing else matters here."
REASONING = "Run the test suite first, so that we know what fails before we change anything at all in the code."


def reply(*actions, analysis=ANALYSIS, reasoning=REASONING):
    return {"analysis": analysis, "reasoning": reasoning, "actions": list(actions)}


def shell(command):
    return reply({"action_type": "RUN_SHELL_CMD", "command": command})


def complete(content="done"):
    return reply({"action_type": "TASK_COMPLETE", "content": content}, reasoning="All done.")


def joined(deltas, call, field):
    return "".join(d.text for d in deltas if d.call == call and d.field == field)


def event_facts(stream):
    """What each event records, but how long its command took (no two runs take the same time)."""
    return [(e.type, e.analysis, e.reasoning, re.sub(r"after [\d.]+ s", "after N s", e.content))
            for e in stream.events_list]


def test_deltas_reach_the_handlers_in_order_and_the_stream_records_only_the_finished_reply(tmp_path):
    script = [shell("echo one"), complete("finished")]
    deltas = []
    agent = DefaultAgent(inference_func=ScriptedModel(script), cmd_init_dir=tmp_path, config=load_config())
    agent.delta_handlers.append(deltas.append)
    stream = agent.run_with_new_request("go")

    calls = sorted({d.call for d in deltas})
    assert len(calls) == 2 and [d.call for d in deltas] == sorted(d.call for d in deltas), "one reply after another"
    first, second = calls
    assert joined(deltas, first, "analysis") == ANALYSIS and joined(deltas, first, "reasoning") == REASONING
    assert joined(deltas, second, "reasoning") == "All done."
    assert len([d for d in deltas if d.call == first]) > 2, "a long reply arrives in several pieces"
    for delta in deltas:  # the texts so far grow with each piece, and end with it
        assert getattr(delta, delta.field).endswith(delta.text)
        assert delta.agent_id == stream.uid and delta.depth == 0 and delta.agent_type == "default"
    analysis_done = max(i for i, d in enumerate(deltas) if d.call == first and d.field == "analysis")
    after = [d.field for d in deltas[analysis_done + 1:] if d.call == first]
    assert set(after[:-1]) == {"reasoning"} and after[-1] == "output", "then the command it asked for prints"
    outputs = [(d.call, d.command, d.text, d.output) for d in deltas if d.field == "output"]
    assert outputs == [(first, "echo one", "one\n", "one\n")]

    plain = DefaultAgent(inference_func=ScriptedModel(script), cmd_init_dir=tmp_path, config=load_config())
    alone = plain.run_with_new_request("go")
    assert event_facts(stream) == event_facts(alone), "the recorded reply is the same with or without listeners"
    records = [json.loads(line) for line in (EventStore().root / f"{stream.uid}.jsonl").read_text().splitlines()]
    assert [r["type"] for r in records if r["kind"] == "event"] == [e.type for e in stream.events_list]
    assert not any(ANALYSIS[:20] in json.dumps(r) for r in records if r["kind"] != "event"), "no delta is stored"
    assert event_facts(EventStore().load(stream.uid)) == event_facts(stream)


def test_secrets_never_reach_the_delta_handlers(tmp_path, monkeypatch):
    secret = "s3cret-value-0123456789"
    monkeypatch.setenv("DEMO_API_KEY", secret)
    deltas = []
    text = f"the key is {secret} and it stays hidden even while the reply streams in small pieces"
    agent = DefaultAgent(inference_func=ScriptedModel([complete("done") | {"analysis": text}]),
                         cmd_init_dir=tmp_path, config=load_config())
    agent.delta_handlers.append(deltas.append)
    agent.run_with_new_request("go")
    assert deltas and all(secret[:4] not in d.text and secret[:4] not in d.analysis for d in deltas)
    assert deltas[-1].analysis == text.replace(secret, "[REDACTED]")


ANSWER = ("The tests pass again: the parser now keeps a trailing comma in a list, and a new test covers it. "
          "Nothing else changed; the changelog says so under the next release.")


def test_the_answer_streams_too_and_only_the_finished_reply_is_recorded(tmp_path, monkeypatch):
    secret = "s3cret-value-0123456789"
    monkeypatch.setenv("DEMO_API_KEY", secret)
    help_first = {"content": f"Which branch? The key {secret} is wrong.", "action_type": "help_needed"}
    script = [shell("echo one"), complete(ANSWER), reply(help_first)]
    deltas = []
    agent = DefaultAgent(inference_func=ScriptedModel(script), cmd_init_dir=tmp_path, config=load_config())
    agent.delta_handlers.append(deltas.append)
    stream = agent.run_with_new_request("go")
    agent.run_with_new_request("and now?")

    first, second, third = sorted({d.call for d in deltas})
    assert not [d for d in deltas if d.call == first and d.field == "answer"], "a command is no answer"
    answer = [d for d in deltas if d.call == second and d.field == "answer"]
    assert len(answer) > 1 and joined(deltas, second, "answer") == ANSWER, "the answer arrives in pieces"
    assert all(d.answer_type == "TASK_COMPLETE" and d.answer.endswith(d.text) for d in answer)
    assert deltas.index(answer[0]) > max(i for i, d in enumerate(deltas) if d.call == second and d.field != "answer")
    # the answer's type may come after its text: the text shows once the type is known, masked
    assert {d.answer_type for d in deltas if d.call == third and d.field == "answer"} == {"HELP_NEEDED"}
    assert joined(deltas, third, "answer") == "Which branch? The key [REDACTED] is wrong."
    assert [e.content for e in stream.events_list if e.type in ("task_completion", "agent_requested_help")] == [
        ANSWER, "Which branch? The key [REDACTED] is wrong."], "the events carry the finished answers"


def test_reading_stops_at_an_action_that_is_no_answer_and_waits_for_a_type_cut_short():
    from anges.agents.live import LiveReply
    from anges.models.cancel import CancelToken

    deltas = []
    sink = LiveReply([deltas.append], {"agent_id": "a", "agent_type": "default", "parent_ids": (), "call": 1}, [],
                     CancelToken())
    for piece in ['{"reasoning": "Done.", "actions": [{"action_type": "TASK_CO', 'MPLETE", "content": "All ',
                  'of it."}]}']:
        sink(piece)
    assert [(d.field, d.text) for d in deltas] == [("reasoning", "Done."), ("answer", "All "), ("answer", "of it.")]
    deltas.clear()
    sink.begin()
    for piece in ['{"reasoning": "Edit.", "actions": [{"action_type": "EDIT_FILE", "content": "line one',
                  '\\nline two"}]}']:
        sink(piece)
    assert [d.field for d in deltas] == ["reasoning"], "a file's content is no answer"


def test_a_child_agent_streams_to_its_parents_handlers(tmp_path):
    model = RoutedModel(orchestrator=[reply(child("NEW_CHILD_AGENT TASK_EXECUTOR", "count")), child_complete("ok")],
                        task_executor=[child_complete("counted")])
    deltas = []
    agent = Orchestrator(inference_func=model, cmd_init_dir=tmp_path, config=load_config())
    agent.delta_handlers.append(deltas.append)
    agent.run_with_new_request("delegate")
    children = [d for d in deltas if d.depth == 1]
    assert children and children[0].agent_type == "task_executor" and children[0].parent_ids == (agent.uid,)


# --- a stop in the middle of a stream, for each provider -------------------------------------------------------


@pytest.mark.parametrize("how", ["interrupt", "stop", "time limit"])
def test_a_stop_in_the_middle_of_a_stream_closes_it_at_once(wire, tmp_path, how):
    pieces = ['{"analysis": "Looking around', " the project", ' first", "reasoning": "then']
    wire.server.enqueue_text("".join(pieces), chunks=pieces, stall=30)
    model, _ = wire.model(settings=ModelSettings(request_timeout=60), real_waits=True)
    config = load_config(overrides={"agents": {"common": {"timeout": 2 if how == "time limit" else 0}}})
    agent = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=config)
    deltas = []
    agent.delta_handlers.append(deltas.append)
    worker = threading.Thread(target=agent.run_with_new_request, args=("look",), daemon=True)
    started = time.monotonic()
    worker.start()
    deadline = time.monotonic() + 10
    while len(wire.server.sent) < len(pieces) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(wire.server.sent) == len(pieces), "the server streamed every piece, then stalled"
    shown = "Looking around the project first"
    while not (deltas and deltas[-1].analysis == shown) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert deltas and deltas[-1].analysis == shown, "the text showed while the stream went on"

    if how == "time limit":
        stopped = started + 2
    else:
        stopped = time.monotonic()
        agent.interrupt() if how == "interrupt" else EventStore().request_stop(agent.uid)  # Ctrl-C; the web's Stop
    worker.join(5)
    assert not worker.is_alive()
    deadline = time.monotonic() + 3
    while not wire.server.hangups and time.monotonic() < deadline:
        time.sleep(0.01)
    assert wire.server.hangups, "the stream was never closed"
    assert wire.server.hangups[0] - stopped < 1, "the stream was closed within a second of the stop"
    last = agent.event_stream.events_list[-1]
    assert last.type == "task_interrupted" and last.data["reason"] == ("timeout" if how == "time limit" else "interrupt")
    assert len(wire.server.requests) == 1


# --- cut-off replies ----------------------------------------------------------------------------------------------


def openai_agent(server, tmp_path, monkeypatch, **agent_settings):
    monkeypatch.setenv("OPENAI_API_KEY", TEST_KEY)
    config = load_config(overrides={"agents": {"common": agent_settings}} if agent_settings else None)
    preset = ModelPreset("openai", "gpt-test", server.base_url, "OPENAI_API_KEY", context_window=200_000)
    model = OpenAIModel(preset, config.model_settings, name="openai:gpt-test")
    return DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=config)


def test_a_reply_cut_off_at_the_output_limit_is_asked_again_shorter(openai_server, tmp_path, monkeypatch):
    openai_server.enqueue_truncated('{"analysis": "I will write the whole file at once: ', output_tokens=8192)
    openai_server.enqueue_text(json.dumps(complete("short")))
    agent = openai_agent(openai_server, tmp_path, monkeypatch)

    stream = agent.run_with_new_request("write a big file")

    assert [e.type for e in stream.events_list] == ["new_request", "task_completion"]
    second = openai_server.requests[1].body["messages"][0]["content"]
    assert "Your previous reply was cut off" in second and "8192 tokens" in second
    assert "cut off" not in openai_server.requests[0].body["messages"][0]["content"]
    assert "Your reply looks cut off" not in second, "not treated as an invalid reply"
    assert "Write a long file in parts (NEW_FILE with the first part" in second
    assert stream.events_list[-1].data["usage"]["model_calls"] == 2, "the cut-off call counts"


def test_an_agent_without_file_edits_is_not_told_to_write_a_file_in_parts(openai_server, tmp_path, monkeypatch):
    from anges.agents import TaskAnalyzer

    openai_server.enqueue_truncated('{"analysis": "a very long plan: ', output_tokens=8192)
    openai_server.enqueue_text(json.dumps(complete("## Execution Plan")))
    agent = openai_agent(openai_server, tmp_path, monkeypatch)
    analyzer = TaskAnalyzer(inference_func=agent.inference_func, cmd_init_dir=tmp_path, config=agent.config)

    analyzer.run_with_new_request("plan it")

    second = openai_server.requests[1].body["messages"][0]["content"]
    assert "Your previous reply was cut off" in second and "EDIT_FILE" not in second and "NEW_FILE" not in second


def test_cut_off_replies_end_the_run_after_the_bound_with_a_recorded_error(openai_server, tmp_path, monkeypatch):
    for _ in range(3):
        openai_server.enqueue_truncated('{"analysis": "again too long', output_tokens=8192)
    agent = openai_agent(openai_server, tmp_path, monkeypatch, max_cut_off_replies=2)

    stream = agent.run_with_new_request("write a big file")

    assert len(openai_server.requests) == 2
    last = stream.events_list[-1]
    assert last.type == "task_interrupted" and last.data["reason"] == "reply_cut_off"
    assert "cut off at max_output_tokens (8192) 2 times in a row" in last.content
    assert last.data["limit"] == 2 and last.data["max_output_tokens"] == 8192


# --- the cacheable prompt -----------------------------------------------------------------------------------------


def test_the_fixed_part_of_the_prompt_is_byte_identical_and_the_history_grows_at_its_end(tmp_path):
    model = ScriptedModel([shell("echo one"), shell("echo two"), shell("echo three"), complete()])
    agent = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=load_config())
    agent.run_with_new_request("count to three")

    prompts = [prompt for prompt in model.prompts if "\n# History\n" in prompt]  # not a summary's
    assert len(prompts) == 4
    fixed = {prompt[:prompt.index("\n# History\n") + 1] for prompt in prompts}
    assert len(fixed) == 1, "everything before the history is the same from step to step"
    for before, after in zip(prompts, prompts[1:]):
        assert after.breaks[0] == len(next(iter(fixed))) and after.marks[0] == after.breaks[0]
        earlier, end = after.breaks[1], after.breaks[-1]
        assert earlier == before.breaks[-1], "the last history's end is a break of the next prompt"
        assert after[:earlier] == before[:earlier], "... and the next prompt starts with it, byte for byte"
        assert after.marks[-1] == end and "## Event" not in after[end:], "the last break ends the history"
        assert after.cache_key == f"anges-{agent.uid}"


# --- record and replay ---------------------------------------------------------------------------------------------


def test_a_run_recorded_from_a_stream_replays_with_its_deltas(openai_server, tmp_path, monkeypatch):
    openai_server.enqueue_text(json.dumps(shell("echo hi")), chunks=None)
    openai_server.enqueue_text(json.dumps(complete("said hi")))
    agent = openai_agent(openai_server, tmp_path, monkeypatch)
    recording = tmp_path / "run.jsonl"
    agent.inference_func = with_recording(agent.inference_func, recording)
    live = []
    agent.delta_handlers.append(live.append)
    stream = agent.run_with_new_request("say hi")

    replayed = []
    again = DefaultAgent(inference_func=ReplayModel(recording), cmd_init_dir=tmp_path, config=load_config(),
                         event_stream=EventStream(uid=stream.uid + "x"))
    again.delta_handlers.append(replayed.append)
    replay_stream = again.run_with_new_request("say hi")

    assert [fact[:1] + fact[2:] for fact in event_facts(replay_stream)] == [
        fact[:1] + fact[2:] for fact in event_facts(stream)], "the same run, but how long its command took"
    for deltas in (live, replayed):
        assert joined(deltas, min(d.call for d in deltas), "reasoning") == REASONING


# --- the CLI: jsonl delta lines, the cache-hit ratio ------------------------------------------------------------------


def run_cli(tmp_path, *args, env=None):
    return subprocess.run([*ANGES, "-q", "go", *args], cwd=tmp_path, capture_output=True, text=True,
                          env=env or os.environ.copy(), timeout=60, check=False)


def test_jsonl_has_delta_lines_before_each_replys_events(tmp_path):
    path = tmp_path / "replies.json"
    path.write_text(json.dumps([shell("echo one"), complete("finished")]))
    out = run_cli(tmp_path, "--output", "jsonl", "--model", f"scripted:{path}")
    assert out.returncode == 0, out.stderr
    records = [json.loads(line) for line in out.stdout.splitlines()]
    kinds = [r["type"] for r in records]
    first_event = kinds.index("event", 2)  # after the request's event
    deltas = [r for r in records if r["type"] == "delta"]
    assert kinds.index("delta") < first_event
    uid = records[0]["stream_id"]
    first = deltas[0]["call"]
    assert "".join(r["text"] for r in deltas if r["call"] == first and r["field"] == "reasoning") == REASONING
    assert "".join(r["text"] for r in deltas if r["call"] == first and r["field"] == "analysis") == ANALYSIS
    assert all(r["stream_id"] == uid and r["depth"] == 0 and r["agent_type"] == "default" for r in deltas)
    second = deltas[-1]["call"]
    assert "".join(r["text"] for r in deltas if r["call"] == second and r["field"] == "answer") == "finished"
    answered = next(i for i, r in enumerate(records) if r["type"] == "delta" and r["field"] == "answer")
    assert first_event < answered < kinds.index("event", first_event + 1), "it streams before its event"
    printed = [i for i, r in enumerate(records) if r["type"] == "delta" and r["field"] == "output"]
    assert [records[i]["text"] for i in printed] == ["one\n"] and printed[0] < first_event, "so does the output"
    stored = [json.loads(line) for line in (EventStore().root / f"{uid}.jsonl").read_text().splitlines()]
    assert {r["kind"] for r in stored} <= {"header", "settings", "title", "event"}, "no delta is stored"


def test_the_cache_hit_ratio_is_in_run_finished_and_the_footer(openai_server, tmp_path):
    env = {**os.environ, **openai_server.env}
    for output in ("jsonl", "text"):
        openai_server.enqueue_text(json.dumps(shell("echo one")), input_tokens=4000, cached_tokens=0)
        openai_server.enqueue_text(json.dumps(complete()), input_tokens=4000, cached_tokens=3000)
        out = run_cli(tmp_path, "--output", output, "--model", "openai:gpt-test", env=env)
        assert out.returncode == 0, out.stderr
        if output == "jsonl":
            finished = json.loads(out.stdout.splitlines()[-1])
            assert finished["type"] == "run_finished"
            assert finished["usage"]["cached_tokens"] == 3000 and finished["usage"]["cache_hit_ratio"] == 0.375
        else:
            assert "38% of input cached" in out.stderr.splitlines()[-1]


# --- the pieces ----------------------------------------------------------------------------------------------------


def test_a_partial_reply_is_read_as_far_as_it_goes():
    from anges.prompt.parsing import partial_reply

    assert partial_reply('{"analysis": "half a sent') == {"analysis": "half a sent"}
    assert partial_reply('<think>still thinking about {"analysis": "x"}') == {}, "nothing from an open think block"
    assert partial_reply('<think>done</think>\n```json\n{"reasoning": "r", "act') == {"reasoning": "r"}
    assert partial_reply('Sure! {"analysis": "prose first"}') == {}, "a reply that does not start with JSON waits"
    assert partial_reply('{"analysis": "tab\\tand \\u00e9\\u00') == {"analysis": "tab\tand é"}


def test_a_commands_output_reaches_the_handlers_while_it_runs_with_secrets_masked(tmp_path, monkeypatch):
    secret = "s3cret-value-0123456789"
    monkeypatch.setenv("DEMO_API_KEY", secret)
    # the command waits until the handler saw its first lines: without live output it would time out
    command = (f"echo first line; printf 'key {secret[:9]}'; sleep 0.3; printf '{secret[9:]} end\\n'; "
               "while [ ! -e seen ]; do sleep 0.05; done; echo after")
    seen = []

    def handler(delta):
        if delta.field == "output":
            seen.append(delta)
            if "end" in delta.output:
                (tmp_path / "seen").touch()

    config = load_config(overrides={"agents": {"default": {"shell_cmd_timeout": 20}}})
    agent = DefaultAgent(inference_func=ScriptedModel([shell(command), complete()]), cmd_init_dir=tmp_path,
                         config=config)
    agent.delta_handlers.append(handler)
    ran = agent.run_with_new_request("go").events_list[1]

    assert ran.data["exit_code"] == 0 and ran.data["stdout"].endswith("end\nafter\n"), ran.data
    assert len(seen) >= 2 and seen[-1].output == "first line\nkey [REDACTED] end\nafter\n"
    assert all(secret[:9] not in d.output for d in seen), "a secret cut between two pieces waits for the rest"
    assert "".join(d.text for d in seen) == seen[-1].output and seen[0].command == command
    assert not any(d.field == "output" for d in seen if d.call != seen[0].call)


def test_a_commands_live_output_is_drawn_as_a_terminal_would_leave_it():
    from anges.util.printable import as_drawn

    assert as_drawn("\x1b[31mred\x1b[0m ok\r\n 10%\r 50%\r100%\n\x1b]0;title\x07done\x1b(B") == "red ok\n100%\ndone"


def test_live_lines_are_the_last_lines_wrapped_to_the_width():
    from anges.cli.screen import last_lines

    assert last_lines("one\ntwo\nthree\nfour\nfive", 20, count=4) == ["two", "three", "four", "five"]
    assert last_lines("abcdefghij", 4, count=2) == ["efgh", "ij"]
    assert last_lines("漢字漢字漢", 4) == ["漢字", "漢字", "漢"], "wide characters take two columns"


def test_the_start_of_a_secret_waits_for_the_next_piece():
    from anges.util.masking import settled_length

    secret = "s3cret-value-0123456789"
    assert settled_length("the key is s3cr", [secret]) == len("the key is ")
    assert settled_length("ends with s", [secret]) == len("ends with s"), "a few characters give nothing away"
    assert settled_length("nothing here", [secret]) == len("nothing here")
