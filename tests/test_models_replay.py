"""Recording model calls to JSON lines and replaying them."""

import json
import logging
import re

import pytest
from wire_servers import TEST_KEY, sleeper

from anges.config.types import ModelPreset, RetryConfig
from anges.exceptions import ModelError, ModelReplyError, ModelSetupError
from anges.models import Prompt, get_model
from anges.models.openai_model import OpenAIModel
from anges.models.replay import RecordingModel, ReplayModel, with_recording


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def echo(prompt, temperature=0.0):
    return f"echo: {prompt}"


def test_a_recorded_run_replays_with_its_usage(openai_server, monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", TEST_KEY)
    openai_server.enqueue_text("first", input_tokens=100, output_tokens=10, cached_tokens=50)
    openai_server.enqueue_truncated("second, cut", input_tokens=200, output_tokens=20)
    live = OpenAIModel(ModelPreset("openai", "gpt-test", openai_server.base_url, "OPENAI_API_KEY"),
                       retry=RetryConfig(1, 1, 0.01, 0.01), sleep=sleeper()[1])
    path = tmp_path / "run.jsonl"
    recorder = with_recording(live, path)

    originals = [recorder("prompt one"), recorder("prompt two", 0.5)]
    openai_server.close()
    replay = ReplayModel(path)
    replies = [replay("prompt one"), replay("prompt two", 0.5)]

    assert replies == ["first", "second, cut"]
    for original, replayed in zip(originals, replies):
        assert replayed.usage == original.usage
        assert original.model == "gpt-test" and replayed.model == f"replay:{path}", "a replay says it is one"
        assert replayed.finish_reason == original.finish_reason
    assert replies[1].finish_reason == "length"
    assert replay.divergence is None
    recorded = lines(path)
    assert [r["prompt"] for r in recorded] == ["prompt one", "prompt two"]
    assert [r["temperature"] for r in recorded] == [None, 0.5]
    assert recorded[0]["usage"] == {"input_tokens": 100, "output_tokens": 10, "cached_tokens": 50, "estimated": False}
    assert recorded[0]["name"] == "openai:gpt-test"


def test_each_call_is_on_disk_before_the_next(tmp_path):
    path = tmp_path / "run.jsonl"
    recorder = RecordingModel(echo, path)
    for n in range(3):
        recorder(f"p{n}")
        assert len(lines(path)) == n + 1  # nothing held back in a buffer
    assert recorder.name == "echo"


def test_a_plain_function_model_is_recorded_without_usage(tmp_path):
    path = tmp_path / "run.jsonl"
    RecordingModel(echo, path)("hello", 0.2)
    assert lines(path)[0]["reply"] == "echo: hello"
    assert lines(path)[0]["usage"] is None
    assert ReplayModel(path)("hello").usage is None


def test_api_keys_never_reach_the_recording(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", TEST_KEY)
    path = tmp_path / "run.jsonl"
    RecordingModel(echo, path)(f"the env shows OPENAI_API_KEY={TEST_KEY}")

    text = path.read_text()
    assert TEST_KEY not in text
    assert "OPENAI_API_KEY=[OPENAI_API_KEY]" in text
    replay = ReplayModel(path)
    replay(f"the env shows OPENAI_API_KEY={TEST_KEY}")
    assert replay.divergence is None  # the live prompt is redacted the same way before comparing


def test_a_crash_mid_line_leaves_a_usable_recording(tmp_path, caplog):
    path = tmp_path / "run.jsonl"
    RecordingModel(echo, path)("one")
    with open(path, "a") as file:
        file.write('{"prompt": "two", "rep')  # the process died here

    with caplog.at_level(logging.WARNING):
        replay = ReplayModel(path)
    assert replay("one") == "echo: one"
    assert "incomplete last line" in caplog.text


def test_a_broken_line_in_the_middle_is_an_error(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_text('{"prompt": "a", "reply": "b"}\nnot json\n{"prompt": "c", "reply": "d"}\n')
    with pytest.raises(ModelSetupError, match=r"run.jsonl:2: not a JSON line"):
        ReplayModel(path)


def test_a_missing_recording_is_a_setup_error(tmp_path):
    with pytest.raises(ModelSetupError, match="not found"):
        ReplayModel(tmp_path / "nope.jsonl")


def recording(tmp_path, prompts):
    path = tmp_path / "run.jsonl"
    recorder = RecordingModel(echo, path)
    for prompt in prompts:
        recorder(prompt)
    return path


def test_a_lenient_replay_remembers_the_first_divergence_and_logs_it_once(tmp_path, caplog):
    path = recording(tmp_path, ["same", "line a\nline b\nline c", "third"])
    replay = get_model(f"replay:lenient:{path}")
    assert replay.strict is False and replay.path == path

    with caplog.at_level(logging.WARNING):
        assert replay("same") == "echo: same"
        assert replay("line a\nline B\nline c") == "echo: line a\nline b\nline c"  # still answers, in order
        replay("other third")

    divergence = replay.divergence
    assert divergence.index == 1 and divergence.recorded == 3
    assert "-line b" in divergence.diff and "+line B" in divergence.diff
    assert "call 2 of 3 recorded" in str(divergence)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "line B" in warnings[0].getMessage()


def test_a_replay_refuses_a_divergent_prompt_by_default(tmp_path, caplog):
    path = recording(tmp_path, ["one", "two"])
    replay = get_model(f"replay:{path}")
    assert isinstance(replay, ReplayModel) and replay.strict is True

    assert replay("one") == "echo: one"
    with caplog.at_level(logging.WARNING), pytest.raises(ModelError) as caught:
        replay("TWO")
    assert re.search(r"call 2 of 2 recorded: the prompt differs(.|\n)*-two(.|\n)*\+TWO", str(caught.value))
    assert f"--model replay:lenient:{path}" in str(caught.value)
    assert "+TWO" not in caplog.text, "the error says it, once: every view shows the whole of it"


def test_a_replay_in_another_folder_and_machine_reads_their_facts_in_the_recordings_place(tmp_path):
    def prompt(workdir, python3):
        text = (f"Working directory: {workdir}\nSandbox: write only in {workdir} and /tmp\n`python3` is {python3}\n"
                "Output: /tmp/tmp.recorded2/other, /usr/bin/python3.11")  # not the facts: names that begin alike
        return Prompt(text, local_facts={"workdir": workdir, "python3": python3})

    path = tmp_path / "run.jsonl"
    RecordingModel(echo, path)(prompt("/tmp/tmp.recorded", "/usr/bin/python3"))
    assert lines(path)[0]["facts"] == {"workdir": "/tmp/tmp.recorded", "python3": "/usr/bin/python3"}

    assert ReplayModel(path)(prompt("/home/me/demo", "/opt/py/bin/python3")).startswith("echo: ")
    with pytest.raises(ModelError, match="the prompt differs"):  # what is not a fact of the place still counts
        ReplayModel(path)(Prompt(str(prompt("/home/me/demo", "/usr/bin/python3")).replace("/other", "/else"),
                                 local_facts={"workdir": "/home/me/demo", "python3": "/usr/bin/python3"}))
    with pytest.raises(ModelError, match="the prompt differs"):  # a plain string states no facts
        ReplayModel(path)(str(prompt("/home/me/demo", "/usr/bin/python3")))


def test_a_replay_takes_a_prompt_that_differs_only_in_how_long_commands_took(tmp_path):
    path = recording(tmp_path, ["COMMAND: make\nEXIT CODE: 0 after 1.2 s", "returned (task_completion) after 2 min 3 s"])
    replay = get_model(f"replay:{path}")
    assert replay("COMMAND: make\nEXIT CODE: 0 after 0.35 s") == "echo: COMMAND: make\nEXIT CODE: 0 after 1.2 s"
    assert replay("returned (task_completion) after 58.1 s").startswith("echo: returned")
    again = get_model(f"replay:{path}")
    with pytest.raises(ModelError, match="the prompt differs"):
        again("COMMAND: make\nEXIT CODE: 1 after 1.2 s")


def test_a_long_diff_is_cut_to_an_excerpt(tmp_path):
    path = recording(tmp_path, ["\n".join(f"line {n}" for n in range(500))])
    replay = ReplayModel(path, strict=False)
    replay("\n".join(f"LINE {n}" for n in range(500)))
    assert len(replay.divergence.diff.splitlines()) <= 31
    assert "more diff lines" in replay.divergence.diff


def test_running_out_of_replies_says_how_many_were_recorded(tmp_path):
    replay = ReplayModel(recording(tmp_path, ["one", "two"]))
    replay("one")
    replay("two")
    with pytest.raises(ModelError, match="holds 2 replies; call 3 has none"):
        replay("three")


def test_a_recorded_model_error_is_raised_again(tmp_path):
    def failing(prompt, temperature=0.0):
        raise ModelReplyError("empty reply (finish reason: stop)", kind="empty")

    path = tmp_path / "run.jsonl"
    with pytest.raises(ModelReplyError):
        RecordingModel(failing, path)("hi")

    with pytest.raises(ModelReplyError, match="empty reply") as caught:
        ReplayModel(path)("hi")
    assert caught.value.kind == "empty"
