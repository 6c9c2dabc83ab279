"""`anges batch --engine ray` on a local Ray (one shared `ray.init(num_cpus=2)` for the module).

The workers are real Ray worker processes: they run the agent against a scratch store on their node and
send its records back through the collector actor into this process's store.
"""

import io
import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import ray
from helpers import pids_running, sleep_token
from test_batch import ANGES, complete, reply, script, shell, task_file, types
from wire_servers import MODEL_ENV, TEST_KEY

from anges.batch.progress import PlainDisplay
from anges.batch.ray_engine import Collector, RayEngine
from anges.batch.runner import BatchRunner
from anges.batch.tasks import batch_id_for, load_tasks
from anges.config.loading import load_config
from anges.store.event_store import EventStore

pytestmark = pytest.mark.xdist_group("ray")  # one Ray at a time on this machine, whatever the test workers


@pytest.fixture(scope="module")
def ray_address(tmp_path_factory):
    """A local Ray with two CPUs; its workers get a throwaway ANGES_HOME and no model credentials."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("ANGES_HOME", str(tmp_path_factory.mktemp("ray_workers_home")))
        for name in MODEL_ENV:
            env.delenv(name, raising=False)
        ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def runner_for(path: Path, defaults=None, config=None, **engine):
    config = config or load_config()
    shown = io.StringIO()
    runner = BatchRunner(load_tasks(path, defaults), "ray-batch", RayEngine(config, **engine),
                         display_factory=lambda progress: PlainDisplay(progress, shown))
    return runner, shown


def streams_of(batch_id):
    store = EventStore()
    return {info.batch_task: store.load(info.uid) for info in store.list() if info.batch_id == batch_id}


def in_background(runner):
    box = {}
    thread = threading.Thread(target=lambda: box.setdefault("report", runner.run()), daemon=True)
    thread.start()
    return thread, box


@pytest.mark.sandbox
def test_each_task_runs_in_a_fresh_folder_on_a_worker_and_its_events_land_here(ray_address, tmp_path):
    template = tmp_path / "template"
    template.mkdir()
    (template / "seed.txt").write_text("from the template\n")
    model = script(tmp_path, "r.json", shell("cat seed.txt made; pwd"), complete("Checked."))
    path = task_file(tmp_path, *({"id": f"t{i}", "task": f"task {i}", "template": "template",
                                  "setup": "echo set > made"} for i in range(3)))
    runner, shown = runner_for(path, {"model": model})
    report = runner.run()
    assert [row["status"] for row in report.results] == ["completed"] * 3
    streams = streams_of("ray-batch")
    folders = set()
    for task, stream in streams.items():
        assert types(stream) == ["new_request", "action", "task_completion"]
        assert stream.agent_settings["batch_id"] == "ray-batch" and stream.agent_settings["batch_task"] == task
        out = stream.events_list[1].data["stdout"].splitlines()
        assert out[:2] == ["from the template", "set"]
        folders.add(out[2])
        assert Path(out[2]).parent.name.startswith(f"anges-batch-{task}-")  # the Ray task's scratch folder
        assert not Path(out[2]).exists()  # the worker's scratch folder is gone
        assert not out[2].startswith(str(tmp_path))
    assert len(folders) == 3
    assert "[3/3]" in shown.getvalue()


@pytest.mark.sandbox
def test_events_arrive_while_the_run_goes_and_stop_in_this_store_stops_the_remote_run(ray_address, tmp_path):
    model = script(tmp_path, "r.json", *(shell(f"sleep 0.4; echo step {i}") for i in range(40)), complete())
    path = task_file(tmp_path, {"id": "long", "task": "many steps", "model": model})
    runner, _ = runner_for(path)
    thread, box = in_background(runner)
    store = EventStore()
    deadline = time.monotonic() + 60
    while True:
        assert time.monotonic() < deadline, "no events reached this store while the run went"
        streams = streams_of("ray-batch")
        if streams and len(streams["long"].events_list) >= 3:
            break
        time.sleep(0.1)
    uid = streams["long"].uid
    assert store.info(uid).status == "running" and store.is_running(uid)  # shown live, held while it runs
    store.request_stop(uid)  # what the web chat's Stop button does
    thread.join(30)
    assert not thread.is_alive()
    stream = store.load(uid)
    assert types(stream)[-1] == "task_interrupted" and stream.events_list[-1].data["reason"] == "interrupt"
    assert len(stream.events_list) < 20  # it stopped, rather than running its 40 steps
    assert box["report"].results[0]["status"] == "interrupted"
    assert not store.is_running(uid)


@pytest.mark.sandbox
def test_model_credentials_reach_workers_only_through_the_runtime_env(ray_address, tmp_path, openai_server,
                                                                      monkeypatch):
    # The cluster started before these were set, so its workers can only get them through runtime_env.
    monkeypatch.setenv("OPENAI_API_KEY", TEST_KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.base_url)
    openai_server.enqueue_text(json.dumps(shell("echo key=[$OPENAI_API_KEY]")), input_tokens=2000, output_tokens=10)
    openai_server.enqueue_text(json.dumps(complete("Finished.")), input_tokens=2000, output_tokens=10)
    path = task_file(tmp_path, {"id": "real", "task": "use the provider", "model": "openai:gpt-test"})
    config = load_config(overrides={"prices": {"gpt-test": {"input": 1.0, "output": 2.0}}})
    runner, _ = runner_for(path, config=config)
    row = runner.run().results[0]
    assert row["status"] == "completed" and row["answer"] == "Finished."
    assert [request.headers["authorization"] for request in openai_server.requests] == [f"Bearer {TEST_KEY}"] * 2
    assert row["tokens"] == {"input": 4000, "output": 20, "cached": 0}
    assert row["cost"] == pytest.approx((4000 * 1.0 + 20 * 2.0) / 1e6)  # the driver's config reached the worker
    stream = streams_of("ray-batch")["real"]
    assert stream.events_list[1].data["stdout"] == "key=[]\n"  # commands never see the key
    for file in Path(os.environ["ANGES_HOME"]).rglob("*"):
        if file.is_file():
            assert TEST_KEY not in file.read_text(errors="replace"), file


@pytest.mark.sandbox
def test_stopping_a_ray_batch_ends_every_run_and_running_it_again_continues_them(ray_address, tmp_path):
    # The commands wait (a `sleep` found by its token) until `go` exists; the signals folder is outside the
    # tasks' folders, so the driver's config makes it writable, and the engine ships that config to the workers.
    signals, token = tmp_path / "signals", sleep_token()
    signals.mkdir()
    command = f"test -f {signals}/go || {{ touch {signals}/started-$(basename $(dirname $PWD)); sleep {token}; }}"
    model = script(tmp_path, "r.json", shell(command), complete())
    path = task_file(tmp_path, *({"id": f"t{i}", "task": f"wait {i}"} for i in range(3)))
    config = load_config(overrides={"safety": {"writable_paths": [str(signals)]}})
    runner, _ = runner_for(path, {"model": model}, config=config, workers=2, cpus_per_task=1.0)
    thread, box = in_background(runner)
    deadline = time.monotonic() + 60
    while len(list(signals.glob("started-*"))) < 2 or not pids_running(token):
        assert time.monotonic() < deadline, "the tasks never started"
        time.sleep(0.05)
    runner.stop()  # what Ctrl-C does
    thread.join(30)
    assert not thread.is_alive() and box["report"].stopped
    deadline = time.monotonic() + 10
    while pids_running(token):
        assert time.monotonic() < deadline, "a command outlived the stop"
        time.sleep(0.05)
    stopped = streams_of("ray-batch")
    assert len(stopped) == 2
    assert all(stream.events_list[-1].data.get("reason") == "interrupt" for stream in stopped.values())

    (signals / "go").write_text("go")
    again, _ = runner_for(path, {"model": model}, config=config, workers=2)
    report = again.run()
    assert [row["status"] for row in report.results] == ["completed"] * 3
    finished = streams_of("ray-batch")
    for task, stream in stopped.items():
        kinds = types(finished[task])
        assert finished[task].uid == stream.uid
        assert kinds[: len(stream.events_list)] == types(stream)  # what was received before is kept
        assert kinds[len(stream.events_list):] == ["follow_up_request", "action", "task_completion"]


@pytest.mark.sandbox
def test_workers_run_commands_in_the_sandbox_the_driver_configured_and_decline_approvals(ray_address, tmp_path):
    allowed, other = tmp_path / "allowed", tmp_path / "other"
    allowed.mkdir()
    other.mkdir()
    model = script(tmp_path, "r.json",
                   shell(f"echo in > {allowed}/a.txt; echo out > {other}/b.txt"),
                   reply({"action_type": "RUN_SHELL_CMD", "command": f"echo escaped > {other}/c.txt",
                          "escalate": "it writes outside the sandbox"}),
                   complete())
    path = task_file(tmp_path, {"id": "t", "task": "write", "model": model})
    # The driver's config: one more writable folder, and approvals granted (which a batch never does).
    config = load_config(overrides={"safety": {"writable_paths": [str(allowed)], "approval": "auto"}})
    runner, _ = runner_for(path, config=config)
    assert runner.run().results[0]["status"] == "completed"
    assert (allowed / "a.txt").read_text() == "in\n"
    assert list(other.iterdir()) == []
    stream = streams_of("ray-batch")["t"]
    assert types(stream) == ["new_request", "action", "approval_decided", "task_completion"]
    assert stream.events_list[1].data["sandbox"] == "workspace" and stream.events_list[1].data["exit_code"] != 0
    declined = stream.events_list[2].data
    assert (declined["decision"], declined["by"], declined["rule"]) == ("deny", "no_one", "escalation")


def test_the_command_runs_a_batch_on_a_running_cluster(ray_address, tmp_path):
    model = script(tmp_path, "r.json", shell(f"echo hello >> {tmp_path}/said.txt"), complete("Said hello."))
    path = task_file(tmp_path, {"id": "a", "task": "greet"}, {"id": "b", "task": "greet again"})
    out = subprocess.run([*ANGES, "batch", str(path), "--engine", "ray", "--address", ray_address, "--model", model,
                          "--cpus-per-task", "0.5", "--sandbox", "off", "-o", "-"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(row["id"], row["status"], row["answer"]) for row in rows] == [
        ("a", "completed", "Said hello."), ("b", "completed", "Said hello.")]
    assert "on Ray" in out.stderr and "no sandbox: commands run with your rights" in out.stderr
    assert (tmp_path / "said.txt").read_text() == "hello\nhello\n"  # --sandbox off reached the workers
    assert ray.is_initialized()  # the command's own driver left this cluster running


def test_the_collector_hands_a_retry_what_earlier_attempts_sent_and_refuses_a_stale_attempt():
    collector = Collector()  # the actor's class, used directly
    collector.seed("t", [["s", {"kind": "header"}]])
    first = collector.begin("t")
    assert (first["attempt"], first["records"], first["ended"]) == (1, [["s", {"kind": "header"}]], False)
    assert collector.append("t", 1, [["s", {"kind": "event", "type": "action"}]], "running `ls`") == "ok"
    assert collector.drain() == ({"t": [["s", {"kind": "event", "type": "action"}]]},  # the seed is not drained
                                 {"t": "running `ls`"})
    second = collector.begin("t")  # Ray retried the task: the old attempt's node is gone
    assert second["attempt"] == 2 and len(second["records"]) == 2
    assert collector.append("t", 1, [["s", {"kind": "event", "type": "late"}]], "thinking") == "stale"
    assert collector.drain() == ({}, {"t": "running `ls`"})
    collector.end("t", 2)
    assert collector.begin("t")["ended"]  # a retry after the end does not run the task again
    collector.stop()
    assert collector.append("t", 3, []) == "stop" and collector.begin("u")["stop"]


def test_a_batch_on_a_ray_it_starts_prints_only_its_own_lines(tmp_path):
    model = script(tmp_path, "r.json", shell("echo hi"), complete("Done."))
    path = task_file(tmp_path, {"id": "a", "task": "greet"})
    env = {key: value for key, value in os.environ.items() if not key.startswith("RAY_")}
    out = subprocess.run([*ANGES, "batch", str(path), "--engine", "ray", "--model", model, "--cpus-per-task", "0.5",
                          "--sandbox", "off"], cwd=tmp_path, capture_output=True, text=True, timeout=180, env=env)
    assert out.returncode == 0, out.stderr
    ours = ("anges batch: ", "[1/1] a completed", "outcome ", "succeeded ", "total ", "results: ")
    assert [line for line in out.stderr.splitlines() if not line.startswith(ours)] == [], out.stderr
    log = Path(os.environ["ANGES_HOME"]) / "data" / "batches" / batch_id_for(path) / "ray.log"
    assert f"Ray's own messages go to {log}" in out.stderr and log.is_file()


def test_what_ray_writes_to_stderr_goes_to_the_batch_log(tmp_path):
    # Ray's C++ core, its Python loggers and the processes it starts all write to file descriptor 2.
    log = tmp_path / "batch" / "ray.log"
    code = ("import logging, os, subprocess, sys\n"
            "from pathlib import Path\n"
            "from anges.batch.ray_output import ray_output\n"
            f"with ray_output(Path({str(log)!r})) as shown:\n"
            "    os.write(2, b'[raylet] Started worker process 42\\n')\n"
            "    logging.getLogger('ray').warning('a node died: Traceback ...')\n"
            "    subprocess.run(['sh', '-c', 'echo from a process Ray started >&2'])\n"
            "    print('anges batch: the display', file=shown)\n"
            "print('after the batch', file=sys.stderr)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stderr == "anges batch: the display\nafter the batch\n"
    assert log.read_text().splitlines() == ["[raylet] Started worker process 42", "a node died: Traceback ...",
                                            "from a process Ray started"]


def test_with_telemetry_a_ray_batch_is_one_trace_and_each_remote_run_is_under_its_tasks_span(ray_address, tmp_path):
    from otlp_receiver import OTLPReceiver

    import anges.telemetry
    from anges.batch import trace_factory

    model = script(tmp_path, "r.json", shell("echo 42 > answer.txt"), complete("Wrote it."))
    path = task_file(tmp_path, *({"id": f"t{i}", "task": "write 42", "check": "grep -qx 42 answer.txt"}
                                for i in range(2)))
    with OTLPReceiver() as receiver:
        config = load_config(overrides={"telemetry": {"enabled": True, "endpoint": receiver.url, "metrics": False}})
        runner = BatchRunner(load_tasks(path, {"model": model}), "ray-traced", RayEngine(config),
                             display_factory=lambda progress: PlainDisplay(progress, io.StringIO()),
                             trace_factory=trace_factory(config))
        try:
            report = runner.run()
            spans = receiver.wait_for(lambda found: sum(s.name.startswith("invoke_agent") for s in found) == 2
                                      and any(s.name.startswith("invoke_workflow") for s in found))
        finally:
            anges.telemetry.shutdown()
    assert [row["check"] for row in report.results] == ["passed", "passed"]
    (batch,) = [span for span in spans if span.name == "invoke_workflow ray-traced"]
    tasks = {span.span_id: span for span in spans if span.name.startswith("batch_task ")}
    runs = [span for span in spans if span.name.startswith("invoke_agent")]
    assert {task.parent_id for task in tasks.values()} == {batch.span_id}
    assert {run.parent_id for run in runs} == set(tasks)  # each run, on a Ray worker, under its own task's span
    assert {span.trace_id for span in spans} == {batch.trace_id}
    assert {run.resource["process.pid"] for run in runs}.isdisjoint({os.getpid()})
    assert all(tasks[run.parent_id].attributes["anges.batch.check"] == "passed" for run in runs)
