"""A command's output as it arrives: the head and tail of each stream the model reads, and the whole of it (up to a
cap) in a file the model can open, made only once the output outgrows what the model reads."""

from __future__ import annotations

import os
import tempfile
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from anges.util.clipping import cut_at_lines, line_omission
from anges.util.masking import MIN_SECRET_LENGTH, REDACTED, mask_cut_edges, mask_secrets

READ_SIZE = 65536
OUTPUT_FILE_PREFIX = "anges-out-"


class StreamView:
    """One stream of a command (stdout or stderr): its first and last `keep` bytes, its size and its line count."""

    def __init__(self, keep: int, capture: Capture | None = None):
        self.keep = keep
        self.capture = capture
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_size = 0
        self.size = 0
        self.newlines = 0
        self.ends_in_newline = True

    def add(self, chunk: bytes) -> None:
        """Take the next bytes the command printed."""
        self.size += len(chunk)
        self.newlines += chunk.count(b"\n")
        self.ends_in_newline = chunk.endswith(b"\n")
        room = self.keep - len(self.head)
        if room > 0:
            self.head += chunk[:room]
        self.tail.append(chunk)
        self.tail_size += len(chunk)
        while self.tail_size - len(self.tail[0]) >= self.keep:
            self.tail_size -= len(self.tail.popleft())
        if self.capture is not None:
            self.capture.save(chunk)

    @property
    def lines(self) -> int:
        """Lines printed (a last line without its newline counts)."""
        return self.newlines + (0 if self.ends_in_newline or not self.size else 1)

    def render(self, budget: int, secrets: Iterable[str] = ()) -> tuple[str, int]:
        """What the model reads of the stream within `budget` bytes, secrets masked, with one marker saying how many
        lines and bytes were cut; and the number of bytes cut."""
        tail = b"".join(self.tail)[-self.keep:]
        start, end = cut_at_lines(bytes(self.head), tail, self.size, budget)
        secrets = list(secrets)
        omitted = self.size - len(start) - len(end)
        head_text = mask_secrets(start.decode("utf-8", errors="replace"), secrets)
        if not omitted:
            return head_text, 0
        tail_text = mask_secrets(end.decode("utf-8", errors="replace"), secrets)
        head_text, tail_text = mask_cut_edges(head_text, tail_text, secrets)
        lines = self.newlines - start.count(b"\n") - end.count(b"\n")
        marker = line_omission(lines, omitted)
        return head_text + (marker[1:] if head_text.endswith("\n") else marker) + tail_text, omitted


@dataclass
class Rendered:
    """The model's view of a command's output: both streams within the budget, and the facts of the whole."""

    stdout: str
    stderr: str
    stdout_omitted: int
    stderr_omitted: int
    stdout_bytes: int
    stderr_bytes: int
    stdout_lines: int
    stderr_lines: int
    output_path: str | None
    output_dropped: int = 0
    """Bytes the file lost from its start to stay within its cap."""


class Capture:
    """Both streams of one command. The model reads `budget` bytes of them together (a stream that needs less leaves
    the rest to the other); once they outgrow it, everything printed also goes to a file in `directory` (None: no
    file) that keeps at most `file_cap` bytes, the newest."""

    def __init__(self, budget: int, directory: str | None, file_cap: int, secrets: Iterable[str] = ()):
        self.budget = max(budget, 0)
        self.directory = directory
        self.file_cap = file_cap
        self.secrets = list(secrets)
        keep = max(self.budget, 1)
        self.stdout = StreamView(keep, self)
        self.stderr = StreamView(keep, self)
        self.pending: list[bytes] | None = []
        self.pending_size = 0
        self.log: CappedLog | None = None
        self.path: str | None = None
        self.dropped = 0

    def save(self, chunk: bytes) -> None:
        """Keep `chunk` for the file: in memory while the output fits the budget, in the file after."""
        if self.log is not None:
            self._write(chunk)
        elif self.pending is not None:
            self.pending.append(chunk)
            self.pending_size += len(chunk)
            if self.pending_size > self.budget:
                self.open_file(self.directory)

    def open_file(self, directory: str | None) -> str | None:
        """Start the file in `directory` (with what was printed so far) unless there is one; its path, or None."""
        if self.path is None and directory is not None:
            chunks, self.pending = self.pending or [], None  # what was printed before, unless it was let go
            try:
                fd, path = tempfile.mkstemp(prefix=OUTPUT_FILE_PREFIX, suffix=".log", dir=directory)
                self.log, self.path = CappedLog(fd, self.file_cap, self.secrets), path
            except OSError:
                return None  # no room for the file (or the run's directory went away): the model gets the cut only
            for chunk in chunks:
                self._write(chunk)
        self.pending = None
        return self.path

    def take_log(self) -> CappedLog | None:
        """The open file, for a copier that goes on writing it after the command moved to the background."""
        log, self.log = self.log, None
        return log

    def render(self, secrets: Iterable[str] = ()) -> Rendered:
        """Both streams as the model reads them, and the facts of what the command printed."""
        out, err = self.stdout, self.stderr
        out_share, err_share = _shares(out.size, err.size, self.budget)
        stdout, stdout_omitted = out.render(out_share, secrets)
        stderr, stderr_omitted = err.render(err_share, secrets)
        path = self.path if stdout_omitted or stderr_omitted else None
        dropped = self.log.dropped if self.log is not None else self.dropped
        return Rendered(stdout, stderr, stdout_omitted, stderr_omitted, out.size, err.size, out.lines, err.lines, path,
                        dropped if path else 0)

    def close(self) -> None:
        if self.log is not None:
            self.log.close()
            self.dropped, self.log = self.log.dropped, None

    def _write(self, chunk: bytes) -> None:
        if self.log is None:  # a write before failed: the file is as complete as it could be made
            return
        try:
            self.log.write(chunk)
        except OSError:
            self.log.abandon()
            self.log = None


def _shares(out: int, err: int, budget: int) -> tuple[int, int]:
    """How `budget` bytes are split between stdout and stderr: what a stream does not need goes to the other."""
    half = budget // 2
    if out + err <= budget or err <= half:
        return budget - min(err, budget), min(err, budget)
    if out <= half:
        return out, budget - out
    return budget - half, half


class SecretFilter:
    """Masks known secrets in bytes written as they come, holding back only an end that could begin one."""

    def __init__(self, secrets: Iterable[str]):
        found = {secret.encode() for secret in secrets if len(secret) >= MIN_SECRET_LENGTH}
        self.secrets = sorted(found, key=len, reverse=True)
        self.held = b""

    def feed(self, chunk: bytes) -> bytes:
        """What can be written of `chunk` now, masked."""
        if not self.secrets:
            return chunk
        data = self.held + chunk
        for secret in self.secrets:
            data = data.replace(secret, REDACTED.encode())
        keep = self._open_end(data)
        self.held = data[len(data) - keep:]
        return data[:len(data) - keep]

    def flush(self) -> bytes:
        """The end held back (the stream ended before it could become a secret)."""
        held, self.held = self.held, b""
        return held

    def _open_end(self, data: bytes) -> int:
        longest = 0
        for secret in self.secrets:
            for size in range(min(len(secret) - 1, len(data)), longest, -1):
                if data.endswith(secret[:size]):
                    longest = size
                    break
        return longest


class CappedLog:
    """A log file that keeps its newest bytes: past `cap`, all but the newest quarter is dropped (so the bytes moved
    to trim it are a third of those written) and a marker line says how much. Known `secrets` are masked."""

    def __init__(self, fd: int, cap: int, secrets: Iterable[str] = ()):
        """`fd`: the file, open for reading and writing (as `mkstemp` made it: the path is not opened again, where a
        command could have put a link meanwhile)."""
        self.file = os.fdopen(fd, "r+b", buffering=0)  # noqa: SIM115  (closed by close())
        self.cap = max(cap, 2 * READ_SIZE)
        self.filter = SecretFilter(secrets)
        self.size = 0
        self.marker = 0
        self.dropped = 0

    def write(self, chunk: bytes) -> None:
        """Add what the command printed (a secret it ends with the start of waits for the next write)."""
        self._store(self.filter.feed(chunk))

    def close(self) -> None:
        """Write what was held back and close the file."""
        try:
            self._store(self.filter.flush())
        finally:
            self.file.close()

    def abandon(self) -> None:
        """Close the file after a write failed (it was removed, or the disk is full): nothing more goes in."""
        self.file.close()

    def _store(self, chunk: bytes) -> None:
        if self.size + len(chunk) <= self.cap:
            self.file.write(chunk)
            self.size += len(chunk)
            return
        keep = self.cap // 4
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
        self.close()
