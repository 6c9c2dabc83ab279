"""Wall time of `python -c "import anges"` and of loading the config in a fresh process, against a bare
interpreter start (median of 20 runs each)."""

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
    config = median_ms("from anges.config import load_config; load_config()")
    print(f"python -c pass: {bare:.1f} ms; python -c 'import anges': {full:.1f} ms; import cost {full - bare:.1f} ms")
    print(f"load_config() in a fresh process: {config:.1f} ms ({config - bare:.1f} ms over a bare start)")
