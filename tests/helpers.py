"""Small helpers shared by tests."""

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
