"""The run's command runner: one process per run, inside a bubblewrap sandbox or not, owning every process started.

`CommandRunner` launches `anges/runner.py` (in `bwrap` when sandboxed) once per run; each command then
costs about what an unsandboxed command costs. `availability()` probes once per process whether `bwrap`
works. `SandboxSettings` says what the sandbox allows; it is built from the `safety` config section.
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
from functools import lru_cache
from pathlib import Path

from anges.exceptions import SandboxError
from anges.runner import KILL_GRACE, Channel, select_read, send_fds

log = logging.getLogger("anges.sandbox")

CREDENTIAL_PATHS = ("~/.ssh", "~/.aws", "~/.config/gcloud", "~/.azure", "~/.netrc", "~/.docker", "~/.kube",
                    "~/.gnupg", "~/.git-credentials", "~/.config/gh", "~/.pypirc", "~/.npmrc",
                    "/run/docker.sock", "/var/run/docker.sock")
"""Hidden inside the sandbox, with ANGES_HOME, the ssh-agent socket and `safety.hidden_paths`."""
START_TIMEOUT = 10.0
REPLY_TIMEOUT = 10.0
RUNNER_SCRIPT = str(Path(__file__).with_name("runner.py"))
SCRATCH_PREFIX = "anges-run-"

_READ_ONLY_MARKS = ("Read-only file system",)
_NETWORK_MARKS = ("Network is unreachable", "Temporary failure in name resolution", "Could not resolve host",
                  "Name or service not known", "No address associated with hostname", "getaddrinfo failed",
                  "nodename nor servname", "Failed to establish a new connection", "network is unreachable")


@dataclass(frozen=True)
class SandboxSettings:
    """What a sandboxed command may do."""

    mode: str = "workspace"
    """workspace, read-only or off."""
    network: bool = False
    writable: tuple[str, ...] = ()
    """Absolute, resolved directories commands may write (besides a private /tmp)."""
    hidden: tuple[str, ...] = ()
    """Absolute, resolved paths commands cannot see."""
    workdir: str = ""
    """The resolved working directory: visible (read-only mode) or writable, even inside a hidden path."""

    @classmethod
    def for_run(cls, safety, cwd: str) -> SandboxSettings:
        """The settings of a run in `cwd` under the `safety` config section."""
        writable: tuple[str, ...] = ()
        if safety.sandbox != "read-only":  # with the sandbox off, in-process edits keep the workspace's limits
            writable = _unique(_resolve(p) for p in [cwd, *(_expand(p, cwd) for p in safety.writable_paths)])
        return cls(mode=safety.sandbox, network=safety.network, writable=writable, hidden=hidden_paths(safety),
                   workdir=_resolve(cwd))

    @property
    def enabled(self) -> bool:
        return self.mode != "off"

    def can_write(self, path: str) -> bool:
        """True when `path` (resolved, symlinks included) lies in a writable directory."""
        real = _resolve(path)
        return any(_inside(real, root) for root in self.writable)

    def is_hidden(self, path: str) -> bool:
        """True when `path` (resolved) lies under a hidden path, outside the work and writable folders inside it."""
        real = _resolve(path)
        shown = [root for root in (*self.writable, self.workdir) if root]
        return any(_inside(real, hidden) and not any(_inside(real, root) and _inside(root, hidden) for root in shown)
                   for hidden in self.hidden)


@dataclass(frozen=True)
class Availability:
    """Whether the sandbox can run here, and why not."""

    ok: bool
    reason: str = ""
    bwrap: str = ""


def hidden_paths(safety) -> tuple[str, ...]:
    """Credential places and ANGES_HOME (resolved), plus the configured `hidden_paths`, that exist."""
    from anges.config import anges_home

    candidates = [*CREDENTIAL_PATHS, str(anges_home()), *safety.hidden_paths]
    agent_socket = os.environ.get("SSH_AUTH_SOCK")
    if agent_socket:
        candidates.append(agent_socket)
    found = (_resolve(os.path.expanduser(p)) for p in candidates)
    return _unique(p for p in found if os.path.lexists(p))


def availability() -> Availability:
    """Whether `bwrap` works on this machine (probed once per process and `bwrap` location)."""
    if not sys.platform.startswith("linux"):
        return _warn_once(Availability(False, f"the sandbox needs Linux and bubblewrap; this is {sys.platform}"))
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return _warn_once(Availability(False, "bwrap was not found on PATH (install the 'bubblewrap' package)"))
    return _warn_once(_probe(bwrap))


@lru_cache(maxsize=4)
def _probe(bwrap: str) -> Availability:
    argv = [bwrap, *_isolation(network=False), "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--",
            "/bin/sh", "-c", "exit 0"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20, env={"PATH": os.defpath})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Availability(False, f"bwrap could not run: {exc}", bwrap)
    if done.returncode != 0:
        detail = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        return Availability(False, f"bwrap does not work here: {detail}", bwrap)
    return Availability(True, "", bwrap)


_warned: set[str] = set()


def _warn_once(found: Availability) -> Availability:
    if not found.ok and found.reason not in _warned:
        _warned.add(found.reason)
        log.warning("anges: the sandbox is not available: %s. Commands will run without it, and each one needs "
                    "approval (--approval).", found.reason)
    return found


def bwrap_argv(bwrap: str, settings: SandboxSettings, cwd: str, visible: list[str]) -> list[str]:
    """The bwrap arguments for one run: read-only root, writable dirs, private /tmp, hidden credentials."""
    argv = [bwrap, *_isolation(settings.network), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--tmpfs", "/tmp"]
    real_cwd = _resolve(cwd)
    if not any(_inside(real_cwd, root) for root in settings.writable):
        visible = [real_cwd, *visible]  # read-only mode: the working directory is still there to read
    shown = (*settings.writable, *visible)
    # A hidden directory that holds the work (a batch's work dirs are in ANGES_HOME) stays hidden but for the
    # work: an empty tmpfs, the work bound into it, then made read-only (parents first, so children nest in it).
    around = sorted((path for path in settings.hidden if os.path.isdir(path)
                     and any(_inside(root, path) and root != path for root in shown)), key=len)
    for path in around:
        argv += ["--tmpfs", path]
    for path in settings.writable:
        argv += ["--bind", path, path]
    for path in visible:
        argv += ["--ro-bind", path, path]
    for path in around:
        argv += ["--remount-ro", path]
    for path in settings.hidden:
        if path in around or path in shown:
            continue  # the work itself is never hidden
        if any(_inside(path, outer) for outer in around) and not any(_inside(path, root) for root in shown):
            continue  # already hidden with the directory around it
        if os.path.isdir(path):
            argv += ["--tmpfs", path, "--remount-ro", path]
        else:
            argv += ["--ro-bind", "/dev/null", path]
    return argv + ["--chdir", cwd]


def _isolation(network: bool) -> list[str]:
    argv = ["--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    return argv + (["--share-net"] if network else [])


def explain_block(result, settings: SandboxSettings) -> str:
    """A note when the sandbox, not the command, is the likely cause of a failure ("" otherwise)."""
    if not settings.enabled or (result.exit_code == 0 and not result.timed_out):
        return ""
    output = f"{result.stdout}\n{result.stderr}"
    if any(mark in output for mark in _READ_ONLY_MARKS):
        where = ", ".join(settings.writable) or "nothing"
        return (f"read-only file system — outside the sandbox's writable paths (writable: {where}; "
                f"and a private /tmp)")
    if not settings.network and any(mark in output for mark in _NETWORK_MARKS):
        return "no network — the sandbox has no network access"
    if any(path in output for path in settings.hidden):
        return "hidden — credential paths are not visible in the sandbox"
    return ""


# -- the runner -----------------------------------------------------------------------------------------------


def _python() -> str:
    """The interpreter itself, not a virtualenv's link to it (the runner needs only the standard library)."""
    return os.path.realpath(sys.executable) if sys.executable else "python3"


def _runner_paths() -> list[str]:
    """What the runner needs that the sandbox's private /tmp would cover (anges or Python installed under /tmp)."""
    needed = {os.path.dirname(RUNNER_SCRIPT), os.path.realpath(sys.base_prefix), os.path.dirname(_python())}
    return sorted(_resolve(path) for path in needed if _inside(_resolve(path), "/tmp"))


class RemoteProcess:
    """A command started by the runner: its pid (in the runner's view), exit watch and kill."""

    def __init__(self, channel: Channel, pid: int):
        self.channel = channel
        self.pid = pid
        self.returncode: int | None = None

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
        return self.returncode

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
        self.channel.messages = [m for m in self.channel.messages if "exit" not in m]


@dataclass
class Job:
    """A background command of the run: what it is, where its log is, and whether it still runs."""

    command: str
    process: object
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
                 log_cap: int = 10_000_000):
        self.cwd = cwd
        self.settings = settings if settings is not None and settings.enabled else None
        self.bwrap = bwrap
        self.log_cap = log_cap
        self._scratch: str | None = None
        self.jobs: list[Job] = []
        self.control: socket.socket | None = None
        self.process: subprocess.Popen | None = None
        self._lock = threading.RLock()
        self._finalizer = weakref.finalize(self, _cleanup, None, None, None)

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

    def spawn(self, argv: list[str], cwd: str, env: dict[str, str], stdout: int, stderr: int) -> RemoteProcess:
        """Start `argv` in its own session with the given outputs; OSError when it cannot start."""
        control = self._started()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        channel = Channel(ours)
        try:
            send_fds(control, {"op": "spawn"}, [theirs.fileno(), stdout, stderr])
        except OSError as exc:
            channel.close()
            raise SandboxError(f"the command runner stopped: {exc}") from None
        finally:
            theirs.close()
        channel.send({"argv": argv, "cwd": cwd, "env": env})
        reply = channel.receive(REPLY_TIMEOUT)
        if reply is None or "pid" not in reply:
            channel.close()
            if reply is not None and "error" in reply:
                raise OSError(reply.get("errno") or 0, reply["error"])
            raise SandboxError(f"the command runner did not answer{self._log_tail()}")
        return RemoteProcess(channel, reply["pid"])

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

    def _started(self) -> socket.socket:
        with self._lock:
            if self.control is None:
                scratch = self.scratch
                self.control, self.process = self._launch(scratch)
                self._finalizer.detach()
                self._finalizer = weakref.finalize(self, _cleanup, scratch, self.control, self.process)
            return self.control

    def _launch(self, scratch: str) -> tuple[socket.socket, subprocess.Popen]:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        argv = [_python(), "-I", "-S", RUNNER_SCRIPT, str(theirs.fileno())]
        if self.settings is not None:
            shown = [scratch, *_runner_paths()]
            argv = bwrap_argv(self.bwrap, self.settings, self.cwd, shown) + ["--", *argv, "--namespace"]
        else:
            argv += ["--parent", str(os.getpid())]
        with open(os.path.join(scratch, "runner.log"), "wb") as errors:
            try:
                process = _spawn_from_keeper(argv, pass_fds=(theirs.fileno(),), env={"PATH": os.defpath},
                                             stdin=subprocess.DEVNULL, stdout=errors, stderr=errors,
                                             start_new_session=True)
            except OSError as exc:
                ours.close()
                raise SandboxError(f"the command runner could not start: {exc}") from None
            finally:
                theirs.close()
        readable, _, _ = select_read([ours], START_TIMEOUT)
        if not readable or ours.recv(16) != b"ready":
            _cleanup(None, ours, process)
            what = "the sandbox" if self.settings is not None else "the command runner"
            raise SandboxError(f"{what} did not start{self._log_tail()}")
        return ours, process

    def _log_tail(self) -> str:
        try:
            text = Path(self._scratch or "", "runner.log").read_text(errors="replace").strip()
        except OSError:
            return ""
        return f": {text.splitlines()[-1]}" if text else ""


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
    return _keeper.submit(subprocess.Popen, argv, **kwargs).result()


def _resolve(path: str) -> str:
    return os.path.realpath(os.path.expanduser(path))


def _expand(path: str, cwd: str) -> str:
    return os.path.join(cwd, os.path.expanduser(path))


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _unique(paths) -> tuple[str, ...]:
    return tuple(dict.fromkeys(paths))
