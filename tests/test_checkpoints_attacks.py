"""The model cannot switch off undo (issue 35, point 5): whatever a step puts in the folder (a FIFO, a socket, an
unreadable file or folder, a nested repository, a .gitignore, a symlink loop, a file that grows while it is read),
the checkpoints go on, say what they left out, and `anges diff` and `anges undo` keep working."""

import json
import os
import subprocess
import sys
import textwrap

from test_checkpoints import complete, run, shell
from test_checkpoints_cli import anges, run_task_in
from test_sandbox_edges import STRANGER_UID, stranger  # noqa: F401  (a fixture)

from anges.config.loading import load_config


def records(agent):
    """The checkpoint facts of each step's event, in order."""
    return [event.data["checkpoint"] for event in agent.event_stream.events_list if "checkpoint" in event.data]


def test_a_fifo_in_place_of_a_tracked_file_is_left_out_and_named_and_undo_brings_the_file_back(tmp_path):
    (tmp_path / "a.txt").write_text("a\n")
    (tmp_path / "b.txt").write_text("b\n")
    agent = run(tmp_path, shell("rm a.txt && mkfifo a.txt && echo 2 > b.txt"), shell("echo 3 > b.txt"),
                shell("echo 4 > b.txt"), complete())
    second, third = records(agent)[1:3]
    assert "error" not in second and second["left_out"] == {"special": ["a.txt"]}
    assert "error" not in third, "checkpoints go on after the FIFO"
    diff = agent.checkpoints.diff()
    assert ("a.txt", "a FIFO, socket or device") in diff.not_covered
    assert {c.name for c in diff.files} == {"a.txt", "b.txt"}
    agent.checkpoints.undo(to=2)
    assert (tmp_path / "a.txt").read_text() == "a\n" and (tmp_path / "b.txt").read_text() == "b\n"


def test_a_socket_and_a_symlink_loop_leave_the_checkpoints_working(tmp_path):
    make_socket = f"{sys.executable} -c \"import socket; socket.socket(socket.AF_UNIX).bind('s.sock')\""
    config = load_config(overrides={"safety": {"sandbox": "off", "approval": "auto"}})  # the sandbox refuses sockets
    agent = run(tmp_path, shell(f"{make_socket} && ln -s l2 l1 && ln -s l1 l2"), shell("echo x > x.txt"),
                complete(), config=config)
    assert all("error" not in record for record in records(agent))
    agent.checkpoints.undo(to=2)
    assert not os.path.lexists(tmp_path / "l1") and not (tmp_path / "x.txt").exists()


def test_a_nested_repository_and_a_gitignore_the_model_writes_are_named_and_cover_what_was_covered(tmp_path):
    (tmp_path / "secret.txt").write_text("mine\n")
    agent = run(tmp_path, shell("printf 'secret.txt\\n*.log\\n' > .gitignore && echo theirs > secret.txt && "
                                "echo x > new.log && git init -q sub && echo s > sub/f"),
                shell("echo y > y.txt"), complete())
    record = records(agent)[1]
    assert "error" not in record and record["left_out"] == {"ignored": ["new.log"], "repos": ["sub/"]}
    diff = agent.checkpoints.diff()
    assert {("new.log", "ignored (.gitignore)"), ("sub/", "a repository of its own")} <= set(diff.not_covered)
    assert "secret.txt" in {c.name for c in diff.files}, "a covered file stays covered whatever .gitignore says"
    agent.checkpoints.undo(to=2)
    assert (tmp_path / "secret.txt").read_text() == "mine\n" and not (tmp_path / ".gitignore").exists()
    assert (tmp_path / "new.log").exists() and (tmp_path / "sub" / "f").exists(), "not covered: left as they are"


def test_a_file_that_grows_while_it_is_checkpointed_does_not_stop_them(tmp_path):
    grow = "(i=0; while [ $i -lt 200000 ]; do echo line $i; i=$((i+1)); done > grow.log) &"
    agent = run(tmp_path, shell(grow), shell("echo a > a.txt"), shell("echo b > b.txt"), complete())
    assert all("error" not in record for record in records(agent))
    agent.checkpoints.undo(to=3)
    assert not (tmp_path / "a.txt").exists() and not (tmp_path / "b.txt").exists()


def test_anges_diff_says_what_it_does_not_cover(tmp_path):
    (tmp_path / ".gitignore").write_text("build/\n")
    uid = run_task_in(tmp_path, tmp_path, shell("mkdir build && echo o > build/out.o && mkfifo pipe && "
                                                "echo s > src.c"), complete())
    out = anges("diff", uid, cwd=tmp_path)
    assert out.returncode == 0 and "+s" in out.stdout
    assert "not covered by the checkpoints" in out.stderr
    assert "  build/ (ignored (.gitignore))" in out.stderr and "  pipe (a FIFO, socket or device)" in out.stderr


UNREADABLE = textwrap.dedent("""
    import json, os, sys
    from anges.agents import DefaultAgent
    from anges.config.loading import load_config
    from anges.models.scripted import ScriptedModel

    work = sys.argv[1]
    def shell(command):
        return {"reasoning": "r", "actions": [{"action_type": "RUN_SHELL_CMD", "command": command}]}
    steps = [shell("echo 1 > b.txt"), shell("echo 2 > b.txt"), shell("chmod 000 a.txt && echo 3 > b.txt"),
             shell("chmod 000 d && echo c > c.txt && chmod 000 c.txt"), shell("echo 5 > b.txt"),
             {"reasoning": "r", "actions": [{"action_type": "TASK_COMPLETE", "content": "done"}]}]
    config = load_config(overrides={"safety": {"sandbox": "off", "approval": "auto"}})
    agent = DefaultAgent(inference_func=ScriptedModel(steps), cmd_init_dir=work, config=config)
    agent.run_with_new_request("lock it")
    records = [e.data["checkpoint"] for e in agent.event_stream.events_list if "checkpoint" in e.data]
    diff = agent.checkpoints.diff()
    plan = agent.checkpoints.undo(to=2, overwrite=True)
    print(json.dumps({"records": records, "not_covered": diff.not_covered,
                      "left_alone": [[c.path, c.why] for c in plan.left_alone],
                      "b": open(os.path.join(work, "b.txt")).read()}))
""")


def test_for_an_ordinary_user_unreadable_files_and_folders_are_left_out_and_named(stranger, tmp_path):  # noqa: F811
    prefix, env, home = stranger
    work = home / "work"
    (work / "d").mkdir(parents=True)
    (work / "a.txt").write_text("a\n")
    (work / "b.txt").write_text("b\n")
    (work / "d" / "x").write_text("x\n")
    subprocess.run(["chown", "-R", f"{STRANGER_UID}:{STRANGER_UID}", str(work)], check=True)
    out = subprocess.run([*prefix, "-c", UNREADABLE, str(work)], capture_output=True, text=True, env=env,
                         cwd=str(home), timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert all("error" not in record for record in found["records"]), found["records"]
    assert found["records"][3]["left_out"] == {"unreadable": ["a.txt"]}, "on the fast path (no git asked)"
    assert set(found["records"][4]["left_out"]["unreadable"]) == {"a.txt", "c.txt", "d/"}
    assert {("a.txt", "anges may not read it"), ("d/", "anges may not read it")} <= \
        {tuple(item) for item in found["not_covered"]}
    assert found["b"] == "b\n", "the rest is still checkpointed and undone"
    assert ["c.txt", "anges may not read it: checkpoints do not cover it"] in found["left_alone"]
