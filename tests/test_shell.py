import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import pids_running, sleep_token

from anges.safety.shell import CommandResult, run_command, scrubbed_environment
from anges.util.masking import CREDENTIAL_ENV_VARS, mask_secrets, secret_values

REPO_ROOT = Path(__file__).resolve().parent.parent


def is_running(pid: int) -> bool:
    """True if `pid` is a live process; zombies count as gone because PID 1 may never reap them."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # gone, or exiting as we read
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


def wait_until(condition, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def read_pids(path: Path) -> list[int]:
    return [int(word) for word in path.read_text().split()]


def test_captures_stdout_and_exit_code(tmp_path):
    result = run_command("echo hello", cwd=tmp_path)

    assert result.exit_code == 0
    assert result.stdout == "hello\n"
    assert result.stderr == ""
    assert not result.timed_out and not result.interrupted
    assert result.duration > 0


def test_nonzero_exit_code_and_stderr_are_reported_separately(tmp_path):
    result = run_command("echo out; echo oops >&2; exit 3", cwd=tmp_path)

    assert result.exit_code == 3
    assert result.stdout == "out\n"
    assert result.stderr == "oops\n"


def test_runs_in_cwd_whose_path_has_spaces(tmp_path):
    cwd = tmp_path / "my project dir"
    cwd.mkdir()

    result = run_command("pwd; echo data > made.txt", cwd=cwd)

    assert result.exit_code == 0
    assert result.stdout.strip() == str(cwd)
    assert (cwd / "made.txt").read_text() == "data\n"


def test_runs_with_bash(tmp_path):
    result = run_command("echo ${BASH_VERSION:+bash}; [[ 1 == 1 ]] && echo brackets", cwd=tmp_path)

    assert result.stdout == "bash\nbrackets\n"


def test_stdin_is_closed(tmp_path):
    result = run_command("cat; echo done", cwd=tmp_path, timeout=10)

    assert not result.timed_out
    assert result.stdout == "done\n"


def test_prefix_cmd_is_a_shell_fragment_run_before_the_command(tmp_path):
    (tmp_path / "activate.sh").write_text("export GREETING=hi-from-venv\n")

    result = run_command('echo "$GREETING"', cwd=tmp_path, prefix_cmd="source activate.sh &&")

    assert result.stdout == "hi-from-venv\n"


def test_prefix_cmd_can_wrap_the_command(tmp_path):
    result = run_command("printenv WRAPPED", cwd=tmp_path, prefix_cmd="env WRAPPED=yes")

    assert result.exit_code == 0
    assert result.stdout == "yes\n"


def test_missing_cwd_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        run_command("true", cwd=tmp_path / "absent")


def test_timeout_kills_the_whole_process_group_including_grandchildren(tmp_path):
    command = "echo started; bash -c 'sleep 100 & echo $! > inner.pid; echo $$ >> inner.pid; wait'; true"

    result = run_command(command, cwd=tmp_path, timeout=1)

    assert result.timed_out
    assert result.exit_code is None
    assert result.stdout == "started\n"
    assert result.duration < 3
    pids = read_pids(tmp_path / "inner.pid")
    assert len(pids) == 2
    assert wait_until(lambda: not any(is_running(pid) for pid in pids), 2)


def test_timeout_escalates_to_sigkill_when_sigterm_is_ignored(tmp_path):
    command = "trap '' TERM; echo $$ > leader.pid; while true; do sleep 0.05; done"

    result = run_command(command, cwd=tmp_path, timeout=0.5)

    assert result.timed_out
    assert result.duration < 2
    assert wait_until(lambda: not is_running(read_pids(tmp_path / "leader.pid")[0]), 2)


def test_timeout_applies_after_the_command_closes_its_output(tmp_path):
    result = run_command("exec >&- 2>&-; sleep 100", cwd=tmp_path, timeout=0.5)

    assert result.timed_out
    assert result.exit_code is None


def test_works_without_pidfd_support(tmp_path, monkeypatch):
    monkeypatch.delattr(os, "pidfd_open", raising=False)

    finished = run_command("echo done; exit 4", cwd=tmp_path)
    closed_early = run_command("exec >&- 2>&-; sleep 0.2; exit 5", cwd=tmp_path, timeout=10)
    stopped = run_command("sleep 100", cwd=tmp_path, timeout=0.3)

    assert (finished.exit_code, finished.stdout) == (4, "done\n")
    assert closed_early.exit_code == 5
    assert stopped.timed_out


def test_interrupt_stops_a_running_command_promptly(tmp_path):
    started = time.monotonic()
    checks = []

    def interrupt_check() -> bool:
        checks.append(time.monotonic())
        return time.monotonic() - started > 0.3

    result = run_command("sleep 60 & echo $! > bg.pid; sleep 60", cwd=tmp_path, interrupt_check=interrupt_check)

    assert time.monotonic() - started < 2
    assert result.interrupted
    assert not result.timed_out
    assert result.exit_code is None
    assert len(checks) >= 3
    assert wait_until(lambda: not is_running(read_pids(tmp_path / "bg.pid")[0]), 2)


def test_interrupt_check_that_stays_false_lets_the_command_finish(tmp_path):
    result = run_command("sleep 0.2; echo finished", cwd=tmp_path, interrupt_check=lambda: False)

    assert result.exit_code == 0
    assert result.stdout == "finished\n"
    assert not result.interrupted


def test_returns_when_the_shell_exits_even_if_a_background_child_keeps_the_pipes(tmp_path):
    result = run_command("sleep 30 & echo $! > bg.pid; echo parent done", cwd=tmp_path, timeout=10)

    try:
        assert not result.timed_out
        assert result.exit_code == 0
        assert result.stdout == "parent done\n"
    finally:
        os.kill(read_pids(tmp_path / "bg.pid")[0], signal.SIGKILL)


def test_large_output_keeps_whole_lines_at_head_and_tail_and_counts_the_middle(tmp_path):
    full = "".join(f"{n}\n" for n in range(1, 20001))

    result = run_command("seq 1 20000", cwd=tmp_path, output_cap=1000)

    marker = re.search(r"\n\.\.\. \[(\d+) lines \((\d+) bytes\) cut\] \.\.\.\n", result.stdout)
    head, tail = result.stdout[: marker.start() + 1], result.stdout[marker.end():]
    first, last = head.splitlines(), tail.splitlines()
    assert first == [str(n) for n in range(1, len(first) + 1)] and head.endswith("\n")
    assert last == [str(n) for n in range(20001 - len(last), 20001)]
    assert len(head) + len(tail) <= 1000 and len(head) + len(tail) > 900
    assert int(marker.group(1)) == 20000 - len(first) - len(last)
    assert int(marker.group(2)) == result.stdout_omitted == len(full) - len(head) - len(tail)
    assert (result.stdout_bytes, result.stdout_lines) == (len(full), 20000)
    assert result.stderr_omitted == 0


def test_one_huge_line_is_cut_by_characters(tmp_path):
    result = run_command("head -c 100000 /dev/zero | tr '\\0' x", cwd=tmp_path, output_cap=1000)

    head, tail = re.split(r"\n\.\.\. \[0 lines \(\d+ bytes\) cut\] \.\.\.\n", result.stdout)
    assert head == "x" * 500 and tail == "x" * 500
    assert (result.stdout_omitted, result.stdout_bytes, result.stdout_lines) == (99000, 100000, 1)


def test_stdout_and_stderr_share_the_cap_and_a_short_stream_leaves_its_share_to_the_other(tmp_path):
    result = run_command("seq 1 5000 >&2; echo small", cwd=tmp_path, output_cap=200)

    assert result.stdout == "small\n"
    assert result.stdout_omitted == 0
    assert result.stderr.endswith("5000\n") and "lines (" in result.stderr
    kept = len(re.sub(r"\n\.\.\. \[.*\] \.\.\.\n", "\n", result.stderr)) - 1
    assert 150 < kept <= 200 - len("small\n")


def test_the_whole_output_goes_to_a_file_only_when_it_is_cut(tmp_path):
    files = tmp_path / "out"
    files.mkdir()

    small = run_command("seq 1 10", cwd=tmp_path, output_cap=1000, output_dir=str(files))
    large = run_command("seq 1 3000; echo problem >&2; seq 3001 6000", cwd=tmp_path, output_cap=1000,
                        output_dir=str(files))

    assert small.output_path is None and small.stdout_omitted == 0
    assert [p.name for p in files.iterdir()] == [Path(large.output_path).name]
    saved = Path(large.output_path).read_text()
    assert saved.replace("problem\n", "") == "".join(f"{n}\n" for n in range(1, 6001))
    assert "problem\n" in saved and large.stderr == "problem\n"


def test_the_output_file_keeps_the_newest_bytes_past_its_cap(tmp_path):
    result = run_command("seq 1 200000", cwd=tmp_path, output_cap=1000, output_dir=str(tmp_path), log_cap=300_000)

    saved = Path(result.output_path).read_text()
    dropped = int(re.match(r"\[anges: the oldest (\d+) bytes of this log were dropped\]\n", saved).group(1))
    assert saved.endswith("199999\n200000\n") and len(saved) < 300_000
    assert dropped + len(saved.split("\n", 1)[1]) == result.stdout_bytes


def test_a_command_still_running_at_its_yield_point_goes_on_in_the_background(tmp_path):
    token = sleep_token()
    command = f"echo started; echo warming >&2; sleep {token}; echo never"
    started = time.monotonic()

    result = run_command(command, cwd=tmp_path, timeout=600, yield_after=0.5, output_dir=str(tmp_path))

    try:
        assert time.monotonic() - started < 5
        assert result.yielded and result.exit_code is None and not result.timed_out
        assert (result.stdout, result.stderr) == ("started\n", "warming\n")
        assert result.log_path == result.output_path and Path(result.log_path).parent == tmp_path
        assert Path(result.log_path).read_text() in ("started\nwarming\n", "warming\nstarted\n")
        assert pids_running(token)
    finally:
        os.killpg(result.pid, signal.SIGKILL)
    assert wait_until(lambda: not pids_running(token), 5)


def test_the_log_of_a_yielded_command_goes_on_after_the_yield(tmp_path):
    result = run_command("echo one; sleep 1; echo two", cwd=tmp_path, yield_after=0.3, output_dir=str(tmp_path))

    assert result.yielded and result.stdout == "one\n"
    assert wait_until(lambda: Path(result.log_path).read_text() == "one\ntwo\n", 5)


def test_a_command_that_ends_before_its_yield_point_is_an_ordinary_result(tmp_path):
    result = run_command("sleep 0.2; echo done", cwd=tmp_path, yield_after=5, output_dir=str(tmp_path))

    assert (result.exit_code, result.stdout, result.yielded, result.pid) == (0, "done\n", False, None)
    assert list(tmp_path.iterdir()) == []


def test_no_yield_point_waits_until_the_timeout(tmp_path):
    result = run_command("sleep 100", cwd=tmp_path, timeout=0.5, yield_after=0)

    assert result.timed_out and not result.yielded


def test_output_below_the_cap_is_untouched(tmp_path):
    result = run_command("seq 1 100", cwd=tmp_path, output_cap=1000)

    assert result.stdout == "".join(f"{n}\n" for n in range(1, 101))
    assert result.stdout_omitted == 0


def test_a_gigabyte_of_output_does_not_grow_memory(tmp_path):
    script = textwrap.dedent(
        """
        import json, sys
        from anges.safety.shell import run_command

        def peak_kb():
            for line in open("/proc/self/status"):
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])

        run_command("echo warm", cwd=sys.argv[1])
        before = peak_kb()
        result = run_command("yes | head -c 1000000000", cwd=sys.argv[1], timeout=120)
        print(json.dumps({"growth_kb": peak_kb() - before, "omitted": result.stdout_omitted, "size": result.stdout_bytes,
                          "length": len(result.stdout), "exit_code": result.exit_code,
                          "start": result.stdout[:6], "end": result.stdout[-6:]}))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    completed = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], check=False, env=env, capture_output=True, text=True, timeout=120
    )

    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout)
    assert report["exit_code"] == 0
    assert report["omitted"] == 1_000_000_000 - 8000 and report["size"] == 1_000_000_000
    assert report["growth_kb"] < 100 * 1024
    assert report["start"] == "y\ny\ny\n"
    assert report["end"] == "y\ny\ny\n"


def test_undecodable_output_is_replaced_not_fatal(tmp_path):
    result = run_command(r"printf 'ok\xff\xfe done\n'; printf '\xc3' >&2", cwd=tmp_path)

    assert result.exit_code == 0
    assert result.stdout == "ok\ufffd\ufffd done\n"
    assert result.stderr == "\ufffd"


def test_background_command_returns_at_once_with_a_live_pid_and_a_log(tmp_path):
    command = "echo begin; echo problem >&2; while true; do echo tick; sleep 0.05; done"

    result = run_command(command, cwd=tmp_path, background=True, log_dir=str(tmp_path))

    try:
        assert result.duration < 2
        assert result.exit_code is None
        assert is_running(result.pid)
        assert Path(result.log_path).parent == tmp_path
        log = Path(result.log_path)
        assert wait_until(lambda: log.read_text().count("tick") >= 3)
        assert "begin\n" in log.read_text() and "problem\n" in log.read_text()
    finally:
        os.killpg(result.pid, signal.SIGKILL)
    assert wait_until(lambda: not is_running(result.pid), 2)


def test_background_command_runs_in_its_own_session(tmp_path):
    result = run_command("sleep 30", cwd=tmp_path, background=True, log_dir=str(tmp_path))

    try:
        assert os.getsid(result.pid) == result.pid
        assert os.getsid(result.pid) != os.getsid(0)
    finally:
        os.killpg(result.pid, signal.SIGKILL)


def test_background_log_defaults_to_the_temp_dir(tmp_path):
    result = run_command("echo in-background", cwd=tmp_path, background=True)

    log = Path(result.log_path)
    try:
        assert log.is_file()
        assert wait_until(lambda: log.read_text() == "in-background\n")
    finally:
        log.unlink()


def test_secrets_are_masked_in_stdout_and_stderr(tmp_path):
    env = {**os.environ, "TOKEN": "sk-very-secret-123", "PIN": "1234"}

    result = run_command(
        'echo "token=$TOKEN"; echo "$TOKEN" >&2; echo "pin=$PIN"',
        cwd=tmp_path,
        env=env,
        secrets=["sk-very-secret-123", "1234"],
    )

    assert result.stdout == "token=[REDACTED]\npin=1234\n"
    assert result.stderr == "[REDACTED]\n"


def test_default_environment_is_scrubbed(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-leak-value")
    monkeypatch.setenv("HARMLESS_SETTING", "visible")

    result = run_command("env", cwd=tmp_path)

    assert "sk-openai-leak-value" not in result.stdout
    assert "HARMLESS_SETTING=visible" in result.stdout


def test_scrubbed_environment_hides_credentials_unless_passed_through(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-leak-value")
    monkeypatch.setenv("ANGES_UI_PASSWORD", "ui-password-value")
    monkeypatch.setenv("SOMEVENDOR_API_KEY", "vendor-key-value")
    monkeypatch.setenv("PATH_EXTRA", "kept-value")

    hidden = run_command("env", cwd=tmp_path, env=scrubbed_environment())
    shown = run_command("env", cwd=tmp_path, env=scrubbed_environment(pass_through=["OPENAI_API_KEY"]))

    for leaked in ("sk-openai-leak-value", "ui-password-value", "vendor-key-value"):
        assert leaked not in hidden.stdout
    assert "PATH_EXTRA=kept-value" in hidden.stdout
    assert "OPENAI_API_KEY=sk-openai-leak-value" in shown.stdout
    assert "vendor-key-value" not in shown.stdout


def test_credential_names_cover_the_providers():
    assert {"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "ANGES_UI_PASSWORD"} <= set(CREDENTIAL_ENV_VARS)


def test_secret_values_lists_credentials_long_enough_to_mask():
    environ = {
        "OPENAI_API_KEY": "sk-long-enough",
        "ANGES_UI_PASSWORD": "short",
        "GEMINI_API_KEY": "",
        "CUSTOM_API_KEY": "custom-secret",
        "HOME": "/home/someone/long",
    }

    assert sorted(secret_values(environ)) == ["custom-secret", "sk-long-enough"]


def test_mask_secrets_masks_longest_first_and_skips_short_values():
    text = "abcdefgh-suffix and abcdefgh and short"

    masked = mask_secrets(text, ["abcdefgh", "abcdefgh-suffix", "short"])

    assert masked == "[REDACTED] and [REDACTED] and short"


def test_to_data_is_json_facts_without_outputs(tmp_path):
    result = run_command("echo out; exit 2", cwd=tmp_path)

    data = json.loads(json.dumps(result.to_data()))

    assert data == {
        "command": "echo out; exit 2",
        "exit_code": 2,
        "duration": round(result.duration, 3),  # to the millisecond
        "timed_out": False,
        "interrupted": False,
        "stdout_omitted": 0,
        "stderr_omitted": 0,
        "pid": None,
        "log_path": None,
        "stdout_bytes": 4,
        "stderr_bytes": 0,
        "stdout_lines": 1,
        "stderr_lines": 0,
        "output_path": None,
        "yielded": False,
        "output_dropped": 0,
    }


def test_result_is_a_plain_dataclass():
    result = CommandResult("true", 0, "", "", 0.01)

    assert result.pid is None and result.log_path is None and not result.timed_out


def test_a_secret_straddling_the_output_cut_leaves_no_fragment(tmp_path):
    secret = "sk-live-ABCDEFGHIJKLMNOP"
    script = f"printf '%s' \"$(printf 'a%.0s' $(seq 45)){secret}$(printf 'b%.0s' $(seq 300)){secret}$(printf 'c%.0s' $(seq 40))\""
    result = run_command(script, cwd=tmp_path, output_cap=100, secrets=[secret])
    head, tail = result.stdout.split(" bytes) cut] ...")
    assert result.stdout_omitted > 0
    assert head.startswith("a" * 45 + "[REDACTED]") and tail.endswith("[REDACTED]" + "c" * 40)
    for size in range(4, len(secret)):
        assert secret[:size] not in result.stdout and secret[-size:] not in result.stdout


def test_known_secrets_are_masked_in_the_output_file_and_in_a_background_log(tmp_path):
    secret = "sk-live-ABCDEFGHIJKLMNOP0123456789"
    printer = f"yes 'before {secret} after' | head -n 20000"

    full = run_command(printer, cwd=tmp_path, output_cap=1000, output_dir=str(tmp_path), secrets=[secret])
    job = run_command(printer, cwd=tmp_path, background=True, log_dir=str(tmp_path), secrets=[secret])

    masked = ["before [REDACTED] after"] * 20000  # every line, those a read split included
    assert Path(full.output_path).read_text().splitlines() == masked
    log = Path(job.log_path)
    assert wait_until(lambda: log.read_text().count("\n") == 20000, 10)
    assert log.read_text().splitlines() == masked


def test_the_end_of_a_stream_that_looks_like_a_secrets_start_is_written_at_the_end(tmp_path):
    secret = "sk-live-ABCDEFGHIJKLMNOP0123456789"

    result = run_command("seq 1 2000; printf 'tail sk-live-ABC'", cwd=tmp_path, output_cap=500,
                         output_dir=str(tmp_path), secrets=[secret])

    assert Path(result.output_path).read_text().endswith("2000\ntail sk-live-ABC")
