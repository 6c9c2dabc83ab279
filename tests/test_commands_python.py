"""The agent's commands get the user's Python, not the one of the virtualenv anges runs from: anges installed into
an active virtualenv (as `python3 -m venv .venv && . .venv/bin/activate && pip install .` leaves it) keeps that
venv out of its commands' environment, unless it is the project's own (inside the working directory, or kept by
`keep_anges_venv`). The prompt says which `python3` commands run."""

import json
import os
import shutil
import subprocess
import sysconfig
import venv

import pytest
from test_cli import complete, scripted, shell

SHOW = 'command -v python3; echo "PATH=$PATH"; echo "VIRTUAL_ENV=${VIRTUAL_ENV-unset}"'


@pytest.fixture
def project(tmp_path):
    """A project folder holding `.venv`, a virtualenv with anges in it (its packages are this interpreter's)."""
    folder = tmp_path / "project"
    venv.create(folder / ".venv", with_pip=False)
    site = next((folder / ".venv" / "lib").glob("python3*/site-packages"))
    here = sysconfig.get_paths()["purelib"]  # anges as this interpreter has it, its .pth files read too
    (site / "anges-under-test.pth").write_text(f"import site; site.addsitedir({here!r})\n")
    return folder


def run_in(project, cwd, tmp_path, *extra):
    """`anges -q` run by the project's virtualenv, activated as its `activate` script leaves a shell; what the
    command printed, and the prompt the model got."""
    bin_dir = project / ".venv" / "bin"
    env = {**os.environ, "VIRTUAL_ENV": str(project / ".venv"), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTHONHOME", None)
    record = tmp_path / f"calls-{len(list(tmp_path.glob('calls-*')))}.jsonl"
    out = subprocess.run([str(bin_dir / "python"), "-m", "anges", "-q", "which python?", "--record", str(record),
                          "--model", scripted(tmp_path, shell(SHOW), complete()), "--output", "jsonl", *extra],
                         cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    events = [json.loads(line)["event"] for line in out.stdout.splitlines() if '"type": "event"' in line]
    printed = next(event for event in events if event["type"] == "action")["data"]["stdout"]
    return printed, json.loads(record.read_text().splitlines()[0])["prompt"]


def test_commands_elsewhere_do_not_get_the_virtualenv_anges_runs_from(project, tmp_path):
    work = tmp_path / "elsewhere"
    work.mkdir()
    printed, prompt = run_in(project, work, tmp_path)

    assert "VIRTUAL_ENV=unset" in printed
    path = next(line for line in printed.splitlines() if line.startswith("PATH="))
    assert str(project / ".venv") not in path and path.removeprefix("PATH=") == os.environ["PATH"]
    users = shutil.which("python3", path=os.environ["PATH"])
    assert f"\n- `python3` in commands is {users}\n" in prompt


def test_a_virtualenv_in_the_working_directory_is_the_projects_and_stays(project, tmp_path):
    printed, prompt = run_in(project, project, tmp_path)

    own = str(project / ".venv" / "bin" / "python3")
    assert printed.splitlines()[0] == own and f"VIRTUAL_ENV={project / '.venv'}" in printed
    assert f"\n- `python3` in commands is {own}\n" in prompt


def test_keep_anges_venv_keeps_it_for_a_project_elsewhere(project, tmp_path):
    work = tmp_path / "elsewhere"
    work.mkdir()
    config = tmp_path / "keep.yaml"
    config.write_text("agents:\n  common:\n    keep_anges_venv: true\n")
    printed, prompt = run_in(project, work, tmp_path, "--config", str(config))

    assert f"VIRTUAL_ENV={project / '.venv'}" in printed
    assert f"\n- `python3` in commands is {project / '.venv' / 'bin' / 'python3'}\n" in prompt


def test_without_a_python3_on_path_the_prompt_says_so(tmp_path, monkeypatch):
    from anges.agents import DefaultAgent
    from anges.models.scripted import ScriptedModel

    monkeypatch.setenv("PATH", "/nonexistent")
    model = ScriptedModel([complete()])
    DefaultAgent(inference_func=model, cmd_init_dir=tmp_path).run_with_new_request("hi")
    assert "\n- Commands find no `python3` on their PATH\n" in model.prompts[0]
