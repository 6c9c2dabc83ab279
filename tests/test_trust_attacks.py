"""The trust boundary attacked the way a reviewer broke it: a hook's script written after the run started, scripts
run through wrappers (timeout, nice, `.`, $PWD), planted Python packages, a project's hooks run from a subfolder."""

import os

import pytest
from test_trust import MARK, Person, complete, project, reply, run, shell

from anges.config.trust import command_words, named_files

PWNED = "#!/bin/sh\necho pwned > pwned\n"


def hook_runs(stream):
    return [e for e in stream.events_list if e.type == "hook_ran"]


def test_your_hooks_script_the_model_writes_during_the_run_never_runs(work):
    hooks = {"hooks": [{"event": "before_complete", "command": "sh ./check.sh"}]}
    write = shell(f"printf '{PWNED}' > check.sh")
    stream, _, _ = run(work, [reply(write), complete(), complete()], approval=Person(), **hooks)
    assert (work / "check.sh").exists(), "the model wrote the script"
    assert not (work / "pwned").exists(), "the script it wrote did not run outside the sandbox"
    [refused] = hook_runs(stream)
    assert refused.data["outcome"] == "failed" and "which you have not trusted" in refused.data["reason"]


@pytest.mark.parametrize("command", [
    "timeout 60 ./check.sh", ". ./check.sh", "source check.sh", "nice sh check.sh", '"$PWD/check.sh"',
    "${PWD}/check.sh", "$(pwd)/check.sh", "bash -e check.sh", "stdbuf -oL nohup env X=1 ./check.sh",
    "sh -c 'cd . && sh check.sh'", "exec ./check.sh", "command ./check.sh", "xargs -a /dev/null ./check.sh"])
def test_a_script_run_through_a_wrapper_is_covered(work, command):
    (work / "check.sh").write_text(PWNED)
    covered = [os.path.basename(path) for argv in command_words(command)
               for path in named_files(argv, str(work), lambda path: True)]
    assert "check.sh" in covered


def test_an_existing_script_run_through_timeout_asks_first_and_does_not_run_when_refused(work):
    (work / "check.sh").write_text(PWNED)
    person = Person(False)
    run(work, [reply(shell("true")), complete()], approval=person,
        hooks=[{"event": "after_action", "command": "timeout 60 ./check.sh"}])
    [question] = person.asked
    assert "echo pwned > pwned" in question.detail and not (work / "pwned").exists()


def test_python_dash_m_covers_a_planted_parent_package(work):
    (work / "json").mkdir()
    (work / "json" / "__init__.py").write_text("open('pwned', 'w')\n")
    here = str(work.resolve())
    covered = named_files(["python3", "-m", "json.tool", "--help"], str(work), lambda path: path.startswith(here))
    assert [os.path.relpath(path, here) for path in covered] == ["json/__init__.py"]
    person = Person(False)
    run(work, [reply(shell("true")), complete()], approval=person,
        hooks=[{"event": "after_action", "command": "python3 -m json.tool --help > /dev/null"}])
    assert len(person.asked) == 1 and not (work / "pwned").exists()


def test_a_package_folder_named_by_a_command_is_covered_whole(work):
    (work / "tool" / "sub").mkdir(parents=True)
    for name in ("tool/__main__.py", "tool/sub/__init__.py", "tool/sub/evil.py"):
        (work / name).write_text("x = 1\n")
    covered = named_files(["python3", "tool"], str(work), lambda path: True)
    assert {os.path.relpath(path, work.resolve()) for path in covered} >= {
        "tool/__main__.py", "tool/sub/__init__.py", "tool/sub/evil.py"}


def test_a_projects_hooks_run_in_its_folder_when_the_run_works_in_a_subfolder(work):
    (work / ".git").mkdir()
    project(work, [{"event": "after_action", "command": "sh scripts/check.sh"}])
    (work / "scripts").mkdir()
    (work / "scripts" / "check.sh").write_text("echo trusted >> hook.log\n")
    sub = work / "sub"
    sub.mkdir()
    plant = shell(f"mkdir scripts && printf '{PWNED}' > scripts/check.sh")  # the model, in the subfolder it works in
    person = Person(True)
    run(sub, [reply(plant), reply(shell("true")), complete()], approval=person)
    [question] = person.asked
    assert f"In {work}, these run" in question.detail and "sh scripts/check.sh" in question.detail
    assert (sub / "scripts" / "check.sh").exists(), "the model planted its script"
    assert (work / "hook.log").read_text() == "trusted\ntrusted\n", "the project's script ran, in the project's folder"
    assert not (sub / "pwned").exists() and not (work / "pwned").exists()


@pytest.mark.sandbox
def test_the_projects_folder_above_the_working_folder_stays_read_only_under_a_wider_writable_path(work):
    app = work / "app"
    (app / ".git").mkdir(parents=True)
    project(app, MARK)
    (app / "sub").mkdir()
    edit = {"action_type": "EDIT_FILE", "directive_line": "NEW_FILE ../.anges/evil.sh", "content": PWNED}
    write = "echo 'echo pwned > pwned' > ../.anges/check.sh"
    stream, _, _ = run(app / "sub", [reply(shell("touch ../ok"), shell(write)), reply(edit), complete()],
                       safety={"approval": "ask", "writable_paths": [str(work)]})
    assert (app / "ok").exists(), "the wider writable path is writable"
    assert not (app / ".anges" / "check.sh").exists() and not (app / ".anges" / "evil.sh").exists()
    ran = next(e for e in stream.events_list if e.type == "action" and e.data.get("command") == write)
    assert "is the project's anges folder (its hooks run outside the sandbox), read-only" in ran.content
    asked = [e for e in stream.events_list if e.type == "approval_decided" and e.data["rule"] == "protected_paths"]
    assert asked, "anges' own edit of it asks"


def test_anges_trust_is_not_answered_by_keys_typed_before_the_content_shows(work):
    import pty
    import subprocess
    import sys
    import time

    from anges.config.trust import TrustStore

    project(work, MARK)
    parent, child = pty.openpty()
    os.write(parent, b"y\n")  # typed ahead, before anything is on the screen
    process = subprocess.Popen([sys.executable, "-m", "anges", "trust", str(work)], stdin=child, stdout=child,
                               stderr=child)
    os.close(child)
    shown = b""
    deadline = time.monotonic() + 60
    while b"[y/N]" not in shown and time.monotonic() < deadline:
        shown += os.read(parent, 65536)
    assert b"echo ran >> hook.log" in shown, shown
    os.write(parent, b"n\n")
    assert process.wait(timeout=60) == 0
    os.close(parent)
    assert TrustStore().entries() == [], "the key typed ahead did not trust it"


def test_an_mcp_server_rewritten_between_the_trust_check_and_its_start_is_not_started(work):
    pytest.importorskip("mcp")
    import shutil
    import sys

    from test_trust import EVIL, SERVERS

    from anges.config.loading import load_config
    from anges.config.trust import TrustStore
    from anges.safety.run_safety import commands_may_write
    from anges.tools.mcp import manager_for
    from anges.tools.mcp_config import specs_from_config, untrusted_servers

    config = load_config(overrides={"mcp": {"servers": {
        "local": {"command": sys.executable, "args": ["server.py"], "cwd": str(work)}}}})
    writable = commands_may_write(config.safety, str(work))
    shutil.copy(SERVERS / "stdio_server.py", work / "server.py")
    TrustStore().trust(untrusted_servers(specs_from_config(config.mcp), writable)["local"])
    mcp = manager_for(config, writable=writable)
    assert mcp.awaiting_trust() == {}, "trusted when the manager was made"
    (work / "server.py").write_text(EVIL)  # swapped before the start
    try:
        mcp.start()
        assert "local" not in mcp.tools() and "changed since it was trusted" in mcp.failures["local"]
    finally:
        mcp.close()
    assert not (work / "pwned").exists()

    (work / "server.py").unlink()  # nothing to trust when the manager is made; the script appears before the start
    mcp = manager_for(config, writable=writable)
    assert mcp.awaiting_trust() == {}
    (work / "server.py").write_text(EVIL)
    try:
        mcp.start()
        assert "changed since it was trusted" in mcp.failures["local"]
    finally:
        mcp.close()
    assert not (work / "pwned").exists()


@pytest.mark.parametrize("command", ["npx --no-install my-mcp", "pnpm exec my-mcp", "yarn my-mcp",
                                     "uv run my-mcp", "poetry run my-mcp"])
def test_a_runner_that_finds_its_program_in_the_project_needs_trust(work, command):
    pytest.importorskip("mcp")
    import shlex

    from anges.config.loading import load_config
    from anges.safety.run_safety import commands_may_write
    from anges.tools.mcp import manager_for

    for folder in ("node_modules/.bin", ".venv/bin"):
        (work / folder).mkdir(parents=True)
        (work / folder / "my-mcp").write_text(PWNED)
    argv = shlex.split(command)
    config = load_config(overrides={"mcp": {"servers": {"proj": {"command": argv[0], "args": argv[1:],
                                                                  "cwd": str(work)}}}})
    mcp = manager_for(config, writable=commands_may_write(config.safety, str(work)))
    try:
        subject = mcp.awaiting_trust()["proj"]
    finally:
        mcp.close()
    assert "echo pwned > pwned" in subject.text(), "the person sees the program the runner would run"


def test_a_trust_question_does_not_say_the_agent_gave_a_reason(work):
    from anges.acp.shown import request_text
    from anges.safety.approval_text import ESCALATION_NOTE

    project(work, MARK)
    person = Person(False)
    run(work, [reply(shell("true")), complete()], approval=person)
    [question] = person.asked
    for shown in (question.text(), request_text(question)):
        assert ESCALATION_NOTE in shown and "The agent says why" not in shown and "no reason given" not in shown


def test_a_program_found_on_a_path_entry_where_commands_may_write_is_covered(work, monkeypatch):
    (work / "bin").mkdir()
    (work / "bin" / "lint").write_text(PWNED)
    here = str(work.resolve())
    monkeypatch.setenv("PATH", f"bin{os.pathsep}{os.environ['PATH']}")  # relative: it leads where the hook runs
    covered = named_files(["nice", "lint", "--fix"], str(work), lambda path: path.startswith(here))
    assert covered == [str(work.resolve() / "bin" / "lint")]
