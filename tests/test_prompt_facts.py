"""What the model reads of its session: the facts it would otherwise find out by failing (a repository's read-only
.git, loopback without the network, a pipeline's exit code), what `analysis` is, only the actions and settings it
has, a history numbered without gaps, and a fixed part that stays small."""

import re
import subprocess

import pytest

from anges.agents import agent_class
from anges.config.loading import load_config
from anges.models.scripted import ScriptedModel, is_summary_prompt
from anges.prompt.templates import split_prompt
from anges.registry import actions as registered_actions

ACTION_NAMES = {name.upper() for name, _ in registered_actions.classes()} | {"USE_MCP_TOOL"}


def reply(*actions, analysis="", reasoning="step"):
    return {"analysis": analysis, "reasoning": reasoning, "actions": list(actions)}


def shell(command, **extra):
    return {"action_type": "RUN_SHELL_CMD", "command": command, **extra}


def done():
    return reply({"action_type": "TASK_COMPLETE", "content": "done"})


def first_prompt(kind, work, child=False, approval=None, **safety):
    """The first prompt an agent of `kind` renders in `work`, and its own action types."""
    model = ScriptedModel([reply({"action_type": "HELP_NEEDED", "content": "stop here"})])
    agent = agent_class(kind)(parent_ids=["p" * 12] if child else None, inference_func=model, cmd_init_dir=work,
                              config=load_config(overrides={"safety": safety}), approval=approval)
    agent.run_with_new_request("hello")
    return model.prompts[0], {action.type for action in agent.registered_actions}


def fixed_part(prompt):
    return prompt.split("\n# History\n")[0]


def git_repository(path):
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    (path / "README").write_text("a project\n")
    subprocess.run("git add README && git -c user.name=t -c user.email=t@t commit -qm first", shell=True, cwd=path,
                   check=True)
    return path


def ask_a_person(request):
    return "allow"


@pytest.mark.sandbox
def test_the_environment_says_what_the_sandbox_does_to_a_repository_and_the_loopback(tmp_path):
    work = git_repository(tmp_path / "repo")
    prompt, _ = first_prompt("default", work, approval=ask_a_person)
    environment = fixed_part(prompt).split("# Environment")[1]
    assert f"- {work}/.git is read-only: git commands that write it (commit, branch, checkout, stash, bisect) need " \
           "`escalate`." in environment
    assert "The network is off, but loopback works: a server one command starts answers the next ones on 127.0.0.1" \
        in environment
    assert "A pipeline's\nexit code is its last command's (`set -o pipefail` changes that)." in prompt

    prompt, _ = first_prompt("default", work, approval="deny")
    assert f"{work}/.git is read-only: git commands that write it (commit, branch, checkout, stash, bisect) cannot " \
           "run in this session." in prompt and "`escalate`" not in prompt
    (tmp_path / "plain").mkdir()
    prompt, _ = first_prompt("default", tmp_path / "plain", approval=ask_a_person)
    assert ".git is read-only" not in prompt, "no repository, no word of one"
    prompt, _ = first_prompt("default", work, approval=ask_a_person, network=True)
    assert "The network is on." in prompt and "loopback" not in prompt


@pytest.mark.sandbox
def test_a_blocked_git_command_is_told_the_real_reason(tmp_path):
    work = git_repository(tmp_path / "repo")
    model = ScriptedModel([reply(shell("git branch topic"), shell("touch /usr/anges-test-file"),
                                 shell("echo x > .git/planted")), done()])
    agent = agent_class("default")(inference_func=model, cmd_init_dir=work, config=load_config(),
                                   approval=ask_a_person)
    stream = agent.run_with_new_request("branch")

    branch, outside, planted = [e for e in stream.events_list if e.type == "action"]
    for repository in (branch, planted):
        assert f"SANDBOX: read-only file system — {work}/.git is a repository's own directory, read-only in the " \
               "sandbox (its hooks and config would run outside it)" in repository.content
        assert "outside the sandbox's writable paths" not in repository.content
        assert "run the command again with `escalate`" in repository.content
    assert "SANDBOX: read-only file system — outside the sandbox's writable paths" in outside.content
    assert not (work / ".git" / "planted").exists()
    assert f"{work}/.git is a repository's own directory" in model.prompts[1]


def test_the_reply_format_says_what_becomes_of_the_analysis(tmp_path):
    model = ScriptedModel([reply(shell("echo hi"), analysis="ANALYSIS-OF-STEP-ONE", reasoning="REASONING-ONE"), done()])
    agent_class("default")(inference_func=model, cmd_init_dir=tmp_path).run_with_new_request("go")

    assert '"analysis": "your thinking about the situation (the user sees it as you write it; your history does not ' \
           'keep it)"' in model.prompts[0]
    assert '"reasoning": "why you take these actions (your history keeps it)"' in model.prompts[0]
    history = model.prompts[1].split("\n# History\n")[1]
    assert "REASONING-ONE" in history and "ANALYSIS-OF-STEP-ONE" not in history, "what the format says holds"
    assert "not shown to the user" not in model.prompts[0]


@pytest.mark.parametrize("kind", ["default", "task_executor", "task_analyzer", "orchestrator"])
@pytest.mark.parametrize("child", [False, True])
def test_each_agents_prompt_names_only_the_actions_it_has(tmp_path, kind, child):
    for safety in ({"sandbox": "workspace"}, {"sandbox": "off", "approval": "auto"}):
        prompt, own = first_prompt(kind, tmp_path, child=child, **safety)
        named = {name for name in ACTION_NAMES if re.search(rf"\b{name}\b", prompt)}
        assert named == own, f"{kind} (child: {child}) names {named - own} and leaves out {own - named}"
        if "RUN_SHELL_CMD" not in own:
            assert not re.search(r"shell|sandbox|command exiting|escalate", fixed_part(prompt), re.I)
        if "EDIT_FILE" not in own:
            assert "edit that cannot be applied" not in prompt
        assert "MCP" not in prompt, "no MCP text without MCP servers"


def test_sandbox_and_escalation_text_only_where_they_apply(tmp_path):
    unsandboxed, _ = first_prompt("default", tmp_path, sandbox="off", approval="auto")
    assert "Sandbox:" not in unsandboxed and "escalate" not in unsandboxed and "loopback" not in unsandboxed
    assert "- No sandbox: the sandbox is off (safety.sandbox: off). Commands run with the user's rights." in unsandboxed

    for approval in ("deny", "auto", None):  # nobody can approve leaving the sandbox (None: no channel)
        prompt, _ = first_prompt("default", tmp_path, approval=approval, sandbox="workspace", auto_escalate=False)
        assert "escalate" not in prompt, approval


@pytest.mark.sandbox
def test_a_person_who_can_approve_is_offered_escalation(tmp_path):
    prompt, _ = first_prompt("default", tmp_path, approval=ask_a_person)
    assert "- `escalate` (string): only when the command cannot work in the sandbox" in prompt
    assert "It then runs outside the sandbox if the user approves." in prompt


def test_the_history_numbers_what_the_model_reads_without_gaps(tmp_path):
    rules = [{"action": "RUN_SHELL_CMD", "match": "echo asked*", "decision": "ask", "reason": "a person looks"}]
    steps = [reply(shell(f"echo asked {n}")) for n in range(6)] + [done()]
    model = ScriptedModel(steps, summary="THE ROLLING SUMMARY")
    config = load_config(overrides={"safety": {"rules": rules, "approval": "ask"},
                                    "agents": {"common": {"max_consecutive_actions_to_summarize": 6}},
                                    "prompt": {"recent_events_in_full": 2}})
    agent = agent_class("default")(inference_func=model, cmd_init_dir=tmp_path, config=config, approval=ask_a_person)
    stream = agent.run_with_new_request("go")

    hidden = [e for e in stream.events_list if e.type == "approval_requested"]
    assert len(hidden) >= 6, "every command was asked about, and the request is not shown to the model"
    steps_seen = [p for p in model.prompts if not is_summary_prompt(p)]
    for prompt in steps_seen:
        numbers = [int(n) for n in re.findall(r"^## Event (\d+) TYPE", prompt, re.M)]
        summary = re.search(r"^## Summary of Events 1 to (\d+)$", prompt, re.M)
        start = [1] if not summary else [int(summary.group(1)) + 1]
        shown = [n for n in numbers if n >= start[0]]
        assert shown == list(range(start[0], start[0] + len(shown))), numbers
    last = steps_seen[-1]
    assert "Summary of Events 1 to" in last, "a fold happened"
    visible = len([e for e in stream.events_list if e.type not in ("approval_requested", "history_folded")])
    assert f"## Event {visible} TYPE: RUN_SHELL_CMD" in last or f"## Event {visible - 1} TYPE:" in last
    fold = next(p for p in model.prompts if is_summary_prompt(p))
    end = int(re.search(r"stand in for events 1 to (\d+)", fold).group(1))
    kept = [int(n) for n in re.search(r"Events (\d+) to (\d+) stay", fold).groups()]
    assert kept == [end + 1, end + 2], "the fold names the two events kept in full, numbered as the model reads them"
    assert f"## Event {end + 2} TYPE:" in fold and f"## Event {end + 3} TYPE:" not in fold
    def summary(prompt):
        return re.findall(r"^## Summary of Events .*$", prompt, re.M)

    for before, after in zip(steps_seen, steps_seen[1:]):  # between folds the cache still hits
        if summary(before) == summary(after):
            assert split_prompt(after)[0].startswith(split_prompt(before)[0])


@pytest.mark.sandbox
def test_the_default_agents_first_prompt_stays_within_7000_characters(tmp_path):
    work = git_repository(tmp_path / "repo")

    def size(prompt):  # with the working directory and python3 at usual places: their paths vary
        return len(re.sub(r"(`python3` in commands is )\S+", r"\1/usr/bin/python3", prompt.replace(str(work),
                                                                                             "/home/me/project")))

    prompt, _ = first_prompt("default", work, approval=ask_a_person)
    assert ".git is read-only" in prompt and "escalate" in prompt, "the largest default prompt: every fact applies"
    assert size(prompt) <= 7000, size(prompt)
    for kind in ("task_executor", "task_analyzer", "orchestrator"):
        for child in (False, True):
            prompt, _ = first_prompt(kind, work, child=child, approval=ask_a_person)
            assert size(prompt) <= 7000, (kind, child, size(prompt))
