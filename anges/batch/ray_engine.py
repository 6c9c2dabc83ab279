"""The Ray engine: each task a Ray task in a fresh folder on some node; its events stream back to the driver.

The way back is a `Collector` actor on the driver's node. A worker runs the agent against a scratch store on
its node and a forwarder thread appends what that store records (`read_records`, children's streams too)
to the collector; the driver drains the collector a few times a second into its own store, so `anges ui`
on the driver shows remote runs live. When a worker or its node dies, Ray runs the task again
(`max_retries`): the new attempt fetches what the collector received, continues that stream, and the
collector refuses anything the old attempt might still send. Model credentials reach the workers only
through the tasks' `runtime_env` environment variables.
"""

from __future__ import annotations

import io
import os
import shutil
import sys
import tarfile
import tempfile
import threading
import time
from collections import deque
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anges.batch.worker import Job, progress_item, result, run_task
from anges.exceptions import BatchError, StreamBusy
from anges.util.paths import write_file

if TYPE_CHECKING:
    from anges.config.types import Config
    from anges.store.event_store import EventStore
    from anges.store.events import EventStream

TICK = 0.2
"""Seconds between two drains of the collector (and two forwards from a worker)."""
HEARTBEAT = 1.0
"""A worker with nothing new still asks the collector this often whether to stop."""
STOP_GRACE = 10.0
"""Seconds runs have to stop cleanly after Ctrl-C before their Ray tasks are cancelled by force."""
MAX_TEMPLATE_BYTES = 256 * 2**20
SDK_ENV = ("OPENAI_BASE_URL", "GOOGLE_GEMINI_BASE_URL", "ANTHROPIC_BASE_URL", "GOOGLE_GENAI_USE_VERTEXAI",
           "GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION")
"""Environment variables the provider SDKs read, passed to workers when set here."""


def import_ray():
    """The `ray` module, or a BatchError that says how to install it."""
    try:
        import ray
    except ImportError:
        raise BatchError("the Ray engine needs Ray: pip install 'anges[ray]'") from None
    return ray


# --- the collector actor (runs on the driver's node) ------------------------------------------------------


class Collector:
    """Receives the records of every run and hands them to the driver; remembers them for a retried attempt."""

    def __init__(self) -> None:
        self.tasks: dict[str, dict] = {}
        self.stopping = False

    def _task(self, key: str) -> dict:
        return self.tasks.setdefault(key, {"attempt": 0, "records": [], "drained": 0, "ended": False, "stop": False,
                                           "doing": ""})

    def seed(self, key: str, records: list) -> None:
        """Records the driver already has (a stream an earlier run of the batch left unfinished)."""
        task = self._task(key)
        task["records"] = list(records)
        task["drained"] = len(records)

    def begin(self, key: str) -> dict:
        """A new attempt at a task: its number, what earlier attempts sent, whether one ended, whether to stop."""
        task = self._task(key)
        task["attempt"] += 1
        return {"attempt": task["attempt"], "records": task["records"], "ended": task["ended"],
                "stop": self.stopping or task["stop"]}

    def append(self, key: str, attempt: int, records: list, doing: str = "") -> str:
        """Take records (and what the run does now) from the current attempt: "ok", "stop" (stop the run) or "stale"
        (another attempt took over)."""
        task = self._task(key)
        if attempt != task["attempt"]:
            return "stale"
        task["records"].extend(records)
        task["doing"] = doing or task["doing"]
        return "stop" if self.stopping or task["stop"] else "ok"

    def end(self, key: str, attempt: int) -> None:
        """The attempt's run ended and every record was sent: a retry must not run it again."""
        task = self._task(key)
        if attempt == task["attempt"]:
            task["ended"] = True

    def drain(self) -> tuple[dict[str, list], dict[str, str]]:
        """The records received since the last drain, by task; and what each run does now."""
        fresh = {}
        for key, task in self.tasks.items():
            if len(task["records"]) > task["drained"]:
                fresh[key] = task["records"][task["drained"]:]
                task["drained"] = len(task["records"])
        return fresh, {key: task["doing"] for key, task in self.tasks.items() if task["doing"]}

    def stop(self, key: str | None = None) -> None:
        """Ask one run (or every run, and every attempt still to start) to stop."""
        if key is None:
            self.stopping = True
        else:
            self._task(key)["stop"] = True

    def forget(self, key: str) -> None:
        self.tasks.pop(key, None)


# --- the Ray task (runs on a worker node) -----------------------------------------------------------------


def run_remote(job: Job, config: Config, collector, template: bytes | None) -> dict:
    """One attempt at one task on this node: fetch earlier records, prepare a folder, run, forward the events."""
    import ray

    from anges.store.event_store import EventStore

    key = job.spec.id
    began = ray.get(collector.begin.remote(key))
    if began["stop"]:
        return result("not_started")
    scratch = Path(tempfile.mkdtemp(prefix=f"anges-batch-{key}-"))
    try:
        store = EventStore(scratch / "streams")
        offsets = _import_records(store, began["records"], scratch)
        if job.resume and job.stream_id not in offsets:
            return result("error", error="the records of the stream to continue did not reach the worker")
        job = replace(job, resume=job.stream_id in offsets)
        if began["ended"] and job.resume:  # the run ended, but Ray lost the task's return value
            return result(_status(store.load(job.stream_id)), job.stream_id)
        if job.spec.path:
            workdir, fresh = Path(job.spec.path), not job.resume
        else:
            workdir, fresh = scratch / "work", True
            _unpack(template, workdir)
        stop = threading.Event()
        forwarder = _Forwarder(store, collector, key, began["attempt"], offsets, stop)
        forwarder.start()
        try:
            done = run_task(job, config, store, workdir, fresh, stop, on_doing=forwarder.note)
        finally:
            forwarder.close()
        ray.get(collector.end.remote(key, began["attempt"]))
        return done
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


class _Forwarder(threading.Thread):
    """Sends what the scratch store records to the collector, every TICK; sets `stop` when told to stop."""

    def __init__(self, store: EventStore, collector, key: str, attempt: int, offsets: dict,
                 stop: threading.Event):
        super().__init__(name="anges-batch-forward", daemon=True)
        self.store, self.collector, self.key, self.attempt = store, collector, key, attempt
        self.offsets = dict(offsets)
        self.stop = stop
        self.closing = threading.Event()
        self.sent_at = time.monotonic()
        self.doing = ""
        self.told = ""

    def note(self, doing: str) -> None:
        """What the run does now; sent with the next records (at once, if it changed)."""
        self.doing = doing[:200]

    def run(self) -> None:
        while not self.closing.wait(TICK):
            self.send()

    def close(self) -> None:
        """Stop the thread and send what is left."""
        self.closing.set()
        self.join()
        self.send(final=True)

    def send(self, final: bool = False) -> None:
        import ray

        records: list[list] = []
        for info in self.store.list():
            fresh, self.offsets[info.uid] = self.store.read_records(info.uid, self.offsets.get(info.uid))
            records.extend([info.uid, record] for record in fresh)
        doing = self.doing
        if not records and not final and doing == self.told and time.monotonic() - self.sent_at < HEARTBEAT:
            return
        self.sent_at, self.told = time.monotonic(), doing
        if ray.get(self.collector.append.remote(self.key, self.attempt, records, doing)) != "ok":
            self.stop.set()


def _import_records(store: EventStore, records: list, scratch: Path) -> dict:
    """Rebuild the streams earlier attempts sent in the scratch store; the read cursor reached in each."""
    import json

    by_stream: dict[str, list] = {}
    for uid, record in records:
        if record.get("kind") == "header":
            by_stream[uid] = []  # the stream was written afresh from here
        by_stream.setdefault(uid, []).append(record)
    offsets = {}
    for uid, lines in by_stream.items():
        if not lines or lines[0].get("kind") != "header":
            continue
        file = scratch / f"import-{uid}.jsonl"
        write_file(str(file), "".join(json.dumps(line) + "\n" for line in lines).encode())
        store.import_file(file)
        offsets[uid] = store.read_records(uid)[1]
        file.unlink()
    return offsets


def _status(stream: EventStream) -> str:
    from anges.store.event_store import stream_status

    return stream_status(stream.events_list)


def _pack(folder: str) -> bytes:
    """A template folder as an uncompressed tar, shipped once through Ray's object store."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        archive.add(folder, arcname=".")
        if buffer.tell() > MAX_TEMPLATE_BYTES:
            raise BatchError(f"template {folder} is larger than {MAX_TEMPLATE_BYTES // 2**20} MB; on Ray use a "
                             "'path' every node has, or a 'setup' command that fetches the files")
    return buffer.getvalue()


def _unpack(template: bytes | None, workdir: Path) -> None:
    workdir.mkdir(parents=True)
    if template is None:
        return
    with tarfile.open(fileobj=io.BytesIO(template), mode="r") as archive:
        if hasattr(tarfile, "tar_filter"):
            archive.extractall(workdir, filter="tar")
        else:  # a Python without extraction filters (before 3.10.12); the archive is our own
            archive.extractall(workdir)


# --- the driver side ----------------------------------------------------------------------------------------


class RayEngine:
    """Runs each task as a Ray task, at most `workers` at once; retries tasks whose worker or node died."""

    name = "Ray"

    def __init__(self, config: Config, address: str | None = None, workers: int | None = None, retries: int = 3,
                 cpus_per_task: float = 1.0, env_names: tuple[str, ...] = (), grace: float = STOP_GRACE):
        self.config = config
        self.address = address
        self.workers = workers
        self.retries = retries
        self.cpus_per_task = cpus_per_task
        self.env_names = env_names
        self.grace = grace

    def run(self, jobs: list[Job], sink, flags) -> None:
        """Run every job on the cluster (fewer if stopped); returns when each started run has ended."""
        if self.address is None and "ray" not in sys.modules:
            # A Ray started here keeps Ray's default, token authentication, said before Ray reads its settings (at
            # import) so that it warns of nothing.
            os.environ.setdefault("RAY_AUTH_MODE", "token")
        ray = import_ray()
        owns = not ray.is_initialized()
        if owns:
            self._connect(ray)
        elif not ray.get_runtime_context().runtime_env.get("working_dir"):
            from anges.safety.sandbox import warn_once

            warn_once(f"Ray was started without a runtime_env working_dir, so its workers import from {os.getcwd()} "
                      "first: a module a task planted there would run outside the sandbox (start Ray with "
                      "runtime_env={'working_dir': EMPTY_FOLDER}, or let anges start it)")
        try:
            _Driver(self, ray, jobs, sink, flags).loop()
        finally:
            if owns:
                ray.shutdown()

    def _connect(self, ray) -> None:
        import logging

        options: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": False}
        if self.address is None:
            options["include_dashboard"] = False
        # Without a working_dir of its own, Ray puts this process's current directory first on every worker's import
        # path, and starts the workers in it: a task with `path: "."` could plant a module there that the next
        # worker imports outside the sandbox. An empty one, uploaded once, is where workers start and look instead.
        with tempfile.TemporaryDirectory(prefix="anges-ray-") as empty:
            try:
                ray.init(address=self.address, runtime_env={"working_dir": empty}, **options)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                where = self.address or "a local Ray"
                raise BatchError(f"cannot start or reach {where}: {exc}") from None

    def worker_env(self) -> dict[str, str]:
        """The variables workers get through `runtime_env`: model keys and endpoints set here, --env names, and with
        telemetry on the OTEL_* variables (where to send spans)."""
        from anges.models import provider_key_envs
        from anges.models.provider import key_env_names

        names = set(self.env_names) | set(SDK_ENV) | provider_key_envs()
        if self.config.telemetry.enabled:
            names.update(name for name in os.environ if name.startswith("OTEL_") or name == "TRACEPARENT")
        for preset in self.config.models.values():
            names.update(key_env_names(preset))
        for agent in self.config.agents.values():
            names.update(agent.pass_env)
        return {name: os.environ[name] for name in sorted(names) if os.environ.get(name)}


class _Driver:
    """One run of the engine: submit, drain, finish, stop."""

    def __init__(self, engine: RayEngine, ray, jobs: list[Job], sink, flags):
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.engine, self.ray, self.sink, self.flags = engine, ray, sink, flags
        self.store = sink.store
        self.pending = deque(jobs)
        self.jobs = {job.spec.id: job for job in jobs}
        self.inflight: dict[Any, tuple[Job, float, ExitStack]] = {}
        self.applier = RecordApplier(self.store)
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        self.collector = ray.remote(Collector).options(num_cpus=0, scheduling_strategy=here).remote()
        options: dict[str, Any] = {"max_retries": engine.retries, "retry_exceptions": False,
                                   "num_cpus": engine.cpus_per_task}
        env = engine.worker_env()
        if env:
            options["runtime_env"] = {"env_vars": env}
        self.task = ray.remote(run_remote).options(**options)
        self.templates: dict[str, Any] = {}
        self.capacity = engine.workers or max(1, int(ray.cluster_resources().get("CPU", 1) / engine.cpus_per_task))
        self.stop_sent: float | None = None

    def loop(self) -> None:
        try:
            while self.pending or self.inflight:
                self._submit()
                if not self.inflight:
                    break
                ready, _ = self.ray.wait(list(self.inflight), num_returns=len(self.inflight), timeout=TICK)
                self._drain()
                self._relay_stops()
                for ref in ready:
                    self._finish(ref)
                self._stop_if_asked()
        finally:
            self.ray.kill(self.collector)

    def _submit(self) -> None:
        if self.flags.stop.is_set():
            self.pending.clear()
        while self.pending and len(self.inflight) < self.capacity:
            job = self.pending.popleft()
            lock = ExitStack()
            try:
                lock.enter_context(self.store.run_lock(job.stream_id))
            except StreamBusy as exc:
                self.sink.started(job)
                self.sink.finished(job, result("error", error=str(exc)), 0.0)
                continue
            if job.resume:  # before the task starts: its first call must find them
                records = [[job.stream_id, record] for record in self.store.read_records(job.stream_id)[0]]
                self.ray.get(self.collector.seed.remote(job.spec.id, records))
            template = self._template(job)
            self.sink.started(job)  # before the job is sent: it carries its task span's traceparent
            ref = self.task.remote(job, self.engine.config, self.collector, template)
            self.inflight[ref] = (job, time.monotonic(), lock)

    def _template(self, job: Job):
        folder = job.spec.template
        if not folder or job.spec.path:
            return None
        if folder not in self.templates:
            self.templates[folder] = self.ray.put(_pack(folder))
        return self.templates[folder]

    def _drain(self) -> None:
        fresh, doing = self.ray.get(self.collector.drain.remote())
        for key, records in fresh.items():
            job = self.jobs[key]
            for uid, event in self.applier.apply(records):
                self.sink.event(job, progress_item(event, 0 if uid == job.stream_id else 1))
        for key, text in doing.items():
            if key in self.jobs:
                self.sink.doing(self.jobs[key], text)

    def _relay_stops(self) -> None:
        """A Stop asked for in the driver's store (the web chat's Stop button) reaches the remote run."""
        for job, _, _ in self.inflight.values():
            if self.store.exists(job.stream_id) and self.store.stop_requested(job.stream_id):
                self.store.clear_stop(job.stream_id)
                self.collector.stop.remote(job.spec.id)

    def _finish(self, ref, done: dict | None = None) -> None:
        job, began, lock = self.inflight.pop(ref)
        if done is None:
            try:
                done = self.ray.get(ref)
            except self.ray.exceptions.RayError as exc:
                done = self._failed(job, exc)
        self._drain()
        self.collector.forget.remote(job.spec.id)
        self.applier.forget(job.stream_id)
        lock.close()
        self.sink.finished(job, done, time.monotonic() - began)

    def _failed(self, job: Job, exc: Exception) -> dict:
        cancelled = isinstance(exc, self.ray.exceptions.TaskCancelledError)
        if cancelled or self.flags.stop.is_set():
            return result("interrupted", job.stream_id, "the run did not stop in time; its Ray task was cancelled",
                          cut_off="interrupt")
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        why = f"the Ray task failed ({type(exc).__name__}{': ' + first if first else ''})"
        return result("error", job.stream_id, why, cut_off="worker_lost")

    def _stop_if_asked(self) -> None:
        if not self.flags.stop.is_set():
            return
        now = time.monotonic()
        if self.stop_sent is None:
            self.stop_sent = now
            self.collector.stop.remote()
        elif self.flags.force.is_set() or now - self.stop_sent > self.engine.grace:
            for ref in list(self.inflight):
                self.ray.cancel(ref, force=True)
                job = self.inflight[ref][0]
                self._finish(ref, result("interrupted", job.stream_id, "the run was stopped at once",
                                         cut_off="interrupt"))


class RecordApplier:
    """Applies store records received from workers to the driver's store, one `sync` per stream and batch."""

    def __init__(self, store: EventStore):
        self.store = store
        self.streams: dict[str, EventStream] = {}

    def forget(self, uid: str) -> None:
        """Drop a finished run's streams (and its children's) from memory."""
        for known in [k for k, stream in self.streams.items() if k == uid or uid in stream.parent_event_stream_uids]:
            del self.streams[known]

    def apply(self, records: list) -> list[tuple[str, dict]]:
        """Apply [uid, record] pairs; return the (uid, event record) pairs among them, in order."""
        events, touched = [], {}
        for uid, record in records:
            stream = self._apply_one(uid, record)
            touched[uid] = stream
            if record.get("kind") == "event":
                events.append((uid, record))
        for stream in touched.values():
            self.store.sync(stream)
        return events

    def _apply_one(self, uid: str, record: dict) -> EventStream:
        from anges.store.events import Event, EventStream, EventSummary

        kind = record.get("kind")
        if kind == "header":
            stream = EventStream(title=record.get("title"), uid=uid,
                                 parent_event_stream_uids=record.get("parent_event_stream_uids") or [],
                                 agent_type=record.get("agent_type") or "")
            stream.title = record.get("title")
            stream.created_at = Event.from_dict({"type": "", "created_at": record.get("created_at")}).created_at
            self.streams[uid] = stream
            return stream
        known = self.streams.get(uid)
        stream = known if known is not None else self.store.load(uid)
        self.streams[uid] = stream
        if kind == "event":
            stream.events_list.append(Event.from_record(record))
        elif kind == "summary":
            stream.event_summaries_list.append(EventSummary.from_dict(record))
        elif kind == "title":
            stream.title = record.get("title")
        elif kind == "settings" and isinstance(record.get("agent_settings"), dict):
            stream.agent_settings = dict(record["agent_settings"])
            stream.agent_type = record.get("agent_type") or stream.agent_type
        return stream
