"""A command that does not end costs its yield point, not its timeout: still running then, or as soon as it listens
on a port, it goes on in the background (pid, output so far, log), still serves the next step, and ends with the
run; a long build or test run below the default yield point stays in the foreground."""

import random
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
    """A free port below the ephemeral range (a server there is noticed; one on port 0 is a test's, and is not)."""
    for port in random.sample(range(20000, 32000), 50):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port found")


def serve_fetch_and_read_the_log(work, safety):
    """A run with the default yield point whose model starts a web server in the foreground, fetches a page from it,
    then reads its log."""
    (work / "hello.txt").write_text("served from the yielded server\n")
    port = free_port()
    server = f"{SANDBOX_PYTHON} -m http.server {port} --bind 127.0.0.1"
    fetch = (f"for try in $(seq 50); do {SANDBOX_PYTHON} -c \"import urllib.request; "  # a slow start: try for 10 s
             f"print(urllib.request.urlopen('http://127.0.0.1:{port}/hello.txt').read().decode(), end='')\" "
             "2>/dev/null && break; sleep 0.2; done")

    def read_log(prompt):
        log = re.search(r"its output continuing in (\S+) ", prompt).group(1)
        return shell(f"cat {log}")

    model = ScriptedModel([shell(server), shell(fetch), read_log,
                           reply({"action_type": "TASK_COMPLETE", "content": "served"})])
    agent = DefaultAgent(inference_func=model, cmd_init_dir=work, config=load_config(overrides={"safety": safety}))
    stream = agent.run_with_new_request("serve the folder")
    return stream, model, port


def check(stream, model, port):
    served, fetched, log = [e for e in stream.events_list if e.type == "action"]
    assert "A command still running after 120 s, or that starts listening on a port, goes on in the background" \
           in model.prompts[0]
    assert served.data["yielded"] and served.data["exit_code"] is None and not served.data["timed_out"]
    assert served.data["listening"] == [port] and served.data["duration"] < 60, "not the 120 s yield point"
    assert re.search(rf"LISTENING on port {port}, so it went on in the background: pid \d+", served.content)
    assert f"pid {served.data['pid']}" in model.prompts[1].split("# Background jobs of this run")[1]
    assert ": running; log " in model.prompts[1]
    assert fetched.data["exit_code"] == 0 and fetched.data["stdout"] == "served from the yielded server\n"
    assert '"GET /hello.txt HTTP/1.1" 200' in log.data["stdout"], "the log goes on after the yield"
    server = f"http.server {port}"
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
    stream, model, port = serve_fetch_and_read_the_log(work, {"approval": "auto"})

    assert stream.events_list[1].data["sandbox"] == "workspace"
    check(stream, model, port)


def test_a_foreground_server_yields_serves_the_next_step_and_ends_with_the_run_without_a_sandbox(work):
    stream, model, port = serve_fetch_and_read_the_log(work, {"sandbox": "off", "approval": "auto"})

    assert stream.events_list[1].data["sandbox"] == "none"
    check(stream, model, port)


def test_a_40_second_test_run_stays_in_the_foreground_with_the_default_yield_point(work):
    """The only slow test here: the default yield point must let a typical test suite finish in the foreground."""
    suite = "for n in $(seq 40); do echo \"test $n passed\"; sleep 1; done"
    model = ScriptedModel([shell(suite), reply({"action_type": "TASK_COMPLETE", "content": "ok"})])
    stream = DefaultAgent(inference_func=model, cmd_init_dir=work, config=load_config()).run_with_new_request("test")

    event = stream.events_list[1]
    assert (event.data["yielded"], event.data["exit_code"]) == (False, 0) and event.data["duration"] >= 40
    assert event.data["stdout"].splitlines()[-1] == "test 40 passed" and "STILL RUNNING" not in event.content


def test_a_command_still_running_at_its_yield_point_says_so(work):
    token = sleep_token()
    model = ScriptedModel([shell(f"echo warming; sleep {token}", background_after=1),
                           reply({"action_type": "TASK_COMPLETE", "content": "ok"})])
    stream = DefaultAgent(inference_func=model, cmd_init_dir=work).run_with_new_request("wait a little")

    event = stream.events_list[1]
    assert event.data["yielded"] and "listening" not in event.data
    assert re.search(r"STILL RUNNING after 1 s, so it went on in the background: pid \d+, its output continuing in "
                     r"\S+ \(`kill \d+` stops it\)\. What it printed so far:\nSTDOUT:\nwarming\n", event.content)
    assert not pids_running(token), "it ended with the run"


def test_a_test_server_on_port_zero_does_not_send_the_command_to_the_background(work):
    script = ("import socket, time; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); time.sleep(1.5); "
              "print('served', s.getsockname()[1] > 0)")
    model = ScriptedModel([shell(f"{SANDBOX_PYTHON} -c \"{script}\""),
                           reply({"action_type": "TASK_COMPLETE", "content": "ok"})])
    stream = DefaultAgent(inference_func=model, cmd_init_dir=work).run_with_new_request("test")

    event = stream.events_list[1]
    assert (event.data["yielded"], event.data["exit_code"], event.data["stdout"]) == (False, 0, "served True\n")


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
