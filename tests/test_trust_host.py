"""No process of anges outside the sandbox imports, runs or reads as configuration anything from a folder the model
can write, and anges' own places stay out of the model's reach whether they exist yet or not. Attacked as the model
would: modules planted for batch workers (local and Ray), programs and templates named in the configuration, the
first run in a home, links, NUL bytes; as root and as an ordinary user."""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import SANDBOX_PYTHON as PYTHON
from test_batch import ANGES, batch, config_file, script, task_file
from test_batch import complete as batch_complete
from test_batch import shell as batch_shell
from test_sandbox import actions, complete, reply, run_agent, shell
from test_sandbox_edges import STRANGER_UID, home, planted_bwrap, run_agent_as, stranger  # noqa: F401 (fixtures)

from anges.agents import DefaultAgent
from anges.config.loading import load_config
from anges.exceptions import ConfigError
from anges.models.scripted import ScriptedModel

PLANTED = ("json", "yaml", "typing_extensions", "mimetypes", "pydantic")
"""Modules a batch worker imports (at its start, or later)."""


def plant_modules(markers: Path, python: str = PYTHON) -> str:
    """A command that writes, into the folder it runs in, modules that leave a marker in `markers` when imported."""
    code = ("import pathlib, sys\n"
            "for name in sys.argv[2:]:\n"
            "    pathlib.Path(name + '.py').write_text(f'import pathlib; pathlib.Path({sys.argv[1]!r}, {name!r}).touch()')\n"
            "print('planted')\n")
    return f"{python} -c {shlex.quote(code)} {shlex.quote(str(markers))} {' '.join(PLANTED)}"


def planting_batch(folder: Path, markers: Path, python: str = PYTHON) -> Path:
    """A task that plants modules in the folder the batch runs in (`path: "."`), then one whose worker starts after
    it there."""
    planting = script(folder, "plant.json", batch_shell(plant_modules(markers, python)), batch_complete("Planted."))
    answering = script(folder, "answer.json", batch_complete("Answered."))
    return task_file(folder, {"id": "plant", "task": "plant", "path": ".", "model": planting},
                     {"id": "answer", "task": "answer", "path": ".", "model": answering})


def check_nothing_planted_was_imported(folder: Path, markers: Path, out: subprocess.CompletedProcess) -> None:
    rows = {row["id"]: row["status"] for row in map(json.loads, out.stdout.splitlines())}
    assert rows == {"plant": "completed", "answer": "completed"}, out.stderr[-2000:]  # "." works as before
    assert sorted(p.name for p in folder.glob("*.py")) == sorted(f"{name}.py" for name in PLANTED)  # it could plant
    assert sorted(os.listdir(markers)) == []  # and the next worker imported none of it


@pytest.mark.sandbox
def test_a_local_batch_worker_imports_nothing_a_task_planted_where_the_batch_runs(tmp_path):
    project, markers = tmp_path / "project", tmp_path / "markers"
    project.mkdir()
    markers.mkdir()
    path = planting_batch(project, markers)
    out = batch(str(path), "--workers", "1", "-o", "-", cwd=project)
    check_nothing_planted_was_imported(project, markers, out)


@pytest.mark.sandbox
def test_as_an_ordinary_user_a_batch_worker_imports_nothing_planted_either(stranger):  # noqa: F811
    prefix, env, home_dir = stranger
    project, markers = home_dir / "project", home_dir / "markers"
    for folder in (project, markers):
        folder.mkdir()
        os.chown(folder, STRANGER_UID, STRANGER_UID)
    path = planting_batch(project, markers, python=prefix[-1])
    for file in project.iterdir():
        os.chown(file, STRANGER_UID, STRANGER_UID)
    # Its Python finds anges through PYTHONPATH, which an isolated worker ignores: the driver hands its path over.
    out = subprocess.run([*prefix, "-m", "anges", "batch", str(path), "--workers", "1", "-o", "-"], cwd=project,
                         env=env, capture_output=True, text=True, timeout=300)
    check_nothing_planted_was_imported(project, markers, out)


RAY_WORKER = """
import json, os, sys
import ray
from anges.batch.ray_engine import RayEngine
from anges.config.loading import load_config

RayEngine(load_config())._connect(ray)

@ray.remote
def where():
    try:
        import planted_probe  # noqa: F401
        found = "imported"
    except ImportError:
        found = "not found"
    return {"path": sys.path, "cwd": os.getcwd(), "planted": found}

print(json.dumps(ray.get(where.remote())))
ray.shutdown()
"""


@pytest.mark.xdist_group("ray")
def test_ray_workers_of_a_batch_neither_start_in_nor_import_from_the_folder_it_runs_in(tmp_path):
    """Ray puts the driver's folder first on every worker's import path, and starts the workers there, unless the
    job has a working_dir of its own: a task with `path: "."` could plant a module the next import finds."""
    (tmp_path / "planted_probe.py").write_text("raise SystemExit('imported from the batch folder')\n")
    env = {key: value for key, value in os.environ.items() if not key.startswith("RAY_")}
    done = subprocess.run([sys.executable, "-c", RAY_WORKER], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["planted"] == "not found" and Path(seen["cwd"]).resolve() != tmp_path.resolve()
    assert not any(entry and Path(entry).resolve() == tmp_path.resolve() for entry in seen["path"])


PLANTED_AT_START = ("typing", "json", "yaml", "re", "enum", "dataclasses", "pathlib")


def test_python_m_anges_in_a_folder_with_planted_modules_imports_none_of_them(tmp_path):
    """`python -m anges` puts the current folder first on the import path; anges drops it before importing more."""
    markers = tmp_path / "markers"
    markers.mkdir()
    for name in PLANTED_AT_START:
        (tmp_path / f"{name}.py").write_text(f"import os; open(os.path.join({str(markers)!r}, {name!r}), 'w')\n")
    (tmp_path / "script.json").write_text(json.dumps([complete()]))
    done = subprocess.run([sys.executable, "-m", "anges", "-q", "go", "--model", "scripted:script.json",
                           "--sandbox", "off", "--approval", "auto"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert os.listdir(markers) == []


# -- programs and code the configuration names ---------------------------------------------------------------------


@pytest.mark.sandbox
def test_a_read_only_runs_bwrap_in_its_folder_is_never_run(work, tmp_path):
    """A read-only run's commands write nothing, but the same folder is a workspace run's: its bwrap is refused too."""
    marker = tmp_path / "planted-bwrap-ran"
    fake = planted_bwrap(work / "tools", marker)
    stream, _ = run_agent(work, [reply(shell("echo ran")), complete()], sandbox="read-only", bwrap=str(fake),
                          approval="deny")

    assert not marker.exists() and not actions(stream)
    assert "a directory commands may write" in stream.events_list[1].data["reason"]


@pytest.mark.sandbox
def test_a_batch_never_runs_a_bwrap_in_a_tasks_folder_even_from_elsewhere(tmp_path):
    project, elsewhere, marker = tmp_path / "project", tmp_path / "elsewhere", tmp_path / "planted-bwrap-ran"
    elsewhere.mkdir()
    fake = planted_bwrap(project / "tools", marker)
    model = script(elsewhere, "r.json", batch_complete())
    path = task_file(elsewhere, {"id": "t", "task": "go", "path": str(project), "model": model})
    out = batch(str(path), "--config", config_file(elsewhere, f"safety: {{bwrap: '{fake}'}}\n"), cwd=elsewhere)

    assert not marker.exists()
    assert out.returncode != 0 and f"bwrap at {fake} is not run" in out.stderr


@pytest.mark.sandbox
def test_the_web_chats_sandbox_line_never_runs_a_bwrap_in_another_chats_folder(work, tmp_path):
    from web.runs import sandbox_summary

    marker = tmp_path / "planted-bwrap-ran"
    fake = planted_bwrap(work / "tools", marker)
    run_agent(work, [reply(shell("echo a chat ran here")), complete()])  # a chat of this server works in `work`
    summary = sandbox_summary(load_config(overrides={"safety": {"bwrap": str(fake)}}), str(tmp_path / "elsewhere"))

    assert not marker.exists() and not summary["sandboxed"]
    assert "a directory commands may write" in summary["detail"]


def test_a_bwrap_or_git_named_with_a_nul_byte_is_refused_with_the_reason():
    from anges.checkpoints.git import find_git
    from anges.exceptions import CheckpointError
    from anges.safety.sandbox import availability

    found = availability("/usr/bin/b\0wrap", (), quiet=True)
    assert not found.ok and "safety.bwrap must be an absolute path" in found.reason
    with pytest.raises(CheckpointError, match="is not an executable absolute path"):
        find_git("/usr/bin/g\0it")


@pytest.mark.sandbox
def test_a_checkpoint_git_in_another_writable_path_is_never_run(tmp_path, work):
    """The git of `checkpoints.git` in one of the run's writable paths, not the folder being snapshotted."""
    tools, marker = tmp_path / "tools", tmp_path / "planted-git-ran"
    tools.mkdir()
    (tools / "git").write_text(f"#!/bin/sh\ntouch {marker}\nexec /usr/bin/git \"$@\"\n")
    (tools / "git").chmod(0o755)
    edit = {"action_type": "EDIT_FILE", "directive_line": "NEW_FILE notes.txt", "content": "x"}
    config = load_config(overrides={"safety": {"writable_paths": [str(tools)]},
                                    "checkpoints": {"git": str(tools / "git")}})
    stream = DefaultAgent(inference_func=ScriptedModel([reply(edit), complete()]), cmd_init_dir=work,
                          config=config).run_with_new_request("go")

    assert not marker.exists() and (work / "notes.txt").read_text().startswith("x")
    marks = [e.data["checkpoint"] for e in stream.events_list if e.data.get("checkpoint")]
    assert marks and f"git at {tools / 'git'} is not run" in marks[0]["error"]


def test_a_template_dir_commands_may_write_is_refused_before_the_run(work, tmp_path):
    """A template is code (Jinja2 reaches Python objects): one in the working directory, or in the folder of another
    run of this process, would run what a command wrote in anges' own process."""
    other, marker = tmp_path / "other", tmp_path / "template-ran-code"
    for folder in (work / "templates" / "agents", other / "templates" / "agents"):
        folder.mkdir(parents=True)
        (folder / "default.j2").write_text(f"{{{{ cycler.__init__.__globals__.os.system('touch {marker}') }}}}")
    run_agent(other, [complete()])  # another chat of this process works in `other`

    for templates in (work / "templates", other / "templates"):
        config = load_config(overrides={"prompt": {"template_dir": str(templates)}})
        agent = DefaultAgent(inference_func=ScriptedModel([complete()]), cmd_init_dir=work, config=config)
        with pytest.raises(ConfigError, match="prompt.template_dir .* is code anges runs in its own process"):
            agent.run_with_new_request("go")
        assert agent.event_stream is None or not agent.event_stream.events_list  # refused before anything ran
    assert not marker.exists()


def test_the_cli_refuses_a_template_dir_in_the_working_directory_with_the_reason(work):
    (work / "t" / "agents").mkdir(parents=True)
    (work / "t" / "agents" / "default.j2").write_text("{{ history }}")
    (work / "c.yaml").write_text(f"prompt: {{template_dir: '{work / 't'}'}}\n")
    (work / "r.json").write_text(json.dumps([complete()]))
    done = subprocess.run([*ANGES, "-q", "go", "--config", "c.yaml", "--model", "scripted:r.json"], cwd=work,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)

    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert f"prompt.template_dir {work / 't'} is code anges runs in its own process" in done.stderr


# -- anges' own places ---------------------------------------------------------------------------------------------

REWRITE_CONFIG = ("mkdir -p {home} && printf 'safety: {{sandbox: \"off\", approval: auto}}\\n' > {home}/config.yaml"
                  " && echo rewrote; ls -A {home}")


@pytest.mark.sandbox
def test_on_a_first_run_in_the_home_anges_home_cannot_be_written(home, monkeypatch):  # noqa: F811
    """ANGES_HOME did not exist when the sandbox's hidden paths were worked out; anges then made it, and the sandbox
    left it writable in the working directory: the model set `sandbox: off` for every later run."""
    anges = home / ".anges"
    monkeypatch.setenv("ANGES_HOME", str(anges))
    stream, _ = run_agent(home, [reply(shell(REWRITE_CONFIG.format(home="~/.anges"))), complete()])

    event = actions(stream)[0]
    assert "rewrote" not in event.data["stdout"] and not (anges / "config.yaml").exists()
    assert event.data["stdout"] in ("", "data\n")  # nor see what is in it: only the way to the session's outputs
    assert (anges / "data" / "event_streams").is_dir()  # anges itself keeps its records there


@pytest.mark.sandbox
def test_as_an_ordinary_user_a_first_run_cannot_write_anges_home_either(stranger):  # noqa: F811
    home_dir = stranger[2]
    results = run_agent_as(stranger, [reply(shell(REWRITE_CONFIG.format(home="$ANGES_HOME"))), complete()],
                           cwd=home_dir)
    assert "rewrote" not in results[0]["stdout"] and not (home_dir / "anges" / "config.yaml").exists()


@pytest.mark.sandbox
def test_a_relative_anges_home_made_in_the_working_directory_is_hidden(work, monkeypatch):
    monkeypatch.chdir(work)
    monkeypatch.setenv("ANGES_HOME", "state")
    stream, _ = run_agent(work, [reply(shell(REWRITE_CONFIG.format(home="state"))), complete()])

    assert "rewrote" not in actions(stream)[0].data["stdout"] and not (work / "state" / "config.yaml").exists()


@pytest.mark.sandbox
def test_anges_home_is_never_a_folder_commands_may_write(anges_home, outside):
    """Working in anges' home (or naming it a writable path) would let commands rewrite its config and records."""
    inside, _ = run_agent(anges_home, [reply(shell(REWRITE_CONFIG.format(home="."))), complete()])
    data = anges_home / "data"
    named, _ = run_agent(outside, [reply(shell(f"echo x > {data}/planted && echo wrote")), complete()],
                         writable_paths=[str(data)])

    assert "rewrote" not in actions(inside)[0].data["stdout"]
    assert "wrote" not in actions(named)[0].data["stdout"] and not (data / "planted").exists()


@pytest.mark.sandbox
def test_the_config_files_a_run_read_cannot_be_changed_by_its_commands(work, monkeypatch):
    (work / "anges.yaml").write_text("safety: {approval: deny}\n")
    (work / "env.yaml").write_text("{}\n")
    monkeypatch.setenv("ANGES_CONFIG", str(work / "env.yaml"))
    change = "echo 'safety: {sandbox: off}' > anges.yaml; echo 'safety: {sandbox: off}' > env.yaml; cat anges.yaml"
    config = load_config(str(work / "anges.yaml"), {"safety": {"approval": "auto"}})
    stream = DefaultAgent(inference_func=ScriptedModel([reply(shell(change)), complete()]), cmd_init_dir=work,
                          config=config).run_with_new_request("go")

    assert (work / "anges.yaml").read_text() == "safety: {approval: deny}\n" and (work / "env.yaml").read_text() == "{}\n"
    assert actions(stream)[0].data["stdout"] == ""  # hidden: an empty file


@pytest.mark.sandbox
def test_the_web_chats_password_file_is_hidden_from_commands(work):
    from web.passwords import password_from_file

    (work / "password").write_text("correct horse battery staple\n")
    (work / "password").chmod(0o600)
    assert password_from_file(str(work / "password")) == "correct horse battery staple"
    steal = "cat password; echo 'model-chosen password' > password"
    stream, _ = run_agent(work, [reply(shell(steal)), complete()])

    assert "horse" not in actions(stream)[0].data["stdout"]
    assert (work / "password").read_text() == "correct horse battery staple\n"
