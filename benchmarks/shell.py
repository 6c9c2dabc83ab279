"""Round-trip time of run_command("true"): run with `PYTHONPATH=. python benchmarks/shell.py [--runs N]`."""

import argparse
import statistics
import tempfile
import time

from anges.shell import run_command


def measure(runs: int, warmup: int = 10) -> list[float]:
    """Milliseconds for each of `runs` calls of run_command("true"), after `warmup` unmeasured calls."""
    timings = []
    with tempfile.TemporaryDirectory() as cwd:
        for index in range(warmup + runs):
            started = time.perf_counter()
            result = run_command("true", cwd=cwd)
            elapsed = time.perf_counter() - started
            assert result.exit_code == 0, result
            if index >= warmup:
                timings.append(elapsed * 1000)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=300)
    timings = sorted(measure(parser.parse_args().runs))
    p95 = timings[min(len(timings) - 1, round(0.95 * len(timings)) - 1)]
    print(
        f"run_command('true') x{len(timings)}: mean {statistics.fmean(timings):.2f} ms, "
        f"p50 {statistics.median(timings):.2f} ms, p95 {p95:.2f} ms, max {timings[-1]:.2f} ms"
    )


if __name__ == "__main__":
    main()
