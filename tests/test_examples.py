"""The shipped examples run as documented."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_library_example_runs_and_persists(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "library.py")], capture_output=True, text=True,
                         cwd=tmp_path, env=os.environ.copy(), timeout=60)
    assert out.returncode == 0, out.stderr
    assert "status: completed" in out.stdout and "with 4 events" in out.stdout


def test_recorded_session_replays_offline_through_the_cli(tmp_path):
    request = "Create fizzbuzz.py that prints FizzBuzz from 1 to 15, run it, and check the output."
    out = subprocess.run([sys.executable, "-m", "anges", "--model", f"replay:{ROOT / 'examples' / 'recorded' / 'fizzbuzz.jsonl'}",
                          "--path", str(tmp_path), "-q", request],
                         capture_output=True, text=True, cwd=tmp_path, env=os.environ.copy(), timeout=60)
    assert out.returncode == 0, out.stderr
    assert "FizzBuzz from 1 to 15" in out.stdout
    lines = subprocess.run([sys.executable, "fizzbuzz.py"], capture_output=True, text=True, cwd=tmp_path).stdout
    assert lines.split()[-1] == "FizzBuzz" and lines.split()[2] == "Fizz"
    # recorded in another directory: the replay says where this run's prompt first differs
    assert "differs from the recording" in out.stderr and str(tmp_path) in out.stderr
