"""A reply's reasoning shown once per turn in `anges show` and the export; titles cut at a word boundary."""

import io
import json

from anges.agents import DefaultAgent
from anges.cli.runs import print_stream
from anges.config.loading import load_config
from anges.models.scripted import ScriptedModel
from anges.store.event_store import EventStore
from anges.store.export import to_markdown


def reply(reasoning, *actions):
    return json.dumps({"analysis": "", "reasoning": reasoning, "actions": list(actions)})


def shell(command):
    return {"action_type": "RUN_SHELL_CMD", "command": command}


def test_show_and_export_give_a_replys_reasoning_once_for_all_its_actions(tmp_path):
    model = ScriptedModel([
        reply("Count the files three ways", shell("ls | wc -l"), shell("find . | wc -l"), shell("echo 3")),
        reply("All three agree", {"action_type": "TASK_COMPLETE", "content": "3 files"}),
    ])
    agent = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=load_config())
    stream = agent.run_with_new_request("count the files")
    assert [e.reasoning for e in stream.events_list[1:4]] == ["Count the files three ways"] * 3  # the facts stay

    shown = io.StringIO()
    print_stream(EventStore().load(stream.uid), EventStore(), shown)
    report = to_markdown(EventStore().load(stream.uid), EventStore())
    for text in (shown.getvalue(), report):
        assert text.count("Count the files three ways") == 1
        assert text.count("All three agree") == 1
        assert text.index("Count the files three ways") < text.index("ls | wc -l") < text.index("echo 3")


def test_a_title_is_cut_at_a_word_boundary(tmp_path):
    request = "Rename the configuration loader so that every caller reads all the layered settings through one function"
    model = ScriptedModel([reply("done", {"action_type": "TASK_COMPLETE", "content": "ok"})])
    stream = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=load_config()).run_with_new_request(
        request)
    title = EventStore().load(stream.uid).title
    assert title.endswith("…") and len(title) <= 80
    kept = title[:-1]
    assert request.startswith(kept) and request[len(kept)] == " ", "cut between two words"
