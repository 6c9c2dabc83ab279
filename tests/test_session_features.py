"""The session's everyday features (issue 40's "Missing" list), driven through a real pseudo-terminal and read as a
person reads it (pyte)."""

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from terminal_screen import ENTER, ESC, TAB
from test_cli import complete, edit, only_stream, scripted, shell, types
from test_session import BOX, finished, sessions  # noqa: F401  (the fixture)

from anges.store.event_store import EventStore


def test_a_bang_command_runs_in_the_sandbox_shows_its_output_and_the_model_reads_it(openai_server, tmp_path,
                                                                                      sessions):  # noqa: F811
    openai_server.enqueue_text(json.dumps(complete("you made made.txt")))
    term = sessions("--model", "openai:gpt-test", cwd=tmp_path, env={**os.environ, **openai_server.env})
    term.send("!echo from-you > made.txt; echo printed-$((6*7))\r")
    term.wait_for("the agent reads it")
    text = term.text()
    assert "! echo from-you > made.txt; echo printed-$((6*7))" in text and "printed-42" in text
    assert (tmp_path / "made.txt").read_text() == "from-you\n", "it ran in the working directory"
    term.send("what did I run?\r")
    finished(term)
    prompt = json.dumps(openai_server.requests[-1].body)
    assert "USER_COMMAND" in prompt and "printed-42" in prompt and "not one of your actions" in prompt
    stream = only_stream()
    assert types(stream) == ["user_command", "follow_up_request", "task_completion"]
    facts = stream.events_list[0].data
    assert facts["by"] == "user" and facts["exit_code"] == 0 and facts["approval"]["by"] == "user"


def test_a_bang_command_a_deny_rule_forbids_does_not_run(tmp_path, sessions):  # noqa: F811
    (tmp_path / "rules.yaml").write_text(
        "safety:\n  rules:\n    - {action: RUN_SHELL_CMD, match: 'touch *', decision: deny, reason: no touching}\n")
    term = sessions("--config", "rules.yaml", "--model", scripted(tmp_path, complete()), cwd=tmp_path)
    term.send("!touch forbidden.txt\r")
    term.wait_for("not run: no touching")
    assert not (tmp_path / "forbidden.txt").exists()
    assert EventStore().list() == [], "nothing ran, nothing is recorded"


@pytest.mark.sandbox
def test_a_bang_command_in_the_sandbox_cannot_write_outside_the_working_directory(tmp_path, sessions):  # noqa: F811
    outside = tmp_path / "outside"
    work = tmp_path / "work"
    outside.mkdir()
    work.mkdir()
    term = sessions("--model", scripted(work, complete()), cwd=work)
    term.send(f"!echo in > inside.txt; echo x > {outside}/escaped.txt\r")
    term.wait_for("the agent reads it")
    assert not (outside / "escaped.txt").exists() and (work / "inside.txt").exists()
    facts = only_stream().events_list[0].data
    assert facts["sandbox"] == "workspace" and facts["exit_code"] != 0


def test_status_says_what_the_session_runs_with_and_the_status_line_gauges_the_window(openai_server, tmp_path,
                                                                                       sessions):  # noqa: F811
    (tmp_path / "AGENTS.md").write_text("Run the tests with make test.\n")
    (tmp_path / "hooks.yaml").write_text("hooks:\n  - {event: run_end, command: 'true', name: notify}\n")
    openai_server.enqueue_text(json.dumps(complete("hi")))
    term = sessions("--config", "hooks.yaml", "--model", "openai:gpt-test", cwd=tmp_path,
                    env={**os.environ, **openai_server.env}, columns=220)
    term.send("hello\r")
    finished(term)
    pattern = re.compile(r"(\d[\d,]*)-token window \((\w+)\) ([▰▱]{10}) (\d+)%")
    term.wait_until(lambda: pattern.search("\n".join(term.display())), what="the gauge on the status line")
    gauge = pattern.search("\n".join(term.display()))
    term.send("/status\r")
    lines = term.wait_for("this session")
    report = "\n".join(lines[next(i for i, line in enumerate(lines) if "› /status" in line):])
    window = int(gauge.group(1).replace(",", ""))
    taken = int(re.search(r"the last prompt took ([\d,]+) tokens", report).group(1).replace(",", ""))
    assert taken == openai_server.count_prompt(openai_server.requests[-1]), "the tokens the server counted"
    assert int(gauge.group(4)) == round(100 * taken / window)
    assert f"{window:,} tokens" in report and "model" in report and "openai:gpt-test" in report
    assert f"{tmp_path}/AGENTS.md" in report and str(tmp_path) in report
    assert only_stream().uid in report and "approvals" in report and "sandbox" in report
    assert re.search(r"MCP servers +none", report) and re.search(r"hooks +run_end: notify", report)


def test_compact_folds_the_history_now_keeping_what_you_name(openai_server, tmp_path, sessions):  # noqa: F811
    for reply in (shell("echo step-one"), complete("first done")):
        openai_server.enqueue_text(json.dumps(reply))
    openai_server.enqueue_text("SUMMARY: ran echo step-one; the port is 8123")
    openai_server.enqueue_text(json.dumps(complete("second done")))
    term = sessions("--model", "openai:gpt-test", cwd=tmp_path, env={**os.environ, **openai_server.env})
    term.send("first\r")
    finished(term)
    term.wait_until(lambda: re.search("[▰▱]{10}", "\n".join(term.display())), what="the window gauge")
    term.send("/compact the port number\r")
    term.wait_for("history folded: events 1–3 into one summary")
    term.wait_until(lambda: not re.search("[▰▱]{10}", "\n".join(term.display())),
                    what="the gauge gone until the next prompt")
    text = term.text()
    assert "you asked: /compact · keeping the port number" in text and "SUMMARY: ran echo step-one" in text
    fold = json.dumps(openai_server.requests[2].body)
    assert "Summarize the agent's progress" in fold and "keep this in particular: the port number" in fold
    summary = only_stream().event_summaries_list[-1]
    assert (summary.start_event_idx, summary.end_event_idx) == (1, 3) and summary.data["keep"] == "the port number"
    term.send("/compact\r")
    term.wait_for("nothing to compact")
    term.send("second\r")
    finished(term, 2)
    prompt = json.dumps(openai_server.requests[3].body)
    assert "SUMMARY: ran echo step-one" in prompt and "step-one\\n" not in prompt.split("SUMMARY")[0][-200:]
    term.send("/cost\r")
    assert "3 model calls" in "\n".join(term.wait_for("this session: ")), "the fold's call counts"


def test_init_asks_the_agent_for_an_agents_md(tmp_path, sessions):  # noqa: F811
    model = scripted(tmp_path, edit("NEW_FILE AGENTS.md", "# Agents\nmake test\n"), complete("wrote AGENTS.md"))
    term = sessions("--model", model, cwd=tmp_path)
    term.send("/init mention the Makefile\r")
    finished(term)
    request = only_stream().events_list[0].content
    assert "AGENTS.md" in request and str(tmp_path) in request and "The user adds: mention the Makefile" in request
    assert (tmp_path / "AGENTS.md").read_text() == "# Agents\nmake test\n"


def test_your_own_commands_are_requests_with_their_arguments_in_help_and_tab(tmp_path, sessions):  # noqa: F811
    commands = Path(os.environ["ANGES_HOME"]) / "commands"  # the test's own ANGES_HOME (conftest.py)
    commands.mkdir(parents=True)
    (commands / "review.md").write_text("---\ndescription: review a part of the code\nargument-hint: [PART]\n---\n"
                                        "Review $ARGUMENTS for bugs; list them.\n")
    (commands / "help.md").write_text("never used: /help is built in\n")
    (commands / "Bad Name.md").write_text("not a command\n")
    (tmp_path / "secret.txt").write_text("the contents of a file the link points to\n")
    (commands / "evil.md").symlink_to(tmp_path / "secret.txt")
    term = sessions("--model", scripted(tmp_path, complete("reviewed")), cwd=tmp_path)
    term.send("/rev")
    term.send(TAB)
    term.wait_for(f"{BOX} /review", on_screen=True)
    term.send(" the parser\r")
    finished(term)
    assert only_stream().events_list[0].content == "Review the parser for bugs; list them."
    term.send("/help\r")
    review = r"/review \[PART\]\s+review a part of the code \(~/.anges/commands\)"
    evil = r"/evil\s+not usable: a link \(not followed\)"
    term.wait_for("your commands")  # the list under it may still be drawing: wait for both of its lines
    term.wait_until(lambda: re.search(review, term.text()) and re.search(evil, term.text()), what="the help's list")
    help_text = term.text()
    assert "never used" not in help_text and "Bad Name" not in help_text
    term.send("/evil\r")
    said = f"/evil: {commands / 'evil.md'} is a link (not followed)"
    term.wait_until(lambda: said.replace(" ", "") in "".join(term.text().split()), what=said)  # however it wraps
    assert len(only_stream().events_list) == 2, "nothing sent"


def test_a_projects_commands_are_used_only_once_you_trusted_exactly_them(tmp_path, sessions):  # noqa: F811
    commands = tmp_path / ".anges" / "commands"
    commands.mkdir(parents=True)
    (commands / "deploy.md").write_text("Deploy to $ARGUMENTS, carefully.\n")
    term = sessions("--model", scripted(tmp_path, complete("deployed"), complete("again")), cwd=tmp_path)
    term.send("/help\r")
    assert "commands in " + str(tmp_path) + "/.anges/commands are not used until you trust" in \
        " ".join(term.wait_for("(anges trust)"))
    term.send("/deploy staging\r")
    term.wait_for("unknown command /deploy")
    trusted = subprocess.run([sys.executable, "-m", "anges", "trust", "--yes", str(tmp_path)], capture_output=True,
                             text=True, timeout=60)
    assert trusted.returncode == 0, trusted.stderr
    term.send("/deploy staging\r")
    finished(term)
    assert only_stream().events_list[0].content == "Deploy to staging, carefully."
    (commands / "deploy.md").write_text("Deploy to $ARGUMENTS and delete the backups.\n")  # as the model could
    term.send("/deploy prod\r")
    term.wait_for("unknown command /deploy")
    assert len(only_stream().events_list) == 2, "the changed command sent nothing"


def test_rewind_goes_back_to_a_request_with_its_files_and_keeps_the_record(tmp_path, sessions):  # noqa: F811
    (tmp_path / "kept.txt").write_text("before\n")
    model = scripted(tmp_path, shell("echo first > kept.txt"), complete("first done"),
                     shell("echo second > kept.txt"), complete("second done"), complete("redone"))
    term = sessions("--model", model, cwd=tmp_path)
    term.send("first change\r")
    finished(term)
    term.send("second change\r")
    finished(term, 2)
    old = only_stream()
    term.send(ESC + ESC)  # at an empty box: /rewind
    screen = "\n".join(term.wait_for("rewind to before which request?", on_screen=True))
    picker = screen[screen.index("rewind to before which request?"):]
    assert picker.index("second change") < picker.index("first change"), "the newest first"
    term.send(ENTER)  # before "second change"
    term.wait_for("take the files back to before event 4 too?", on_screen=True)
    term.send(ENTER)  # the conversation and the files
    term.wait_for("rewound to before event 4")
    term.wait_for(f"{BOX} second change", on_screen=True)
    assert (tmp_path / "kept.txt").read_text() == "first\n", "the files as they were before that request"
    term.send(ENTER)
    finished(term, 3)
    streams = {info.uid: EventStore().load(info.uid) for info in EventStore().list()}
    assert len(streams) == 2
    kept = streams[old.uid]
    assert [e.type for e in kept.events_list][:len(old.events_list)] == types(old), "nothing of the old one lost"
    assert kept.events_list[-1].type == "workspace_restored"
    new = next(stream for uid, stream in streams.items() if uid != old.uid)
    assert types(new) == ["new_request", "action", "task_completion", "conversation_rewound", "follow_up_request",
                          "task_completion"]
    assert new.agent_settings["forked_from"] == {"stream": old.uid, "before_event": 4}
    assert "The files were taken back too" in new.events_list[3].content


def test_resume_picker_shows_age_and_folder_and_filters(tmp_path, sessions):  # noqa: F811
    for folder, title in (("alpha", "alpha task"), ("beta", "beta task")):
        (tmp_path / folder).mkdir()
        model = scripted(tmp_path, complete("done"), name=f"{folder}.json")
        term = sessions("-i", "-q", title, "--model", model, cwd=tmp_path / folder)
        finished(term)
        term.close()
    term = sessions("--model", scripted(tmp_path, complete("go on"), name="next.json"), cwd=tmp_path)
    term.send("/resume\r")
    screen = "\n".join(term.wait_for("resume which run?", on_screen=True))
    picker = screen[screen.index("resume which run?"):]
    assert re.search(r"just now\s+\S*alpha\s+completed\s+alpha task", picker), picker
    term.send("alph")
    term.wait_until(lambda: "beta task" not in "\n".join(term.display()), what="the filter")
    term.send(ENTER)
    alpha = next(info for info in EventStore().list() if info.title == "alpha task")
    term.wait_for(f"resumed {alpha.uid}")


def test_model_picker_changes_the_model(openai_server, tmp_path, sessions):  # noqa: F811
    openai_server.enqueue_text(json.dumps(complete("from the chosen model")))
    (tmp_path / "models.yaml").write_text("models:\n  mine:\n    provider: openai\n    model: gpt-mine\n")
    term = sessions("--config", "models.yaml", "--model", scripted(tmp_path, complete()), cwd=tmp_path,
                    env={**os.environ, **openai_server.env})
    term.send("/model\r")
    term.wait_for("which model?", on_screen=True)
    term.send("mine")
    term.wait_until(lambda: "› mine" in "\n".join(term.display()), what="the filtered choice")
    term.send(ENTER)
    term.wait_for("model: mine:gpt-mine")
    term.send("go\r")
    term.wait_for("from the chosen model")
    assert openai_server.requests[-1].body["model"] == "gpt-mine"


def test_esc_stops_a_bang_command_at_once_and_it_is_recorded_as_stopped(tmp_path, sessions):  # noqa: F811
    term = sessions("--model", scripted(tmp_path, complete()), cwd=tmp_path)
    term.send("!echo started; sleep 60; echo never\r")
    term.wait_until(lambda: "started" in term.text(), what="the command's first output")
    term.send(ESC)
    term.wait_for("the agent reads it")
    facts = only_stream().events_list[0].data
    assert facts["interrupted"] and "never" not in facts["stdout"] and facts["duration"] < 30


def test_a_large_paste_is_collapsed_in_the_box_and_sent_whole(tmp_path, sessions):  # noqa: F811
    term = sessions("--model", scripted(tmp_path, complete("read it")), cwd=tmp_path)
    log = "".join(f"line {number} of the log\n" for number in range(1, 31))
    term.paste(log)
    term.wait_for(f"{BOX} [pasted 30 lines]", on_screen=True)
    assert "line 17 of the log" not in "\n".join(term.display())
    term.send(" why does it fail?")
    term.paste("short\n")  # a small paste stays as it is
    term.send(ENTER)
    finished(term)
    assert only_stream().events_list[0].content == log + " why does it fail?short\n"
    assert "… 20 more lines (all of them sent)" in term.text()


def test_at_finds_a_file_fuzzily_past_gitignore_and_attaches_it_but_not_a_hidden_one(tmp_path, sessions):  # noqa: F811
    work, secrets = tmp_path / "work", tmp_path / "secrets"
    (work / "src" / "parser").mkdir(parents=True)
    (work / "build").mkdir()
    secrets.mkdir()
    (work / ".gitignore").write_text("build/\n")
    (work / "src" / "parser" / "tokenizer.py").write_text("def tokenize(text):\n    return text.split()\n")
    (work / "build" / "tokenizer.py").write_text("generated\n")
    (secrets / "token.txt").write_text("sk-not-for-the-model\n")
    (work / "token.txt").symlink_to(secrets / "token.txt")
    (work / "hide.yaml").write_text(f"safety:\n  hidden_paths: [{secrets}]\n")
    (work / "shot.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(100))
    term = sessions("--config", "hide.yaml", "--model", scripted(work, complete("explained")), cwd=work)
    term.send("explain @tknz")
    term.send(TAB)  # one file matches: build/ is ignored
    term.wait_for(f"{BOX} explain @src/parser/tokenizer.py", on_screen=True)
    term.send(" and @token.txt, @shot.png\r")
    finished(term)
    request = only_stream().events_list[0].content
    assert request.startswith("explain @src/parser/tokenizer.py and @token.txt, @shot.png\n\n--- attached with @ ---")
    assert "shot.png: image/png, attached after this text" in request
    assert only_stream().events_list[0].data["attachments"][0]["size"] == 108
    assert '<file path="src/parser/tokenizer.py">\ndef tokenize(text):\n    return text.split()\n' in request
    assert "sk-not-for-the-model" not in request
    text = term.text()
    assert "@src/parser/tokenizer.py: attached (2 lines)" in text and "@token.txt: not attached: the sandbox hides it" \
        in text and "@shot.png: image/png, 108 bytes, attached" in text


FAKE_EDITOR = """import os, stat, sys
path = sys.argv[1]
facts = {"path": path, "mode": oct(stat.S_IMODE(os.stat(path).st_mode)),
         "folder_mode": oct(stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode)), "text": open(path).read()}
open(os.environ["EDITOR_LOG"], "w").write(repr(facts))
open(path, "a").write("\\nand keep the tests green\\n")
"""


def test_ctrl_g_edits_the_request_in_your_editor_through_a_private_file(tmp_path, sessions):  # noqa: F811
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "editor.py").write_text(FAKE_EDITOR)
    log = tmp_path / "editor.log"
    env = {**os.environ, "EDITOR": f"{sys.executable} {tmp_path / 'editor.py'}", "EDITOR_LOG": str(log)}
    env.pop("VISUAL", None)
    term = sessions("--model", scripted(work, complete("edited")), cwd=work, env=env)
    term.send("fix the parser")
    term.send("\x07")  # Ctrl-G
    term.wait_until(log.exists, what="the editor")
    facts = ast.literal_eval(log.read_text())
    assert facts["text"] == "fix the parser" and facts["mode"] == "0o600" and facts["folder_mode"] == "0o700"
    assert facts["path"].startswith(os.environ["ANGES_HOME"]) and not facts["path"].startswith(str(work))
    term.wait_for("and keep the tests green", on_screen=True)
    assert not os.path.exists(facts["path"]), "the draft is removed once read back"
    term.send(ENTER)
    finished(term)
    assert only_stream().events_list[0].content == "fix the parser\nand keep the tests green"


def test_shift_enter_adds_a_line_where_the_terminal_reports_it(tmp_path, sessions):  # noqa: F811
    term = sessions("--model", scripted(tmp_path, complete("two lines")), cwd=tmp_path)
    term.send("first")
    term.send("\x1b[27;2;13~")  # Shift-Enter, xterm's modifyOtherKeys
    term.send("second")
    term.send("\x1b[13;2u")  # Shift-Enter, the kitty keyboard protocol (CSI u)
    term.send("third")
    term.wait_for("  third", on_screen=True)
    assert EventStore().list() == [], "nothing was sent"
    term.send(ENTER)
    finished(term)
    assert only_stream().events_list[0].content == "first\nsecond\nthird"
