"""The sandbox's seccomp filter, a classic BPF program handed to bwrap (`--seccomp FD`).

It refuses `socket(AF_UNIX, ...)`: a daemon of the machine listening on a Unix socket runs what it is sent, and
no file system rule covers every way to reach one (a relative name, a second hard link, a socket made after the
sandbox started, an abstract name with the network on). `socketpair(AF_UNIX, ...)` works for the connected kinds,
`SOCK_STREAM` and `SOCK_SEQPACKET`, whose ends the kernel never lets send elsewhere or connect again (programs
talk to their own children that way: asyncio, multiprocessing); a datagram pair is refused, since a datagram end
can `sendto()` or `connect()` any address. It refuses io_uring too, which would reach sockets without the system
calls filtered here.
"""

from __future__ import annotations

import errno
import os
import platform
import struct

_LD_W_ABS, _JEQ, _JGE, _AND, _RET = 0x20, 0x15, 0x35, 0x54, 0x06
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_NR, _ARCH, _ARG0, _ARG1 = 0, 4, 16, 24  # offsets in struct seccomp_data (little-endian: an argument's low half first)
AF_UNIX = 1
SOCK_STREAM, SOCK_SEQPACKET = 1, 5
CONNECTED_TYPES = (SOCK_STREAM, SOCK_SEQPACKET)
"""The kinds of Unix socket pair allowed: a stream or seqpacket end refuses an address (or ignores it) and cannot
connect again. A datagram end (SOCK_DGRAM, and SOCK_RAW, which the kernel makes one) reaches any socket by name."""
SOCK_TYPE_MASK = 0xF
"""The socket type in socketpair()'s second argument, without SOCK_NONBLOCK and SOCK_CLOEXEC."""
SYS_SOCKET, SYS_SOCKETPAIR = 1, 8
"""socketcall()'s numbers for socket() and socketpair()."""
IO_URING = (425, 426, 427)
"""io_uring_setup, io_uring_enter, io_uring_register: the same numbers on every architecture."""
X32_BIT = 0x40000000

# (AUDIT_ARCH_*, socket, socketpair, socketcall or None) of the system call tables a process may use on each machine.
_TABLES: dict[str, list[tuple[int, int, int, int | None]]] = {
    "x86_64": [(0xC000003E, 41, 53, None), (0x40000003, 359, 360, 102)],  # x86-64 (x32 refused whole), i386
    "aarch64": [(0xC00000B7, 198, 199, None), (0x40000028, 281, 288, None)],  # arm64, 32-bit arm
    "riscv64": [(0xF3 | 0xC0000000, 198, 199, None)],
}
_MACHINES = {"amd64": "x86_64", "arm64": "aarch64"}


def filter_program(unix_sockets: bool) -> bytes | None:
    """The filter for this machine's architecture (None when anges does not know its system call numbers)."""
    machine = platform.machine().lower()
    tables = _TABLES.get(_MACHINES.get(machine, machine))
    if tables is None:
        return None
    program: list[tuple] = [("ld", _ARCH)]
    blocks = []
    for arch, socket_nr, socketpair_nr, socketcall_nr in tables:
        label = f"arch-{arch:x}"
        program.append(("jeq", arch, label, None))
        blocks.append(_arch_block(label, arch, (socket_nr, socketpair_nr, socketcall_nr), unix_sockets))
    program.append(("ret", _ERRNO | errno.ENOSYS))  # no other table can reach this kernel from here
    for block in blocks:
        program += block
    program += [("label", "unix"), ("ret", _ERRNO | errno.EAFNOSUPPORT), ("label", "nosys"),
                ("ret", _ERRNO | errno.ENOSYS), ("label", "allow"), ("ret", _ALLOW)]
    return _assemble(program)


def filter_fd(unix_sockets: bool) -> int | None:
    """A pipe's read end holding the filter, to pass to bwrap (the caller closes it); None without a filter."""
    program = filter_program(unix_sockets)
    if program is None:
        return None
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, program)  # a few hundred bytes: far below a pipe's buffer
    finally:
        os.close(write_end)
    return read_end


def _arch_block(label: str, arch: int, numbers: tuple[int, int, int | None], unix_sockets: bool) -> list:
    socket_nr, socketpair_nr, socketcall_nr = numbers
    block: list[tuple] = [("label", label), ("ld", _NR)]
    if arch == 0xC000003E:
        block.append(("jge", X32_BIT, "nosys", None))
    block += [("jeq", nr, "nosys", None) for nr in IO_URING]
    if unix_sockets:
        return [*block, ("ret", _ALLOW)]
    family, pair = f"{label}-family", f"{label}-pair"
    block += [("jeq", socket_nr, family, None), ("jeq", socketpair_nr, pair, None)]
    if socketcall_nr is not None:  # socketcall(SYS_SOCKET..., args): the family is out of reach, refuse them all
        block.append(("jeq", socketcall_nr, f"{label}-call", None))
    block.append(("ret", _ALLOW))
    block += [("label", family), ("ld", _ARG0), ("jeq", AF_UNIX, "unix", None), ("ret", _ALLOW)]
    block += [("label", pair), ("ld", _ARG0), ("jeq", AF_UNIX, f"{label}-pair-type", None), ("ret", _ALLOW),
              ("label", f"{label}-pair-type"), ("ld", _ARG1), ("and", SOCK_TYPE_MASK)]
    block += [("jeq", kind, "allow", None) for kind in CONNECTED_TYPES] + [("ret", _ERRNO | errno.EAFNOSUPPORT)]
    if socketcall_nr is not None:
        block += [("label", f"{label}-call"), ("ld", _ARG0), ("jeq", SYS_SOCKET, "unix", None),
                  ("jeq", SYS_SOCKETPAIR, "unix", None), ("ret", _ALLOW)]
    return block


def _assemble(program: list[tuple]) -> bytes:
    """struct sock_filter records of `program`: ("ld", offset), ("and", value), ("jeq"/"jge", value, label if true,
    None = next), ("ret", value) and ("label", name) entries."""
    code = [item for item in program if item[0] != "label"]
    where, index = {}, 0
    for item in program:
        if item[0] == "label":
            where[item[1]] = index
        else:
            index += 1
    packed = []
    for index, item in enumerate(code):
        if item[0] == "ld":
            packed.append(struct.pack("=HBBI", _LD_W_ABS, 0, 0, item[1]))
        elif item[0] in ("ret", "and"):
            packed.append(struct.pack("=HBBI", _RET if item[0] == "ret" else _AND, 0, 0, item[1]))
        else:
            jump = where[item[2]] - index - 1
            if not 0 <= jump <= 255:
                raise ValueError("seccomp program too long for a jump")
            packed.append(struct.pack("=HBBI", _JEQ if item[0] == "jeq" else _JGE, jump, 0, item[1]))
    return b"".join(packed)
