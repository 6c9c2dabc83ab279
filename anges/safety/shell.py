"""The command runner behind RUN_SHELL_CMD: bounded output, timeouts, interrupts, background jobs, and commands that
move to the background when they run past their yield point."""

from __future__ import annotations

import os
import selectors
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from typing import IO, TYPE_CHECKING, cast

from anges.exceptions import SandboxError
from anges.safety.capture import READ_SIZE, CappedLog, Capture
from anges.safety.ports import WATCH_INTERVAL, PortWatch
from anges.safety.runner import KILL_GRACE, kill_group
from anges.util.masking import is_secret_name
from anges.util.printable import unusable

if TYPE_CHECKING:
    from anges.safety.command_runner import CommandRunner

POLL_INTERVAL = 0.05
BACKGROUND_LOG_CAP = 10_000_000
# Seconds we keep reading after the shell exits while a backgrounded descendant still holds the pipes open.
DRAIN_AFTER_EXIT = 0.25
LISTEN_GRACE = 0.3
"""Seconds a command that started listening on a port is still read before it goes on in the background (what it
prints as it starts up)."""


@dataclass
class CommandResult:
    """What a command did: its exit status, its (capped, masked) output and how it ended."""

    command: str
    exit_code: int | None
    stdout: str
    stderr: str
    duration: float
    timed_out: bool = False
    interrupted: bool = False
    stdout_omitted: int = 0
    stderr_omitted: int = 0
    pid: int | None = None
    log_path: str | None = None
    stdout_bytes: int = 0
    """What the command printed, in bytes and lines (the outputs above may be cut)."""
    stderr_bytes: int = 0
    stdout_lines: int = 0
    stderr_lines: int = 0
    output_path: str | None = None
    """The file holding the whole output (up to its cap) when the outputs above were cut; the log of a command that
    moved to the background."""
    yielded: bool = False
    """The command was still running at its yield point and went on in the background (pid, log_path)."""
    output_dropped: int = 0
    """Bytes `output_path` lost from its start to stay within its cap."""
    listening: list[int] = field(default_factory=list)
    """The TCP ports it had started listening on when it went on in the background (`yielded`)."""

    def to_data(self) -> dict:
        """JSON-able facts for Event.data, without the outputs."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}  # plain values: no deep copy (asdict's)
        data["listening"] = list(self.listening)
        del data["stdout"], data["stderr"]
        data["duration"] = round(self.duration, 3)  # a millisecond is precise enough, and keeps records short
        if not self.listening:
            del data["listening"]
        return data


RENDEZVOUS_VARIABLES = frozenset((
    "TMUX", "TMUX_PANE", "STY", "WINDOW", "ZELLIJ", "ZELLIJ_SESSION_NAME", "KITTY_LISTEN_ON", "KITTY_WINDOW_ID",
    "WEZTERM_UNIX_SOCKET", "NVIM", "NVIM_LISTEN_ADDRESS", "VSCODE_IPC_HOOK_CLI", "VSCODE_GIT_IPC_HANDLE",
    "GIT_ASKPASS", "SSH_ASKPASS", "DBUS_SESSION_BUS_ADDRESS", "DBUS_STARTER_ADDRESS", "SSH_AUTH_SOCK",
    "SSH_AGENT_PID", "GPG_AGENT_INFO", "GNOME_KEYRING_CONTROL", "DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY",
    "DOCKER_HOST", "CONTAINER_HOST",
))
"""Where the user's long-lived programs listen (terminal multiplexers, editors, the session bus, agents, the
display, container engines): a command given one could have them start a process that outlives the run, or type
into a window. Commands do not get them (unless `pass_env` names them); $XDG_RUNTIME_DIR stays, for the files
programs keep there."""


def scrubbed_environment(pass_through: Iterable[str] = (), secret_names: Iterable[str] = ()) -> dict[str, str]:
    """A copy of os.environ without secrets (see masking.is_secret_name) or RENDEZVOUS_VARIABLES, except the names
    in `pass_through`."""
    keep, named = set(pass_through), tuple(secret_names)
    return {name: value for name, value in os.environ.items()
            if name in keep or not (name in RENDEZVOUS_VARIABLES or is_secret_name(name, named))}


def find_shell() -> str:
    """The shell commands run in: bash, or sh where there is no bash."""
    return "/bin/bash" if os.access("/bin/bash", os.X_OK) else "/bin/sh"


def _script(command: str, prefix_cmd: str) -> str:
    return f"{prefix_cmd} {command}" if prefix_cmd.strip() else command


def run_command(
    command: str,
    *,
    cwd: str | os.PathLike,
    prefix_cmd: str = "",
    timeout: float = 600,
    background: bool = False,
    env: dict[str, str] | None = None,
    output_cap: int = 8000,
    interrupt_check: Callable[[], bool] | None = None,
    secrets: Iterable[str] = (),
    log_dir: str | None = None,
    runner: CommandRunner | None = None,
    log_cap: int = BACKGROUND_LOG_CAP,
    yield_after: float = 0,
    output_dir: str | None = None,
    watch: Callable[[bytes], None] | None = None,
) -> CommandResult:
    """Run `command` with bash in `cwd`; `prefix_cmd` is a shell fragment put before it; env defaults to scrubbed.

    With a `runner` (anges.safety.command_runner.CommandRunner) the run's runner process starts the command (in the
    sandbox when it has one) and owns it; without, this process does. The result keeps `output_cap` bytes of
    the output (stdout and stderr together, head and tail, cut at line ends); past that, the whole output also
    goes to a file in `output_dir` (if given), capped at `log_cap` bytes (the oldest part dropped), `secrets`
    masked as in the result; `watch` (in the foreground) is given each piece of output as it arrives, and no bytes
    at least every POLL_INTERVAL seconds while none do. A command
    still running after `yield_after` seconds (0 = never; it runs until `timeout`) goes on in the background
    with its output in that file; a background command's output goes to such a file in `log_dir` (default:
    `output_dir`, then the runner's scratch directory). Raises OSError when `cwd` does not exist or the shell
    cannot be started.
    """
    problem = unusable(command)
    if problem:
        raise ValueError(f"the command cannot be run: it holds {problem}, which no shell command can")
    argv = [find_shell(), "-c", _script(command, prefix_cmd)]
    env = scrubbed_environment() if env is None else env
    log_dir = log_dir or output_dir or (runner.scratch if runner else tempfile.gettempdir())
    if background:
        return _start_background(command, argv, cwd, env, log_dir, runner, log_cap, list(secrets))
    limits = _Limits(timeout, yield_after if 0 < yield_after < timeout else None, output_cap, log_cap)
    return _run_foreground(command, argv, cwd, env, limits, interrupt_check, list(secrets), runner, output_dir,
                           log_dir, watch)


@dataclass(frozen=True)
class _Limits:
    timeout: float
    yield_after: float | None
    output_cap: int
    log_cap: int


class _LocalProcess:
    """A command this process started itself."""

    def __init__(self, popen: subprocess.Popen, watch_ports: bool = False):
        self.popen = popen
        self.pid = popen.pid
        self._exit_fd: int | None = None
        self._watch = PortWatch(popen.pid) if watch_ports and os.path.isdir("/proc/self/net") else None
        self._next_look = time.monotonic() + WATCH_INTERVAL
        self.ports: list[int] = []

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    def exit_fd(self) -> int | None:
        """A pidfd that becomes readable when the shell exits, so no one polls; None where unsupported."""
        if self._exit_fd is None:
            try:
                self._exit_fd = os.pidfd_open(self.pid)
            except (AttributeError, OSError):
                return None
        return self._exit_fd

    def poll(self) -> int | None:
        return self.popen.poll()

    def listening(self) -> list[int]:
        """The TCP ports the command listens on (looked at every WATCH_INTERVAL seconds, until some are found)."""
        if self._watch is not None and time.monotonic() >= self._next_look:
            self._next_look = time.monotonic() + WATCH_INTERVAL
            self.ports = self._watch.check()
            self._watch = None if self.ports else self._watch
        return self.ports

    def wait(self, timeout: float | None) -> bool:
        try:
            self.popen.wait(None if timeout is None else max(timeout, 0))
        except subprocess.TimeoutExpired:
            return False
        return True

    def kill(self, grace: float = KILL_GRACE) -> None:
        kill_group(self.pid, grace, poll=self.popen.poll)

    def close(self) -> None:
        if self._exit_fd is not None:
            os.close(self._exit_fd)
            self._exit_fd = None


def _start(argv: list[str], cwd, env: dict[str, str], stdout: int, stderr: int, runner, watch_ports: bool = False):
    if runner is not None:
        return runner.spawn(argv, os.fspath(cwd), env, stdout, stderr, watch_ports)
    # start_new_session (not a preexec_fn, which forces the slow fork path) gives the command its own group to kill.
    return _LocalProcess(subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=stdout,
                                          stderr=stderr, start_new_session=True), watch_ports)


def _start_background(command: str, argv: list[str], cwd, env: dict[str, str], log_dir: str | None, runner,
                      log_cap: int, secrets: list[str]) -> CommandResult:
    started = time.monotonic()
    fd, log_path = tempfile.mkstemp(prefix="anges-bg-", suffix=".log", dir=log_dir)
    read_end, write_end = os.pipe()
    try:
        proc = _start(argv, cwd, env, write_end, write_end, runner)
    except BaseException:
        os.close(read_end)
        os.close(fd)
        os.unlink(log_path)
        raise
    finally:
        os.close(write_end)
    log = CappedLog(fd, log_cap, secrets)
    _keep_going(command, proc, [open(read_end, "rb", buffering=0)], log, log_path, runner)  # noqa: SIM115
    return CommandResult(command, None, "", "", time.monotonic() - started, pid=proc.pid, log_path=log_path)


def _keep_going(command: str, proc, streams: list, log: CappedLog | None, log_path: str, runner) -> None:
    """Leave `proc` running as a background job of the run: a thread copies its output to its log until it and
    its children close their ends."""
    threading.Thread(target=_copy_to_log, args=(streams, log), name=f"anges-log-{proc.pid}", daemon=True).start()
    if runner is None:
        # Reap the job when it ends so it never lingers as a zombie of ours.
        threading.Thread(target=_reap, args=(proc,), name=f"anges-bg-{proc.pid}", daemon=True).start()
    else:
        from anges.safety.command_runner import Job

        runner.jobs.append(Job(command, proc, log_path))


def _reap(proc) -> None:
    proc.wait(None)
    proc.close()


def _copy_to_log(streams: list, log: CappedLog | None) -> None:
    """Copy what `streams` carry to `log` until every one is closed at the other end."""
    selector = selectors.DefaultSelector()
    for stream in streams:
        selector.register(stream, selectors.EVENT_READ)
    try:
        while selector.get_map():
            for key, _ in selector.select():
                chunk = os.read(key.fd, READ_SIZE)
                if not chunk:
                    selector.unregister(key.fileobj)
                    _close(key)
                elif log is not None:
                    try:
                        log.write(chunk)
                    except OSError:
                        log.abandon()  # the log was removed with the run's scratch files: read on, keep nothing
                        log = None
    finally:
        selector.close()
        for stream in streams:
            stream.close()
        if log is not None:
            try:
                log.close()
            except OSError:
                log.abandon()  # removed with the run's scratch files meanwhile


def _run_foreground(command, argv, cwd, env, limits: _Limits, interrupt_check, secrets, runner, output_dir,
                    log_dir, watch) -> CommandResult:
    started = time.monotonic()
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    try:
        proc = _start(argv, cwd, env, out_write, err_write, runner, watch_ports=limits.yield_after is not None)
    except BaseException:
        os.close(out_read)
        os.close(err_read)
        raise
    finally:
        os.close(out_write)
        os.close(err_write)
    capture = Capture(limits.output_cap, output_dir, limits.log_cap, secrets)
    streams = {open(out_read, "rb", buffering=0): capture.stdout,  # noqa: SIM115
               open(err_read, "rb", buffering=0): capture.stderr}  # noqa: SIM115
    yield_at = None if limits.yield_after is None else started + limits.yield_after
    stop = None
    try:
        stop = _pump(proc, streams, started + limits.timeout, yield_at, interrupt_check, watch)
        if stop == "yield":
            return _yielded(command, proc, streams, capture, log_dir, runner, secrets, started)
    except BaseException:
        stop = "error"
        raise
    finally:
        if stop != "yield":
            _end(proc, streams, kill=stop is not None)
            capture.close()
    if proc.returncode is None and not stop:
        raise SandboxError("the command runner stopped before the command ended")
    return _result(command, capture.render(secrets), started, exit_code=None if stop else proc.returncode,
                   timed_out=stop == "timeout", interrupted=stop == "interrupt")


def _end(proc, streams: dict, kill: bool) -> None:
    """Kill the command (when `kill`), read what is left of its output, and let go of it."""
    if kill:
        proc.kill()
        _drain(streams, time.monotonic() + DRAIN_AFTER_EXIT)
    for stream in streams:
        stream.close()
    proc.wait(None)
    proc.close()


def _yielded(command, proc, streams: dict, capture: Capture, log_dir, runner, secrets, started) -> CommandResult:
    """The result of a command still running at its yield point, which goes on as a background job of the run."""
    log_path = capture.open_file(log_dir) or os.devnull  # no file could be made: its output is read and dropped
    rendered = capture.render(secrets)
    open_streams = [stream for stream in streams if not stream.closed]
    _keep_going(command, proc, open_streams, capture.take_log(), log_path, runner)
    rendered.output_path = log_path
    return _result(command, rendered, started, exit_code=None, pid=proc.pid, log_path=log_path, yielded=True,
                   listening=proc.listening())


def _result(command: str, rendered, started: float, **facts) -> CommandResult:
    return CommandResult(command=command, stdout=rendered.stdout, stderr=rendered.stderr,
                         duration=time.monotonic() - started, stdout_omitted=rendered.stdout_omitted,
                         stderr_omitted=rendered.stderr_omitted, stdout_bytes=rendered.stdout_bytes,
                         stderr_bytes=rendered.stderr_bytes, stdout_lines=rendered.stdout_lines,
                         stderr_lines=rendered.stderr_lines, output_path=rendered.output_path,
                         output_dropped=rendered.output_dropped, **facts)


def _pump(proc, streams: dict, deadline: float, yield_at: float | None, interrupt_check, watch=None) -> str | None:
    """Read output until the command ends; "timeout" or "interrupt" if it must be stopped, "yield" if it is still
    running at `yield_at`, or LISTEN_GRACE after it starts listening on a port (before `yield_at`)."""
    selector = selectors.DefaultSelector()
    for stream, buffer in streams.items():
        selector.register(stream, selectors.EVENT_READ, buffer)
    # The exit may already be known (a runner's reply can carry it along with the pid): then there is nothing to watch.
    exited_at = None if proc.poll() is None else time.monotonic()
    exit_fd = proc.exit_fd() if exited_at is None else None
    if exit_fd is not None:
        selector.register(exit_fd, selectors.EVENT_READ, None)
    next_check = 0.0
    try:
        while True:
            now = time.monotonic()
            if now >= deadline:
                return "timeout"
            if interrupt_check is not None and now >= next_check:
                if interrupt_check():
                    return "interrupt"
                next_check = now + POLL_INTERVAL
            if exited_at is not None and (not selector.get_map() or now - exited_at >= DRAIN_AFTER_EXIT):
                return None
            if exited_at is None and yield_at is not None:
                if now >= yield_at:
                    return "yield"
                if proc.listening():
                    yield_at = min(yield_at, now + LISTEN_GRACE)
            wait = min(POLL_INTERVAL, deadline - now)
            watched = _read_ready(selector, wait, watch) if selector.get_map() else proc.wait(wait)
            if watch is not None:
                watch(b"")
            # The exit watch fires on the shell's end; a runner's also on its other news (a port it listens on).
            if exited_at is None and (watched or exit_fd is None) and proc.poll() is not None:
                exited_at = time.monotonic()
                if exit_fd is not None and exit_fd in selector.get_map():
                    selector.unregister(exit_fd)
    finally:
        selector.close()


def _read_ready(selector: selectors.BaseSelector, timeout: float, watch=None) -> bool:
    """Read every ready pipe once (showing each piece to `watch`); True if the exit watch fired."""
    fired = False
    for key, _ in selector.select(max(timeout, 0)):
        if key.data is None:
            fired = True
            continue
        chunk = os.read(key.fd, READ_SIZE)
        if chunk:
            key.data.add(chunk)
            if watch is not None:
                watch(chunk)
        else:
            selector.unregister(key.fileobj)
            _close(key)
    return fired


def _close(key: selectors.SelectorKey) -> None:
    cast(IO[bytes], key.fileobj).close()  # the pipes are registered as file objects (only the exit watch is an fd)


def _drain(streams: dict, deadline: float) -> None:
    """Read what is left in the pipes until EOF or `deadline`."""
    selector = selectors.DefaultSelector()
    for stream, buffer in streams.items():
        if not stream.closed:
            selector.register(stream, selectors.EVENT_READ, buffer)
    while selector.get_map() and time.monotonic() < deadline:
        _read_ready(selector, deadline - time.monotonic())
    selector.close()
