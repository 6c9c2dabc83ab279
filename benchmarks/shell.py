"""Round-trip time of run_command("true"): directly, through the run's runner (plain, and in a PID namespace of its
own as commands outside the sandbox run), and through it in the bwrap sandbox.

Run with `PYTHONPATH=. python benchmarks/shell.py [--runs N]`.
"""

import argparse
import statistics
import tempfile
import time

from anges.config.loading import load_config
from anges.safety.command_runner import CommandRunner
from anges.safety.sandbox import SandboxSettings, availability
from anges.safety.shell import run_command


def measure(runs: int, cwd: str, runner=None, warmup: int = 10) -> list[float]:
    """Milliseconds for each of `runs` calls of run_command("true"), after `warmup` unmeasured calls."""
    timings = []
    for index in range(warmup + runs):
        started = time.perf_counter()
        result = run_command("true", cwd=cwd, runner=runner)
        elapsed = time.perf_counter() - started
        assert result.exit_code == 0, result
        if index >= warmup:
            timings.append(elapsed * 1000)
    return timings


def report(label: str, timings: list[float]) -> float:
    timings = sorted(timings)
    p95 = timings[min(len(timings) - 1, round(0.95 * len(timings)) - 1)]
    mean = statistics.fmean(timings)
    print(f"{label:<28} x{len(timings)}: mean {mean:.2f} ms, p50 {statistics.median(timings):.2f} ms, "
          f"p95 {p95:.2f} ms, max {timings[-1]:.2f} ms")
    return statistics.median(timings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=300)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as cwd:
        direct = report("direct (no runner)", measure(runs, cwd))
        runner = CommandRunner(cwd)
        started = time.perf_counter()
        run_command("true", cwd=cwd, runner=runner)
        print(f"runner start (unsandboxed): {(time.perf_counter() - started) * 1000:.1f} ms")
        report("runner, unsandboxed", measure(runs, cwd, runner))
        runner.close()
        found = availability("", (cwd,))
        if not found.ok:
            print(f"sandboxed: not measured ({found.reason})")
            return
        runner = CommandRunner(cwd, bwrap=found.bwrap, contain=True)
        report("runner, own PID namespace", measure(runs, cwd, runner))  # commands run outside the sandbox
        runner.close()
        runner = CommandRunner(cwd, SandboxSettings.for_run(load_config().safety, cwd), found.bwrap)
        started = time.perf_counter()
        run_command("true", cwd=cwd, runner=runner)
        print(f"runner start (bwrap sandbox): {(time.perf_counter() - started) * 1000:.1f} ms")
        sandboxed = report("runner, bwrap sandbox", measure(runs, cwd, runner))
        started = time.perf_counter()
        runner.close()
        print(f"end of the run (sandbox torn down): {(time.perf_counter() - started) * 1000:.1f} ms")
        print(f"sandboxed p50 / direct p50: {sandboxed / direct:.2f}x")


if __name__ == "__main__":
    main()
