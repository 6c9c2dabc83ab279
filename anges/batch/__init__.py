"""`anges batch`: many tasks from a file, each an ordinary run, on this machine or on a Ray cluster.

- `tasks.py`: task files (JSON Lines or YAML) and their checks; `checks.py`: a task's `check` command
- `runner.py`: what to run, what to skip, Ctrl-C, results; `state.py`: the batch's folder and log
- `worker.py`: one task's run, the same in a local worker process and in a Ray task
- `local.py`, `ray_engine.py`: where runs happen (`ray_output.py`: what Ray prints goes to the batch's `ray.log`);
  `progress.py`: the live display and the summary
"""

from __future__ import annotations

import os
import sys
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from anges.batch.runner import Report
    from anges.batch.tasks import TaskSpec
    from anges.config.types import Config

DEFAULT_LOCAL_WORKERS = 4
RAY_LOG = "ray.log"
"""In the batch's folder: what Ray itself printed while the batch ran on it."""


def run_batch(tasks_file: str, *, defaults: dict, engine: str = "local", workers: int | None = None,
              batch_id: str | None = None, retry_failed: bool = False, config_file: str | None = None,
              address: str | None = None, retries: int = 3, cpus_per_task: float = 1.0,
              env_names: tuple[str, ...] = (), overrides: dict | None = None) -> Report:
    """Load and check the task file, then run the batch on the chosen engine with the live display.

    `overrides` is config set on the command line (the safety section: --sandbox, --network), layered over
    `config_file` on every engine.
    """
    from anges.batch.progress import make_display
    from anges.batch.runner import BatchRunner, Engine
    from anges.batch.state import BatchState
    from anges.batch.tasks import batch_id_for, load_tasks
    from anges.batch.worker import missing_sandbox
    from anges.config.loading import load_config
    from anges.exceptions import BatchError

    specs = load_tasks(tasks_file, defaults)
    config = load_config(config_file, overrides)
    check_models(specs, config)
    batch_id = batch_id or batch_id_for(tasks_file)
    notes = _safety_notes(config)
    chosen: Engine
    output: AbstractContextManager[TextIO]
    if engine == "ray":  # each task checks the sandbox on its own node
        from anges.batch.ray_engine import RayEngine
        from anges.batch.ray_output import ray_output

        chosen = RayEngine(config, address=address, workers=workers, retries=retries, cpus_per_task=cpus_per_task,
                           env_names=env_names)
        output = ray_output(BatchState(batch_id).root / RAY_LOG)
        notes += (f"Ray's own messages go to {BatchState(batch_id).root / RAY_LOG}",)
    else:
        from anges.batch.local import LocalEngine

        work = str(BatchState(batch_id).root / "work")
        missing = missing_sandbox(config.safety, "here", work, *(spec.path for spec in specs if spec.path))
        if missing:
            raise BatchError(missing)
        chosen = LocalEngine(workers or DEFAULT_LOCAL_WORKERS)
        output = nullcontext(sys.stderr)
    with output as shown:
        runner = BatchRunner(specs, batch_id, chosen, retry_failed=retry_failed,
                             config_file=os.path.abspath(config_file) if config_file else None,
                             config_overrides=overrides, notes=notes,
                             display_factory=lambda progress: make_display(progress, shown),
                             trace_factory=trace_factory(config))
        return runner.run()


def trace_factory(config: Config):
    """With telemetry on, what makes the batch's trace (one span for the batch, one per task); else None."""
    if not config.telemetry.enabled:
        return None
    from anges.telemetry import telemetry_for

    found = telemetry_for(config.telemetry)
    if found is None:
        return None
    from anges.telemetry.batches import BatchTrace

    return lambda batch_id, tasks: BatchTrace(found, batch_id, tasks)


def _safety_notes(config: Config) -> tuple[str, ...]:
    from anges.batch.worker import describe_safety

    notes = [describe_safety(config.safety)]
    if config.safety.approval not in ("", "deny"):
        notes.append(f"safety.approval: {config.safety.approval} does not apply to a batch: nobody can approve, so "
                     "actions that need approval are declined (allow them with safety.rules)")
    return tuple(notes)


def check_models(specs: list[TaskSpec], config: Config) -> None:
    """Fail before any task starts when a model name is unknown or its credentials are missing."""
    from anges.exceptions import ModelSetupError
    from anges.models import find_preset
    from anges.models.provider import has_credentials, key_env_names

    for name in sorted({spec.model or config.model_for(spec.agent) for spec in specs}):
        if name.partition(":")[0] in ("scripted", "replay"):
            continue
        label, preset = find_preset(name, config)
        if not has_credentials(preset):
            wanted = " or ".join(key_env_names(preset)) or "its credentials"
            raise ModelSetupError(f"model {name!r} needs {wanted} set in this shell (workers get it from here)")
