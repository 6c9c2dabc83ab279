"""The command runner behind RUN_SHELL_CMD: bounded output, timeouts, interrupts and background jobs."""

from __future__ import annotations

import os
import selectors
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from anges.clipping import omission
from anges.exceptions import SandboxError
from anges.masking import is_secret_name, mask_cut_edges, mask_secrets
from anges.runner import KILL_GRACE, kill_group

if TYPE_CHECKING:
    from anges.command_runner import CommandRunner

POLL_INTERVAL = 0.05
BACKGROUND_LOG_CAP = 10_000_000
# Seconds we keep reading after the shell exits while a backgrounded descendant still holds the pipes open.
DRAIN_AFTER_EXIT = 0.25
READ_SIZE = 65536


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

    def to_data(self) -> dict:
        """JSON-able facts for Event.data, without the outputs."""
        data = asdict(self)
        del data["stdout"], data["stderr"]
        return data


class _CappedBuffer:
    """Keeps the first and last bytes of a stream and counts what falls in between."""

    def __init__(self, cap: int):
        self.head_cap = cap // 2
        self.tail_cap = cap - self.head_cap
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_size = 0
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if not chunk:
            return
        self.tail.append(chunk)
        self.tail_size += len(chunk)
        while self.tail_size - len(self.tail[0]) >= self.tail_cap:
            self.tail_size -= len(self.tail.popleft())

    def render(self, secrets: Iterable[str] = ()) -> tuple[str, int]:
        """The kept text, secrets masked, with a marker where bytes were dropped; and the number dropped."""
        tail = b"".join(self.tail)[-self.tail_cap :] if self.tail_cap else b""
        omitted = self.total - len(self.head) - len(tail)
        head_text = mask_secrets(self.head.decode("utf-8", errors="replace"), secrets)
        if not omitted:
            return mask_secrets(head_text + tail.decode("utf-8", errors="replace"), secrets), 0
        tail_text = mask_secrets(tail.decode("utf-8", errors="replace"), secrets)
        head_text, tail_text = mask_cut_edges(head_text, tail_text, secrets)
        return head_text + omission(omitted, "bytes") + tail_text, omitted


def scrubbed_environment(pass_through: Iterable[str] = (), secret_names: Iterable[str] = ()) -> dict[str, str]:
    """A copy of os.environ without secrets (see masking.is_secret_name), except the names in `pass_through`."""
    keep, named = set(pass_through), tuple(secret_names)
    return {name: value for name, value in os.environ.items() if name in keep or not is_secret_name(name, named)}


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
    output_cap: int = 50_000,
    interrupt_check: Callable[[], bool] | None = None,
    secrets: Iterable[str] = (),
    log_dir: str | None = None,
    runner: CommandRunner | None = None,
    log_cap: int = BACKGROUND_LOG_CAP,
) -> CommandResult:
    """Run `command` with bash in `cwd`; `prefix_cmd` is a shell fragment put before it; env defaults to scrubbed.

    With a `runner` (anges.command_runner.CommandRunner) the run's runner process starts the command (in the
    sandbox when it has one) and owns it; without, this process does. A background command's output goes
    to a log capped at `log_cap` bytes (the oldest part dropped). Raises OSError when `cwd` does not exist
    or the shell cannot be started.
    """
    argv = [find_shell(), "-c", _script(command, prefix_cmd)]
    env = scrubbed_environment() if env is None else env
    if background:
        return _start_background(command, argv, cwd, env, log_dir or (runner.scratch if runner else None), runner,
                                 log_cap)
    return _run_foreground(command, argv, cwd, env, timeout, output_cap, interrupt_check, list(secrets), runner)


class _LocalProcess:
    """A command this process started itself."""

    def __init__(self, popen: subprocess.Popen):
        self.popen = popen
        self.pid = popen.pid
        self._exit_fd: int | None = None

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


def _start(argv: list[str], cwd, env: dict[str, str], stdout: int, stderr: int, runner):
    if runner is not None:
        return runner.spawn(argv, os.fspath(cwd), env, stdout, stderr)
    # start_new_session (not a preexec_fn, which forces the slow fork path) gives the command its own group to kill.
    return _LocalProcess(subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=stdout,
                                          stderr=stderr, start_new_session=True))


def _start_background(command: str, argv: list[str], cwd, env: dict[str, str], log_dir: str | None, runner,
                      log_cap: int) -> CommandResult:
    started = time.monotonic()
    fd, log_path = tempfile.mkstemp(prefix="anges-bg-", suffix=".log", dir=log_dir)
    os.close(fd)
    read_end, write_end = os.pipe()
    try:
        proc = _start(argv, cwd, env, write_end, write_end, runner)
    except BaseException:
        os.close(read_end)
        os.unlink(log_path)
        raise
    finally:
        os.close(write_end)
    threading.Thread(target=_copy_to_log, args=(read_end, log_path, log_cap), name=f"anges-log-{proc.pid}",
                     daemon=True).start()
    if runner is None:
        # Reap the job when it ends so it never lingers as a zombie of ours.
        threading.Thread(target=proc.wait, args=(None,), name=f"anges-bg-{proc.pid}", daemon=True).start()
    else:
        from anges.command_runner import Job

        runner.jobs.append(Job(command, proc, log_path))
    return CommandResult(command, None, "", "", time.monotonic() - started, pid=proc.pid, log_path=log_path)


def _copy_to_log(read_end: int, path: str, cap: int) -> None:
    """Copy a job's output to its log until the job and its children close it; keep at most `cap` bytes."""
    with open(read_end, "rb", buffering=0) as source:
        try:
            log = CappedLog(path, cap)
        except OSError:
            return
        with log:
            while chunk := source.read(READ_SIZE):
                try:
                    log.write(chunk)
                except OSError:
                    return  # the log was removed with the run's scratch files


class CappedLog:
    """A log file that keeps its newest bytes: past `cap`, the oldest half is dropped and a marker line says so."""

    def __init__(self, path: str, cap: int):
        self.file = open(path, "r+b", buffering=0)  # noqa: SIM115  (closed by __exit__)
        self.cap = max(cap, 2 * READ_SIZE)
        self.size = 0
        self.marker = 0
        self.dropped = 0

    def write(self, chunk: bytes) -> None:
        if self.size + len(chunk) <= self.cap:
            self.file.write(chunk)
            self.size += len(chunk)
            return
        keep = self.cap // 2
        if len(chunk) >= keep:
            tail = chunk[-keep:]
        else:
            self.file.seek(max(self.size - (keep - len(chunk)), self.marker))
            tail = self.file.read() + chunk
        self.dropped += self.size - self.marker + len(chunk) - len(tail)
        marker = f"[anges: the oldest {self.dropped} bytes of this log were dropped]\n".encode()
        self.file.seek(0)
        self.file.write(marker + tail)
        self.file.truncate()
        self.size, self.marker = len(marker) + len(tail), len(marker)

    def __enter__(self) -> CappedLog:
        return self

    def __exit__(self, *exc) -> None:
        self.file.close()


def _run_foreground(command, argv, cwd, env, timeout, output_cap, interrupt_check, secrets, runner) -> CommandResult:
    started = time.monotonic()
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    try:
        proc = _start(argv, cwd, env, out_write, err_write, runner)
    except BaseException:
        os.close(out_read)
        os.close(err_read)
        raise
    finally:
        os.close(out_write)
        os.close(err_write)
    out, err = _CappedBuffer(output_cap), _CappedBuffer(output_cap)
    streams = {open(out_read, "rb", buffering=0): out, open(err_read, "rb", buffering=0): err}  # noqa: SIM115
    stop, finished = None, False
    try:
        stop = _pump(proc, streams, started + timeout, interrupt_check)
        finished = True
    finally:
        if stop or not finished:
            proc.kill()
            _drain(streams, time.monotonic() + DRAIN_AFTER_EXIT)
        for stream in streams:
            stream.close()
        proc.wait(None)
        proc.close()
    if proc.returncode is None and not stop:
        raise SandboxError("the command runner stopped before the command ended")
    stdout, stdout_omitted = out.render(secrets)
    stderr, stderr_omitted = err.render(secrets)
    return CommandResult(
        command=command,
        exit_code=None if stop else proc.returncode,
        stdout=stdout,
        stderr=stderr,
        duration=time.monotonic() - started,
        timed_out=stop == "timeout",
        interrupted=stop == "interrupt",
        stdout_omitted=stdout_omitted,
        stderr_omitted=stderr_omitted,
    )


def _pump(proc, streams: dict, deadline: float, interrupt_check) -> str | None:
    """Read output until the command ends; return "timeout" or "interrupt" if it must be stopped."""
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
            wait = min(POLL_INTERVAL, deadline - now)
            exited = _read_ready(selector, wait) if selector.get_map() else proc.wait(wait)
            if exited_at is None and (exited or (exit_fd is None and proc.poll() is not None)):
                exited_at = time.monotonic()
    finally:
        selector.close()


def _read_ready(selector: selectors.BaseSelector, timeout: float) -> bool:
    """Read every ready pipe once; True if the exit watch fired."""
    exited = False
    for key, _ in selector.select(max(timeout, 0)):
        if key.data is None:
            selector.unregister(key.fileobj)
            exited = True
            continue
        chunk = os.read(key.fd, READ_SIZE)
        if chunk:
            key.data.add(chunk)
        else:
            selector.unregister(key.fileobj)
            key.fileobj.close()
    return exited


def _drain(streams: dict, deadline: float) -> None:
    """Read what is left in the pipes until EOF or `deadline`."""
    selector = selectors.DefaultSelector()
    for stream, buffer in streams.items():
        if not stream.closed:
            selector.register(stream, selectors.EVENT_READ, buffer)
    while selector.get_map() and time.monotonic() < deadline:
        _read_ready(selector, deadline - time.monotonic())
    selector.close()
