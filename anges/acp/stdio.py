"""Stdout belongs to the protocol: everything else that writes there (a print, a library, a child process) goes
to stderr instead, and nothing but the protocol reads stdin."""

from __future__ import annotations

import os
import stat
import sys
from typing import BinaryIO


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
    """Why stdin/stdout cannot carry the protocol ("" when they can): asyncio needs pipes, sockets or terminals."""
    for fd, name in ((0, "stdin"), (1, "stdout")):
        try:
            mode = os.fstat(fd).st_mode
        except OSError:
            return f"{name} is closed; anges acp talks to an editor over stdin and stdout"
        if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)):
            return (f"{name} is a file; anges acp talks to an editor over stdin and stdout, which the editor connects "
                    "by pipes (see docs/acp.md)")
    return ""
