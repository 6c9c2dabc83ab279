"""Who is at the other end of a connection from this machine: the account that owns the client's socket.

On loopback every client has the same address, so an address cannot tell the owner from another account of the
machine. The kernel can: a TCP socket of this network namespace is listed in `/proc/net/tcp` (or `tcp6`) with
the user id of the process that opened it, and no process can set another account's id there.
"""

from __future__ import annotations

import ipaddress
import struct

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
TABLES = {4: "/proc/net/tcp", 6: "/proc/net/tcp6"}
ESTABLISHED = "01"
MAX_TABLE_BYTES = 64 << 20
"""More than a machine's sockets ever take (about 150 bytes each): a table beyond it is not read."""


def local_account(peer: tuple[str, int], server: tuple[str, int]) -> int | None:
    """The user id that owns the socket at `peer` (host, port) connected to this server's `server` (host, port; host
    "" when it is not known); None when no socket of this machine's network namespace is that one (the client is
    elsewhere, or this is not Linux)."""
    peer_address, server_address = _address(peer[0]), _address(server[0])
    if peer_address is None:
        return None
    remote = f":{server[1]:04X}"
    for address in _forms(peer_address):
        if server_address is not None:
            remote = next((f"{_hex(form)}:{server[1]:04X}" for form in _forms(server_address)
                           if form.version == address.version), remote)
        found = _owner(TABLES[address.version], f"{_hex(address)}:{peer[1]:04X}", remote)
        if found is not None:
            return found
    return None


def _address(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def _forms(address: Address) -> list[Address]:
    """An IPv4 client of a server listening on `::` shows as ::ffff:a.b.c.d; its socket is in the IPv4 table."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return [address.ipv4_mapped, address]
    return [address]


def _owner(table: str, local: str, remote: str) -> int | None:
    """The uid of the established socket whose local address is `local` and whose remote one is, or ends with,
    `remote`."""
    try:
        with open(table, encoding="ascii") as file:
            lines = file.read(MAX_TABLE_BYTES).splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) > 7 and fields[1] == local and fields[2].endswith(remote) and fields[3] == ESTABLISHED:
            return int(fields[7])
    return None


def _hex(address: Address) -> str:
    """An address as the kernel's tables print it: each 32-bit word in this machine's byte order, in hex."""
    packed = address.packed
    words = struct.unpack(f"={len(packed) // 4}I", packed)
    return "".join(f"{word:08X}" for word in words)
