"""Files the history points to (a command's whole output, a long command, a child's whole report) outlast their
request: a later request of the same session reads them, in the sandbox too (read-only, and only its own tree's);
a fold removes those its history no longer names, and removing the stream removes them all."""

import json
import re
from pathlib import Path

import pytest

from anges.agents import DefaultAgent
from anges.config.loading import anges_home, load_config
from anges.models.scripted import ScriptedModel
from anges.store.event_store import EventStore

FULL_OUTPUT = re.compile(r"FULL OUTPUT: (\d+) lines \((\d+) bytes\) in (\S+), cut parts included\.")


def reply(*actions):
    return json.dumps({"analysis": "", "reasoning": "step", "actions": list(actions)})


def shell(command):
    return reply({"action_type": "RUN_SHELL_CMD", "command": command})


def complete():
    return reply({"action_type": "TASK_COMPLETE", "content": "done"})


def named_file(prompt):
    return FULL_OUTPUT.search(prompt.split("# History")[1]).group(3)


def read_and_try_to_change(prompt):
    path = named_file(prompt)
    return shell(f"wc -l < '{path}'; echo changed >> '{path}' && echo WROTE; rm -f '{path}' && echo REMOVED; true")


@pytest.mark.sandbox
@pytest.mark.parametrize("sandbox", ["workspace", "read-only", "off"])
def test_a_full_output_outlasts_its_request_and_a_later_session_reads_it(tmp_path, sandbox):
    config = load_config(overrides={"safety": {"sandbox": sandbox, "approval": "auto"}})
    first = DefaultAgent(inference_func=ScriptedModel([shell("seq 1 50000"), complete()]), cmd_init_dir=tmp_path,
                         config=config)
    stream = first.run_with_new_request("count")
    path = FULL_OUTPUT.search(stream.events_list[1].content).group(3)
    assert Path(path).is_file() and "available until" not in stream.events_list[1].content
    assert Path(path).is_relative_to(anges_home() / "data" / "outputs" / stream.uid / stream.uid)
    assert not list(tmp_path.iterdir()), "nothing in the working directory"

    later = DefaultAgent(inference_func=ScriptedModel([read_and_try_to_change, complete()]), cmd_init_dir=tmp_path,
                         config=config, event_stream=EventStore().load(stream.uid))
    later.run_with_new_request("how many lines was that?")

    read = [e for e in later.event_stream.events_list if e.type == "action"][-1]
    assert read.data["stdout"].startswith("50000\n"), read.content
    if sandbox != "off":
        assert "WROTE" not in read.data["stdout"] and "REMOVED" not in read.data["stdout"], "read-only in the sandbox"
        assert Path(path).read_text().endswith("50000\n")


@pytest.mark.sandbox
def test_the_sandbox_shows_no_other_sessions_outputs(tmp_path):
    other = anges_home() / "data" / "outputs" / "someoneElse1" / "someoneElse1"
    other.mkdir(parents=True)
    (other / "anges-out-secret.log").write_text("ANOTHER SESSION'S OUTPUT\n")
    probe = f"cat '{other}/anges-out-secret.log'; ls '{other.parent.parent}'"
    model = ScriptedModel([shell(probe), complete()])
    agent = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path,
                         config=load_config(overrides={"safety": {"approval": "auto"}}))

    stream = agent.run_with_new_request("look around")

    probed = stream.events_list[1]
    assert probed.data["sandbox"] == "workspace"
    assert "ANOTHER SESSION" not in probed.content
    assert probed.data["stdout"].split() == [stream.uid], "its own tree's folder is all the sandbox shows there"


def test_a_fold_removes_the_files_its_history_no_longer_names(tmp_path):
    model = ScriptedModel([shell("seq 1 50000"), shell("seq 1 60000"), *[shell(f"echo {n}") for n in range(4)],
                           complete()], summary="Counted twice; the first count's output is gone from view.")
    config = load_config(overrides={"agents": {"common": {"max_consecutive_actions_to_summarize": 2}},
                                    "prompt": {"recent_events_in_full": 5, "shrink_chars": 0}})
    agent = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=config)

    stream = agent.run_with_new_request("count")

    first, second = (FULL_OUTPUT.search(e.content).group(3) for e in stream.events_list[1:3])
    [summary] = stream.event_summaries_list
    assert summary.end_event_idx == 2, "the first count is folded away, the second stays in full"
    assert not Path(first).exists() and Path(second).is_file()
    assert second in model.prompts[-1] and first not in model.prompts[-1]


def test_removing_a_stream_removes_its_files(tmp_path):
    agent = DefaultAgent(inference_func=ScriptedModel([shell("seq 1 50000"), complete()]), cmd_init_dir=tmp_path,
                         config=load_config())
    stream = agent.run_with_new_request("count")
    path = Path(FULL_OUTPUT.search(stream.events_list[1].content).group(3))
    assert path.is_file()

    EventStore().delete(stream.uid)

    assert not path.exists() and not (anges_home() / "data" / "outputs" / stream.uid).exists()


def test_a_link_put_where_a_folder_goes_is_not_followed(tmp_path):
    """A command that can write ANGES_HOME (no sandbox, or one let out of it) puts a link where the stream's folder of
    outputs goes: anges writes nothing through it, and a fold removes nothing through it."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine\n")
    config = load_config(overrides={"safety": {"sandbox": "off", "approval": "auto"},
                                    "agents": {"common": {"max_consecutive_actions_to_summarize": 2}},
                                    "prompt": {"recent_events_in_full": 1, "shrink_chars": 0}})
    model = ScriptedModel(summary="Linked, counted, echoed.")
    agent = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=config)
    folder = anges_home() / "data" / "outputs" / agent.uid / agent.uid
    model.enqueue(shell(f"rm -rf '{folder}' && ln -s '{victim}' '{folder}'"), shell("seq 1 50000"), shell("echo 1"), shell("echo 2"),
                  shell("echo 3"), complete())

    stream = agent.run_with_new_request("count")

    assert folder.is_symlink() and stream.event_summaries_list, "the link stood through a fold"
    assert sorted(path.name for path in victim.iterdir()) == ["keep.txt"]
    counted = stream.events_list[2]
    path = Path(re.search(r"FULL OUTPUT: \d+ lines \(\d+ bytes\) in (\S+),", counted.content).group(1))
    assert not path.is_relative_to(victim) and "(available until this request ends)" in counted.content
