"""The sandbox and the run's command runner, with the real bwrap: what commands can see, write and reach,
and that every process a run starts ends with it."""

import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from helpers import SANDBOX_PYTHON, pids_running, sleep_token

from anges.agents import DefaultAgent
from anges.config import load_config
from anges.models.scripted import ScriptedModel
from anges.sandbox import CommandRunner, SandboxSettings, availability, hidden_paths
from anges.shell import run_command

PYTHON = SANDBOX_PYTHON


def reply(*actions):
    return {"analysis": "", "reasoning": "testing the sandbox", "actions": list(actions)}


def shell(command, **extra):
    return {"action_type": "RUN_SHELL_CMD", "command": command, **extra}


def complete():
    return reply({"action_type": "TASK_COMPLETE", "content": "done"})


def run_agent(cwd, replies, **safety):
    model = ScriptedModel(replies)
    agent = DefaultAgent(inference_func=model, cmd_init_dir=cwd, config=load_config(overrides={"safety": safety}))
    stream = agent.run_with_new_request("test")
    return stream, model


def actions(stream):
    return [e for e in stream.events_list if e.type == "action"]


@pytest.fixture
def work(tmp_path):
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture
def outside():
    """A directory outside /tmp (the sandbox has its own /tmp, so paths there are invisible rather than read-only)."""
    path = Path(tempfile.mkdtemp(prefix="anges-test-outside-", dir="/var/tmp"))
    yield path
    shutil.rmtree(path)


@pytest.mark.sandbox
def test_a_workspace_write_is_kept_and_a_write_outside_fails_and_says_why(work, outside):
    stream, model = run_agent(work, [reply(shell(f"echo kept > inside.txt && echo x > '{outside}/f.txt'")),
                                     complete()], approval="auto")

    event = actions(stream)[0]
    assert (work / "inside.txt").read_text() == "kept\n"
    assert not (outside / "f.txt").exists()
    assert event.data["exit_code"] != 0 and event.data["sandbox"] == "workspace"
    assert "Read-only file system" in event.data["stderr"]
    assert "SANDBOX: read-only file system — outside the sandbox's writable paths" in event.content
    assert str(work) in event.data["blocked"] and "escalate" in event.content
    environment = model.prompts[0].split("# Environment")[1].split("# History")[0]
    assert f"- Sandbox: commands see the file system read-only, except {work} and a private /tmp" in environment
    assert "The network is off." in environment and "may ask to run outside it" in environment
    assert "- `escalate` (string, optional)" in model.prompts[0]


@pytest.mark.sandbox
def test_read_only_mode_leaves_only_a_private_tmp_writable(work):
    stream, _ = run_agent(work, [reply(shell("echo t > /tmp/scratch && cat /tmp/scratch && echo w > here.txt")),
                                 complete()], sandbox="read-only")

    event = actions(stream)[0]
    assert event.data["stdout"] == "t\n" and "Read-only file system" in event.data["stderr"]
    assert not (work / "here.txt").exists() and not Path("/tmp/scratch").exists()
    assert event.data["sandbox"] == "read-only"


@pytest.mark.sandbox
def test_credential_places_of_the_home_and_anges_home_are_hidden(work, outside, monkeypatch, anges_home):
    home = outside / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE-KEY-MATERIAL\n")
    (home / ".aws").mkdir()
    (home / ".aws" / "credentials").write_text("aws_secret_access_key = AWS-SECRET-MATERIAL\n")
    (home / ".netrc").write_text("machine example.com password NETRC-SECRET-MATERIAL\n")
    (home / "notes.txt").write_text("ordinary file\n")
    (anges_home / "config.yaml").write_text("# ANGES-HOME-MATERIAL\n")
    monkeypatch.setenv("HOME", str(home))
    command = (f"cat ~/.ssh/id_ed25519 ~/.aws/credentials ~/.netrc '{anges_home}/config.yaml'; ls -A ~/.ssh | wc -l;"
               " cat ~/notes.txt")
    stream, _ = run_agent(work, [reply(shell(command)), complete()])

    event = actions(stream)[0]
    output = event.data["stdout"] + event.data["stderr"]
    for secret in ("PRIVATE-KEY", "AWS-SECRET", "NETRC-SECRET", "ANGES-HOME"):
        assert secret not in output
    assert event.data["stdout"] == "0\nordinary file\n"  # the rest of the home is readable


@pytest.mark.sandbox
def test_a_hidden_place_that_holds_the_working_directory_shows_only_it(outside):
    vault = outside / "vault"
    (vault / "project").mkdir(parents=True)
    (vault / "secret.txt").write_text("VAULT-SECRET\n")
    command = f"cat '{vault}/secret.txt'; ls -A '{vault}'; echo made > made.txt; touch '{vault}/new'"
    edit = {"action_type": "EDIT_FILE", "directive_line": "NEW_FILE edited.txt", "content": "edited"}
    stream, _ = run_agent(vault / "project", [reply(shell(command)), reply(edit), complete()],
                          hidden_paths=[str(vault)], approval="deny")

    event = actions(stream)[0]
    assert "VAULT-SECRET" not in event.data["stdout"] + event.data["stderr"]
    assert event.data["stdout"] == "project\n" and not (vault / "new").exists()
    assert (vault / "project" / "made.txt").is_file() and (vault / "project" / "edited.txt").is_file()
    assert "approval_decided" not in [e.type for e in stream.events_list]  # the edit in the work needs no approval

    stream, _ = run_agent(vault, [reply(shell("cat secret.txt")), complete()], hidden_paths=[str(vault)])
    assert actions(stream)[0].data["stdout"] == "VAULT-SECRET\n"  # a hidden place you work in is not hidden


def test_the_policy_hides_what_the_sandbox_hides_in_every_mode(outside):
    vault = outside / "vault"
    (vault / "project").mkdir(parents=True)
    for mode in ("workspace", "read-only", "off"):
        safety = load_config(overrides={"safety": {"sandbox": mode, "hidden_paths": [str(vault)]}}).safety
        settings = SandboxSettings.for_run(safety, str(vault / "project"))
        assert not settings.is_hidden(str(vault / "project" / "notes.txt")), mode
        assert settings.is_hidden(str(vault / "secret.txt")), mode


@pytest.mark.sandbox
def test_no_network_unless_allowed(work):
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    threading.Thread(target=lambda: server.accept()[0].close(), daemon=True).start()
    connect = f"{PYTHON} -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3); print('up')\""
    unreachable = f"{PYTHON} -c \"import socket; socket.create_connection(('192.0.2.1', 80), timeout=3)\""
    try:
        closed, _ = run_agent(work, [reply(shell(connect), shell(unreachable)), complete()])
        opened, _ = run_agent(work, [reply(shell(connect)), complete()], network=True)
    finally:
        server.close()

    local, remote = actions(closed)
    assert local.data["exit_code"] != 0 and "ConnectionRefusedError" in local.data["stderr"]
    assert remote.data["exit_code"] != 0 and "Network is unreachable" in remote.data["stderr"]
    assert "SANDBOX: no network" in remote.content
    assert actions(opened)[0].data["stdout"] == "up\n"


@pytest.mark.sandbox
def test_model_api_keys_are_absent_from_the_command_environment(work, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-key-material")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-key-material")
    monkeypatch.setenv("GEMINI_API_KEY", "gemini-key-material")
    monkeypatch.setenv("HARMLESS_SETTING", "visible-setting")
    command = "env; for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done 2>/dev/null"
    stream, _ = run_agent(work, [reply(shell(command)), complete()])

    output = actions(stream)[0].data["stdout"]
    assert "HARMLESS_SETTING=visible-setting" in output
    assert "key-material" not in output and "[REDACTED]" not in output  # absent, not just masked


@pytest.mark.sandbox
@pytest.mark.parametrize("sandbox", ["workspace", "off"])
def test_background_children_end_with_the_run(work, sandbox):
    plain, nohup, detached, job = (sleep_token() for _ in range(4))
    seen = {}

    def check_running(prompt):
        seen["during"] = {token: bool(pids_running(token)) for token in (plain, nohup, detached, job)}
        return complete()

    command = (f"sleep {plain} & nohup sleep {nohup} >/dev/null 2>&1 & setsid sleep {detached} & "
               f"(setsid bash -c 'sleep {detached} & disown' &) ; echo started")
    replies = [reply(shell(command), shell(f"sleep {job}", run_in_background=True)), check_running]
    stream, _ = run_agent(work, replies, sandbox=sandbox, approval="auto")

    assert actions(stream)[0].data["stdout"] == "started\n"
    assert seen["during"] == {plain: True, nohup: True, detached: True, job: True}
    for token in (plain, nohup, detached, job):
        assert not pids_running(token), f"sleep {token} outlived the run"


@pytest.mark.sandbox
def test_a_server_started_in_the_background_answers_in_the_next_step(work):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (work / "page.txt").write_text("served from the sandbox\n")
    serve = shell(f"{PYTHON} -m http.server {port} --bind 127.0.0.1", run_in_background=True)
    fetch = (f"{PYTHON} -c \"import time, urllib.request\nfor _ in range(100):\n    try:\n"
             f"        print(urllib.request.urlopen('http://127.0.0.1:{port}/page.txt').read().decode(), end='')\n"
             "        break\n    except OSError:\n        time.sleep(0.05)\"")
    stream, model = run_agent(work, [reply(serve), reply(shell(fetch)), complete()])

    assert actions(stream)[1].data["stdout"] == "served from the sandbox\n"
    assert "# Background jobs of this run" in model.prompts[1] and ": running; log " in model.prompts[1]


@pytest.mark.sandbox
def test_background_job_status_and_log_are_shown_and_the_log_goes_with_the_run(work):
    job = shell("echo from-the-job; exit 3", run_in_background=True)
    stream, model = run_agent(work, [reply(job), reply(shell("sleep 0.3")), complete()])

    started = actions(stream)[0]
    log = Path(started.data["log_path"])
    assert "exited with code 3" in model.prompts[2] and str(log) in model.prompts[2]
    assert f"pid {started.data['pid']}" in model.prompts[2]
    assert not log.exists() and not log.parent.exists(), "the run's scratch files outlived it"


def test_a_background_log_keeps_its_newest_bytes_within_the_cap(tmp_path):
    result = run_command("yes | head -c 3000000; echo LAST-LINE", cwd=tmp_path, background=True,
                         log_dir=str(tmp_path), log_cap=200_000)
    log = Path(result.log_path)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not log.read_bytes().endswith(b"LAST-LINE\n"):
        time.sleep(0.05)

    data = log.read_bytes()
    assert data.endswith(b"y\nLAST-LINE\n")
    assert len(data) <= 200_000 + 100
    marker, rest = data.split(b"\n", 1)
    dropped = int(marker.split()[3])
    assert marker.startswith(b"[anges: the oldest ") and dropped + len(rest) == 3_000_000 + len(b"LAST-LINE\n")


@pytest.mark.sandbox
def test_keep_background_leaves_jobs_running_until_the_agent_is_closed(work):
    token = sleep_token()
    model = ScriptedModel([reply(shell(f"sleep {token}", run_in_background=True)), complete(), complete()])
    config = load_config(overrides={"safety": {"keep_background": True}})
    agent = DefaultAgent(inference_func=model, cmd_init_dir=work, config=config)
    agent.run_with_new_request("start a job")
    assert pids_running(token)
    agent.run_with_new_request("is it still there?")
    assert "running" in model.prompts[-1] and f"sleep {token}" in model.prompts[-1]
    agent.close()
    assert not pids_running(token)


@pytest.mark.sandbox
def test_runner_commands_keep_timeouts_interrupts_and_output_caps(work):
    runner = CommandRunner(str(work), SandboxSettings(writable=(str(work),)), availability().bwrap)
    try:
        capped = run_command("seq 1 20000", cwd=work, runner=runner, output_cap=1000)
        timed = run_command(f"sleep {sleep_token()}", cwd=work, runner=runner, timeout=0.5)
        started = time.monotonic()
        token = sleep_token()
        stopped = run_command(f"sleep {token} & sleep {token}", cwd=work, runner=runner,
                              interrupt_check=lambda: time.monotonic() - started > 0.3)
        masked = run_command("echo token=$T", cwd=work, runner=runner, env={"T": "sk-secret-value-1"},
                             secrets=["sk-secret-value-1"])
        with pytest.raises(FileNotFoundError):
            run_command("true", cwd=work / "absent", runner=runner)
    finally:
        runner.close()
    assert capped.stdout.startswith("1\n2\n") and capped.stdout.endswith("20000\n") and capped.stdout_omitted > 0
    assert timed.timed_out and timed.duration < 3
    assert stopped.interrupted and time.monotonic() - started < 3 and not pids_running(token)
    assert masked.stdout == "token=[REDACTED]\n"


@pytest.mark.sandbox
def test_escalated_command_runs_outside_the_sandbox_when_approved(work, tmp_path):
    outside = tmp_path / "cache"
    outside.mkdir()
    escalate = shell(f"echo installed > '{outside}/pkg'", escalate="writing the package cache")
    stream, _ = run_agent(work, [reply(escalate), complete()], approval="auto")

    event = actions(stream)[0]
    assert (outside / "pkg").read_text() == "installed\n"
    assert event.data["escalated"] is True and event.data["sandbox"] == "none"
    assert event.data["approval"]["by"] == "auto" and event.data["approval"]["rule"] == "escalation"


def test_hidden_paths_cover_the_credential_places_that_exist(tmp_path, monkeypatch, anges_home):
    home = tmp_path / "home"
    for name in (".ssh", ".kube", ".config/gcloud"):
        (home / name).mkdir(parents=True)
    (home / ".netrc").write_text("x")
    monkeypatch.setenv("HOME", str(home))
    config = load_config(overrides={"safety": {"hidden_paths": ["~/private"]}})
    (home / "private").mkdir()

    hidden = hidden_paths(config.safety)

    expected = {str(home / n) for n in (".ssh", ".kube", ".config/gcloud", ".netrc", "private")}
    assert expected | {os.path.realpath(anges_home)} <= set(hidden)
    assert str(home / ".aws") not in hidden  # absent: nothing to hide


@pytest.mark.sandbox
@pytest.mark.parametrize("sandbox", ["workspace", "off"])
def test_killing_the_anges_process_ends_the_runs_processes(work, sandbox):
    import json
    import signal
    import subprocess

    first, second = sleep_token(), sleep_token()
    step = reply(shell(f"setsid sleep {first} & nohup sleep {second} >/dev/null 2>&1 & wait"))
    (work / "model.json").write_text(json.dumps([step, complete()]))
    proc = subprocess.Popen([sys.executable, "-m", "anges", "-q", "wait", "--sandbox", sandbox, "--approval", "auto",
                             "--model", f"scripted:{work / 'model.json'}"], cwd=work, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while not (pids_running(first) and pids_running(second)):
        assert time.monotonic() < deadline, "the commands never started"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()

    deadline = time.monotonic() + 5
    while (pids_running(first) or pids_running(second)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pids_running(first) and not pids_running(second), "the run's processes outlived a kill -9"
    stale = list(Path(tempfile.gettempdir()).glob(f"anges-run-{proc.pid}-*"))
    assert stale  # its scratch directory is left behind, until the next run of any anges process
    run_command("true", cwd=work, background=True, runner=(runner := CommandRunner(str(work))))
    runner.close()
    assert not any(path.exists() for path in stale)


RUN_ONE_COMMAND = """
import sys
from anges.sandbox import CommandRunner, SandboxSettings, availability
from anges.shell import run_command
runner = CommandRunner(sys.argv[1], SandboxSettings(writable=(sys.argv[1],)), availability().bwrap)
try:
    print(run_command("echo inside", cwd=sys.argv[1], runner=runner).stdout, end="")
finally:
    runner.close()
"""


@pytest.mark.sandbox
def test_the_runner_starts_when_anges_and_its_python_live_under_tmp(work, tmp_path):
    """A virtualenv or a checkout under /tmp (the sandbox's /tmp is private) still runs commands."""
    import subprocess
    import sysconfig

    import anges

    copy = tmp_path / "checkout"
    shutil.copytree(Path(anges.__file__).parent, copy / "anges")
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    python = tmp_path / "venv" / "bin" / "python"
    python.symlink_to(os.path.realpath(sys.executable))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(copy), sysconfig.get_paths()["purelib"]])}
    done = subprocess.run([str(python), "-c", RUN_ONE_COMMAND, str(work)], capture_output=True, text=True,
                          env=env, timeout=60)
    assert done.stdout == "inside\n", done.stderr
