"""One task of a batch: its work directory, its setup command, and the agent on its stream.

The same `run_task` runs in a local worker process (`local.worker_argv`: a job as JSON on stdin,
JSON lines on stdout) and inside a Ray task (`anges.batch.ray_engine`); the agent does not know which.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anges.batch.tasks import TaskSpec
from anges.exceptions import AngesError
from anges.store.events import Event, is_step
from anges.store.fileops import make_private_dirs
from anges.telemetry import attached, flush
from anges.util.jsonlines import JsonLines

if TYPE_CHECKING:
    from anges.config.types import Config, SafetyConfig
    from anges.store.event_store import EventStore

MAX_ERROR_TAIL = 1000
PARENT_POLL_SECONDS = 0.5
PR_SET_PDEATHSIG = 1
APPROVAL = "ask"
"""With no channel: nobody watches a batch, so an action that needs approval is declined at once with the reason
(`by: no_one`), and the run goes on."""


@dataclass
class Job:
    """One run of one task, as the driver asks for it."""

    spec: TaskSpec
    batch_id: str
    stream_id: str
    """The stream the run records to (chosen by the driver, so it knows it before the run starts)."""
    resume: bool = False
    """Continue this stream, which an earlier run of the batch left unfinished, instead of starting it."""
    workdir: str = ""
    """Local engine: the folder to work in, made afresh unless a resumed run finds it."""
    config_file: str | None = None
    """Local engine: the `--config` file the worker loads (the Ray engine ships the loaded config instead)."""
    overrides: dict | None = None
    """Local engine: config set on the command line (--sandbox, --network), layered over `config_file`."""
    traceparent: str = ""
    """With telemetry on: the W3C traceparent of the task's span, under which the run's span goes."""

    def to_dict(self) -> dict:
        return {"spec": self.spec.to_dict(), "batch_id": self.batch_id, "stream_id": self.stream_id,
                "resume": self.resume, "workdir": self.workdir, "config_file": self.config_file,
                "overrides": self.overrides, "traceparent": self.traceparent}

    @classmethod
    def from_dict(cls, data: dict) -> Job:
        return cls(**{**data, "spec": TaskSpec.from_dict(data["spec"])})


def result(status: str, stream_id: str | None = None, error: str | None = None, **extra) -> dict:
    """What a worker reports when a task's run ends: status is the stream's, "error" or "not_started"."""
    return {"status": status, "stream_id": stream_id, "error": error, "host": socket.gethostname(), **extra}


def prepare_workdir(workdir: Path, template: str | None, keep: bool) -> bool:
    """Make `workdir` a fresh copy of `template` (or a fresh empty folder) unless `keep` and it exists.

    Returns True when the folder is fresh (so the setup command must run).
    """
    if keep and workdir.is_dir():
        return False
    if workdir.exists():
        shutil.rmtree(workdir)
    make_private_dirs(workdir.parent)
    if template:
        shutil.copytree(template, workdir, symlinks=True)
    else:
        workdir.mkdir()
    return True


def run_task(job: Job, config: Config, store: EventStore, workdir: Path, fresh: bool, stop: threading.Event,
             on_message: Callable | None = None, on_doing: Callable[[str], None] | None = None) -> dict:
    """Run the setup command (in a fresh folder), the agent, then the task's check; return the worker's result.
    `on_doing` hears what the run is doing now ("thinking", "running `make test`", ...)."""
    try:
        with attached(job.traceparent):
            return _run_task(job, config, store, workdir, fresh, stop, on_message, on_doing)
    finally:
        flush()  # a Ray worker outlives its task: its spans must not wait for the process to end


def _run_task(job: Job, config: Config, store: EventStore, workdir: Path, fresh: bool, stop: threading.Event,
              on_message: Callable | None, on_doing: Callable[[str], None] | None) -> dict:
    from anges.batch.checks import due, run_check
    from anges.store.events import EventStream

    spec = job.spec
    kept = config.checkpoints
    checkpoints = kept.model_copy(update={"enabled": kept.enabled and kept.batch})  # checkpoints.batch: false
    config = config.model_copy(update={"safety": batch_safety(config.safety), "checkpoints": checkpoints})
    missing = missing_sandbox(config.safety, f"on {socket.gethostname()}", str(workdir))
    if missing:
        return result("error", error=missing)
    try:
        if fresh and spec.setup:
            setup_error = _run_setup(spec, workdir, config, stop)
            if setup_error:
                return result("error", error=setup_error)
        if stop.is_set():
            return result("not_started")
        stream = store.load(job.stream_id) if job.resume else EventStream(uid=job.stream_id, agent_type=spec.agent)
        stream.update_settings({"batch_id": job.batch_id, "batch_task": spec.id})
        agent = _build_agent(spec, config, store, stream, workdir, stop, on_message, on_doing)
        agent.run_with_new_request(_request(job, stream, config, fresh))
        check = run_check(spec, workdir, config, stop) if due(spec, stream, stop) else None
    except (AngesError, ValueError, OSError) as exc:
        return result("error", job.stream_id if store.exists(job.stream_id) else None, _describe(exc))
    return result(agent.status, job.stream_id, None, **({"check": check} if check else {}))


def _run_setup(spec: TaskSpec, workdir: Path, config: Config, stop: threading.Event) -> str | None:
    """Run the task's setup command (if it has one); the error text when it fails."""
    from anges.safety.run_safety import run_secrets
    from anges.safety.shell import run_command

    if not spec.setup:
        return None

    agent_config = config.agent(spec.agent)
    secrets, env = run_secrets(config, agent_config, cwd=str(workdir))  # the agent's commands get the same environment
    done = run_command(spec.setup, cwd=workdir, env=env, timeout=spec.timeout or agent_config.shell_cmd_timeout,
                       interrupt_check=stop.is_set, output_cap=2 * MAX_ERROR_TAIL, secrets=secrets)
    if done.interrupted:
        return None
    if done.timed_out:
        return f"setup command timed out after {done.duration:.0f} s"
    if done.exit_code:
        tail = (done.stderr or done.stdout).strip()[-MAX_ERROR_TAIL:]
        return f"setup command failed with exit code {done.exit_code}" + (f": {tail}" if tail else "")
    return None


def _build_agent(spec: TaskSpec, config: Config, store: EventStore, stream, workdir: Path, stop: threading.Event,
                 on_message: Callable | None, on_doing: Callable[[str], None] | None):
    from anges.agents import agent_class
    from anges.models import get_model

    agent_config = config.agent(spec.agent)
    limits = {"timeout": spec.timeout, "max_number_of_events_to_exhaust": spec.max_steps,
              "extra_actions": list(dict.fromkeys([*agent_config.extra_actions, *spec.actions]))}
    agent_config = agent_config.model_copy(update={key: value for key, value in limits.items() if value})
    model = get_model(spec.model, config, spec.agent)
    if on_doing is not None:
        model = Narrated(model, on_doing)
    return agent_class(spec.agent)(
        inference_func=model, event_stream=stream, cmd_init_dir=str(workdir), interrupt_check=stop.is_set,
        config=config, store=store, agent_config=agent_config, message_handlers=[on_message] if on_message else [],
        approval=APPROVAL)


class Narrated:
    """A model that says what its run is doing: "thinking" while it is called, then what the reply does first."""

    def __init__(self, model: Callable[..., Any], say: Callable[[str], None]):
        self.model = model
        self.say = say

    def __call__(self, prompt: str, temperature: float = 0.0) -> Any:
        self.say("thinking")
        reply = self.model(prompt, temperature=temperature)
        self.say(next_step(str(reply)))
        return reply

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)


def next_step(reply: str) -> str:
    """What a reply's first action does, in a few words: "running `make test`", "editing app.py", ..."""
    try:
        actions = json.loads(reply[reply.find("{"):reply.rfind("}") + 1]).get("actions") or []
        first = actions[0] if isinstance(actions, list) and isinstance(actions[0], dict) else {}
    except (ValueError, AttributeError, IndexError):
        return "thinking"
    kind = str(first.get("action_type") or "").upper()
    if kind == "RUN_SHELL_CMD":
        return f"running `{first.get('command')}`"
    if kind == "EDIT_FILE":
        words = str(first.get("directive_line") or first.get("directive") or "").split()
        return f"editing {words[1]}" if len(words) > 1 else "editing a file"
    if kind == "CALL_CHILD_AGENT":
        return f"delegating: {first.get('directive') or ''}".strip(": ")
    if kind in ("TASK_COMPLETE", "HELP_NEEDED", "AGENT_TEXT_RESPONSE"):
        return "answering"
    return kind or "thinking"


def batch_safety(safety: SafetyConfig) -> SafetyConfig:
    """The safety a batch task runs under: with the sandbox off, commands are allowed.

    Without a sandbox every command needs approval, which nobody can give in a batch; choosing `off` for the
    batch is that approval. The rule comes after every other, so deny rules and asks (sudo, git push) still hold.
    """
    from anges.config.types import SafetyRule

    rules = list(safety.default_rules)
    if safety.sandbox == "off":
        rules.append(SafetyRule(action="RUN_SHELL_CMD", decision="allow",
                                reason="the batch runs commands without the sandbox"))
    return safety.model_copy(update={"default_rules": rules})


def missing_sandbox(safety: SafetyConfig, where: str, *workdirs: str) -> str | None:
    """Why a batch cannot run its commands in the sandbox it asks for `where` (None when it can), for tasks working
    in `workdirs` (a bwrap any of them could have written is never run)."""
    from anges.safety.places import model_places
    from anges.safety.sandbox import availability

    places = model_places(safety, *workdirs)  # remembered: no process of the batch imports or runs from there
    if safety.sandbox == "off":
        return None
    found = availability(safety.bwrap, places)
    if found.ok:
        return None
    return (f"the sandbox is not available {where}: {found.reason}. Nobody can approve commands run without it "
            "in a batch, so each would be declined: install bubblewrap, or run the batch with --sandbox off")


def describe_safety(safety: SafetyConfig) -> str:
    """What the batch's commands may do, in one line for its start."""
    if safety.sandbox == "off":
        text = "no sandbox: commands run with your rights"
    else:
        extra = " and safety.writable_paths" if safety.writable_paths else ""
        writes = f"each task writes only its own folder{extra}" if safety.sandbox == "workspace" else "read-only"
        text = f"sandbox: {writes}, network {'on' if safety.network else 'off'}"
    return text + "; actions that need approval are declined"


def _request(job: Job, stream, config: Config, fresh: bool) -> str:
    """The task itself, or for a resumed stream the request to continue it."""
    if not job.resume:
        return job.spec.task
    from anges.prompt.templates import render_template

    last = stream.events_list[-1] if stream.events_list else None
    reason = (last.data.get("reason") if last is not None else None) or "its worker was lost"
    return render_template("batch/resume.j2", config.prompt.template_dir, reason=reason, fresh_workdir=fresh)


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if isinstance(exc, AngesError) else f"{type(exc).__name__}: {text}"


# --- the local worker process -------------------------------------------------------------------------------


def main() -> int:
    """A local worker (`local.worker_argv`): one job from stdin; progress and the result as JSON lines on stdout."""
    from anges.config.loading import load_config
    from anges.store.event_store import EventStore

    out = JsonLines(sys.stdout)
    job = Job.from_dict(json.load(sys.stdin))
    stop = threading.Event()
    _stop_on_signals(stop)
    _stop_when_orphaned(stop)

    def report(line: dict) -> None:
        try:
            out.emit(line)
        except OSError:  # the driver is gone (a broken pipe): stop the run; the store has every event
            stop.set()
    try:
        config = load_config(job.config_file, job.overrides)
        workdir = Path(job.spec.path or job.workdir)
        fresh = not job.resume if job.spec.path else prepare_workdir(workdir, job.spec.template, keep=job.resume)
        done = run_task(job, config, EventStore(), workdir, fresh, stop, lambda m: report(progress_line(m)),
                        lambda text: report({"type": "doing", "text": text[:200]}))
    except KeyboardInterrupt:  # a second signal: the agent recorded the stop and killed its command on the way out
        done = result("interrupted", job.stream_id)
    except (AngesError, OSError) as exc:
        done = result("error", error=_describe(exc))
    report({"type": "result", **done})
    return 0


def progress_line(message) -> dict:
    """What the driver's progress display needs of one recorded event (from an AgentMessage)."""
    return progress_item(message.event.to_dict(), message.depth)


def progress_item(event: dict, depth: int) -> dict:
    """The small part of an event the progress display reads: its type, depth, whether it is a step, a short message
    and its usage."""
    data = event.get("data") or {}
    return {"type": "event", "depth": depth, "event_type": event.get("type"), "step": is_step(Event.from_dict(event)),
            "message": (event.get("message") or "")[:200], "usage": data.get("usage"), "cost": data.get("cost")}


def _stop_on_signals(stop: threading.Event) -> None:
    """The first SIGTERM or SIGINT stops the run cleanly; the next one raises KeyboardInterrupt."""

    def handle(signum, frame):
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handle)


def _stop_when_orphaned(stop: threading.Event) -> None:
    """Stop the run if the driver dies: on Linux the kernel sends SIGTERM at once (a parent-death signal), elsewhere
    a watch notices the new parent (init) within PARENT_POLL_SECONDS."""
    parent = os.getppid()
    _term_when_parent_dies()
    if os.getppid() != parent:  # it died before the signal was asked for
        stop.set()

    def watch():
        while not stop.wait(PARENT_POLL_SECONDS):
            if os.getppid() != parent:
                stop.set()

    threading.Thread(target=watch, name="anges-batch-parent", daemon=True).start()


def _term_when_parent_dies() -> bool:
    """Ask Linux for SIGTERM when the process that started this one exits (prctl PR_SET_PDEATHSIG)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


if __name__ == "__main__":
    sys.exit(main())
