"""No stale frame: the live part of the session never stays on the screen or lands in the scrollback, through a
resize during a run, an approval taller than the screen, or a session started on the first row. Driven in tmux,
which rewraps its lines on a resize as most terminals do, with the scrollback read back (`capture-pane -S -`)."""

import json
import os
import sys

import pytest
from tmux_screen import Tmux

WIDE = "x" * 140
GATE = ("for i in 1 2 3 4 5 6 7 8; do printf 'live %s %s\\n' $i " + WIDE + "; done; "
        "while [ ! -e go ]; do sleep 0.05; done")
"""A command whose output lines are wider than the terminal will be, and that runs until the test makes `go`."""
TALL = "\n".join(f"echo step-{n:02d} && true" for n in range(58))
RULES = "safety:\n  rules:\n    - {action: RUN_SHELL_CMD, match: 'echo *', decision: ask, reason: the test asks}\n"


def reply(action, reasoning="working on it"):
    return {"analysis": "", "reasoning": reasoning, "actions": [action]}


def session(tmp_path, replies, *args, columns, rows, above=60):
    """`anges ARGS` in a tmux pane of its own, after `above` lines of a shell's output (0: on the first row, as after
    `clear`)."""
    (tmp_path / "replies.json").write_text(json.dumps(replies))
    env = {**os.environ, "ANGES_HOME": str(tmp_path / "home")}
    anges = f"exec {sys.executable} -m anges --model scripted:replies.json " + " ".join(args)
    return Tmux(["sh", "-c", f"seq 1 {above}; {anges}" if above else anges], tmp_path, env, columns, rows)


def idle(term):
    """Wait until the session waits for a request again (the input box is the last line); all the lines then."""
    return term.wait_until(lambda: [line for line in term.screen() if line][-1].startswith("›"), what="the box")


def done():
    return reply({"action_type": "TASK_COMPLETE", "content": "finished"}, "done")


@pytest.mark.parametrize("widths", [(160, 110, 100), (130, 100)])
def test_narrowing_the_terminal_during_a_run_leaves_no_live_line_behind(tmp_path, widths):
    command = reply({"action_type": "RUN_SHELL_CMD", "command": GATE}, "working " + "r" * 150)
    term = session(tmp_path, [command, done()], "--sandbox", "off", "--approval", "auto", columns=widths[0],
                   rows=45)
    try:
        term.wait_for("›", on_screen=True)
        term.send("do it")
        term.key("Enter")
        term.wait_for("live 8", on_screen=True)
        for width in widths[1:]:
            term.resize(width, 45)
            term.redrawn()
        (tmp_path / "go").write_text("")
        term.wait_for("completed in")
        lines = idle(term)
    finally:
        term.close()
    assert [line for line in lines if line.startswith("live ")] == [], "a line of the live output was left"
    assert not [line for line in lines if line and not line.strip("x")], "the rest of a rewrapped live line"
    assert lines.count("working") == 1, "the reasoning once: in the transcript, as prose"
    assert not [line for line in lines if line.startswith("working r")], "a line of the live reasoning was left"
    assert sum(line.startswith("  │ live 8 xxx") for line in lines) == 1, "the step's output once, in the transcript"
    assert sum("running for i in" in line for line in lines) == 0, "no status line of the run is left"


@pytest.mark.sandbox
@pytest.mark.parametrize("columns, rows", [(80, 24), (160, 45)])
def test_an_approval_taller_than_the_screen_fits_it_keeps_its_reason_and_keys_and_is_erased(tmp_path, columns,
                                                                                             rows):
    (tmp_path / "rules.yaml").write_text(RULES)
    asks = reply({"action_type": "RUN_SHELL_CMD", "command": TALL, "escalate": "needs the network for the packages"})
    term = session(tmp_path, [asks, done()], "--config", "rules.yaml", "--approval", "ask", columns=columns,
                   rows=rows)
    try:
        term.wait_for("›", on_screen=True)
        term.send("do it")
        term.key("Enter")
        term.wait_until(lambda: "v view it all" in "\n".join(term.screen()), what="the keys")
        screen = term.screen()
        shown = "\n".join(screen)
        assert "The agent says why: needs the netw" in shown and "always = for the rest of this run:" in shown
        assert "lines not shown" in shown and "echo step-00 && true" in shown and "echo step-57 && true" in shown
        assert [line for line in screen if line][-1].startswith("›") and not screen[0].startswith("? RUN_SHELL"), \
            "the whole live part on the screen, a row to spare"
        term.send("v")
        term.wait_for("the whole RUN_SHELL_CMD detail")
        term.wait_for("y yes", on_screen=True)
        term.send("y")
        term.wait_for("completed in")
        lines = idle(term)
    finally:
        term.close()
    assert sum("needs your approval" in line for line in lines) == 0, "the question is not left anywhere"
    assert sum(line == "  │ echo step-57 && true" for line in lines) == 1, "the detail once: printed by v"
    assert sum("waiting for your answer" in line for line in lines) == 0


def test_a_session_started_on_the_first_row_leaves_no_first_frame(tmp_path):
    term = session(tmp_path, [done()], columns=100, rows=20, above=0)
    try:
        term.wait_for("Enter sends")
        lines = term.wait_until(lambda: "replies.json" in "\n".join(term.screen()), what="the model in the status")
    finally:
        term.close()
    assert lines[0].startswith("anges "), lines[:4]
    assert not any("starting…" in line for line in lines), "the first frame stayed"
    assert sum(set(line) == {"─"} for line in lines) == 1, "one rule: the live part's"
