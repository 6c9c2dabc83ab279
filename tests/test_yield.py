"""A command that does not end costs its yield point, not its timeout: still running then, it goes on in the
background (pid, output so far, log), still serves the next step, and ends with the run."""

import re
import socket
import time

import pytest
from helpers import SANDBOX_PYTHON, pids_running, sleep_token

from anges.agents import DefaultAgent
from anges.config.loading import load_config
from anges.models.scripted import ScriptedModel
from anges.store.events import Event, EventStream


def reply(*actions):
    return {"analysis": "", "reasoning": "step", "actions": list(actions)}


def shell(command, **extra):
    return reply({"action_type": "RUN_SHELL_CMD", "command": command, **extra})


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def serve_fetch_and_read_the_log(work, safety, **run_args):
    """A run whose model starts a web server in the foreground, fetches a page from it, then reads its log."""
    (work / "hello.txt").write_text("served from the yielded server\n")
    port = free_port()
    server = f"{SANDBOX_PYTHON} -m http.server {port} --bind 127.0.0.1"
    fetch = (f"for try in $(seq 50); do {SANDBOX_PYTHON} -c \"import urllib.request; "  # a slow start: try for 10 s
             f"print(urllib.request.urlopen('http://127.0.0.1:{port}/hello.txt').read().decode(), end='')\" "
             "2>/dev/null && break; sleep 0.2; done")

    def read_log(prompt):
        log = re.search(r"its output continuing in (\S+) ", prompt).group(1)
        return shell(f"cat {log}")

    model = ScriptedModel([shell(server, **run_args), shell(fetch), read_log,
                           reply({"action_type": "TASK_COMPLETE", "content": "served"})])
    overrides = {"safety": safety, "agents": {"common": {"shell_cmd_timeout": 600}}}
    if "background_after" not in run_args:
        overrides["agents"]["common"]["shell_background_after"] = 1
    agent = DefaultAgent(inference_func=model, cmd_init_dir=work, config=load_config(overrides=overrides))
    started = time.monotonic()
    stream = agent.run_with_new_request("serve the folder")
    return stream, model, time.monotonic() - started, f"http.server {port}"


def check(stream, model, took, server):
    served, fetched, log = [e for e in stream.events_list if e.type == "action"]
    assert took < 30, "the server step returned at its yield point, not after the 600 s timeout"
    assert served.data["yielded"] and served.data["exit_code"] is None and not served.data["timed_out"]
    assert 1 <= served.data["duration"] < 10
    assert re.search(r"STILL RUNNING after 1 s, so it went on in the background: pid \d+", served.content)
    assert f"pid {served.data['pid']}" in model.prompts[1].split("# Background jobs of this run")[1]
    assert ": running; log " in model.prompts[1]
    assert fetched.data["exit_code"] == 0 and fetched.data["stdout"] == "served from the yielded server\n"
    assert '"GET /hello.txt HTTP/1.1" 200' in log.data["stdout"], "the log goes on after the yield"
    deadline = time.monotonic() + 15
    while pids_running(server) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pids_running(server), "the server ends with the run"


@pytest.fixture
def work(tmp_path):
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.mark.sandbox
def test_a_foreground_server_yields_serves_the_next_step_and_ends_with_the_run_in_the_sandbox(work):
    stream, model, took, server = serve_fetch_and_read_the_log(work, {"approval": "auto"}, background_after=1)

    assert stream.events_list[1].data["sandbox"] == "workspace"
    check(stream, model, took, server)


def test_a_foreground_server_yields_serves_the_next_step_and_ends_with_the_run_without_a_sandbox(work):
    stream, model, took, server = serve_fetch_and_read_the_log(work, {"sandbox": "off", "approval": "auto"})

    assert stream.events_list[1].data["sandbox"] == "none"
    check(stream, model, took, server)


def test_background_after_zero_waits_for_the_command(work):
    model = ScriptedModel([shell("sleep 1.5; echo finished", background_after=0),
                           reply({"action_type": "TASK_COMPLETE", "content": "ok"})])
    config = load_config(overrides={"agents": {"common": {"shell_background_after": 0.5}}})
    stream = DefaultAgent(inference_func=model, cmd_init_dir=work, config=config).run_with_new_request("wait")

    event = stream.events_list[1]
    assert (event.data["yielded"], event.data["exit_code"], event.data["stdout"]) == (False, 0, "finished\n")


def test_every_view_says_a_yielded_command_kept_running_and_a_background_one_was_started_so():
    from anges.acp.facts import command_status
    from anges.store.event_store import EventStore
    from anges.store.export import to_markdown
    from web.render import step_view

    def command(yielded):
        return Event("action", data={"command": "python3 -m http.server", "exit_code": None, "pid": 42,
                                     "log_path": "/tmp/job.log", "yielded": yielded, "duration": 1.0})

    yielded, started = command(True), command(False)
    assert command_status(yielded).startswith("still running at its yield point")
    assert command_status(started).startswith("started in the background")
    stream = EventStream(title="views")
    stream.add_event(yielded)
    exported = to_markdown(stream, EventStore())
    assert "Still running at its yield point, it went on in the background: pid 42" in exported
    assert step_view(yielded, 0)["yielded"] is True and step_view(started, 0)["yielded"] is False


def test_the_job_list_keeps_running_jobs_and_only_the_newest_that_ended(work):
    token = sleep_token()
    jobs = [{"action_type": "RUN_SHELL_CMD", "command": f"echo job {n}", "run_in_background": True} for n in range(7)]
    jobs.insert(0, {"action_type": "RUN_SHELL_CMD", "command": f"sleep {token}", "run_in_background": True})
    jobs.append({"action_type": "RUN_SHELL_CMD", "command": "sleep 0.5"})
    model = ScriptedModel([reply(*jobs), reply({"action_type": "TASK_COMPLETE", "content": "ok"})])
    config = load_config(overrides={"safety": {"sandbox": "off", "approval": "auto"}})
    DefaultAgent(inference_func=model, cmd_init_dir=work, config=config).run_with_new_request("start jobs")

    listed = model.prompts[1].split("## Background jobs of this run")[1]
    assert f"`sleep {token}`: running" in listed, "a running job is always listed"
    assert [f"`echo job {n}`" in listed for n in range(7)] == [False, False] + [True] * 5
    assert "- and 2 older jobs that ended" in listed
