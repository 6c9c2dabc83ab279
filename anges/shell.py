"""The command runner behind RUN_SHELL_CMD: bounded output, timeouts, interrupts and background jobs."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass

CREDENTIAL_ENV_VARS = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "DEEPSEEK_API_KEY",
    "OPENROUTER_API_KEY",
    "ANGES_UI_PASSWORD",
)
SECRET_SUFFIXES = ("_API_KEY", "_TOKEN", "_SECRET", "_PASSWORD", "_ACCESS_KEY")
"""Variables with these endings hold secrets: their values are masked in everything recorded."""
REDACTED = "[REDACTED]"
MIN_SECRET_LENGTH = 8

POLL_INTERVAL = 0.05
KILL_GRACE = 0.5
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
        head_text, tail_text = _mask_cut_edges(head_text, tail_text, secrets)
        return f"{head_text}\n... [{omitted} bytes omitted] ...\n{tail_text}", omitted


def _mask_cut_edges(head: str, tail: str, secrets: Iterable[str]) -> tuple[str, str]:
    """Mask a secret's fragment left at either side of the cut (a secret can straddle it)."""
    for secret in (s for s in secrets if len(s) >= MIN_SECRET_LENGTH):
        for size in range(len(secret) - 1, 3, -1):
            if head.endswith(secret[:size]):
                head = head[:-size] + REDACTED
                break
        for size in range(len(secret) - 1, 3, -1):
            if tail.startswith(secret[-size:]):
                tail = REDACTED + tail[size:]
                break
    return head, tail


def _is_credential(name: str) -> bool:
    upper = name.upper()
    return upper in CREDENTIAL_ENV_VARS or upper.endswith("_API_KEY")


def scrubbed_environment(pass_through: Iterable[str] = ()) -> dict[str, str]:
    """A copy of os.environ without model credentials, except the names in `pass_through`."""
    keep = set(pass_through)
    return {name: value for name, value in os.environ.items() if name in keep or not _is_credential(name)}


def is_secret_name(name: str) -> bool:
    """True for a variable that holds a secret: a model credential, or a name ending in a SECRET_SUFFIXES word."""
    return _is_credential(name) or name.upper().endswith(SECRET_SUFFIXES)


def secret_values(environ: Mapping[str, str] = os.environ) -> list[str]:
    """The values of the secret variables set in `environ` that are long enough to mask."""
    return [value for name, value in environ.items() if is_secret_name(name) and len(value) >= MIN_SECRET_LENGTH]


def mask_secrets(text: str, secrets: Iterable[str]) -> str:
    """Replace every occurrence of each secret (of at least 8 characters) with [REDACTED]."""
    for secret in sorted({s for s in secrets if len(s) >= MIN_SECRET_LENGTH}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text


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
) -> CommandResult:
    """Run `command` with bash in `cwd`; `prefix_cmd` is a shell fragment put before it; env defaults to scrubbed.

    Raises OSError when `cwd` does not exist or the shell cannot be started.
    """
    argv = [find_shell(), "-c", _script(command, prefix_cmd)]
    env = scrubbed_environment() if env is None else env
    if background:
        return _start_background(command, argv, cwd, env, log_dir)
    return _run_foreground(command, argv, cwd, env, timeout, output_cap, interrupt_check, list(secrets))


def _spawn(argv: list[str], cwd, env: dict[str, str], stdout, stderr) -> subprocess.Popen:
    # start_new_session (not a preexec_fn, which forces the slow fork path) gives the command its own group to kill.
    return subprocess.Popen(
        argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, start_new_session=True
    )


def _start_background(command: str, argv: list[str], cwd, env: dict[str, str], log_dir: str | None) -> CommandResult:
    started = time.monotonic()
    fd, log_path = tempfile.mkstemp(prefix="anges-bg-", suffix=".log", dir=log_dir)
    try:
        proc = _spawn(argv, cwd, env, stdout=fd, stderr=subprocess.STDOUT)
    finally:
        os.close(fd)
    # Reap the job when it ends so it never lingers as a zombie of ours.
    threading.Thread(target=proc.wait, name=f"anges-bg-{proc.pid}", daemon=True).start()
    return CommandResult(command, None, "", "", time.monotonic() - started, pid=proc.pid, log_path=log_path)


def _run_foreground(command, argv, cwd, env, timeout, output_cap, interrupt_check, secrets) -> CommandResult:
    started = time.monotonic()
    proc = _spawn(argv, cwd, env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = _CappedBuffer(output_cap), _CappedBuffer(output_cap)
    streams = {proc.stdout: out, proc.stderr: err}
    stop, finished = None, False
    try:
        stop = _pump(proc, streams, started + timeout, interrupt_check)
        finished = True
    finally:
        if stop or not finished:
            _kill_group(proc)
            _drain(streams, time.monotonic() + DRAIN_AFTER_EXIT)
        for stream in streams:
            stream.close()
        proc.wait()
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


def _pump(proc: subprocess.Popen, streams: dict, deadline: float, interrupt_check) -> str | None:
    """Read output until the command ends; return "timeout" or "interrupt" if it must be stopped."""
    selector = selectors.DefaultSelector()
    for stream, buffer in streams.items():
        selector.register(stream, selectors.EVENT_READ, buffer)
    exit_fd = _watch_exit(proc, selector)
    next_check, exited_at = 0.0, None
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
            exited = _read_ready(selector, wait) if selector.get_map() else _wait(proc, wait)
            if exited_at is None and (exited or (exit_fd is None and proc.poll() is not None)):
                exited_at = time.monotonic()
    finally:
        selector.close()
        if exit_fd is not None:
            os.close(exit_fd)


def _watch_exit(proc: subprocess.Popen, selector: selectors.BaseSelector) -> int | None:
    """Register a pidfd that becomes readable when the shell exits, so no one polls; None where unsupported."""
    try:
        exit_fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        return None
    selector.register(exit_fd, selectors.EVENT_READ, None)
    return exit_fd


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


def _wait(proc: subprocess.Popen, timeout: float) -> bool:
    try:
        proc.wait(max(timeout, 0))
    except subprocess.TimeoutExpired:
        return False
    return True


def _kill_group(proc: subprocess.Popen, grace: float = KILL_GRACE) -> None:
    """SIGTERM the command's process group, give it `grace` seconds, then SIGKILL what is left."""
    if not _signal_group(proc.pid, signal.SIGTERM):
        return
    deadline = time.monotonic() + grace
    try:
        while time.monotonic() < deadline:
            proc.poll()
            if not _group_alive(proc.pid):
                return
            time.sleep(0.01)
    except BaseException:
        # A second Ctrl-C (KeyboardInterrupt) cuts the grace short: the group must still not outlive us.
        _signal_group(proc.pid, signal.SIGKILL)
        raise
    _signal_group(proc.pid, signal.SIGKILL)


def _signal_group(pgid: int, signum: int) -> bool:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    except PermissionError:
        # A prefix such as `sudo -u bob` leaves processes we may not signal.
        return False
    return True


def _group_alive(pgid: int) -> bool:
    """True while a member of the group is running; zombies do not count, since init may never reap them."""
    if not os.path.isdir("/proc/self"):
        return _signal_group(pgid, 0)
    with os.scandir("/proc") as entries:
        return any(entry.name.isdigit() and _is_running_member(entry.name, pgid) for entry in entries)


def _is_running_member(pid: str, pgid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return False
    state, _ppid, group = stat[stat.rfind(b")") + 2 :].split()[:3]
    return int(group) == pgid and state not in (b"Z", b"X")
