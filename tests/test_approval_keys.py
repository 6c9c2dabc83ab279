"""Only a key pressed on purpose answers an approval in the terminal, driven through a real pseudo-terminal and read
through a terminal emulator (pyte): typing that runs on through the moment a question appears, a paste that ends
in `ESC[201~y`, an `a` that begins a word, a double tap over two questions, and Enter neither answer it nor lose a
key; a person who reads and then presses y is answered at once.

The pauses between keys are the person being imitated (the attack is in their timing), not waits for a state."""

import pytest
from terminal_screen import ENTER, PASTE_END, PASTE_START
from test_cli import complete, only_stream, scripted, shell
from test_session import sessions  # noqa: F401  (the fixture)

pytestmark = pytest.mark.packaged_safety
BACKSPACE = "\x7f"
RULES = "safety:\n  rules:\n    - {action: RUN_SHELL_CMD, match: 'echo ask-*', decision: ask, reason: the test asks}\n"
KEYS = "y yes · n no · a always… · t no, and tell the agent why"
HEAD = "RUN_SHELL_CMD needs your approval"
GATE = "while [ ! -e go ]; do sleep 0.05; done"
"""A first step that waits for the test: the question comes when the test makes the file `go`."""


def start(tmp_path, sessions, *replies):  # noqa: F811
    (tmp_path / "rules.yaml").write_text(RULES)
    return sessions("--config", "rules.yaml", "--approval", "ask", "--model", scripted(tmp_path, *replies),
                    cwd=tmp_path)


def typing(term, text, gap=0.08):
    """Type `text` a key at a time, `gap` seconds apart (a person typing at about 12 keys a second)."""
    for key in text:
        term.send(key)
        term.read_for(gap)


def screen(term):
    return "\n".join(term.display())


def box(term):
    """What the input box holds (on one line)."""
    return next(line for line in reversed(term.display()) if line.startswith("›"))[2:]


def decisions():
    return [(e.data["subject"], e.data["decision"], e.data["always"]) for e in only_stream().events_list
            if e.type == "approval_decided"]


def test_typing_on_through_the_question_goes_into_the_box_and_a_y_after_a_short_pause_does_not_answer(
        tmp_path, sessions):  # noqa: F811
    term = start(tmp_path, sessions, shell(GATE), shell("echo ask-branch > branch.txt"), complete("finished"))
    term.send("tidy up the branches\r")
    term.wait_for("running while", on_screen=True)
    before, during = "please also update the changelog ", "and bump the version"
    typing(term, before)
    (tmp_path / "go").write_text("")  # the question appears while the person types on
    for key in during:
        typing(term, key)
    assert HEAD in screen(term), "the question came while they typed"
    term.read_for(0.5)  # the pause that let the y approve
    after = "yes, and the readme"
    typing(term, after)
    term.read_for(0.3)

    shown = screen(term)
    assert HEAD in shown and "approved" not in term.text() and not (tmp_path / "branch.txt").exists()
    assert box(term) == before + during + after, "every key went into the input box, none was swallowed"
    assert KEYS not in shown, "the keys show once they answer: after a pause in the typing"

    term.wait_for(KEYS, on_screen=True)  # the person stops and reads the question
    term.send("y")
    term.wait_for("✓ approved by you: RUN_SHELL_CMD echo ask-branch > branch.txt")
    term.wait_for("finished")
    assert (tmp_path / "branch.txt").read_text() == "ask-branch\n"
    term.wait_until(lambda: box(term) == before + during + after, what="the typing still there, unsent")
    assert decisions() == [("echo ask-branch > branch.txt", "allow", False)]


def test_a_paste_that_ends_in_the_paste_end_and_y_does_not_answer_and_does_not_stop_the_run(tmp_path, sessions):  # noqa: F811
    term = start(tmp_path, sessions, shell("echo ask-paste > pasted.txt"), complete("finished"))
    term.send("make the file\r")
    term.wait_for(KEYS, on_screen=True)  # answerable now
    term.send(PASTE_START + "notes from the wiki" + PASTE_END + "y" + PASTE_END)  # what the terminal sends
    term.wait_until(lambda: box(term) == "notes from the wikiy", what="the paste in the box")
    term.read_for(0.3)
    assert "approved" not in term.text() and "interrupted" not in term.text() and HEAD in screen(term)
    assert not (tmp_path / "pasted.txt").exists()

    term.wait_for(KEYS, on_screen=True)
    term.send("n")
    term.wait_for("✗ declined by you: RUN_SHELL_CMD echo ask-paste > pasted.txt")
    term.wait_for("finished")
    assert decisions() == [("echo ask-paste > pasted.txt", "deny", False)]
    term.wait_until(lambda: box(term) == "notes from the wikiy", what="the paste still in the box")


def test_always_is_a_then_enter_and_an_a_that_begins_a_word_goes_back_into_the_box(tmp_path, sessions):  # noqa: F811
    term = start(tmp_path, sessions, shell("echo ask-always >> a.txt"), shell("echo ask-always >> a.txt"),
                 complete("finished"))
    term.send("append twice\r")
    term.wait_for(KEYS, on_screen=True)
    typing(term, "and also the tests")  # after a pause: the a is taken for "always", the n says it was a word
    term.read_for(0.3)
    assert box(term) == "and also the tests" and "approved" not in term.text()

    term.wait_for(KEYS, on_screen=True)
    term.send("a")
    term.wait_for("Enter approves it for the rest of this run", on_screen=True)
    term.send(ENTER)
    term.wait_for("finished")
    assert (tmp_path / "a.txt").read_text() == "ask-always\nask-always\n"
    assert decisions() == [("echo ask-always >> a.txt", "allow", True)]
    term.wait_until(lambda: box(term) == "and also the tests", what="the words still in the box")


def test_a_double_tap_answers_one_question_and_not_the_next_and_enter_answers_none(tmp_path, sessions):  # noqa: F811
    term = start(tmp_path, sessions, shell("echo ask-first > first.txt"), shell("echo ask-second > second.txt"),
                 complete("finished"))
    term.send("two steps\r")
    term.wait_for(KEYS, on_screen=True)
    term.send("y")
    term.read_for(0.15)
    term.send("y")  # a double tap: the second lands on the second question, or just after the first was answered
    term.wait_for("✓ approved by you: RUN_SHELL_CMD echo ask-first > first.txt")
    term.wait_until(lambda: "│ echo ask-second > second.txt" in screen(term), what="the second question")
    term.read_for(0.3)
    assert "second.txt" not in "".join(line for line in term.lines() if "approved by you" in line)
    assert box(term) == "y", "the second y was typing, into the box"

    term.send(BACKSPACE)
    term.wait_until(lambda: box(term) == "", what="an empty box")
    term.wait_for(KEYS, on_screen=True)
    term.send(ENTER)  # Enter is not yes (with an empty box it does nothing)
    term.wait_gone(KEYS)  # it was a key typed: the question waits for a pause again
    assert not (tmp_path / "second.txt").exists() and "│ echo ask-second" in screen(term)
    term.wait_for(KEYS, on_screen=True)
    term.send("n")
    term.wait_for("finished")
    assert decisions() == [("echo ask-first > first.txt", "allow", False),
                           ("echo ask-second > second.txt", "deny", False)]
    assert (tmp_path / "first.txt").exists() and not (tmp_path / "second.txt").exists()
