"""The approval prompt of `anges` on a real pseudo-terminal: y, n, a, t, Ctrl-C, and the spinner held back."""

import json

import pytest
from test_cli import complete, edit, only_stream, scripted, shell, types
from test_cli_interactive import SGR, Terminal

from anges.cli.terminal import SPINNER_FRAMES

pytestmark = pytest.mark.packaged_safety  # the prompt and the fallback as a user without bwrap has them, too
RULES = "safety:\n  rules:\n    - {action: RUN_SHELL_CMD, match: 'echo ask-*', decision: ask, reason: the test asks}\n"
PROMPT = "allow? [y]es, [n]o, [a]lways, [t]ell the agent why: "


def start(tmp_path, *replies):
    (tmp_path / "rules.yaml").write_text(RULES)
    return Terminal(["-q", "task", "--config", "rules.yaml", "--model", scripted(tmp_path, *replies)], cwd=tmp_path)


def test_the_prompt_answers_yes_no_always_and_tell(tmp_path):
    term = start(tmp_path, shell("echo ask-yes > y.txt"), shell("echo ask-no > n.txt"), shell("echo ask-tell > t.txt"),
                 shell("echo ask-always >> a.txt"), shell("echo ask-always >> a.txt"), complete("finished"))

    shown = term.expect(PROMPT)
    assert "RUN_SHELL_CMD needs your approval — the test asks [safety.rules[0]]" in shown
    assert "│ echo ask-yes > y.txt" in shown and "always = for the rest of this run: this exact command" in shown
    term._read(0.5)  # the spinner would redraw every 0.1 s if it were not held back
    assert not any(frame in term.output[term.position:] for frame in SPINNER_FRAMES)
    term.send("y\r")
    assert "echo ask-no" in term.expect(PROMPT)
    term.send("n\r")
    assert "echo ask-tell" in term.expect(PROMPT)
    term.send("t\r")
    term.expect("tell the agent: ")
    term.send("use the Makefile\r")
    assert "echo ask-always" in term.expect(PROMPT)
    term.send("a\r")
    assert PROMPT not in term.expect("finished")  # the same command again: not asked again
    assert term.wait() == 0

    assert sorted(p.name for p in tmp_path.glob("*.txt")) == ["a.txt", "y.txt"]
    assert (tmp_path / "a.txt").read_text() == "ask-always\nask-always\n"
    decided = [e.data for e in only_stream().events_list if e.type == "approval_decided"]
    assert [(d["subject"].split()[1], d["decision"], d["always"], d["by"]) for d in decided] == [
        ("ask-yes", "allow", False, "terminal"), ("ask-no", "deny", False, "terminal"),
        ("ask-tell", "deny", False, "terminal"), ("ask-always", "allow", True, "terminal")]
    assert decided[2]["feedback"] == "use the Makefile"
    assert "✗ declined by you: RUN_SHELL_CMD echo ask-no > n.txt" in SGR.sub("", term.output)


def test_an_edit_outside_the_workspace_shows_its_diff(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "settings.ini").write_text("debug = false\n")
    term = start(work, edit(f"REPLACE_LINES {tmp_path}/settings.ini 1-1", "debug = true"), complete("edited"))

    shown = term.expect(PROMPT)
    assert "EDIT_FILE needs your approval — outside the writable paths" in shown
    assert "│ -debug = false" in shown and "│ +debug = true" in shown
    assert (tmp_path / "settings.ini").read_text() == "debug = false\n"
    term.send("y\r")
    term.expect("edited")
    assert term.wait() == 0
    assert (tmp_path / "settings.ini").read_text() == "debug = true\n"


def test_ctrl_c_at_the_prompt_interrupts_the_run(tmp_path):
    term = start(tmp_path, shell("echo ask-me > x.txt"), complete())
    term.expect(PROMPT)
    term.send("\x03")
    assert term.wait() == 4
    stream = only_stream()
    assert types(stream) == ["new_request", "approval_requested", "approval_decided", "task_interrupted"]
    assert stream.events_list[2].data["decision"] == "cancelled" and not (tmp_path / "x.txt").exists()
    assert json.dumps(stream.events_list[-1].data["reason"]) == '"interrupt"'


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
    assert SGR.sub("", allowed.stderr).count("exit 0 · ") == 2 and allowed.stderr.count("no sandbox") == 2


def test_a_long_command_needs_viewing_in_full_before_yes(tmp_path):
    lines = [f"echo step-{n} >> log.txt" for n in range(100)]
    command = "\n".join(["echo ask-long", *lines[:50], "echo HIDDEN-PART > hidden.txt", *lines[50:]])
    reply = shell(command) | {"reasoning": "run the long script"}  # the reasoning streams live: not the command
    term = start(tmp_path, reply, complete("finished"))

    shown = term.expect("[v]iew it all, [n]o, [t]ell the agent why: ")
    assert "HIDDEN-PART" not in shown and "lines not shown" in shown
    size = f"{command.count(chr(10)) + 1} lines, {len(command):,} characters"
    assert f"({size}; only part of it is shown: v shows it all)" in shown
    term.send("y\r")
    term.expect("view it all with v before you approve it")
    term.send("v\r")
    assert "HIDDEN-PART" in term.expect(PROMPT)
    term.send("y\r")
    term.expect("finished")
    assert term.wait() == 0
    assert (tmp_path / "hidden.txt").read_text() == "HIDDEN-PART\n"


@pytest.mark.sandbox
def test_the_prompt_marks_what_cannot_be_seen_and_says_where_it_runs(tmp_path):
    unseen = "echo ask-t\u200bouch \u202eevil > z.txt"
    term = start(tmp_path, shell(unseen), shell("echo outside", escalate="needs the host's cache"), complete("done"))

    shown = term.expect(PROMPT).split("needs approval:", 1)[1]  # the request's line, and the prompt
    assert "│ echo ask-t<U+200B>ouch <U+202E>evil > z.txt" in shown and "\u200b" not in shown
    assert f"(1 line, {len(unseen)} characters)" in shown
    term.send("n\r")
    shown = term.expect(PROMPT)
    assert "If approved, this runs outside the sandbox. The agent says why: needs the host's cache" in shown
    term.send("n\r")
    assert term.wait() == 0
