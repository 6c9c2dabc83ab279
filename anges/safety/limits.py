"""How many processes a sandbox may hold (`safety.max_processes`), so a fork bomb in it stops there.

As an ordinary user the runner sets RLIMIT_NPROC inside the sandbox's own user namespace, where the kernel
counts the sandbox's processes alone. Root is exempt from RLIMIT_NPROC in every namespace, so for root the
sandbox starts in a pids cgroup of its own, where anges can make one (cgroup v1's pids hierarchy, or a v2
cgroup beside its own with the pids controller on); where it cannot, anges says so once.
"""

from __future__ import annotations

import os
import time
from contextlib import suppress

from anges.safety.sandbox import warn_once

CGROUP_ROOT = "/sys/fs/cgroup"
PREFIX = "anges-"


class PidsCgroup:
    """A pids cgroup holding one sandbox: `enter_argv` starts a command inside it; `remove` when it is empty."""

    def __init__(self, path: str):
        self.path = path

    @classmethod
    def make(cls, max_processes: int) -> PidsCgroup | None:
        """A new cgroup limited to `max_processes`, where this process may make one; None otherwise."""
        parent = _parent()
        if parent is None:
            return None
        _remove_stale(parent)
        path = os.path.join(parent, f"{PREFIX}{os.getpid()}-{os.urandom(4).hex()}")
        try:
            os.mkdir(path)
        except OSError:
            return None
        try:
            with open(os.path.join(path, "pids.max"), "w") as limit:
                limit.write(str(max_processes))
        except OSError:
            with suppress(OSError):
                os.rmdir(path)
            return None
        return cls(path)

    def enter_argv(self, argv: list[str]) -> list[str]:
        """`argv` started by a shell that first moves itself into the cgroup (so every descendant is in it)."""
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', os.path.join(self.path, "cgroup.procs"), *argv]

    def remove(self, wait: float = 2.0) -> None:
        """Remove the cgroup once its processes are gone (they end with the sandbox)."""
        deadline = time.monotonic() + wait
        while True:
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    return  # left for the next run's stale sweep
                time.sleep(0.01)


def process_limit(max_processes: int) -> tuple[PidsCgroup | None, list[str]]:
    """How to hold a sandbox to `max_processes`: a cgroup to start it in (root), or the runner's arguments that
    set RLIMIT_NPROC inside it (anyone else)."""
    if os.geteuid() != 0:
        return None, ["--max-processes", str(max_processes)]
    cgroup = PidsCgroup.make(max_processes)
    if cgroup is None:
        warn_once(f"the number of processes in the sandbox is not limited: as root that needs a pids cgroup, and "
                  f"anges cannot make one here ({CGROUP_ROOT} is read-only, or cgroup v2 has no pids controller "
                  "beside this process)")
    return cgroup, []


def _parent() -> str | None:
    """The cgroup directory to make the sandbox's cgroup in (beside this process's own), or None."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as table:
            lines = table.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(","):  # cgroup v1
            return _writable(os.path.join(CGROUP_ROOT, "pids", path.lstrip("/")))
    for line in lines:
        if line.startswith("0::"):  # cgroup v2: beside our own cgroup, which may not hold child cgroups
            own = os.path.join(CGROUP_ROOT, line[3:].lstrip("/"))
            parent = own if own.rstrip("/") == CGROUP_ROOT else os.path.dirname(own.rstrip("/"))
            try:
                with open(os.path.join(parent, "cgroup.subtree_control"), encoding="utf-8") as enabled:
                    if "pids" in enabled.read().split():
                        return _writable(parent)
            except OSError:
                return None
    return None


def _writable(path: str) -> str | None:
    return path if os.path.isdir(path) and os.access(path, os.W_OK) else None


def _remove_stale(parent: str) -> None:
    """Remove the empty cgroups of anges processes that died without removing theirs (kill -9)."""
    with suppress(OSError), os.scandir(parent) as entries:
        for entry in entries:
            pid = entry.name[len(PREFIX):].split("-", 1)[0]
            if entry.name.startswith(PREFIX) and pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                with suppress(OSError):
                    os.rmdir(entry.path)

