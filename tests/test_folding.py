"""Folding the history the prompt cache can serve: the fold's prompt is the agent's own with the request for the
summary after the history, it names the events that stay in full, and only what the model reads counts."""

import json
import re

from anges.agents import DefaultAgent
from anges.config.loading import load_config
from anges.models import get_model
from anges.models.scripted import SUMMARY_PROMPT_MARK, ScriptedModel, is_summary_prompt
from anges.prompt.templates import split_prompt


def reply(*actions, reasoning="next"):
    return json.dumps({"analysis": "", "reasoning": reasoning, "actions": list(actions)})


def shell(command):
    return {"action_type": "RUN_SHELL_CMD", "command": command}


def done():
    return reply({"action_type": "TASK_COMPLETE", "content": "done"}, reasoning="finished")


def folding(count, recent, **overrides):
    return load_config(overrides={"agents": {"common": {"max_consecutive_actions_to_summarize": count}},
                                  "prompt": {"recent_events_in_full": recent}, **overrides})


def shown_after_summary(prompt):
    """The numbers of the events a prompt shows after its rolling summary."""
    history = prompt.split("## Summary of Events", 1)[1]
    return [int(n) for n in re.findall(r"^## Event (\d+) TYPE", history, re.M)]


def test_the_fold_prompt_is_the_prompt_before_it_then_the_request_for_the_summary(tmp_path):
    model = ScriptedModel([reply(shell(f"echo step {n}")) for n in range(6)] + [done()], summary="THE SUMMARY")
    agent = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=folding(4, 2))

    stream = agent.run_with_new_request("echo the steps")

    at = next(n for n, prompt in enumerate(model.prompts) if is_summary_prompt(prompt))
    before, fold = model.prompts[at - 1], model.prompts[at]
    assert fold.startswith(split_prompt(before)[0]), "the same bytes as the prompt before, its whole history included"
    # where a provider caches by blocks: the fixed part and this history are marked; the previous history is a block end
    fixed, history_end = fold.marks
    assert fixed == before.index("\n# History\n") + 1 and len(before) in fold.breaks
    assert fold[history_end:].startswith(SUMMARY_PROMPT_MARK) and "\n## Event " not in fold[history_end:], \
        "the request follows the whole history"
    assert "## Event 6 TYPE: RUN_SHELL_CMD" in fold[:history_end]
    assert fold.cache_key == before.cache_key == f"anges-{stream.uid}"


def test_the_fold_names_the_events_that_stay_in_full_and_covers_only_those_before(tmp_path):
    model = ScriptedModel([reply(shell(f"echo step {n}")) for n in range(6)] + [done()], summary="THE SUMMARY")
    agent = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=folding(4, 2))

    stream = agent.run_with_new_request("echo the steps")

    at = next(n for n, prompt in enumerate(model.prompts) if is_summary_prompt(prompt))
    request = model.prompts[at][model.prompts[at].index(SUMMARY_PROMPT_MARK):]
    covered = int(re.search(r"stand in for events 1 to (\d+)", request).group(1))
    kept = [int(n) for n in re.search(r"Events (\d+) to (\d+) stay in your history word for word", request).groups()]
    assert (covered, kept) == (4, [5, 6]) and "leave them out of it" in request
    assert stream.event_summaries_list[0].end_event_idx == covered
    after = model.prompts[at + 1]
    assert f"## Summary of Events 1 to {covered}\nTHE SUMMARY" in after
    assert shown_after_summary(after) == [5, 6], "the events named as kept follow the summary, in full"


def ask_a_person(request):
    return "allow"


def test_events_the_model_does_not_read_count_neither_toward_a_fold_nor_among_those_kept(tmp_path):
    rules = [{"action": "RUN_SHELL_CMD", "match": "echo asked*", "decision": "ask", "reason": "a person looks"}]
    model = ScriptedModel([reply(shell(f"echo asked {n}")) for n in range(5)] + [done()], summary="THE SUMMARY")
    config = folding(4, 3, safety={"rules": rules, "approval": "ask"})
    agent = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=config, approval=ask_a_person)

    stream = agent.run_with_new_request("go")

    assert [e.type for e in stream.events_list[1:4]] == ["approval_requested", "approval_decided", "action"]
    at = next(n for n, prompt in enumerate(model.prompts) if is_summary_prompt(prompt))
    assert at == 3, "after three steps: the request and six events read, of which the newest three stay"
    covered = int(re.search(r"stand in for events 1 to (\d+)", model.prompts[at]).group(1))
    assert covered == 4, "four events the model reads: the count, not the approval requests it never saw"
    assert shown_after_summary(model.prompts[at + 1]) == [5, 6, 7], "three events kept, as the setting says"


def cached_prefixes(content):
    """The texts up to each block that carries a cache mark: what an Anthropic request writes to the cache."""
    texts = [block["text"] for block in content]
    return ["".join(texts[:n + 1]) for n, block in enumerate(content) if block.get("cache_control")]


def block_ends(content):
    """The texts up to each block's end: where an Anthropic request may read from the cache."""
    texts = [block["text"] for block in content]
    return {"".join(texts[:n + 1]) for n in range(len(texts))}


def test_anthropic_reads_each_step_and_the_fold_from_the_cache_the_step_before_wrote(anthropic_server, monkeypatch,
                                                                                     tmp_path):
    for name, value in anthropic_server.env.items():
        monkeypatch.setenv(name, value)
    for text in [reply(shell("echo step 0")), "this is not JSON", reply(shell("echo step 1")), "Echoed steps 0 and 1.",
                 reply(shell("echo step 2")), done()]:
        anthropic_server.enqueue_text(text)
    config = folding(2, 1)
    agent = DefaultAgent(inference_func=get_model("claude", config), cmd_init_dir=tmp_path, config=config)

    stream = agent.run_with_new_request("echo three steps")

    assert stream.event_summaries_list[0].summary == "Echoed steps 0 and 1."
    requests = [request.body["messages"][0]["content"] for request in anthropic_server.requests]
    fold = next(n for n, content in enumerate(requests) if SUMMARY_PROMPT_MARK in str(content))
    assert fold == 3 and len(requests) == 6 and "# Now" in requests[2][-1]["text"], "2 asks again, with feedback"
    for before, after in [(0, 1), (1, 2), (2, 3), (4, 5)]:  # after a fold, the history is new: the fixed part is read
        written = cached_prefixes(requests[before])
        assert len(written) == 2 and written[-1] in block_ends(requests[after]), \
            f"request {after} has a block end where request {before} wrote its history to the cache"
    assert requests[fold][0] == requests[fold - 1][0] and requests[fold][0].get("cache_control")
    assert SUMMARY_PROMPT_MARK in requests[fold][-1]["text"] and not requests[fold][-1].get("cache_control")
    assert cached_prefixes(requests[4])[0] == cached_prefixes(requests[3])[0], "the fixed part is read after a fold"


def test_a_few_dozen_small_events_in_a_large_window_do_not_fold(tmp_path):
    model = ScriptedModel([reply(shell(f"echo step {n}")) for n in range(45)] + [done()], context_window=200_000)
    agent = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=load_config())

    stream = agent.run_with_new_request("echo 45 steps")

    assert stream.events_list[-1].type == "task_completion" and len(stream.events_list) == 47
    assert not any(is_summary_prompt(prompt) for prompt in model.prompts) and not stream.event_summaries_list


def test_a_history_that_outgrows_the_character_budget_folds_before_the_count(tmp_path):
    model = ScriptedModel([reply(shell(f"seq {n} {n + 300}")) for n in range(1000, 1020)] + [done()],
                          context_window=200_000)
    agent = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=load_config())

    stream = agent.run_with_new_request("print the numbers 20 times")

    budget = load_config().prompt.history_window_chars
    [fold] = [prompt for prompt in model.prompts if is_summary_prompt(prompt)]
    covered = int(re.search(r"stand in for events 1 to (\d+)", fold).group(1))
    blocks = fold.split("\n\n## Event ")[1:covered + 1]
    assert sum(len(block) for block in blocks) > budget, "the events folded fill more than the budget"
    assert covered < 20 and stream.event_summaries_list[0].end_event_idx == covered
