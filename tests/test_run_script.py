"""tests/run.sh: installs what the browser and sandbox tests need where it can, and never stops for it."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent / "run.sh"


@pytest.fixture
def checkout(tmp_path):
    """A checkout with run.sh, a stand-in .venv python that logs its calls, and a PATH of stand-in tools."""
    (tmp_path / "tests").mkdir()
    shutil.copy(SCRIPT, tmp_path / "tests" / "run.sh")
    tool(tmp_path / ".venv" / "bin", "python", f'echo "python $*" >> {tmp_path}/calls')
    for name in ("dirname", "awk", "tee", "cat"):
        (tmp_path / "bin").mkdir(exist_ok=True)
        os.symlink(shutil.which(name), tmp_path / "bin" / name)
    return tmp_path


def tool(folder, name, script):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(f"#!/bin/sh\n{script}\n")
    (folder / name).chmod(0o755)


def run(checkout, uid, skip=None):
    tool(checkout / "bin", "id", f"echo {uid}")
    env = {"PATH": str(checkout / "bin"), "HOME": str(checkout)}
    if skip is not None:
        env["ANGES_TEST_SKIP"] = skip
    out = subprocess.run(["/bin/bash", str(checkout / "tests" / "run.sh"), "-x"], capture_output=True, text=True,
                         env=env, timeout=60)
    calls = (checkout / "calls").read_text().splitlines() if (checkout / "calls").exists() else []
    return out, calls


def test_without_root_the_missing_tools_are_reported_and_the_tests_still_run(checkout):
    out, calls = run(checkout, 1000)
    assert out.returncode == 0, out.stderr
    assert ("chromium bubblewrap not installed, and installing needs root and apt-get: the tests that need it are "
            "skipped") in out.stderr
    assert calls[-1] == "python -m pytest -q -p no:cacheprovider -n 3 --dist loadgroup -x"
    assert "installing anges and its dev dependencies into .venv" in out.stderr  # progress is shown


def test_install_progress_is_shown_and_a_failed_install_stops_with_the_whole_output(checkout):
    python = checkout / ".venv" / "bin"
    tool(python, "python", f'echo "python $*" >> {checkout}/calls; echo "WARNING: noise"; '
                           'echo "Collecting flask>=3.0"; echo "Successfully installed flask-3.1"')
    out, calls = run(checkout, 1000)
    assert out.returncode == 0, out.stderr
    assert "  Collecting flask>=3.0\n  Successfully installed flask-3.1" in out.stderr and "noise" not in out.stderr
    assert "WARNING: noise" in (checkout / ".venv" / "install.log").read_text()
    tool(python, "python", f'echo "python $*" >> {checkout}/calls; echo "ERROR: No matching distribution" >&2; '
                           'case "$*" in *pytest*) ;; *) exit 1;; esac')
    (checkout / "calls").unlink()
    out, calls = run(checkout, 1000)
    assert out.returncode == 1
    assert "ERROR: No matching distribution" in out.stderr and "installing failed" in out.stderr
    assert calls == ["python -m pip install --upgrade pip setuptools wheel"], "no tests on a broken install"


def test_as_root_apt_installs_what_is_missing_and_a_failure_does_not_stop_the_run(checkout):
    tool(checkout / "bin", "apt-get", f'echo "apt-get $*" >> {checkout}/calls; echo "Get:1 chromium"')
    out, calls = run(checkout, 0)
    assert out.returncode == 0, out.stderr
    assert "apt-get -q install -y chromium bubblewrap" in calls and "Get:1 chromium" in out.stderr
    tool(checkout / "bin", "apt-get", "echo 'E: Unable to locate package' >&2; exit 100")
    out, calls = run(checkout, 0)
    assert out.returncode == 0, out.stderr
    assert "could not install chromium bubblewrap" in out.stderr and "E: Unable to locate package" in out.stderr
    assert calls[-1] == "python -m pytest -q -p no:cacheprovider -n 3 --dist loadgroup -x"


def test_groups_skipped_on_purpose_need_nothing_installed(checkout):
    tool(checkout / "bin", "apt-get", f'echo "apt-get $*" >> {checkout}/calls')
    out, calls = run(checkout, 0, skip="browser, sandbox")
    assert out.returncode == 0, out.stderr
    assert not [call for call in calls if call.startswith("apt-get")] and "chromium" not in out.stderr
    out, calls = run(checkout, 0, skip="browser")
    assert "apt-get -q install -y bubblewrap" in calls


def test_a_type_error_fails_the_run_before_the_tests(checkout):
    python = checkout / ".venv" / "bin"
    tool(python, "python", f'echo "python $*" >> {checkout}/calls; '
                           'case "$*" in *mypy*) echo "anges/x.py:1: error: bad [arg-type]"; exit 1;; esac')
    out, calls = run(checkout, 0, skip="browser,sandbox")
    assert out.returncode == 1
    assert "python -m mypy --config-file tests/mypy.ini" in calls
    assert "anges/x.py:1: error: bad" in out.stdout
    assert not [call for call in calls if "pytest" in call], "no tests after a type error"
