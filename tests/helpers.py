"""Small helpers shared by tests."""

from pathlib import Path


def process_alive(pid: int) -> bool:
    """True when `pid` exists and is not a zombie (this container's init does not reap orphans)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
