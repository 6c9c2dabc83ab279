"""The process that starts a run's commands and owns them, inside the sandbox or not; one per run.

The agent starts it as a script (`python -I -S runner.py CONTROL_FD [--namespace] [--parent PID]`), so it
imports only the standard library (and `ports.py` beside it, by its path). Requests come over the control
socket (SOCK_SEQPACKET): each message is a small JSON object and carries, by SCM_RIGHTS, a stream socket of its
own ("the op socket") plus the command's stdout and stderr. On the op socket the agent sends the request (one
JSON line: argv, cwd, env, and `watch_ports` to hear when it listens on a TCP port) and later `{"kill": grace}`;
the runner answers `{"pid": N}` or `{"error": ..., "errno": N}`, then `{"listening": [port, ...]}` if it starts
listening and `{"exit": code}` when the command's shell ends and `{"killed": true}` after a kill. Closing an op
socket kills what is left of that command. `{"op": "end", "keep": [sessions]}` ends every process of the run
but those sessions; the control socket's end (or SIGTERM) ends them all and the runner.

With `--namespace` the runner is inside bwrap's PID namespace, so the run's processes are every process
it can see. Without, it is a child subreaper: orphans of the run (`&`, `nohup`, `setsid`, daemons)
become its children, so the run's processes are its descendants; and every command's environment carries
`ANGES_RUN=TOKEN` (`--token`), which finds those that escaped the tree by killing the runner itself.
"""

from __future__ import annotations

import array
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

KILL_GRACE = 0.5
MARKER = "ANGES_RUN"
PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
MAX_FDS = 4
HOST_CAPABILITIES = {"CAP_SYS_MODULE": 16, "CAP_SYS_RAWIO": 17, "CAP_SYS_PTRACE": 19, "CAP_SYS_ADMIN": 21,
                     "CAP_SYS_BOOT": 22, "CAP_MAC_OVERRIDE": 32, "CAP_MAC_ADMIN": 33, "CAP_SYSLOG": 34,
                     "CAP_PERFMON": 38, "CAP_BPF": 39, "CAP_CHECKPOINT_RESTORE": 40}
"""What root's commands outside the sandbox lose (`--drop-caps`): with them a command could unmount the runner's
/proc and see the host's processes, read another process's memory or environment (the agent's API key), load
kernel code, or push keystrokes into a terminal (TIOCSTI) that is not its own. Root keeps the rest (file
ownership and permissions, users, network administration)."""


# -- process groups (also used by anges.safety.shell) ------------------------------------------------------------------


def signal_group(pgid: int, signum: int) -> bool:
    """Send `signum` to a process group; False when the group is gone or not ours to signal."""
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        # PermissionError: a prefix such as `sudo -u bob` leaves processes we may not signal.
        return False
    return True


def group_alive(pgid: int) -> bool:
    """True while a member of the group is running; zombies do not count, since init may never reap them."""
    if not os.path.isdir("/proc/self"):
        return signal_group(pgid, 0)
    return any(_stat(pid)[2] == pgid for pid in _running_pids())


def kill_group(pgid: int, grace: float = KILL_GRACE, poll=None) -> None:
    """SIGTERM the group, give it `grace` seconds, then SIGKILL what is left; `poll` reaps the leader meanwhile."""
    if not signal_group(pgid, signal.SIGTERM):
        return
    deadline = time.monotonic() + grace
    try:
        while time.monotonic() < deadline:
            if poll is not None:
                poll()
            if not group_alive(pgid):
                return
            time.sleep(0.01)
    except BaseException:
        # A second Ctrl-C (KeyboardInterrupt) cuts the grace short: the group must still not outlive us.
        signal_group(pgid, signal.SIGKILL)
        raise
    signal_group(pgid, signal.SIGKILL)


def _running_pids() -> list[int]:
    """Pids of the processes in /proc that are not zombies."""
    pids = []
    with os.scandir("/proc") as entries:
        for entry in entries:
            if entry.name.isdigit() and _stat(int(entry.name))[0] not in ("", "Z", "X"):
                pids.append(int(entry.name))
    return pids


def _stat(pid: int) -> tuple[str, int, int, int]:
    """(state, ppid, pgid, session) of a process; ("", 0, 0, 0) when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return "", 0, 0, 0
    state, ppid, pgid, session = stat[stat.rfind(b")") + 2:].split()[:4]
    return state.decode(), int(ppid), int(pgid), int(session)


# -- framing --------------------------------------------------------------------------------------------------


class Channel:
    """Newline-delimited JSON messages over a stream socket."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buffer = b""
        self.messages: list[dict] = []
        self.ended = False
        """The peer closed its end (or this end was closed): nothing more will arrive."""
        self.lock = threading.Lock()

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, message: dict) -> bool:
        """Send one message; False when the peer is gone."""
        data = json.dumps(message).encode() + b"\n"
        with self.lock:
            try:
                self.sock.sendall(data)
            except OSError:
                return False
        return True

    def pump(self) -> bool:
        """Read what is there (the socket is readable); False at end of stream."""
        try:
            chunk = self.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            chunk = b""
        if not chunk:
            self.ended = True
            return False
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        self.messages += [json.loads(line) for line in lines if line.strip()]
        return True

    def fill(self, timeout: float | None) -> bool:
        """Wait up to `timeout` seconds (None = forever) until a message is queued; False on timeout or at the end."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.messages and not self.ended:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            readable, _, _ = select_read([self.sock], left)
            if readable:
                self.pump()
        return bool(self.messages)

    def receive(self, timeout: float | None) -> dict | None:
        """The next message, waiting up to `timeout` seconds; None on timeout or at the end of the stream."""
        return self.messages.pop(0) if self.fill(timeout) else None

    def close(self) -> None:
        self.ended = True
        self.sock.close()


def select_read(items: list, timeout: float | None):
    import select

    try:
        return select.select(items, [], [], timeout)
    except InterruptedError:
        return [], [], []


def send_fds(control: socket.socket, message: dict, fds: list[int]) -> None:
    """Send a control message with file descriptors attached."""
    data = json.dumps(message).encode()
    control.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])


def receive_fds(control: socket.socket) -> tuple[dict | None, list[int]]:
    """One control message and its file descriptors; (None, []) at end of stream."""
    fds = array.array("i")
    data, ancillary, _flags, _address = control.recvmsg(65536, socket.CMSG_SPACE(MAX_FDS * fds.itemsize))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
    if not data:
        for fd in fds:
            os.close(fd)
        return None, []
    return json.loads(data), list(fds)


# -- the server -----------------------------------------------------------------------------------------------


class _Op:
    """One request: its op socket, and the command it started."""

    def __init__(self, channel: Channel, fds: list[int]):
        self.channel = channel
        self.fds = fds
        self.proc: subprocess.Popen | None = None
        self.exited = False


class Server:
    """Starts commands on request, reaps every child, and ends the run's processes on request or at the end."""

    def __init__(self, control: socket.socket, namespace: bool, token: str = ""):
        self.control = control
        self.namespace = namespace
        self.token = token
        self.selector = selectors.DefaultSelector()
        self.lock = threading.Lock()
        self.children: dict[int, _Op] = {}
        self.groups: set[int] = set()
        self.spawned = threading.Event()
        self.ports: Any = None
        """The port watcher (`ports.PortWatcher`), made when a command first asks for it."""
        self._wake_read, self._wake_write = os.pipe()

    def serve(self) -> None:
        """Answer requests until the control socket closes, then end every process of the run."""
        threading.Thread(target=self._reap, name="reaper", daemon=True).start()
        self.selector.register(self.control, selectors.EVENT_READ, None)
        self.selector.register(self._wake_read, selectors.EVENT_READ, "stop")
        self.control.send(b"ready")
        try:
            while True:
                for key, _ in self.selector.select():
                    if key.data == "stop" or (key.data is None and not self._control_message()):
                        return
                    if isinstance(key.data, _Op):
                        self._op_message(key.data)
        finally:
            self.end_processes(keep=())

    def stop(self, signum=None, frame=None) -> None:
        """End the run (a signal handler: it only wakes the loop, so it cannot cut the cleanup short)."""
        os.write(self._wake_write, b"x")

    def _control_message(self) -> bool:
        message, fds = receive_fds(self.control)
        if message is None:
            return False
        channel = Channel(socket.socket(fileno=fds[0]))
        op = _Op(channel, fds[1:])
        if message.get("op") == "end":
            keep = set(message.get("keep") or ())
            _meanwhile(self._end_and_reply, op, keep)
            return True
        self.selector.register(channel.sock, selectors.EVENT_READ, op)
        return True

    def _op_message(self, op: _Op) -> None:
        if not op.channel.pump():
            self.selector.unregister(op.channel.sock)
            if op.proc is not None and not op.exited:
                signal_group(op.proc.pid, signal.SIGKILL)
            self._close_fds(op)
            op.channel.close()
            return
        while op.channel.messages:
            message = op.channel.messages.pop(0)
            if op.proc is None and "argv" in message:
                self._spawn(op, message)
            elif "kill" in message and op.proc is not None:
                grace = message["kill"] if isinstance(message["kill"], (int, float)) else KILL_GRACE
                _meanwhile(self._kill_and_reply, op, op.proc.pid, grace)

    def _spawn(self, op: _Op, request: dict) -> None:
        try:
            out, err = op.fds
            env = {**request["env"], MARKER: self.token} if self.token else request["env"]
            with self.lock:
                op.proc = subprocess.Popen(request["argv"], cwd=request["cwd"], env=env,
                                           stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True)
                self.children[op.proc.pid] = op
                self.groups.add(op.proc.pid)
                if request.get("watch_ports"):
                    self.ports = self.ports or _load_ports().PortWatcher()
                    self.ports.add(op.proc.pid, lambda ports, send=op.channel.send: send({"listening": ports}))
                op.channel.send({"pid": op.proc.pid})
            self.spawned.set()
        except OSError as exc:
            op.channel.send({"error": exc.strerror or str(exc), "errno": exc.errno or 0})
        except Exception as exc:  # a request no command can be started from: it fails, the runner goes on
            op.channel.send({"error": f"{type(exc).__name__}: {exc}", "errno": 0})
        finally:
            self._close_fds(op)

    def _close_fds(self, op: _Op) -> None:
        for fd in op.fds:
            os.close(fd)
        op.fds = []

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                self.spawned.wait(1.0)
                self.spawned.clear()
                continue
            except InterruptedError:
                continue
            with self.lock:
                op = self.children.pop(pid, None)
                if op is not None and op.proc is not None:  # children holds the ops that started a command
                    op.proc.returncode = os.waitstatus_to_exitcode(status)
                    op.exited = True
                    op.channel.send({"exit": op.proc.returncode})
                    if self.ports is not None:
                        self.ports.discard(pid)

    def _kill_and_reply(self, op: _Op, pid: int, grace: float) -> None:
        kill_group(pid, grace)
        op.channel.send({"killed": True})

    def _end_and_reply(self, op: _Op, keep: set[int]) -> None:
        self.end_processes(keep)
        op.channel.send({"ended": True})
        op.channel.close()

    def end_processes(self, keep) -> None:
        """SIGTERM every process of the run outside the `keep` sessions, then SIGKILL what outlives the grace."""
        deadline = time.monotonic() + KILL_GRACE
        warned: set[int] = set()
        while True:
            targets = self._run_processes(keep)
            if not targets or time.monotonic() > deadline + 2:
                return  # all gone, or some unkillable (uninterruptible sleep): nothing more we can do
            late = time.monotonic() >= deadline
            for pid in targets:
                if late or pid not in warned:
                    _kill(pid, signal.SIGKILL if late else signal.SIGTERM)
                    warned.add(pid)
            time.sleep(0.01)

    def _run_processes(self, keep) -> list[int]:
        if not os.path.isdir("/proc/self"):
            return [pgid for pgid in self.groups if pgid not in keep and signal_group(pgid, 0)]
        me = os.getpid()
        stats = {pid: _stat(pid) for pid in _all_pids()}  # zombies too: a zombie's live children are still ours
        if self.namespace:
            mine = {pid for pid in stats if pid not in (1, me)}
        else:
            mine, frontier = set(), {me}
            while frontier:
                frontier = {pid for pid, stat in stats.items() if stat[1] in frontier and pid not in mine}
                mine |= frontier
            mine |= set(marked_pids(self.token, stats)) - {me}
        return [pid for pid in mine if stats[pid][0] not in ("", "Z", "X") and stats[pid][3] not in keep]


def _meanwhile(target, *args) -> None:
    """Run `target` on a thread of its own; at once, here, when no thread can be made (the process limit is
    reached: a fork bomb must not stop the runner from ending it)."""
    try:
        threading.Thread(target=target, args=args, daemon=True).start()
    except RuntimeError:
        target(*args)


def _load_ports():
    """ports.py beside this file: the runner runs as a script (`python -I -S`), with no package to import it from."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("ports", os.path.join(os.path.dirname(__file__), "ports.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def marked_pids(token: str, stats: dict | None = None) -> list[int]:
    """Processes whose environment carries `ANGES_RUN=token` (live ones; those we may read)."""
    if not token:
        return []
    marker = f"{MARKER}={token}".encode()
    found = []
    for pid in stats if stats is not None else _all_pids():
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                environ = handle.read()
        except OSError:
            continue
        if marker in environ.split(b"\0"):
            found.append(pid)
    return found


def end_marked(token: str, attempts: int = 20) -> None:
    """SIGKILL every process marked with `token` (they may fork meanwhile: a few rounds)."""
    if not token or not os.path.isdir("/proc/self"):
        return
    for _ in range(attempts):
        live = [pid for pid in marked_pids(token) if _stat(pid)[0] not in ("", "Z", "X") and pid != os.getpid()]
        if not live:
            return
        for pid in live:
            _kill(pid, signal.SIGKILL)
        time.sleep(0.01)


def _all_pids() -> list[int]:
    with os.scandir("/proc") as entries:
        return [int(entry.name) for entry in entries if entry.name.isdigit()]


def _kill(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except OSError:
        pass  # gone meanwhile, or not ours to signal


def prctl(option: int, value: int) -> bool:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def drop_host_capabilities() -> None:
    """Drop HOST_CAPABILITIES from this process and from every program it starts (the bounding set, which caps
    what root gets at exec, and the other sets); a no-op for a process without them."""
    import ctypes

    for number in HOST_CAPABILITIES.values():
        prctl(PR_CAPBSET_DROP, number)
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    sets = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable of capabilities 0-31, then of 32-63
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.capget(header, sets) != 0:
        return
    for number in HOST_CAPABILITIES.values():
        for index in range(3):
            sets[index + 3 * (number // 32)] &= ~(1 << (number % 32)) & 0xFFFFFFFF
    libc.capset(header, sets)


def limit_processes(count: int) -> None:
    """Hold this process and its descendants to `count` processes (RLIMIT_NPROC), where that counts them alone: in
    a user namespace of their own, which the kernel counts apart from the user's other processes."""
    import resource

    try:
        with open("/proc/self/uid_map", encoding="ascii") as mapping:
            own_namespace = mapping.read().split() != ["0", "0", "4294967295"]
    except OSError:
        own_namespace = False
    if own_namespace:
        resource.setrlimit(resource.RLIMIT_NPROC, (count, count))


def main(argv: list[str]) -> int:
    control = socket.socket(fileno=int(argv[0]))
    namespace = "--namespace" in argv
    if "--drop-caps" in argv:
        drop_host_capabilities()
    if "--max-processes" in argv:
        limit_processes(int(argv[argv.index("--max-processes") + 1]))
    if not namespace and sys.platform.startswith("linux"):
        prctl(PR_SET_CHILD_SUBREAPER, 1)
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if "--parent" in argv and os.getppid() != int(argv[argv.index("--parent") + 1]):
            return 0  # the agent died before we could watch it

    token = argv[argv.index("--token") + 1] if "--token" in argv else ""
    server = Server(control, namespace, token)
    signal.signal(signal.SIGTERM, server.stop)
    signal.signal(signal.SIGHUP, server.stop)
    server.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
