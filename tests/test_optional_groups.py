"""The `browser` and `sandbox` test groups: skipped with the reason where they cannot run, or on request."""

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

SAMPLE = textwrap.dedent("""
    import pytest

    @pytest.mark.browser
    def test_in_chromium():
        pass

    @pytest.mark.sandbox
    def test_in_bwrap():
        pass

    def test_anywhere():
        pass
""")


@pytest.fixture
def project(tmp_path):
    """A small test project using our pytest.ini and groups plugin, with its own PATH of fake tools."""
    shutil.copy(TESTS.parent / "pytest.ini", tmp_path / "pytest.ini")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "conftest.py").write_text('pytest_plugins = ["optional_groups"]\n')
    (tmp_path / "tests" / "test_sample.py").write_text(SAMPLE)
    (tmp_path / "bin").mkdir()
    return tmp_path


def tool(project, name, script):
    path = project / "bin" / name
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)


def run(project, skip="", *options):
    env = {key: value for key, value in os.environ.items() if key not in ("ANGES_CHROMIUM", "ANGES_TEST_SKIP")}
    env.update(PATH=str(project / "bin"), PYTHONPATH=str(TESTS))
    if skip:
        env["ANGES_TEST_SKIP"] = skip
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", "-v", *options],
                          cwd=project, env=env, capture_output=True, text=True, timeout=120)


def outcome(out, name):
    line = next(line for line in out.stdout.splitlines() if f"::{name} " in line)
    return line.split()[1]


def skip_reasons(out):
    return sorted(line.split(": ", 1)[1] for line in out.stdout.splitlines() if line.startswith("SKIPPED"))


def test_both_groups_run_where_their_tools_work(project):
    tool(project, "chromium", "echo 'Chromium 1.0'")
    tool(project, "bwrap", "exit 0")
    out = run(project)
    assert out.returncode == 0, out.stdout
    assert [outcome(out, name) for name in ("test_in_chromium", "test_in_bwrap", "test_anywhere")] == ["PASSED"] * 3


def test_missing_tools_skip_their_group_with_the_reason(project):
    out = run(project)
    assert out.returncode == 0, out.stdout
    assert outcome(out, "test_anywhere") == "PASSED"
    assert skip_reasons(out) == [
        "browser tests: Chromium is not installed (Debian: apt-get install chromium; or set ANGES_CHROMIUM to its path)",
        "sandbox tests: bubblewrap is not installed (Debian: apt-get install bubblewrap)",
    ]


def test_a_bwrap_that_cannot_make_a_sandbox_skips_the_sandbox_group(project):
    tool(project, "chromium", "echo 'Chromium 1.0'")
    tool(project, "bwrap", "echo 'bwrap: No permissions to create new namespace' >&2; exit 1")
    out = run(project)
    assert outcome(out, "test_in_chromium") == "PASSED"
    assert skip_reasons(out) == ["sandbox tests: bwrap cannot make a sandbox here (are unprivileged user namespaces "
                                 "turned off?): exit 1, bwrap: No permissions to create new namespace"]


def test_groups_can_be_skipped_on_purpose_and_a_misspelt_group_is_an_error(project):
    tool(project, "chromium", "echo 'Chromium 1.0'")
    tool(project, "bwrap", "exit 0")
    out = run(project, skip="browser, sandbox")
    assert out.returncode == 0, out.stdout
    assert skip_reasons(out) == ["browser tests: skipped on request (ANGES_TEST_SKIP)",
                                 "sandbox tests: skipped on request (ANGES_TEST_SKIP)"]
    assert outcome(out, "test_anywhere") == "PASSED"
    wrong = run(project, skip="brwoser")
    assert wrong.returncode != 0
    assert "ANGES_TEST_SKIP: unknown test group brwoser (known: browser, sandbox)" in wrong.stdout + wrong.stderr


SAFETY_SAMPLE = textwrap.dedent("""
    import pytest
    from anges.config.loading import load_config

    def test_unmarked():
        safety = load_config().safety
        print("unmarked:", safety.sandbox, safety.approval or "-")

    @pytest.mark.packaged_safety
    def test_marked():
        safety = load_config().safety
        print("marked:", safety.sandbox, safety.approval or "-")
""")


@pytest.mark.parametrize(("bwrap", "skip", "unmarked"), [
    ("exit 0", "", "workspace -"),  # the sandbox works: every test has it
    (None, "", "off auto"),  # no bwrap: commands run without it, unasked
    ("exit 1", "", "off auto"),  # a bwrap that cannot make a sandbox
    ("exit 0", "sandbox", "off auto"),  # the sandbox group skipped on request
])
def test_where_the_sandbox_group_is_skipped_other_tests_run_commands_without_it(project, bwrap, skip, unmarked):
    (project / "tests" / "conftest.py").write_text((TESTS / "conftest.py").read_text())
    (project / "tests" / "test_sample.py").write_text(SAFETY_SAMPLE)
    if bwrap:
        tool(project, "bwrap", bwrap)
    out = run(project, skip, "-s")
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"unmarked: {unmarked}" in out.stdout
    assert "marked: workspace -" in out.stdout  # the packaged settings, whatever the machine
