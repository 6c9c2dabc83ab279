"""The batch runner: turn task specs into runs, hand them to an engine, record how each ended, report.

The store is the single source of truth: each run is an ordinary stream tagged with the batch and task ids,
and a task's result is read back from its stream. The batch log (`state.py`) only remembers which stream
is each task's, so running the same batch again skips what is finished and continues what is not.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

from anges.batch.progress import PlainDisplay, Progress
from anges.batch.results import check_counts, outcome, task_result
from anges.batch.state import BatchState, TaskRecord
from anges.batch.tasks import TaskSpec
from anges.batch.worker import Job
from anges.exceptions import StreamBusy
from anges.store.event_store import EventStore, stream_status
from anges.store.events import interrupted_event, new_id


@dataclass
class StopFlags:
    """Set by Ctrl-C (or the caller): `stop` asks every run to stop cleanly, `force` to stop now."""

    stop: threading.Event = field(default_factory=threading.Event)
    force: threading.Event = field(default_factory=threading.Event)


class Engine(Protocol):
    """Decides where each run happens; reports to the sink as runs start, record events and end."""

    name: str

    def run(self, jobs: list[Job], sink: Sink, flags: StopFlags) -> None: ...


class Sink(Protocol):
    store: EventStore

    def started(self, job: Job) -> None: ...
    def event(self, job: Job, item: dict) -> None: ...
    def doing(self, job: Job, text: str) -> None: ...
    def finished(self, job: Job, done: dict, wall_time: float) -> None: ...


@dataclass
class Report:
    """How a run of a batch went: every task's result row (finished earlier ones included)."""

    batch_id: str
    results: list[dict]
    stopped: bool

    def counts(self) -> Counter:
        return Counter(outcome(row) for row in self.results)

    def checks(self) -> dict[str, int]:
        """How the tasks' checks went: passed, failed, not_run."""
        return check_counts(self.results)


@dataclass
class Plan:
    jobs: list[Job]
    earlier: Counter
    """Outcomes of the tasks skipped because an earlier run of the batch finished them."""
    resumed: int


class BatchRunner:
    """Runs the tasks of one batch on an engine; safe to run again (it skips what is finished)."""

    def __init__(self, specs: list[TaskSpec], batch_id: str, engine: Engine, *, store: EventStore | None = None,
                 retry_failed: bool = False, config_file: str | None = None, config_overrides: dict | None = None,
                 notes: tuple[str, ...] = (), display_factory=None, trace_factory=None):
        self.specs = specs
        self.engine = engine
        self.store = store or EventStore()
        self.state = BatchState(batch_id)
        self.retry_failed = retry_failed
        self.config_file = config_file
        self.config_overrides = config_overrides
        self.notes = notes
        """Lines shown after the plan when the batch starts (what its commands may do)."""
        self.display_factory = display_factory or (lambda progress: PlainDisplay(progress, sys.stderr))
        self.trace_factory = trace_factory
        """With telemetry on: `f(batch_id, tasks)` -> the batch's trace (`anges.telemetry.batches.BatchTrace`)."""
        self._trace = None
        self.flags = StopFlags()
        self._lock = threading.Lock()
        self._display: PlainDisplay | None = None
        self._progress: Progress | None = None

    @property
    def batch_id(self) -> str:
        return self.state.batch_id

    def plan(self) -> Plan:
        """The runs to do: tasks never run or cut off, failed ones with retry_failed; the rest is skipped."""
        records = self.state.records()
        jobs, earlier, resumed = [], Counter[str](), 0
        for spec in self.specs:
            record = records.get(spec.id)
            if record is not None and record.open_since is not None:
                self._end_killed_run(spec.id, record)
            row = task_result(self.store, spec, record)
            kind = outcome(row)
            if kind == "succeeded" or (kind == "failed" and not self.retry_failed):
                earlier[kind] += 1
                continue
            resume = kind == "unfinished" and row["status"] not in ("not_run", "new")
            resumed += resume
            jobs.append(Job(spec, self.batch_id, row["stream_id"] if resume else new_id(), resume=resume,
                            workdir=str(self.state.work_dir(spec.id)), config_file=self.config_file,
                            overrides=self.config_overrides))
        return Plan(jobs, earlier, resumed)

    def run(self) -> Report:
        """Run what the plan says, Ctrl-C stopping every run cleanly; write results.jsonl; return the report."""
        with self.state.lock():
            plan = self.plan()
            self._progress = Progress(self.batch_id, len(self.specs), len(plan.jobs))
            self._trace = self.trace_factory(self.batch_id, len(plan.jobs)) if self.trace_factory else None
            with self.display_factory(self._progress) as display, self._signals_stop():
                self._display = display
                display.note(_plan_text(self, plan))
                for note in self.notes:
                    display.note(note)
                if plan.jobs:
                    self.engine.run(plan.jobs, self, self.flags)
            records = self.state.records()
            results = [task_result(self.store, spec, records.get(spec.id)) for spec in self.specs]
            self.state.write_results(results)
        report = Report(self.batch_id, results, self.flags.stop.is_set())
        if self._trace is not None:
            self._trace.close({**report.counts(), **{f"checks_{k}": v for k, v in report.checks().items()}})
        return report

    def stop(self, force: bool = False) -> None:
        """Ask the running batch to stop (what Ctrl-C does): every run ends cleanly and is recorded as interrupted."""
        if not self.flags.stop.is_set():
            self.flags.stop.set()
            if self._progress is not None:
                self._progress.stopping = True
            if self._display is not None:
                self._display.note("stopping every running task (Ctrl-C again to stop at once); "
                                   "run the same command again to resume")
        elif force:
            self.flags.force.set()

    # --- the sink the engine reports to ------------------------------------------------------------------

    def started(self, job: Job) -> None:
        """A job is about to run (with telemetry on, it gets its task span's traceparent here)."""
        with self._lock:
            self.state.started(job.spec.id, job.stream_id)
            self._views()[0].started(job.spec.id)
            if self._trace is not None:
                job.traceparent = self._trace.task_started(job.spec.id)

    def event(self, job: Job, item: dict) -> None:
        self._views()[0].event(job.spec.id, item)

    def doing(self, job: Job, text: str) -> None:
        self._views()[0].doing(job.spec.id, text)

    def finished(self, job: Job, done: dict, wall_time: float) -> None:
        progress, display = self._views()
        if done["status"] == "not_started":
            with self._lock:
                progress.running.pop(job.spec.id, None)
                if self._trace is not None:
                    self._trace.task_finished(job.spec.id, {"status": "not_started"}, "unfinished")
            return
        if done.get("cut_off"):
            self._close_stream(job.stream_id, done["cut_off"], done.get("error") or "the worker was lost")
        stream_id = job.stream_id if self.store.exists(job.stream_id) else None
        with self._lock:
            self.state.ended(job.spec.id, stream_id, done["status"], done.get("error"), wall_time, done.get("check"),
                             has_check=bool(job.spec.check))
            row = task_result(self.store, job.spec, self.state.records()[job.spec.id])
            progress.finished(job.spec.id, row)
            display.finished(row)
            if self._trace is not None:
                self._trace.task_finished(job.spec.id, row, outcome(row))

    def _views(self) -> tuple[Progress, PlainDisplay]:
        """What shows the running batch (the engine reports only while `run` runs)."""
        if self._progress is None or self._display is None:
            raise RuntimeError("the engine reported on a job while no batch was running")
        return self._progress, self._display

    def _end_killed_run(self, task_id: str, record: TaskRecord) -> None:
        """Log the end of a run whose `anges batch` was killed, its time taken from its stream's last event (the
        stop its worker recorded), so the task's wall time counts it."""
        stream = self.store.load(record.stream_id) if record.stream_id and self.store.exists(record.stream_id) else None
        if stream is None or not stream.events_list or self.store.is_running(stream.uid) or record.open_since is None:
            return  # it never started (the next run starts it), or its worker still runs
        ended = stream.events_list[-1].created_at.timestamp()
        self.state.ended(task_id, stream.uid, stream_status(stream.events_list), None,
                         max(0.0, ended - record.open_since), recovered=True)

    def _close_stream(self, uid: str, reason: str, why: str) -> None:
        """End a stream whose worker was killed or lost before it could record the end itself."""
        if not self.store.exists(uid):
            return
        try:
            with self.store.run_lock(uid):
                stream = self.store.load(uid)
                if stream_status(stream.events_list) != "running":
                    return
                stream.add_event(interrupted_event(reason, why, batch_id=self.batch_id))
                self.store.sync(stream)
        except StreamBusy:
            return  # its worker is still alive after all and will record the end itself

    @contextmanager
    def _signals_stop(self) -> Iterator[None]:
        """Inside, Ctrl-C (or SIGTERM) stops the batch cleanly; a second one stops it at once."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handle(signum, frame):
            # On a thread: the note it prints must not re-enter a print the main thread was in.
            threading.Thread(target=self.stop, kwargs={"force": True}, daemon=True).start()

        previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _plan_text(runner: BatchRunner, plan: Plan) -> str:
    total = len(runner.specs)
    text = f"batch {runner.batch_id}: {total} task{'s' if total != 1 else ''}, {len(plan.jobs)} to run"
    if plan.resumed:
        text += f" ({plan.resumed} continued where they stopped)"
    if plan.earlier:
        text += f"; {sum(plan.earlier.values())} finished earlier"
        if plan.earlier["failed"]:
            text += f" ({plan.earlier['failed']} failed: --retry-failed runs them again)"
    return text + f" on {runner.engine.name}"

