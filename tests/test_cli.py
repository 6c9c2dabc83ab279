"""The `anges` command, run as a real subprocess with a scripted model and ANGES_HOME in a temp dir."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import pids_running, sleep_token, wait_until_running

from anges.store.event_store import EventStore

ANGES = [sys.executable, "-m", "anges"]


def reply(*actions, reasoning="next step"):
    return {"analysis": "", "reasoning": reasoning, "actions": list(actions)}


def shell(command, **extra):
    return reply({"action_type": "RUN_SHELL_CMD", "command": command, **extra}, reasoning=f"run {command}")


def edit(directive, content):
    return reply({"action_type": "EDIT_FILE", "directive_line": directive, "content": content}, reasoning="edit")


def finish(kind, content):
    return reply({"action_type": kind, "content": content}, reasoning="finish")


def complete(content="Done."):
    return finish("TASK_COMPLETE", content)


def scripted(tmp_path, *replies, name="replies.json"):
    path = tmp_path / name
    path.write_text(json.dumps(list(replies)))
    return f"scripted:{path}"


def anges(*args, cwd, input=None, env=None, timeout=120):
    """`anges ARGS` run to its end; `timeout` only catches a hang (a run of a few seconds takes 30 under heavy load,
    with MCP servers to start)."""
    return subprocess.run([*ANGES, *args], cwd=cwd, input=input, capture_output=True, text=True,
                          env=env or os.environ.copy(), timeout=timeout, check=False)


def types(stream):
    return [e.type for e in stream.events_list]


def only_stream():
    infos = EventStore().list()
    assert len(infos) == 1, infos
    return EventStore().load(infos[0].uid)


def wait_for(path, timeout=15):
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)
    return path.read_text().strip()


# --- help and version --------------------------------------------------------------------------------------


def test_help_shows_every_mode_and_the_exit_codes(tmp_path):
    out = anges("--help", cwd=tmp_path)
    assert out.returncode == 0
    text = out.stdout
    for example in ('anges -q "', "anges -f task.md", "anges -f -", "anges -i", "anges --resume ID",
                    "--output jsonl", "anges list", "anges show ID", "anges export ID", "anges ui"):
        assert example in text, example
    codes = text[text.index("exit codes:"):]
    for code, words in (("0", "completed"), ("3", "help"), ("4", "interrupted"), ("2", "configuration"),
                        ("1", "unexpected")):
        assert any(line.strip().startswith(code) and words in line for line in codes.splitlines()), code
    for flag in ("--question", "--input-file", "--interactive", "--agent", "--model", "--path", "--cmd-prefix",
                 "--notes", "--notes-file", "--config", "--max-steps", "--timeout", "--record", "--verbose",
                 "--quiet", "--resume", "--mcp-config", "--output", "--version"):
        assert flag in text, flag
    for command in ("list", "show", "export", "import", "rm", "ui"):
        assert f"    {command} " in text, command


def test_help_imports_no_sdk_web_or_template_modules(tmp_path):
    out = subprocess.run([*ANGES[:1], "-X", "importtime", *ANGES[1:], "--help"], cwd=tmp_path, capture_output=True,
                         text=True, env=os.environ.copy(), timeout=30, check=False)
    assert out.returncode == 0
    modules = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert "anges.cli.main" in modules
    heavy = {"openai", "google.genai", "anthropic", "flask", "jinja2", "yaml", "httpx", "mcp", "anges.agents",
             "anges.store.event_store", "anges.models", "readline", "prompt_toolkit", "rich"}
    assert not modules & heavy


def test_version(tmp_path):
    out = anges("--version", cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == "anges 0.2.0"


def test_installed_console_script_runs_a_task(tmp_path):
    script = shutil.which("anges", path=os.path.dirname(sys.executable))
    assert script, "the `anges` console script is not installed next to the interpreter"
    model = scripted(tmp_path, complete("from the console script"))
    out = subprocess.run([script, "-q", "hi", "--model", model], cwd=tmp_path, capture_output=True, text=True,
                         env=os.environ.copy(), timeout=30, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "from the console script\n"


# --- one-shot runs and exit codes --------------------------------------------------------------------------


def test_one_shot_run_shows_the_transcript_on_stderr_and_the_answer_on_stdout(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    model = scripted(tmp_path, edit("NEW_FILE hello.py", "print('hi')\n"), shell("python3 hello.py"),
                     complete("## Result\n\nCreated `hello.py`; it prints **hi**."))
    out = anges("-q", "write hello.py and run it", "--model", model, "--path", str(work), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "## Result\n\nCreated `hello.py`; it prints **hi**.\n"  # Markdown as is when piped
    assert (work / "hello.py").read_text() == "print('hi')\n"
    err = out.stderr
    assert "✎ edited hello.py (+1 −0)" in err and "+print('hi')" in err
    assert "$ python3 hello.py" in err and "│ hi" in err and "└ exit 0" in err
    assert "\x1b[" not in err + out.stdout  # no colour off a terminal
    stream = only_stream()
    assert types(stream) == ["new_request", "edit_file", "action", "task_completion"]
    assert stream.agent_settings["cmd_init_dir"] == str(work)
    assert f"stream {stream.uid}" in err and f"anges --resume {stream.uid}" in err
    assert "completed in" in err and "3 model calls" in err


@pytest.mark.parametrize("kind, code, word", [
    ("TASK_COMPLETE", 0, "completed"), ("AGENT_TEXT_RESPONSE", 0, "answered"), ("HELP_NEEDED", 3, "help needed"),
])
def test_exit_code_follows_how_the_agent_returned(tmp_path, kind, code, word):
    out = anges("-q", "task", "--model", scripted(tmp_path, finish(kind, "The text of the reply.")), cwd=tmp_path)
    assert out.returncode == code, out.stderr
    assert out.stdout == "The text of the reply.\n"
    assert f"{word} in" in out.stderr


def test_help_needed_says_how_to_reply(tmp_path):
    out = anges("-q", "task", "--model", scripted(tmp_path, finish("HELP_NEEDED", "Which branch?")), cwd=tmp_path)
    assert out.returncode == 3
    assert f"reply with: anges --resume {only_stream().uid}" in out.stderr


def test_max_steps_exhausts_the_run_with_exit_4(tmp_path):
    model = scripted(tmp_path, shell("echo 1"), shell("echo 2"), shell("echo 3"), complete())
    out = anges("-q", "count", "--model", model, "--max-steps", "2", cwd=tmp_path)
    assert out.returncode == 4, out.stderr
    stream = only_stream()
    assert types(stream) == ["new_request", "action", "action", "task_interrupted"]
    assert stream.events_list[-1].data["reason"] == "event_limit"
    assert "out of steps" in out.stderr and out.stdout == ""


def test_timeout_stops_a_long_command_with_exit_4(tmp_path):
    started = time.monotonic()
    out = anges("-q", "wait", "--model", scripted(tmp_path, shell("sleep 20"), complete()), "--timeout", "1",
                cwd=tmp_path)
    assert out.returncode == 4, out.stderr
    assert time.monotonic() - started < 10
    stream = only_stream()
    assert stream.events_list[-1].data["reason"] == "timeout"
    assert stream.events_list[-2].data["interrupted"] is True
    assert "out of time" in out.stderr


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_ctrl_c_during_a_long_command_interrupts_kills_it_and_exits_4(tmp_path, signum):
    token = sleep_token()
    model = scripted(tmp_path, shell(f"echo $$ > pid.txt; sleep {token}"), complete())
    proc = subprocess.Popen([*ANGES, "-q", "wait", "--model", model], cwd=tmp_path, env=os.environ.copy(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(tmp_path / "pid.txt")
    wait_until_running(token)
    sent = time.monotonic()
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=15)
    assert proc.returncode == 4, err
    assert time.monotonic() - sent < 5
    assert "Traceback" not in err and "interrupting" in err
    assert ("Ctrl-C again quits at once" in err) == (signum == signal.SIGINT)  # a service manager has no Ctrl-C
    assert not pids_running(token), "the command's processes outlived the interrupt"
    stream = only_stream()
    assert types(stream) == ["new_request", "action", "task_interrupted"]
    assert stream.events_list[-1].data["reason"] == "interrupt"
    assert stream.events_list[1].data["interrupted"] is True


def test_a_second_ctrl_c_exits_at_once_and_still_kills_the_command(tmp_path):
    # The command ignores SIGTERM, so the first Ctrl-C waits out the kill grace; the second cuts it short.
    token = sleep_token()
    model = scripted(tmp_path, shell(f"trap '' TERM; echo $$ > pid.txt; sleep {token}"), complete())
    proc = subprocess.Popen([*ANGES, "-q", "wait", "--model", model], cwd=tmp_path, env=os.environ.copy(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(tmp_path / "pid.txt")
    proc.send_signal(signal.SIGINT)
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=15)
    assert proc.returncode == 4, err
    assert "Traceback" not in err
    assert not pids_running(token)


def test_no_task_is_a_usage_error(tmp_path):
    out = anges("--model", "auto", cwd=tmp_path, input="")  # not a terminal: no session to open
    assert out.returncode == 2
    assert "no task" in out.stderr


@pytest.mark.parametrize("args, message", [
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["-q", "x", "--max-steps", "0"], "--max-steps: must be more than 0"),
    (["-q", "x", "--timeout", "soon"], "--timeout: not a number"),
    (["-q", "x", "--agent", "wizard"], "invalid choice: 'wizard'"),
    (["-q", "x", "-f", "task.md"], "not allowed with argument"),
    (["-q", "x", "--path", "/no/such/dir"], "--path /no/such/dir is not a directory"),
    (["-f", "/no/such/task.md"], "cannot read /no/such/task.md"),
    (["-q", "  "], "the task is empty"),
    (["-i", "-f", "-"], "cannot follow -f -"),
    (["-q", "x", "--mcp-config", "missing.json"], "--mcp-config missing.json: no such file"),
    (["-q", "x", "--model", "scripted:/no/such/replies.json"], "cannot read scripted replies"),
    (["list", "-n", "-1"], "--limit: must be 0 or more, got -1"),
])
def test_usage_errors_exit_2_with_one_message(tmp_path, args, message):
    out = anges(*args, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr
    assert "Traceback" not in out.stderr


def test_no_model_exits_2_with_the_one_message(tmp_path):
    out = anges("-q", "hello", "--model", "auto", cwd=tmp_path)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("anges: no model is configured") and "ANTHROPIC_API_KEY" in lines[0]
    assert "offline demo" in lines[0] and "--model replay:examples/recorded/fizzbuzz.jsonl" in lines[0]
    assert EventStore().list() == []


def test_bad_config_file_exits_2_naming_the_file_and_the_key(tmp_path):
    config = tmp_path / "mine.yaml"
    config.write_text("agents:\n  common:\n    max_stepz: 3\n")
    out = anges("-q", "x", "--config", str(config), "--model", scripted(tmp_path, complete()), cwd=tmp_path)
    assert out.returncode == 2
    assert str(config) in out.stderr and "agents.common.max_stepz" in out.stderr
    config.write_text("model: [unclosed\n")
    out = anges("-q", "x", "--config", str(config), cwd=tmp_path)
    assert out.returncode == 2 and str(config) in out.stderr and "not valid YAML" in out.stderr


def test_config_file_is_layered_under_the_command_line(tmp_path):
    config = tmp_path / "mine.yaml"
    config.write_text("agents:\n  common:\n    max_number_of_events_to_exhaust: 1\n")
    model = scripted(tmp_path, shell("echo 1"), shell("echo 2"), complete())
    out = anges("-q", "x", "--config", str(config), "--model", model, cwd=tmp_path)
    assert out.returncode == 4 and only_stream().events_list[-1].data["reason"] == "event_limit"
    EventStore().delete(only_stream().uid)
    out = anges("-q", "x", "--config", str(config), "--max-steps", "5", "--model", model, cwd=tmp_path)
    assert out.returncode == 0, out.stderr


def test_unexpected_errors_exit_1_with_one_line_and_a_traceback_only_with_v(tmp_path):
    env = {**os.environ, "ANGES_HOME": str(tmp_path / "home-is-a-file")}
    Path(env["ANGES_HOME"]).write_text("")
    model = scripted(tmp_path, complete())
    unasked = ("--sandbox", "off", "--approval", "auto")  # no sandbox notice where bwrap is missing
    out = anges("-q", "x", "--model", model, *unasked, cwd=tmp_path, env=env)
    assert out.returncode == 1
    assert out.stderr.startswith("anges: unexpected error: ") and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 2  # the error and the hint to use -v
    out = anges("-q", "x", "--model", model, "-v", *unasked, cwd=tmp_path, env=env)
    assert out.returncode == 1 and "Traceback" in out.stderr


# --- where the task comes from, and the options ------------------------------------------------------------


def test_task_from_stdin_with_f_dash(tmp_path):
    out = anges("-f", "-", "--model", scripted(tmp_path, complete()), cwd=tmp_path,
                input="a task\nover two lines\n")
    assert out.returncode == 0, out.stderr
    assert only_stream().events_list[0].content == "a task\nover two lines"


@pytest.mark.parametrize("flag", ["-f", "--input-file"])
def test_task_from_a_file(tmp_path, flag):
    (tmp_path / "task.md").write_text("# Task\nDo it.\n")
    out = anges(flag, "task.md", "--model", scripted(tmp_path, complete()), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert only_stream().events_list[0].content == "# Task\nDo it."


@pytest.mark.parametrize("spelling", [
    ["--question", "go", "--path", "{work}", "--cmd-prefix", "GREETING=hello"],
    ["-q", "go", "--cmd_init_dir", "{work}", "--cmd_prefix", "GREETING=hello"],
])
def test_path_and_command_prefix_with_their_0_1_spellings(tmp_path, spelling):
    work = tmp_path / "work"
    work.mkdir()
    args = [a.format(work=work) for a in spelling]
    model = scripted(tmp_path, shell("printenv GREETING; pwd"), complete())
    out = anges(*args, "--model", model, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    stream = only_stream()
    assert stream.events_list[1].content.split("STDOUT:\n")[1].split() == ["hello", str(work)]
    assert stream.agent_settings["prefix_cmd"] == "GREETING=hello"


def test_notes_and_notes_files_reach_the_agent(tmp_path):
    (tmp_path / "notes.md").write_text("Use tabs.\n")
    out = anges("-q", "x", "--notes", "Be brief.", "--notes", "No sudo.", "--notes-file", "notes.md",
                "--model", scripted(tmp_path, complete()), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert only_stream().agent_settings["notes"][-3:] == ["Be brief.", "No sudo.", "Use tabs.\n"]


@pytest.mark.parametrize("agent", ["default", "task_executor", "task_analyzer"])
def test_agent_type(tmp_path, agent):
    out = anges("-q", "x", "--agent", agent, "--model", scripted(tmp_path, complete()), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert only_stream().agent_type == agent


@pytest.mark.parametrize("flag", ["--mcp-config", "--mcp_config"])
def test_mcp_config_connects_the_servers_for_the_run(tmp_path, flag):
    server = Path(__file__).parent / "mcp_servers" / "stdio_server.py"
    pid_file = tmp_path / "server.pid"
    (tmp_path / "mcp.json").write_text(json.dumps({"mcpServers": {"demo": {
        "command": sys.executable, "args": [str(server)], "env": {"PID_FILE": str(pid_file)}}}}))
    use = reply({"action_type": "USE_MCP_TOOL", "mcp_server_name": "demo", "tool_name": "echo",
                 "tool_args": {"text": "hi", "times": 2}})
    out = anges("-q", "x", flag, "mcp.json", "--approval", "auto", "--model", scripted(tmp_path, use, complete()),
                cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert '⚙ demo.echo {"text": "hi", "times": 2}' in out.stderr and "│ hi hi" in out.stderr
    stream = only_stream()
    assert stream.events_list[1].data["tool"] == "echo" and "hi hi" in stream.events_list[1].content
    assert stream.agent_settings["mcp_config"] == str(tmp_path / "mcp.json")
    for pid in map(int, pid_file.read_text().split()):
        assert not Path(f"/proc/{pid}").exists(), "the MCP server outlived the run"


def test_record_writes_every_model_call(tmp_path):
    record = tmp_path / "calls.jsonl"
    out = anges("-q", "x", "--record", str(record), "--model", scripted(tmp_path, shell("true"), complete()),
                cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert record.exists() and record.read_text().strip()
    replay = anges("-q", "x", "--model", f"replay:{record}", cwd=tmp_path)
    assert replay.returncode == 0, replay.stderr
    assert replay.stdout == out.stdout


def test_quiet_prints_only_the_answer_and_verbose_adds_detail(tmp_path):
    model = scripted(tmp_path, shell("seq 1 30"), complete("All done."))
    quiet = anges("-q", "x", "--quiet", "--model", model, cwd=tmp_path)
    assert quiet.returncode == 0 and quiet.stdout == "All done.\n" and quiet.stderr == ""
    verbose = anges("-q", "x", "-v", "--model", model, cwd=tmp_path)
    normal = anges("-q", "x", "--model", model, cwd=tmp_path)
    assert "more lines" in normal.stderr and "│ 30" in normal.stderr and "│ 15" not in normal.stderr
    assert "│ 15" in verbose.stderr and "tokens (estimated)" in verbose.stderr


def test_quiet_still_says_why_a_run_stopped(tmp_path):
    model = scripted(tmp_path, shell("echo 1"), shell("echo 2"), complete())
    out = anges("-q", "x", "--quiet", "--max-steps", "1", "--model", model, cwd=tmp_path)
    assert out.returncode == 4
    assert out.stderr.startswith("anges: stopped: out of steps")


def test_invalid_replies_stop_with_how_the_last_one_began_and_what_was_wrong(tmp_path):
    model = scripted(tmp_path, "I will list the files.", "Still prose, sorry.", "Let me think: ls")
    out = anges("-q", "x", "--quiet", "--model", model, cwd=tmp_path)
    assert out.returncode == 4
    line = out.stderr.splitlines()[0]
    assert line.startswith("anges: stopped: the model's replies were invalid: the model gave 3 invalid replies in a row; "
                           'last reply: "Let me think: ls" (it contains no JSON object)'), line
    assert "Your reply" not in out.stderr and ".." not in line  # the words written to the model stay with it


def test_a_model_error_is_said_once(tmp_path):
    env = {**os.environ, "OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "sk-test"}
    out = anges("-q", "x", "--quiet", "--model", "openai:gpt-test", "--config", config_with_no_retries(tmp_path),
                cwd=tmp_path, env=env)
    assert out.returncode == 4
    line = out.stderr.splitlines()[0]
    assert line.startswith("anges: stopped: the model failed: openai:gpt-test: "), line
    assert "connection failed" in line and line.count("failed") == 2 and "The run stopped" not in line


def config_with_no_retries(tmp_path):
    path = tmp_path / "no-retries.yaml"
    path.write_text("retry:\n  max_attempts: 1\n")
    return str(path)


# --- machine-readable output -------------------------------------------------------------------------------


def test_output_jsonl_is_one_object_per_event(tmp_path):
    model = scripted(tmp_path, shell("echo hi"), edit("NEW_FILE a.txt", "a\n"), complete("ok"))
    out = anges("-q", "go", "--output", "jsonl", "--model", model, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    records = [json.loads(line) for line in out.stdout.splitlines()]
    stream = only_stream()
    assert records[0]["type"] == "run_started"
    assert records[0]["stream_id"] == stream.uid and records[0]["request"] == "go"
    assert records[0]["resumed"] is False and records[0]["agent_type"] == "default"
    events = [r for r in records[1:-1] if r["type"] != "delta"]  # deltas: tests/test_streaming.py
    assert all(r["type"] == "event" and r["stream_id"] == stream.uid and r["depth"] == 0 for r in events)
    assert [r["event"] for r in events] == [e.to_dict() for e in stream.events_list]
    assert events[1]["event"]["data"]["command"] == "echo hi" and events[1]["event"]["data"]["exit_code"] == 0
    finished = records[-1]
    assert finished["type"] == "run_finished"
    assert finished["status"] == "completed" and finished["exit_code"] == 0 and finished["answer"] == "ok"
    assert finished["usage"]["model_calls"] == 3 and finished["usage"]["input_tokens"] > 0
    assert out.stderr == ""


def test_output_jsonl_reports_a_stop(tmp_path):
    model = scripted(tmp_path, shell("echo 1"), shell("echo 2"), complete())
    out = anges("-q", "go", "--output", "jsonl", "--max-steps", "1", "--model", model, cwd=tmp_path)
    assert out.returncode == 4
    finished = json.loads(out.stdout.splitlines()[-1])
    assert finished["status"] == "interrupted" and finished["reason"] == "event_limit"
    assert finished["answer"] is None and finished["exit_code"] == 4


def test_output_json_is_one_object(tmp_path):
    model = scripted(tmp_path, shell("echo hi"), finish("AGENT_TEXT_RESPONSE", "42"))
    out = anges("-q", "question", "--output", "json", "--model", model, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["status"] == "answered" and result["answer"] == "42" and result["exit_code"] == 0
    assert result["request"] == "question" and result["stream_id"] == only_stream().uid
    assert [e["event"]["type"] for e in result["events"]] == ["new_request", "action", "agent_text_response"]
    assert result["usage"]["model_calls"] == 2


# --- resuming ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--resume", "--existing_stream_id"])
def test_resume_continues_the_stream_in_its_directory(tmp_path, flag):
    work = tmp_path / "work"
    work.mkdir()
    first = anges("-q", "first", "--path", str(work), "--agent", "task_executor",
                  "--model", scripted(tmp_path, complete("one"), name="one.json"), cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    uid = only_stream().uid
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    model = scripted(tmp_path, shell("pwd"), complete("two"), name="two.json")
    second = anges(flag, uid, "-q", "second", "--output", "jsonl", "--model", model, cwd=elsewhere)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout.splitlines()[0])["resumed"] is True
    stream = only_stream()
    assert stream.uid == uid and stream.agent_type == "task_executor"
    assert types(stream) == ["new_request", "task_completion", "follow_up_request", "action", "task_completion"]
    assert stream.events_list[2].content == "second"
    assert str(work) in stream.events_list[3].content


@pytest.mark.parametrize("args", [
    ["--resume", "NoSuchStream", "-q", "x"], ["show", "NoSuchStream"], ["export", "NoSuchStream"],
    ["rm", "NoSuchStream"], ["show", "../../etc/passwd"], ["--resume", "", "-q", "x"], ["--resume", "../x", "-q", "x"],
])
def test_unknown_stream_id_exits_2(tmp_path, args):
    out = anges(*args, "--model" if args[0] == "--resume" else "-v",
                *([scripted(tmp_path, complete())] if args[0] == "--resume" else []), cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert "stream" in out.stderr and "Traceback" not in out.stderr
    assert EventStore().list() == []  # nothing was started instead


def test_a_stream_busy_with_a_run_cannot_be_resumed_or_removed(tmp_path):
    model = scripted(tmp_path, shell("echo $$ > pid.txt; sleep 30"), complete(), name="long.json")
    proc = subprocess.Popen([*ANGES, "-q", "wait", "--model", model], cwd=tmp_path, env=os.environ.copy(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(tmp_path / "pid.txt")
        uid = only_stream().uid
        resumed = anges("--resume", uid, "-q", "more", "--model", scripted(tmp_path, complete()), cwd=tmp_path)
        assert resumed.returncode == 2 and "busy" in resumed.stderr
        removed = anges("rm", uid, cwd=tmp_path)
        assert removed.returncode == 2 and "busy" in removed.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=15) == 4
    assert types(only_stream()) == ["new_request", "action", "task_interrupted"]


# --- history commands --------------------------------------------------------------------------------------


def orchestrated_run(tmp_path):
    model = scripted(
        tmp_path,
        reply({"action_type": "CALL_CHILD_AGENT", "directive": "NEW_CHILD_AGENT TASK_EXECUTOR",
               "agent_input": "make notes.txt"}, reasoning="delegate"),
        edit("NEW_FILE notes.txt", "a note\n"),
        complete("notes.txt written"),
        complete("The executor wrote notes.txt."),
    )
    return anges("-q", "write notes", "--agent", "orchestrator", "--model", model, cwd=tmp_path)


def test_orchestrator_children_show_nested_in_the_transcript(tmp_path):
    out = orchestrated_run(tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "The executor wrote notes.txt.\n"
    parent = next(i for i in EventStore().list() if not i.parent_ids)
    child = next(i for i in EventStore().list() if i.parent_ids)
    lines = out.stderr.splitlines()
    assert f"⇢ starts task_executor {child.uid} make notes.txt" in lines
    assert sum("make notes.txt" in line for line in lines) == 1, "the child's request is shown once, where it starts"
    assert f"  [task_executor {child.uid}] ✎ edited notes.txt (+1 −0)" in lines
    assert f"  [task_executor {child.uid}] ✓ completed" in lines
    assert any(line.startswith(f"⇠ task_executor {child.uid} returned: completed") for line in lines)
    assert f"stream {parent.uid}" in out.stderr


def test_list_shows_streams_with_children_under_their_parent(tmp_path):
    assert orchestrated_run(tmp_path).returncode == 0
    assert anges("-q", "later task", "--model", scripted(tmp_path, complete(), name="b.json"),
                 cwd=tmp_path).returncode == 0
    infos = {i.uid: i for i in EventStore().list()}
    parent = next(i for i in infos.values() if i.agent_type == "orchestrator")
    child = next(i for i in infos.values() if i.parent_ids)
    later = next(i for i in infos.values() if i.title == "later task" or i.agent_type == "default")
    out = anges("list", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["ID", "STATUS", "AGE", "AGENT", "TITLE"]
    rows = [line for line in lines[1:]]
    assert rows[0].startswith(later.uid) and "completed" in rows[0] and "default" in rows[0]
    assert rows[1].startswith(parent.uid) and "orchestrator" in rows[1]
    assert rows[2].startswith(f"  └ {child.uid}") and "task_executor" in rows[2] and "make notes.txt" in rows[2]
    listed = json.loads(anges("list", "--json", cwd=tmp_path).stdout)
    assert {entry["uid"] for entry in listed} == set(infos)
    assert len(anges("list", "-n", "1", cwd=tmp_path).stdout.splitlines()) == 2


def test_list_says_why_a_run_stopped(tmp_path):
    assert anges("-q", "steps", "--max-steps", "1", "--model", scripted(tmp_path, shell("echo 1"), shell("echo 2")),
                 cwd=tmp_path).returncode == 4
    assert anges("-q", "prose", "--model", scripted(tmp_path, "no", "json", "here", name="b.json"),
                 cwd=tmp_path).returncode == 4
    rows = {line.split()[-1]: line for line in anges("list", cwd=tmp_path).stdout.splitlines()[1:]}
    assert "out of steps" in rows["steps"] and "bad replies" in rows["prose"]
    listed = {entry["title"]: entry for entry in json.loads(anges("list", "--json", cwd=tmp_path).stdout)}
    assert (listed["steps"]["status"], listed["steps"]["reason"]) == ("interrupted", "event_limit")


def test_list_columns_stay_aligned_with_a_long_agent_type(tmp_path):
    from anges.store.events import EventStream

    EventStore().save(EventStream(title="imported run", agent_type="anges:DefaultAgentFromOldVersion"))
    EventStore().save(EventStream(title="plain run", agent_type="default"))
    lines = anges("list", cwd=tmp_path).stdout.splitlines()
    column = lines[0].index("TITLE")
    assert sorted(line[column:] for line in lines[1:]) == ["imported run", "plain run"]


def test_list_with_no_streams(tmp_path):
    out = anges("list", cwd=tmp_path)
    assert out.returncode == 0 and out.stdout == "" and "no streams yet" in out.stderr


def test_show_prints_the_transcript_and_json(tmp_path):
    assert orchestrated_run(tmp_path).returncode == 0
    parent = next(i for i in EventStore().list() if not i.parent_ids)
    out = anges("show", parent.uid, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "▶ request: write notes" in text
    assert "edited notes.txt" in text and "+a note" in text
    assert "✓ completed" in text and "The executor wrote notes.txt." in text
    raw = json.loads(anges("show", parent.uid, "--json", cwd=tmp_path).stdout)
    assert raw["uid"] == parent.uid and [e["type"] for e in raw["events_list"]][-1] == "task_completion"


def test_export_json_and_import_round_trip(tmp_path, anges_home):
    assert anges("-q", "x", "--model", scripted(tmp_path, shell("echo hi"), complete()), cwd=tmp_path).returncode == 0
    original = only_stream()
    out = anges("export", original.uid, "-o", "out.json", cwd=tmp_path)
    assert out.returncode == 0 and "wrote out.json" in out.stderr
    exported = json.loads((tmp_path / "out.json").read_text())
    assert exported == json.loads(anges("export", original.uid, "--format", "json", cwd=tmp_path).stdout)
    assert exported["uid"] == original.uid and len(exported["events_list"]) == 3

    taken = anges("import", "out.json", cwd=tmp_path)
    assert taken.returncode == 2 and "already exists" in taken.stderr
    copied = anges("import", "out.json", "--new-id", cwd=tmp_path)
    assert copied.returncode == 0, copied.stderr
    new_id = copied.stdout.strip()
    assert new_id != original.uid and types(EventStore().load(new_id)) == types(original)

    other_home = tmp_path / "other-home"
    env = {**os.environ, "ANGES_HOME": str(other_home)}
    fresh = anges("import", str(tmp_path / "out.json"), cwd=tmp_path, env=env)
    assert fresh.returncode == 0 and fresh.stdout.strip() == original.uid


def test_import_a_0_1_stream_and_resume_it(tmp_path):
    legacy = {
        "uid": "legacy01", "title": "old work", "created_at": "2025-01-02T03:04:05", "agent_type": "default",
        "parent_event_stream_uids": [], "event_summaries_list": [],
        "agent_settings": {"cmd_init_dir": str(tmp_path), "prefix_cmd": "", "agent_type": "default"},
        "events_list": [
            {"type": "new_request", "reasoning": "", "content": "list files", "title": None, "message": "list files",
             "analysis": "", "est_input_token": 0, "est_output_token": 0},
            {"type": "action", "reasoning": "look", "content": "EXIT CODE: 0\nSTDOUT:\na.txt", "title": None,
             "message": "ran ls", "analysis": "", "est_input_token": 10, "est_output_token": 5},
            {"type": "task_completion", "reasoning": "", "content": "There is a.txt.", "title": None,
             "message": "There is a.txt.", "analysis": "", "est_input_token": 0, "est_output_token": 0},
        ],
    }
    (tmp_path / "legacy.json").write_text(json.dumps(legacy))
    out = anges("import", "legacy.json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "legacy01" and "'old work' (3 events)" in out.stderr
    shown = anges("show", "legacy01", cwd=tmp_path)
    assert shown.returncode == 0 and "list files" in shown.stdout and "There is a.txt." in shown.stdout
    resumed = anges("--resume", "legacy01", "-q", "and now?", "--model", scripted(tmp_path, complete("more")),
                    cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert types(EventStore().load("legacy01"))[-2:] == ["follow_up_request", "task_completion"]


def test_import_rejects_a_file_that_is_not_a_stream(tmp_path):
    (tmp_path / "junk.json").write_text('{"hello": 1}')
    out = anges("import", "junk.json", cwd=tmp_path)
    assert out.returncode == 2 and "not an anges event stream" in out.stderr
    out = anges("import", "missing.json", cwd=tmp_path)
    assert out.returncode == 2 and "missing.json" in out.stderr


def test_export_markdown_is_a_readable_report(tmp_path):
    assert orchestrated_run(tmp_path).returncode == 0
    parent = next(i for i in EventStore().list() if not i.parent_ids)
    child = next(i for i in EventStore().list() if i.parent_ids)
    out = anges("export", parent.uid, "--format", "md", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    md = out.stdout
    assert md.startswith("# ") and f"- **Stream:** `{parent.uid}`" in md and "- **Status:** completed" in md
    assert "## 1. Request" in md and "## 2. Child agent started" in md
    assert f"### 2. File edit — task_executor `{child.uid}`" in md
    assert "```diff\n--- /dev/null\n+++ b/notes.txt\n@@ -0,0 +1 @@\n+a note\n```" in md
    assert md.index("### 3. Task completed") < md.index("## 3. Child agent returned (task_completion)")
    last = md[md.index("## 4. Task completed"):]
    assert "> finish" in last and "\nThe executor wrote notes.txt.\n" in last


def test_export_markdown_puts_commands_and_outputs_in_code_blocks(tmp_path):
    model = scripted(tmp_path, shell("printf '```x'"), complete())
    assert anges("-q", "x", "--model", model, cwd=tmp_path).returncode == 0
    md = anges("export", only_stream().uid, "--format", "md", cwd=tmp_path).stdout
    assert "```bash\nprintf '```x'\n```" in md
    assert "Exit code 0 after" in md
    assert "````text\n```x\n````" in md, "the output fence is longer than any backtick run inside"


def test_rm_deletes_a_stream_and_its_children(tmp_path):
    assert orchestrated_run(tmp_path).returncode == 0
    parent = next(i for i in EventStore().list() if not i.parent_ids)
    out = anges("rm", parent.uid, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip() == f"removed {parent.uid} and 1 child stream"
    assert EventStore().list() == []
    assert anges("show", parent.uid, cwd=tmp_path).returncode == 2


def test_ui_dispatches_to_the_web_chat(tmp_path):
    import importlib

    web = importlib.import_module("anges.web")
    out = anges("ui", "--help", cwd=tmp_path)
    if hasattr(web, "main_ui"):
        assert out.returncode == 0, out.stderr
    else:
        assert out.returncode == 2
        assert out.stderr.startswith("anges: the web chat is not available in this installation")


def test_resume_keeps_the_notes_of_the_stream(tmp_path):
    first = scripted(tmp_path, complete(), name="first.json")
    assert anges("-q", "one", "--notes", "Be brief.", "--model", first, cwd=tmp_path).returncode == 0
    uid = only_stream().uid
    second = scripted(tmp_path, complete(), name="second.json")
    record = tmp_path / "second.jsonl"
    assert anges("--resume", uid, "-q", "two", "--model", second, "--record", str(record),
                 cwd=tmp_path).returncode == 0
    assert EventStore().load(uid).get_settings()["notes"] == ["Be brief."]
    assert "Be brief." in json.loads(record.read_text().splitlines()[0])["prompt"]


def test_finishing_with_a_job_still_running_ends_it_and_says_so(tmp_path):
    token = sleep_token()
    model = scripted(tmp_path, reply({"action_type": "RUN_SHELL_CMD", "command": "true", "run_in_background": True},
                                     {"action_type": "RUN_SHELL_CMD", "command": "sleep 0.5"},
                                     {"action_type": "RUN_SHELL_CMD", "command": f"sleep {token}",
                                      "run_in_background": True}),
                     complete("Done?"), complete("The server is up."))
    out = anges("--model", model, "-q", "serve it", cwd=tmp_path)

    assert out.returncode == 0, out.stderr
    held, final = only_stream().events_list[-2:]
    assert held.type == "completion_held" and f"`sleep {token}` is still running" in held.content, "held once"
    pid = final.data["ended_jobs"][0]["pid"]
    assert final.data["ended_jobs"] == [{"pid": pid, "command": f"sleep {token}"}], "a job that had ended is not listed"
    assert f"ended with the run: pid {pid} (sleep {token})" in out.stderr.splitlines()[-1], "the footer says so"
    assert not pids_running(token)
    shown = anges("show", only_stream().uid, cwd=tmp_path).stdout
    assert f"ended with the run: pid {pid} (sleep {token})" in shown
