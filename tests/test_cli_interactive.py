"""`anges -i` and the terminal view, driven through a real pseudo-terminal."""

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time

from helpers import pids_running, sleep_token, wait_until_running
from test_cli import (
    ANGES,
    complete,
    only_stream,
    scripted,
    shell,
    types,
    wait_for,
)

from anges.store.event_store import EventStore

SGR = re.compile(r"\x1b\[[0-9;]*m")


class Terminal:
    """`anges` running on the slave side of a pty; we type on the master side."""

    def __init__(self, args, cwd, env=None, columns=120):
        env = dict(env or os.environ)
        env["TERM"] = "xterm"
        pid, fd = pty.fork()
        if pid == 0:  # the child: become anges at once
            os.chdir(cwd)
            os.execve(sys.executable, [sys.executable, "-m", "anges", *args], env)
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
        self.pid, self.fd = pid, fd
        self.output = ""
        self.position = 0

    def expect(self, text, timeout=15):
        """Read until `text` appears after the last match; return what came before it."""
        deadline = time.monotonic() + timeout
        while text not in self.output[self.position:]:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"timed out waiting for {text!r}; the screen ends with {self.output[-1500:]!r}"
            if not self._read(remaining):
                raise AssertionError(f"anges closed the terminal before {text!r}; it wrote {self.output[-1500:]!r}")
        found = self.output.index(text, self.position)
        before, self.position = self.output[self.position:found], found + len(text)
        return before

    def send(self, text):
        os.write(self.fd, text.encode())

    def wait(self, timeout=15):
        """The exit code, draining the terminal meanwhile."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
            self._read(0.05)
        os.kill(self.pid, 9)
        raise AssertionError(f"anges did not exit; the screen ends with {self.output[-1500:]!r}")

    def _read(self, timeout):
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return True
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # EIO: the child closed its side
            return False
        self.output += data.decode(errors="replace")
        return bool(data)


def test_interactive_session_follow_ups_ctrl_c_and_ctrl_d(tmp_path, anges_home):
    token = sleep_token()
    model = scripted(tmp_path, complete("first answer"), shell(f"echo $$ > pid.txt; sleep {token}"),
                     complete("third answer"))
    term = Terminal(["-i", "--model", model], cwd=tmp_path)
    banner = term.expect("anges> ")
    assert "exit, quit or Ctrl-D leaves" in banner
    term.send("first task\r")
    assert "first answer" in term.expect("anges> ")
    term.send("a long task\r")
    wait_for(tmp_path / "pid.txt")
    term.send("\x03")  # Ctrl-C while the command runs: stops the task, not the session
    stopped = term.expect("anges> ")
    assert "interrupted" in stopped and "Traceback" not in stopped
    assert not pids_running(token)
    term.send("third\r")
    assert "third answer" in term.expect("anges> ")
    term.send("\x04")  # Ctrl-D leaves
    assert term.wait() == 0
    stream = only_stream()
    assert types(stream) == ["new_request", "task_completion", "follow_up_request", "action", "task_interrupted",
                             "follow_up_request", "task_completion"]
    assert [e.content for e in stream.events_list if "request" in e.type] == ["first task", "a long task", "third"]
    assert stream.events_list[4].data["reason"] == "interrupt"
    history = (anges_home / "history").read_text()
    assert history.splitlines()[-3:] == ["first task", "a long task", "third"]


def test_ctrl_c_at_the_prompt_keeps_the_session_and_exit_leaves(tmp_path, anges_home):
    (anges_home / "history").write_text("an old task\n")
    term = Terminal(["-i", "--model", scripted(tmp_path, complete("ok"))], cwd=tmp_path)
    term.expect("anges> ")
    term.send("half typed")
    term.expect("half typed")
    # CPython's readline loop sees a SIGINT only while it waits in select(); one that lands while it is still
    # redrawing the echo waits for the next key. A person never types that fast; give it a moment.
    time.sleep(0.3)
    term.send("\x03")
    term.expect("anges> ")
    term.send("\x1b[A")  # up arrow: readline history from earlier sessions
    term.expect("an old task")
    term.send("\x15exit\r")  # Ctrl-U clears the line
    assert term.wait() == 0
    assert EventStore().list() == []


def test_interactive_first_task_from_q_then_quit(tmp_path):
    term = Terminal(["-i", "-q", "start here", "--model", scripted(tmp_path, complete("started"))], cwd=tmp_path)
    assert "started" in term.expect("anges> ")
    term.send("quit\r")
    assert term.wait() == 0
    assert only_stream().events_list[0].content == "start here"


def test_interactive_reads_requests_from_a_pipe(tmp_path):
    model = scripted(tmp_path, complete("one done"), complete("two done"))
    out = subprocess.run([*ANGES, "--interactive", "--model", model], cwd=tmp_path, input="one\n\ntwo\nexit\nthree\n",
                         capture_output=True, text=True, env=os.environ.copy(), timeout=30, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "one done\ntwo done\n"
    assert "anges>" not in out.stdout + out.stderr
    assert [e.content for e in only_stream().events_list] == ["one", "one done", "two", "two done"]


def test_interactive_jsonl_reports_each_request(tmp_path):
    model = scripted(tmp_path, complete("a"), complete("b"))
    out = subprocess.run([*ANGES, "-i", "--output", "jsonl", "--model", model], cwd=tmp_path, input="one\ntwo\n",
                         capture_output=True, text=True, env=os.environ.copy(), timeout=30, check=False)
    assert out.returncode == 0, out.stderr
    kinds = [kind for line in out.stdout.splitlines() if (kind := json.loads(line)["type"]) != "delta"]
    assert kinds == ["run_started", "event", "event", "run_finished"] * 2


def test_terminal_gets_colour_and_a_spinner_unless_no_color(tmp_path):
    model = scripted(tmp_path, shell("sleep 0.6"), complete("# Title\n\n- **bold** item\n\n```\ncode\n```"))
    term = Terminal(["-q", "x", "--model", model], cwd=tmp_path)
    assert term.wait() == 0
    screen = term.output
    assert "running sleep 0.6" in screen and re.search(r"running sleep 0\.6 0\.[1-9]s", SGR.sub("", screen))
    assert SGR.search(screen)
    plain = SGR.sub("", screen)
    assert "Title" in plain and "# Title" not in plain and "• bold item" in plain and "    code" in plain

    env = {**os.environ, "NO_COLOR": "1"}
    term = Terminal(["-q", "x", "--model", scripted(tmp_path, shell("true"), complete("done"), name="b.json")],
                    cwd=tmp_path, env=env)
    assert term.wait() == 0
    assert not SGR.search(term.output)
    assert "$ true" in term.output and "done" in term.output


def test_sigterm_during_an_interactive_task_stops_it_and_ends_the_session(tmp_path):
    token = sleep_token()
    model = scripted(tmp_path, shell(f"echo $$ > pid.txt; sleep {token}"), complete("never"))
    term = Terminal(["-i", "--model", model], cwd=tmp_path)
    term.expect("anges> ")
    term.send("a long task\r")
    wait_for(tmp_path / "pid.txt")
    wait_until_running(token)
    os.kill(term.pid, 15)  # SIGTERM: a service manager stopping us, not a person pressing Ctrl-C
    assert term.wait() == 4
    assert "anges> " not in term.output[term.position:]
    assert not pids_running(token)
    last = only_stream().events_list[-1]
    assert last.type == "task_interrupted" and last.data["by"] == "SIGTERM"
