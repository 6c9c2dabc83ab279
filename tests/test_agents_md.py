"""Project instructions: AGENTS.md from the working directory up to the repository root, in the prompt."""

import json
import os
import subprocess
import sys

from anges.acp.command import build_acp_parser
from anges.agents import DefaultAgent
from anges.cli.main import _batch_overrides, build_batch_parser
from anges.config.arguments import config_overrides
from anges.config.loading import load_config
from anges.models.scripted import ScriptedModel
from anges.prompt.agents_md import find_agents_md


def complete():
    return {"analysis": "", "reasoning": "done", "actions": [{"action_type": "TASK_COMPLETE", "content": "ok"}]}


def shell(command):
    return {"analysis": "", "reasoning": "run", "actions": [{"action_type": "RUN_SHELL_CMD", "command": command}]}


def project(tmp_path):
    """outside/AGENTS.md above the repository, repo/.git, repo/AGENTS.md, repo/pkg/AGENTS.md, repo/pkg/sub (none)."""
    outside = tmp_path / "outside"
    work = outside / "repo" / "pkg" / "sub"
    work.mkdir(parents=True)
    (outside / "repo" / ".git").mkdir()
    (outside / "AGENTS.md").write_text("OUTSIDE THE REPOSITORY\n")
    (outside / "repo" / "AGENTS.md").write_text("ROOT: use tabs\n")
    (outside / "repo" / "pkg" / "AGENTS.md").write_text("PKG: run make test\n")
    return outside, work


def instructions(prompt):
    return prompt.split("# Project instructions")[1].split("# History")[0] if "# Project instructions" in prompt else ""


def run(work, config=None):
    model = ScriptedModel([complete()])
    agent = DefaultAgent(inference_func=model, cmd_init_dir=work, config=config or load_config())
    agent.run_with_new_request("go")
    return model


def test_the_files_from_the_repository_root_down_to_the_working_directory_nearest_last(tmp_path):
    outside, work = project(tmp_path)
    assert find_agents_md(work) == [outside / "repo" / "AGENTS.md", outside / "repo" / "pkg" / "AGENTS.md"]

    text = instructions(run(work).prompts[0])
    assert text.index("ROOT: use tabs") < text.index("PKG: run make test")
    assert f"## {outside / 'repo' / 'AGENTS.md'}" in text and "OUTSIDE THE REPOSITORY" not in text


def test_outside_a_repository_only_the_working_directorys_file_is_read(tmp_path):
    (tmp_path / "AGENTS.md").write_text("PARENT\n")
    work = tmp_path / "work"
    work.mkdir()
    assert instructions(run(work).prompts[0]) == ""
    (work / "AGENTS.md").write_text("HERE\n")
    text = instructions(run(work).prompts[0])
    assert "HERE" in text and "PARENT" not in text


def test_the_cap_keeps_the_nearest_file_first_and_says_what_was_cut(tmp_path):
    outside, work = project(tmp_path)
    (outside / "repo" / "AGENTS.md").write_text("ROOT " + "r" * 5000 + " ROOT-END\n")
    (outside / "repo" / "pkg" / "AGENTS.md").write_text("PKG " + "p" * 700 + " PKG-END\n")
    config = load_config(overrides={"prompt": {"max_agents_md_chars": 1000}})

    text = instructions(run(work, config).prompts[0])
    assert "PKG-END" in text, "the nearest file is whole"
    assert "ROOT r" in text and "ROOT-END" not in text and "(cut here: the project instructions reached" in text
    assert text.count("r" * 50) and len(text) < 1000 + 1000, "the files together stay within the cap"

    config = load_config(overrides={"prompt": {"max_agents_md_chars": 500}})
    text = instructions(run(work, config).prompts[0])
    assert "ROOT" not in text.replace(f"{outside / 'repo' / 'AGENTS.md'}", "") and "(left out: the project" in text
    assert "PKG " in text and "PKG-END" not in text


def test_secrets_in_agents_md_are_masked_even_at_the_cut(tmp_path, monkeypatch):
    secret = "sk-agents-md-SECRET-1234567890"
    monkeypatch.setenv("SERVICE_API_KEY", secret)
    (tmp_path / "AGENTS.md").write_text(f"token {secret} here\n" + "x" * 200 + secret + "tail\n")
    cut_inside = len(f"token {secret} here\n") + 200 + 10
    config = load_config(overrides={"prompt": {"max_agents_md_chars": cut_inside}})
    prompt = run(tmp_path, config).prompts[0]
    assert "[REDACTED]" in instructions(prompt)
    assert secret[:8] not in prompt, "no fragment of the secret is left where the file was cut"


def test_read_once_per_run_so_the_prefix_stays_and_the_next_run_sees_changes(tmp_path):
    (tmp_path / "AGENTS.md").write_text("FIRST VERSION\n")
    model = ScriptedModel([shell("echo SECOND VERSION > AGENTS.md"), complete()])
    agent = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=load_config())
    agent.run_with_new_request("go")
    assert (tmp_path / "AGENTS.md").read_text() == "SECOND VERSION\n"
    assert all("FIRST VERSION" in instructions(prompt) for prompt in model.prompts)
    model.enqueue(complete())
    agent.run_with_new_request("again")
    assert "SECOND VERSION" in instructions(model.prompts[-1])


def test_the_config_key_and_the_flag_turn_it_off(tmp_path):
    (tmp_path / "AGENTS.md").write_text("THE PROJECT RULES\n")
    off = load_config(overrides={"prompt": {"agents_md": False}})
    assert "THE PROJECT RULES" not in run(tmp_path, off).prompts[0]

    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps([complete()]))
    for flags in ([], ["--no-agents-md"]):
        record = tmp_path / f"calls{len(flags)}.jsonl"
        out = subprocess.run([sys.executable, "-m", "anges", "-q", "go", "--model", f"scripted:{replies}",
                              "--record", str(record), *flags], cwd=tmp_path, capture_output=True, text=True,
                             env=os.environ.copy(), timeout=60, check=False)
        assert out.returncode == 0, out.stderr
        prompt = json.loads(record.read_text().splitlines()[0])["prompt"]
        assert ("THE PROJECT RULES" in prompt) is not flags

    assert config_overrides(build_acp_parser().parse_args(["--no-agents-md"])) == {"prompt": {"agents_md": False}}
    batch = build_batch_parser().parse_args(["tasks.yaml", "--no-agents-md"])
    assert _batch_overrides(batch) == {"prompt": {"agents_md": False}}


def test_a_link_out_of_the_project_is_not_followed(tmp_path):
    secret_file = tmp_path / "home" / ".aws" / "credentials"
    secret_file.parent.mkdir(parents=True)
    secret_file.write_text("aws_secret_access_key = not-for-the-model\n")
    work = tmp_path / "checkout"
    (work / "docs").mkdir(parents=True)
    (work / ".git").mkdir()
    (work / "AGENTS.md").symlink_to(secret_file)
    (work / "CONTRIBUTING.md").write_text("LINKED RULES\n")
    (work / "docs" / "AGENTS.md").symlink_to("../CONTRIBUTING.md")

    text = instructions(run(work / "docs").prompts[0])
    assert "not-for-the-model" not in text and "(not read: a link to a file outside the project" in text
    assert "LINKED RULES" in text, "a link within the project is read"
