"""Approvals of `anges -q` on a real pseudo-terminal, read through a terminal emulator: one block, answered by one
key (y, n, t; a then Enter; v first when part of it is cut) once it has been on the screen a moment, Ctrl-C, and
the line prompt of a dumb terminal."""

import json
import os

import pytest
from terminal_screen import CTRL_C, Terminal
from test_cli import complete, edit, only_stream, scripted, shell, types

pytestmark = pytest.mark.packaged_safety  # the prompt and the fallback as a user without bwrap has them, too
RULES = "safety:\n  rules:\n    - {action: RUN_SHELL_CMD, match: 'echo ask-*', decision: ask, reason: the test asks}\n"
KEYS = "y yes · n no · a always… · t no, and tell the agent why"


def start(tmp_path, *replies, env=None, columns=100):
    (tmp_path / "rules.yaml").write_text(RULES)
    return Terminal(["-q", "task", "--config", "rules.yaml", "--model", scripted(tmp_path, *replies)], cwd=tmp_path,
                    env=env, columns=columns)


def asked(term, subject):
    """Wait for the question about `subject`; the screen then."""
    return "\n".join(term.wait_until(lambda: f"│ {subject}" in "\n".join(term.display()) and KEYS in
                                     "\n".join(term.display()), what=f"the question about {subject!r}"))


def test_each_question_is_answered_by_one_key_yes_no_tell_and_always(tmp_path):
    term = start(tmp_path, shell("echo ask-yes > y.txt"), shell("echo ask-no > n.txt"), shell("echo ask-tell > t.txt"),
                 shell("echo ask-always >> a.txt"), shell("echo ask-always >> a.txt"), complete("finished"))
    try:
        shown = asked(term, "echo ask-yes > y.txt")
        assert "? RUN_SHELL_CMD needs your approval — the test asks [safety.rules[0]]" in shown
        assert "always = for the rest of this run: this exact command" in shown
        term.send("y")
        asked(term, "echo ask-no > n.txt")
        term.send("n")
        asked(term, "echo ask-tell > t.txt")
        term.send("t")
        term.wait_for("tell the agent:", on_screen=True)
        term.send("use the Makefile\r")
        asked(term, "echo ask-always >> a.txt")
        term.send("a")
        term.wait_for("Enter approves it for the rest of this run · any other key: not always", on_screen=True)
        term.send("\r")
        term.wait_for("finished")
        assert term.wait() == 0
    finally:
        term.close()

    assert sorted(p.name for p in tmp_path.glob("*.txt")) == ["a.txt", "y.txt"]
    assert (tmp_path / "a.txt").read_text() == "ask-always\nask-always\n"
    decided = [e.data for e in only_stream().events_list if e.type == "approval_decided"]
    assert [(d["subject"].split()[1], d["decision"], d["always"], d["by"]) for d in decided] == [
        ("ask-yes", "allow", False, "terminal"), ("ask-no", "deny", False, "terminal"),
        ("ask-tell", "deny", False, "terminal"), ("ask-always", "allow", True, "terminal")]
    assert decided[2]["feedback"] == "use the Makefile"
    text = term.text()
    assert "✗ declined by you: RUN_SHELL_CMD echo ask-no > n.txt" in text
    assert "needs your approval" not in text, "each question left with its answer: never printed twice"
    assert text.count("(and for the rest of the run)") == 1, "the same command again is not asked again"


def test_a_key_pressed_as_the_question_appears_does_not_answer_it(tmp_path):
    term = start(tmp_path, shell("echo ask-soon > soon.txt"), complete("finished"))
    try:
        term.wait_for("│ echo ask-soon > soon.txt", on_screen=True)
        term.send("y")  # as soon as it shows: not read yet
        term.wait_for("the question's keys work once you stop typing", on_screen=True)
        assert KEYS not in "\n".join(term.display()) and not (tmp_path / "soon.txt").exists()
        asked(term, "echo ask-soon > soon.txt")  # once it has been up a moment, the keys show; read, then y
        term.send("y")
        term.wait_for("finished")
        assert term.wait() == 0
    finally:
        term.close()
    assert (tmp_path / "soon.txt").exists()
    assert [e.data["decision"] for e in only_stream().events_list if e.type == "approval_decided"] == ["allow"]


def test_an_edit_outside_the_workspace_shows_its_diff(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "settings.ini").write_text("debug = false\n")
    term = start(work, edit(f"REPLACE_LINES {tmp_path}/settings.ini 1-1", "debug = true"), complete("edited"))
    try:
        shown = asked(term, "+debug = true")
        assert "EDIT_FILE needs your approval — outside the writable paths" in shown and "│ -debug = false" in shown
        assert (tmp_path / "settings.ini").read_text() == "debug = false\n"
        term.send("y")
        term.wait_for("edited")
        assert term.wait() == 0
    finally:
        term.close()
    assert (tmp_path / "settings.ini").read_text() == "debug = true\n"


def test_ctrl_c_at_the_question_interrupts_the_run(tmp_path):
    term = start(tmp_path, shell("echo ask-me > x.txt"), complete())
    try:
        asked(term, "echo ask-me > x.txt")
        term.send(CTRL_C)
        assert term.wait() == 4
    finally:
        term.close()
    stream = only_stream()
    assert types(stream) == ["new_request", "approval_requested", "approval_decided", "task_interrupted"]
    assert stream.events_list[2].data["decision"] == "cancelled" and not (tmp_path / "x.txt").exists()
    assert json.dumps(stream.events_list[-1].data["reason"]) == '"interrupt"'


def test_a_long_command_needs_viewing_in_full_before_yes(tmp_path):
    lines = [f"echo step-{n} >> log.txt" for n in range(100)]
    command = "\n".join(["echo ask-long", *lines[:50], "echo HIDDEN-PART > hidden.txt", *lines[50:]])
    reply = shell(command) | {"reasoning": "run the long script"}
    term = start(tmp_path, reply, complete("finished"))
    try:
        shown = "\n".join(term.wait_for("v view it all · n no · t no, and tell the agent why", on_screen=True))
        assert "HIDDEN-PART" not in shown and "lines not shown" in shown
        size = f"{command.count(chr(10)) + 1} lines, {len(command):,} characters"
        assert f"({size}; only part of it is shown: v shows it all, above)" in shown
        detail = [line for line in shown.splitlines() if line.startswith("  │ ")]
        cut = next(int(line.split()[2]) for line in detail if "lines not shown" in line)
        assert len(detail) - 1 + cut == command.count("\n") + 1, "the marker counts every line not on the screen"
        term.send("y")
        term.wait_for("view it all with v before you approve it", on_screen=True)
        assert not (tmp_path / "hidden.txt").exists()
        term.send("v")
        term.wait_for("echo HIDDEN-PART > hidden.txt")  # printed above, into the scrollback
        term.wait_for(KEYS, on_screen=True)
        term.send("y")
        term.wait_for("finished")
        assert term.wait() == 0
    finally:
        term.close()
    assert (tmp_path / "hidden.txt").read_text() == "HIDDEN-PART\n"


def test_a_dumb_terminal_asks_on_a_line_and_draws_no_escape_sequence(tmp_path):
    env = {**os.environ, "TERM": "dumb"}
    term = start(tmp_path, shell("echo ask-dumb > d.txt"), complete("finished"), env=env)
    try:
        term.wait_for("allow? [y]es, [n]o, [a]lways, [t]ell the agent why:")
        term.send("y\r")
        term.wait_for("finished")
        assert term.wait() == 0
    finally:
        term.close()
    assert (tmp_path / "d.txt").read_text() == "ask-dumb\n"
    assert b"\x1b" not in term.raw


def test_without_bwrap_the_cli_says_so_once_and_every_command_needs_approval(tmp_path):
    import os

    from test_cli import anges

    fake_bin = tmp_path / "bin"  # a bwrap on PATH does not count: anges looks in the system's directories
    fake_bin.mkdir()
    (fake_bin / "bwrap").write_text("#!/bin/sh\nexit 0\n")
    (fake_bin / "bwrap").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake_bin}:{os.environ['PATH']}"}
    (tmp_path / "nobwrap.yaml").write_text(f"safety:\n  bwrap: {tmp_path / 'none' / 'bwrap'}\n")
    steps = (shell("echo one > 1.txt"), shell("echo two > 2.txt"), complete())
    declined = anges("-q", "task", "--config", "nobwrap.yaml", "--model", scripted(tmp_path, *steps), cwd=tmp_path,
                     env=env)
    assert not list(tmp_path.glob("*.txt"))
    allowed = anges("-q", "task", "--config", "nobwrap.yaml", "--approval", "auto", "--model",
                    scripted(tmp_path, *steps, name="b.json"), cwd=tmp_path, env=env)

    assert declined.returncode == 0, declined.stderr
    assert declined.stderr.count(f"the sandbox is not available: bwrap was not found at {tmp_path}/none/bwrap") == 1
    assert "add --approval auto" in declined.stderr
    assert "declined (no one can approve here): RUN_SHELL_CMD echo one > 1.txt" in declined.stderr
    assert allowed.returncode == 0 and (tmp_path / "1.txt").exists() and (tmp_path / "2.txt").exists()
    assert "not available" in allowed.stderr and "add --approval auto" not in allowed.stderr
    assert allowed.stderr.count("exit 0 · ") == 2 and allowed.stderr.count("no sandbox") == 2


@pytest.mark.sandbox
def test_the_question_marks_what_cannot_be_seen_and_says_where_it_runs(tmp_path):
    unseen = "echo ask-t\u200bouch \u202eevil > z.txt"
    term = start(tmp_path, shell(unseen), shell("echo outside", escalate="needs the host's cache"), complete("done"))
    try:
        shown = asked(term, "echo ask-t<U+200B>ouch <U+202E>evil > z.txt")
        assert "\u200b" not in shown and f"(1 line, {len(unseen)} characters; hidden, marked: U+200B ZERO WIDTH SPACE, " \
            "U+202E RIGHT-TO-LEFT OVERRIDE)" in shown
        term.send("n")
        shown = asked(term, "echo outside")
        assert "If approved, this runs outside the sandbox. The agent says why: needs the host's cache" in shown
        term.send("n")
        assert term.wait() == 0
    finally:
        term.close()
