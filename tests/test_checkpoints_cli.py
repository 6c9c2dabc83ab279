"""`anges diff`, `anges undo` and `anges rm` as real subprocesses on runs of the real `anges`; batch tasks' checkpoints."""

import json
import os
import subprocess
import sys
import threading

from anges.batch.tasks import TaskSpec
from anges.batch.worker import Job, run_task
from anges.config.loading import load_config
from anges.store.event_store import EventStore

ANGES = [sys.executable, "-m", "anges"]


def reply(*actions):
    return {"analysis": "", "reasoning": "next", "actions": list(actions)}


def shell(command):
    return reply({"action_type": "RUN_SHELL_CMD", "command": command})


def edit(directive, content):
    return reply({"action_type": "EDIT_FILE", "directive_line": directive, "content": content})


def complete(text="Done."):
    return reply({"action_type": "TASK_COMPLETE", "content": text})


def anges(*args, cwd, stdin=subprocess.DEVNULL):
    return subprocess.run([*ANGES, *args], cwd=cwd, stdin=stdin, capture_output=True, text=True, timeout=60,
                          check=False)


def run_task_in(folder, tmp_path, *replies):
    """A one-shot `anges -q` run in `folder`; returns its stream id."""
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(list(replies)))
    done = anges("-q", "change things", "--model", f"scripted:{script}", "--path", str(folder), "--output", "json",
                 cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["stream_id"]


def test_diff_shows_the_runs_changes_and_undo_asks_then_puts_the_files_back(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.txt").write_text("first\n")
    uid = run_task_in(work, tmp_path, edit("REPLACE_LINES a.txt 1-1", "second"), shell("echo b > b.txt"), complete())

    listed = anges("diff", uid, "--list", cwd=tmp_path)
    assert listed.stdout.splitlines() == ["2  EDIT_FILE REPLACE_LINES a.txt 1-1", "3  RUN_SHELL_CMD echo b > b.txt"]
    diff = anges("diff", uid, cwd=tmp_path)
    assert diff.returncode == 0
    assert " 2 files changed, 2 insertions(+), 1 deletion(-)" in diff.stdout
    assert "-first\n+second\n" in diff.stdout and "+++ b/b.txt" in diff.stdout
    applied = subprocess.run(["git", "apply", "-R", "--check", "--directory=work"], input=diff.stdout, text=True,
                             cwd=tmp_path, capture_output=True)
    assert applied.returncode == 0, applied.stderr  # the diff is a patch git can read
    one = anges("diff", uid, "--step", "3", cwd=tmp_path)
    assert "b.txt" in one.stdout and "a.txt" not in one.stdout

    refused = anges("undo", uid, "--to", "2", cwd=tmp_path)  # no terminal to ask on, no --yes
    assert refused.returncode == 2 and "pass --yes" in refused.stderr
    assert (work / "a.txt").read_text() == "second\n"
    assert "-second\n+first\n" in refused.stdout  # it showed the diff it would apply first

    done = anges("undo", uid, "--to", "2", "--yes", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (work / "a.txt").read_text() == "first\n" and not (work / "b.txt").exists()
    assert "taking back steps 2, 3" in done.stderr
    stream = EventStore().load(uid)
    assert stream.events_list[-1].type == "workspace_restored" and stream.events_list[-1].data["by"] == "cli"
    again = anges("undo", uid, "--yes", cwd=tmp_path)
    assert again.returncode == 2 and "every step was undone already" in again.stderr


def test_undo_refuses_to_overwrite_what_someone_else_changed_and_names_it(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    uid = run_task_in(work, tmp_path, shell("echo agent > shared.txt"), complete())
    (work / "shared.txt").write_text("mine now\n")
    refused = anges("undo", uid, "--yes", cwd=tmp_path)
    assert refused.returncode == 2
    assert "CONFLICT shared.txt: changed after the checkpoint by someone other than the agent" in refused.stderr
    assert (work / "shared.txt").read_text() == "mine now\n"
    forced = anges("undo", uid, "--yes", "--overwrite", cwd=tmp_path)
    assert forced.returncode == 0 and not (work / "shared.txt").exists()


def test_rm_removes_a_runs_checkpoints(tmp_path, anges_home):
    work = tmp_path / "work"
    work.mkdir()
    uid = run_task_in(work, tmp_path, shell("echo x > x.txt"), complete())
    store = anges_home / "data" / "checkpoints" / uid
    assert (store / "logs" / f"{uid}.jsonl").exists() and (store / "objects").is_dir()
    removed = anges("rm", uid, cwd=tmp_path)
    assert removed.returncode == 0 and not store.exists()
    assert anges("diff", "nope!", cwd=tmp_path).returncode == 2


def test_a_diff_on_a_terminal_shows_escape_sequences_instead_of_obeying_them(tmp_path):
    import pty

    work = tmp_path / "work"
    work.mkdir()
    uid = run_task_in(work, tmp_path, shell("printf 'x\\033]0;pwned\\007\\n' > t.txt"), complete())
    parent, child = pty.openpty()
    done = subprocess.run([*ANGES, "diff", uid], cwd=tmp_path, stdout=child, stderr=subprocess.PIPE, timeout=60)
    os.close(child)
    shown = b""
    while True:
        try:
            chunk = os.read(parent, 65536)
        except OSError:
            break
        if not chunk:
            break
        shown += chunk
    os.close(parent)
    assert done.returncode == 0
    assert b"\x1b]0;pwned" not in shown and b"^[]0;pwned^G" in shown
    assert b"\x1b[1;32m+\x1b[0m" in shown, "an added line's + in green: colour on a terminal"


def _batch_job(tmp_path, name):
    script = tmp_path / f"{name}.json"
    script.write_text(json.dumps([shell("echo made > made.txt"), complete()]))
    return Job(TaskSpec(name, "make a file", model=f"scripted:{script}"), "b", f"stream-{name}")


def test_batch_tasks_keep_checkpoints_unless_the_batch_setting_turns_them_off(tmp_path, anges_home):
    for name, setting in (("kept", True), ("off", False)):
        work = tmp_path / name
        work.mkdir()
        config = load_config(overrides={"checkpoints": {"batch": setting}})
        done = run_task(_batch_job(tmp_path, name), config, EventStore(), work, True, threading.Event())
        assert done["status"] == "completed", done
    kept = EventStore().load("stream-kept")
    assert kept.events_list[1].data["checkpoint"] == {"id": 1}
    assert "checkpoint" not in EventStore().load("stream-off").events_list[1].data
    assert sorted(p.name for p in (anges_home / "data" / "checkpoints").iterdir()) == ["stream-kept"]


def test_the_step_list_leaves_out_steps_that_changed_no_file_and_never_marks_them_undone(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    uid = run_task_in(work, tmp_path, shell("echo a > a.txt"), shell("cat a.txt"), shell("git log -1 || true"),
                      shell("echo b > b.txt"), complete())
    listed = anges("diff", uid, "--list", cwd=tmp_path).stdout.splitlines()
    assert listed == ["2  RUN_SHELL_CMD echo a > a.txt", "5  RUN_SHELL_CMD echo b > b.txt",
                      "(2 more steps with a checkpoint changed no file, e.g. RUN_SHELL_CMD cat a.txt)"]

    assert anges("undo", uid, "--to", "2", "--yes", cwd=tmp_path).returncode == 0
    listed = anges("diff", uid, "--list", cwd=tmp_path).stdout.splitlines()
    assert listed[:3] == ["2  RUN_SHELL_CMD echo a > a.txt  (undone)", "5  RUN_SHELL_CMD echo b > b.txt  (undone)",
                          "7  undo to before step 2"]
    assert not any("cat a.txt" in line and "undone" in line for line in listed)
