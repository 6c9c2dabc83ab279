"""UPDATE_PLAN: the plan an agent keeps, in its prompt's changing tail (never the stable prefix), through folds and
requests; a child's plan is its own and its parent sees its progress; an orchestrator's own commands come back at
once while its children run. Real commands, scripted models."""

import json
import re

from test_agent import make_agent, reply, shell, types
from test_orchestrator import RoutedModel, child, orchestrator, wait

from anges.agents import TaskAnalyzer, TaskExecutor
from anges.config.loading import load_config
from anges.prompt.templates import split_prompt
from anges.store.event_store import EventStore


def plan(*steps):
    return {"action_type": "UPDATE_PLAN", "plan": [{"step": step, "status": status} for step, status in steps]}


def complete(content="done"):
    return reply({"action_type": "TASK_COMPLETE", "content": content})


def tail(prompt):
    return split_prompt(prompt)[1]


def fixed(prompt):
    return prompt.split("\n# History\n", 1)[0]


def test_a_plan_updated_over_several_steps_is_what_each_next_prompt_ends_with(tmp_path):
    agent, model = make_agent(tmp_path, [
        reply(plan(("Write notes.txt", "in_progress"), ("Count its words", "pending")), shell("echo one two > notes.txt")),
        reply(plan(("Write notes.txt", "completed"), ("Count its words", "in_progress")), shell("wc -w notes.txt")),
        reply(plan(("Write notes.txt", "completed"), ("Count its words", "completed")),
              {"action_type": "TASK_COMPLETE", "content": "2 words", "only_if_succeeded": True})])
    stream = agent.run_with_new_request("write notes and count the words")

    assert types(stream) == ["new_request", "plan_updated", "action", "plan_updated", "action", "plan_updated",
                             "task_completion"]
    assert stream.events_list[3].data["plan"] == [{"step": "Write notes.txt", "status": "completed"},
                                                  {"step": "Count its words", "status": "in_progress"}]
    first, second = model.prompts[1:3]
    assert tail(first) == ("\n\n# Now\n\n## Your plan (0 of 2 done)\n\n- [in_progress] Write notes.txt\n"
                           "- [pending] Count its words\n")
    assert "## Your plan (1 of 2 done)\n\n- [completed] Write notes.txt\n- [in_progress] Count its words" in tail(second)
    assert "Your plan" not in fixed(second) and fixed(first) == fixed(second) == fixed(model.prompts[0])
    assert split_prompt(second)[0].startswith(split_prompt(first)[0]), "the plan changes no part of the cached head"
    assert "TYPE: UPDATE_PLAN\nREASONING:\nbecause\nCONTENT:\nPlan updated: 0 of 2 steps done." in first
    assert "## Your plan" not in model.prompts[0], "no plan, no tail"


def test_the_plan_survives_a_fold_of_the_history(tmp_path):
    config = load_config(overrides={"agents": {"default": {"max_consecutive_actions_to_summarize": 4}},
                                    "prompt": {"recent_events_in_full": 1}})
    steps = [reply(plan(("Print the numbers", "in_progress"), ("Report them", "pending")))]
    steps += [reply(shell(f"echo {n}")) for n in range(8)]
    agent, model = make_agent(tmp_path, [*steps, complete("held: the plan is open"), complete("reported")],
                              config=config)
    stream = agent.run_with_new_request("print numbers")

    assert stream.event_summaries_list, "the history was folded"
    last = [prompt for prompt in model.prompts if not prompt.startswith("# ")][-1]
    assert "TYPE: UPDATE_PLAN" not in last and "## Summary of Events 1 to" in last, "the plan's event is folded away"
    assert "## Your plan (0 of 2 done)\n\n- [in_progress] Print the numbers\n- [pending] Report them" in tail(last)


def test_a_plan_the_model_gets_wrong_is_refused_and_the_old_one_stays(tmp_path):
    many = {"action_type": "UPDATE_PLAN", "plan": [{"step": f"step {n}", "status": "pending"} for n in range(31)]}
    agent, model = make_agent(tmp_path, [
        reply(plan(("Read", "in_progress"))),
        reply({"action_type": "UPDATE_PLAN", "plan": [{"step": "Read", "status": "maybe"}]}),
        reply({"action_type": "UPDATE_PLAN", "plan": ["Read"]}), reply(many),
        reply(plan(("Read", "completed"))), complete()])
    stream = agent.run_with_new_request("read")

    refusals = [event.content for event in stream.events_list if event.type == "action"]
    assert refusals == [
        "UPDATE_PLAN FAILED: step 1 has status 'maybe'; use one of pending, in_progress, completed. The plan was not "
        "changed.",
        'UPDATE_PLAN FAILED: step 1 is not an object with a "step" text. The plan was not changed.',
        "UPDATE_PLAN FAILED: the plan has 31 steps; keep it to 30 at most. The plan was not changed."]
    assert "- [in_progress] Read" in tail(model.prompts[2]), "the plan in force is the last good one"
    assert types(stream)[-1] == "task_completion"


def test_an_open_plan_carries_over_to_the_next_request_and_a_finished_one_does_not(tmp_path):
    agent, model = make_agent(tmp_path, [
        reply(plan(("One", "completed"), ("Two", "pending"))), complete("stopping here"), complete("really"),
        complete("nothing new"),
        reply(plan(("Two", "completed"))), complete("two done"), complete("a new question")])
    agent.run_with_new_request("first")
    agent.run_with_new_request("go on")
    assert "## Your plan (1 of 2 done)" in tail(model.prompts[3]), "open steps carry over"
    agent.run_with_new_request("finish")
    agent.run_with_new_request("something else")
    assert "Your plan" not in tail(model.prompts[-1]) and "Your plan" not in model.prompts[-1].split("# History")[0]


def test_every_agent_type_offers_update_plan_with_guidance(tmp_path):
    for kind in (TaskExecutor, TaskAnalyzer):
        agent, model = make_agent(tmp_path, [complete()], agent_class=kind)
        agent.run_with_new_request("hi")
        guide = model.prompts[0].split("## UPDATE_PLAN\n")[1].split("\n## ")[0]
        assert guide.startswith("On a task of several steps (not a one-step question), keep a checklist the user")
        assert '"status": "pending", "in_progress" or "completed"' in guide


def test_a_childs_plan_is_its_own_and_its_parent_sees_its_progress(tmp_path):
    def executor(prompt):
        if "CONTENT:\nthe slow part" not in prompt:  # the quick child (whose prompt may name its sibling's task) waits
            return json.dumps(reply(shell("while [ ! -e planned ]; do sleep 0.05; done"),
                                    {"action_type": "TASK_COMPLETE", "content": "quick part done",
                                     "only_if_succeeded": True}))
        if "TYPE: UPDATE_PLAN" not in prompt:
            return json.dumps(reply(plan(("Read", "completed"), ("Write", "in_progress"), ("Test", "pending")),
                                    shell("touch planned; while [ ! -e go ]; do sleep 0.05; done")))
        if "COMPLETION_HELD" not in prompt:
            return json.dumps(complete("wrote it, untested"))
        return json.dumps(complete("wrote it; testing is the parent's call"))

    seen = {}

    def after_quick(prompt):
        seen["prompt"] = prompt
        (tmp_path / "go").write_text("")
        return json.dumps(wait())

    model = RoutedModel(
        orchestrator=[reply(plan(("Split the work", "completed"), ("Merge", "pending")),
                            child("NEW_CHILD_AGENT TASK_EXECUTOR", "the slow part"),
                            child("NEW_CHILD_AGENT TASK_EXECUTOR", "the quick part")),
                      after_quick, reply(plan(("Split the work", "completed"), ("Merge", "completed"))),
                      complete("both parts done")],
        task_executor=[executor] * 6)
    stream = orchestrator(tmp_path, model).run_with_new_request("do both")

    slow = next(e.data["agent_id"] for e in stream.events_list if e.type == "new_child_agent")
    now = tail(seen["prompt"])
    assert "## Your plan (1 of 2 done)\n\n- [completed] Split the work\n- [pending] Merge" in now, "its own plan"
    assert f"## Your children not returned yet\n\n- TASK_EXECUTOR {slow} (the slow part): running; its plan: 1 of 3 " \
           "steps done" in now
    child_stream = EventStore().load(slow)
    assert [e.data["plan"][1]["status"] for e in child_stream.events_list if e.type == "plan_updated"] == [
        "in_progress"], "the child's plan lives in its own stream"
    report = next(e for e in stream.events_list if e.type == "child_agent_task_completion"
                  and e.data["agent_id"] == slow).content
    assert "wrote it; testing is the parent's call\n(Its plan: 1 of 3 steps done; open: Write; Test.)" in report
    assert types(stream)[-1] == "task_completion"


def test_an_orchestrators_own_commands_come_back_while_its_children_run(tmp_path):
    def executor(prompt):
        if "CONTENT:\nthe slow part" in prompt and "TYPE: RUN_SHELL_CMD" not in prompt:
            return json.dumps(reply(shell("for i in $(seq 300); do [ -e go ] && break; sleep 0.1; done")))
        return json.dumps(complete("went"))

    def check(prompt):
        assert "## Your children not returned yet" in tail(prompt), "the slow child still runs"
        assert re.search(r"COMMAND: echo checked\nEXIT CODE: 0 after [\d.]+ s\nSTDOUT:\nchecked", prompt)
        (tmp_path / "go").write_text("")
        return json.dumps(wait())

    model = RoutedModel(
        orchestrator=[reply(child("NEW_CHILD_AGENT TASK_EXECUTOR", "the slow part"),
                            child("NEW_CHILD_AGENT TASK_EXECUTOR", "the quick part")),
                      reply({"action_type": "RUN_SHELL_CMD", "command": "echo checked"}), check, complete("done")],
        task_executor=[executor] * 4)
    stream = orchestrator(tmp_path, model).run_with_new_request("check while it works")

    kinds = types(stream)
    assert kinds.index("action") < [i for i, kind in enumerate(kinds) if kind == "child_agent_task_completion"][-1]
    assert kinds[-1] == "task_completion"
    reply_format = model.models["orchestrator"].prompts[0].split("# Reply format")[1].split("# Actions")[0]
    assert "While children run, a reply that starts, resumes or waits for one comes back when a child returns" \
           in reply_format and "any other comes back at once" in reply_format
