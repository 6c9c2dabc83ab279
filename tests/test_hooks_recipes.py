"""The recipes of docs/hooks.md, as written there, in real runs with real tools (ruff, pytest, git)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from anges.agents import DefaultAgent
from anges.config.loading import load_config
from anges.models.scripted import ScriptedModel

DOCS = Path(__file__).resolve().parents[1] / "docs" / "hooks.md"


def recipe(heading: str) -> list[dict]:
    """The hooks of the recipe under `### heading` in docs/hooks.md."""
    text = DOCS.read_text()
    section = text[text.index(f"### {heading}"):]
    block = re.search(r"```yaml\n(.*?)```", section, flags=re.S)
    assert block is not None, heading
    return yaml.safe_load(block.group(1))["hooks"]


def reply(*actions):
    return {"analysis": "", "reasoning": "because", "actions": list(actions)}


def shell(command):
    return {"action_type": "RUN_SHELL_CMD", "command": command}


def edit(directive, content):
    return {"action_type": "EDIT_FILE", "directive_line": directive, "content": content}


def complete(content="done"):
    return reply({"action_type": "TASK_COMPLETE", "content": content})


@pytest.fixture
def tools_on_path(monkeypatch):
    """This interpreter's folder first on PATH: the hooks find its ruff, python3 and pytest."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")


def run(work, replies, hooks, **kwargs):
    model = ScriptedModel(replies)
    config = load_config(overrides={"hooks": hooks, **kwargs.pop("overrides", {})})
    agent = DefaultAgent(inference_func=model, cmd_init_dir=work, config=config, **kwargs)
    return agent.run_with_new_request("go"), model


def test_the_formatter_changes_the_file_the_model_then_reads_and_the_linter_speaks_to_it(work, tools_on_path):
    hooks = recipe("Format and lint each Python file the agent edits")
    stream, model = run(work, [reply(edit("NEW_FILE app.py", "x = {  'a':1 }\nimport os\n")),
                               reply(shell("cat app.py")), complete()], hooks)
    assert (work / "app.py").read_text() == 'x = {"a": 1}\nimport os\n'
    shown = next(e for e in stream.events_list if e.data.get("command") == "cat app.py")
    assert 'x = {"a": 1}' in shown.content, "the model read the formatted file"
    said = next(e for e in stream.events_list if e.type == "hook_feedback")
    assert "F401" in said.data["context"] and "app.py" in said.data["context"]
    assert "A hook ran after EDIT_FILE" in model.prompts[1] and "F401" in model.prompts[1]


def test_a_force_push_and_a_migration_are_refused_with_the_reason_in_the_next_prompt(work):
    hooks = recipe("Refuse a force push, and edits in `migrations/`")
    (work / "migrations").mkdir()
    stream, model = run(work, [reply(shell("touch pushed; git push --force origin main")),
                               reply(edit("NEW_FILE migrations/0002.sql", "DROP TABLE users;\n")),
                               reply(shell("touch fine")), complete()], hooks)
    assert not (work / "pushed").exists() and not (work / "migrations" / "0002.sql").exists()
    assert (work / "fine").exists()
    force = hooks[0]["match"]["pattern"]
    assert re.search(force, "git push -f origin main") and not re.search(force, "git push origin main")
    assert "force-pushing is not allowed here: push without --force, or ask the user" in model.prompts[1]
    assert "migrations are written by hand here: describe the change instead" in model.prompts[2]
    assert [e.data["hook"] for e in stream.events_list if e.type == "hook_feedback"] == ["no-force-push",
                                                                                       "no-migrations"]


def test_the_tests_send_the_model_back_once_then_let_it_finish(work, tools_on_path):
    hooks = recipe("Run the tests when the model says it is done")
    (work / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (work / "test_calc.py").write_text("from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n")
    stream, model = run(work, [complete("added add()"),
                               reply(edit("REPLACE_LINES calc.py 2-2", "    return a + b\n")),
                               complete("added add(), and the tests pass")], hooks)
    assert stream.events_list[-1].content == "added add(), and the tests pass"
    sent_back = [e for e in stream.events_list if e.type == "hook_feedback"]
    assert len(sent_back) == 1 and "NOT DONE YET" in model.prompts[1]
    assert "1 failed" in sent_back[0].data["reason"] and "assert -1 == 5" in model.prompts[1]
    passed = [e for e in stream.events_list if e.type == "hook_ran" and e.data["hook_event"] == "before_complete"]
    assert passed[-1].data["outcome"] == "ok"


def test_the_current_branch_is_added_to_each_request(work):
    subprocess.run(["git", "init", "-q", "-b", "feature-x"], cwd=work, check=True)
    _, model = run(work, [complete()], recipe("Add the current branch to each request"))
    assert "A hook adds context to this request:\nCurrent git branch: feature-x" in model.prompts[0]


def test_the_desktop_is_told_when_an_approval_waits(work, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "notify-send").write_text(f'#!/bin/sh\nprintf "%s|%s\\n" "$1" "$2" >> {tmp_path}/notified\n')
    (bin_dir / "notify-send").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    rules = {"safety": {"approval": "ask", "rules": [{"action": "RUN_SHELL_CMD", "match": "touch *", "decision": "ask",
                                                      "reason": "touching files"}]}}
    notified = []
    run(work, [reply(shell("touch approved.txt")), complete()], recipe("Notify the desktop when an approval waits"),
        overrides=rules, approval=lambda request: notified.append((tmp_path / "notified").read_text()) or True)
    assert notified == ["anges needs your approval|touch approved.txt\n"], "told before the person answered"
    assert (work / "approved.txt").exists()


def test_every_command_is_logged_to_the_audit_file(work, anges_home):
    stream, _ = run(work, [reply(shell("echo one")), reply(shell("echo two; true")), complete()],
                    recipe("Log every command to an audit file"))
    lines = (anges_home / "commands.log").read_text().splitlines()
    assert [line.split(" ", 1)[1] for line in lines] == ["echo one", "echo two; true"]
    assert all(re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d ", line) for line in lines)
    assert not [e for e in stream.events_list if e.type == "hook_feedback"], "a quiet hook says nothing to the model"


def test_the_python_recipe_blocks_a_migration(work, anges_home):
    text = DOCS.read_text()
    source = re.search(r"```python\n(# ~/.anges/extensions/guard.py\n.*?)```", text, flags=re.S).group(1)
    (anges_home / "extensions").mkdir()
    (anges_home / "extensions" / "guard.py").write_text(source)
    stream, model = run(work, [reply(shell("mkdir -p migrations && touch migrations/x.sql")), complete()], [])
    assert not (work / "migrations").exists()
    assert "migrations are written by hand here" in json.dumps([e.to_dict() for e in stream.events_list])
    assert "BLOCKED by a hook" in model.prompts[1]
