"""Wall time of `anges --help` (median of 20 runs after 3 warm-ups), and what that path imports.

Run with the interpreter that has anges installed: `.venv/bin/python benchmarks/cli_startup.py`.
"""

import os
import shutil
import statistics
import subprocess
import sys
import time

RUNS = 20
WARM_UP = 3
HEAVY = ("openai", "google.genai", "anthropic", "flask", "jinja2", "yaml", "httpx", "mcp", "anges.agents",
         "prompt_toolkit", "rich")


def wall_times(argv: list[str]) -> list[float]:
    times = []
    for i in range(WARM_UP + RUNS):
        started = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)
        if i >= WARM_UP:
            times.append(time.perf_counter() - started)
    return times


def imported_modules() -> tuple[list[str], float]:
    """Modules imported by `python -X importtime -m anges --help`, and the cumulative import time of anges.cli.main."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "anges", "--help"], capture_output=True, text=True,
                         check=True)
    modules, cli_us = [], 0
    for line in out.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cumulative, name = (part.strip() for part in line[len("import time:"):].split("|"))
            if cumulative.isdigit():
                modules.append(name)
                if name == "anges.cli.main":
                    cli_us = int(cumulative)
    return modules, cli_us / 1000


def main() -> None:
    script = shutil.which("anges", path=os.path.dirname(sys.executable))
    if script is None:
        sys.exit("the anges console script is not installed next to this interpreter (pip install -e .)")
    for label, argv in (("anges --help", [script, "--help"]), ("python -c pass", [sys.executable, "-c", "pass"])):
        times = sorted(wall_times(argv))
        print(f"{label:16} median {statistics.median(times) * 1000:6.1f} ms   min {times[0] * 1000:6.1f} ms   "
              f"max {times[-1] * 1000:6.1f} ms   ({RUNS} runs)")
    modules, cli_ms = imported_modules()
    heavy = [m for m in modules if m.split(".")[0] in {h.split(".")[0] for h in HEAVY} and m in HEAVY]
    print(f"anges.cli.main imports in {cli_ms:.1f} ms (cumulative, -X importtime); {len(modules)} modules in all")
    print("heavy modules on the --help path:", ", ".join(heavy) if heavy else "none")


if __name__ == "__main__":
    main()
