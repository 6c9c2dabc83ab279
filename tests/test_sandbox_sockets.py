"""The sandbox reaches no host socket: not by `socket(AF_UNIX)`, and not by a datagram socket pair whose end can
`sendto()` or `connect()` any address; the connected pairs programs use to talk to their children keep working.
Attacked with real host daemons on datagram sockets, by every name the file system rules do not cover."""

import os
import platform
import shlex
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import SANDBOX_PYTHON as PYTHON
from test_sandbox import actions, complete, reply, run_agent, shell

from anges.safety import seccomp

DATAGRAM_DAEMON = """
import socket, sys
address, marker = sys.argv[1], sys.argv[2]
server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
server.bind("\\0" + address[1:] if address.startswith("@") else address)
print("ready", flush=True)
while True:
    data = server.recv(100)
    with open(marker, "ab") as reached:
        reached.write(data)
"""


class DatagramDaemon:
    """A host daemon on a Unix datagram socket that acts on what it receives (here: writes it to `marker`)."""

    def __init__(self, address, cwd, marker):
        self.marker = Path(marker)
        self.process = subprocess.Popen([sys.executable, "-c", DATAGRAM_DAEMON, str(address), str(marker)], cwd=cwd,
                                        stdout=subprocess.PIPE, text=True)
        assert self.process.stdout.readline() == "ready\n"

    @property
    def reached(self):
        return self.marker.exists()

    def close(self):
        self.process.kill()
        self.process.wait()


SEND = """
import socket, sys
kind, how, a = sys.argv[1], sys.argv[2], sys.argv[3]
address = chr(0) + a[1:] if a[0] == "@" else a
ends = socket.socketpair(socket.AF_UNIX, getattr(socket, kind))
if how == "connect":
    ends[0].connect(address)
    ends[0].send(b"reached")
elif how == "sendmsg":
    ends[0].sendmsg([b"reached"], [], 0, address)
else:
    ends[0].sendto(b"reached", address)
print("sent")
"""


def send(kind, how, address):
    """A command that makes a Unix socket pair of `kind` and sends `reached` to `address` from one end."""
    return f"{PYTHON} -c {shlex.quote(SEND)} {kind} {how} {shlex.quote(str(address))}"


def abstract_name(network):
    return f"@anges-test-dgram-{os.getpid()}-{network}"


@pytest.mark.sandbox
@pytest.mark.parametrize("network", [False, True])
def test_no_datagram_pair_reaches_a_host_socket_by_any_name(work, outside, network):
    """A datagram end of `socketpair()` could `sendto()` a host daemon's socket by a relative name, a second hard
    link, one bound after the sandbox started and, with the network on, an abstract one."""
    relative = DatagramDaemon("relative.sock", outside, outside / "reached-relative")  # listed as `relative.sock`
    original = DatagramDaemon(outside / "daemon.sock", outside, outside / "reached-linked")
    os.link(outside / "daemon.sock", work / "linked.sock")
    abstract = DatagramDaemon(abstract_name(network), outside, outside / "reached-abstract")
    late = {}
    ways = [("SOCK_DGRAM", "sendto"), ("SOCK_DGRAM", "connect"), ("SOCK_DGRAM", "sendmsg"), ("SOCK_RAW", "sendto"),
            ("SOCK_SEQPACKET", "sendto"), ("SOCK_SEQPACKET", "connect"), ("SOCK_STREAM", "sendto")]
    targets = [outside / "relative.sock", work / "linked.sock", abstract_name(network)]

    def bind_late(prompt):  # a daemon binds in the working directory after the sandbox started
        late["daemon"] = DatagramDaemon(work / "late.sock", outside, outside / "reached-late")
        return reply(*(shell(send(kind, how, work / "late.sock")) for kind, how in ways))

    attacks = [shell(send(kind, how, target)) for target in targets for kind, how in ways]
    try:
        stream, _ = run_agent(work, [reply(*attacks), bind_late, complete()], network=network)
    finally:
        for daemon in (relative, original, abstract, late.get("daemon")):
            if daemon is not None:
                daemon.close()

    results = actions(stream)
    assert len(results) == len(attacks) + len(ways)
    assert not any(d.reached for d in (relative, original, abstract, late["daemon"]))
    # A seqpacket end sends to its own peer whatever address it is given; a datagram pair is never made.
    refused = [event for event in results if "SOCK_DGRAM" in event.data["command"] or "SOCK_RAW" in event.data["command"]]
    assert all("Address family not supported" in event.data["stderr"] and "sent" not in event.data["stdout"]
               for event in refused)
    assert "SANDBOX: no Unix sockets" in refused[0].content


CHILDREN = """
import asyncio, multiprocessing, socket, subprocess, sys

async def talk():
    process = await asyncio.create_subprocess_exec(sys.executable, "-c", "print(input()[::-1])",
                                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    out, _ = await process.communicate(b"olleh")
    return out.decode().strip()

def square(n):
    return n * n

def put(queue):
    queue.put("queued")

if __name__ == "__main__":
    print("asyncio", asyncio.run(talk()))
    here, there = multiprocessing.Pipe()
    there.send("piped")
    print("pipe", here.recv())
    with multiprocessing.Pool(2) as pool:
        print("pool", sum(pool.map(square, range(5))))
    queue = multiprocessing.Queue()
    worker = multiprocessing.Process(target=put, args=(queue,))
    worker.start()
    print("queue", queue.get(timeout=30))
    worker.join()
    print("subprocess", subprocess.run(["cat"], input="through a pipe", capture_output=True, text=True).stdout)
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
    a.send(b"packet")
    print("seqpacket", b.recv(10).decode())
"""


@pytest.mark.sandbox
def test_programs_still_talk_to_their_children_over_connected_pairs(work):
    (work / "children.py").write_text(CHILDREN)
    stream, _ = run_agent(work, [reply(shell(f"{PYTHON} children.py")), complete()])

    event = actions(stream)[0]
    assert event.data["stdout"].splitlines() == ["asyncio hello", "pipe piped", "pool 30", "queue queued",
                                                 "subprocess through a pipe", "seqpacket packet"], event.data["stderr"]


# -- the filter itself, on every architecture it knows -------------------------------------------------------------


def run_filter(program: bytes, arch: int, nr: int, *args: int) -> int:
    """What the classic BPF `program` returns for one system call (a faithful interpreter of the instructions the
    filter uses: load word, and, jeq, jge, ret)."""
    data = struct.pack("=iI", nr, arch) + struct.pack("=Q", 0) + b"".join(
        struct.pack("=Q", value) for value in (*args, *[0] * (6 - len(args))))
    code = [struct.unpack("=HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]
    pc, accumulator = 0, 0
    while True:
        op, true, false, k = code[pc]
        if op == 0x20:
            accumulator = struct.unpack_from("=I", data, k)[0]
        elif op == 0x54:
            accumulator &= k
        elif op in (0x15, 0x35):
            hit = accumulator == k if op == 0x15 else accumulator >= k
            pc += true if hit else false
        elif op == 0x06:
            return k
        else:
            raise AssertionError(f"unknown instruction {op:#x}")
        pc += 1


ALLOW, REFUSED = 0x7FFF0000, 0x00050000 | 97  # SECCOMP_RET_ERRNO | EAFNOSUPPORT
AF_INET, DGRAM, STREAM, SEQPACKET, RAW, NONBLOCK, CLOEXEC = 2, 2, 1, 5, 3, 0o4000, 0o2000000


@pytest.mark.parametrize("machine", ["x86_64", "aarch64", "riscv64"])
def test_the_filter_refuses_datagram_pairs_in_every_system_call_table(monkeypatch, machine):
    monkeypatch.setattr(platform, "machine", lambda: machine)
    program = seccomp.filter_program(unix_sockets=False)
    for arch, socket_nr, pair_nr, socketcall_nr in seccomp._TABLES[machine]:
        for kind in (DGRAM, RAW, DGRAM | NONBLOCK | CLOEXEC):
            assert run_filter(program, arch, pair_nr, 1, kind) == REFUSED, (hex(arch), kind)
        for kind in (STREAM, SEQPACKET, STREAM | NONBLOCK | CLOEXEC, SEQPACKET | CLOEXEC):
            assert run_filter(program, arch, pair_nr, 1, kind) == ALLOW, (hex(arch), kind)
        assert run_filter(program, arch, pair_nr, AF_INET, DGRAM) == ALLOW  # not a Unix socket
        assert run_filter(program, arch, socket_nr, 1, STREAM) == REFUSED
        if socketcall_nr is not None:  # its arguments lie in memory the filter cannot read: both refused whole
            for call in (1, 8):  # SYS_SOCKET, SYS_SOCKETPAIR
                assert run_filter(program, arch, socketcall_nr, call) == REFUSED
    allowing = seccomp.filter_program(unix_sockets=True)
    arch, _, pair_nr, _ = seccomp._TABLES[machine][0]
    assert run_filter(allowing, arch, pair_nr, 1, DGRAM) == ALLOW


# An i386 program (no libc), to try the 32-bit system call table on an x86-64 kernel:
#   socketcall(SYS_SOCKETPAIR, [AF_UNIX, SOCK_DGRAM, 0, sv]); socketpair(AF_UNIX, SOCK_DGRAM, 0, sv);
#   socketpair(AF_UNIX, SOCK_STREAM, 0, sv); exit(1 if the first failed | 2 if the second | 4 if the third)
I386_CODE = bytes.fromhex(
    "83ec20c7042401000000c744240402000000c7442408000000008d4424108944240cb866000000bb0800000089e1cd80"
    "89c7b868010000bb01000000b90200000031d28d742410cd8089c5b868010000bb01000000b90100000031d28d742410"
    "cd8031db85ff790383cb0185ed790383cb0285c0790383cb04b801000000cd80")


def i386_program(path: Path) -> Path:
    """A static ELF32 executable of I386_CODE: one loaded segment, entry right after the headers."""
    base, headers = 0x08048000, 52 + 32
    size = headers + len(I386_CODE)
    elf = b"\x7fELF" + bytes([1, 1, 1]) + bytes(9)
    elf += struct.pack("<HHIIIIIHHHHHH", 2, 3, 1, base + headers, 52, 0, 0, 52, 32, 1, 0, 0, 0)
    elf += struct.pack("<IIIIIIII", 1, 0, base, base, size, size, 5, 0x1000)
    path.write_bytes(elf + I386_CODE)
    path.chmod(0o755)
    return path


@pytest.mark.sandbox
def test_a_32_bit_program_cannot_make_a_datagram_pair_either(work):
    if platform.machine() != "x86_64":
        pytest.skip("the i386 system call table is an x86-64 kernel's")
    program = i386_program(work / "pair32")
    outside = subprocess.run([str(program)], timeout=30, capture_output=True)
    stream, _ = run_agent(work, [reply(shell("./pair32; echo $?")), complete()])

    inside = actions(stream)[0].data["stdout"]
    if outside.returncode == 0:  # the kernel runs i386 programs: socketcall and the datagram pair refused, not the other
        assert inside == "3\n"
    else:  # a kernel without the 32-bit table: nothing reaches it from the sandbox either
        assert inside != "0\n"
