"""One command hook's process: started by your shell outside the sandbox, the event on its stdin, its output kept
(bounded), ended with everything it started on a timeout, a stop, or once it exits."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable

from anges.hooks.answers import Outcome, command_outcome
from anges.util.clipping import clip

OUTPUT_CAP = 256_000
"""Bytes of each of stdout and stderr kept (the rest is read and dropped, so the hook never blocks on a pipe)."""
SHOWN_CHARS = 4_000
"""The most of its output an event keeps."""
EXIT_GRACE = 0.2
"""Seconds its output pipes may stay open after it exited (something it started in the background holds them)."""
KILL_GRACE = 0.3
"""Seconds between asking its processes to end (SIGTERM) and killing them."""
POLL = 0.05


POSIX_SHELLS = ("sh", "bash", "zsh", "dash", "ksh", "mksh", "ash")
"""The shells $SHELL may name for hooks: a command written for one runs the same in the others."""


def shell() -> str:
    """Your shell ($SHELL, when it is one of POSIX_SHELLS), else /bin/sh."""
    chosen = os.environ.get("SHELL", "")
    usable = os.path.isabs(chosen) and os.access(chosen, os.X_OK) and not os.path.isdir(chosen)
    return chosen if usable and os.path.basename(chosen) in POSIX_SHELLS else "/bin/sh"


def run_hook_command(command: str, stdin: bytes, cwd: str, env: dict[str, str], timeout: float,
                     stop: Callable[[], bool]) -> Outcome:
    """Run `command` with `stdin` and wait for it (at most `timeout` seconds; at once ended when `stop()`)."""
    started = time.monotonic()
    try:
        process = subprocess.Popen([shell(), "-c", command], cwd=cwd, env=env, stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    except OSError as exc:
        return Outcome("failed", reason=f"it could not be started: {exc}", duration=time.monotonic() - started)
    try:
        ended, out, err = _communicate(process, stdin, started, timeout, stop)
    finally:
        _end_group(process)
    stdout, stderr = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    if ended == "exited":
        outcome = command_outcome(process.returncode, stdout, stderr)
    elif ended == "timeout":
        outcome = Outcome("timeout", reason=f"it did not finish within {timeout:g} s, and was ended")
    else:
        outcome = Outcome("stopped", reason="the run stopped, and it was ended")
    outcome.duration = round(time.monotonic() - started, 3)
    outcome.output = clip("\n".join(part for part in (stdout.strip(), stderr.strip()) if part), SHOWN_CHARS)
    return outcome


def _communicate(process: subprocess.Popen, stdin: bytes, started: float, timeout: float,
                 stop: Callable[[], bool]) -> tuple[str, bytes, bytes]:
    """Feed stdin and read both outputs until it exits (then "exited"), times out or is stopped."""
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    kept = {process.stdout.fileno(): bytearray(), process.stderr.fileno(): bytearray()}
    writer, pending = process.stdin.fileno(), memoryview(stdin)
    selector = selectors.DefaultSelector()
    for fd in (*kept, writer):
        os.set_blocking(fd, False)
    selector.register(writer, selectors.EVENT_WRITE)
    for fd in kept:
        selector.register(fd, selectors.EVENT_READ)
    exited_at = None
    with selector:
        while True:
            if stop():
                return "stopped", bytes(kept[process.stdout.fileno()]), bytes(kept[process.stderr.fileno()])
            now = time.monotonic()
            if now - started > timeout:
                return "timeout", bytes(kept[process.stdout.fileno()]), bytes(kept[process.stderr.fileno()])
            if process.poll() is not None:
                exited_at = exited_at or now
                if not any(fd in kept for fd in selector.get_map()) or now - exited_at > EXIT_GRACE:
                    break
            for key, _ in selector.select(POLL):
                fd = int(key.fd)
                if fd == writer:
                    pending = _feed(selector, process, pending)
                    continue
                try:
                    chunk = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                if not chunk:
                    selector.unregister(fd)
                elif len(kept[fd]) < OUTPUT_CAP:
                    kept[fd] += chunk[:OUTPUT_CAP - len(kept[fd])]
    return "exited", bytes(kept[process.stdout.fileno()]), bytes(kept[process.stderr.fileno()])


def _feed(selector: selectors.BaseSelector, process: subprocess.Popen, pending: memoryview) -> memoryview:
    """Write what the hook's stdin can take; close it once all is written (or the hook closed it)."""
    assert process.stdin is not None
    try:
        written = os.write(process.stdin.fileno(), pending[:65536]) if pending else 0
    except BlockingIOError:
        return pending
    except OSError:  # it closed its stdin without reading it all: fine
        written = len(pending)
    pending = pending[written:]
    if not pending:
        selector.unregister(process.stdin.fileno())
        process.stdin.close()
    return pending


def _end_group(process: subprocess.Popen) -> None:
    """End every process of the hook's group (its own session): asked first, killed after KILL_GRACE."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        deadline = time.monotonic() + KILL_GRACE
        while time.monotonic() < deadline:
            process.poll()  # reaps the hook itself, so only live processes keep the group
            try:
                os.killpg(process.pid, 0)
            except (ProcessLookupError, PermissionError):
                process.wait()
                return
            time.sleep(0.01)
    process.wait()
