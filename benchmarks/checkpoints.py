"""Checkpoints benchmark: the cost of the checkpoint before a step in a 10,000-file working directory (nothing
changed, one file changed), by the fast path the agent loop takes (`watch=True`: the kernel's events, no process)
and by git (`watch=False`, the slow path), the first one, and the disk used by 100 checkpoints against the bytes
changed. `--files N` makes a smaller folder (a small project: `--files 50`).

Run: `.venv/bin/python benchmarks/checkpoints.py` (a temporary directory; needs git). Wall time and the CPU time
(this process and the git processes) are both printed: on a busy machine the wall time mostly measures the wait for
a core.
"""

import argparse
import os
import random
import resource
import statistics
import tempfile
import time
from pathlib import Path

from anges.checkpoints.store import CheckpointStore
from anges.config.types import CheckpointsConfig

FOLDERS, FILES = 100, 100
ROUNDS = 30
CHECKPOINTS = 100


def make_tree(root: Path, folders: int, files: int) -> int:
    """`folders` * `files` source-like files of 0.2 to 8 KB; returns their total size."""
    rng = random.Random(1)
    total = 0
    for d in range(folders):
        (root / f"pkg{d}").mkdir()
        for f in range(files):
            text = "".join(f"def f{d}_{f}_{i}(x):\n    return x * {rng.randint(1, 999)}\n"
                           for i in range(rng.randint(4, 160)))
            (root / f"pkg{d}" / f"mod{f}.py").write_text(text)
            total += len(text)
    return total


def timed(action) -> tuple[float, float]:
    """Wall and CPU (this process and its children) milliseconds of one call."""
    before, own = resource.getrusage(resource.RUSAGE_CHILDREN), time.process_time()
    start = time.perf_counter()
    action()
    wall = time.perf_counter() - start
    after, own = resource.getrusage(resource.RUSAGE_CHILDREN), time.process_time() - own
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime) + own
    return wall * 1000, cpu * 1000


def disk(path: Path) -> int:
    """Bytes of disk the files under `path` take (their blocks)."""
    return sum(os.lstat(os.path.join(r, f)).st_blocks * 512 for r, _, files in os.walk(path) for f in files)


def edit_one(root: Path, rng: random.Random, folders: int, files: int) -> int:
    """Change a few lines of one file, as an edit would; returns the size of its new content."""
    path = root / f"pkg{rng.randrange(folders)}" / f"mod{rng.randrange(files)}.py"
    lines = path.read_text().splitlines(keepends=True)
    for _ in range(3):
        lines[rng.randrange(len(lines))] = f"    return x + {rng.randint(1, 10**9)}  # changed\n"
    path.write_text("".join(lines))
    return path.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=FOLDERS * FILES)
    options = parser.parse_args()
    folders = max(1, min(FOLDERS, options.files // FILES))
    files = options.files // folders
    with tempfile.TemporaryDirectory() as scratch:
        work, base = Path(scratch) / "work", Path(scratch) / "checkpoints"
        work.mkdir()
        size = make_tree(work, folders, files)
        store = CheckpointStore("bench", CheckpointsConfig(), base=base)
        roots = [str(work)]
        wall, cpu = timed(lambda: store.take("bench", "step", roots, []))
        print(f"working directory: {folders * files:,} files, {size / 1e6:.1f} MB of text, "
              f"{disk(work) / 1e6:.1f} MB on disk")
        print(f"first checkpoint (every file hashed): {wall:.0f} ms wall, {cpu:.0f} ms CPU; store "
              f"{disk(base) / 1e6:.2f} MB")
        rng = random.Random(2)
        for watch, path in ((True, "fast path (watch=True, as the agent loop takes them)"),
                            (False, "slow path (git: status, update-index, write-tree)")):
            for _ in range(2):  # the fast path's first two ask git, while the folders start being watched
                store.take("bench", "step", roots, [], watch=watch)
            def step(watch: bool = watch) -> None:
                store.take("bench", "step", roots, [], watch=watch)

            same = [timed(step) for _ in range(ROUNDS)]
            changed = []
            for _ in range(ROUNDS):
                edit_one(work, rng, folders, files)
                changed.append(timed(step))
            print(path)
            for label, runs in (("nothing changed", same), ("one file changed", changed)):
                walls, cpus = sorted(w for w, _ in runs), sorted(c for _, c in runs)
                print(f"  checkpoint, {label}: median {statistics.median(walls):.2f} ms wall (p90 "
                      f"{walls[int(len(walls) * 0.9)]:.2f}), {statistics.median(cpus):.2f} ms CPU")

        store.git(roots[0]).run("repack", "-d", "-q")  # start from packed objects, as a run's end leaves them
        start_disk = disk(base / "bench" / "objects")
        changed_bytes = 0
        for _ in range(CHECKPOINTS):
            store.take("bench", "step", roots, [], watch=True)
            changed_bytes += edit_one(work, rng, folders, files)
        store.take("bench", "end", roots, [])  # the run ends: the loose objects its steps left are packed
        used = disk(base / "bench" / "objects") - start_disk
        print(f"{CHECKPOINTS} checkpoints, each after one edited file: the edited files hold {changed_bytes:,} bytes; "
              f"the objects grew by {used:,} bytes on disk ({used / changed_bytes:.1%} of them)")
        index = os.lstat(store.git(roots[0]).gitdir / "index").st_blocks * 512
        print(f"whole store: {disk(base) / 1e6:.2f} MB (of which the index: {index / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
