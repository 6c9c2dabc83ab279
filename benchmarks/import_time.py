"""Wall time of `python -c "import anges"` against a bare interpreter start (median of 20 runs each)."""

import statistics
import subprocess
import sys
import time


def median_ms(code: str, runs: int = 20) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


if __name__ == "__main__":
    bare = median_ms("pass")
    full = median_ms("import anges")
    print(f"python -c pass: {bare:.1f} ms; python -c 'import anges': {full:.1f} ms; import cost {full - bare:.1f} ms")
