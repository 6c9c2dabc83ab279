"""The completion check: a TASK_COMPLETE held once when the run shows a cause, named in the next prompt; a clean run
that pays nothing; `always` and `off`; and TASK_COMPLETE with `only_if_succeeded`. Real commands, a scripted model."""

import re

import pytest
from helpers import pids_running, sleep_token
from test_agent import make_agent, reply, shell, types

from anges.agents.completion import is_check
from anges.config.loading import load_config
from anges.exceptions import ConfigError, FormatError
from anges.prompt.parsing import parse_reply
from anges.registry import actions
from anges.store.event_store import EventStore


def complete(content="done", **extra):
    return reply({"action_type": "TASK_COMPLETE", "content": content, **extra})


def finish(content="done", **extra):
    return {"action_type": "TASK_COMPLETE", "content": content, **extra}


def edit(path, content):
    return {"action_type": "EDIT_FILE", "directive_line": f"NEW_FILE {path}", "content": content}


def plan(*steps):
    return {"action_type": "UPDATE_PLAN", "plan": [{"step": step, "status": status} for step, status in steps]}


def checked(mode):
    return load_config(overrides={"agents": {"common": {"completion_check": mode}}})


def history_after(prompt):
    """The part of a prompt after its fixed part."""
    return prompt.split("\n# History\n", 1)[1]


def held(stream):
    return [event for event in stream.events_list if event.type == "completion_held"]


# -- each cause holds a completion once, with the evidence in the next prompt --------------------------------------


def test_a_background_job_still_running_holds_the_completion_once(tmp_path):
    token = sleep_token()
    agent, model = make_agent(tmp_path, [reply(shell(f"sleep {token}", run_in_background=True)),
                                         complete("served"), complete("served; the job ends with the run")])
    stream = agent.run_with_new_request("start a server, then stop it")

    assert types(stream) == ["new_request", "action", "completion_held", "task_completion"]
    pid = stream.events_list[1].data["pid"]
    [event] = held(stream)
    assert event.data["causes"] == [{"kind": "running", "text": f"pid {pid} `sleep {token}` is still running "
                                                                "(the end of the run ends it)"}]
    assert event.data["answer"] == "served" and event.data["check"] == "evidence"
    evidence = history_after(model.prompts[2])
    assert f"TYPE: COMPLETION_HELD\nCONTENT:\nYour TASK_COMPLETE was not accepted yet: pid {pid} `sleep {token}` " \
           "is still running" in evidence
    assert "send TASK_COMPLETE again and say why it is fine: the next one is accepted" in evidence
    assert stream.events_list[-1].content == "served; the job ends with the run", "the second one is accepted"
    assert not pids_running(token), "the run still ends its jobs"


def test_open_plan_steps_hold_the_completion(tmp_path):
    agent, model = make_agent(tmp_path, [
        reply(plan(("Write the parser", "completed"), ("Test the parser", "in_progress"), ("Update the docs", "pending"))),
        complete(), complete("the docs need no change")])
    stream = agent.run_with_new_request("add a parser")

    assert types(stream) == ["new_request", "plan_updated", "completion_held", "task_completion"]
    cause = held(stream)[0].data["causes"]
    assert cause == [{"kind": "plan", "text": "the plan has 2 open steps: Test the parser; Update the docs"}]
    assert "not accepted yet: the plan has 2 open steps: Test the parser; Update the docs." in model.prompts[2]


def test_a_failed_check_with_an_edit_after_it_holds_the_completion_and_a_passing_one_does_not(tmp_path):
    (tmp_path / "run_tests.sh").write_text("#!/bin/sh\n[ -e fixed ] || { echo 1 failed; exit 1; }\necho 3 passed\n")
    (tmp_path / "run_tests.sh").chmod(0o755)
    agent, model = make_agent(tmp_path, [reply(shell("./run_tests.sh")), reply(edit("fixed", "yes\n")), complete(),
                                         reply(shell("./run_tests.sh")), complete("fixed; the tests pass")])
    stream = agent.run_with_new_request("make the tests pass")

    assert types(stream) == ["new_request", "action", "edit_file", "completion_held", "action", "task_completion"]
    assert held(stream)[0].data["causes"] == [{"kind": "check", "text": "the last check, `./run_tests.sh`, failed "
                                              "(exit code 1), and `fixed` changed after it with no passing check since"}]
    assert "COMPLETION_HELD" in model.prompts[3] and model.calls == 5


def test_a_failed_action_of_the_same_reply_holds_a_completion_sent_with_it(tmp_path):
    agent, model = make_agent(tmp_path, [reply(shell("false"), finish("all good")), complete("checked: fine")])
    stream = agent.run_with_new_request("check")

    assert types(stream) == ["new_request", "action", "completion_held", "task_completion"]
    assert held(stream)[0].data["causes"] == [{"kind": "reply", "text": "in this reply, `false` exited with code 1"}]


def test_a_completion_is_held_once_per_request_however_many_causes_remain(tmp_path):
    token = sleep_token()
    agent, model = make_agent(tmp_path, [
        reply(shell(f"sleep {token}", run_in_background=True), plan(("Serve", "in_progress"), ("Stop", "pending"))),
        complete(), complete("still serving, on purpose"),
        complete("the second request"), complete("held again: a new request is checked anew")])
    first = agent.run_with_new_request("serve")
    assert [e.type for e in first.events_list].count("completion_held") == 1
    assert [c["kind"] for c in held(first)[0].data["causes"]] == ["running", "plan"]

    second = agent.run_with_new_request("and now?")
    assert types(second)[-3:] == ["follow_up_request", "completion_held", "task_completion"]
    assert [c["kind"] for c in held(second)[1].data["causes"]] == ["plan"], "the open plan carried over"


# -- a clean run pays nothing; always; off ------------------------------------------------------------------------


def test_a_clean_run_pays_no_extra_call_and_no_prompt_text(tmp_path):
    script = [reply(edit("app.py", "print('ok')\n"), shell("python3 app.py")), complete("it prints ok")]
    prompts = {}
    for mode in ("evidence", "off"):
        work = tmp_path / mode
        work.mkdir()
        agent, model = make_agent(work, list(script), config=checked(mode))
        stream = agent.run_with_new_request("write app.py")
        assert types(stream) == ["new_request", "edit_file", "action", "task_completion"]
        assert model.calls == 2
        prompts[mode] = [re.sub(r"after [\d.]+ s", "after N s", prompt.replace(str(work), "WORK"))
                         for prompt in model.prompts]
    assert prompts["evidence"] == prompts["off"], "the check adds nothing to any prompt"


def test_always_holds_the_first_completion_of_each_request_for_one_check(tmp_path):
    agent, model = make_agent(tmp_path, [complete("first"), complete("checked again")], config=checked("always"))
    stream = agent.run_with_new_request("a one-step task")

    assert types(stream) == ["new_request", "completion_held", "task_completion"]
    facts = held(stream)[0].data
    assert (facts["check"], facts["causes"], facts["answer"]) == ("always", [], "first")
    assert "check it once more against the request: every part done, and verified" in model.prompts[1]


def test_off_accepts_the_first_completion_whatever_runs(tmp_path):
    token = sleep_token()
    agent, model = make_agent(tmp_path, [reply(shell(f"sleep {token}", run_in_background=True)), complete("bye")],
                              config=checked("off"))
    stream = agent.run_with_new_request("serve")
    assert types(stream) == ["new_request", "action", "task_completion"]


def test_the_setting_is_per_agent_type_and_reads_unquoted_off(tmp_path, monkeypatch):
    path = tmp_path / "config.yaml"
    path.write_text("agents:\n  common:\n    completion_check: always\n  task_executor:\n    completion_check: off\n")
    config = load_config(path)
    assert config.agent("default").completion_check == "always"
    assert config.agent("task_executor").completion_check == "off", "YAML reads an unquoted off as false"
    path.write_text("agents:\n  common:\n    completion_check: sometimes\n")
    with pytest.raises(ConfigError, match="completion_check"):
        load_config(path)


# -- only_if_succeeded ---------------------------------------------------------------------------------------------


def test_a_conditional_completion_after_passing_actions_saves_a_call(tmp_path):
    agent, model = make_agent(tmp_path, [reply(edit("app.py", "print('ok')\n"), shell("python3 app.py"),
                                               finish("wrote app.py; it prints ok", only_if_succeeded=True))])
    stream = agent.run_with_new_request("write app.py")

    assert types(stream) == ["new_request", "edit_file", "action", "task_completion"]
    assert model.calls == 1 and stream.events_list[-1].content == "wrote app.py; it prints ok"


def test_a_conditional_completion_after_a_failed_action_is_dropped_with_a_clear_result(tmp_path):
    agent, model = make_agent(tmp_path, [
        reply(edit("app.py", "print(oops\n"), shell("python3 app.py"), finish("done", only_if_succeeded=True)),
        reply(edit("app.py", "print('ok')\n"), shell("python3 app.py"), finish("fixed", only_if_succeeded=True))],
        config=checked("off"))
    stream = agent.run_with_new_request("write app.py")

    assert types(stream) == ["new_request", "edit_file", "action", "completion_dropped", "edit_file", "action",
                             "task_completion"]
    dropped = stream.events_list[3]
    assert dropped.data["causes"] == [{"kind": "reply", "text": "`python3 app.py` exited with code 1"}]
    history = history_after(model.prompts[1])
    assert re.search(r"TYPE: RUN_SHELL_CMD\nCONTENT:\nCOMMAND: python3 app.py\nEXIT CODE: 1 after .*SyntaxError",
                     history, re.S), "the results come back as usual"
    assert history.endswith("TYPE: COMPLETION_DROPPED\nCONTENT:\nYour TASK_COMPLETE was dropped (only_if_succeeded): "
                            "`python3 app.py` exited with code 1. The results are above; go on from them.\n")


def test_a_conditional_completion_that_passes_still_meets_the_completion_check(tmp_path):
    agent, model = make_agent(tmp_path, [
        reply(plan(("Build", "completed"), ("Document", "pending")), shell("true"),
              finish("built", only_if_succeeded=True)),
        complete("documented elsewhere")])
    stream = agent.run_with_new_request("build it")
    assert types(stream) == ["new_request", "plan_updated", "action", "completion_held", "task_completion"]


def test_a_completion_must_come_last_and_may_follow_other_actions():
    registry = {name: actions.get(name)() for name in ("RUN_SHELL_CMD", "TASK_COMPLETE", "HELP_NEEDED")}
    text = '{"actions": [%s]}'
    command = '{"action_type": "RUN_SHELL_CMD", "command": "true"}'
    done = '{"action_type": "TASK_COMPLETE", "content": "ok", "only_if_succeeded": true}'
    assert [a["action_type"] for a in parse_reply(text % f"{command}, {done}", registry).actions] == [
        "RUN_SHELL_CMD", "TASK_COMPLETE"]
    with pytest.raises(FormatError, match="TASK_COMPLETE must be the last action of its reply"):
        parse_reply(text % f"{done}, {command}", registry)
    with pytest.raises(FormatError, match="HELP_NEEDED must be the only action"):
        parse_reply(text % f'{command}, {{"action_type": "HELP_NEEDED", "content": "?"}}', registry)


def test_the_prompt_says_when_to_use_only_if_succeeded_and_what_comes_back(tmp_path):
    agent, model = make_agent(tmp_path, [complete()])
    agent.run_with_new_request("hi")
    guide = model.prompts[0].split("## TASK_COMPLETE")[1].split("\n## ")[0]
    assert "after actions whose output\nyou need not see" in guide
    assert "takes effect if all succeed (exit 0, edits applied), else you get\ntheir results" in guide


# -- what a check command is ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [
    "pytest -q", "python -m pytest tests/test_x.py", "cd src && npm test", "make", "make check", "cargo clippy",
    "uv run mypy .", "./run_tests.sh", "bash tests/run.sh", "timeout 60 go test ./...", "npm run lint -- --fix",
    "CI=1 npx eslint .", "python3 tests/test_parser.py", "ruff check anges | tail -3"])
def test_checks_are_recognised(command):
    assert is_check(command)


@pytest.mark.parametrize("command", [
    "ls tests/", "cat tests/test_x.py", "python3 app.py", "npm install", "cargo run", "go run main.go",
    "grep -rn test .", "echo make", "make install", "git commit -m 'fix tests'"])
def test_other_commands_are_not_checks(command):
    assert not is_check(command)


def test_the_held_completion_is_in_the_record(tmp_path):
    agent, _ = make_agent(tmp_path, [reply(shell("false"), finish("x")), complete("y")])
    stream = agent.run_with_new_request("go")
    loaded = EventStore().load(stream.uid)
    assert [e.type for e in loaded.events_list] == types(stream)
    assert loaded.events_list[2].message == "completion held: in this reply, `false` exited with code 1"
    assert loaded.events_list[2].data["answer"] == "x"


def test_a_long_list_of_causes_is_cut_to_a_few_and_a_count(tmp_path):
    failing = [shell(f"exit {n}") for n in range(1, 9)]
    steps = [(f"step {n}", "pending") for n in range(9)]
    agent, _ = make_agent(tmp_path, [reply(plan(*steps)), reply(*failing, finish("x")), complete("y")])
    stream = agent.run_with_new_request("go")
    causes = [cause["text"] for cause in held(stream)[0].data["causes"]]
    assert causes[0] == "the plan has 9 open steps: step 0; step 1; step 2; step 3; step 4 (and 4 more)"
    assert causes[1:] == [f"in this reply, `exit {n}` exited with code {n}" for n in range(1, 6)] + [
        "and 3 more actions of this reply failed"]


def test_what_counts_as_a_failed_action():
    from anges.agents.completion import failure
    from anges.store.events import Event

    api = {"action_type": "CALL_API", "api": "pets", "operation": "getPet", "method": "GET", "url": "http://h/pets/1"}
    assert failure(Event("action", data={**api, "status": 200, "reason": "OK"})) == ""
    assert failure(Event("action", data={**api, "status": 404, "reason": "Not Found"})) == (
        "CALL_API pets.getPet: 404 Not Found")
    assert failure(Event("action", data={**api, "error": "timeout"})) == "CALL_API pets.getPet: no answer (timed out)"
    assert failure(Event("new_child_agent", data={"agent_id": "k3Jd9aQw2LxZ"})) == (
        "child agent k3Jd9aQw2LxZ was started: its report is not in yet")
    assert failure(Event("plan_updated", data={"plan": []})) == ""
    assert failure(Event("action", data={"action_type": "UPDATE_PLAN", "error": "step 1 is empty"})) == (
        "UPDATE_PLAN failed: step 1 is empty")
