"""Nothing untrusted reaches a terminal raw: escape sequences in output, model text and titles are shown, not obeyed."""

import json
import os
import pty
import re
import select
import subprocess
import sys
import time

import pytest

from anges.store.event_store import EventStore
from anges.util.printable import printable, printable_json

ANGES = [sys.executable, "-m", "anges"]
CLIPBOARD = "\x1b]52;c;cm0gLXJmIH4=\x07"  # OSC 52: write the clipboard
TITLE = "\x1b]0;pwned\x07"  # set the window title
CLEAR = "\x1b[2J\x1b[H"  # clear the screen
HOSTILE = CLIPBOARD + TITLE + CLEAR + "\x9b31m" + "\u202e"
RAW = ("\x1b]", "\x1b[2J", "\x07", "\x9b", "\u202e")
MARKUP = "[bold red]not markup[/bold red] [link=https://example.invalid]click[/link]"
"""rich markup in model text: shown as written, never obeyed."""


def test_printable_shows_control_characters_and_keeps_layout():
    assert printable("a\x1b[2Jb\x07c\x7f") == "a^[[2Jb^Gc^?"
    assert printable("ok\x9b1m \u202eevil") == "ok<U+009B>1m <U+202E>evil"
    assert printable("line\r\nnext\tcol\n") == "line\r\nnext\tcol\n"
    assert printable("50%\r100%") == "50%^M100%"
    assert printable("plain text, ünïcödé") == "plain text, ünïcödé"
    assert json.loads(printable_json(json.dumps({"k": "a\x9bb\u202e"}, ensure_ascii=False))) == {"k": "a\x9bb\u202e"}
    assert "\x9b" not in printable_json(json.dumps("a\x9b", ensure_ascii=False))


def hostile_model(tmp_path):
    replies = [
        {"reasoning": "think " + MARKUP + HOSTILE, "actions": [{"action_type": "RUN_SHELL_CMD",
                                                         "command": "printf 'out \\033]52;c;eA==\\007 \\033[2J done'"}]},
        {"reasoning": "edit", "actions": [{"action_type": "EDIT_FILE", "directive_line": "NEW_FILE notes.txt",
                                           "content": "note " + HOSTILE + "\n"}]},
        {"reasoning": "finish", "actions": [{"action_type": "TASK_COMPLETE", "content": "# Done " + HOSTILE}]},
    ]
    path = tmp_path / "replies.json"
    path.write_text(json.dumps(replies))
    return f"scripted:{path}"


def on_a_terminal(args, cwd, timeout=30):
    """Run `anges` with stdout and stderr on a pseudo-terminal (colours on); everything it wrote there."""
    main, side = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "200"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen([*ANGES, *args], cwd=cwd, stdin=subprocess.DEVNULL, stdout=side, stderr=side, env=env)
    os.close(side)
    chunks, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([main], [], [], 0.1)
        if ready:
            try:
                data = os.read(main, 65536)
            except OSError:  # the terminal's other side closed
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    os.close(main)
    assert proc.wait(timeout=5) == 0
    return b"".join(chunks).decode("utf-8", "replace")


def assert_neutralised(text):
    for raw in RAW:
        assert raw not in text, f"{raw!r} reached the terminal"
    assert "^[]52;" in text
    assert MARKUP in text and "\x1b]8;" not in text, "rich markup is text, no hyperlink is made of it"


def test_the_live_transcript_and_the_answer_show_escapes_but_keep_their_own_colours(tmp_path):
    shown = on_a_terminal(["-q", "go " + TITLE, "--model", hostile_model(tmp_path)], tmp_path)
    assert_neutralised(shown)
    assert "^[]0;pwned^G" in shown and "<U+202E>" in shown
    assert "\x1b[1;36m$\x1b[0m" in shown  # anges' own colour for a command survives


@pytest.fixture
def hostile_run(tmp_path):
    out = subprocess.run([*ANGES, "-q", "title " + HOSTILE, "--model", hostile_model(tmp_path)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode == 0, out.stderr
    assert_neutralised(out.stdout + out.stderr)
    [info] = EventStore().list()
    return info.uid


def test_show_list_and_export_neutralise_what_the_run_recorded(hostile_run, tmp_path):
    shown = on_a_terminal(["show", hostile_run], tmp_path)
    assert_neutralised(shown)
    assert "\x1b[1;36m$\x1b[0m" in shown
    listed = on_a_terminal(["list"], tmp_path)
    for raw in RAW:
        assert raw not in listed
    assert "title ^[]52;" in listed
    exported = subprocess.run([*ANGES, "export", hostile_run, "--format", "md"], cwd=tmp_path, capture_output=True,
                              text=True, check=True).stdout
    assert_neutralised(exported)
    assert "\x1b" not in exported
    as_json = subprocess.run([*ANGES, "show", hostile_run, "--json"], cwd=tmp_path, capture_output=True, text=True,
                             check=True).stdout
    assert "\x9b" not in as_json and "\u202e" not in as_json
    assert "\x1b]52;" in json.loads(as_json)["title"]  # the record itself is kept as it was


def test_a_commands_output_is_shown_as_a_terminal_would_have_left_it(tmp_path):
    command = r"printf '\033[32mgreen\033[0m ok\n 10%%\r 60%%\r100%%\n\033]0;title\007done\r\n'"
    replies = [{"reasoning": "run", "actions": [{"action_type": "RUN_SHELL_CMD", "command": command}]},
               {"reasoning": "done", "actions": [{"action_type": "TASK_COMPLETE", "content": "ok"}]}]
    (tmp_path / "replies.json").write_text(json.dumps(replies))
    subprocess.run([*ANGES, "-q", "go", "--model", f"scripted:{tmp_path / 'replies.json'}"], cwd=tmp_path,
                   capture_output=True, check=True, timeout=60)
    [info] = EventStore().list()
    shown = on_a_terminal(["show", info.uid], tmp_path)
    text = re.sub(r"\x1b\[[0-9;]*m", "", shown)  # anges' own colours
    framed = [line.split("│ ", 1)[1] for line in text.split("\r\n") if "│ " in line]
    assert framed == ["green ok", "100%", "done"], "no colour codes, a progress bar at its latest, no title change"
    exported = subprocess.run([*ANGES, "export", info.uid, "--format", "md"], cwd=tmp_path, capture_output=True,
                              text=True, check=True).stdout
    assert "```text\ngreen ok\n100%\ndone\n```" in exported
    stored = EventStore().load(info.uid).events_list[1].data["stdout"]
    assert stored.startswith("\x1b[32mgreen"), "the record keeps what the command printed"


def test_the_unicode_tables_are_what_their_maintained_sources_make():
    """`anges/util/unicode_data.py` is generated (tests/unicode_tables.py) from the `regex` module's
    Default_Ignorable_Code_Point and the UTS #39 confusables of `confusable_homoglyphs`: a new release of either
    fails here until the module is made again."""
    from pathlib import Path

    import unicode_tables

    module = Path(__file__).parent.parent / "anges" / "util" / "unicode_data.py"
    assert module.read_text(encoding="utf-8") == unicode_tables.module(), (
        "regenerate: .venv/bin/python tests/unicode_tables.py > anges/util/unicode_data.py")
    assert module.read_text(encoding="utf-8").isascii(), "every character of the tables is written as an escape"


def test_every_character_unicode_calls_invisible_is_marked_and_no_letter_is():
    """Checked against the running Python's `unicodedata` and the `regex` module's properties, code point by code
    point: every control, format, private-use, unassigned, separator and space character, every enclosing mark and
    every Default_Ignorable one is marked; no letter, digit or punctuation that is drawn is."""
    import unicodedata

    import regex

    from anges.util.printable import unseen, visible

    ignorable = regex.compile(r"\p{Default_Ignorable_Code_Point}")
    invisible = {"Cc", "Cf", "Cs", "Co", "Cn", "Zs", "Zl", "Zp", "Me"}
    missed, overmarked = [], []
    for code in range(0x80, 0x110000):
        char = chr(code)
        category = unicodedata.category(char)
        if category in invisible or ignorable.match(char):
            if not unseen(char):
                missed.append(f"U+{code:04X}")
        elif category[0] in "LNP" and unseen(char):
            overmarked.append(f"U+{code:04X}")
    assert missed == []
    assert overmarked == [], "a letter, digit or punctuation mark that is drawn is not marked"
    assert visible("a\u17b4b\u17b5c\u200bd\u2800e\U000e0041f\ufe0fg") == (
        "a<U+17B4>b<U+17B5>c<U+200B>d<U+2800>e<U+E0041>f<U+FE0F>g")
    assert visible("Grüße, 世界, ﻿") == "Grüße, 世界, <U+FEFF>"
