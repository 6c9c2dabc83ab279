"""Batch throughput: scripted tasks whose steps mostly wait (`sleep 0.05`), as real runs mostly wait on the model.

Runs the same tasks with 1, 2 and 4 workers on the local engine and on a local Ray (`ray.init(num_cpus=2)`,
0.5 CPU per task so four fit). Each engine's per-task overhead comes from tasks with no step at all (the
model completes at once), one worker: (seconds per task on the engine) - (seconds per task run directly in
this process, no batch machinery). Run:
    python benchmarks/batch.py [--tasks 200] [--steps 20] [--engines local,ray] [--workers 1,2,4]
    python benchmarks/batch.py --orphaned     # seconds from kill -9 of `anges batch` until its worker's command ends
"""

import argparse
import io
import json
import logging
import os
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("ANGES_HOME", tempfile.mkdtemp(prefix="anges-bench-"))

from anges.batch.local import LocalEngine  # noqa: E402
from anges.batch.progress import PlainDisplay  # noqa: E402
from anges.batch.runner import BatchRunner  # noqa: E402
from anges.batch.tasks import load_tasks  # noqa: E402
from anges.batch.worker import Job, run_task  # noqa: E402
from anges.config.loading import load_config  # noqa: E402
from anges.store.event_store import EventStore  # noqa: E402

OVERHEAD_TASKS = 50


def write_tasks(folder: Path, tasks: int, steps: int, sleep: float) -> Path:
    folder.mkdir(exist_ok=True)
    replies = [{"analysis": "", "reasoning": "wait", "actions": [
        {"action_type": "RUN_SHELL_CMD", "command": f"sleep {sleep}; echo step {i}"}]} for i in range(steps)]
    replies.append({"analysis": "", "reasoning": "done", "actions": [
        {"action_type": "TASK_COMPLETE", "content": "done"}]})
    (folder / "replies.json").write_text(json.dumps(replies))
    path = folder / "tasks.jsonl"
    path.write_text("".join(json.dumps({"id": f"t{i}", "task": f"task {i}", "model": "scripted:replies.json"}) + "\n"
                            for i in range(tasks)))
    return path


def run_batch(path: Path, engine, name: str) -> float:
    runner = BatchRunner(load_tasks(path), name, engine, display_factory=lambda p: PlainDisplay(p, io.StringIO()))
    started = time.perf_counter()
    report = runner.run()
    elapsed = time.perf_counter() - started
    statuses = {row["status"] for row in report.results}
    assert statuses == {"completed"}, statuses
    return elapsed


def direct(path: Path, config) -> float:
    """Seconds per task for the agent alone: run_task in this process, one task after another."""
    specs = load_tasks(path)
    store = EventStore()
    started = time.perf_counter()
    for spec in specs:
        with tempfile.TemporaryDirectory() as work:
            job = Job(spec, "direct", f"direct-{spec.id}")
            assert run_task(job, config, store, Path(work), True, threading.Event())["status"] == "completed"
    return (time.perf_counter() - started) / len(specs)


def orphaned_stop(folder: Path, runs: int = 5) -> list[tuple[float, float]]:
    """Seconds from `kill -9` of `anges batch` until its worker's running command is gone, and until the worker
    itself has ended (its run recorded as stopped), `runs` times."""
    import signal
    import subprocess
    import sys

    folder.mkdir(exist_ok=True)
    token = f"{os.getpid()}.{time.time_ns() % 10**6}"
    (folder / "r.json").write_text(json.dumps([{"analysis": "", "reasoning": "wait", "actions": [
        {"action_type": "RUN_SHELL_CMD", "command": f"sleep 3{token}"}]}]))
    times = []
    for run in range(runs):
        path = folder / f"orphan{run}.jsonl"
        path.write_text(json.dumps({"id": "t", "task": "wait"}) + "\n")
        driver = subprocess.Popen([sys.executable, "-m", "anges", "batch", str(path), "--model",
                                   f"scripted:{folder / 'r.json'}"], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        while not _running(token):
            time.sleep(0.01)
        workers = [entry for entry in Path("/proc").iterdir() if entry.name.isdigit() and _parent(entry) == driver.pid]
        driver.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        driver.wait()
        while _running(token):
            time.sleep(0.005)
        command_gone = time.monotonic() - killed
        while any(worker.exists() and _parent(worker) != 0 for worker in workers):
            time.sleep(0.005)
        times.append((command_gone, time.monotonic() - killed))
    return times


def _parent(proc: Path) -> int:
    try:
        stat = (proc / "stat").read_text()
    except OSError:
        return 0
    fields = stat.rsplit(")", 1)[1].split()
    return 0 if fields[0] == "Z" else int(fields[1])


def _running(token: str) -> bool:
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and token.encode() in (entry / "cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--sleep", type=float, default=0.05)
    parser.add_argument("--engines", default="local,ray")
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--orphaned", action="store_true", help="only: how fast workers stop after kill -9 of the "
                                                                  "driver")
    args = parser.parse_args()
    workers = [int(n) for n in args.workers.split(",")]
    config = load_config()
    if args.orphaned:
        with tempfile.TemporaryDirectory() as folder:
            times = sorted(orphaned_stop(Path(folder)))
        commands, workers = (", ".join(f"{t[i]:.2f}" for t in times) for i in (0, 1))
        print(f"kill -9 of anges batch: its worker's command gone after {commands} s; the worker after {workers} s")
        return

    with tempfile.TemporaryDirectory() as folder:
        path = write_tasks(Path(folder) / "main", args.tasks, args.steps, args.sleep)
        empty = write_tasks(Path(folder) / "empty", OVERHEAD_TASKS, 0, args.sleep)
        alone = direct(empty, config)
        print(f"{args.tasks} tasks x {args.steps} steps of `sleep {args.sleep}`; "
              f"a task of no step run directly: {alone * 1000:.1f} ms")
        for engine_name in args.engines.split(","):
            if engine_name == "ray":
                import ray

                from anges.batch.ray_engine import RayEngine

                ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
                run_batch(empty, RayEngine(config, workers=4, cpus_per_task=0.5), "warm-up")  # start Ray's workers

            def engine(count: int, name: str = engine_name):
                return RayEngine(config, workers=count, cpus_per_task=0.5) if name == "ray" else LocalEngine(count)

            per_task = run_batch(empty, engine(1), f"{engine_name}-overhead") / OVERHEAD_TASKS
            print(f"{engine_name:5} per-task overhead: {(per_task - alone) * 1000:.0f} ms "
                  f"({per_task * 1000:.0f} ms per task of no step, one worker)")
            one = None
            for count in workers:
                elapsed = run_batch(path, engine(count), f"{engine_name}-{count}")
                one = one or (elapsed if count == 1 else None)
                speedup = f", {one / elapsed:.2f}x one worker" if one else ""
                print(f"{engine_name:5} {count} worker(s): {elapsed:7.1f} s, {args.tasks / elapsed:5.2f} tasks/s"
                      f"{speedup}")
            if engine_name == "ray":
                ray.shutdown()


if __name__ == "__main__":
    main()
