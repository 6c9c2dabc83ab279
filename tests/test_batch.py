"""`anges batch` on this machine: task files, worker processes, results, resuming, Ctrl-C and a killed driver.

Each test runs the real `anges batch` command (or the task-file loader) with scripted models and real
commands in temp directories.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from helpers import SANDBOX_PYTHON, pids_running, sleep_token

from anges.batch.state import BatchState
from anges.batch.tasks import TaskSpec, batch_id_for, load_tasks
from anges.batch.worker import APPROVAL, Job, batch_safety, run_task
from anges.config.loading import load_config
from anges.exceptions import BatchError
from anges.store.event_store import EventStore

ANGES = [sys.executable, "-m", "anges"]


def reply(*actions):
    return {"analysis": "", "reasoning": "next", "actions": list(actions)}


def shell(command):
    return reply({"action_type": "RUN_SHELL_CMD", "command": command})


def complete(text="Done."):
    return reply({"action_type": "TASK_COMPLETE", "content": text})


def help_needed(text="I am stuck."):
    return reply({"action_type": "HELP_NEEDED", "content": text})


def script(folder: Path, name: str, *replies) -> str:
    path = folder / name
    path.write_text(json.dumps(list(replies)))
    return f"scripted:{path}"


def task_file(folder: Path, *tasks, name="tasks.jsonl") -> Path:
    path = folder / name
    path.write_text("".join(json.dumps(task) + "\n" for task in tasks))
    return path


def batch(*args, cwd, timeout=120, env=None):
    return subprocess.run([*ANGES, "batch", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          check=False, env=env)


def config_file(folder: Path, text: str, name="batch-config.yaml") -> str:
    path = folder / name
    path.write_text(text)
    return str(path)


def writable(folder: Path, *paths: Path) -> str:
    """A config file for the batch that lets its sandboxed commands write `paths` (and see them: /tmp is private)."""
    return config_file(folder, "safety:\n  writable_paths: [" + ", ".join(json.dumps(str(p)) for p in paths) + "]\n")


def results_of(path: Path) -> dict:
    return {row["id"]: row for row in map(json.loads, path.read_text().splitlines())}


def batch_streams(batch_id):
    store = EventStore()
    return {info.batch_task: store.load(info.uid) for info in store.list() if info.batch_id == batch_id}


def types(stream):
    return [event.type for event in stream.events_list]


# --- task files ----------------------------------------------------------------------------------------------


def test_a_task_file_fills_in_defaults_and_resolves_paths_from_its_folder(tmp_path):
    (tmp_path / "repo").mkdir()
    (tmp_path / "other").mkdir()
    model = script(tmp_path, "r.json", complete())
    path = task_file(tmp_path, {"id": "a", "task": "one", "template": "repo"},
                     {"id": "b", "task": "two", "agent": "task_executor", "timeout": 5, "model": "scripted:r.json"})
    specs = load_tasks(path, {"model": model, "timeout": 60.0, "path": str(tmp_path / "other")})
    assert specs[0] == TaskSpec("a", "one", template=str(tmp_path / "repo"), model=model, timeout=60.0)
    assert specs[1] == TaskSpec("b", "two", path=str(tmp_path / "other"), agent="task_executor",
                                model=f"scripted:{tmp_path / 'r.json'}", timeout=5.0)


def test_a_yaml_task_file_loads_and_its_errors_name_the_line(tmp_path):
    path = tmp_path / "tasks.yaml"
    path.write_text("tasks:\n  - id: a\n    task: first\n\n  - id: b\n    task: second\n    timeout: soon\n")
    with pytest.raises(BatchError) as caught:
        load_tasks(path)
    assert str(caught.value) == f"{path}:5: field 'timeout': expected a number of seconds more than 0, got \"soon\""
    path.write_text("- id: a\n  task: first\n- id: b\n  task: second\n")
    assert [spec.id for spec in load_tasks(path)] == ["a", "b"]


@pytest.mark.parametrize("lines, message", [
    (['{"id": "a", "task": "x"}', '{"id": "b", "task": "y",}'], ":2: not valid JSON"),
    (['{"id": "a", "task": "x", "n": ' + "9" * 5000 + "}"], ":1: not valid JSON (Exceeds the limit"),  # int digits
    (['{"id": "a", "task": "x", "secret": "k"}'], ":1: unknown field 'secret' (known: id, task, path,"),
    (['{"task": "x"}'], ":1: field 'id': missing"),
    (['{"id": "a", "task": "x"}', "", '{"id": "a", "task": "y"}'],
     ":3: field 'id': 'a' is already the id of the task on line 1"),
    (['{"id": "../a", "task": "x"}'], ":1: field 'id': '../a' is not a valid id"),
    (['{"id": "a", "task": "  "}'], ":1: field 'task': is empty"),
    (['{"id": "a", "task": "x", "agent": "wizard"}'], ":1: field 'agent': unknown agent type 'wizard'"),
    (['{"id": "a", "task": "x", "template": "nowhere"}'], ":1: field 'template': 'nowhere' is not a directory"),
    (['{"id": "a", "task": "x", "max_steps": 2.5}'], ":1: field 'max_steps': expected a whole number"),
    (['["a", "x"]'], ":1: expected an object with at least 'id' and 'task', got a list"),
])
def test_a_bad_task_file_gets_file_line_and_field(tmp_path, lines, message):
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(BatchError) as caught:
        load_tasks(path)
    assert str(caught.value).startswith(str(path) + message), str(caught.value)


def test_the_command_refuses_a_bad_task_file_before_running_anything(tmp_path):
    path = task_file(tmp_path, {"id": "a", "task": "x", "timeout": -1})
    out = batch(str(path), "--model", script(tmp_path, "r.json", complete()), cwd=tmp_path)
    assert out.returncode == 2
    assert f"anges: {path}:1: field 'timeout': expected a number of seconds more than 0, got -1" in out.stderr
    assert "Traceback" not in out.stderr
    assert EventStore().list() == []


def test_ray_options_without_the_ray_engine_are_refused(tmp_path):
    path = task_file(tmp_path, {"id": "a", "task": "x"})
    out = batch(str(path), "--address", "auto", "--cpus-per-task", "0.5", cwd=tmp_path)
    assert out.returncode == 2
    assert "anges: --address, --cpus-per-task: only with --engine ray" in out.stderr


def test_a_model_without_credentials_stops_the_batch_before_it_starts(tmp_path):
    path = task_file(tmp_path, {"id": "a", "task": "x"})
    out = batch(str(path), "--model", "openai", cwd=tmp_path)
    assert out.returncode == 2
    assert "model 'openai' needs OPENAI_API_KEY set" in out.stderr
    assert EventStore().list() == []


def test_the_batch_id_comes_from_the_task_files_name_and_place(tmp_path):
    (tmp_path / "x").mkdir()
    first, second = tmp_path / "evals.jsonl", tmp_path / "x" / "evals.jsonl"
    assert batch_id_for(first).startswith("evals-")
    assert batch_id_for(first) == batch_id_for(first)
    assert batch_id_for(first) != batch_id_for(second)


# --- running -------------------------------------------------------------------------------------------------


def test_the_setup_command_gets_the_environment_the_agents_commands_get(tmp_path):
    env = {**os.environ, "OPENAI_API_KEY": "sk-model-key-material", "DEPLOY_TOKEN": "deploy-token-material",
           "PASSED_TOKEN": "passed-token-material"}
    setup = 'echo "key=${OPENAI_API_KEY:-unset} token=${DEPLOY_TOKEN:-unset} passed=${PASSED_TOKEN:-unset}" > env.txt'
    path = task_file(tmp_path, {"id": "t", "task": "look", "setup": setup})
    config = config_file(tmp_path, "agents:\n  common:\n    pass_env: [PASSED_TOKEN]\n")
    out = batch(str(path), "--model", script(tmp_path, "m.json", complete()), "--config", config, "--sandbox", "off",
                cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    written = (BatchState(batch_id_for(path)).work_dir("t") / "env.txt").read_text()
    assert written == "key=unset token=unset passed=passed-token-material\n"


@pytest.mark.sandbox
def test_workers_run_tasks_in_fresh_copies_and_results_say_how_each_ended(tmp_path):
    template = tmp_path / "template"
    template.mkdir()
    (template / "seed.txt").write_text("from the template\n")
    shared = tmp_path / "shared"
    shared.mkdir()
    # Each run marks itself running in `shared` (writable through the batch's config), counts the runs marked
    # there, waits a little, then unmarks. A run is named by its folder ($$ is the sandbox's own pid).
    work = (f"touch {shared}/run.$(basename $PWD); sleep 0.6; ls {shared} | grep -c '^run' >> {shared}/counts; "
            f"rm {shared}/run.$(basename $PWD); cat seed.txt made-by-setup >> out.txt; pwd >> out.txt")
    ok = script(tmp_path, "ok.json", shell(work), complete("All done."))
    stuck = script(tmp_path, "stuck.json", help_needed("Which database?"))
    path = task_file(
        tmp_path,
        *({"id": f"ok{i}", "task": f"task {i}", "template": "template", "setup": "echo set > made-by-setup"}
          for i in range(4)),
        {"id": "stuck", "task": "needs a person", "model": stuck},
        {"id": "broken", "task": "bad setup", "setup": "echo no such thing >&2; exit 3"},
    )
    out = batch(str(path), "--model", ok, "--workers", "2", "-o", str(tmp_path / "results.jsonl"),
                "--config", writable(tmp_path, shared), cwd=tmp_path)
    assert out.returncode == 5, out.stderr  # some tasks did not succeed
    batch_id = batch_id_for(path)

    results = results_of(tmp_path / "results.jsonl")
    assert results == results_of(BatchState(batch_id).results_path)
    streams = batch_streams(batch_id)
    for i in range(4):
        row = results[f"ok{i}"]
        assert row["status"] == "completed" and row["answer"] == "All done."
        assert row["steps"] == 2 and row["model_calls"] == 2 and row["tokens"]["input"] > 0
        assert row["wall_time"] > 0.6 and row["stream_id"] == streams[f"ok{i}"].uid
        workdir = BatchState(batch_id).work_dir(f"ok{i}")
        assert (workdir / "out.txt").read_text() == f"from the template\nset\n{workdir}\n"
        assert streams[f"ok{i}"].agent_settings["cmd_init_dir"] == str(workdir)
    assert results["stuck"]["status"] == "help_needed" and results["stuck"]["answer"] == "Which database?"
    assert results["broken"]["status"] == "error" and results["broken"]["stream_id"] is None
    assert results["broken"]["error"] == "setup command failed with exit code 3: no such thing"
    assert "broken" not in streams
    # Never more than two at once, and two did overlap.
    assert max(map(int, (shared / "counts").read_text().split())) == 2
    assert "failed: broken error: setup command failed with exit code 3" in out.stderr
    assert "stuck help_needed · 1 step, 1 call, " in out.stderr and " · 2 steps, 2 calls, " in out.stderr
    summary = [line.split() for line in out.stderr.splitlines() if line.startswith(("succeeded ", "failed ", "total "))]
    assert [line[:2] for line in summary] == [["succeeded", "4"], ["failed", "2"], ["total", "6"]]


@pytest.mark.sandbox
def test_running_the_batch_again_skips_finished_tasks_and_retry_failed_reruns_failed_ones(tmp_path):
    flaky = tmp_path / "flaky"
    flaky.write_text("fail")
    # The task fails while the file says so (its setup command, which is not sandboxed, reads it), else completes.
    model = script(tmp_path, "r.json", shell("ls"), complete())
    path = task_file(tmp_path, {"id": "good", "task": "fine", "max_steps": 5},
                     {"id": "bad", "task": "flaky", "setup": f"! grep -q fail {flaky}"})
    first = batch(str(path), "--model", model, cwd=tmp_path)
    assert first.returncode == 5
    batch_id = batch_id_for(path)
    good = batch_streams(batch_id)["good"].uid

    again = batch(str(path), "--model", model, cwd=tmp_path)
    assert again.returncode == 5
    assert "0 to run; 2 finished earlier (1 failed: --retry-failed runs them again)" in again.stderr
    assert [info.uid for info in EventStore().list()] == [good]

    flaky.write_text("ok now")
    retried = batch(str(path), "--model", model, "--retry-failed", cwd=tmp_path)
    assert retried.returncode == 0, retried.stderr
    assert "1 to run; 1 finished earlier" in retried.stderr
    streams = batch_streams(batch_id)
    assert streams["good"].uid == good and types(streams["bad"])[-1] == "task_completion"
    rows = results_of(BatchState(batch_id).results_path)
    assert {row["id"]: row["status"] for row in rows.values()} == {"good": "completed", "bad": "completed"}


@pytest.mark.sandbox
def test_a_task_timeout_stops_its_run(tmp_path):
    model = script(tmp_path, "r.json", shell("sleep 30"), complete())
    path = task_file(tmp_path, {"id": "slow", "task": "wait", "timeout": 1})
    began = time.monotonic()
    out = batch(str(path), "--model", model, "-o", "-", cwd=tmp_path)
    assert time.monotonic() - began < 20
    row = json.loads(out.stdout)
    assert (row["status"], row["reason"]) == ("interrupted", "timeout")
    assert out.returncode == 5


@pytest.mark.sandbox
def test_list_batch_shows_the_runs_of_one_batch(tmp_path):
    model = script(tmp_path, "r.json", complete())
    subprocess.run([*ANGES, "-q", "not in a batch", "--model", model], cwd=tmp_path, capture_output=True, check=True)
    path = task_file(tmp_path, {"id": "a", "task": "first of the batch"}, {"id": "b", "task": "second of the batch"})
    assert batch(str(path), "--model", model, "--batch-id", "nightly-1", cwd=tmp_path).returncode == 0
    listed = subprocess.run([*ANGES, "list", "--batch", "nightly-1", "--json"], cwd=tmp_path, capture_output=True,
                            text=True, check=True)
    infos = json.loads(listed.stdout)
    assert sorted((info["batch_task"], info["title"]) for info in infos) == [
        ("a", "first of the batch"), ("b", "second of the batch")]
    assert {info["batch_id"] for info in infos} == {"nightly-1"}
    shown = subprocess.run([*ANGES, "list", "--batch", "nightly-1"], cwd=tmp_path, capture_output=True, text=True)
    assert "first of the batch" in shown.stdout and "not in a batch" not in shown.stdout
    none = subprocess.run([*ANGES, "list", "--batch", "other"], cwd=tmp_path, capture_output=True, text=True)
    assert "no streams of batch 'other'" in none.stderr


@pytest.mark.sandbox
def test_on_a_terminal_the_progress_and_summary_use_rich(tmp_path):
    import pty

    model = script(tmp_path, "r.json", shell("sleep 0.5"), complete())
    path = task_file(tmp_path, {"id": "a", "task": "x"}, {"id": "b", "task": "y"})
    main, side = pty.openpty()
    proc = subprocess.Popen([*ANGES, "batch", str(path), "--model", model], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=side, env={**os.environ, "COLUMNS": "120", "TERM": "xterm"})
    os.close(side)
    shown = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:
            break
        if not chunk:
            break
        shown += chunk
    assert proc.wait(timeout=60) == 0
    os.close(main)
    text = shown.decode()
    assert "1/2 done" in text or "0/2 done" in text  # the live headline
    assert "batch summary" in text and "┃" in text  # rich's table


# --- safety: the sandbox and approvals ----------------------------------------------------------------------


@pytest.fixture
def outside():
    """A folder outside the work dirs that sandboxed commands can see (pytest's own tmp is under /tmp, which a
    sandbox replaces with a private one)."""
    folder = Path(tempfile.mkdtemp(prefix="anges-batch-test-", dir="/var/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def action_data(stream):
    return [event.data for event in stream.events_list if event.type == "action"]


@pytest.mark.sandbox
def test_a_task_writes_only_its_own_folder_unless_the_batch_allows_more(tmp_path, outside):
    # Each batch's task writes in its folder and tries a file named after its batch in `outside`.
    command = f"echo kept > kept.txt; echo written > {outside}/$(basename $(dirname $(dirname $PWD)))"
    model = script(tmp_path, "r.json", shell(command), complete())
    path = task_file(tmp_path, {"id": "t", "task": "write"})
    runs = {"default": batch(str(path), "--model", model, "--batch-id", "default", cwd=tmp_path),
            "widened": batch(str(path), "--model", model, "--batch-id", "widened", "--config",
                             writable(tmp_path, outside), cwd=tmp_path),
            "off": batch(str(path), "--model", model, "--batch-id", "off", "--sandbox", "off", cwd=tmp_path)}
    for name, run in runs.items():
        assert run.returncode == 0, run.stderr
        assert (BatchState(name).work_dir("t") / "kept.txt").read_text() == "kept\n"
    assert sorted(file.name for file in outside.iterdir()) == ["off", "widened"]

    blocked = action_data(batch_streams("default")["t"])[0]
    assert blocked["exit_code"] != 0 and blocked["sandbox"] == "workspace"
    assert blocked["blocked"].startswith("read-only file system")  # what the model is told
    assert "sandbox: each task writes only its own folder, network off" in runs["default"].stderr
    assert "each task writes only its own folder and safety.writable_paths" in runs["widened"].stderr
    assert "no sandbox: commands run with your rights" in runs["off"].stderr
    assert action_data(batch_streams("off")["t"])[0]["sandbox"] == "none"


@pytest.mark.sandbox
def test_a_task_cannot_see_the_rest_of_anges_home(tmp_path, monkeypatch, outside):
    # ANGES_HOME holds the work dirs, but commands see only their own folder of it (and of the outputs their history
    # points to), not conversations, other sessions' outputs or config.
    home = outside / "home"
    monkeypatch.setenv("ANGES_HOME", str(home))
    subprocess.run([*ANGES, "-q", "a private conversation", "--model", script(tmp_path, "c.json", complete())],
                   cwd=tmp_path, capture_output=True, check=True)
    (home / "config.yaml").write_text("# private\n")
    look = f"ls -A {home} {home}/data {home}/data/outputs; cat {home}/config.yaml; echo x > mine"
    model = script(tmp_path, "r.json", shell(look), complete())
    assert batch(str(task_file(tmp_path, {"id": "t", "task": "look"})), "--model", model, "--batch-id", "b",
                 cwd=tmp_path).returncode == 0
    task = batch_streams("b")["t"]
    seen = action_data(task)[0]
    assert seen["stdout"].split() == [f"{home}:", "data", f"{home}/data:", "batches", "outputs",
                                      f"{home}/data/outputs:", task.uid]
    assert "private" not in seen["stdout"] and (BatchState("b").work_dir("t") / "mine").is_file()


@pytest.mark.sandbox
def test_the_network_is_off_for_batch_tasks_unless_the_batch_turns_it_on(tmp_path):
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Hello(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"hello from the host")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        fetch = (f"{SANDBOX_PYTHON} -c \"import urllib.request as u; "
                 f"print(u.urlopen('http://127.0.0.1:{server.server_port}/', timeout=10).read().decode())\"")
        model = script(tmp_path, "r.json", shell(fetch), complete())
        path = task_file(tmp_path, {"id": "t", "task": "fetch"})
        off = batch(str(path), "--model", model, "--batch-id", "off", cwd=tmp_path)
        on = batch(str(path), "--model", model, "--batch-id", "on", "--network", cwd=tmp_path)
    finally:
        server.shutdown()
    assert off.returncode == 0 and on.returncode == 0, off.stderr + on.stderr
    refused = action_data(batch_streams("off")["t"])[0]
    assert refused["exit_code"] != 0 and "hello from the host" not in refused["stdout"]
    assert action_data(batch_streams("on")["t"])[0]["stdout"] == "hello from the host\n"
    assert "network on" in on.stderr


@pytest.mark.sandbox
def test_an_action_that_needs_approval_is_declined_with_feedback_whatever_the_config_says(tmp_path):
    # The batch's config grants approvals; a batch declines them anyway (nobody is there to decide).
    config = config_file(tmp_path, "safety:\n  approval: auto\n")
    model = script(
        tmp_path, "r.json",
        reply({"action_type": "RUN_SHELL_CMD", "command": f"echo escaped > {tmp_path}/escaped.txt",
               "escalate": "it writes outside the sandbox"}),
        reply({"action_type": "EDIT_FILE", "directive_line": f"NEW_FILE {tmp_path}/edited.txt", "content": "x"}),
        shell("sudo true"),
        reply({"action_type": "EDIT_FILE", "directive_line": "NEW_FILE notes.txt", "content": "in my folder"}),
        complete("Worked around it."))
    path = task_file(tmp_path, {"id": "t", "task": "try things"})
    began = time.monotonic()
    out = batch(str(path), "--model", model, "--config", config, "-o", "-", cwd=tmp_path)
    assert time.monotonic() - began < 60  # declined at once, not left waiting for an answer
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["answer"] == "Worked around it."
    assert "safety.approval: auto does not apply to a batch" in out.stderr
    stream = batch_streams(batch_id_for(path))["t"]
    assert types(stream) == ["new_request", "approval_decided", "approval_decided", "approval_decided", "edit_file",
                             "task_completion"]
    decided = [event for event in stream.events_list if event.type == "approval_decided"]
    assert [(e.data["decision"], e.data["by"], e.data["rule"].split("[")[0]) for e in decided] == [
        ("deny", "no_one", "escalation"), ("deny", "no_one", "writable_paths"), ("deny", "no_one", "safety.default_rules")]
    assert all(e.content.startswith("DECLINED") and "no one can answer approval requests here" in e.content
               and "--approval" not in e.content for e in decided)  # the model reads it
    assert "Commands cannot leave the sandbox in this session" in decided[0].content  # the escalation
    assert not (tmp_path / "escaped.txt").exists() and not (tmp_path / "edited.txt").exists()
    assert (BatchState(batch_id_for(path)).work_dir("t") / "notes.txt").read_text() == "in my folder\n"


def test_with_the_sandbox_off_a_batch_tells_the_model_its_commands_run(tmp_path):
    from anges.agents import DefaultAgent
    from anges.models.scripted import ScriptedModel

    config = load_config(overrides={"safety": {"sandbox": "off"}})
    model = ScriptedModel([shell("echo ran > ran.txt"), shell("sudo true"), complete()])
    agent = DefaultAgent(inference_func=model, cmd_init_dir=str(tmp_path), approval=APPROVAL,
                         config=config.model_copy(update={"safety": batch_safety(config.safety)}))
    stream = agent.run_with_new_request("run")
    assert "- No sandbox: the sandbox is off (safety.sandbox: off). Commands run with the user's rights." in (
        model.prompts[0])
    assert (tmp_path / "ran.txt").is_file()
    assert [e.data["rule"].split("[")[0] for e in stream.events_list if e.type == "approval_decided"] == [
        "safety.default_rules"]  # sudo still asks, and is declined


@pytest.mark.packaged_safety  # the fallback without bwrap, as its users get it
def test_without_a_sandbox_the_batch_is_refused_unless_it_runs_with_the_sandbox_off(tmp_path):
    (tmp_path / "no-bwrap.yaml").write_text(f"safety: {{bwrap: {tmp_path / 'empty-bin' / 'bwrap'}}}\n")
    env = {**os.environ, "PATH": str(tmp_path / "empty-bin")}  # no bwrap
    model = script(tmp_path, "r.json", shell("echo ran > ran.txt"), complete())
    path = task_file(tmp_path, {"id": "t", "task": "run"})
    refused = batch(str(path), "--model", model, "--config", "no-bwrap.yaml", cwd=tmp_path, env=env)
    assert refused.returncode == 2
    assert "anges: the sandbox is not available here: bwrap was not found at" in refused.stderr
    assert "run the batch with --sandbox off" in refused.stderr and "Traceback" not in refused.stderr
    assert EventStore().list() == []
    allowed = batch(str(path), "--model", model, "--sandbox", "off", "--config", "no-bwrap.yaml", cwd=tmp_path,
                    env=env)
    assert allowed.returncode == 0, allowed.stderr
    assert (BatchState(batch_id_for(path)).work_dir("t") / "ran.txt").read_text() == "ran\n"


@pytest.mark.packaged_safety  # the fallback without bwrap, as its users get it
def test_a_worker_without_a_sandbox_fails_its_task_with_the_reason(tmp_path, monkeypatch):
    # What a Ray worker on a node without bwrap does (the local engine refuses the whole batch first).
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    job = Job(TaskSpec("t", "run", model=script(tmp_path, "r.json", complete())), "b", "stream1")
    config = load_config(overrides={"safety": {"bwrap": str(tmp_path / "empty-bin" / "bwrap")}})
    done = run_task(job, config, EventStore(), tmp_path, True, threading.Event())
    assert done["status"] == "error" and done["stream_id"] is None
    assert done["error"].startswith(f"the sandbox is not available on {socket.gethostname()}: bwrap was not found")
    assert not EventStore().exists("stream1")


# --- stopping and resuming -----------------------------------------------------------------------------------


class Stoppable:
    """Tasks whose command waits (a `sleep` found by its token) until `go` exists, then finishes at once.

    The signals folder is outside the work dirs, so the batch's config makes it writable for the sandbox.
    """

    def __init__(self, tmp_path: Path, count: int):
        self.signals = tmp_path / "signals"
        self.signals.mkdir()
        self.token = sleep_token()
        go, started = self.signals / "go", self.signals / "started-$(basename $PWD)"
        command = f"test -f {go} || {{ touch {started}; sleep {self.token}; }}"
        model = script(tmp_path, "r.json", shell(command), complete())
        self.path = task_file(tmp_path, *({"id": f"t{i}", "task": f"wait {i}"} for i in range(count)))
        self.args = [str(self.path), "--model", model, "--config", writable(tmp_path, self.signals)]

    def wait_started(self, count: int) -> None:
        """Wait until `count` tasks wait in their command (seen from the host, so the stop has something to end)."""
        deadline = time.monotonic() + 30
        while len(list(self.signals.glob("started-*"))) < count or not pids_running(self.token):
            assert time.monotonic() < deadline, "the tasks never started"
            time.sleep(0.05)

    def wait_gone(self, timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        while pids_running(self.token):
            assert time.monotonic() < deadline, "a task's command outlived the stop"
            time.sleep(0.05)

    def go(self) -> None:
        (self.signals / "go").write_text("go")


@pytest.mark.sandbox
def test_ctrl_c_stops_every_running_task_and_the_same_command_resumes_the_batch(tmp_path):
    tasks = Stoppable(tmp_path, 4)
    proc = subprocess.Popen([*ANGES, "batch", *tasks.args, "--workers", "2"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    tasks.wait_started(2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=20)  # within seconds, not the hours the commands wait
    assert proc.returncode == 4, err
    tasks.wait_gone()
    assert "stopping every running task" in err and "run the same command again" in err
    batch_id = batch_id_for(tasks.path)
    stopped = batch_streams(batch_id)
    assert len(stopped) == 2  # the other two never started
    for stream in stopped.values():
        assert types(stream)[-1] == "task_interrupted" and stream.events_list[-1].data["reason"] == "interrupt"
    rows = results_of(BatchState(batch_id).results_path)
    assert sorted(row["status"] for row in rows.values()) == ["interrupted", "interrupted", "not_run", "not_run"]

    tasks.go()
    resumed = batch(*tasks.args, "--workers", "2", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "4 to run (2 continued where they stopped)" in resumed.stderr
    finished = batch_streams(batch_id)
    assert len(finished) == 4
    for task, stream in stopped.items():  # the same streams went on: stop, continue request, completion
        assert finished[task].uid == stream.uid
        kinds = types(finished[task])
        assert kinds[: len(stream.events_list)] == types(stream)
        assert kinds[len(stream.events_list)] == "follow_up_request"
        assert "stopped before it was finished (interrupt)" in finished[task].events_list[len(kinds) - 3].content
        assert kinds[-1] == "task_completion"
    assert all(types(stream)[-1] == "task_completion" for stream in finished.values())
    assert batch(*tasks.args, cwd=tmp_path).returncode == 0  # nothing left to do


@pytest.mark.sandbox
def test_a_killed_driver_stops_its_workers_and_the_batch_resumes(tmp_path):
    tasks = Stoppable(tmp_path, 2)
    proc = subprocess.Popen([*ANGES, "batch", *tasks.args, "--workers", "2"], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tasks.wait_started(2)
    time.sleep(1.0)  # the killed runs last a second at least: their time must count
    proc.kill()
    proc.wait()
    tasks.wait_gone()  # each worker noticed it was orphaned and stopped its run
    batch_id = batch_id_for(tasks.path)
    deadline = time.monotonic() + 15
    while not all(types(s)[-1] == "task_interrupted" for s in batch_streams(batch_id).values()):
        assert time.monotonic() < deadline, "the workers did not record the stop"
        time.sleep(0.05)
    tasks.go()
    resumed = batch(*tasks.args, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "2 to run (2 continued where they stopped)" in resumed.stderr
    assert all(types(s)[-1] == "task_completion" for s in batch_streams(batch_id).values())
    log = [json.loads(line) for line in BatchState(batch_id).log_path.read_text().splitlines()]
    killed = [entry for entry in log if entry.get("recovered")]  # the ends the killed batch could not log
    assert sorted(entry["task"] for entry in killed) == ["t0", "t1"]
    assert all(entry["status"] == "interrupted" and entry["wall_time"] >= 1.0 for entry in killed)
    for row in results_of(BatchState(batch_id).results_path).values():
        ends = [e["wall_time"] for e in log if e["kind"] == "end" and e["task"] == row["id"]]
        assert len(ends) == 2 and row["wall_time"] == pytest.approx(sum(ends), abs=0.002) and row["wall_time"] >= 1.0


@pytest.mark.sandbox
def test_a_second_batch_of_the_same_id_is_refused_while_the_first_runs(tmp_path):
    tasks = Stoppable(tmp_path, 1)
    proc = subprocess.Popen([*ANGES, "batch", *tasks.args], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        tasks.wait_started(1)
        second = batch(*tasks.args, cwd=tmp_path)
        assert second.returncode == 2
        assert f"batch {batch_id_for(tasks.path)} is already running in another process" in second.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=20)
    tasks.wait_gone()


@pytest.mark.sandbox
def test_a_check_runs_in_the_tasks_sandbox_not_with_the_rights_of_the_batch(tmp_path, outside):
    # The agent plants a script the check runs: it writes the task's folder, never outside it.
    plant = f"printf 'echo in > inside.txt; echo out > {outside}/escaped\\n' > grade.sh"
    model = script(tmp_path, "r.json", shell(plant), complete())
    path = task_file(tmp_path, {"id": "t", "task": "prepare", "check": "bash grade.sh; test -f inside.txt"})
    run = batch(str(path), "--model", model, "--batch-id", "graded", "-o", "-", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    (row,) = [json.loads(line) for line in run.stdout.splitlines()]
    assert row["check"] == "passed" and "Read-only file system" in row["check_detail"]["output"]
    assert (BatchState("graded").work_dir("t") / "inside.txt").read_text() == "in\n"
    assert list(outside.iterdir()) == []


def test_a_check_whose_folder_is_gone_fails_with_the_reason(tmp_path):
    from anges.batch.checks import run_check

    spec = TaskSpec("t", "task", check="true")
    done = run_check(spec, tmp_path / "removed-by-the-agent", load_config(), threading.Event())
    assert done["status"] == "failed" and done["exit_code"] is None
    assert done["output"].startswith("the check could not start: ")


# --- more actions ---------------------------------------------------------------------------------------------


def test_actions_come_from_the_task_file_and_from_action_flags(tmp_path):
    from anges.exceptions import BatchError

    path = task_file(tmp_path, {"id": "a", "task": "x", "actions": ["test_plugins:Stamp"]},
                     {"id": "b", "task": "y"})
    specs = load_tasks(path, {"actions": ["anges.actions.shell:RunShellCommand"]})
    assert specs[0].actions == ("anges.actions.shell:RunShellCommand", "test_plugins:Stamp")
    assert specs[1].actions == ("anges.actions.shell:RunShellCommand",)
    assert TaskSpec.from_dict(json.loads(json.dumps(specs[0].to_dict()))) == specs[0]  # as a worker gets it
    bad = task_file(tmp_path, {"id": "a", "task": "x", "actions": ["SHOUT"]}, name="bad.jsonl")
    with pytest.raises(BatchError, match=r"bad.jsonl:1: field 'actions': unknown action 'SHOUT' \(known: "):
        load_tasks(bad)
    with pytest.raises(BatchError, match=r"^--action: unknown action 'SHOUT'"):
        load_tasks(path, {"actions": ["SHOUT"]})


def test_a_task_offers_the_actions_its_file_and_the_action_flag_name(tmp_path):
    # Two module:Class actions from this folder's test_plugins.py: one from the task file, one from --action.
    stamp = reply({"action_type": "STAMP", "word": "ok"})
    model = script(tmp_path, "r.json", stamp, reply({"action_type": "COUNT_LINES", "path": "x"}), complete())
    (tmp_path / "counting.py").write_text(
        "from anges import Event\nfrom anges.actions import Action\n\n"
        "class CountLines(Action):\n    type = 'COUNT_LINES'\n    guide_prompt = '## COUNT_LINES'\n\n"
        "    def run(self, ctx, args):\n"
        "        return Event('action', content='COUNT_LINES: 0 lines', data={'action_type': self.type})\n")
    path = task_file(tmp_path, {"id": "t", "task": "stamp and count", "actions": ["test_plugins:Stamp"]})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), str(tmp_path)])}
    out = batch(str(path), "--model", model, "--action", "counting:CountLines", "--sandbox", "off", cwd=tmp_path,
                env=env)
    assert out.returncode == 0, out.stderr
    stream = batch_streams(batch_id_for(path))["t"]
    assert [e.data.get("action_type") for e in stream.events_list[1:]] == ["STAMP", "COUNT_LINES", "TASK_COMPLETE"]


# --- the live panel -------------------------------------------------------------------------------------------


class Frames:
    """The batch's live panel (`RichDisplay`), each frame drawn as text when a task ends and when the batch ends,
    and on demand; nothing else is drawn."""

    def __init__(self, progress):
        import io

        from anges.batch.progress import RichDisplay

        self.panel = RichDisplay(progress, io.StringIO())
        self.frames: list[str] = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.draw()

    def note(self, text):
        pass

    def finished(self, row):
        self.draw()

    def draw(self) -> str:
        import io

        from rich.console import Console

        out = io.StringIO()
        Console(file=out, width=200, color_system=None).print(self.panel._render())
        self.frames.append(out.getvalue())
        return self.frames[-1]


@pytest.mark.sandbox
def test_the_live_panel_shows_each_runs_steps_and_doing_and_agrees_with_the_summary_after_ctrl_c(tmp_path):
    import io
    import re

    from anges.batch.local import LocalEngine
    from anges.batch.progress import print_summary
    from anges.batch.runner import BatchRunner

    tasks = Stoppable(tmp_path, 4)
    wait = json.loads(Path(tasks.args[2].removeprefix("scripted:")).read_text())[0]["actions"][0]["command"]
    model = script(tmp_path, "first.json", shell("echo first step"), shell(wait), complete())
    panels = []
    runner = BatchRunner(load_tasks(tasks.path, {"model": model}), "panel", LocalEngine(2),
                         config_file=tasks.args[-1], display_factory=lambda progress: panels.append(Frames(progress))
                         or panels[-1])
    box = {}
    thread = threading.Thread(target=lambda: box.setdefault("report", runner.run()), daemon=True)
    thread.start()
    tasks.wait_started(2)
    deadline = time.monotonic() + 10
    while "running `test -f" not in (live := panels[0].draw()):
        assert time.monotonic() < deadline, live
        time.sleep(0.05)
    rows = [line for line in live.splitlines() if line.startswith("t")]
    assert len(rows) == 2 and all(f"1 step  running `{wait[:40]}" in row for row in rows), live

    runner.stop()  # what Ctrl-C does
    thread.join(30)
    assert not thread.is_alive()
    tasks.wait_gone()
    summary = io.StringIO()
    print_summary(box["report"].results, summary)
    counts = {line.split()[0]: int(line.split()[1]) for line in summary.getvalue().splitlines()[1:]}
    last = panels[0].frames[-1].splitlines()[0]
    assert counts == {"unfinished": 4, "total": 4}
    assert re.search(r"· 0/4 done · 0 failed · 4 unfinished · 0 running ·", last), last
