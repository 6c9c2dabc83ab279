"""A reply the agent rejects (and asks again for) leaves a record, and every view shows it the same way:
"reply rejected: … (asked again)" — the terminal (live too), `anges show`, exports, JSON lines, ACP, the web chat."""

import json
import os
import subprocess
import threading

import pytest
from acp_client import Editor, anges_acp, content_text, run
from terminal_screen import Terminal
from test_acp import answer, new_session, prompt
from test_cli import ANGES, complete, scripted
from test_web_browser import browser, expect, log_in, page, send, server  # noqa: F401 (fixtures)

from anges.models.scripted import ScriptedModel
from anges.store.event_store import EventStore

PLAN = "My plan: first PLAN_IT, then build the parser, then test it."
BAD = {"analysis": "", "reasoning": PLAN, "actions": [{"action_type": "PLAN_IT"}]}
SHOWN = 'reply rejected: actions[0] has unknown action_type "PLAN_IT" (asked again)'


def anges(*args, cwd):
    return subprocess.run([*ANGES, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False,
                          env=os.environ.copy())


def test_the_transcript_show_export_and_json_lines_say_the_reply_was_rejected(tmp_path):
    model = scripted(tmp_path, BAD, complete("built"))
    out = anges("-q", "build it", "--model", model, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert f"↻ {SHOWN}" in out.stderr.splitlines()
    [info] = EventStore().list()

    shown = anges("show", info.uid, cwd=tmp_path)
    assert f"↻ {SHOWN}" in shown.stdout.splitlines()
    markdown = anges("export", info.uid, "--format", "md", cwd=tmp_path)
    assert "Reply rejected" in markdown.stdout and SHOWN in markdown.stdout.splitlines()

    lines = anges("-q", "build it", "--model", scripted(tmp_path, BAD, complete("built"), name="again.json"),
                  "--output", "jsonl", cwd=tmp_path)
    events = [json.loads(line)["event"] for line in lines.stdout.splitlines() if '"type": "event"' in line]
    assert [e["type"] for e in events] == ["new_request", "reply_rejected", "task_completion"]
    assert events[1]["content"] == SHOWN and events[1]["data"]["reason"].startswith("actions[0] has unknown")


def test_the_live_screen_drops_the_rejected_replys_plan_while_the_model_is_asked_again(openai_server, tmp_path):
    release = threading.Event()
    openai_server.enqueue_text(json.dumps(BAD))
    fixed = json.dumps(complete("built"))
    openai_server.enqueue_text(fixed, chunks=[fixed[:1], fixed[1:]], pause=release)  # the second reply waits
    env = {**os.environ, **openai_server.env}
    term = Terminal(["-q", "build it", "--model", "openai:gpt-test"], cwd=tmp_path, env=env, columns=120)
    try:
        term.wait_for(SHOWN)
        assert openai_server.wait_for_requests(2)
        assert not any("My plan: first PLAN_IT" in line for line in term.display()), "the rejected plan stays"
        release.set()
        assert term.wait(30) == 0
    finally:
        term.close()
    assert sum(SHOWN in line for line in term.lines()) == 1


def test_the_editor_is_told_the_reply_was_rejected(tmp_path):
    model = scripted(tmp_path, BAD, answer("built"))
    editor = Editor()

    async def main():
        async with anges_acp(editor, "--model", model, cwd=tmp_path) as agent:
            await agent.start()
            return await prompt(agent, await new_session(agent, tmp_path), "build it")

    assert run(main()) == "end_turn"
    assert editor.thoughts() == [PLAN, f"{SHOWN}\n\nanswer"]
    [call] = editor.calls().values()  # the rejected reply's action, announced as it arrived
    assert call["title"] == "PLAN_IT" and call["statuses"][-1] == "failed"
    assert "Not run: the reply was rejected." in content_text(call)
    assert editor.messages() == ["built"]


@pytest.mark.browser
@pytest.mark.xdist_group("browser")
@pytest.mark.parametrize("model", [ScriptedModel([BAD, complete("built")])])
def test_the_web_chat_shows_the_rejection_as_a_line_of_the_run(page, server, model):  # noqa: F811
    log_in(page, server)
    send(page, "build it")
    expect(page.locator(".answer-task_completion")).to_contain_text("built")
    expect(page.locator("li.step-rejected")).to_have_text(SHOWN)
