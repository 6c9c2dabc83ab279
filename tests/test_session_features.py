"""The session's everyday features (issue 40's "Missing" list), driven through a real pseudo-terminal and read as a
person reads it (pyte)."""

import json
import os
import re

from terminal_screen import ENTER
from test_cli import complete, scripted
from test_session import BOX, finished, sessions  # noqa: F401  (the fixture)

from anges.store.event_store import EventStore


def test_resume_picker_shows_age_and_folder_and_filters(tmp_path, sessions):  # noqa: F811
    for folder, title in (("alpha", "alpha task"), ("beta", "beta task")):
        (tmp_path / folder).mkdir()
        model = scripted(tmp_path, complete("done"), name=f"{folder}.json")
        term = sessions("-i", "-q", title, "--model", model, cwd=tmp_path / folder)
        finished(term)
        term.close()
    term = sessions("--model", scripted(tmp_path, complete("go on"), name="next.json"), cwd=tmp_path)
    term.send("/resume\r")
    screen = "\n".join(term.wait_for("resume which run?", on_screen=True))
    picker = screen[screen.index("resume which run?"):]
    assert re.search(r"just now\s+\S*alpha\s+completed\s+alpha task", picker), picker
    term.send("alph")
    term.wait_until(lambda: "beta task" not in "\n".join(term.display()), what="the filter")
    term.send(ENTER)
    alpha = next(info for info in EventStore().list() if info.title == "alpha task")
    term.wait_for(f"resumed {alpha.uid}")


def test_model_picker_changes_the_model(openai_server, tmp_path, sessions):  # noqa: F811
    openai_server.enqueue_text(json.dumps(complete("from the chosen model")))
    (tmp_path / "models.yaml").write_text("models:\n  mine:\n    provider: openai\n    model: gpt-mine\n")
    term = sessions("--config", "models.yaml", "--model", scripted(tmp_path, complete()), cwd=tmp_path,
                    env={**os.environ, **openai_server.env})
    term.send("/model\r")
    term.wait_for("which model?", on_screen=True)
    term.send("mine")
    term.wait_until(lambda: "› mine" in "\n".join(term.display()), what="the filtered choice")
    term.send(ENTER)
    term.wait_for("model: mine:gpt-mine")
    term.send("go\r")
    term.wait_for("from the chosen model")
    assert openai_server.requests[-1].body["model"] == "gpt-mine"
