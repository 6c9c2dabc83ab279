"""The interactive session (`anges` on a terminal), driven through a real pseudo-terminal and read as a person reads
it: through a terminal emulator (pyte), its screen and scrollback."""

import json
import os
import threading
import time

import pytest
from helpers import pids_running, sleep_token, wait_until_running
from terminal_screen import ALT_ENTER, CTRL_C, CTRL_D, CTRL_J, DOWN, ENTER, ESC, TAB, UP, Terminal
from test_cli import anges, complete, edit, only_stream, reply, scripted, shell, types

from anges.store.event_store import EventStore

BOX = "›"
KEYS = "y yes · n no · a always… · t no, and tell the agent why"


@pytest.fixture
def sessions():
    """Start `anges ARGS` on a terminal; every one started is killed at the end if it is still there."""
    started = []

    def start(*args, cwd, env=None, columns=100, rows=30):
        term = Terminal(list(args), cwd=cwd, env=env, columns=columns, rows=rows)
        started.append(term)
        term.wait_until(lambda: ready(term.display()), what="the input box and the agent")
        return term

    yield start
    for term in started:
        term.close()


def finished(term, runs=1):
    """Wait until `runs` requests have finished (their footer is drawn: the answer may show while it streams)."""
    term.wait_until(lambda: term.text().count("completed in") >= runs, what=f"{runs} finished runs")


def ready(screen: list[str]) -> bool:
    """The input box is up and the status line names the model."""
    text = "\n".join(screen)
    return any(line.startswith(BOX) for line in screen) and "sandbox" in text and "starting…" not in text


def streamed(server, analysis, reasoning, actions, pause):
    """A reply that streams its first part, then waits for `pause` before the rest."""
    text = json.dumps({"analysis": analysis, "reasoning": reasoning, "actions": actions})
    cut = text.index(reasoning) + len(reasoning) // 2
    server.enqueue_text(text, chunks=[text[:cut], text[cut:]], pause=pause)


def test_a_multi_line_task_streams_its_reply_in_place_and_ctrl_d_leaves(openai_server, tmp_path, sessions):
    release = threading.Event()
    reasoning = "List the files to see what is here, then count them for the user."
    streamed(openai_server, "The folder looks small.", reasoning, [{"action_type": "RUN_SHELL_CMD", "command": "ls"}],
             release)
    openai_server.enqueue_text(json.dumps(complete("# Two files\n\nThere are **two** files.")))
    (tmp_path / "a.txt").write_text("a")
    (tmp_path / "b.txt").write_text("b")
    term = sessions("--model", "openai:gpt-test", cwd=tmp_path, env={**os.environ, **openai_server.env})
    assert any(line.startswith(BOX) for line in term.display()), "the input box:\n" + term.text()

    term.send("count the files")
    term.send(ALT_ENTER)
    term.send("and say how many")
    term.send(CTRL_J)
    term.paste("first pasted line\nsecond pasted line")
    term.wait_for("second pasted line", on_screen=True)
    assert "  and say how many" in term.display(), "a second line of the input box"
    term.send(ENTER)

    term.wait_for(reasoning[:len(reasoning) // 2 - 2], on_screen=True)  # the first piece, before the rest exists
    live = "\n".join(term.display())
    assert "The folder looks small." in live, "the analysis shows as it streams"
    assert "$ ls" not in live and "thinking" in live, "the step has not run; the status line says what happens"
    assert "openai:gpt-test" in live and "sandbox" in live
    release.set()
    term.wait_for("There are two files.")
    term.wait_for("completed in")
    lines = [line for line in term.lines() if line.strip()]
    assert sum(reasoning in line for line in lines) == 1, "the step's reasoning shows once"
    analysed = [index for index, line in enumerate(lines) if "The folder looks small." in line]
    assert len(analysed) == 1, "the analysis stays in the transcript once its step lands (dim), not twice"
    assert analysed[0] < lines.index(next(line for line in lines if reasoning in line)), "above the reasoning"
    assert lines[lines.index(next(line for line in lines if reasoning in line)) + 1].startswith("$ ls")
    assert any(line.startswith("  └ exit 0 · ") for line in lines)
    assert "Two files" in lines and "# Two files" not in lines, "the answer is drawn as Markdown"

    term.send(CTRL_D)
    assert term.wait() == 0
    assert only_stream().events_list[0].content == ("count the files\nand say how many\nfirst pasted line\n"
                                                    "second pasted line")


def test_requests_typed_while_it_works_are_queued_and_sent_when_it_finishes(tmp_path, sessions):
    model = scripted(tmp_path, shell("while [ ! -e go ]; do sleep 0.05; done; echo released"), complete("first done"),
                     complete("second done"))
    term = sessions("--model", model, cwd=tmp_path)
    term.send("first\r")
    term.wait_for("running while", on_screen=True)
    term.send("second\r")
    term.wait_for("queued: second", on_screen=True)
    (tmp_path / "go").write_text("")
    term.wait_for("second done")
    term.wait_gone("queued: second")
    assert term.text().index("first done") < term.text().index("› second") < term.text().index("second done")
    assert [e.content for e in only_stream().events_list if "request" in e.type] == ["first", "second"]


def test_a_running_commands_output_shows_live_and_gives_way_to_its_step(tmp_path, sessions):
    # what it prints is computed, so that the command's own text (drawn when it starts) holds none of it
    command = ("printf '\\033[32mstage %s\\033[0m\\n' $((6*7)); for p in 1 6; do printf ' %s0 pct\\r' $p; done; "
               "printf ' %s pct\\n' $((25*4)); while [ ! -e go ]; do sleep 0.05; done; echo linked-$((6*7))")
    model = scripted(tmp_path, shell(command), complete("built"))
    term = sessions("--model", model, cwd=tmp_path)
    term.send("build it\r")
    screen = "\n".join(term.wait_for("100 pct", on_screen=True))  # while the command still waits
    assert "stage 42" in screen and "60 pct" not in screen and "[32m" not in screen
    assert "running printf" in screen, "the status line says what runs"
    assert not (tmp_path / "go").exists()
    (tmp_path / "go").write_text("")
    finished(term)
    text = term.text()
    assert "linked-42" in text and text.count("stage 42") == 1, "the step's output replaces the live one"


def test_esc_stops_the_running_step_within_a_second_and_the_queue_comes_back(tmp_path, sessions):
    token = sleep_token()
    model = scripted(tmp_path, shell(f"sleep {token}"), complete("after the stop"))
    term = sessions("--model", model, cwd=tmp_path)
    term.send("wait a long time\r")
    wait_until_running(token)
    term.send("a later thought\r")
    term.wait_for("queued: a later thought", on_screen=True)
    pressed = time.monotonic()
    term.send(ESC)
    term.wait_for("■ interrupted")
    term.wait_until(lambda: not pids_running(token), what="the command to end")
    assert time.monotonic() - pressed < 5  # a second, give or take a loaded machine
    screen = "\n".join(term.wait_for(f"{BOX} a later thought", on_screen=True))  # back in the box, unsent
    assert "queued:" not in screen
    stream = only_stream()
    assert types(stream) == ["new_request", "action", "task_interrupted"]
    assert stream.events_list[-1].data["by"] == "Esc"
    term.send(ENTER)  # sent now, by the person
    term.wait_for("after the stop")


@pytest.mark.packaged_safety
def test_an_approval_is_one_block_answered_by_one_key(tmp_path, sessions):
    (tmp_path / "rules.yaml").write_text(
        "safety:\n  rules:\n    - {action: RUN_SHELL_CMD, match: 'echo ask-*', decision: ask, reason: the test asks}\n")
    model = scripted(tmp_path, shell("echo ask-yes > y.txt"), shell("echo ask-no > n.txt"),
                     shell("echo ask-tell > t.txt"), complete("finished"))
    term = sessions("--config", "rules.yaml", "--approval", "ask", "--model", model, cwd=tmp_path)
    term.send("task\r")
    block = "\n".join(term.wait_for(KEYS, on_screen=True))  # once it has been on the screen a moment
    assert "│ echo ask-yes > y.txt" in block and "RUN_SHELL_CMD needs your approval" in block
    assert "waiting for your answer" in block and "running echo" not in block, "nothing runs before the answer"
    term.send("y")  # one key, no Enter
    term.wait_for("✓ approved by you: RUN_SHELL_CMD echo ask-yes > y.txt")
    term.wait_until(lambda: "│ echo ask-no > n.txt" in "\n".join(term.display()) and KEYS in "\n".join(term.display()),
                    what="the next question, answerable")
    term.send("n")
    term.wait_for("✗ declined by you: RUN_SHELL_CMD echo ask-no > n.txt")
    term.wait_until(lambda: "│ echo ask-tell > t.txt" in "\n".join(term.display()) and KEYS in "\n".join(term.display()),
                    what="the next question, answerable")
    term.send("t")
    term.wait_for("tell the agent:", on_screen=True)
    term.send("use the Makefile\r")
    finished(term)
    text = term.text()
    assert "needs your approval" not in text, "the question left the screen with its answer, never printed twice"
    assert text.count("approved by you") == 1 and text.count("declined by you") == 2, text
    assert sorted(p.name for p in tmp_path.glob("*.txt")) == ["y.txt"]
    decided = [e.data for e in only_stream().events_list if e.type == "approval_decided"]
    assert [(d["decision"], d["feedback"]) for d in decided] == [("allow", ""), ("deny", ""),
                                                                 ("deny", "use the Makefile")]


def test_resume_picks_an_earlier_run_shows_its_steps_and_continues_it(tmp_path, sessions):
    for title, answer in (("older task", "older answer"), ("newer task", "newer answer")):
        model = scripted(tmp_path, shell(f"echo {title}"), complete(answer), name=f"{title}.json")
        assert anges("-q", title, "--model", model, cwd=tmp_path).returncode == 0
    older = next(info for info in EventStore().list() if info.title == "older task")
    term = sessions("--model", scripted(tmp_path, complete("continued"), name="next.json"), cwd=tmp_path)
    term.send("/resume\r")
    picker = "\n".join(term.wait_for("resume which run?", on_screen=True))
    assert picker.index("newer task") < picker.index("older task"), "the most recent first"
    term.send(DOWN)
    term.send(ENTER)
    term.wait_for(f"resumed {older.uid}")
    text = term.text()
    assert "▶ request: older task" in text and "$ echo older task" in text and "older answer" in text
    assert "newer answer" not in text
    term.send("and now?\r")
    term.wait_for("continued")
    resumed = EventStore().load(older.uid)
    assert [e.content for e in resumed.events_list if "request" in e.type] == ["older task", "and now?"]


def test_resume_id_on_the_command_line_shows_the_earlier_steps_first(tmp_path, sessions):
    assert anges("-q", "first", "--model", scripted(tmp_path, shell("echo one"), complete("one done")),
                 cwd=tmp_path).returncode == 0
    uid = only_stream().uid
    term = sessions("--resume", uid, "--model", scripted(tmp_path, complete("two done"), name="b.json"), cwd=tmp_path)
    term.wait_for("one done")
    term.send("second\r")
    term.wait_for("two done")
    text = term.text()
    assert text.index("$ echo one") < text.index("one done") < text.index("› second") < text.index("two done")


def test_model_diff_and_cost(tmp_path, sessions):
    first = scripted(tmp_path, edit("NEW_FILE notes.txt", "hello\n"), shell("echo from-a-command > made.py"),
                     complete("noted"), name="first.json")
    second = scripted(tmp_path, complete("from the second model"), name="second.json")
    term = sessions("--model", first, cwd=tmp_path)
    assert "first.json" in "\n".join(term.display())
    term.send("write notes\r")
    finished(term)
    term.send("/model no-such-model\r")
    term.wait_for("unknown model 'no-such-model'")
    term.send(f"/model {second}\r")
    term.wait_for("second.json", on_screen=True)
    term.send("and again\r")
    finished(term, 2)
    term.send("/diff\r")
    diff = "\n".join(term.wait_for("(all of it, for git apply: anges diff"))
    assert "2 files changed, 2 insertions(+)" in diff, "what the edit and the command changed, from the checkpoints"
    assert "+hello" in diff and "+from-a-command" in diff
    term.send("/cost\r")
    cost = term.wait_for("this session: ")[-10:]
    line = next(line for line in cost if line.startswith("this session: "))
    assert "this session: 2 steps · 4 model calls" in line and "input /" in line, "the edit and the command: the " \
        "two answers are not steps"
    assert only_stream().events_list[-1].content == "from the second model"


def test_undo_puts_the_files_back_once_you_say_yes(tmp_path, sessions):
    (tmp_path / "kept.txt").write_text("before\n")
    model = scripted(tmp_path, shell("echo after > kept.txt && echo new > new.txt"), shell("cat kept.txt"),
                     complete("changed"))
    term = sessions("--model", model, cwd=tmp_path)
    term.send("change things\r")
    finished(term)
    term.send("/steps\r")
    steps = term.wait_for("(1 more step with a checkpoint changed no file, e.g. RUN_SHELL_CMD cat kept.txt)")
    assert "2  RUN_SHELL_CMD echo after > kept.txt && echo new > new.txt" in steps, "each step by its number"
    assert not any(line.startswith("3  ") for line in steps), "the cat changed no file: not listed as a step"
    term.send("/undo\r")
    shown = "\n".join(term.wait_for("undo this?", on_screen=True))
    text = term.text()
    assert "undo: back to before step 2" in text and "-after" in text, "the step that changed files, not the cat"
    assert "-after" in text and "+before" in text, "the diff it applies"
    assert "yes, put these files back" in shown
    assert (tmp_path / "kept.txt").read_text() == "after\n", "nothing changes before the answer"
    term.send("\r")  # yes: the first choice
    term.wait_for("undone: 2 files changed")
    assert (tmp_path / "kept.txt").read_text() == "before\n" and not (tmp_path / "new.txt").exists()
    assert only_stream().events_list[-1].type == "workspace_restored"


def test_resizing_redraws_the_live_part_at_the_new_width(tmp_path, sessions):
    term = sessions("--model", scripted(tmp_path, complete()), cwd=tmp_path, columns=100)
    assert "─" * 100 in term.display()
    term.send("x" * 80)
    term.wait_for("x" * 80, on_screen=True)
    term.resize(60, 30)
    term.wait_for("─" * 60, on_screen=True)
    screen = term.wait_until(lambda: "  " + "x" * 22 in term.display(), what="the box's second line")
    assert f"{BOX} " + "x" * 58 in screen, "the input box wraps at the new width"
    assert not any("─" * 61 in line for line in screen)
    term.send(CTRL_C)  # clears the box
    term.wait_gone("xxxx")
    term.send("/help\r")
    help_lines = term.wait_for("/resume [ID]")
    assert all(len(line) <= 60 for line in help_lines)


def test_ctrl_c_twice_at_an_empty_box_leaves_and_history_comes_back_next_time(tmp_path, sessions):
    term = sessions("--model", scripted(tmp_path, complete("remembered")), cwd=tmp_path)
    term.send("remember this task\r")
    finished(term)
    term.send(CTRL_C)
    term.wait_for("Ctrl-C again leaves", on_screen=True)
    term.send(CTRL_C)
    assert term.wait() == 0

    term = sessions("--model", scripted(tmp_path, complete(), name="b.json"), cwd=tmp_path)
    term.send(UP)
    term.wait_for(f"{BOX} remember this task", on_screen=True)
    term.send(CTRL_C)
    term.wait_gone("remember this task")
    term.send("\x12")  # Ctrl-R: search the history
    term.send("this ta")
    term.wait_for("remember this task", on_screen=True)


def test_completion_of_files_after_at_and_of_slash_commands(tmp_path, sessions):
    (tmp_path / "notes_for_the_test.md").write_text("x")
    (tmp_path / "src").mkdir()
    term = sessions("--model", scripted(tmp_path, complete()), cwd=tmp_path, columns=160)
    term.send("look at @notes_f")
    term.send(TAB)
    term.wait_for(f"{BOX} look at @notes_for_the_test.md", on_screen=True)
    term.send(CTRL_C)
    term.send("/mod")
    term.send(TAB)
    term.wait_for(f"{BOX} /model", on_screen=True)
    term.send(CTRL_C)
    term.send("/bogus\r")
    term.wait_for("unknown command /bogus: the commands are /help, /new, /resume, /list, /model, /sandbox, "
                  "/approval, /cost, /diff, /steps, /undo, /jobs, /plan, /export, /exit")


def test_children_show_indented_under_their_parent(tmp_path, sessions):
    model = scripted(
        tmp_path,
        reply({"action_type": "CALL_CHILD_AGENT", "directive": "NEW_CHILD_AGENT TASK_EXECUTOR",
               "agent_input": "make notes.txt"}, reasoning="delegate"),
        edit("NEW_FILE notes.txt", "a note\n"), complete("notes.txt written"), complete("The executor wrote it."))
    term = sessions("--agent", "orchestrator", "--model", model, cwd=tmp_path)
    term.send("write notes\r")
    term.wait_for("The executor wrote it.")
    child = next(info for info in EventStore().list() if info.parent_ids)
    lines = term.lines()
    assert f"⇢ starts task_executor {child.uid} make notes.txt" in lines
    assert f"  [task_executor {child.uid}] ✎ edited notes.txt (+1 −0)" in lines


def test_jobs_lists_the_background_jobs_and_kills_one(tmp_path, sessions):
    token = sleep_token()
    model = scripted(tmp_path, shell(f"sleep {token}", run_in_background=True),
                     shell("while [ ! -e go ]; do sleep 0.05; done"), complete("jobs done"))
    term = sessions("--model", model, cwd=tmp_path, columns=160)
    term.send("start a server\r")
    term.wait_for("running while", on_screen=True)
    wait_until_running(token)
    term.send("/jobs\r")
    listed = next(line for line in term.wait_for("1  pid ") if line.startswith("1  pid "))
    assert f"sleep {token}" in listed and "running" in listed
    term.send("/jobs kill 1\r")
    term.wait_for("killed job 1")
    term.wait_until(lambda: not pids_running(token), what="the job to end")
    (tmp_path / "go").write_text("")
    term.wait_for("jobs done")


def test_a_job_the_run_ended_is_said_once(tmp_path, sessions):
    token = sleep_token()
    model = scripted(tmp_path, shell(f"sleep {token}", run_in_background=True), complete("done?"), complete("serving"))
    term = sessions("--model", model, cwd=tmp_path, columns=160)
    term.send("serve it\r")
    finished(term)
    assert "⏸ completion held" in term.lines(), "the first completion was held: the job still ran"
    assert term.text().count(f"(sleep {token})") == 1, "under the answer, not again in the footer"
    assert not pids_running(token)


def test_new_sandbox_approval_and_export(tmp_path, sessions):
    model = scripted(tmp_path, complete("first stream"), complete("second stream"))
    term = sessions("--model", model, cwd=tmp_path)
    term.send("one\r")
    finished(term)
    term.send("/sandbox read-only\r")
    term.wait_for("sandbox: read-only (commands write nothing but a private /tmp)")
    term.wait_for("sandbox read-only", on_screen=True)
    term.send("/approval nonsense\r")
    term.wait_for("/approval nonsense: choose one of ask, auto, deny")
    term.send("/export notes.md\r")
    term.wait_for(f"wrote {tmp_path / 'notes.md'}")
    assert (tmp_path / "notes.md").read_text().startswith("# one")
    (tmp_path / "notes.md").write_text("my own notes\n")
    term.send("/export notes.md\r")
    term.wait_for("notes.md exists: replace it?", on_screen=True)
    term.send("\x1b[B\r")  # down to "no, keep it"
    term.wait_for("not written: ")
    assert (tmp_path / "notes.md").read_text() == "my own notes\n", "an existing file is replaced only on a yes"
    term.send("/export notes.md\r")
    term.wait_for("yes, replace notes.md", on_screen=True)
    term.send("\r")
    term.wait_until(lambda: (tmp_path / "notes.md").read_text().startswith("# one"), what="the report replaces it")
    term.send("/new\r")
    term.wait_for("a new stream: the next request starts afresh")
    term.send("two\r")
    finished(term, 2)
    assert "second stream" in term.text()
    term.send(CTRL_D)
    assert term.wait() == 0
    streams = {info.title: EventStore().load(info.uid) for info in EventStore().list()}
    assert sorted(streams) == ["one", "two"]
    assert term.text().count("continue later with: anges --resume") == 1


def test_the_history_file_is_private_bounded_and_reads_an_older_one(tmp_path):
    from anges.cli.composer import MAX_HISTORY, MAX_HISTORY_BYTES, History

    path = tmp_path / "history"
    path.write_text("an old task\nanother\n")  # what the readline history of an earlier `anges -i` wrote
    path.chmod(0o644)
    history = History(str(path))
    history.store_string("two\nlines")
    assert path.stat().st_mode & 0o777 == 0o600
    assert list(History(str(path)).load_history_strings()) == ["two\nlines", "another", "an old task"]
    entry = "x" * 200
    for n in range(3000):
        history.store_string(f"task {n} {entry}")
    assert path.stat().st_size <= MAX_HISTORY_BYTES + 300
    loaded = list(History(str(path)).load_history_strings())
    assert len(loaded) == MAX_HISTORY and loaded[0] == f"task 2999 {entry}"


def test_a_stop_while_the_model_thinks_takes_its_notice_away_once_stopped(openai_server, tmp_path, sessions):
    text = json.dumps(complete("never shown"))
    openai_server.enqueue_text(text, chunks=[text[:40], text[40:]], stall=60)  # the stream never ends
    term = sessions("--model", "openai:gpt-test", cwd=tmp_path, env={**os.environ, **openai_server.env})
    term.send("think\r")
    term.wait_for("finish", on_screen=True)
    term.send(ESC)
    term.wait_for("stopping the run", on_screen=True)
    term.wait_for("■ interrupted")

    def idle(screen):
        rule = next((i for i, line in enumerate(screen) if line.startswith("────")), 0)
        return screen[rule - 1].startswith("session: ") and "stopping the run" not in "\n".join(screen)
    term.wait_until(lambda: idle(term.display()), timeout=15, what="the session's status line, no notice of a stop")


def test_a_dropped_model_call_that_ends_later_leaves_the_status_line_alone():
    from anges.cli.status import Status, WatchedModel

    status = Status()

    def model_call():
        started, release = threading.Event(), threading.Event()

        def model(prompt, temperature=0.0):
            started.set()
            release.wait()
            return json.dumps(shell("make"))

        thread = threading.Thread(target=WatchedModel(model, status), args=("prompt",))
        thread.start()
        started.wait()
        return release, thread

    status.begin()
    release, call = model_call()
    status.end()  # the request was stopped; its model call ends later
    release.set()
    call.join()
    assert not status.working, status.line()
    status.begin()
    release, call = model_call()
    status.end()
    status.begin()  # the next request thinks when the call of the one before ends
    release.set()
    call.join()
    assert status.activity == "thinking"


def test_ctrl_o_shows_a_steps_whole_output_and_analysis_and_q_leaves_nothing_behind(tmp_path, sessions):
    model = scripted(tmp_path, {"analysis": "THE-ANALYSIS of the numbers", "reasoning": "count",
                                "actions": [{"action_type": "RUN_SHELL_CMD", "command": "seq 101 140"}]},
                     shell("echo second"), complete("counted"))
    term = sessions("--model", model, cwd=tmp_path, rows=30)
    term.send("count\r")
    finished(term)
    assert "120" not in term.lines(), "the transcript shows the output's first and last lines only"
    term.send("\x0f")  # Ctrl-O: the last step, the answer
    term.wait_for("step 4 (3 of 3)", on_screen=True)
    assert "counted" in "\n".join(term.display())
    term.send("\x1b[D")  # ←: the step before
    term.wait_for("step 3 (2 of 3)", on_screen=True)
    term.send("\x1b[D")
    term.wait_for("step 2 (1 of 3)", on_screen=True)
    assert "  THE-ANALYSIS of the numbers" in term.display(), "the analysis"
    term.send("\x1b[6~")  # PgDn
    term.wait_until(lambda: "120" in term.display(), what="the middle of the output, which the transcript cut")
    term.send("q")
    term.wait_until(lambda: not any(line.startswith("step 2 (1 of 3)") for line in term.display()),
                    what="the pager closed")
    term.read_for(0.3)
    assert "120" not in term.lines(), "the pager left nothing on the screen nor in the scrollback"
    assert sum("THE-ANALYSIS" in line for line in term.lines()) == 1, "the analysis once: the transcript's"
