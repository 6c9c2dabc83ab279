"""A secret typed into a request never reaches a stream's title: not the meta file, `list`, `show` nor an export."""

import json
import os
import subprocess
import sys

import pytest

from anges.store.event_store import EventStore
from anges.store.events import EventStream, title_from

ANGES = [sys.executable, "-m", "anges"]
SECRET = "tok-SECRET-0123456789"


def test_a_secret_in_the_request_is_masked_in_the_title_everywhere(tmp_path):
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps([{"reasoning": "done", "actions": [{"action_type": "TASK_COMPLETE",
                                                                      "content": "deployed"}]}]))
    env = {**os.environ, "DEPLOY_TOKEN": SECRET}

    def anges(*args):
        out = subprocess.run([*ANGES, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30,
                             check=False)
        assert out.returncode == 0, out.stderr
        return out.stdout + out.stderr

    run = anges("-q", f"deploy with {SECRET} now", "--model", f"scripted:{replies}", "--output", "jsonl")
    run += anges("-q", f"again {SECRET}", "--model", f"scripted:{replies}", "--output", "json")
    [info] = [info for info in EventStore().list() if info.title.startswith("deploy")]
    meta = (EventStore().root / f"{info.uid}.meta.json").read_text()
    shown = [run, meta, anges("list"), anges("list", "--json"), anges("show", info.uid),
             anges("export", info.uid), anges("export", info.uid, "--format", "md")]
    for text in shown:
        assert SECRET not in text
    assert "deploy with [REDACTED] now" in meta and "deploy with [REDACTED] now" in shown[2]


def test_the_store_masks_a_title_whoever_set_it(monkeypatch):
    monkeypatch.setenv("SERVICE_API_KEY", SECRET)
    store = EventStore()
    stream = EventStream(title=f"chat about {SECRET}")  # as the web chat names a chat after its first message
    store.sync(stream)
    stream.title = f"renamed {SECRET}"
    store.sync(stream)

    assert store.info(stream.uid).title == "renamed [REDACTED]"
    assert SECRET not in (store.root / f"{stream.uid}.jsonl").read_text()
    assert SECRET not in (store.root / f"{stream.uid}.meta.json").read_text()


@pytest.mark.parametrize("task, title", [
    ("In /tmp/pytest-of-root/pytest-12/test_x0/orchestrator, create add.py", "Create add.py"),
    ("in ~/code/proj: fix the failing tests", "Fix the failing tests"),
    ("Inside the directory ./src run pytest", "Run pytest"),
    ("In `/srv/www/site` - update the CSS", "Update the CSS"),
    ("Fix /home/me/proj/src/app.py now", "Fix …/src/app.py now"),
    ("In Python, write a parser", "In Python, write a parser"),  # no path: a sentence, kept
    ("In /tmp", "In /tmp"),  # nothing after the place: kept
    ("Look at /etc/hosts", "Look at /etc/hosts"),
    ("read https://x.example/a/b/c/d.html", "read https://x.example/a/b/c/d.html"),
])
def test_a_title_drops_the_place_a_task_starts_with_and_shortens_long_paths(task, title):
    assert title_from(task) == title
