"""Stop means stop: Ctrl-C, SIGTERM, SIGHUP, the time limit and the web's Stop end a run while the model is
being waited on — the request in flight is closed, nothing is retried, and the stop is recorded.

The model is the real OpenAI SDK talking to a loopback server that holds every request open.
"""

import json
import os
import pty
import shutil
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest
from helpers import pids_running, sleep_token
from wire_servers import TEST_KEY

from anges.agents import DefaultAgent
from anges.config.loading import load_config
from anges.config.types import ModelPreset, ModelSettings
from anges.models.openai_model import OpenAIModel
from anges.models.scripted import ScriptedModel
from anges.store.event_store import EventStore
from anges.store.events import EventStream

ANGES = [sys.executable, "-m", "anges"]
STOP_BOUND = 3.0
"""Seconds a stop may take, generously (it takes a fraction of one): the check is that it is not minutes."""
EXIT_BOUND = 20.0
"""Seconds a stopped `anges` process may take to end: drawing the transcript and the interpreter's teardown, ten
times slower on a loaded machine (2 s with 2 cores at load 20; 0.2 s idle). A stop that did not end the model call
would keep the process for the whole minute the server holds the request."""


def hangup_seen(server, timeout=5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not server.hangups and time.monotonic() < deadline:
        time.sleep(0.02)
    return bool(server.hangups)


def assert_abandoned_without_retry(server):
    assert hangup_seen(server), "the server never saw the request's connection close"
    time.sleep(0.5)  # a retry would come now
    assert len(server.requests) == 1, "the model call was retried after the stop"


@pytest.fixture
def held(openai_server, monkeypatch):
    """The OpenAI wire server, holding the first request open for a minute."""
    monkeypatch.setenv("OPENAI_API_KEY", TEST_KEY)
    openai_server.enqueue_hold(60)
    openai_server.enqueue_text('{"reasoning": "too late", "actions": []}', times=5)
    return openai_server


def openai_model(server):
    preset = ModelPreset(provider="openai", model="test-model", base_url=server.base_url, api_key_env="OPENAI_API_KEY")
    return OpenAIModel(preset, ModelSettings(request_timeout=120), name="openai:test-model")


@pytest.mark.parametrize("how", ["agent.interrupt", "store.request_stop"])
def test_a_stop_during_a_model_call_closes_the_request_and_ends_the_run(held, tmp_path, how):
    store = EventStore()
    stream = EventStream()
    agent = DefaultAgent(inference_func=openai_model(held), event_stream=stream, cmd_init_dir=tmp_path,
                         config=load_config(), store=store)
    worker = threading.Thread(target=agent.run_with_new_request, args=("think hard",), daemon=True)
    worker.start()
    assert held.wait_for_requests(1)

    stopped = time.monotonic()
    agent.interrupt() if how == "agent.interrupt" else store.request_stop(stream.uid)  # the web's Stop button
    worker.join(STOP_BOUND)
    assert not worker.is_alive() and time.monotonic() - stopped < STOP_BOUND
    assert_abandoned_without_retry(held)
    last = store.load(stream.uid).events_list[-1]
    assert last.type == "task_interrupted" and last.data["reason"] == "interrupt"


def test_the_time_limit_closes_the_request_in_flight(held, tmp_path):
    config = load_config(overrides={"agents": {"common": {"timeout": 1}}})
    agent = DefaultAgent(inference_func=openai_model(held), cmd_init_dir=tmp_path, config=config)
    started = time.monotonic()
    stream = agent.run_with_new_request("think hard")
    assert time.monotonic() - started < 1 + STOP_BOUND
    assert_abandoned_without_retry(held)
    assert stream.events_list[-1].data["reason"] == "timeout"


@pytest.mark.sandbox
def test_a_stop_asked_for_while_the_run_starts_is_not_lost(tmp_path):
    """Ctrl-C or SIGTERM while the sandbox is probed (seconds on a loaded machine) stops the run about to start."""
    probing = tmp_path / "probing"
    slow_bwrap = tmp_path / "bin" / "bwrap"
    slow_bwrap.parent.mkdir()
    slow_bwrap.write_text(f"#!/bin/sh\ntouch {probing}\nsleep 1\nexec {shutil.which('bwrap')} \"$@\"\n")
    slow_bwrap.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    config = load_config(overrides={"safety": {"sandbox": "workspace", "bwrap": str(slow_bwrap)}})
    model = ScriptedModel([{"reasoning": "done", "actions": [{"action_type": "TASK_COMPLETE", "content": "ran"}]}])
    agent = DefaultAgent(inference_func=model, cmd_init_dir=work, config=config)

    def stop_while_probing():
        deadline = time.monotonic() + 30
        while not probing.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        agent.interrupt("SIGTERM")

    threading.Thread(target=stop_while_probing, daemon=True).start()
    stream = agent.run_with_new_request("start")
    assert probing.exists(), "the configured bwrap was never probed"
    assert stream.events_list[-1].data["reason"] == "interrupt" and model.calls == 0


def cli(server, tmp_path, *extra):
    env = {**os.environ, **server.env}
    return subprocess.Popen([*ANGES, "-q", "think hard", "--model", "openai:test-model", *extra], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def only_stream():
    infos = EventStore().list()
    assert len(infos) == 1, infos
    return EventStore().load(infos[0].uid)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_the_cli_exits_4_at_once_on_a_signal_while_the_model_thinks(held, tmp_path, signum):
    proc = cli(held, tmp_path)
    try:
        assert held.wait_for_requests(1, timeout=30)
        sent = datetime.now()
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
        exited = datetime.now()
    finally:
        proc.kill()
    assert proc.returncode == 4, err
    assert "Traceback" not in err
    assert_abandoned_without_retry(held)
    last = only_stream().events_list[-1]
    assert last.type == "task_interrupted" and last.data["reason"] == "interrupt"
    assert last.data["by"] == signum.name
    stopped = (last.created_at - sent).total_seconds()
    assert stopped < STOP_BOUND, f"the run stopped {stopped:.1f}s after {signum.name}"
    assert (exited - last.created_at).total_seconds() < EXIT_BOUND, "the process outlived its stopped run"


def test_the_cli_timeout_ends_a_model_call_and_exits_4(held, tmp_path):
    proc = cli(held, tmp_path, "--timeout", "2")
    try:
        _, err = proc.communicate(timeout=60)
        exited = datetime.now()
    finally:
        proc.kill()
    assert proc.returncode == 4, err
    assert_abandoned_without_retry(held)
    events = only_stream().events_list
    assert events[-1].data["reason"] == "timeout"
    took = (events[-1].created_at - events[0].created_at).total_seconds()  # the run's time: start-up is not in it
    assert 2 <= took < 2 + STOP_BOUND, f"the run stopped after {took:.1f}s"
    assert (exited - events[-1].created_at).total_seconds() < EXIT_BOUND, "the process outlived its --timeout"
    assert "out of time" in err


# --- a run whose process is gone ------------------------------------------------------------------------------


def scripted(tmp_path, *replies, name="replies.json"):
    path = tmp_path / name
    path.write_text(json.dumps([{"reasoning": "step", "actions": [action]} for action in replies]))
    return f"scripted:{path}"


def wait_for_text(path, timeout=15):
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)
    return path.read_text().strip()


def anges(*args, cwd):
    return subprocess.run([*ANGES, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False)


def test_a_run_killed_with_sigkill_reads_interrupted_and_resumes(tmp_path):
    token = sleep_token()
    model = scripted(tmp_path, {"action_type": "RUN_SHELL_CMD", "command": f"echo $$ > pid.txt; sleep {token}"})
    proc = subprocess.Popen([*ANGES, "-q", "wait", "--model", model], cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    wait_for_text(tmp_path / "pid.txt")
    store = EventStore()
    uid = only_stream().uid
    assert store.info(uid).status == "running"
    owner = store.owner(uid)
    started = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    assert owner["pid"] == proc.pid and owner["started"] == int(started)

    proc.kill()
    proc.wait()
    for pid in pids_running(token):  # the run's own processes end with it (issue 12); never leave one behind
        os.kill(pid, signal.SIGKILL)

    assert store.info(uid).status == "interrupted" and store.owner(uid) is None
    listed = anges("list", cwd=tmp_path)
    assert uid in listed.stdout and "interrupted" in listed.stdout and "running" not in listed.stdout
    assert "process ended without finishing" in anges("show", uid, cwd=tmp_path).stdout
    assert "**Status:** interrupted" in anges("export", uid, "--format", "md", cwd=tmp_path).stdout

    done = {"action_type": "TASK_COMPLETE", "content": "carried on"}
    resumed = anges("--resume", uid, "-q", "go on", "--model", scripted(tmp_path, done, name="more.json"), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    stream = store.load(uid)
    assert [e.type for e in stream.events_list] == ["new_request", "task_interrupted", "follow_up_request",
                                                     "task_completion"]
    assert stream.events_list[1].data["reason"] == "abandoned"
    assert store.info(uid).status == "completed"


def test_the_terminal_closing_stops_the_run_and_exits_4_quietly(held, tmp_path):
    main, side = pty.openpty()
    env = {**os.environ, **held.env, "TERM": "xterm"}
    proc = subprocess.Popen([*ANGES, "-q", "think hard", "--model", "openai:test-model"], cwd=tmp_path, env=env,
                            stdin=side, stdout=side, stderr=side)
    os.close(side)
    try:
        assert held.wait_for_requests(1, timeout=30)
        os.close(main)  # the terminal is gone: writing to it now fails
        proc.send_signal(signal.SIGHUP)  # what the kernel sends its session when it hangs up
        assert proc.wait(timeout=STOP_BOUND + EXIT_BOUND) == 4
    finally:
        proc.kill()
    assert_abandoned_without_retry(held)
    last = only_stream().events_list[-1]
    assert last.type == "task_interrupted" and last.data["by"] == "SIGHUP"


IGNORES_CANCEL = """
import sys, threading, time
from anges.agents import DefaultAgent
from anges.config.loading import load_config

called, asked = threading.Event(), []

def model(prompt, temperature=0.0):  # a plain function: it knows nothing of cancel tokens
    called.set()
    time.sleep(120)
    return "{}"

def stop():
    called.wait()
    asked.append(time.time())
    agent.interrupt()

agent = DefaultAgent(inference_func=model, cmd_init_dir=sys.argv[1], config=load_config())
threading.Thread(target=stop, daemon=True).start()
reason = agent.run_with_new_request("wait").events_list[-1].data["reason"]
print(reason, asked[0], time.time(), flush=True)
"""


def test_a_model_that_ignores_the_stop_cannot_keep_the_process_alive(tmp_path):
    out = subprocess.run([sys.executable, "-c", IGNORES_CANCEL, str(tmp_path)], capture_output=True, text=True,
                         timeout=150, check=False)
    exited = time.time()
    assert out.returncode == 0, out.stderr
    reason, asked, stopped = out.stdout.split()
    assert reason == "interrupt"
    assert float(stopped) - float(asked) < STOP_BOUND, "the run did not stop while its model call went on"
    assert exited - float(stopped) < EXIT_BOUND, "the model call's thread kept the process alive"


def test_the_call_thread_ends_when_idle_and_the_next_call_starts_another(monkeypatch):
    from anges.models import cancel

    monkeypatch.setattr(cancel, "IDLE_SECONDS", 0.05)
    calls = cancel.CallThread("test")
    first = calls.start(threading.current_thread, cancel.CancelToken())
    assert first.wait(5) and first.result() is not threading.current_thread()
    deadline = time.monotonic() + 5
    while calls.start(lambda: None, cancel.CancelToken()) is not None:
        assert time.monotonic() < deadline, "the idle thread never ended"
        time.sleep(0.1)
