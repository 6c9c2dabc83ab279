"""The pieces `anges acp` builds its updates from: an edit's diff as old/new text, the orchestrator's plan."""

import pytest

from anges.acp.diffs import file_texts, hunk_texts
from anges.acp.plan import plan_entries
from anges.tools.fileedit import apply_edit

BEFORE = "".join(f"line {n}\n" for n in range(1, 21))


@pytest.mark.parametrize("directive, content", [
    ("REPLACE_LINES f.txt 2-3", "two\nthree\n"),
    ("REPLACE_LINES f.txt 5-5", ""),
    ("REMOVE_LINES f.txt 1-20", ""),
    ("INSERT_LINES f.txt 0", "first\n"),
    ("INSERT_LINES f.txt -1", "last\n"),
    ("INSERT_LINES f.txt 11", "middle\n"),
    ("REPLACE_LINES f.txt 20-20", "no newline at the end"),
])
def test_the_whole_file_before_and_after_an_edit(tmp_path, directive, content):
    path = tmp_path / "f.txt"
    path.write_text(BEFORE)
    result = apply_edit(directive, content, base_dir=tmp_path)
    assert file_texts(str(path), result.diff) == (BEFORE, path.read_text())


def test_a_new_file_has_no_old_text(tmp_path):
    result = apply_edit("NEW_FILE made/new.txt", "a\nb\n", base_dir=tmp_path)
    assert file_texts(str(tmp_path / "made/new.txt"), result.diff) == (None, "a\nb\n")
    assert hunk_texts(result.diff) == [(None, "a\nb\n")]


def test_a_file_changed_since_the_edit_shows_the_changed_parts_only(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text(BEFORE)
    result = apply_edit("REPLACE_LINES f.txt 10-10", "ten\n", base_dir=tmp_path)
    path.write_text(path.read_text().replace("ten\n", "TEN\n"))
    assert file_texts(str(path), result.diff) is None
    old, new = hunk_texts(result.diff)[0]
    assert "line 10\n" in old and "ten\n" in new and old.replace("line 10\n", "ten\n") == new
    assert len(old.splitlines()) == 7, "the hunk keeps three lines of context on each side"


def test_a_missing_or_binary_file_has_no_whole_text(tmp_path):
    result = apply_edit("NEW_FILE f.txt", "x\n", base_dir=tmp_path)
    assert file_texts(str(tmp_path / "gone.txt"), result.diff) is None
    (tmp_path / "f.txt").write_bytes(b"\xff\xfe\n")
    assert file_texts(str(tmp_path / "f.txt"), result.diff) is None


@pytest.mark.parametrize("text, entries", [
    ("Plan:\n1. [x] read the code\n2. [~] fix the bug\n3. [ ] add a test\nThen report.",
     [("read the code", "completed"), ("fix the bug", "in_progress"), ("add a test", "pending")]),
    ("Steps so far:\n- analyze (done)\n- implement (in progress, executor abc)\n- verify",
     [("analyze (done)", "completed"), ("implement (in progress, executor abc)", "in_progress"), ("verify", "pending")]),
    ("1) ✓ plan\n2) build\n\nNotes:\n- not part of the plan", [("✓ plan", "completed"), ("build", "pending")]),
    ("Only one step:\n1. do it", []),
    ("No list at all, just prose.", []),
])
def test_the_first_list_of_the_reasoning_is_the_plan(text, entries):
    assert plan_entries(text) == entries


def test_a_parents_reply_while_its_child_runs_is_shown_as_the_parents(tmp_path):
    import itertools
    import json

    from anges.acp.updates import Speaker, UpdateMapper
    from anges.store.events import Event

    def answer(*actions):
        return json.dumps({"analysis": "", "reasoning": "thinking", "actions": list(actions)})

    sent = []
    mapper = UpdateMapper(sent.append, str(tmp_path), itertools.count())
    parent, child = Speaker("parent000001", "orchestrator"), Speaker("child0000001", "task_executor", "parent000001", 1)
    mapper.event(Event("new_request", content="go"), parent)
    mapper.event(Event("new_request_from_parent", content="work"), child)
    mapper.reply(answer({"action_type": "CALL_CHILD_AGENT", "directive": "NEW_CHILD_AGENT TASK_EXECUTOR",
                         "agent_input": "more"}), "parent000001")
    mapper.reply(answer({"action_type": "RUN_SHELL_CMD", "command": "ls"}), "child0000001")
    mapper.event(Event("new_child_agent", content="more", data={"agent_id": "child0000002",
                                                                "agent_type": "task_executor"}), parent)
    mapper.reply(answer({"action_type": "WAIT_FOR_CHILDREN"}), "parent000001")

    thoughts = [u.content.text for u in sent if u.session_update == "agent_thought_chunk"]
    assert thoughts == ["thinking", "[task_executor] thinking", "thinking"]
    started = [u.title for u in sent if u.session_update == "tool_call"]
    assert started == ["Delegate to task_executor", "[task_executor] ls"], "waiting is no tool call"
    assert not [u for u in sent if getattr(u, "status", "") == "failed"], "the child's reply closed none of the parent's"
