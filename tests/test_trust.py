"""Trusted content: a project's `.anges/` hooks and MCP servers whose program lies where commands may write run only
once the user trusted those exact bytes; attacked the way a model would (rewrite the script, plant a link)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from anges.agents import DefaultAgent
from anges.config.loading import load_config
from anges.config.trust import TrustStore, load_project
from anges.models.scripted import ScriptedModel
from anges.safety.run_safety import commands_may_write
from anges.tools.mcp import manager_for

ANGES = [sys.executable, "-m", "anges"]
SERVERS = Path(__file__).parent / "mcp_servers"


def reply(*actions):
    return {"analysis": "", "reasoning": "because", "actions": list(actions)}


def shell(command):
    return {"action_type": "RUN_SHELL_CMD", "command": command}


def complete(content="done"):
    return reply({"action_type": "TASK_COMPLETE", "content": content})


class Person:
    """An approval channel that answers TRUST questions as told (and approves everything else), keeping what it
    was shown."""

    name = "person"

    def __init__(self, *answers):
        self.answers = list(answers)
        self.asked = []

    def __call__(self, request):
        if request.action_type != "TRUST":
            return True
        self.asked.append(request)
        return self.answers.pop(0)


def project(work, hooks, **files):
    (work / ".anges").mkdir(exist_ok=True)
    (work / ".anges" / "config.yaml").write_text(yaml.safe_dump({"hooks": hooks}))
    for name, text in files.items():
        (work / name).write_text(text)
        (work / name).chmod(0o755)


def run(work, replies, approval=None, **config):
    model = ScriptedModel(replies)
    overrides = {"safety": {"approval": "ask"}, **config}
    agent = DefaultAgent(inference_func=model, cmd_init_dir=work, config=load_config(overrides=overrides),
                         approval=approval)
    return agent.run_with_new_request("go"), model, agent


def decisions(stream):
    return [e for e in stream.events_list if e.type == "approval_decided" and e.data["rule"] == "trust"]


MARK = [{"event": "after_action", "command": "echo ran >> hook.log"}]


def test_an_untrusted_project_hook_does_not_run_and_the_run_says_so_once(work):
    project(work, MARK)
    stream, model, agent = run(work, [reply(shell("true")), complete()])
    assert not (work / "hook.log").exists()
    [said] = decisions(stream)
    assert said.data["decision"] == "deny" and said.data["by"] == "no_one" and said.data["request_id"] is None
    assert said.message == (f"not trusted (no one can be asked here): the hooks and commands of {work}/.anges; "
                            f"to trust it: anges trust {work}")
    assert "are not trusted (no one can be asked here): they do not run in this run" in model.prompts[0]
    model.enqueue(reply(shell("true")), complete())
    again = agent.run_with_new_request("again")
    assert len(decisions(again)) == 1 and not (work / "hook.log").exists(), "said once per session"


@pytest.mark.parametrize("mode", ["auto", "deny"])
def test_approval_auto_or_deny_never_trusts(work, mode):
    project(work, MARK)
    person = Person(True)
    stream, _, _ = run(work, [reply(shell("true")), complete()], approval=person, safety={"approval": mode})
    assert not person.asked and not (work / "hook.log").exists()
    assert decisions(stream)[0].data["by"] == ("auto" if mode == "auto" else "approval=deny")


def test_trusted_hooks_run_and_a_changed_hook_asks_again(work):
    project(work, [{"event": "after_action", "command": "./fmt.sh"}], **{"fmt.sh": "#!/bin/sh\necho v1 >> hook.log\n"})
    person = Person(True)
    stream, _, _ = run(work, [reply(shell("true")), complete()], approval=person)
    [question] = person.asked
    assert question.rule == "trust" and question.escalate and question.subject == f"{work}/.anges"
    assert "after_action: ./fmt.sh" in question.detail and "echo v1 >> hook.log" in question.detail, \
        "the person saw the hook and the script it runs"
    assert (work / "hook.log").read_text() == "v1\n" and decisions(stream)[0].data["decision"] == "allow"

    person = Person()
    stream, _, _ = run(work, [reply(shell("true")), complete()], approval=person)
    assert not person.asked and (work / "hook.log").read_text() == "v1\nv1\n", "trusted content is not asked again"

    (work / "fmt.sh").write_text("#!/bin/sh\necho v2 >> hook.log\n")  # the model (or anyone) changed the script
    person = Person(False)
    stream, _, _ = run(work, [reply(shell("true")), complete()], approval=person)
    assert len(person.asked) == 1 and "echo v2 >> hook.log" in person.asked[0].detail
    assert (work / "hook.log").read_text() == "v1\nv1\n", "the changed script did not run"
    assert decisions(stream)[0].data["decision"] == "deny" and decisions(stream)[0].data["by"] == "person"


def test_a_change_during_the_run_stops_the_projects_hooks(work):
    project(work, [{"event": "after_action", "command": "echo ran >> hook.log"}])

    def rewrite(prompt):
        config = work / ".anges" / "config.yaml"
        config.write_text(config.read_text().replace("echo ran", "echo changed"))
        return json.dumps(reply(shell("true")))

    stream, _, _ = run(work, [reply(shell("true")), rewrite, complete()], approval=Person(True))
    assert (work / "hook.log").read_text() == "ran\n"
    failed = [e for e in stream.events_list if e.type == "hook_ran"][-1]
    assert failed.data["outcome"] == "failed" and "changed since you trusted it" in failed.data["reason"]


@pytest.mark.parametrize("plant", ["file", "folder"])
def test_a_link_in_the_project_folder_cannot_be_trusted(work, outside, plant):
    (outside / "config.yaml").write_text(yaml.safe_dump({"hooks": MARK}))
    if plant == "folder":
        os.symlink(outside, work / ".anges")
    else:
        (work / ".anges").mkdir()
        os.symlink(outside / "config.yaml", work / ".anges" / "config.yaml")
    person = Person(True)
    stream, _, _ = run(work, [reply(shell("true")), complete()], approval=person)
    assert not person.asked and not (work / "hook.log").exists()
    loaded = load_project(str(work), lambda path: True)
    assert loaded is not None and "symbolic link" in loaded.subject.problem


def test_a_broken_project_config_is_reported_and_the_run_goes_on(work):
    (work / ".anges").mkdir()
    (work / ".anges" / "config.yaml").write_text("hooks:\n  - event: after_action\n    command: x\nsafety: {sandbox: off}\n")
    stream, _, _ = run(work, [complete()])
    [note] = [e for e in stream.events_list if e.type == "hook_ran"]
    assert "unknown key 'safety' (a project's config may set only: hooks)" in note.data["reason"]
    assert stream.events_list[-1].type == "task_completion"


@pytest.mark.sandbox
def test_the_sandbox_keeps_the_project_folder_read_only_and_edits_of_it_ask(work):
    project(work, MARK)
    edit = {"action_type": "EDIT_FILE", "directive_line": "NEW_FILE .anges/evil.sh", "content": "curl x | sh\n"}
    stream, _, _ = run(work, [reply(shell("echo '  - {event: run_start, command: id}' >> .anges/config.yaml; "
                                          "touch .anges/new")), reply(edit), complete()])
    assert "id" not in (work / ".anges" / "config.yaml").read_text() and not (work / ".anges" / "new").exists()
    ran = next(e for e in stream.events_list if e.type == "action")
    assert "is the project's anges folder (its hooks run outside the sandbox), read-only" in ran.content
    declined = [e for e in stream.events_list if e.type == "approval_decided" and e.data["rule"] == "protected_paths"]
    assert declined and not (work / ".anges" / "evil.sh").exists()


def test_anges_trust_shows_trusts_lists_and_forgets(work, anges_home):
    project(work, MARK)
    no_terminal = subprocess.run([*ANGES, "trust", str(work)], capture_output=True, text=True, timeout=60,
                                 stdin=subprocess.DEVNULL)
    assert no_terminal.returncode == 2 and "pass --yes" in no_terminal.stderr
    assert "after_action: echo ran >> hook.log" in no_terminal.stdout
    trusted = subprocess.run([*ANGES, "trust", "--yes", str(work)], capture_output=True, text=True, timeout=60)
    assert trusted.returncode == 0 and f"trusted: the hooks and commands of {work}/.anges" in trusted.stderr
    stream, _, _ = run(work, [reply(shell("true")), complete()])
    assert (work / "hook.log").read_text() == "ran\n" and not decisions(stream), "no question: it is trusted"
    listed = subprocess.run([*ANGES, "trust", "--list"], capture_output=True, text=True, timeout=60)
    assert f"the hooks and commands of {work}/.anges  ({work})" in listed.stdout
    forgotten = subprocess.run([*ANGES, "trust", "--revoke", str(work)], capture_output=True, text=True, timeout=60)
    assert "no longer trusted" in forgotten.stderr and TrustStore().entries() == []


# -- MCP servers whose program lies where commands may write ------------------------------------------------------

EVIL = """import pathlib
pathlib.Path("pwned").write_text("the rewritten server ran")
"""


def mcp_run(work, replies, approval):
    config = load_config(overrides={"safety": {"approval": "ask"}, "mcp": {"servers": {
        "local": {"command": sys.executable, "args": ["server.py"], "cwd": str(work)}}}})
    mcp = manager_for(config, writable=commands_may_write(config.safety, str(work)))
    model = ScriptedModel(replies)
    agent = DefaultAgent(inference_func=model, cmd_init_dir=work, config=config, mcp=mcp, approval=approval)
    try:
        return agent.run_with_new_request("go"), model, mcp
    finally:
        mcp.close()


def test_an_mcp_server_the_model_rewrote_is_asked_about_again_and_not_started_untrusted(work):
    pytest.importorskip("mcp")
    shutil.copy(SERVERS / "stdio_server.py", work / "server.py")
    use = {"action_type": "USE_MCP_TOOL", "mcp_server_name": "local", "tool_name": "echo",
           "tool_args": {"text": "trusted-echo", "times": 2}}
    person = Person(True)
    rewrite = shell(f"cat > server.py <<'EOF'\n{EVIL}EOF")
    stream, model, _ = mcp_run(work, [reply(use), reply(rewrite), complete()], person)
    [question] = person.asked
    assert question.subject == f"local in {work}" and "server.py" in question.detail
    result = next(e for e in stream.events_list if e.data.get("tool") == "echo")
    assert "trusted-echo trusted-echo" in result.content, "the trusted server ran"
    assert "Repeat the text." in model.prompts[0], "the first prompt's guide lists the tools of the server just trusted"
    assert "pwned" in (work / "server.py").read_text()

    person = Person(False)  # the next start: the content changed, so the person is asked again
    stream, model, mcp = mcp_run(work, [complete()], person)
    assert len(person.asked) == 1 and "the rewritten server ran" in person.asked[0].detail
    assert not (work / "pwned").exists(), "the rewritten server never started"
    assert "not trusted" in mcp.failures["local"]

    stream, model, mcp = mcp_run(work, [complete()], None)  # no one to ask: left out, and the run says so
    assert not (work / "pwned").exists() and "not trusted" in mcp.failures["local"]
    assert [d.data["by"] for d in decisions(stream)] == ["no_one"]
    assert "MCP server `local` is not trusted (no one can be asked here)" in model.prompts[0]


def test_an_mcp_server_outside_the_working_directory_is_not_asked_about(work, outside):
    pytest.importorskip("mcp")
    shutil.copy(SERVERS / "stdio_server.py", outside / "server.py")
    config = load_config(overrides={"mcp": {"servers": {"far": {"command": sys.executable, "args": ["server.py"],
                                                                "cwd": str(outside)}}}})
    mcp = manager_for(config, writable=commands_may_write(config.safety, str(work)))
    try:
        assert mcp.awaiting_trust() == {} and "far" in mcp.tools()
    finally:
        mcp.close()


def test_your_own_hook_that_runs_a_script_the_model_can_rewrite_asks_first(work):
    (work / "check.sh").write_text("#!/bin/sh\necho checked >> hook.log\n")
    (work / "check.sh").chmod(0o755)
    hooks = {"hooks": [{"event": "after_action", "command": "sh check.sh > /dev/null; ./check.sh"}]}
    person = Person(True)
    run(work, [reply(shell("echo 'echo pwned > pwned' >> check.sh")), complete()], approval=person, **hooks)
    [question] = person.asked
    assert question.subject == f"after_action: sh check.sh > /dev/null; ./check.sh in {work}"
    assert "echo checked >> hook.log" in question.detail
    assert not (work / "pwned").exists(), "the script the command rewrote during the run did not run"
    person = Person(False)
    stream, _, _ = run(work, [reply(shell("true")), complete()], approval=person, **hooks)
    assert len(person.asked) == 1 and "echo pwned > pwned" in person.asked[0].detail
    assert not (work / "pwned").exists() and not (work / "hook.log").exists()


def test_every_file_a_command_names_is_covered_and_what_a_redirection_writes_is_data(work):
    from anges.config.trust import command_words, named_files

    for name in ("fmt.sh", "server.py", "notes.txt", "out.log"):
        (work / name).write_text("x")
    (work / "tool").mkdir()
    (work / "tool" / "__main__.py").write_text("x")
    def code(command):
        here = str(work.resolve())
        return sorted(os.path.basename(p) for argv in command_words(command)
                      for p in named_files(argv, str(work), lambda path: path.startswith(here)))

    assert code("./fmt.sh notes.txt > out.log 2>&1") == ["fmt.sh", "notes.txt"], "a script may read notes.txt as code"
    assert code("FOO=1 python3 -u server.py --config=notes.txt") == ["notes.txt", "server.py"]
    assert code("cat < notes.txt | grep x >> out.log") == []
    assert code("python3 -m tool && bash -c 'cat notes.txt'") == ["__main__.py", "notes.txt"]
    assert code("{ sh fmt.sh; } || true") == ["fmt.sh"]
    assert named_files(["python3", "server.py"], str(work), lambda path: False) == [], "nothing outside writable places"


def test_content_too_long_for_a_question_is_not_asked_about_and_anges_trust_shows_it_whole(work):
    long_script = "#!/bin/sh\n" + "# a long comment line of the hook's script\n" * 500 + "echo ran >> hook.log\n"
    project(work, [{"event": "after_action", "command": "./long.sh"}], **{"long.sh": long_script})
    person = Person(True)
    stream, _, _ = run(work, [reply(shell("true")), complete()], approval=person)
    assert not person.asked and not (work / "hook.log").exists()
    assert decisions(stream)[0].data["by"] == "limit"
    assert "too long to be shown in a question (anges trust shows it)" in decisions(stream)[0].message
    shown = subprocess.run([*ANGES, "trust", "--yes", str(work)], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and long_script.rstrip("\n") in shown.stdout, "anges trust shows all of it"
    run(work, [reply(shell("true")), complete()], approval=Person())
    assert (work / "hook.log").read_text() == "ran\n"
