"""Small helpers shared by tests."""

import os
import sys
import time
from pathlib import Path


def process_alive(pid: int) -> bool:
    """True when `pid` exists and is not a zombie (this container's init does not reap orphans)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_for_pid(pid_file: Path, timeout: float = 15) -> int:
    """Wait until a command has written its pid to `pid_file`; return it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pid_file.exists() and pid_file.read_text().strip():
            return int(pid_file.read_text())
        time.sleep(0.05)
    raise AssertionError(f"no pid in {pid_file} after {timeout} s")


def sleep_token() -> str:
    """A `sleep` duration unique to one test, so its processes can be found by command line from outside a sandbox
    (inside one, `$!` and `$$` are pids of the sandbox's own PID namespace)."""
    import random

    return f"{random.randint(5000, 9999)}.{random.randint(0, 999999):06d}"


def wait_until_running(token: str, timeout: float = 15) -> list[int]:
    """Wait until a process whose command line contains `token` is live (a shell may write its pid before it
    execs the command); return the pids."""
    deadline = time.monotonic() + timeout
    while not (found := pids_running(token)):
        assert time.monotonic() < deadline, f"no process with {token!r} in its command line after {timeout} s"
        time.sleep(0.02)
    return found


def running_soon(token: str, timeout: float = 10) -> bool:
    """Whether a process with `token` in its command line is live within `timeout` seconds (a backgrounded
    `sleep` may not have been exec'd yet when the command that started it returns)."""
    deadline = time.monotonic() + timeout
    while not pids_running(token):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def pids_running(token: str) -> list[int]:
    """Live (not zombie) processes whose command line contains `token`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if token in cmdline and process_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


SANDBOX_PYTHON = os.path.realpath(sys.executable)
"""A Python for commands run in the sandbox: the interpreter itself, since a virtualenv under /tmp is out of sight
there (the sandbox's /tmp is private). It has only the standard library."""
