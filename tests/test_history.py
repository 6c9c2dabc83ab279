"""The history over a whole run: one rolling summary, a flat prompt, a stable prefix, no wasted calls."""

import json
import subprocess
import sys

from anges.agents import DefaultAgent, Orchestrator
from anges.agents.outcome import Outcome
from anges.config.loading import load_config
from anges.models.scripted import ScriptedModel, is_summary_prompt
from anges.prompt.templates import split_prompt
from anges.store.event_store import EventStore
from anges.store.numbers import count_upto


def reply(*actions, reasoning="next"):
    return json.dumps({"analysis": "", "reasoning": reasoning, "actions": list(actions)})


def shell(command):
    return {"action_type": "RUN_SHELL_CMD", "command": command}


def complete(content="done"):
    return reply({"action_type": "TASK_COMPLETE", "content": content}, reasoning="finished")


def unlimited(count=None, **prompt):
    """No limit on the run; the folds as configured, or every `count` events."""
    folds = {} if count is None else {"max_consecutive_actions_to_summarize": count}
    return load_config(overrides={"agents": {"common": {"max_number_of_events_to_exhaust": 0, "max_model_calls": 0,
                                                        "max_repeated_actions": 0, **folds}}, "prompt": prompt})


class Recorder:
    """A model that runs `steps` echo commands, then completes; its summaries are `summary(n, prompt)`."""

    name = "recorder"

    def __init__(self, steps, summary=lambda n, prompt: f"Summary {n}: echoed step 1 to the latest step."):
        self.steps = steps
        self.summary = summary
        self.calls = []  # ("step" | "summary", prompt)

    def __call__(self, prompt, temperature=0.0):
        if is_summary_prompt(prompt):
            self.calls.append(("summary", prompt))
            return self.summary(sum(kind == "summary" for kind, _ in self.calls), prompt)
        self.calls.append(("step", prompt))
        step = sum(kind == "step" for kind, _ in self.calls)
        return reply(shell(f"echo step {step}"), reasoning=f"step {step}") if step <= self.steps else complete()

    def steps_between_folds(self):
        """Pairs of consecutive step prompts with no summary call between them, and the number of folds."""
        pairs, previous = [], None
        for kind, prompt in self.calls:
            if kind == "summary":
                previous = None
            else:
                if previous is not None:
                    pairs.append((previous, prompt))
                previous = prompt
        return pairs


def test_a_long_run_has_one_rolling_summary_a_flat_prompt_and_prompts_that_extend_each_other(tmp_path):
    model = Recorder(steps=400)
    agent = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=unlimited())

    stream = agent.run_with_new_request("echo the steps")

    summaries = stream.event_summaries_list
    assert len(summaries) >= 7 and all(s.start_event_idx == 1 for s in summaries), "every 50 events (one-liners)"
    assert [s.end_event_idx for s in summaries] == sorted({s.end_event_idx for s in summaries})
    folds = [prompt for kind, prompt in model.calls if kind == "summary"]
    assert all(f"Summary {n}:" in folds[n] for n in range(1, len(folds))), "each fold rewrites the summary before it"
    prompts = [prompt for kind, prompt in model.calls if kind == "step"]
    last = prompts[-1].split("# History")[1]
    last_number = count_upto(stream, summaries[-1].end_event_idx)  # each fold's own event takes no number
    shown = [event for event in stream.events_list if event.type == "history_folded"]
    assert [event.content for event in shown] == [s.summary for s in summaries], "each fold is shown by an event"
    assert shown[-1].data["events"] == f"events {count_upto(stream, summaries[-2].end_event_idx) + 1}–{last_number}"
    assert f"## Summary of Events 1 to {last_number}\nSummary {len(summaries)}:" in last
    assert last.count("## Summary of Events") == 1 and "echo the steps" in last, "the request stays, verbatim"
    sizes = [len(prompt) for prompt in prompts]
    # once the window is full the prompt does not grow (but for the digits of growing step numbers)
    assert max(sizes[300:]) <= max(sizes[60:160]) * 1.02
    pairs = model.steps_between_folds()
    assert len(pairs) >= 350
    for before, after in pairs:
        assert after.startswith(before), "between folds, each prompt is the previous one plus new text"
    fixed = prompts[0].split("# History")[0]
    assert all(prompt.startswith(fixed) for prompt in prompts), "a fold changes the history only"


def test_a_summarizer_that_never_condenses_is_held_to_the_cap(tmp_path):
    model = Recorder(steps=120, summary=lambda n, prompt: prompt)  # answers with everything it was given
    config = unlimited(count=30, max_summary_chars=3000)
    agent = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=config)

    stream = agent.run_with_new_request("echo the steps")

    assert len(stream.event_summaries_list) >= 3
    assert all(len(s.summary) <= 3000 for s in stream.event_summaries_list)
    assert all(len(s.summary) <= 3000 for s in EventStore().load(stream.uid).event_summaries_list)
    sizes = [len(prompt) for kind, prompt in model.calls if kind == "step"]
    assert max(sizes[90:]) <= max(sizes[30:60]) * 1.05


def test_every_request_stays_verbatim_across_folds(tmp_path):
    requests = [f"request {n}: put {n} in file{n}.txt and do not touch the others" for n in range(4)]
    model = ScriptedModel(summary="Wrote the files asked for so far.")
    config = load_config(overrides={"agents": {"common": {"max_consecutive_actions_to_summarize": 4}},
                                    "prompt": {"recent_events_in_full": 1}})
    agent = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=config)
    for n, request in enumerate(requests):
        model.enqueue(reply(shell(f"echo {n} > file{n}.txt")), reply(shell(f"cat file{n}.txt")), complete())
        agent.run_with_new_request(request)

    assert len(agent.event_stream.event_summaries_list) >= 2
    history = model.prompts[-1].split("# History")[1]
    assert all(request in history for request in requests)
    assert "## Event 1 TYPE: NEW_REQUEST" in history and "TYPE: FOLLOW_UP_REQUEST" in history


def test_a_finished_task_costs_no_summary_call_the_next_request_folds_first_and_every_call_counts(tmp_path):
    model = ScriptedModel([reply(shell("echo a")), reply(shell("echo b")), complete()], summary="Echoed a and b.")
    config = load_config(overrides={"agents": {"common": {"max_consecutive_actions_to_summarize": 4}},
                                    "prompt": {"recent_events_in_full": 1}})
    agent = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=config, auto_entitle=True)

    stream = agent.run_with_new_request("echo twice")
    calls_of_first_run = model.calls
    assert not any(is_summary_prompt(prompt) for prompt in model.prompts)
    assert stream.event_summaries_list == [] and calls_of_first_run == 4  # a title and three steps

    start = len(stream.events_list)
    model.enqueue(complete("nothing more"))
    agent.run_with_new_request("anything else?")
    assert is_summary_prompt(model.prompts[calls_of_first_run]), "the new request folds first"
    assert [(s.start_event_idx, s.end_event_idx) for s in stream.event_summaries_list] == [(1, 4)]

    first = Outcome(stream, "", "completed", [(0, stream, e) for e in stream.events_list[:start]], 0)
    second = Outcome(stream, "", "completed", [(0, stream, e) for e in stream.events_list[start:]], 0)
    assert first.usage()["model_calls"] == calls_of_first_run, "the title call is counted"
    assert second.usage()["model_calls"] == model.calls - calls_of_first_run == 2, "and the summary call"


def test_a_childs_completion_costs_no_summary_call(tmp_path):
    prompts = []

    def model(prompt, temperature=0.0):
        prompts.append(prompt)
        if "You are anges' orchestrator" in prompt:
            done = "TYPE: CHILD_AGENT_TASK_COMPLETION" in prompt
            return complete("all done") if done else reply(
                {"action_type": "CALL_CHILD_AGENT", "directive": "NEW_CHILD_AGENT TASK_EXECUTOR", "agent_input": "x"})
        return complete("child done")

    Orchestrator(inference_func=model, cmd_init_dir=tmp_path, config=load_config()).run_with_new_request("delegate")
    assert len(prompts) == 3 and not any(is_summary_prompt(prompt) for prompt in prompts)


def test_what_holds_for_one_step_only_sits_in_the_tail_and_the_head_still_extends(tmp_path):
    model = ScriptedModel([
        reply({"action_type": "EDIT_FILE", "directive_line": "NEW_FILE a.txt", "content": "a\n"}),
        "this is not JSON",
        reply(shell("cat a.txt")),
        complete(),
    ])
    agent = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=load_config())
    agent.run_with_new_request("write a.txt")

    heads, tails = zip(*(split_prompt(prompt) for prompt in model.prompts))
    assert tails[0] == "" and model.prompts[0] == heads[0]
    assert "You edited a file" in tails[1] and "You edited a file" in tails[2] and "could not be used" in tails[2]
    assert "You edited a file" not in heads[1] + heads[2] + heads[3] and tails[3] == ""
    assert heads[2] == heads[1], "an invalid reply changes the tail only"
    assert all(later.startswith(earlier) for earlier, later in zip(heads, heads[1:]))
    assert model.prompts[3].startswith(model.prompts[0])


def test_the_footer_and_run_finished_count_the_title_and_summary_calls(tmp_path):
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps({"replies": [json.loads(reply(shell(f"echo {n}"))) for n in range(3)]
                                   + [json.loads(complete())], "summary": "Echoed.", "title": "Echo"}))
    config = tmp_path / "config.yaml"
    config.write_text("agents:\n  common:\n    max_consecutive_actions_to_summarize: 2\n    auto_entitle: true\n"
                      "prompt:\n  recent_events_in_full: 1\n")
    record = tmp_path / "calls.jsonl"
    common = ["-q", "go", "--model", f"scripted:{replies}", "--config", str(config), "--record", str(record)]
    out = subprocess.run([sys.executable, "-m", "anges", *common, "--output", "jsonl"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    calls = len(record.read_text().splitlines())
    stream = EventStore().load(json.loads(out.stdout.splitlines()[0])["stream_id"])
    assert calls == 4 + 1 + len(stream.event_summaries_list) and stream.event_summaries_list  # steps, title, folds
    assert json.loads(out.stdout.splitlines()[-1])["usage"]["model_calls"] == calls

    record.unlink()
    out = subprocess.run([sys.executable, "-m", "anges", *common], cwd=tmp_path, capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 0 and f"{len(record.read_text().splitlines())} model calls" in out.stderr
