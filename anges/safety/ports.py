"""Which TCP ports a command listens on, read from /proc: for the run's runner, which loads this file by its path (it
runs as a script and imports only the standard library), and for a command anges starts itself (`shell`)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

WATCH_INTERVAL = 0.2
"""Seconds between two looks at whether a watched command listens on a port."""


class PortWatch:
    """Notices when a command's processes (its session) listen on a TCP port outside the ephemeral range (where a
    test's server on port 0 lands). The socket tables are slow to read (the kernel walks every socket of the
    machine), so they are read only for sockets new to the watch: a socket is looked up twice (it is made a moment
    before it listens), then no more."""

    def __init__(self, session: int):
        self.session = session
        bounds = [int(word) for word in "".join(_read_lines("/proc/sys/net/ipv4/ip_local_port_range")).split()]
        self.skip = range(bounds[0], bounds[1] + 1) if len(bounds) == 2 else range(32768, 61000)
        self.looks: dict[int, int] = {}
        """Socket inode -> times it was looked up, for the sockets the command holds now."""

    def check(self) -> list[int]:
        """The ports outside `skip` the command listens on now ([] if none)."""
        self.looks = {inode: self.looks.get(inode, 0) for inode in _session_sockets(self.session)}
        fresh = [inode for inode, looks in self.looks.items() if looks < 2]
        listening = _listening() if fresh else {}
        for inode in fresh:
            self.looks[inode] = 2 if inode in listening else self.looks[inode] + 1
        return sorted({port for inode in fresh if (port := listening.get(inode)) is not None and port not in self.skip})


class PortWatcher:
    """A thread that tells each watched command, once, the ports it starts listening on."""

    def __init__(self) -> None:
        self.watches: dict[int, tuple[PortWatch, Callable[[list[int]], object]]] = {}
        self.lock = threading.Lock()
        self.wake = threading.Event()
        threading.Thread(target=self._run, name="ports", daemon=True).start()

    def add(self, session: int, tell: Callable[[list[int]], object]) -> None:
        """Watch the command whose session is `session`; `tell(ports)` once it listens."""
        with self.lock:
            self.watches[session] = (PortWatch(session), tell)
        self.wake.set()

    def discard(self, session: int) -> None:
        """Stop watching (the command ended)."""
        with self.lock:
            self.watches.pop(session, None)

    def _run(self) -> None:
        while True:
            self.wake.wait()
            time.sleep(WATCH_INTERVAL)
            with self.lock:
                watches = list(self.watches.items())
                if not watches:
                    self.wake.clear()
            for session, (watch, tell) in watches:
                ports = watch.check()
                if ports:
                    self.discard(session)
                    tell(ports)


def _listening() -> dict[int, int]:
    """Socket inode -> port of every TCP socket listening in this network namespace."""
    found = {}
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        for row in _read_lines(table)[1:]:
            fields = row.split()
            if len(fields) > 9 and fields[3] == "0A":  # TCP_LISTEN
                found[int(fields[9])] = int(fields[1].rsplit(":", 1)[1], 16)
    return found


def _session_sockets(session: int) -> set[int]:
    """The inodes of the sockets the processes of `session` hold."""
    links = []
    for pid in (name for name in os.listdir("/proc") if name.isdigit() and _session(name) == session):
        try:
            links += [_readlink(entry.path) for entry in os.scandir(f"/proc/{pid}/fd")]
        except OSError:  # gone meanwhile
            continue
    return {int(link[8:-1]) for link in links if link.startswith("socket:[") and link[8:-1].isdigit()}


def _session(pid: str) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return 0
    return int(stat[stat.rfind(b")") + 2:].split()[3])


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:  # closed meanwhile
        return ""


def _read_lines(path: str) -> list[str]:
    try:
        with open(path) as handle:
            return handle.read().splitlines()
    except OSError:
        return []
