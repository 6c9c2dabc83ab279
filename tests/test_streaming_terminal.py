"""The live view of a streaming reply with `anges -q` on a real pseudo-terminal, read through a terminal emulator
(pyte): the analysis and reasoning show in place as they arrive, as text, and leave the transcript as it would be."""

import json
import os
import threading

from terminal_screen import Terminal


def streamed_reply(server, analysis, reasoning, actions, pause):
    text = json.dumps({"analysis": analysis, "reasoning": reasoning, "actions": actions})
    cut = text.index(reasoning) + len(reasoning) // 2  # a first piece that stops in the middle of the reasoning
    server.enqueue_text(text, chunks=[text[:cut], text[cut:]], pause=pause)


def test_the_reply_shows_live_as_text_and_the_step_is_drawn_once(openai_server, tmp_path):
    release = threading.Event()
    analysis = "The folder has one file; I will look at it \x1b]0;pwned\x07 before I answer."
    reasoning = "List the files to see what is here, then report the count to the user."
    streamed_reply(openai_server, analysis, reasoning, [{"action_type": "RUN_SHELL_CMD", "command": "ls"}], release)
    openai_server.enqueue_text(json.dumps({"analysis": "Done.", "reasoning": "The listing answered the question.",
                                           "actions": [{"action_type": "TASK_COMPLETE", "content": "One file."}]}))
    (tmp_path / "only.txt").write_text("x")
    env = {**os.environ, **openai_server.env}
    term = Terminal(["-q", "how many files?", "--model", "openai:gpt-test"], cwd=tmp_path, env=env, columns=100)
    try:
        live = term.wait_for("List the files to see what", on_screen=True)  # drawn before the rest of the reply exists
        assert any("The folder has one file" in line for line in live), "the analysis shows as it streams"
        assert any(line.rstrip().endswith(reasoning[:len(reasoning) // 2].rstrip()) for line in live)
        assert not any("$ ls" in line for line in live), "the step itself has not run yet"
        assert b"\x1b]0;pwned" not in term.raw and "^[]0;pwned^G" in term.text(), "model text is made printable"
        assert '"reasoning"' not in term.text(), "never the raw JSON"
        release.set()
        assert term.wait(30) == 0
    finally:
        term.close()
    final = [line for line in term.lines() if line.strip()]
    assert sum(reasoning in line for line in final) == 1, "the step's reasoning is in the transcript once"
    assert sum("The folder has one file" in line for line in final) == 1, "the analysis stays once (the live one erased)"
    assert any(line.startswith("$ ls") for line in final) and any("One file." in line for line in final)
    shown = final.index(next(line for line in final if reasoning in line))
    assert final[shown + 1].startswith("$ ls"), "the step reads as it does without streaming"
