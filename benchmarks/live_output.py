"""What watching a command's output live costs: run_command of `true` and of `seq 1 3000000` (21 MB of output),
without a watcher and with the agent's `LiveOutput` told to a handler that draws as the terminal does
(`printable(as_drawn(...))`), interleaved.

Run with `PYTHONPATH=. python benchmarks/live_output.py [--runs N]`.
"""

import argparse
import statistics
import tempfile
import time

from anges.agents.live import LiveOutput
from anges.safety.shell import run_command
from anges.util.printable import as_drawn, printable

TAG = {"agent_id": "bench", "agent_type": "default", "parent_ids": (), "call": 1}
SECRETS = ["s3cret-value-0123456789", "another-secret-abcdefghij"]


def timed(command: str, cwd: str, live: bool) -> float:
    """Milliseconds of one run_command, watched live or not."""
    drawn: list[str] = []
    sink = LiveOutput([lambda delta: drawn.append(printable(as_drawn(delta.output)))], TAG, SECRETS, command) \
        if live else None
    started = time.perf_counter()
    run_command(command, cwd=cwd, watch=sink)
    if sink is not None:
        sink.flush()
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as cwd:
        for command in ("true", "seq 1 3000000"):
            plain, live = [], []
            for _ in range(runs):
                plain.append(timed(command, cwd, False))
                live.append(timed(command, cwd, True))
            a, b = statistics.median(plain), statistics.median(live)
            print(f"{command:<16} p50 {a:.2f} ms unwatched, {b:.2f} ms watched live ({b / a:.2f}x)")


if __name__ == "__main__":
    main()
