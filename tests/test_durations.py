"""Each result says, briefly, how long it took (issue 39): a command's, read by the model; an older record keeps the
layout it had."""

import re

import pytest
from test_agent import make_agent, reply, shell

from anges.store.events import Event
from anges.store.results import ShellRun, took


@pytest.mark.parametrize(("seconds", "text"), [(0.0004, "0.01 s"), (0.2, "0.20 s"), (2.5, "2.50 s"), (9.996, "10.0 s"),
                                               (12.34, "12.3 s"),
                                               (59.96, "60.0 s"), (247, "4 min 7 s"), (3600, "60 min 0 s")])
def test_a_duration_reads_briefly(seconds, text):
    assert took(seconds) == text


def test_the_model_reads_how_long_a_command_took(tmp_path):
    agent, model = make_agent(tmp_path, [reply(shell("sleep 1.2; echo slept"), shell("exit 3")),
                                         reply({"action_type": "TASK_COMPLETE", "content": "done"})])
    stream = agent.run_with_new_request("sleep")

    first, second = (event.content for event in stream.events_list if event.type == "action")
    took = re.match(r"COMMAND: sleep 1.2; echo slept\nEXIT CODE: 0 after ([\d.]+) s\nSTDOUT:\nslept\n", first)
    assert took is not None, first
    assert float(took.group(1)) >= 1.2, "the time the command really took"
    assert re.match(r"COMMAND: exit 3\nEXIT CODE: 3 after [\d.]+ s\n", second), second
    assert first in model.prompts[1]


def test_a_result_recorded_before_durations_reads_as_it_did():
    data = {"command": "ls", "exit_code": 0, "stdout": "a\n", "stderr": "", "duration": 2.5, "result_format": 2}
    assert ShellRun.of(Event("action", data=data)).text() == "COMMAND: ls\nEXIT CODE: 0\nSTDOUT:\na\n"
    assert "EXIT CODE: 0 after 2.50 s" in ShellRun.of(Event("action", data={**data, "result_format": 3})).text()
