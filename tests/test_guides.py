"""What the guides tell the model about what it cannot see holds: each command in a fresh shell, a reply's actions
in order with their results together afterwards, what a failure or a refusal does to the rest, EDIT_FILE's bytes."""

from anges.agents import DefaultAgent
from anges.config.loading import load_config
from anges.models.scripted import ScriptedModel


def reply(*actions):
    return {"analysis": "", "reasoning": "step", "actions": list(actions)}


def shell(command):
    return {"action_type": "RUN_SHELL_CMD", "command": command}


def edit(directive, content="", **extra):
    return {"action_type": "EDIT_FILE", "directive_line": directive, "content": content, **extra}


def run(cwd, *replies, **overrides):
    model = ScriptedModel([*replies, reply({"action_type": "TASK_COMPLETE", "content": "done"})])
    agent = DefaultAgent(inference_func=model, cmd_init_dir=cwd, config=load_config(overrides=overrides))
    return agent.run_with_new_request("go"), model


def results(stream):
    return [e for e in stream.events_list if e.type in ("action", "edit_file", "approval_decided")]


def test_each_command_starts_in_a_fresh_shell_in_the_working_directory(tmp_path):
    (tmp_path / "sub").mkdir()
    stream, model = run(tmp_path, reply(shell("cd sub && export LEFT=over && pwd"), shell("pwd; echo ${LEFT:-unset}")))

    first, second = results(stream)
    assert first.data["stdout"] == f"{tmp_path / 'sub'}\n"
    assert second.data["stdout"] == f"{tmp_path}\nunset\n"
    assert "Each command starts in a fresh shell in the\nworking directory: a `cd` or an `export` does " \
           "not carry over" in model.prompts[0]


def test_a_failing_action_does_not_stop_the_rest_and_the_results_come_together(tmp_path):
    stream, model = run(tmp_path, reply(shell("exit 3"), edit("REMOVE_LINES missing.txt 1-2"), shell("echo after")))

    failed, refused_edit, after = results(stream)
    assert failed.data["exit_code"] == 3 and "does not exist" in refused_edit.data["error"]
    assert after.data["stdout"] == "after\n"
    turns = [p for p in model.prompts if p.startswith("You are anges")]
    assert len(turns) == 2, "one turn for the whole reply, the next after all of it ran"
    history = model.prompts[1].split("# History")[1]
    assert history.index("EXIT CODE: 3") < history.index("EDIT FAILED") < history.index("COMMAND: echo after")
    assert "An action that fails (a command exiting non-zero, an edit that cannot be applied)\ndoes not stop the rest" \
           in model.prompts[0]
    assert "They run in order, and their results reach you together on your next turn, so a later action cannot " \
           "depend on an\nearlier one's result" in model.prompts[0]


def test_a_declined_action_skips_the_rest_of_the_reply(tmp_path):
    rules = [{"action": "RUN_SHELL_CMD", "match": "rm *", "decision": "deny", "reason": "no deleting"}]
    stream, model = run(tmp_path, reply(shell("rm -r build"), shell("touch made.txt")), safety={"rules": rules})

    [decided] = results(stream)
    assert decided.type == "approval_decided" and decided.data["decision"] == "deny"
    assert decided.data["skipped"] == 1 and not (tmp_path / "made.txt").exists()
    assert "one that is declined (by a rule or a person) skips the rest" in model.prompts[0]


def test_edit_file_keeps_the_bytes_it_is_given_as_its_guide_says(tmp_path):
    (tmp_path / "crlf.txt").write_bytes(b"one\r\ntwo")
    stream, model = run(tmp_path, reply(
        edit("NEW_FILE tabs.txt", "\tindented  \n\nlast line, no newline\t"),
        edit("INSERT_LINES crlf.txt -1", "three  \nfour"),
        edit("REPLACE_TEXT tabs.txt", "LAST", old_text="last line")))

    assert (tmp_path / "tabs.txt").read_bytes() == b"\tindented  \n\nLAST, no newline\t\n"
    assert (tmp_path / "crlf.txt").read_bytes() == b"one\r\ntwo\r\nthree  \r\nfour"
    guide = model.prompts[0].split("## EDIT_FILE")[1].split("\n## ")[0]
    assert "tabs stay tabs (`\\t` in JSON), trailing spaces and blank lines are kept" in guide
    assert "NEW_FILE adds a final newline if `content` lacks one" in guide
    assert "REPLACE_TEXT puts exactly `content` where\n`old_text` was" in guide
    assert "in the file's own style (LF or CRLF); a file without a final newline keeps none" in guide
