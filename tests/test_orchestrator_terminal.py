"""An orchestrator's run on a real pseudo-terminal (read through pyte), its model the real OpenAI SDK against a
wire server that answers each agent by its request: what the transcript and the status line say while children
work."""

import json
import os
import re
import time

from terminal_screen import Terminal
from wire_servers import prompt_of


def reply(*actions, reasoning):
    return json.dumps({"analysis": "", "reasoning": reasoning, "actions": list(actions)})


def delegate(task):
    return {"action_type": "CALL_CHILD_AGENT", "directive": "NEW_CHILD_AGENT TASK_EXECUTOR", "agent_input": task}


def shell(command):
    return {"action_type": "RUN_SHELL_CMD", "command": command}


def done(text):
    return {"action_type": "TASK_COMPLETE", "content": text}


class Agents:
    """Answers each agent of the tree from its own script: the orchestrator's, or a child's by its request."""

    def __init__(self, scripts, before=None):
        self.scripts = {who: list(replies) for who, replies in scripts.items()}
        self.before = before or {}
        """Per agent and reply number: a function to wait on before that reply is given."""
        self.calls = {who: 0 for who in scripts}

    def __call__(self, request):
        prompt = prompt_of(request)
        if "You are anges' orchestrator" in prompt:
            who = "orchestrator"
        else:
            who = next((task for task in self.scripts if f"CONTENT:\n{task}" in prompt), None)
            if who is None:
                return "a title"
        number = self.calls[who]
        self.calls[who] += 1
        wait = self.before.get((who, number))
        if wait is not None:
            wait()
        return self.scripts[who][number]


def run_on_terminal(openai_server, tmp_path, agents, concurrent):
    home = os.environ["ANGES_HOME"]
    with open(os.path.join(home, "config.yaml"), "a") as config:
        config.write(f"\nagents:\n  orchestrator:\n    max_concurrent_children: {concurrent}\n")
    openai_server.replier = agents
    env = {**os.environ, **openai_server.env}
    return Terminal(["-q", "write two files", "--agent", "orchestrator", "--model", "openai:gpt-test"], cwd=tmp_path,
                    env=env, columns=120, rows=40)


def child_ids(lines, verb):
    return [match.group(1) for line in lines if (match := re.match(rf"⇢ {verb} task_executor (\S+) ", line))]


def test_a_queued_child_reads_queued_each_request_shows_once_and_every_childs_line_is_tagged(openai_server,
                                                                                           tmp_path):
    agents = Agents({
        "orchestrator": [reply(delegate("Write a.txt holding A"), delegate("Write b.txt holding B"),
                               reasoning="Delegate both files."),
                         reply({"action_type": "WAIT_FOR_CHILDREN"}, reasoning="A is done; B next."),
                         reply(done("both written"), reasoning="All done.")],
        "Write a.txt holding A": [reply(shell("echo A > a.txt"), reasoning="Writing a.txt, says child A."),
                                  reply(done("wrote a.txt"), reasoning="A is finished.")],
        "Write b.txt holding B": [reply(shell("echo B > b.txt"), reasoning="Writing b.txt, says child B."),
                                  reply(done("wrote b.txt"), reasoning="B is finished.")],
    })
    term = run_on_terminal(openai_server, tmp_path, agents, concurrent=1)
    try:
        assert term.wait(60) == 0
    finally:
        term.close()
    lines = [line for line in term.lines() if line.strip()]
    [first] = child_ids(lines, "starts")
    [second] = child_ids(lines, "queues")
    assert not any("is queued" in line or "queued_child_agent" in line for line in lines), "queued said twice"
    assert not any("▶ request" in line for line in lines), "a child's request is drawn again under its start"
    assert sum("Write a.txt holding A" in line for line in lines) == 1
    for who, words in ((first, "Writing a.txt, says child A."), (first, "A is finished."),
                       (second, "Writing b.txt, says child B."), (second, "B is finished.")):
        assert f"  [task_executor {who}] {words}" in lines, f"{words!r} without its child's tag"
    assert f"  [task_executor {first}] $ echo A > a.txt" in lines


def test_while_the_orchestrator_waits_the_status_line_says_what_its_child_does(openai_server, tmp_path):
    started, go = tmp_path / "started", tmp_path / "go"
    long_command = f"touch {started}; while [ ! -e {go} ]; do sleep 0.05; done"

    def when_the_long_command_runs():
        deadline = time.monotonic() + 30
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.02)

    agents = Agents({
        "orchestrator": [reply(delegate("Wait for go"), delegate("Say hi"), reasoning="Delegate."),
                         reply(shell("echo look"), reasoning="Hi was said; look around while the other works."),
                         reply({"action_type": "WAIT_FOR_CHILDREN"}, reasoning="Looked; wait for the other."),
                         reply(done("finished"), reasoning="Done.")],
        "Wait for go": [reply(shell(long_command), reasoning="Waiting."), reply(done("went"), reasoning="Went.")],
        "Say hi": [reply(shell("echo hi"), reasoning="Hi."), reply(done("said hi"), reasoning="Said.")],
    }, before={("orchestrator", 1): when_the_long_command_runs})
    term = run_on_terminal(openai_server, tmp_path, agents, concurrent=2)
    try:
        term.wait_until(lambda: "└ exit 0" in term.text().partition("$ echo look")[2], what="echo look to end")
        status = term.wait_until(lambda: any("running touch" in line for line in term.display()), timeout=10,
                                 what="the status line to name the child's command")
        assert not any("running echo look" in line for line in status[-5:]), "the finished command is still shown"
        go.touch()
        assert term.wait(60) == 0
    finally:
        term.close()
