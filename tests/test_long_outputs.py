"""Long outputs cost once: a result keeps a few KB cut at line ends, the whole output waits in a file the model can
read (in the sandbox too), a new file comes back as its size and first lines, a command comes back whole up to a
generous size and past it names the file that holds it; streams recorded before keep their texts."""

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from anges.agents import DefaultAgent
from anges.config.loading import load_config
from anges.models.scripted import ScriptedModel
from anges.store.event_store import EventStore
from anges.store.events import Event

SEQ = "".join(f"{n}\n" for n in range(1, 50001))
FULL_OUTPUT = re.compile(r"FULL OUTPUT: (\d+) lines \((\d+) bytes\) in (\S+),")


def reply(*actions):
    return {"analysis": "", "reasoning": "step", "actions": list(actions)}


def shell(command, **extra):
    return reply({"action_type": "RUN_SHELL_CMD", "command": command, **extra})


def complete():
    return reply({"action_type": "TASK_COMPLETE", "content": "done"})


def read_the_named_file(prompt):
    path = FULL_OUTPUT.search(prompt.split("# History")[1]).group(3)
    return shell(f"wc -l < '{path}'; tail -n 1 '{path}'; ls '{path}'")


def run(cwd, replies, **overrides):
    model = ScriptedModel(replies)
    agent = DefaultAgent(inference_func=model, cmd_init_dir=cwd, config=load_config(overrides=overrides))
    return agent.run_with_new_request("count"), model


@pytest.fixture
def work(tmp_path):
    path = tmp_path / "work"
    path.mkdir()
    return path


def check_the_full_output_was_read(work, stream):
    first, second = [e for e in stream.events_list if e.type == "action"]
    lines, size, path = FULL_OUTPUT.search(first.content).groups()
    assert (int(lines), int(size)) == (50000, len(SEQ)) == (first.data["stdout_lines"], first.data["stdout_bytes"])
    assert len(first.data["stdout"]) < 8100 and first.data["stdout"].startswith("1\n2\n")
    assert first.data["stdout"].endswith("49999\n50000\n")
    assert re.search(r"\n\.\.\. \[\d+ lines \(\d+ bytes\) cut\] \.\.\.\n", first.content)
    assert second.data["stdout"] == f"50000\n50000\n{path}\n", second.content
    assert list(work.iterdir()) == [], "the working directory is not used for outputs"
    assert Path(path).is_file(), "the file outlasts the run: the history still names it"


@pytest.mark.sandbox
@pytest.mark.parametrize("mode", ["workspace", "read-only"])
def test_the_next_command_reads_the_whole_output_in_the_sandbox(work, mode):
    stream, _ = run(work, [shell("seq 1 50000"), read_the_named_file, complete()],
                    safety={"sandbox": mode, "approval": "auto"})

    assert stream.events_list[1].data["sandbox"] == mode
    check_the_full_output_was_read(work, stream)


def test_the_next_command_reads_the_whole_output_without_a_sandbox(work):
    stream, _ = run(work, [shell("seq 1 50000"), read_the_named_file, complete()],
                    safety={"sandbox": "off", "approval": "auto"})

    assert stream.events_list[1].data["sandbox"] == "none"
    check_the_full_output_was_read(work, stream)


@pytest.mark.sandbox
def test_an_escalated_commands_output_is_readable_inside_the_sandbox(work):
    stream, _ = run(work, [shell("seq 1 50000", escalate="needs the host"), read_the_named_file, complete()],
                    safety={"approval": "auto", "auto_escalate": True})

    assert stream.events_list[1].data["escalated"] and stream.events_list[1].data["sandbox"] == "none"
    assert [e for e in stream.events_list if e.type == "action"][1].data["sandbox"] == "workspace"
    check_the_full_output_was_read(work, stream)


def test_the_result_cap_is_configurable_and_a_short_output_names_no_file(work):
    stream, model = run(work, [shell("seq 1 300"), shell("seq 1 3"), complete()],
                        agents={"common": {"shell_output_cap": 200}})

    cut, whole = [e for e in stream.events_list if e.type == "action"]
    assert len(cut.data["stdout"]) < 260 and "FULL OUTPUT: 300 lines" in cut.content
    assert re.fullmatch(r"COMMAND: seq 1 3\nEXIT CODE: 0 after \d+\.\d\d? s\nSTDOUT:\n1\n2\n3\n", whole.content)
    assert whole.data["output_path"] is None


def test_a_full_output_file_past_its_cap_is_said_to_hold_only_the_end(work):
    def read_its_start(prompt):
        path = re.search(r"(\S+) holds only the end", prompt.split("# History")[1]).group(1)
        return shell(f"head -c 60 '{path}'")

    stream, _ = run(work, [shell("seq 1 400000"), read_its_start, complete()],
                    safety={"background_log_cap": 300_000})

    cut, read = [e for e in stream.events_list if e.type == "action"]
    dropped = cut.data["output_dropped"]
    assert 0 < dropped < cut.data["stdout_bytes"] and "FULL OUTPUT: 400000 lines" in cut.content
    assert f"after its first {dropped} bytes were dropped" in cut.content and "cut parts included" not in cut.content
    assert read.data["stdout"].startswith(f"[anges: the oldest {dropped} bytes of this log were dropped]")


def test_a_full_output_file_that_cannot_be_written_leaves_the_models_view_whole(work):
    """Once a write to the file fails (a full disk; here a file size limit), nothing more goes in: the output read
    so far, waiting in memory for the file, is not written to a file that is gone."""
    probe = textwrap.dedent(f"""
        import json, resource, signal
        from anges.safety.capture import Capture

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
        capture = Capture(budget=20, directory={str(work)!r}, file_cap=1_000_000)
        for n in range(1, 9):  # the third line outgrows the budget: the file starts with the two before it
            capture.stdout.add(f"line {{n}}\\n".encode())
        capture.close()
        shown = capture.render()
        print(json.dumps({{"stdout": shown.stdout, "bytes": shown.stdout_bytes, "lines": shown.stdout_lines}}))
    """)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert (shown["bytes"], shown["lines"]) == (56, 8)
    assert shown["stdout"].startswith("line 1\n") and shown["stdout"].endswith("line 8\n")
    assert [path.stat().st_size for path in work.iterdir()] == [0], "the file the failed writes left"


def test_the_model_reads_the_text_recorded_for_an_event_and_it_survives_a_reload(work):
    stream, model = run(work, [shell("seq 1 50000"), shell("true"), complete()])

    first = stream.events_list[1]
    assert first.content in model.prompts[1] and first.content in model.prompts[2]
    assert len(model.prompts[1]) - len(model.prompts[0]) < 9000, "the result adds about 8 KB, not the 290 KB printed"
    assert EventStore().load(stream.uid).events_list[1].content == first.content


def test_a_created_file_comes_back_as_its_size_and_first_lines_and_a_heredoc_whole(work):
    body = "".join(f"line {n}\t \n" for n in range(1, 101))
    heredoc = "cat > made.txt <<'EOF'\n" + body + "EOF\nwc -l made.txt"
    stream, model = run(work, [
        reply({"action_type": "EDIT_FILE", "directive_line": "NEW_FILE notes.txt", "content": body}),
        shell(heredoc), complete()])

    created, ran = stream.events_list[1], stream.events_list[2]
    lines = created.content.splitlines()
    assert lines[:2] == ["NEW_FILE notes.txt", f"Created notes.txt: 100 lines, {len(body)} bytes. Its first lines:"]
    assert lines[2:12] == [f"line {n}\t " for n in range(1, 11)] and lines[12:] == ["(and 90 more lines)"]
    assert created.data["diff"].count("\n+line") == 100, "the facts keep the whole diff for the views"
    assert (work / "notes.txt").read_text() == body
    assert ran.content.startswith(f"COMMAND: {heredoc}\nEXIT CODE: 0 after "), "the model's own script comes back whole"
    assert ran.data["command"] == heredoc and ran.data["stdout"] == "100 made.txt\n"
    assert f"COMMAND: {heredoc}\n" in model.prompts[2]


def test_a_command_too_long_to_repeat_names_the_file_that_holds_it_whole(work, monkeypatch):
    monkeypatch.setenv("DEPLOY_TOKEN", "s3cr3t-t0ken-value-123")
    body = "".join(f"print('line {n} of a long script')\n" for n in range(200))
    script = f"python3 - <<'EOF'\n# token s3cr3t-t0ken-value-123\n{body}EOF"
    assert len(script) > 4000

    def copy_and_run(prompt):
        path = re.search(r"\(the command is cut here: (\S+) holds it whole\)", prompt.split("# History")[1]).group(1)
        return shell(f"grep -c token '{path}'; bash '{path}' | tail -n 1")

    stream, model = run(work, [shell(script), copy_and_run, complete()])

    assert "A command over 4000 characters is cut in its result; a file holds it whole." in model.prompts[0]
    ran, again = [e for e in stream.events_list if e.type == "action"]
    assert "characters cut]" in ran.content and "line 199 of a long script" in ran.content
    path = Path(re.search(r"\(the command is cut here: (\S+) holds it whole\)", ran.content).group(1))
    assert path.read_text() == script.replace("s3cr3t-t0ken-value-123", "[REDACTED]"), "whole, its secrets masked"
    assert again.data["stdout"] == "1\nline 199 of a long script\n", again.content


def test_events_recorded_by_anges_0_2_keep_their_texts(work):
    output = "x" * 20000 + "\n"
    shell_facts = {"command": "python3 big.py", "exit_code": 0, "duration": 0.1, "timed_out": False,
                   "interrupted": False, "stdout_omitted": 0, "stderr_omitted": 0, "pid": None, "log_path": None,
                   "action_type": "RUN_SHELL_CMD", "stdout": output, "stderr": "", "sandbox": "workspace",
                   "escalated": False}
    diff = "--- /dev/null\n+++ b/a.txt\n@@ -0,0 +1 @@\n+hello\n"
    edit_facts = {"path": str(work / "a.txt"), "operation": "NEW_FILE", "created": True, "lines_added": 1,
                  "lines_removed": 0, "directive": "NEW_FILE a.txt", "diff": diff}
    old_shell = {**Event("action", data=shell_facts).to_dict()}
    old_edit = {**Event("edit_file", data=edit_facts).to_dict()}
    del old_shell["content"], old_edit["content"]  # format 2 leaves out a content its facts rebuild

    assert Event.from_dict(old_shell).content == f"COMMAND: python3 big.py\nEXIT CODE: 0\nSTDOUT:\n{output}"
    assert Event.from_dict(old_edit).content == f"NEW_FILE a.txt\n{diff}"


def test_show_reports_the_true_size_of_what_a_command_printed(work):
    stream, _ = run(work, [shell("seq 1 50000"), complete()])

    shown = subprocess.run([sys.executable, "-m", "anges", "show", stream.uid],
                           capture_output=True, text=True, cwd=work, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert f"printed 50,000 lines, {len(SEQ):,} bytes (cut above)" in shown.stdout
    raw = json.loads(subprocess.run([sys.executable, "-m", "anges", "show", stream.uid, "--json"],
                                    capture_output=True, text=True, cwd=work, timeout=60).stdout)
    assert raw["events_list"][1]["data"]["stdout_bytes"] == len(SEQ)
