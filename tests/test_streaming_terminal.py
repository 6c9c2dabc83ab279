"""The CLI's live view of a streaming reply, on a real pseudo-terminal read through a terminal emulator (pyte): the
analysis and reasoning show under the spinner as they arrive, as text, and leave the transcript as it would be."""

import json
import os

import pyte
from test_cli_interactive import Terminal

GAP = 1.2
"""Seconds the server waits between two pieces of the reply: time to look at the screen."""


def screen_of(output: str, columns: int = 100, lines: int = 60) -> list[str]:
    screen = pyte.Screen(columns, lines)
    pyte.Stream(screen).feed(output)
    return [line.rstrip() for line in screen.display]


def streamed_reply(server, analysis, reasoning, actions):
    text = json.dumps({"analysis": analysis, "reasoning": reasoning, "actions": actions})
    cut = text.index(reasoning) + len(reasoning) // 2  # a first piece that stops in the middle of the reasoning
    server.enqueue_text(text, chunks=[text[:cut], text[cut:]], gap=GAP)


def test_the_reply_shows_live_as_text_and_the_step_is_drawn_once(openai_server, tmp_path):
    analysis = "The folder has one file; I will look at it \x1b]0;pwned\x07 before I answer."
    reasoning = "List the files to see what is here, then report the count to the user."
    streamed_reply(openai_server, analysis, reasoning, [{"action_type": "RUN_SHELL_CMD", "command": "ls"}])
    streamed_reply(openai_server, "Done.", "The listing answered the question.",
                   [{"action_type": "TASK_COMPLETE", "content": "One file."}])
    (tmp_path / "only.txt").write_text("x")
    env = {**os.environ, **openai_server.env}
    term = Terminal(["-q", "how many files?", "--model", "openai:gpt-test"], cwd=tmp_path, env=env, columns=100)

    term.expect("List the files to see what")  # the first piece: drawn before the rest of the reply exists
    live = screen_of(term.output)
    assert any("The folder has one file" in line for line in live), "the analysis shows as it streams"
    assert any(line.rstrip().endswith(reasoning[:len(reasoning) // 2].rstrip()) for line in live)
    assert not any("$ ls" in line for line in live), "the step itself has not run yet"
    assert "\x1b]0;pwned" not in term.output and "^[]0;pwned^G" in term.output, "model text is made printable"
    assert '"reasoning"' not in term.output, "never the raw JSON"

    assert term.wait(30) == 0
    final = [line for line in screen_of(term.output) if line.strip()]
    assert sum(reasoning in line for line in final) == 1, "the step's reasoning is in the transcript once"
    assert not any("The folder has one file" in line for line in final), "the live analysis was erased"
    assert any(line.startswith("$ ls") for line in final) and any("One file." in line for line in final)
    shown = final.index(next(line for line in final if reasoning in line))
    assert final[shown + 1].startswith("$ ls"), "the step reads as it does without streaming"
