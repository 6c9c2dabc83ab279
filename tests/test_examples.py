"""The shipped examples run as documented."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from anges.store.event_store import EventStore

ROOT = Path(__file__).resolve().parents[1]


def test_library_example_runs_and_persists(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "library.py")], capture_output=True, text=True,
                         cwd=tmp_path, env=os.environ.copy(), timeout=60)
    assert out.returncode == 0, out.stderr
    assert "status: completed" in out.stdout and "with 4 events" in out.stdout


REQUEST = "Create fizzbuzz.py that prints FizzBuzz from 1 to 15, run it, and check the output."
RECORDING = "examples/recorded/fizzbuzz.jsonl"


def replay_demo(tmp_path, model, request=REQUEST, *extra):
    return subprocess.run([sys.executable, "-m", "anges", "--model", model, "--path", str(tmp_path), "-q", request,
                           *extra], capture_output=True, text=True, cwd=ROOT, env=os.environ.copy(), timeout=120)


def test_a_replay_whose_prompt_differs_fails_with_the_diff_once_unless_lenient(tmp_path):
    other = REQUEST.replace("1 to 15", "1 to 16")
    strict = replay_demo(tmp_path, f"replay:{RECORDING}", other)
    assert strict.returncode == 4, strict.stderr
    assert strict.stderr.count("call 1 of 3 recorded: the prompt differs from the recording") == 1
    assert strict.stderr.count(f"-{REQUEST}") == 1 and strict.stderr.count(f"+{other}") == 1, "the diff, once"
    assert not (tmp_path / "fizzbuzz.py").exists(), "nothing ran past the first differing prompt"

    lenient = replay_demo(tmp_path, f"replay:lenient:{RECORDING}", other)
    assert lenient.returncode == 0, lenient.stderr
    assert "FizzBuzz from 1 to 15" in lenient.stdout
    assert lenient.stderr.count("differs from the recording") == 1 and f"+{other}" in lenient.stderr
    lines = subprocess.run([sys.executable, "fizzbuzz.py"], capture_output=True, text=True, cwd=tmp_path).stdout
    assert lines.split()[-1] == "FizzBuzz" and lines.split()[2] == "Fizz"

    [info] = [info for info in EventStore().list() if info.status == "completed"]
    exported = subprocess.run([sys.executable, "-m", "anges", "export", info.uid, "--format", "json"],
                              capture_output=True, text=True, cwd=tmp_path, timeout=60).stdout
    models = {event["data"].get("model") for event in json.loads(exported)["events_list"] if "model" in event["data"]}
    assert models == {f"replay:{RECORDING}"}, "a replay is named as one, not as what was recorded"


def readme_block(containing: str) -> str:
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    found = [block for block in blocks if containing in block]
    assert len(found) == 1, f"one README block should hold {containing!r}"
    return found[0]


@pytest.mark.sandbox  # the recorded prompts describe the sandbox: without bwrap the prompts differ
def test_the_readme_replay_demo_works_as_written_in_any_new_folder(tmp_path):
    command = readme_block("replay:examples/recorded/fizzbuzz.jsonl")
    assert "rm -rf" not in command and "mktemp -d" in command
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "anges").exists(), "the `anges` command is not installed next to this Python"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "TMPDIR": str(tmp_path)}
    for _ in range(2):  # each run in a folder of its own, as the README makes it
        out = subprocess.run(["bash", "-c", command], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
        assert out.returncode == 0, out.stderr
        assert "differs" not in out.stderr
        assert "FizzBuzz from 1 to 15" in out.stdout
    folders = [path for path in tmp_path.iterdir() if (path / "fizzbuzz.py").exists()]
    assert len(folders) == 2
    for folder in folders:
        printed = subprocess.run([sys.executable, "fizzbuzz.py"], capture_output=True, text=True,
                                 cwd=folder).stdout.split()
        assert printed[-1] == "FizzBuzz" and printed[2] == "Fizz"
