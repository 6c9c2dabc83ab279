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
