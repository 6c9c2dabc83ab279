"""Old bulky results shrink in batches: once the model has read and built on one, it shows as its head and tail and
the file that holds it whole; results that come together shrink together, the history otherwise only grows at its
end, and a resumed stream shows the same."""

import json
import re
from pathlib import Path

from anges.agents import DefaultAgent
from anges.config.loading import load_config
from anges.models.scripted import ScriptedModel
from anges.prompt.templates import split_prompt
from anges.store.event_store import EventStore
from anges.store.events import EVENT_KINDS

SHRUNK = re.compile(r"SHRUNK: only the start and the end are shown here; the whole is in (\S+)\.")


def reply(*actions):
    return json.dumps({"analysis": "", "reasoning": "step", "actions": list(actions)})


def shell(command):
    return reply({"action_type": "RUN_SHELL_CMD", "command": command})


def complete():
    return reply({"action_type": "TASK_COMPLETE", "content": "done"})


def history(prompt):
    return prompt.split("\n# History\n", 1)[1]


def event_block(prompt, number):
    """The text of `## Event number` in a prompt's history."""
    match = re.search(rf"^## Event {number} TYPE:.*?(?=^## Event |\Z)", history(prompt), re.M | re.S)
    return match.group(0).rstrip("\n") if match else ""


def test_a_bulky_result_shrinks_once_read_and_built_on_to_its_ends_and_the_file_that_holds_it(tmp_path):
    model = ScriptedModel([shell("seq 1 100000"), shell("echo read it"), shell("echo built on it"),
                           shell("echo later"), complete()])
    agent = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=load_config())

    stream = agent.run_with_new_request("count")

    full = [event_block(prompt, 2) for prompt in model.prompts[1:]]
    assert "FULL OUTPUT: 100000 lines" in full[0] == full[1], "read in full by the next two replies"
    shrunk = full[2]
    assert full[3] == shrunk and len(shrunk) < 1500 < 8000 < len(full[0])
    assert re.match(r"## Event 2 TYPE: RUN_SHELL_CMD\nREASONING:\nstep\nCONTENT:\nCOMMAND: seq 1 100000\n"
                    r"EXIT CODE: 0 after [0-9.]+ s\nSTDOUT:\n1\n2\n", shrunk)
    assert "\n99999\n100000\n" in shrunk
    whole = Path(SHRUNK.search(shrunk).group(1))
    assert whole.read_text() == "".join(f"{n}\n" for n in range(1, 100001))
    [batch] = [e for e in stream.events_list if e.type == "results_shrunk"]
    assert batch.data["events"] == [[2, str(whole)]] and not EVENT_KINDS["results_shrunk"].in_prompt
    heads = [split_prompt(prompt)[0] for prompt in model.prompts]
    assert [later.startswith(earlier) for earlier, later in zip(heads, heads[1:])] == [True, True, False, True], \
        "the history grows at its end but at the one step that shrinks"


def test_results_that_come_together_shrink_together(tmp_path):
    model = ScriptedModel([shell("seq 1 100000"), shell("seq 1 90000"), *[shell(f"echo {n}") for n in range(5)],
                           complete()])
    agent = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=load_config())

    stream = agent.run_with_new_request("count twice")

    batches = [e for e in stream.events_list if e.type == "results_shrunk"]
    assert [[index for index, _ in batch.data["events"]] for batch in batches] == [[2, 3]], \
        "the first waits for the second: shrinking it alone would send the second again for less than it saves"
    assert all(SHRUNK.search(event_block(model.prompts[-1], n)) for n in (2, 3))


def test_a_resumed_stream_shows_its_shrunk_results_as_before(tmp_path):
    model = ScriptedModel([shell("seq 1 100000"), *[shell(f"echo {n}") for n in range(3)], complete()])
    agent = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=load_config())
    stream = agent.run_with_new_request("count")
    before = history(model.prompts[-1])

    again = ScriptedModel([complete()])
    DefaultAgent(inference_func=again, cmd_init_dir=tmp_path, config=load_config(),
                 event_stream=EventStore().load(stream.uid)).run_with_new_request("anything else?")

    assert history(again.prompts[0]).startswith(before.rstrip("\n")) and SHRUNK.search(before)


def test_shrinking_can_be_turned_off(tmp_path):
    model = ScriptedModel([shell("seq 1 100000"), *[shell(f"echo {n}") for n in range(4)], complete()])
    config = load_config(overrides={"prompt": {"shrink_chars": 0}})
    stream = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=config).run_with_new_request("count")

    assert not [e for e in stream.events_list if e.type == "results_shrunk"]
    assert "FULL OUTPUT: 100000 lines" in event_block(model.prompts[-1], 2)
