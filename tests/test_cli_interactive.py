"""`anges -i` and `anges -q` on a terminal and off one: the session's first task, signals, pipes, JSON lines, and what
the terminal shows (colour, Markdown, width from the terminal drawn on, NO_COLOR, TERM=dumb)."""

import json
import os
import re
import subprocess

from helpers import pids_running, sleep_token, wait_until_running
from terminal_screen import CTRL_C, CTRL_D, Terminal
from test_cli import ANGES, complete, edit, only_stream, scripted, shell, types, wait_for

SGR = re.compile(r"\x1b\[[0-9;]*m")
COLOUR = re.compile(r"\x1b\[(?:[0-9;]*;)?(?:3[0-7]|9[0-7]|38;[25];[0-9;]+)m")
"""An SGR sequence that sets a foreground colour."""


def test_i_runs_its_first_task_from_q_in_the_session_then_ctrl_d_leaves(tmp_path):
    term = Terminal(["-i", "-q", "start here", "--model", scripted(tmp_path, complete("started"))], cwd=tmp_path)
    try:
        term.wait_for("started")
        term.wait_for("completed in")
        term.send(CTRL_D)
        assert term.wait() == 0
    finally:
        term.close()
    assert only_stream().events_list[0].content == "start here"


def test_ctrl_c_stops_the_running_command_and_the_session_goes_on(tmp_path):
    token = sleep_token()
    model = scripted(tmp_path, shell(f"echo $$ > pid.txt; sleep {token}"), complete("second answer"))
    term = Terminal(["--model", model], cwd=tmp_path)
    try:
        term.wait_for("Ctrl-D leaves")
        term.send("a long task\r")
        wait_for(tmp_path / "pid.txt")
        wait_until_running(token)
        term.send(CTRL_C)
        term.wait_for("■ interrupted")
        term.wait_until(lambda: not pids_running(token), what="the command to end")
        term.send("next\r")
        term.wait_for("second answer")
        assert "Traceback" not in term.text()
        term.send(CTRL_D)
        assert term.wait() == 0
    finally:
        term.close()
    stream = only_stream()
    assert types(stream) == ["new_request", "action", "task_interrupted", "follow_up_request", "task_completion"]
    assert stream.events_list[2].data["reason"] == "interrupt"


def test_sigterm_during_a_task_stops_it_and_ends_the_session(tmp_path):
    token = sleep_token()
    model = scripted(tmp_path, shell(f"echo $$ > pid.txt; sleep {token}"), complete("never"))
    term = Terminal(["-i", "--model", model], cwd=tmp_path)
    try:
        term.wait_for("Ctrl-D leaves")
        term.send("a long task\r")
        wait_for(tmp_path / "pid.txt")
        wait_until_running(token)
        os.kill(term.pid, 15)  # SIGTERM: a service manager stopping us, not a person pressing Ctrl-C
        assert term.wait() == 4
    finally:
        term.close()
    assert not pids_running(token)
    last = only_stream().events_list[-1]
    assert last.type == "task_interrupted" and last.data["by"] == "SIGTERM"


def test_a_dumb_terminal_gets_one_request_a_line(tmp_path):
    model = scripted(tmp_path, complete("one done"))
    term = Terminal(["--model", model], cwd=tmp_path, env={**os.environ, "TERM": "dumb"})
    try:
        term.wait_for("anges>")
        term.send("/help\r")  # the session's commands are not requests here
        term.wait_for("/help is a command of the full session")
        term.send("one\r")
        term.wait_for("one done")
        term.send("/exit\r")
        assert term.wait() == 0
    finally:
        term.close()
    assert b"\x1b" not in term.raw
    assert [e.content for e in only_stream().events_list] == ["one", "one done"]


def test_interactive_reads_requests_from_a_pipe(tmp_path):
    model = scripted(tmp_path, complete("one done"), complete("two done"))
    out = subprocess.run([*ANGES, "--interactive", "--model", model], cwd=tmp_path, input="one\n/new\n\n/etc/hosts: two\n/quit\nthree\n",
                         capture_output=True, text=True, env=os.environ.copy(), timeout=30, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "one done\ntwo done\n"
    assert "anges>" not in out.stdout + out.stderr and "\x1b" not in out.stdout + out.stderr
    assert "/new is a command of the full session" in out.stderr
    assert [e.content for e in only_stream().events_list] == ["one", "one done", "/etc/hosts: two", "two done"]


def test_interactive_jsonl_reports_each_request(tmp_path):
    model = scripted(tmp_path, complete("a"), complete("b"))
    out = subprocess.run([*ANGES, "-i", "--output", "jsonl", "--model", model], cwd=tmp_path, input="one\ntwo\n",
                         capture_output=True, text=True, env=os.environ.copy(), timeout=30, check=False)
    assert out.returncode == 0, out.stderr
    kinds = [kind for line in out.stdout.splitlines() if (kind := json.loads(line)["type"]) != "delta"]
    assert kinds == ["run_started", "event", "event", "run_finished"] * 2


def test_q_on_a_terminal_draws_colour_markdown_and_a_status_line(tmp_path):
    model = scripted(tmp_path, shell("while [ ! -e go ]; do sleep 0.05; done"),
                     complete("# Title\n\n- **bold** item\n\n```\ncode\n```"))
    term = Terminal(["-q", "x", "--model", model], cwd=tmp_path)
    try:
        status = "\n".join(term.wait_for("running while [ ! -e go ]", on_screen=True))
        assert re.search(r"running while \[ ! -e go \].* · \d+\.\ds · 0 steps", status), "the status line"
        assert "scripted:replies.json" in status and "sandbox workspace" in status
        (tmp_path / "go").write_text("")
        assert term.wait() == 0
    finally:
        term.close()
    lines = term.lines()
    assert "Title" in lines and "# Title" not in lines, "the answer is drawn as Markdown"
    assert any(line.strip() == "• bold item" for line in lines) and any(line.strip() == "code" for line in lines)
    assert not any("running while" in line for line in lines), "the status line leaves with the run"
    assert COLOUR.search(term.raw.decode())


def test_no_color_draws_no_colour_and_a_dumb_terminal_no_escape_at_all(tmp_path):
    for name, env in (("a.json", {"NO_COLOR": "1"}), ("b.json", {"TERM": "dumb"})):
        term = Terminal(["-q", "x", "--model", scripted(tmp_path, shell("true"), complete("done"), name=name)],
                        cwd=tmp_path, env={**os.environ, **env})
        try:
            assert term.wait() == 0
        finally:
            term.close()
        raw = term.raw.decode()
        assert not COLOUR.search(raw), name
        assert "$ true" in term.lines() and "done" in term.lines()
        if env.get("TERM") == "dumb":
            assert "\x1b" not in raw


def test_the_transcript_is_as_wide_as_the_terminal_when_the_answer_goes_to_a_file(tmp_path):
    command = "echo " + "w" * 190
    model = scripted(tmp_path, shell(command), complete("# Answer\n\nsaved **here**"))
    term = Terminal(["-q", "x", "--model", model], cwd=tmp_path, columns=220, stdout=str(tmp_path / "answer.md"))
    try:
        assert term.wait() == 0
    finally:
        term.close()
    assert f"$ {command}" in term.lines() and "  │ " + "w" * 190 in term.lines(), "not cut at 80"
    assert (tmp_path / "answer.md").read_text() == "# Answer\n\nsaved **here**\n", "the answer as written"


def test_command_output_diff_and_command_lines_wrap_under_their_gutter_at_the_edge(tmp_path):
    change = "reverse=True if newest_first else False, key=" + "k" * 60
    model = scripted(tmp_path, edit("NEW_FILE wide.py", "d" * 50 + change + "\n"),
                     shell("python3 -c \"print('w' * 150)\" && echo " + "c" * 70), complete("done"))
    term = Terminal(["-q", "x", "--model", model], cwd=tmp_path, columns=60)
    try:
        assert term.wait() == 0
    finally:
        term.close()
    lines = term.lines()
    output = [line for line in lines if line.startswith("  │ w")]
    assert output == ["  │ " + "w" * 56, "  │ " + "w" * 56, "  │ " + "w" * 38], "the output wrapped, under its │"
    added = next(index for index, line in enumerate(lines) if line.startswith("  +" + "d" * 50))
    assert "".join(line[3:] for line in lines[added:added + 3]) == "d" * 50 + change, "the whole change, in order"
    assert all(line.startswith("   ") for line in lines[added + 1:added + 3]), "its rest right of the + column"
    command = next(index for index, line in enumerate(lines) if line.startswith("$ python3"))
    assert lines[command + 1].startswith("  ") and "c" * 20 in lines[command + 1], "the command wraps after its $"
    assert not any("…" in line for line in lines[command:command + 6]), "nothing cut"
    assert "run python3 -c \"print('w' * 150)\"" in " ".join(lines), "the reasoning (prose) wraps, whole"
