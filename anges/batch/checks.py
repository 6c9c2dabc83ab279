"""A task's check: a command run in the task's folder once the agent has finished, outside the agent's control,
in the sandbox the agent's commands ran in and with a timeout. Exit code 0: the task passed; anything else, a
timeout included: it failed."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

from anges.batch.results import STOP_REASON
from anges.exceptions import AngesError

if TYPE_CHECKING:
    from anges.batch.tasks import TaskSpec
    from anges.config.types import Config
    from anges.store.events import EventStream

MAX_OUTPUT_CHARS = 2000
"""The end of the check's output its result keeps (what a failing test printed last)."""


def due(spec: TaskSpec, stream: EventStream, stop: threading.Event) -> bool:
    """Whether the task's check runs now: it has one, and the agent's run ended on its own (not by Ctrl-C or Stop:
    such a task is unfinished, and the next run of the batch continues it)."""
    last = stream.events_list[-1] if stream.events_list else None
    stopped = last is not None and last.type == "task_interrupted" and last.data.get("reason") == STOP_REASON
    return bool(spec.check) and not stop.is_set() and not stopped


def run_check(spec: TaskSpec, workdir: Path, config: Config, stop: threading.Event) -> dict | None:
    """Run the check; its facts (status passed or failed, exit code, timed out, duration, the end of its output),
    or None when the batch was stopped while it ran (it counts as not run) or the task has none."""
    from anges.safety.run_safety import RunSafety, run_secrets
    from anges.safety.shell import run_command

    if not spec.check:
        return None

    agent_config = config.agent(spec.agent)
    secrets, env = run_secrets(config, agent_config, cwd=str(workdir))  # what the agent's commands got, no more
    safety = RunSafety(config.safety, str(workdir), approval="deny")
    timeout = spec.check_timeout or agent_config.shell_cmd_timeout
    try:
        done = run_command(spec.check, cwd=workdir, env=env, timeout=timeout, interrupt_check=stop.is_set,
                           output_cap=2 * MAX_OUTPUT_CHARS, secrets=secrets,
                           runner=safety.runners.get(sandboxed=safety.sandboxed))
    except (OSError, AngesError) as exc:  # the folder is gone, no sandbox: the check fails, the agent's status stands
        return {"status": "failed", "exit_code": None, "timed_out": False, "duration": 0.0,
                "output": f"the check could not start: {getattr(exc, 'strerror', None) or exc}"}
    finally:
        safety.runners.close()
    if done.interrupted:
        return None
    output = "\n".join(part.rstrip("\n") for part in (done.stdout, done.stderr) if part.strip())
    return {"status": "passed" if done.exit_code == 0 and not done.timed_out else "failed",
            "exit_code": done.exit_code, "timed_out": done.timed_out, "duration": round(done.duration, 3),
            "output": output[-MAX_OUTPUT_CHARS:]}
