"""The shipped examples run as documented."""

import fcntl
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_library_example_runs_and_persists(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "library.py")], capture_output=True, text=True,
                         cwd=tmp_path, env=os.environ.copy(), timeout=60)
    assert out.returncode == 0, out.stderr
    assert "status: completed" in out.stdout and "with 4 events" in out.stdout


def replay_demo(tmp_path, model, *extra):
    request = "Create fizzbuzz.py that prints FizzBuzz from 1 to 15, run it, and check the output."
    return subprocess.run([sys.executable, "-m", "anges", "--model", model, "--path", str(tmp_path), "-q", request,
                           *extra], capture_output=True, text=True, cwd=ROOT, env=os.environ.copy(), timeout=60)


def test_a_replay_in_another_folder_fails_with_the_diff_unless_lenient(tmp_path):
    recording = "examples/recorded/fizzbuzz.jsonl"
    strict = replay_demo(tmp_path, f"replay:{recording}")
    assert strict.returncode == 4, strict.stderr
    assert "call 1 of 3 recorded: the prompt differs from the recording" in strict.stderr
    assert "-- Working directory (commands start here; relative file paths resolve here): /tmp/anges-fizzbuzz" \
           in strict.stderr and f"+- Working directory (commands start here; relative file paths resolve here): " \
           f"{tmp_path}" in strict.stderr
    assert not (tmp_path / "fizzbuzz.py").exists(), "nothing ran past the first differing prompt"

    lenient = replay_demo(tmp_path, f"replay:lenient:{recording}")
    assert lenient.returncode == 0, lenient.stderr
    assert "FizzBuzz from 1 to 15" in lenient.stdout
    assert "differs from the recording" in lenient.stderr and str(tmp_path) in lenient.stderr
    lines = subprocess.run([sys.executable, "fizzbuzz.py"], capture_output=True, text=True, cwd=tmp_path).stdout
    assert lines.split()[-1] == "FizzBuzz" and lines.split()[2] == "Fizz"


def readme_block(containing: str) -> str:
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    found = [block for block in blocks if containing in block]
    assert len(found) == 1, f"one README block should hold {containing!r}"
    return found[0]


@pytest.mark.sandbox  # the recorded prompts describe the sandbox: without bwrap the prompts differ
def test_the_readme_replay_demo_works_as_written(tmp_path):
    command = readme_block("replay:examples/recorded/fizzbuzz.jsonl")
    workdir = Path("/tmp/anges-fizzbuzz")  # the folder the demo was recorded in, so the prompts match
    assert str(workdir) in command
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "anges").exists(), "the `anges` command is not installed next to this Python"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    with open(workdir.with_name("anges-fizzbuzz.lock"), "w") as lock:  # one demo at a time on this machine
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            workdir.mkdir(exist_ok=True)
            (workdir / "fizzbuzz.py").write_text("print('left over from an earlier run')\n")
            for _ in range(2):  # twice: the demo starts from an empty folder whatever the last run left
                out = subprocess.run(["bash", "-c", command], capture_output=True, text=True, cwd=ROOT, env=env,
                                     timeout=60)
                assert out.returncode == 0, out.stderr
                assert "differs" not in out.stderr
                assert "FizzBuzz from 1 to 15" in out.stdout
                printed = subprocess.run([sys.executable, "fizzbuzz.py"], capture_output=True, text=True,
                                         cwd=workdir).stdout.split()
                assert printed[-1] == "FizzBuzz" and printed[2] == "Fizz"
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
