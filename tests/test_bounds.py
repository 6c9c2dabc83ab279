"""Every event and every prompt is bounded: texts are capped when recorded, prompts never pass their limit."""

import json

from anges.agents import DefaultAgent
from anges.config.loading import load_config
from anges.models.scripted import ScriptedModel
from anges.store.event_store import EventStore
from anges.store.events import Event


def reply(*actions, reasoning="because"):
    return {"analysis": "", "reasoning": reasoning, "actions": list(actions)}


def complete(content="done"):
    return reply({"action_type": "TASK_COMPLETE", "content": content})


def stored_lines(uid):
    """The raw JSON lines of a stream's event records, as stored."""
    path = EventStore().root / f"{uid}.jsonl"
    return [line for line in path.read_bytes().splitlines() if b'"kind":"event"' in line]


def test_replacing_a_100_mb_file_records_a_bounded_event_and_the_next_prompt_fits(tmp_path):
    big = tmp_path / "big.txt"
    with open(big, "w") as file:
        for number in range(1_000_000):
            file.write(f"line {number:07d} {'x' * 86}\n")  # 100 bytes a line
    assert big.stat().st_size == 100_000_000
    model = ScriptedModel([reply({"action_type": "EDIT_FILE", "directive_line": "NEW_FILE big.txt",
                                  "content": "small now\n"}), complete()])
    config = load_config()
    agent = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=config)

    stream = agent.run_with_new_request("shrink big.txt")

    assert big.read_text() == "small now\n"  # the edit itself was made
    edit = stream.events_list[1]
    assert edit.type == "edit_file"
    assert "1000001 lines changed (+1 -1000000)" in edit.data["diff"] and "1000001 lines changed" in edit.content
    cap = config.agent("default").event_text_cap
    line = stored_lines(stream.uid)[1]
    assert len(line) < 3 * cap, f"the stored edit event is {len(line)} bytes"
    assert "1000001 lines changed" in Event.from_dict(json.loads(line)).content  # rebuilt from the stored diff
    next_prompt = model.prompts[1]
    assert len(next_prompt) <= config.prompt.max_prompt_chars
    assert "1000001 lines changed" in next_prompt


def test_every_text_of_an_event_is_capped_when_recorded(tmp_path):
    config = load_config(overrides={"agents": {"common": {"event_text_cap": 1000}}})
    huge = "why " * 100_000
    model = ScriptedModel([reply({"action_type": "RUN_SHELL_CMD", "command": "echo ok"}, reasoning=huge), complete()])
    agent = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=config)

    stream = agent.run_with_new_request("x" * 50_000)

    request, action = stream.events_list[:2]
    assert len(request.content) <= 1000 and request.content.startswith("xxx") and "characters cut" in request.content
    assert len(action.reasoning) <= 1000 and "characters cut" in action.reasoning
    assert action.data["exit_code"] == 0 and "ok" in action.data["stdout"]
    assert all(len(line) < 6 * 1000 for line in stored_lines(stream.uid))


def test_a_huge_summary_is_cut_and_prompts_stay_within_their_limit(tmp_path):
    overrides = {"agents": {"common": {"max_consecutive_actions_to_summarize": 2}},
                 "prompt": {"recent_events_in_full": 1, "max_summary_chars": 3000, "max_prompt_chars": 60_000}}
    config = load_config(overrides=overrides)
    steps = [reply({"action_type": "RUN_SHELL_CMD", "command": f"echo step {i}"}) for i in range(6)]
    model = ScriptedModel(steps + [complete()], summary="S" * 5_000_000)
    agent = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=config)

    stream = agent.run_with_new_request("work")

    assert stream.event_summaries_list, "no summary was made"
    assert all(len(s.summary) <= 3000 for s in stream.event_summaries_list)
    stored = EventStore().load(stream.uid).event_summaries_list
    assert stored and all(len(s.summary) <= 3000 for s in stored)
    assert max(len(prompt) for prompt in model.prompts) <= 60_000


def test_no_prompt_passes_max_prompt_chars_and_its_end_is_kept(tmp_path):
    config = load_config(overrides={"prompt": {"max_prompt_chars": 50_000}})
    model = ScriptedModel([complete()])
    agent = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=config, notes=["n" * 200_000])

    agent.run_with_new_request("do it")

    prompt = model.prompts[0]
    assert len(prompt) <= 50_000 and "characters cut" in prompt
    assert prompt.startswith("You are anges") and prompt.rstrip().endswith("TYPE: NEW_REQUEST\nCONTENT:\ndo it")
    # the history sits at the end, so it is kept
