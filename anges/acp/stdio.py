"""Stdout belongs to the protocol: everything else that writes there (a print, a library, a child process) goes
to stderr instead, and nothing but the protocol reads stdin.

An editor connects stdin and stdout by pipes; either may also be a file (`anges acp < requests.jsonl >
replies.jsonl`): requests read from a file are read one at a time, the next once the one before is answered.
"""

from __future__ import annotations

import asyncio
import os
import stat
import sys
from typing import Any, BinaryIO

from anges.acp.wire import Wire

READ_SIZE = 65536


def take_stdio() -> tuple[BinaryIO, BinaryIO]:
    """The protocol's input and output: the process's stdin and stdout, moved to private descriptors.

    Afterwards file descriptor 1 (and `sys.stdout`) is stderr, and descriptor 0 is /dev/null; the private
    descriptors are not inherited by child processes.
    """
    sys.stdout.flush()
    protocol_in = os.fdopen(os.dup(0), "rb", buffering=0)
    protocol_out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(devnull, 0)
    finally:
        os.close(devnull)
    sys.stdout = sys.stderr
    return protocol_in, protocol_out


def unusable() -> str:
    """Why stdin/stdout cannot carry the protocol ("" when they can)."""
    for fd, name in ((0, "stdin"), (1, "stdout")):
        try:
            os.fstat(fd)
        except OSError:
            return f"{name} is closed; anges acp talks to an editor over stdin and stdout"
    return ""


def is_file(stream: BinaryIO) -> bool:
    """True when `stream` is a regular file (or anything else asyncio cannot watch), not a pipe, socket or tty."""
    mode = os.fstat(stream.fileno()).st_mode
    return not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode))


async def open_streams(protocol_in: BinaryIO, protocol_out: BinaryIO, wire: Wire, limit: int
                       ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, asyncio.Task | None]:
    """The reader and writer the SDK speaks on, and the task that feeds a file's requests (None for a pipe)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit)
    feeding = None
    if is_file(protocol_in):
        feeding = asyncio.ensure_future(_feed(reader, protocol_in, wire))
    else:
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), protocol_in)
    protocol = asyncio.StreamReaderProtocol(asyncio.StreamReader())
    if is_file(protocol_out):
        transport: Any = _FileTransport(protocol_out)
    else:
        transport, protocol = await loop.connect_write_pipe(lambda: protocol, protocol_out)
    return reader, asyncio.StreamWriter(transport, protocol, None, loop), feeding


async def _feed(reader: asyncio.StreamReader, file: BinaryIO, wire: Wire) -> None:
    """Pass a file's lines to the reader one request at a time, each once the one before it is answered (as an
    editor waits for its answers); the input ends after the last answer."""
    rest = b""
    while chunk := await asyncio.to_thread(file.read, READ_SIZE):
        lines = (rest + chunk).split(b"\n")
        rest = lines.pop()
        for line in lines:
            await _send(reader, line, wire)
    if rest.strip():
        await _send(reader, rest, wire)
    reader.feed_eof()


async def _send(reader: asyncio.StreamReader, line: bytes, wire: Wire) -> None:
    reader.feed_data(line + b"\n")
    request = wire.request_id(line)
    if request is not None:
        await wire.answered(request)


class _FileTransport(asyncio.WriteTransport):
    """Writes to a regular file, which never keeps a writer waiting long (asyncio's pipe transports refuse files)."""

    def __init__(self, file: BinaryIO):
        super().__init__()
        self._file = file
        self._closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(bytes(data))
        while view:
            view = view[self._file.write(view) or 0:]

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        self._closing = True

    def can_write_eof(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default
