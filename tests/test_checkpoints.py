"""Checkpoints through the real agent loop: a scripted model, real commands and edits in temp folders, a real git
store under ANGES_HOME; then diff and undo as the library offers them."""

import hashlib
import os
import stat
import subprocess

import pytest

from anges.agents import DefaultAgent
from anges.checkpoints import Checkpoints
from anges.config.loading import load_config
from anges.exceptions import CheckpointError, StreamBusy, UndoRefused
from anges.models.scripted import ScriptedModel
from anges.store.event_store import EventStore

BINARY = bytes(range(256)) * 4


def reply(*actions):
    return {"analysis": "", "reasoning": "next", "actions": list(actions)}


def shell(command):
    return reply({"action_type": "RUN_SHELL_CMD", "command": command})


def edit(directive, content=""):
    return reply({"action_type": "EDIT_FILE", "directive_line": directive, "content": content})


def complete(text="done"):
    return reply({"action_type": "TASK_COMPLETE", "content": text})


def run(folder, *replies, config=None, agent=None, request="work"):
    """Run one request through the real loop; returns the agent (reused for a follow-up when given)."""
    if agent is None:
        agent = DefaultAgent(inference_func=ScriptedModel(list(replies)), cmd_init_dir=folder,
                             config=config or load_config())
    else:
        agent.inference_func.enqueue(*replies)
    agent.run_with_new_request(request)
    return agent


def tree(folder):
    """Every file under `folder` (not .git): relative path -> (bytes or link target, executable bit)."""
    found = {}
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in files:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, folder)
            if os.path.islink(path):
                found[rel] = ("link", os.readlink(path))
            else:
                with open(path, "rb") as file:
                    found[rel] = (file.read(), bool(os.stat(path).st_mode & stat.S_IXUSR))
    return found


def step_numbers(agent):
    return [step.number for step in agent.checkpoints.steps()]


def test_undo_after_an_edit_restores_the_file_and_the_resumed_prompt_says_so(tmp_path):
    (tmp_path / "app.py").write_text("print('one')\n")
    agent = run(tmp_path, edit("REPLACE_LINES app.py 1-1", "print('two')"), complete())
    edit_event = agent.event_stream.events_list[1]
    assert edit_event.type == "edit_file" and edit_event.data["checkpoint"]["id"] == 1
    assert (tmp_path / "app.py").read_text() == "print('two')\n"

    diff = agent.checkpoints.diff()
    assert [(c.name, c.status) for c in diff.files] == [("app.py", "modified")]
    assert "-print('one')\n+print('two')" in diff.text and diff.stat_line == "1 file changed, 1 insertion(+), 1 deletion(-)"

    plan = agent.checkpoints.undo()
    assert plan.to.number == 2 and (tmp_path / "app.py").read_text() == "print('one')\n"
    restored = agent.event_stream.events_list[-1]
    assert restored.type == "workspace_restored" and restored.data["to_step"] == 2
    assert EventStore().load(agent.uid).events_list[-1].type == "workspace_restored"  # persisted

    run(tmp_path, complete("noted"), agent=agent, request="go on")
    prompt = agent.inference_func.prompts[-1]
    assert "UNDONE by the user: the files are back as they were before event 2" in prompt
    assert "Changed back: app.py." in prompt
    assert prompt.index("TYPE: WORKSPACE_RESTORED") < prompt.index("TYPE: FOLLOW_UP_REQUEST")


def test_the_checkpoint_commits_are_ones_git_itself_accepts(tmp_path):
    (tmp_path / "app.py").write_text("one\n")
    agent = run(tmp_path, shell("echo two > app.py"), shell("echo three > app.py"), complete())
    git = agent.checkpoints.files.git(str(tmp_path))
    commits = git.run("rev-list", "checkpoints").decode().split()
    assert len(commits) == 3  # before each command, and at the end
    checked = subprocess.run([git.git, "fsck", "--strict", "--no-dangling"], env=git.env, capture_output=True)
    assert (checked.returncode, checked.stderr) == (0, b"")
    shown = [git.run("show", f"{commit}:app.py").decode() for commit in commits]
    assert shown == ["three\n", "two\n", "one\n"]
    assert git.run("log", "-1", "--format=%an <%ae>|%s", commits[0]).decode().strip() == "anges <anges@localhost>|checkpoint"


def test_a_first_checkpoint_whose_file_list_overflows_a_pipe_is_taken_whole(tmp_path):
    names = [f"module_with_a_rather_long_descriptive_name_{n:05d}.py" for n in range(2000)]  # 100 KB of paths
    for name in names:
        (tmp_path / name).write_text(name)
    agent = run(tmp_path, shell("rm module_with_a_rather_long_descriptive_name_00000.py"), complete())
    assert agent.checkpoints.diff().files[0].status == "deleted"
    git = agent.checkpoints.files.git(str(tmp_path))
    assert git.run("ls-tree", "--name-only", "-z", "checkpoints~1").decode().split("\0")[:-1] == names


def test_undo_after_a_command_that_created_deleted_renamed_and_chmodded_files(tmp_path):
    (tmp_path / "keep.txt").write_text("keep\n")
    (tmp_path / "gone.txt").write_text("soon deleted\n")
    (tmp_path / "old.bin").write_bytes(BINARY)
    (tmp_path / "tool.sh").write_text("echo hi\n")
    (tmp_path / "data.bin").write_bytes(b"\x00\x01before")
    os.symlink("keep.txt", tmp_path / "link")
    before = tree(tmp_path)
    command = ("rm gone.txt && mv old.bin new.bin && chmod +x tool.sh && printf 'x\\000y' > made.bin"
               " && printf '\\000after' > data.bin && mkdir -p deep/er && echo n > deep/er/new.txt"
               " && rm link && ln -s gone.txt link")
    agent = run(tmp_path, shell(command), complete())
    assert agent.event_stream.events_list[1].data["exit_code"] == 0
    after = tree(tmp_path)
    assert after != before and os.access(tmp_path / "tool.sh", os.X_OK)

    statuses = {c.name: c.status for c in agent.checkpoints.diff().files}
    assert statuses == {"gone.txt": "deleted", "old.bin": "deleted", "new.bin": "added", "made.bin": "added",
                        "tool.sh": "modified", "data.bin": "modified", "deep/er/new.txt": "added",
                        "link": "modified"}
    assert "Binary files" in agent.checkpoints.diff().text

    agent.checkpoints.undo()
    assert tree(tmp_path) == before
    assert not (tmp_path / "deep").exists()  # the folder the command made goes with its file
    assert stat.S_IMODE(os.stat(tmp_path / "tool.sh").st_mode) & 0o111 == 0


def test_the_default_undo_skips_trailing_steps_that_changed_no_file(tmp_path):
    (tmp_path / "a.txt").write_text("a0\n")
    agent = run(tmp_path, edit("REPLACE_LINES a.txt 1-1", "a1"), shell("cat a.txt"), shell("ls"), complete())
    assert step_numbers(agent) == [2, 3, 4]
    plan = agent.checkpoints.plan_undo()
    assert plan.to.number == 2 and [step.number for step in plan.steps] == [2, 3, 4], "the edit, not the last ls"
    assert [change.name for change in plan.diff.files] == ["a.txt"]
    agent.checkpoints.undo()
    assert (tmp_path / "a.txt").read_text() == "a0\n"


def test_a_change_made_after_the_run_does_not_make_its_last_step_the_default(tmp_path):
    agent = run(tmp_path, shell("echo made > made.txt"), shell("true"), complete())
    (tmp_path / "mine.txt").write_text("the user's own\n")
    plan = agent.checkpoints.plan_undo()
    assert plan.to.number == 2, "the run's own last change; the user's file is not the agent's step"


def test_undo_to_an_earlier_step_takes_back_every_later_one(tmp_path):
    (tmp_path / "a.txt").write_text("a0\n")
    agent = run(tmp_path, edit("REPLACE_LINES a.txt 1-1", "a1"), shell("echo b1 > b.txt"),
                edit("REPLACE_LINES a.txt 1-1", "a2"), complete())
    assert step_numbers(agent) == [2, 3, 4]
    one_step = agent.checkpoints.diff(step=3)
    assert [c.name for c in one_step.files] == ["b.txt"]

    plan = agent.checkpoints.undo(to=3)
    assert [step.number for step in plan.steps] == [3, 4]
    assert (tmp_path / "a.txt").read_text() == "a1\n" and not (tmp_path / "b.txt").exists()
    steps = agent.checkpoints.steps()
    assert [(s.number, s.undone) for s in steps] == [(2, False), (3, True), (4, True), (6, False)]

    agent.checkpoints.undo()  # the default: the last step still in effect, step 2
    assert (tmp_path / "a.txt").read_text() == "a0\n"
    with pytest.raises(CheckpointError, match="every step was undone already"):
        agent.checkpoints.plan_undo()

    agent.checkpoints.undo(to=7)  # restoring to before an undo takes that undo back
    assert (tmp_path / "a.txt").read_text() == "a1\n"
    with pytest.raises(CheckpointError, match=r"step 5 .* has no checkpoint \(steps with one: 2, 3, 4, 6, 7, 8\)"):
        agent.checkpoints.undo(to=5)


def _git(folder, *args, env=None):
    return subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True, env=env)


def _digest(folder):
    """Names, modes, times and bytes of every file under `folder`."""
    entries = []
    for root, dirs, files in sorted(os.walk(folder)):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            st = os.lstat(path)
            body = os.readlink(path).encode() if os.path.islink(path) else open(path, "rb").read()
            entries.append((os.path.relpath(path, folder), st.st_mode, st.st_mtime_ns, hashlib.sha256(body).digest()))
    return entries


def test_a_repository_stays_untouched_and_none_of_its_hooks_filters_or_config_run(tmp_path, monkeypatch):
    project, marker = tmp_path / "project", tmp_path / "MARKER"
    project.mkdir()
    evil = f"sh -c 'echo ran >> {marker}; cat'"
    (project / "lf.txt").write_bytes(b"one\ntwo $Id$\n")
    (project / ".gitattributes").write_text("* filter=evil diff=evil text eol=crlf ident\n")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    identity = {**clean, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
                "GIT_COMMITTER_EMAIL": "t@x", "HOME": str(tmp_path)}
    _git(project, "init", "-q", env=identity)
    _git(project, "add", "-A", env=identity)
    _git(project, "commit", "-qm", "first", env=identity)
    (project / "lf.txt").write_bytes(b"one\ntwo $Id$\n")  # what the attributes would have changed on checkout
    hooks = project / ".git" / "hooks"
    for name in ("pre-commit", "post-commit", "post-checkout", "post-index-change", "reference-transaction",
                 "pre-auto-gc", "post-rewrite", "fsmonitor-watchman"):
        (hooks / name).write_text(f"#!/bin/sh\necho {name} >> {marker}\n")
        (hooks / name).chmod(0o755)
    evil_config = (f"[core]\n\tfsmonitor = {marker}.fsmonitor\n\thooksPath = {hooks}\n\tpager = {evil}\n"
                   f"[filter \"evil\"]\n\tclean = {evil}\n\tsmudge = {evil}\n\tprocess = {evil}\n\trequired = true\n"
                   f"[diff \"evil\"]\n\ttextconv = {evil}\n\tcommand = {evil}\n[diff]\n\texternal = {evil}\n")
    (project / ".git" / "config").write_text((project / ".git" / "config").read_text() + evil_config)
    (tmp_path / ".gitconfig").write_text(evil_config)  # the user's own, as HOME says
    (tmp_path / f"{marker.name}.fsmonitor").write_text(f"#!/bin/sh\necho fsmonitor >> {marker}\n")
    (tmp_path / f"{marker.name}.fsmonitor").chmod(0o755)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("GIT_DIR", str(project / ".git"))  # a user's variables must not lead anges' git there
    monkeypatch.setenv("GIT_INDEX_FILE", str(project / ".git" / "index"))
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", f"'core.fsmonitor'='{marker}.fsmonitor'")
    monkeypatch.setenv("GIT_EXTERNAL_DIFF", str(tmp_path / f"{marker.name}.fsmonitor"))
    before = _digest(project / ".git")

    agent = run(project, edit("REPLACE_LINES lf.txt 1-1", "ONE"), shell("echo new > new.txt"), complete())
    assert (project / "lf.txt").read_bytes() == b"ONE\ntwo $Id$\n"
    assert "+ONE" in agent.checkpoints.diff().text
    agent.checkpoints.undo(to=2)

    assert (project / "lf.txt").read_bytes() == b"one\ntwo $Id$\n"  # byte for byte: no eol, ident or filter
    assert not (project / "new.txt").exists()
    assert not marker.exists(), marker.read_text()
    assert _digest(project / ".git") == before
    assert ".git" not in {c.name.split("/")[0] for c in agent.checkpoints.diff().files}


def test_a_file_changed_by_someone_else_after_the_run_is_not_overwritten_unless_asked(tmp_path):
    (tmp_path / "notes.txt").write_text("mine\n")
    agent = run(tmp_path, shell("echo agent >> notes.txt && echo x > made.txt"), complete())
    (tmp_path / "notes.txt").write_text("mine, edited by hand after the run\n")

    plan = agent.checkpoints.plan_undo()
    assert [(c.path, c.why) for c in plan.conflicts] == [
        ("notes.txt", "changed after the checkpoint by someone other than the agent")]
    with pytest.raises(UndoRefused, match="notes.txt") as refused:
        agent.checkpoints.undo()
    assert refused.value.paths == ["notes.txt"]
    assert (tmp_path / "notes.txt").read_text() == "mine, edited by hand after the run\n"
    assert (tmp_path / "made.txt").exists()  # nothing was undone
    assert agent.event_stream.events_list[-1].type == "task_completion"

    agent.checkpoints.undo(overwrite=True)
    assert (tmp_path / "notes.txt").read_text() == "mine\n" and not (tmp_path / "made.txt").exists()
    assert agent.event_stream.events_list[-1].data["overwrote"] == ["notes.txt"]


def test_an_undo_planned_before_the_files_changed_again_is_refused(tmp_path):
    agent = run(tmp_path, shell("echo 1 > a.txt"), complete())
    plan = agent.checkpoints.plan_undo()
    (tmp_path / "a.txt").write_text("2\n")
    with pytest.raises(UndoRefused, match="changed since this undo was planned"):
        agent.checkpoints.undo(expect=plan.token, overwrite=True)
    assert (tmp_path / "a.txt").read_text() == "2\n"


def test_an_ignored_folder_and_a_large_file_are_left_out_and_said_so(tmp_path):
    config = load_config(overrides={"checkpoints": {"max_file_bytes": 1000}})
    (tmp_path / ".gitignore").write_text("node_modules/\n")
    (tmp_path / "node_modules").mkdir()
    (tmp_path / "node_modules" / "old.js").write_text("old\n")
    agent = run(tmp_path, shell("echo lib > node_modules/lib.js && head -c 5000 /dev/zero > big.bin"),
                shell("echo more > small.txt"), complete(), config=config)
    second = agent.event_stream.events_list[2].data["checkpoint"]  # the record of the step after the first
    assert second["left_out"] == {"ignored": ["node_modules/"], "too_big": ["big.bin"]}

    plan = agent.checkpoints.plan_undo(to=2)
    assert {(c.path, c.why) for c in plan.left_alone} == {
        ("big.bin", "over the size limit (5,000 bytes): checkpoints do not cover it")}
    agent.checkpoints.undo(to=2)
    assert (tmp_path / "node_modules" / "lib.js").read_text() == "lib\n"  # ignored: left alone
    assert (tmp_path / "big.bin").stat().st_size == 5000  # too big: left alone
    assert not (tmp_path / "small.txt").exists()
    told = agent.event_stream.events_list[-1].content
    assert "Left as they are: big.bin (over the size limit (5,000 bytes)" in told


def test_an_ignored_folder_a_step_creates_is_named_in_the_undo(tmp_path):
    (tmp_path / ".gitignore").write_text("build/\n")
    agent = run(tmp_path, shell("mkdir build && echo o > build/out.o && echo s > src.c"), complete())
    plan = agent.checkpoints.plan_undo()
    assert [(c.path, c.why) for c in plan.left_alone] == [
        ("build/", "ignored (.gitignore): checkpoints do not cover it")]
    agent.checkpoints.undo()
    assert (tmp_path / "build" / "out.o").exists() and not (tmp_path / "src.c").exists()
    assert "Left as they are: build/ (ignored (.gitignore): checkpoints do not cover it)" in \
        agent.event_stream.events_list[-1].content


def test_a_file_ignored_at_the_checkpoint_is_not_deleted_when_the_step_unignores_it(tmp_path):
    (tmp_path / ".gitignore").write_text("secret.env\n")
    (tmp_path / "secret.env").write_text("TOKEN=1\n")
    agent = run(tmp_path, shell("echo > .gitignore"), complete())
    plan = agent.checkpoints.plan_undo()
    assert ("secret.env", "it was ignored (.gitignore) at the checkpoint") in {(c.path, c.why) for c in plan.left_alone}
    agent.checkpoints.undo()
    assert (tmp_path / "secret.env").read_text() == "TOKEN=1\n"
    assert (tmp_path / ".gitignore").read_text() == "secret.env\n"


def test_undo_never_writes_through_a_link_a_step_put_in_the_way(tmp_path):
    work, outside = tmp_path / "work", tmp_path / "outside"
    (work / "src").mkdir(parents=True)
    outside.mkdir()
    (work / "src" / "a.py").write_text("a\n")
    agent = run(work, shell(f"rm -r src && ln -s {outside} src"), complete(),
                config=load_config(overrides={"safety": {"sandbox": "off", "approval": "auto"}}))
    agent.checkpoints.undo()
    assert not (work / "src").is_symlink() and (work / "src" / "a.py").read_text() == "a\n"
    assert list(outside.iterdir()) == []


def test_a_step_that_could_write_outside_the_folders_is_named_by_the_undo(tmp_path):
    config = load_config(overrides={"safety": {"sandbox": "off", "approval": "auto"}})
    agent = run(tmp_path, shell("echo x > f.txt"), complete(), config=config)
    assert agent.checkpoints.steps()[0].entry.outside
    plan = agent.checkpoints.undo()
    assert [step.number for step in plan.outside] == [2]
    assert "Event 2 could change files outside the working directory" in agent.event_stream.events_list[-1].content


def test_checkpoints_off_takes_none(tmp_path, anges_home):
    config = load_config(overrides={"checkpoints": {"enabled": False}})
    agent = run(tmp_path, shell("echo x > f.txt"), complete(), config=config)
    assert "checkpoint" not in agent.event_stream.events_list[1].data
    assert not (anges_home / "data" / "checkpoints").exists()
    with pytest.raises(CheckpointError, match="has no checkpoints"):
        agent.checkpoints.undo()


def test_without_git_the_run_goes_on_and_the_step_says_why(tmp_path):
    config = load_config(overrides={"checkpoints": {"git": str(tmp_path / "no-such-git")}})
    agent = run(tmp_path, shell("echo x > f.txt"), shell("echo y > g.txt"), complete(), config=config)
    events = agent.event_stream.events_list
    assert agent.status == "completed" and (tmp_path / "g.txt").exists()
    assert "is not an executable absolute path" in events[1].data["checkpoint"]["error"]
    assert "checkpoint" not in events[2].data  # said once: checkpoints are off for the rest of the run


def test_an_answer_takes_no_checkpoint_and_an_undo_waits_for_the_run(tmp_path):
    agent = run(tmp_path, complete("nothing to change"))
    assert agent.checkpoints.steps() == []
    busy = {}

    def try_undo(_prompt):
        try:
            agent.checkpoints.undo()
        except StreamBusy as exc:
            busy["error"] = str(exc)
        return shell("echo x > f.txt")

    run(tmp_path, try_undo, complete(), agent=agent, request="again")
    assert "error" in busy  # the run held the stream: no undo under its feet
    assert step_numbers(agent) == [4]


def test_a_child_agent_shares_its_parents_store_and_both_can_be_undone(tmp_path, anges_home):
    from anges.agents import Orchestrator

    replies = [
        reply({"action_type": "CALL_CHILD_AGENT", "directive": "NEW_CHILD_AGENT TASK_EXECUTOR",
               "agent_input": "make it"}),
        shell("echo child > child.txt"), complete("made"),
        complete("all done"),
    ]
    agent = Orchestrator(inference_func=ScriptedModel(replies), cmd_init_dir=tmp_path, config=load_config())
    agent.run_with_new_request("delegate")
    assert (tmp_path / "child.txt").exists()
    assert [p.name for p in (anges_home / "data" / "checkpoints").iterdir()] == [agent.uid]
    child = EventStore().children(agent.uid)[0]
    child_checkpoints = Checkpoints(EventStore().load(child.uid), EventStore())
    assert [c.name for c in child_checkpoints.diff().files] == ["child.txt"]
    assert [c.name for c in agent.checkpoints.diff().files] == ["child.txt"]  # the parent's run covers its child's
    agent.checkpoints.undo()
    assert not (tmp_path / "child.txt").exists()


def test_a_stop_during_a_checkpoint_ends_the_run_at_once_and_its_git(tmp_path):
    import threading
    import time

    from helpers import process_alive

    started = tmp_path / "git-started"
    slow_git = tmp_path / "slow-git"
    slow_git.write_text(f"#!/bin/sh\necho $$ > {started}\nexec sleep 30\n")
    slow_git.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    config = load_config(overrides={"checkpoints": {"git": str(slow_git)}})
    agent = DefaultAgent(inference_func=ScriptedModel([shell("echo x > f.txt"), complete()]), cmd_init_dir=work,
                         config=config)
    runner = threading.Thread(target=agent.run_with_new_request, args=("work",))
    runner.start()
    deadline = time.monotonic() + 20
    while not (started.exists() and started.read_text().strip()):
        assert time.monotonic() < deadline, "the checkpoint never started git"
        time.sleep(0.02)
    stopped_at = time.monotonic()
    agent.interrupt("test")
    runner.join(10)
    assert not runner.is_alive() and time.monotonic() - stopped_at < 2
    last = agent.event_stream.events_list[-1]
    assert last.type == "task_interrupted" and last.data["reason"] == "interrupt"
    assert not (work / "f.txt").exists()  # the step did not run without its checkpoint
    assert not process_alive(int(started.read_text()))


def test_odd_file_names_are_checkpointed_and_undone_like_any_other(tmp_path):
    odd = ["-rf", "sp ace.txt", "new\nline", "tab\tbed", "ütf-8 ✓", "back\\slash", "*glob?[x]", "#hash", "!bang"]
    for name in odd:
        (tmp_path / name).write_text(f"{name}\n")
    (tmp_path / b"\xff\xfe-latin".decode(errors="surrogateescape")).write_bytes(b"raw\n")
    before = tree(tmp_path)
    agent = run(tmp_path, shell("for f in ./*; do echo changed > \"$f\"; done && touch -- ./-n ./'a b'"), complete())
    assert tree(tmp_path) != before
    statuses = {c.name: c.status for c in agent.checkpoints.diff().files}
    assert statuses["new\nline"] == "modified" and statuses["-n"] == "added" and statuses["a b"] == "added"
    agent.checkpoints.undo()
    assert tree(tmp_path) == before


def test_steps_undo_and_the_model_use_the_numbers_of_the_models_own_history(tmp_path):
    """An approval request takes no number in the history (its answer does); the steps, the undo and its text give
    each event the number the model's own history gives it."""
    import re

    rules = [{"action": "RUN_SHELL_CMD", "match": "echo *", "decision": "ask", "reason": "a person looks"}]
    config = load_config(overrides={"safety": {"rules": rules, "approval": "ask", "sandbox": "off"}})
    agent = DefaultAgent(inference_func=ScriptedModel([shell("echo a > a.txt"), shell("cat a.txt"),
                                                       shell("echo b > b.txt"), complete()]),
                         cmd_init_dir=tmp_path, config=config, approval=lambda request: "allow")
    agent.run_with_new_request("work")
    assert sum(e.type == "approval_requested" for e in agent.event_stream.events_list) == 3
    assert step_numbers(agent) == [3, 5, 7], "each command's number in the history, not its place in the file"

    agent.checkpoints.undo(to=5)
    run(tmp_path, complete("noted"), agent=agent, request="go on")
    prompt = agent.inference_func.prompts[-1]
    history = dict((int(n), kind) for n, kind in re.findall(r"^## Event (\d+) TYPE: (\w+)", prompt, re.M))
    assert history[3] == history[5] == history[7] == "RUN_SHELL_CMD" and history[8] == "TASK_COMPLETE"
    assert history[9] == "WORKSPACE_RESTORED" and history[10] == "FOLLOW_UP_REQUEST"
    assert "as they were before event 5 (" in prompt and "The work of events 5, 7 on these files" in prompt
    assert [(s.number, s.undone, s.changed) for s in agent.checkpoints.steps()] == [
        (3, False, True), (5, True, False), (7, True, True), (9, False, True)]
