"""The session and the agent's context, driven through a real pseudo-terminal and read as a person reads it (pyte):
folds seen as they happen, what `/status` says the run read, files attached by `@`, and a `!command` ordered after
the slash commands sent before it."""

import json
import os
import re
import threading

from test_cli import complete, only_stream, shell, types
from test_session import finished, sessions  # noqa: F401  (the fixture)
from wire_servers import prompt_of

from anges.models.scripted import is_summary_prompt
from anges.store.events import is_step

CTRL_O = "\x0f"
SUMMARY = "SUMMARY: the agent echoed one, two and three."


class Folding:
    """A server's replier: echo commands, then a completion; a fold's request is held until `release`."""

    def __init__(self, steps):
        self.steps, self.done = steps, 0
        self.folding, self.release = threading.Event(), threading.Event()

    def __call__(self, request):
        if is_summary_prompt(prompt_of(request)):
            self.folding.set()
            self.release.wait(30)
            return SUMMARY
        self.done += 1
        names = ["one", "two", "three", "four", "five", "six"]
        return json.dumps(shell(f"echo {names[self.done - 1]}") if self.done <= self.steps else complete("all done"))


def test_a_fold_during_a_run_shows_compacting_live_then_what_it_folded(openai_server, tmp_path, sessions):  # noqa: F811
    (tmp_path / "folds.yaml").write_text("agents:\n  common:\n    max_consecutive_actions_to_summarize: 3\n"
                                         "prompt:\n  recent_events_in_full: 1\n")
    openai_server.replier = replier = Folding(steps=4)
    term = sessions("--config", "folds.yaml", "--model", "openai:gpt-test", cwd=tmp_path,
                    env={**os.environ, **openai_server.env}, columns=140)
    term.send("echo some words\r")
    assert replier.folding.wait(30), "the window filled: a fold"
    term.wait_until(lambda: "are being folded into the summary" in "\n".join(term.display()),
                    what="compacting… on the live part")
    screen = term.display()
    assert any("⇊ compacting…: events 1–" in line for line in screen), "the live part says which events"
    assert any(line[2:].startswith("compacting… · ") for line in screen), "so does the status line:\n" + "\n".join(
        screen)
    replier.release.set()
    finished(term)
    stream = only_stream()
    fold = next(event for event in stream.events_list if event.type == "history_folded")
    text = term.text()
    assert f"history folded: {fold.data['events']} into one summary ({len(SUMMARY):,} characters)" in text
    assert "the window was full" in text and SUMMARY in text, "the summary shows, dim, under it"
    assert "are being folded" not in "\n".join(term.display()), "the live line went with the fold"
    assert stream.event_summaries_list[-1].summary == SUMMARY and fold.content == SUMMARY
    after = stream.events_list[stream.events_list.index(fold) + 1:]
    term.send(CTRL_O + "p" * sum(is_step(event) for event in after))  # Ctrl-O, then back to the fold
    term.wait_for(f"the fold of {fold.data['events']}", on_screen=True)
    assert SUMMARY in "\n".join(term.display()), "the whole summary, in the pager"


def test_a_bang_command_waits_for_the_slash_command_sent_before_it(openai_server, tmp_path, sessions):  # noqa: F811
    openai_server.replier = replier = Folding(steps=1)
    term = sessions("--model", "openai:gpt-test", cwd=tmp_path, env={**os.environ, **openai_server.env},
                    columns=140)
    term.send("first\r")
    finished(term)
    term.send("/compact\r")
    assert replier.folding.wait(30)
    term.wait_for("the history is being folded into the summary", on_screen=True)
    term.send("!echo mine-$((2+3))\r")
    term.wait_until(lambda: "waiting for /compact ·" in "\n".join(term.display()),
                    what="the command waiting for /compact")
    assert "mine-5" not in term.text(), "it has not run while the fold works"
    replier.release.set()
    term.wait_for("the agent reads it")
    assert types(only_stream())[-2:] == ["history_folded", "user_command"], "it ran after the fold, as typed"
    text = term.text()
    assert text.index("history folded: events 1–3") < text.index("! echo mine-$((2+3))")


def test_status_names_the_agents_md_the_run_read_and_says_when_one_changed_since(openai_server, tmp_path,
                                                                                 sessions):  # noqa: F811
    (tmp_path / ".git").mkdir()
    (tmp_path / "AGENTS.md").write_text("Run the tests with make test.\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "AGENTS.md").write_text("In sub, use tabs.\n")
    openai_server.enqueue_text(json.dumps(complete("hi")))
    term = sessions("--model", "openai:gpt-test", cwd=tmp_path / "sub", env={**os.environ, **openai_server.env},
                    columns=220)
    term.send("/status\r")
    before = report(term, 1)
    assert re.search(r"AGENTS\.md +no request has read them yet; the next reads " + re.escape(
        f"{tmp_path}/AGENTS.md (30 characters); {tmp_path}/sub/AGENTS.md (18 characters)"), before), before
    term.send("hello\r")
    finished(term)
    assert "Run the tests with make test." in json.dumps(openai_server.requests[-1].body)
    (tmp_path / "AGENTS.md").write_text("Run the tests with make check, never make test, and lint first.\n")
    (tmp_path / "sub" / "AGENTS.md").unlink()
    term.send("/status\r")
    after = report(term, 2)
    assert f"{tmp_path}/AGENTS.md (30 characters) — changed since it was read: the next request reads it again" \
        in after, after
    assert f"{tmp_path}/sub/AGENTS.md (18 characters) — gone since it was read" in after, after


def report(term, count):
    """The `count`th /status report on the terminal, from its command to the session's totals."""
    lines = term.wait_until(lambda: term.text().count("this session ") >= count, what=f"/status {count}")
    starts = [i for i, line in enumerate(lines) if "› /status" in line]
    text = "\n".join(lines[starts[count - 1]:])
    return " ".join(text[:text.index("this session ")].split())
