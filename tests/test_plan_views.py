"""The plan and a held completion where people see them: the terminal session through a real pty (read with pyte),
`--output jsonl`, `anges show` and the Markdown export, and a real `anges acp` process."""

import io
import json

from acp_client import Editor, anges_acp, content_text, run
from test_acp import new_session, prompt
from test_cli import anges, only_stream, reply, scripted
from test_session import finished, sessions  # noqa: F401  (a fixture)

LONG = "Check every page of the user guide and fix each broken link it has, keeping the anchors the index uses"


def plan(*steps):
    return {"action_type": "UPDATE_PLAN", "plan": [{"step": step, "status": status} for step, status in steps]}


def finish(content, **extra):
    return {"action_type": "TASK_COMPLETE", "content": content, **extra}


def command(line):
    return {"action_type": "RUN_SHELL_CMD", "command": line}


def planned_run(*gate):
    """A run that plans two steps, works on the first (waiting on `gate` commands), completes too early (held: the
    plan is open), then ticks both off and completes with only_if_succeeded."""
    return [reply(plan((LONG, "in_progress"), ("Report", "pending")), command("echo first"), *gate, reasoning="plan it"),
            reply(finish("early"), reasoning="done?"),
            reply(plan((LONG, "completed"), ("Report", "completed")), finish("all links fixed", only_if_succeeded=True),
                  reasoning="tick off")]


def test_the_session_shows_the_plan_ticked_off_holds_the_early_completion_and_plan_shows_it_whole(tmp_path,
                                                                                                  sessions):  # noqa: F811
    model = scripted(tmp_path, *planned_run(command("while [ ! -e go ]; do sleep 0.05; done")))
    term = sessions("--model", model, cwd=tmp_path, columns=100)
    term.send("fix the links\r")

    screen = "\n".join(term.wait_for("plan 0/2", on_screen=True))  # the status line, while the command waits
    assert "☰ plan: 0 of 2 steps done" in screen
    drawn = next(line for line in term.lines() if "▸ Check every page" in line)
    assert drawn.endswith("…") and len(drawn) <= 100, "a step is cut at the edge, one line each"
    assert "  ○ Report" in term.lines()
    (tmp_path / "go").write_text("")
    finished(term)
    lines = term.lines()
    held = lines.index("⏸ completion held")
    assert lines[held + 1].startswith("  │ the plan has 2 open steps: Check every page")
    assert "✓ completed" in lines and "all links fixed" in lines
    assert any(line.startswith("  ✓ Check every page") for line in lines), "done steps are ticked"

    term.send("/plan\r")
    term.wait_for("index uses")  # the whole step, wrapped, not cut
    whole = term.lines()[-8:]
    assert "☰ plan: 2 of 2 steps done" in whole and "  ✓ Report" in whole


def test_jsonl_has_a_plan_line_for_each_update_and_the_held_completion_as_an_event(tmp_path):
    out = anges("-q", "go", "--output", "jsonl", "--model", scripted(tmp_path, *planned_run()), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    plans = [line for line in lines if line["type"] == "plan"]
    assert [(p["done"], p["total"], p["depth"]) for p in plans] == [(0, 2, 0), (2, 2, 0)]
    assert plans[0]["plan"] == [{"step": LONG, "status": "in_progress"}, {"step": "Report", "status": "pending"}]
    kinds = [line["event"]["type"] for line in lines if line["type"] == "event"]
    assert kinds == ["new_request", "plan_updated", "action", "completion_held", "plan_updated", "task_completion"]
    assert kinds.index("plan_updated") < [i for i, line in enumerate(lines) if line["type"] == "plan"][0] + 1
    held = next(line["event"] for line in lines if line["type"] == "event" and line["event"]["type"] == "completion_held")
    assert held["data"]["causes"][0]["kind"] == "plan" and held["data"]["answer"] == "early"
    assert lines[-1]["type"] == "run_finished" and lines[-1]["answer"] == "all links fixed"


def test_anges_show_and_the_markdown_export_show_the_plan_and_the_held_completion(tmp_path):
    assert anges("-q", "go", "--model", scripted(tmp_path, *planned_run()), cwd=tmp_path).returncode == 0
    uid = only_stream().uid
    shown = anges("show", uid, cwd=tmp_path).stdout.splitlines()
    assert "☰ plan: 0 of 2 steps done" in shown and "  ○ Report" in shown and "  ✓ Report" in shown
    assert "⏸ completion held" in shown
    exported = anges("export", uid, "--format", "md", cwd=tmp_path).stdout
    assert f"0 of 2 steps done:\n\n- [ ] {LONG} (in progress)\n- [ ] Report" in exported
    assert "- [x] Report" in exported and "Completion held" in exported and "the plan has 2 open steps" in exported


def acp_turn(tmp_path, model, text, *args):
    """One prompt turn of a real `anges acp` with the scripted `model`; the editor that saw it."""
    work = tmp_path / "work"
    work.mkdir()
    editor = Editor()

    async def main():
        async with anges_acp(editor, "--model", model, *args, cwd=work) as agent:
            await agent.start()
            return await prompt(agent, await new_session(agent, work), text)

    assert run(main()) == "end_turn"
    return editor


def test_acp_sends_the_agents_plan_as_plan_updates_and_the_held_completion_as_a_thought(tmp_path):
    editor = acp_turn(tmp_path, scripted(tmp_path, *planned_run()), "fix the links")
    assert editor.plans() == [[(LONG, "in_progress"), ("Report", "pending")],
                              [(LONG, "completed"), ("Report", "completed")]]
    assert any("done?\n\ncompletion held: the plan has 2 open steps" in thought for thought in editor.thoughts())
    assert [call["title"] for call in editor.calls().values()] == ["echo first"], "a plan is no tool call"
    assert editor.messages() == ["all links fixed"]


def test_acp_shows_a_childs_plan_as_the_progress_of_the_call_that_runs_it(tmp_path):
    delegate = reply({"action_type": "CALL_CHILD_AGENT", "directive": "NEW_CHILD_AGENT TASK_EXECUTOR",
                      "agent_input": "Count the files here."}, reasoning="delegate")
    model = scripted(tmp_path, delegate,
                     reply(plan(("List", "completed"), ("Count", "in_progress")), command("ls"), reasoning="child plans"),
                     reply(plan(("List", "completed"), ("Count", "completed")), finish("3 files")),
                     reply(finish("There are 3 files.")))
    editor = acp_turn(tmp_path, model, "how many files?", "--agent", "orchestrator")
    assert editor.plans() == [], "a child's plan is its own: the session's plan is the orchestrator's"
    progress = [content_text({"content": update.content}) for update in editor.updates
                if getattr(update, "session_update", "") == "tool_call_update" and update.content]
    assert any("Count the files here.\n\nIts plan: 1 of 2 steps done (now: Count)." in text for text in progress)
    assert any("Its plan: 2 of 2 steps done." in text for text in progress)


def test_a_plan_step_cannot_reach_the_terminal_raw():
    from anges.cli.render import Renderer
    from anges.cli.terminal import Display
    from anges.store.events import Event

    event = Event("plan_updated", data={"plan": [{"step": "title \x1b]0;pwned\x07 and \x1b[2J clear", "status": "pending"}]})
    for depth in (0, 1):
        drawn = Display.plain(io.StringIO()).text(
            Renderer(styled=True).event(event, depth, "task_executor x" if depth else ""), 120)
        assert "\x1b" not in drawn and "\x07" not in drawn and "pwned" in drawn
