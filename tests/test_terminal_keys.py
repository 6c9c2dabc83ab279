"""Shift-Enter where the terminal reports it: the session asks for extended key reporting (xterm's modifyOtherKeys,
the kitty keyboard protocol) while its input box is up, reads what comes back as the keys they were, and takes the
terminal back when it leaves. Driven in tmux (which passes extended keys on with `extended-keys`) and on a pty read
by pyte, with the bytes a kitty-protocol terminal sends."""

import json
import os
import signal
import sys

from terminal_screen import CTRL_D
from test_cli import complete, only_stream, scripted
from test_session import finished, ready, sessions  # noqa: F401  (the fixture)
from tmux_screen import Tmux

from anges.cli.keyboard import OFF, ON

KITTY = {"ctrl-c": "\x1b[99;5u", "esc": "\x1b[27u", "shift-enter": "\x1b[13;2u", "alt-enter": "\x1b[13;3u",
         "ctrl-d": "\x1b[100;5u", "ctrl-o": "\x1b[111;5u"}
"""What a terminal with the kitty protocol's "disambiguate" flag on sends for these keys."""


def test_in_tmux_with_extended_keys_shift_enter_adds_a_line_and_ctrl_c_and_esc_still_work(tmp_path):
    (tmp_path / "replies.json").write_text(json.dumps([complete("got two lines")]))
    anges = f"exec {sys.executable} -m anges --model scripted:replies.json"
    term = Tmux(["sh", "-c", f"tmux set -s extended-keys on && {anges}"], tmp_path, None, 100, 30)  # this pane's tmux
    try:
        term.wait_until(lambda: ready(term.screen()), what="the input box and the agent")
        term.send("to be cleared")
        term.key("C-c")
        term.wait_until(lambda: "to be cleared" not in "\n".join(term.screen()), what="Ctrl-C clearing the box")
        term.send("first line")
        term.key("S-Enter")
        term.send("second line")
        term.wait_until(lambda: "  second line" in term.screen(), what="a second line in the box")
        term.key("Enter")
        term.wait_for("got two lines")
        assert only_stream().events_list[0].content == "first line\nsecond line", "one request of two lines"
        term.key("C-d")
        term.wait_until(lambda: "continue later with" in "\n".join(term.lines()), what="leaving")
    finally:
        term.close()


def test_the_session_asks_for_extended_keys_reads_kitty_reports_and_gives_the_terminal_back(tmp_path,
                                                                                             sessions):  # noqa: F811
    term = sessions("--model", scripted(tmp_path, complete("got it")), cwd=tmp_path)
    assert ON.encode() in term.raw, "modifyOtherKeys and the kitty flags are asked for"
    term.send("to be cleared")
    term.wait_for("to be cleared", on_screen=True)
    term.send(KITTY["ctrl-c"])
    term.wait_gone("to be cleared")
    term.send("one")
    term.send(KITTY["shift-enter"])
    term.send("two")
    term.send(KITTY["alt-enter"])
    term.send("three")
    term.wait_for("  three", on_screen=True)
    term.send("\r")
    finished(term)
    assert only_stream().events_list[0].content == "one\ntwo\nthree"
    term.send(KITTY["ctrl-o"])
    term.wait_for("q close", on_screen=True)
    term.send(KITTY["esc"])
    term.wait_gone("q close")
    term.send(KITTY["esc"] + KITTY["esc"])  # Esc Esc at an empty box: /rewind
    term.wait_for("› /rewind")
    term.send(KITTY["esc"])
    term.send(KITTY["ctrl-d"])
    assert term.wait() == 0
    assert term.raw.rindex(OFF.encode()) > term.raw.rindex(ON.encode()), "taken back on the way out"


def test_a_suspended_session_gives_the_keys_back_and_asks_again_when_continued(tmp_path, sessions):  # noqa: F811
    term = sessions("--model", scripted(tmp_path, complete()), cwd=tmp_path)
    asked = term.raw.count(ON.encode())
    os.kill(term.pid, signal.SIGTSTP)
    term.wait_until(lambda: OFF.encode() in term.raw, what="the keys given back on suspend")
    os.kill(term.pid, signal.SIGCONT)
    term.wait_until(lambda: term.raw.count(ON.encode()) > asked, what="asked again once continued")
    term.send("still here")
    term.wait_for("still here", on_screen=True)
    term.send(KITTY["ctrl-c"])  # read as Ctrl-C still: the box is cleared
    term.wait_gone("still here")
    term.send(CTRL_D)
    assert term.wait() == 0
