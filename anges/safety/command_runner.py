"""The run's command runner: one process per run, inside the bubblewrap sandbox or not, owning every process it
starts.

`CommandRunner` launches `anges/runner.py` (in `bwrap` when sandboxed, see `bwrap.bwrap_argv`) once per run;
each command then costs about what an unsandboxed command costs, and when the run ends so does every process its
commands started.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from anges.exceptions import SandboxError
from anges.safety.bwrap import bwrap_argv, contained_argv
from anges.safety.limits import PidsCgroup, process_limit
from anges.safety.runner import KILL_GRACE, Channel, end_marked, select_read, send_fds
from anges.safety.sandbox import SandboxSettings, availability, warn_once
from anges.safety.seccomp import filter_fd
from anges.util.paths import open_file

log = logging.getLogger("anges.safety.sandbox")

START_TIMEOUT = 10.0
REPLY_TIMEOUT = 10.0
RUNNER_SCRIPT = str(Path(__file__).with_name("runner.py"))
SCRATCH_PREFIX = "anges-run-"
START_ATTEMPTS = 5
VANISHED_PATH_MARKS = ("Can't mkdir parents for ", "Can't create file at ", "Can't find source path ",
                       "Can't bind mount ")
"""bwrap's words when a path it was to mount over, or from, is gone: the machine changed while it started."""


class RemoteProcess:
    """A command started by the runner: its pid (in the runner's view), exit watch and kill."""

    def __init__(self, channel: Channel, pid: int):
        self.channel = channel
        self.pid = pid
        self.returncode: int | None = None
        self.ports: list[int] = []
        """The ports it listens on, once the runner said so (asked for with `watch_ports`)."""

    def exit_fd(self) -> int | None:
        """A descriptor that becomes readable when the command's shell ends."""
        return self.channel.fileno()

    def poll(self) -> int | None:
        """The exit code if the shell has ended, without waiting."""
        if self.returncode is None and not self.channel.ended:
            readable, _, _ = select_read([self.channel.sock], 0)
            if readable:
                self.channel.pump()
            self._absorb()
        if self.returncode is None and self.channel.ended:
            self.returncode = -9  # the runner is gone, and every process of its run with it
        return self.returncode

    def listening(self) -> list[int]:
        """The TCP ports the command listens on, once the runner said so ([] before; `poll` reads what it says)."""
        return self.ports

    def wait(self, timeout: float | None) -> bool:
        """Wait up to `timeout` seconds for the shell to end; True when it has (or the runner is gone)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None and not self.channel.ended:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            select_read([self.channel.sock], left)
        return True

    def kill(self, grace: float = KILL_GRACE) -> None:
        """SIGTERM the command's process group, then SIGKILL what is left after `grace` seconds."""
        if not self.channel.send({"kill": grace}):
            return
        deadline = time.monotonic() + grace + REPLY_TIMEOUT
        try:
            while self.channel.fill(deadline - time.monotonic()):
                self._absorb()
                killed = any("killed" in m for m in self.channel.messages)
                self.channel.messages.clear()
                if killed:
                    return
        except BaseException:
            self.close()  # the runner kills the group at once when its socket closes
            raise

    def close(self) -> None:
        self.channel.close()

    def _absorb(self) -> None:
        for message in self.channel.messages:
            if "exit" in message:
                self.returncode = message["exit"]
            self.ports = message.get("listening") or self.ports
        self.channel.messages = [m for m in self.channel.messages if "exit" not in m and "listening" not in m]


@dataclass
class Job:
    """A background command of the run: what it is, where its log is, and whether it still runs."""

    command: str
    process: RemoteProcess
    log_path: str

    @property
    def pid(self) -> int:
        return self.process.pid

    def status(self) -> str:
        """`running`, `exited with code N` or `killed by signal N`."""
        code = self.process.poll()
        if code is None:
            return "running"
        return f"killed by signal {-code}" if code < 0 else f"exited with code {code}"


class CommandRunner:
    """The run's runner process: starts every command of the run and ends them all when the run ends."""

    def __init__(self, cwd: str, settings: SandboxSettings | None = None, bwrap: str = "",
                 log_cap: int = 10_000_000, contain: bool = False, places: tuple[str, ...] = (),
                 visible: tuple[str, ...] = ()):
        self.cwd = cwd
        self.visible = visible
        """Directories the sandbox shows its commands read-only, even where it hides what holds them."""
        self.settings = settings if settings is not None and settings.enabled else None
        self.bwrap = bwrap
        self.places = places or (self.settings.untrusted if self.settings is not None else ())
        """Where the run's commands may write in any mode (a read-only runner's too): a bwrap there is never run."""
        self.contain = contain and bool(bwrap)
        """Without the sandbox, still run in a PID namespace of its own (through bwrap)."""
        self._cgroup: PidsCgroup | None = None
        self.log_cap = log_cap
        self.token = f"{os.getpid()}-{os.urandom(8).hex()}"
        """Marks the environment of every command of a runner without a PID namespace, to find its leftovers."""
        self._scratch: str | None = None
        self.jobs: list[Job] = []
        self.control: socket.socket | None = None
        self.process: subprocess.Popen | None = None
        self._lock = threading.RLock()
        self._finalizer = weakref.finalize(self, _cleanup, None, None, None)

    @property
    def namespaced(self) -> bool:
        """The runner has a PID namespace of its own: the run's processes are all it can see."""
        return self.settings is not None or self.contain

    @property
    def scratch(self) -> str:
        """The run's scratch directory (background logs), made on first use and removed by close()."""
        with self._lock:
            if self._scratch is None:
                _remove_stale_scratch()
                self._scratch = tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-")
                self._finalizer.detach()
                self._finalizer = weakref.finalize(self, _cleanup, self._scratch, None, None)
            return self._scratch

    def spawn(self, argv: list[str], cwd: str, env: dict[str, str], stdout: int, stderr: int,
              watch_ports: bool = False, retry: bool = True) -> RemoteProcess:
        """Start `argv` in its own session with the given outputs (`watch_ports`: the runner says when it listens on a
        TCP port); OSError when it cannot start."""
        channel = self._request_spawn(stdout, stderr)
        channel.send({"argv": argv, "cwd": cwd, "env": env, "watch_ports": watch_ports})
        reply = channel.receive(REPLY_TIMEOUT)
        if reply is None or "pid" not in reply:
            channel.close()
            if reply is not None and "error" in reply:
                raise OSError(reply.get("errno") or 0, reply["error"])
            self._replace_stuck()  # stopped (kill -STOP), or killed: it ends, with every process of its run
            if retry:
                return self.spawn(argv, cwd, env, stdout, stderr, watch_ports, retry=False)
            raise SandboxError(f"the command runner did not answer (a command may have stopped or killed it; the "
                               f"next command starts a new one){self._log_tail()}")
        return RemoteProcess(channel, reply["pid"])

    def _replace_stuck(self) -> None:
        """End a runner that does not answer, so the next command starts a new one."""
        with self._lock:
            if self.process is not None and self.process.poll() is None:
                log.warning("anges: the command runner did not answer; ending it and the processes of its run")
                self.process.kill()
                self.process.wait()
            if self.process is not None:
                self._restart(self.process)

    def _request_spawn(self, stdout: int, stderr: int, retry: bool = True) -> Channel:
        """The op socket of a new command; when the runner turned out dead (a command killed it) and `retry` is
        allowed, a new runner's."""
        control = self._started()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        channel = Channel(ours)
        try:
            send_fds(control, {"op": "spawn"}, [theirs.fileno(), stdout, stderr])
        except OSError as exc:
            channel.close()
            if not (retry and self._died()):
                raise SandboxError(f"the command runner stopped: {exc}") from None
        else:
            return channel
        finally:
            theirs.close()
        return self._request_spawn(stdout, stderr, retry=False)

    def _died(self) -> bool:
        """True (and the runner cleared away) when the runner process has ended or ends within a moment."""
        with self._lock:
            if self.process is None:  # closed meanwhile
                return False
            try:
                self.process.wait(KILL_GRACE + 1)
            except subprocess.TimeoutExpired:
                return False
            self._restart(self.process)
            return True

    def end_processes(self, keep_jobs: bool = False) -> None:
        """End every process of the run, except the background jobs when `keep_jobs`."""
        if self.control is None:
            return
        keep = [job.pid for job in self.jobs if keep_jobs and job.status() == "running"]
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        channel = Channel(ours)
        try:
            send_fds(self.control, {"op": "end", "keep": keep}, [theirs.fileno()])
            channel.receive(KILL_GRACE + REPLY_TIMEOUT)
        except OSError:
            pass  # the runner is gone, and its processes with it
        finally:
            theirs.close()
            channel.close()

    def close(self) -> None:
        """End every process of the run and the runner; remove the scratch files (background logs)."""
        with self._lock:
            control, process, self.control, self.process = self.control, self.process, None, None
        for job in self.jobs:
            job.process.close()
        self._finalizer.detach()
        _cleanup(self._scratch, control, process)
        self._release_cgroup()
        if not self.namespaced:
            end_marked(self.token)  # commands that outlived a runner killed from inside

    def _started(self) -> socket.socket:
        with self._lock:
            if self.process is not None and self.process.poll() is not None:
                self._restart(self.process)
            if self.control is None:
                scratch = self.scratch
                self.control, self.process = self._launch_retrying(scratch)
                self._finalizer.detach()
                self._finalizer = weakref.finalize(self, _cleanup, scratch, self.control, self.process)
            return self.control

    def _restart(self, process: subprocess.Popen) -> None:
        """The runner died (a command killed it): its processes are gone; the next command starts a new one."""
        log.warning("anges: the command runner ended unexpectedly (exit code %s); starting a new one",
                     process.returncode)
        _cleanup(None, self.control, self.process)
        self._release_cgroup()
        if not self.namespaced:
            end_marked(self.token)
        self.control = self.process = None

    def _release_cgroup(self) -> None:
        cgroup, self._cgroup = self._cgroup, None
        if cgroup is not None:
            cgroup.remove()

    def _launch_retrying(self, scratch: str) -> tuple[socket.socket, subprocess.Popen]:
        """`_launch`, again when a path the sandbox covers vanished while bwrap set it up (a socket, a folder's
        entry): the next try reads the machine afresh."""
        attempt = 1
        while True:
            try:
                return self._launch(scratch)
            except SandboxError as exc:
                if attempt == START_ATTEMPTS or not any(mark in str(exc) for mark in VANISHED_PATH_MARKS):
                    raise
                log.info("anges: %s; trying again", exc)
                attempt += 1

    def _launch(self, scratch: str) -> tuple[socket.socket, subprocess.Popen]:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        argv = [_python(), "-I", "-S", RUNNER_SCRIPT, str(theirs.fileno())]
        passed = [theirs.fileno()]
        what = "the sandbox" if self.settings is not None else "the command runner"
        try:
            if self.settings is not None or self.contain:
                found = availability(self.bwrap, self.places, quiet=True)  # every start of bwrap checks it
                if not found.ok:
                    raise SandboxError(f"{what} did not start: {found.reason}")
            if self.settings is not None:
                argv = self._sandbox_argv(self.settings, argv, scratch, found.features, passed)
            elif self.contain:
                argv = contained_argv(self.bwrap) + ["--", *argv, "--namespace", "--drop-caps"]
            else:
                argv += ["--parent", str(os.getpid()), "--token", self.token, "--drop-caps"]
            process = self._start_runner(argv, passed, scratch)
        except BaseException:
            ours.close()
            self._release_cgroup()
            raise
        finally:
            theirs.close()
            for fd in passed[1:]:  # the seccomp filter's pipe
                os.close(fd)
        readable, _, _ = select_read([ours], START_TIMEOUT)
        if not readable or ours.recv(16) != b"ready":
            _cleanup(None, ours, process)
            self._release_cgroup()
            raise SandboxError(f"{what} did not start{self._log_tail()}")
        return ours, process

    def _sandbox_argv(self, settings: SandboxSettings, runner: list[str], scratch: str, features,
                      passed: list[int]) -> list[str]:
        """bwrap's arguments around the runner's: the seccomp filter (its descriptor added to `passed`), and
        `max_processes` (through a pids cgroup of its own for root)."""
        seccomp = filter_fd(settings.unix_sockets)
        if seccomp is None:
            warn_once("the sandbox has no seccomp filter on this machine's architecture: commands may make Unix "
                      "sockets and use io_uring")
        else:
            passed.append(seccomp)
        self._cgroup, limit = process_limit(settings.max_processes)
        argv = bwrap_argv(self.bwrap, settings, self.cwd, [scratch, *self.visible], features, seccomp)
        argv += ["--", *runner, "--namespace", *limit]
        return self._cgroup.enter_argv(argv) if self._cgroup is not None else argv

    def _start_runner(self, argv: list[str], passed: list[int], scratch: str) -> subprocess.Popen:
        with os.fdopen(open_file(os.path.join(scratch, "runner.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                       "wb") as errors:
            try:
                return _spawn_from_keeper(argv, pass_fds=tuple(passed), env={"PATH": os.defpath},
                                          stdin=subprocess.DEVNULL, stdout=errors, stderr=errors,
                                          start_new_session=True)
            except OSError as exc:
                raise SandboxError(f"the command runner could not start: {exc}") from None

    def _log_tail(self) -> str:
        try:
            text = Path(self._scratch or "", "runner.log").read_text(errors="replace").strip()
        except OSError:
            return ""
        return f": {text.splitlines()[-1]}" if text else ""


def _python() -> str:
    """The interpreter itself, not a virtualenv's link to it (the runner needs only the standard library)."""
    return os.path.realpath(sys.executable) if sys.executable else "python3"


def _cleanup(scratch: str | None, control: socket.socket | None, process: subprocess.Popen | None) -> None:
    if control is not None:
        control.close()  # the runner ends every process of the run, then itself
    if process is not None:
        try:
            process.wait(KILL_GRACE + 2)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)


def _remove_stale_scratch() -> None:
    """Remove the scratch directories of anges processes that died without cleaning up (kill -9)."""
    root = tempfile.gettempdir()
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        pid = name[len(SCRATCH_PREFIX):].split("-", 1)[0]
        if name.startswith(SCRATCH_PREFIX) and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's
    return True


_keeper: ThreadPoolExecutor | None = None
_keeper_lock = threading.Lock()


def _spawn_from_keeper(argv: list[str], **kwargs) -> subprocess.Popen:
    """Start a process from one long-lived thread: bwrap's --die-with-parent (and the runner's parent-death
    signal) follow the thread that started them, and a run's own thread may end before the run's runner does."""
    global _keeper
    with _keeper_lock:
        if _keeper is None:
            _keeper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="anges-spawner")
    return _keeper.submit(lambda: subprocess.Popen(argv, **kwargs)).result()
