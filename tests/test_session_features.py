"""The session's everyday features (issue 40's "Missing" list), driven through a real pseudo-terminal and read as a
person reads it (pyte)."""

import json
import os
import re

import pytest
from terminal_screen import ENTER, ESC
from test_cli import complete, only_stream, scripted, types
from test_session import BOX, finished, sessions  # noqa: F401  (the fixture)

from anges.store.event_store import EventStore


def test_a_bang_command_runs_in_the_sandbox_shows_its_output_and_the_model_reads_it(openai_server, tmp_path,
                                                                                      sessions):  # noqa: F811
    openai_server.enqueue_text(json.dumps(complete("you made made.txt")))
    term = sessions("--model", "openai:gpt-test", cwd=tmp_path, env={**os.environ, **openai_server.env})
    term.send("!echo from-you > made.txt; echo printed-$((6*7))\r")
    term.wait_for("the agent reads it")
    text = term.text()
    assert "! echo from-you > made.txt; echo printed-$((6*7))" in text and "printed-42" in text
    assert (tmp_path / "made.txt").read_text() == "from-you\n", "it ran in the working directory"
    term.send("what did I run?\r")
    finished(term)
    prompt = json.dumps(openai_server.requests[-1].body)
    assert "USER_COMMAND" in prompt and "printed-42" in prompt and "not one of your actions" in prompt
    stream = only_stream()
    assert types(stream) == ["user_command", "follow_up_request", "task_completion"]
    facts = stream.events_list[0].data
    assert facts["by"] == "user" and facts["exit_code"] == 0 and facts["approval"]["by"] == "user"


def test_a_bang_command_a_deny_rule_forbids_does_not_run(tmp_path, sessions):  # noqa: F811
    (tmp_path / "rules.yaml").write_text(
        "safety:\n  rules:\n    - {action: RUN_SHELL_CMD, match: 'touch *', decision: deny, reason: no touching}\n")
    term = sessions("--config", "rules.yaml", "--model", scripted(tmp_path, complete()), cwd=tmp_path)
    term.send("!touch forbidden.txt\r")
    term.wait_for("not run: no touching")
    assert not (tmp_path / "forbidden.txt").exists()
    assert EventStore().list() == [], "nothing ran, nothing is recorded"


@pytest.mark.sandbox
def test_a_bang_command_in_the_sandbox_cannot_write_outside_the_working_directory(tmp_path, sessions):  # noqa: F811
    outside = tmp_path / "outside"
    work = tmp_path / "work"
    outside.mkdir()
    work.mkdir()
    term = sessions("--model", scripted(work, complete()), cwd=work)
    term.send(f"!echo in > inside.txt; echo x > {outside}/escaped.txt\r")
    term.wait_for("the agent reads it")
    assert not (outside / "escaped.txt").exists() and (work / "inside.txt").exists()
    facts = only_stream().events_list[0].data
    assert facts["sandbox"] == "workspace" and facts["exit_code"] != 0


def test_resume_picker_shows_age_and_folder_and_filters(tmp_path, sessions):  # noqa: F811
    for folder, title in (("alpha", "alpha task"), ("beta", "beta task")):
        (tmp_path / folder).mkdir()
        model = scripted(tmp_path, complete("done"), name=f"{folder}.json")
        term = sessions("-i", "-q", title, "--model", model, cwd=tmp_path / folder)
        finished(term)
        term.close()
    term = sessions("--model", scripted(tmp_path, complete("go on"), name="next.json"), cwd=tmp_path)
    term.send("/resume\r")
    screen = "\n".join(term.wait_for("resume which run?", on_screen=True))
    picker = screen[screen.index("resume which run?"):]
    assert re.search(r"just now\s+\S*alpha\s+completed\s+alpha task", picker), picker
    term.send("alph")
    term.wait_until(lambda: "beta task" not in "\n".join(term.display()), what="the filter")
    term.send(ENTER)
    alpha = next(info for info in EventStore().list() if info.title == "alpha task")
    term.wait_for(f"resumed {alpha.uid}")


def test_model_picker_changes_the_model(openai_server, tmp_path, sessions):  # noqa: F811
    openai_server.enqueue_text(json.dumps(complete("from the chosen model")))
    (tmp_path / "models.yaml").write_text("models:\n  mine:\n    provider: openai\n    model: gpt-mine\n")
    term = sessions("--config", "models.yaml", "--model", scripted(tmp_path, complete()), cwd=tmp_path,
                    env={**os.environ, **openai_server.env})
    term.send("/model\r")
    term.wait_for("which model?", on_screen=True)
    term.send("mine")
    term.wait_until(lambda: "› mine" in "\n".join(term.display()), what="the filtered choice")
    term.send(ENTER)
    term.wait_for("model: mine:gpt-mine")
    term.send("go\r")
    term.wait_for("from the chosen model")
    assert openai_server.requests[-1].body["model"] == "gpt-mine"


def test_esc_stops_a_bang_command_at_once_and_it_is_recorded_as_stopped(tmp_path, sessions):  # noqa: F811
    term = sessions("--model", scripted(tmp_path, complete()), cwd=tmp_path)
    term.send("!echo started; sleep 60; echo never\r")
    term.wait_until(lambda: "started" in term.text(), what="the command's first output")
    term.send(ESC)
    term.wait_for("the agent reads it")
    facts = only_stream().events_list[0].data
    assert facts["interrupted"] and "never" not in facts["stdout"] and facts["duration"] < 30
