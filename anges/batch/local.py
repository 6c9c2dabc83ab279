"""The local engine: N worker processes on this machine, each running one task in its own work directory.

A worker is `anges.batch.worker` in an isolated Python (`worker_argv`), started in anges' home: it records to this
machine's store directly and reports its events and result as JSON lines. To stop, the engine sends SIGTERM (the
run stops cleanly: its command is killed and the stream records the interruption); a worker that does not end
within `grace` seconds gets a second SIGTERM (it stops at once) and, if it still lingers, SIGKILL.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from anges.batch.worker import Job, result
from anges.config.loading import anges_home
from anges.store.fileops import make_private_dirs
from anges.util.paths import resolve
from anges.util.trust import noted_model_places

TICK = 0.1
STOP_GRACE = 5.0
"""Seconds a worker has to stop cleanly before it is told to stop at once."""
KILL_AFTER = 2.0
"""Seconds after that before SIGKILL."""
TIMEOUT_SLACK = 30.0
"""A task with a timeout whose worker is still running this long after it is stopped like Ctrl-C stops it."""
STDERR_TAIL = 2000
WORKER = ("import sys; sys.path[:] = sys.argv[1:]; del sys.argv[1:]; "
          "from anges.batch.worker import main; sys.exit(main())")
"""A worker's program: its import path is its arguments (`worker_argv`)."""


@dataclass
class _Worker:
    job: Job
    proc: subprocess.Popen
    began: float = field(default_factory=time.monotonic)
    signals: int = 0
    since: float = 0.0


class LocalEngine:
    """Runs each task in its own worker process, `workers` at a time."""

    name = "this machine"

    def __init__(self, workers: int = 4, python: str = sys.executable, grace: float = STOP_GRACE):
        self.workers = max(1, workers)
        self.python = python
        self.grace = grace
        self._running: dict[str, _Worker] = {}
        self._lock = threading.Lock()

    def run(self, jobs: list[Job], sink, flags) -> None:
        """Run every job (fewer if stopped); returns when each started run has ended."""
        with ThreadPoolExecutor(max_workers=min(self.workers, len(jobs)), thread_name_prefix="anges-batch") as pool:
            futures = [pool.submit(self._run_one, job, sink, flags) for job in jobs]
            while True:
                done, pending = wait(futures, timeout=TICK)
                self._enforce(flags)
                if not pending:
                    break
            for future in done:
                future.result()  # a bug in the engine is not swallowed

    def _run_one(self, job: Job, sink, flags) -> None:
        if flags.stop.is_set():
            return
        with tempfile.TemporaryFile() as errors:
            home = resolve(str(anges_home()))  # one of anges' own places: no command writes there
            make_private_dirs(Path(home))
            proc = subprocess.Popen(worker_argv(self.python), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=errors, start_new_session=True, text=True, encoding="utf-8",
                                    errors="replace", cwd=home, env={**os.environ, "ANGES_HOME": home})
            worker = _Worker(job, proc)
            with self._lock:
                self._running[job.spec.id] = worker
            sink.started(job)
            try:
                done = self._talk(worker, sink)
            finally:
                proc.wait()
                with self._lock:
                    self._running.pop(job.spec.id, None)
            if done is None:
                done = self._lost(worker, flags, _tail(errors))
        sink.finished(job, done, time.monotonic() - worker.began)

    def _talk(self, worker: _Worker, sink) -> dict | None:
        """Send the job, relay progress lines; the worker's result, or None when it ended without one."""
        stdin, stdout = worker.proc.stdin, worker.proc.stdout
        if stdin is None or stdout is None:  # never: the worker is started with pipes for both
            return None
        try:
            stdin.write(json.dumps(worker.job.to_dict()))
            stdin.close()
        except BrokenPipeError:
            return None
        done = None
        for line in stdout:
            try:
                item = json.loads(line)
            except ValueError:
                continue
            if not isinstance(item, dict):
                continue
            if item.get("type") == "event":
                sink.event(worker.job, item)
            elif item.get("type") == "doing":
                sink.doing(worker.job, str(item.get("text") or ""))
            elif item.get("type") == "result":
                done = item
        return done

    def _lost(self, worker: _Worker, flags, errors: str) -> dict:
        """The result of a worker that ended without reporting one (killed, or crashed)."""
        code = worker.proc.returncode
        why = f"the worker process ended with {_exit_text(code)} before reporting a result"
        if flags.stop.is_set():
            return result("interrupted", worker.job.stream_id, why, cut_off="interrupt")
        return result("error", worker.job.stream_id, why + (f": {errors}" if errors else ""), cut_off="worker_lost")

    def _enforce(self, flags) -> None:
        """Stop workers: all of them when the batch stops, and any that outlives its task's timeout."""
        now = time.monotonic()
        with self._lock:
            workers = list(self._running.values())
        for worker in workers:
            timeout = worker.job.spec.timeout
            overdue = bool(timeout and now - worker.began > timeout + TIMEOUT_SLACK)
            if worker.signals == 0 and (flags.stop.is_set() or overdue):
                self._signal(worker, signal.SIGTERM, now)
            elif worker.signals == 1 and (flags.force.is_set() or now - worker.since > self.grace):
                self._signal(worker, signal.SIGTERM, now)
            elif worker.signals == 2 and now - worker.since > KILL_AFTER:
                self._signal(worker, signal.SIGKILL, now)

    @staticmethod
    def _signal(worker: _Worker, signum: int, now: float) -> None:
        worker.signals += 1
        worker.since = now
        try:
            if signum == signal.SIGKILL:
                os.killpg(worker.proc.pid, signum)
            else:
                worker.proc.send_signal(signum)
        except ProcessLookupError:
            pass  # it ended meanwhile


def worker_argv(python: str) -> list[str]:
    """The command line of a worker: an isolated `python` (`-I`: neither the current directory nor a `PYTHON*`
    variable shapes its import path), given this process's import path less the current directory ("") and every
    folder commands of a run of this process may write (`noted_model_places`: a task with `path: "."` works in the
    folder the batch runs in). A module planted there is never imported outside the sandbox; what lies deeper in them (a
    project's virtualenv) the sandbox keeps read-only."""
    places = set(noted_model_places())
    path = [entry for entry in sys.path if entry and not (os.path.isabs(entry) and resolve(entry) in places)]
    return [python, "-I", "-c", WORKER, *path]


def _tail(file) -> str:
    file.seek(0, os.SEEK_END)
    size = file.tell()
    file.seek(max(0, size - STDERR_TAIL))
    return file.read().decode("utf-8", errors="replace").strip()


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"
