"""Orchestrators delegating to child agents, driven by scripted models per agent type."""

import re
import threading
import time

import pytest
from helpers import pids_running, running_soon, sleep_token, wait_for_pid

from anges.agents import Orchestrator
from anges.config.loading import load_config
from anges.models.scripted import ScriptedModel
from anges.store.event_store import EventStore

ROLE_MARKS = {
    "orchestrator": "You are anges' orchestrator",
    "task_executor": "You are anges' task executor",
    "task_analyzer": "You are anges' task analyzer",
}


class RoutedModel:
    """Sends each prompt to the scripted model of the agent type that rendered it."""

    name = "routed"

    def __init__(self, **scripts):
        self.models = {kind: ScriptedModel(replies) for kind, replies in scripts.items()}
        self.lock = threading.Lock()

    def __call__(self, prompt, temperature=0.0):
        for kind, mark in ROLE_MARKS.items():
            if mark in prompt and kind in self.models:
                return self.models[kind](prompt, temperature)
        return ScriptedModel([])(prompt) if not prompt.startswith("# ") else self.models["orchestrator"](prompt)


def reply(*actions):
    return {"analysis": "", "reasoning": "plan", "actions": list(actions)}


def history(prompt):
    """The history a prompt shows (not its tail, which may name a sibling's task)."""
    return prompt.split("# History")[1].split("\n# Now\n")[0]


def child(directive, agent_input):
    return {"action_type": "CALL_CHILD_AGENT", "directive": directive, "agent_input": agent_input}


def complete(content):
    return reply({"action_type": "TASK_COMPLETE", "content": content})


def wait():
    return reply({"action_type": "WAIT_FOR_CHILDREN"})


def shell(command):
    return reply({"action_type": "RUN_SHELL_CMD", "command": command})


def types(stream):
    return [e.type for e in stream.events_list]


def orchestrator(tmp_path, model, config=None, **kwargs):
    return Orchestrator(inference_func=model, cmd_init_dir=tmp_path, config=config or load_config(), **kwargs)


def test_analyzer_then_executor_then_complete(tmp_path):
    model = RoutedModel(
        orchestrator=[
            reply(child("NEW_CHILD_AGENT TASK_ANALYZER", "plan making notes.txt")),
            reply(child("NEW_CHILD_AGENT TASK_EXECUTOR", "create notes.txt containing hello")),
            complete("notes.txt created"),
        ],
        task_analyzer=[shell("ls"), complete("## Execution Plan\n1. write notes.txt")],
        task_executor=[shell("echo hello > notes.txt"), complete("wrote notes.txt")],
    )
    agent = orchestrator(tmp_path, model)
    stream = agent.run_with_new_request("make notes")
    assert types(stream) == [
        "new_request",
        "new_child_agent", "child_agent_running", "child_agent_task_completion",
        "new_child_agent", "child_agent_running", "child_agent_task_completion",
        "task_completion",
    ]
    assert (tmp_path / "notes.txt").read_text() == "hello\n"
    analyzer_id = stream.events_list[2].data["agent_id"]
    analyzer = EventStore().load(analyzer_id)
    assert analyzer.parent_event_stream_uids == [stream.uid] and analyzer.agent_type == "task_analyzer"
    assert types(analyzer)[0] == "new_request_from_parent"
    assert "Execution Plan" in stream.events_list[3].content
    # the orchestrator read the analyzer's report before delegating to the executor
    assert "## Execution Plan" in model.models["orchestrator"].prompts[1]
    assert [c.uid for c in EventStore().children(stream.uid)] != []


def test_flattened_view_of_a_three_level_tree(tmp_path):
    model = RoutedModel(
        orchestrator=[
            reply(child("NEW_CHILD_AGENT ORCHESTRATOR", "handle the backend")),
            reply(child("NEW_CHILD_AGENT TASK_EXECUTOR", "touch backend.txt")),
            complete("backend done"),
            complete("all done"),
        ],
        task_executor=[shell("touch backend.txt"), complete("touched")],
    )
    agent = orchestrator(tmp_path, model)
    stream = agent.run_with_new_request("build it")
    flat = [e.type for e in stream.get_event_list_including_children_events()]
    assert flat == [
        "new_request",
        "new_child_agent", "child_agent_running",
        "new_request_from_parent",
        "new_child_agent", "child_agent_running",
        "new_request_from_parent", "action", "task_completion",
        "child_agent_task_completion", "task_completion",
        "child_agent_task_completion", "task_completion",
    ]
    nested = EventStore().load(stream.events_list[2].data["agent_id"])
    grandchild = EventStore().load(nested.events_list[2].data["agent_id"])
    assert grandchild.parent_event_stream_uids == [stream.uid, nested.uid]


def test_resume_an_earlier_child(tmp_path):
    first = {}

    def resume(prompt):
        assert '"agent_id"' not in prompt, "child ids are shown plainly, not as a JSON blob"
        first.setdefault("id", re.search(r"Child agent TASK_EXECUTOR (\w{12}) is running\.", prompt).group(1))
        return reply(child(f"RESUME_CHILD_AGENT {first['id']}", "now also write b.txt"))

    model = RoutedModel(
        orchestrator=[reply(child("NEW_CHILD_AGENT TASK_EXECUTOR", "write a.txt")), resume, complete("both")],
        task_executor=[shell("touch a.txt"), complete("a done"), shell("touch b.txt"), complete("b done")],
    )
    stream = orchestrator(tmp_path, model).run_with_new_request("write files")
    assert types(stream)[4:7] == ["resume_child_agent", "child_agent_running", "child_agent_task_completion"]
    child_stream = EventStore().load(first["id"])
    assert types(child_stream) == ["new_request_from_parent", "action", "task_completion",
                                   "follow_up_request_from_parent", "action", "task_completion"]
    assert stream.events_list[5].data["starting_from"] == 3
    assert (tmp_path / "b.txt").exists()


def test_bad_directives_are_corrected_after_feedback(tmp_path):
    model = RoutedModel(
        orchestrator=[
            reply(child("SPAWN TASK_EXECUTOR", "x")),
            reply(child("NEW_CHILD_AGENT WIZARD", "x")),
            reply(child("RESUME_CHILD_AGENT nosuchchild", "x")),
            reply(child("NEW_CHILD_AGENT task_executor", "echo")),
            complete("ok"),
        ],
        task_executor=[complete("did it")],
    )
    stream = orchestrator(tmp_path, model).run_with_new_request("go")
    errors = [e.data["error"] for e in stream.events_list if e.data.get("error")]
    assert len(errors) == 3
    assert "not valid" in errors[0] and "WIZARD" in errors[1] and "not one of your child agents" in errors[2]
    assert "CALL_CHILD_AGENT FAILED" in model.models["orchestrator"].prompts[1]
    assert types(stream)[-2:] == ["child_agent_task_completion", "task_completion"]


def test_depth_exhausted_refuses_nested_orchestrators(tmp_path):
    config = load_config(overrides={"agents": {"orchestrator": {"max_depth": 0}}})
    model = RoutedModel(orchestrator=[reply(child("NEW_CHILD_AGENT ORCHESTRATOR", "nest")), complete("gave up")])
    stream = orchestrator(tmp_path, model, config=config).run_with_new_request("go")
    prompt = model.models["orchestrator"].prompts[0]
    guide = prompt.split("## CALL_CHILD_AGENT")[1].split("##")[0]
    assert "TASK_EXECUTOR" in guide and "ORCHESTRATOR delegates" not in guide
    assert "depth limit" in stream.events_list[1].data["error"]
    assert not EventStore().children(stream.uid)


def test_two_children_run_concurrently(tmp_path):
    def timed(name):
        pause = 0.5 if name == "left" else 2
        return shell(f"date +%s.%N > {name}.start; sleep {pause}; date +%s.%N > {name}.end")

    def executor(prompt):
        name = "left" if "task LEFT" in history(prompt) else "right"
        done = f"{name}.end"
        return complete(f"{name} done") if done in history(prompt) else timed(name)

    model = RoutedModel(
        orchestrator=[reply(child("NEW_CHILD_AGENT TASK_EXECUTOR", "task LEFT"),
                            child("NEW_CHILD_AGENT TASK_EXECUTOR", "task RIGHT")), wait(), complete("both")],
        task_executor=[executor] * 4,
    )
    stream = orchestrator(tmp_path, model).run_with_new_request("go")
    spans = {n: (float((tmp_path / f"{n}.start").read_text()), float((tmp_path / f"{n}.end").read_text()))
             for n in ("left", "right")}
    assert spans["left"][0] < spans["right"][1] and spans["right"][0] < spans["left"][1], spans
    exits = [e for e in stream.events_list if e.type == "child_agent_task_completion"]
    assert [e.content.split("\n")[1] for e in exits] == ["left done", "right done"]
    right = stream.events_list[3].data["agent_id"]
    assert exits[0].content.endswith(f"Still running: TASK_EXECUTOR {right} (task RIGHT).")
    assert exits[1].content.endswith("No other child agent is running.")
    assert types(stream) == ["new_request", "new_child_agent", "child_agent_running", "new_child_agent",
                             "child_agent_running", "child_agent_task_completion", "action",
                             "child_agent_task_completion", "task_completion"]
    assert [e.reasoning for e in exits] == ["", ""], "a child's report does not repeat the plan that started it"
    turns = [p for p in model.models["orchestrator"].prompts if p.startswith(ROLE_MARKS["orchestrator"])]
    assert len(turns) == 3, "a turn when the left child returned, another for the right"


def test_interrupt_during_grandchild_sleep_ends_every_stream(tmp_path):
    pid_file, token = tmp_path / "pid", sleep_token()
    model = RoutedModel(
        orchestrator=[reply(child("NEW_CHILD_AGENT ORCHESTRATOR", "nested")),
                      reply(child("NEW_CHILD_AGENT TASK_EXECUTOR", "sleep"))],
        task_executor=[shell(f"sleep {token} & echo $! > '{pid_file}'; wait")],
    )
    agent = orchestrator(tmp_path, model)
    worker = threading.Thread(target=agent.run_with_new_request, args=("go",))
    worker.start()
    wait_for_pid(pid_file)
    started = time.monotonic()
    agent.interrupt()
    worker.join(10)
    assert not worker.is_alive() and time.monotonic() - started < 2
    store = EventStore()
    top = store.load(agent.uid)
    nested = store.load(top.events_list[2].data["agent_id"])
    grandchild = store.load(nested.events_list[2].data["agent_id"])
    for stream in (top, nested, grandchild):
        assert stream.events_list[-1].type == "task_interrupted", types(stream)
    assert not pids_running(token)


def test_tree_budget_stops_a_child(tmp_path):
    config = load_config(overrides={"agents": {"orchestrator": {"max_model_calls": 3},
                                               "task_executor": {"max_model_calls": 50}}})
    model = RoutedModel(
        orchestrator=[reply(child("NEW_CHILD_AGENT TASK_EXECUTOR", "loop")), complete("x")],
        task_executor=[shell(f"echo {i}") for i in range(20)],
    )
    stream = orchestrator(tmp_path, model, config=config).run_with_new_request("go")
    executor = EventStore().load(stream.events_list[2].data["agent_id"])
    assert executor.events_list[-1].type == "task_interrupted"
    assert executor.events_list[-1].data["reason"] == "model_call_limit"
    assert model.models["task_executor"].calls == 2, "the child may only spend what its parent has left"
    assert stream.events_list[-1].type == "task_interrupted"


def test_child_messages_reach_parent_handlers_tagged(tmp_path):
    messages = []
    model = RoutedModel(orchestrator=[reply(child("NEW_CHILD_AGENT TASK_EXECUTOR", "hi")), complete("fin")],
                        task_executor=[complete("child says hi")])
    agent = orchestrator(tmp_path, model, message_handlers=[messages.append])
    stream = agent.run_with_new_request("go")
    from_child = [m for m in messages if m == "child says hi"]
    assert from_child and from_child[0].agent_type == "task_executor"
    assert from_child[0].parent_ids == [stream.uid] and from_child[0].depth == 1


def test_a_childs_own_model_call_limit_stops_it_before_its_parents(tmp_path):
    config = load_config(overrides={"agents": {"orchestrator": {"max_model_calls": 50},
                                               "task_executor": {"max_model_calls": 3}}})
    model = RoutedModel(
        orchestrator=[reply(child("NEW_CHILD_AGENT TASK_EXECUTOR", "loop")), complete("parent carries on")],
        task_executor=[shell(f"echo {i}") for i in range(20)],
    )
    stream = orchestrator(tmp_path, model, config=config).run_with_new_request("go")
    executor = EventStore().load(stream.events_list[2].data["agent_id"])
    stop = executor.events_list[-1].data
    assert (stop["reason"], stop["limit"]) == ("model_call_limit", 3)
    assert model.models["task_executor"].calls == 3
    assert stream.events_list[-1].type == "task_completion", "the parent's budget is not used up"


def test_the_parent_gets_a_turn_when_a_child_fails_while_another_still_runs(tmp_path):
    token = sleep_token()
    seen = {}

    def react(prompt):  # the orchestrator's turn after the failing child returned
        seen["slow_running"] = running_soon(token)
        seen["prompt"] = prompt
        return reply({"action_type": "HELP_NEEDED", "content": "the database child is blocked; stopping"})

    def executor(prompt):
        shown = history(prompt)
        if "task FAILS" not in shown:
            return shell(f"touch slow.started; sleep {token}")
        if "slow.started" not in shown:
            return shell("while [ ! -e slow.started ]; do sleep 0.05; done; sleep 0.2")
        return reply({"action_type": "HELP_NEEDED", "content": "no database credentials"})

    model = RoutedModel(
        orchestrator=[reply(child("NEW_CHILD_AGENT TASK_EXECUTOR", "task SLOW"),
                            child("NEW_CHILD_AGENT TASK_EXECUTOR", "task FAILS")), react],
        task_executor=[executor] * 3,
    )
    started = time.monotonic()
    stream = orchestrator(tmp_path, model).run_with_new_request("go")

    assert time.monotonic() - started < 20, "the parent did not wait for the slow child"
    assert seen["slow_running"], "the parent's turn came while the slow child was still running"
    slow = stream.events_list[1].data["agent_id"]
    assert f"no database credentials\n\nStill running: TASK_EXECUTOR {slow} (task SLOW)." in seen["prompt"]
    assert types(stream) == ["new_request", "new_child_agent", "child_agent_running", "new_child_agent",
                             "child_agent_running", "child_agent_agent_requested_help",
                             "child_agent_task_interrupted", "agent_requested_help"]
    stopped = EventStore().load(slow)
    assert stopped.events_list[-1].type == "task_interrupted"
    assert "the parent agent ended its turn" in stopped.events_list[-1].content
    assert not pids_running(token)


def test_a_childs_prompt_names_the_siblings_working_in_its_folder_while_they_do(tmp_path):
    seen = {"A": [], "B": []}
    b_asked = threading.Event()

    def executor(prompt):
        who = "A" if "CONTENT:\ntask A" in prompt else "B"
        seen[who].append(prompt)
        if who == "B":
            b_asked.set()
            return complete("B done")
        if len(seen["A"]) == 1:
            assert b_asked.wait(30), "B never asked its model"
            return shell("true")
        return complete("A done")

    model = RoutedModel(
        orchestrator=[reply(child("NEW_CHILD_AGENT TASK_EXECUTOR", "task A\nin two lines"),
                            child("NEW_CHILD_AGENT TASK_EXECUTOR", "task B")), wait(), complete("both")],
        task_executor=[executor] * 4,
    )
    stream = orchestrator(tmp_path, model).run_with_new_request("go")
    first, second = (e.data["agent_id"] for e in stream.events_list if e.type == "new_child_agent")

    heading = "\n# Now\n\n## Other agents in this folder\n\n"
    assert heading + ("Your parent's other child agents work in this working directory at the same time as you: "
                      f"TASK_EXECUTOR {first} (task A).") in seen["B"][0]
    assert f"TASK_EXECUTOR {first}" not in seen["B"][0].split("# Now")[0], "only in the tail: the prefix is stable"


def test_at_most_n_children_run_at_a_time_across_replies(tmp_path):
    config = load_config(overrides={"agents": {"orchestrator": {"max_concurrent_children": 1}}})

    def timed(prompt):
        name = "first" if "task FIRST" in history(prompt) else "second"
        if f"{name}.end" in history(prompt):
            return complete(f"{name} done")
        return shell(f"date +%s.%N > {name}.start; sleep 0.3; date +%s.%N > {name}.end")

    model = RoutedModel(
        orchestrator=[reply(child("NEW_CHILD_AGENT TASK_EXECUTOR", "task FIRST"),
                            child("NEW_CHILD_AGENT TASK_EXECUTOR", "task SECOND")), wait(), complete("both")],
        task_executor=[timed] * 4,
    )
    stream = orchestrator(tmp_path, model, config=config).run_with_new_request("go")

    first_end = float((tmp_path / "first.end").read_text())
    assert float((tmp_path / "second.start").read_text()) >= first_end, "the second child waited for a free place"
    assert types(stream) == ["new_request", "new_child_agent", "child_agent_running", "new_child_agent",
                             "queued_child_agent", "child_agent_task_completion", "child_agent_running", "action",
                             "child_agent_task_completion", "task_completion"]
    second = stream.events_list[3].data["agent_id"]
    assert stream.events_list[5].content.endswith(f"Waiting to start: TASK_EXECUTOR {second} (task SECOND).")
    guide = model.models["orchestrator"].prompts[0].split("## CALL_CHILD_AGENT")[1].split("\n## ")[0]
    assert "at most 1 of your children run at a time (counting those\nstarted earlier), and more are queued" in guide
    assert not any("# Now" in prompt for prompt in model.models["task_executor"].prompts), "no sibling works with it"


def test_waiting_with_no_child_running_and_resuming_a_running_child_are_refused(tmp_path):
    holder = {}

    def resume_running(prompt):
        holder["id"] = re.search(r"Child agent TASK_EXECUTOR (\w{12}) is running\.", prompt).group(1)
        return reply(child(f"RESUME_CHILD_AGENT {holder['id']}", "do more"))

    def executor(prompt):
        shown = history(prompt)
        pause = "sleep 2" if "task LONG" in shown else "true"
        return shell(pause) if f"COMMAND: {pause}" not in shown else complete("done")

    model = RoutedModel(
        orchestrator=[wait(), reply(child("NEW_CHILD_AGENT TASK_EXECUTOR", "task LONG"),
                                    child("NEW_CHILD_AGENT TASK_EXECUTOR", "task SHORT")),
                      resume_running, wait(), complete("done")],
        task_executor=[executor] * 4,
    )
    stream = orchestrator(tmp_path, model).run_with_new_request("go")

    errors = [e.data["error"] for e in stream.events_list if e.data.get("error")]
    assert len(errors) == 2 and "no child agent is running, so there is nothing to wait for" in errors[0]
    assert errors[1].startswith(f"child {holder['id']} has not returned yet")
    assert types(stream)[-3:] == ["action", "child_agent_task_completion", "task_completion"]


def test_a_child_is_told_that_its_final_report_goes_to_its_parent(tmp_path):
    model = RoutedModel(orchestrator=[reply(child("NEW_CHILD_AGENT TASK_EXECUTOR", "hi")), complete("fin")],
                        task_executor=[complete("child says hi")])
    orchestrator(tmp_path, model).run_with_new_request("go")

    child_prompt = model.models["task_executor"].prompts[0]
    parent_prompt = model.models["orchestrator"].prompts[0]
    assert "A parent agent started you" in child_prompt and "A parent agent started you" not in parent_prompt
    assert "the content of your final action (TASK_COMPLETE or HELP_NEEDED) is all it reads of your work" in child_prompt
    assert "`content` (string, required, Markdown) tells your parent agent what you did" in child_prompt
    assert "`content` (string, required, Markdown) tells the user" in parent_prompt


@pytest.mark.sandbox
@pytest.mark.parametrize("safety", [{"approval": "ask"}, {"sandbox": "off", "approval": "ask"}])
def test_the_orchestrators_commands_read_but_never_write_and_never_ask(tmp_path, safety):
    (tmp_path / "notes.txt").write_text("a child wrote this\n")
    asked = []
    model = RoutedModel(orchestrator=[
        shell("cat notes.txt"),
        shell("echo changed > notes.txt"),
        reply({"action_type": "RUN_SHELL_CMD", "command": "touch made.txt", "escalate": "I must write it"}),
        complete("checked")])
    agent = orchestrator(tmp_path, model, config=load_config(overrides={"safety": safety}),
                         approval=lambda request: asked.append(request) or "allow")
    stream = agent.run_with_new_request("check the notes")

    read, write, escalated = [e for e in stream.events_list if e.type == "action"]
    assert (read.data["exit_code"], read.data["stdout"]) == (0, "a child wrote this\n")
    assert read.data["sandbox"] == "read-only" == write.data["sandbox"] == escalated.data["sandbox"]
    assert write.data["exit_code"] != 0 and "Read-only file system" in write.data["stderr"]
    assert "SANDBOX: read-only file system — the read-only sandbox lets commands write only to a private /tmp" \
           in write.content
    assert escalated.data["exit_code"] != 0 and not escalated.data["escalated"]
    assert (tmp_path / "notes.txt").read_text() == "a child wrote this\n" and not (tmp_path / "made.txt").exists()
    assert asked == [] and not [e for e in stream.events_list if e.type.startswith("approval")]
    assert not [e for e in (read, write, escalated) if "checkpoint" in e.data], "a read-only command needs none"
    prompt = model.models["orchestrator"].prompts[0]
    assert "You do not edit files: child agents make every change. Your commands run in a read-only sandbox" in prompt
    assert "check your children's work yourself\nrather than start a child to check it" in prompt
    assert "- Sandbox: commands can write only to a private /tmp" in prompt
    assert "escalate" not in prompt and ".git is read-only" not in prompt


def test_where_no_sandbox_can_run_the_orchestrator_has_no_shell(tmp_path):
    config = load_config(overrides={"safety": {"bwrap": str(tmp_path / "no-bwrap-here"), "approval": "auto"}})
    model = RoutedModel(orchestrator=[shell("ls"), complete("gave up")])
    stream = orchestrator(tmp_path, model, config=config).run_with_new_request("look")

    prompt = model.models["orchestrator"].prompts[0].replace(str(tmp_path), "WORK")
    assert "RUN_SHELL_CMD" not in prompt and not re.search(r"shell|sandbox|command exiting", prompt)
    assert "You do not run commands or edit files yourself: child agents do." in prompt
    assert "RUN_SHELL_CMD" in model.models["orchestrator"].prompts[1].split("# Now")[1], "the reply is refused"
    assert [e.type for e in stream.events_list] == ["new_request", "reply_rejected", "task_completion"]


def test_the_plan_survives_a_wait_a_report_names_its_task_and_a_queued_child_is_shown(tmp_path):
    config = load_config(overrides={"agents": {"orchestrator": {"max_concurrent_children": 1}}})
    plan = {"analysis": "", "reasoning": "PLAN v2: FIRST is done; SECOND runs; then finish",
            "actions": [{"action_type": "WAIT_FOR_CHILDREN"}]}
    model = RoutedModel(
        orchestrator=[reply(child("NEW_CHILD_AGENT TASK_EXECUTOR", "write FIRST.txt\nwith the first part"),
                            child("NEW_CHILD_AGENT TASK_EXECUTOR", "write SECOND.txt")), plan, complete("both")],
        task_executor=[complete("wrote it"), complete("wrote it too")],
    )
    stream = orchestrator(tmp_path, model, config=config).run_with_new_request("write both")

    first, second = (e.data["agent_id"] for e in stream.events_list if e.type == "new_child_agent")
    after_first, after_second = model.models["orchestrator"].prompts[1:3]
    history = after_first.split("# History")[1]
    assert f"Child agent TASK_EXECUTOR {second} is queued: it starts when one of your 1 running children returns." \
           in history
    assert history.index(f"TASK_EXECUTOR {second} is queued") < history.index(f"TASK_EXECUTOR {first} (write FIRST")
    assert re.search(rf"Child agent TASK_EXECUTOR {first} \(write FIRST.txt\) returned \(task_completion\) after "
                     r"\d+\.\d\d? s:\nwrote it", history), "the report says how long the child took"
    later = after_second.split("# History")[1]
    assert re.search(r"TYPE: WAIT_FOR_CHILDREN\nREASONING:\nPLAN v2: FIRST is done; SECOND runs; then finish\n"
                     rf"CONTENT:\nWaiting for the next child agent to return: TASK_EXECUTOR {second} \(write SECOND.txt\)\.",
                     later)
    assert f"Child agent TASK_EXECUTOR {second} (write SECOND.txt) returned (task_completion)" in later


@pytest.mark.sandbox
def test_each_brief_is_shown_once_and_a_long_report_is_bounded_with_the_whole_a_file_away(tmp_path):
    briefs = [f"Brief {n}: " + f"check part {n} of the module and report what you find. " * 30 for n in (1, 2)]
    report = "Findings:\n" + "".join(f"- finding {n}: the helper behaves as its docstring says\n" for n in range(400))

    def read_the_report(prompt):
        path = re.search(r"FULL REPORT: \d+ characters, in (\S+)\.", prompt).group(1)
        return shell(f"wc -c < '{path}'; tail -n 1 '{path}'")

    model = RoutedModel(
        orchestrator=[reply(*(child("NEW_CHILD_AGENT TASK_EXECUTOR", brief) for brief in briefs)), wait(),
                      read_the_report, complete("both parts checked")],
        task_executor=[complete(report), complete("part 2 is fine")])
    config = load_config(overrides={"agents": {"orchestrator": {"max_concurrent_children": 1}}})
    stream = orchestrator(tmp_path, model, config=config).run_with_new_request("check both parts")

    prompts = model.models["orchestrator"].prompts
    assert all(prompt.count(brief) == 1 for prompt in prompts[1:] for brief in briefs), "a brief appears once"
    returned = next(e for e in stream.events_list if e.type == "child_agent_task_completion")
    cap = config.agent("orchestrator").shell_output_cap
    assert len(returned.content) < cap + 600 < len(report), "bounded like a command's output"
    assert "finding 0:" in returned.content and "finding 399:" in returned.content and "finding 200:" not in prompts[-1]
    path = returned.data["report_path"]
    assert open(path).read() == report
    read = [e for e in stream.events_list if e.type == "action"][-1]
    assert read.data["sandbox"] == "read-only" and read.data["stdout"] == f"{len(report)}\n- finding 399: the " \
                                                                          "helper behaves as its docstring says\n"
