"""Why the sandbox, not the command, likely made a command fail: the note a command's result carries (`SANDBOX:
...`), naming the real reason: the protected place a write touched, the writable paths, the network, a hidden path,
Unix sockets."""

from __future__ import annotations

import os
import re

from anges.safety.sandbox import PROJECT_DIRS, VCS_DIRS, SandboxSettings, startup_places
from anges.util.paths import inside, resolve

_READ_ONLY_MARKS = ("Read-only file system",)
_NETWORK_MARKS = ("Network is unreachable", "Temporary failure in name resolution", "Could not resolve host",
                  "Name or service not known", "No address associated with hostname", "getaddrinfo failed",
                  "nodename nor servname", "Failed to establish a new connection", "network is unreachable")
_SOCKET_MARKS = ("Address family not supported by protocol",)


def explain_block(result, settings: SandboxSettings) -> str:
    """A note when the sandbox, not the command, is the likely cause of a failure ("" otherwise)."""
    if not settings.enabled or (result.exit_code == 0 and not result.timed_out):
        return ""
    output = f"{result.stdout}\n{result.stderr}"
    if any(mark in output for mark in _READ_ONLY_MARKS):
        return f"read-only file system — {_why_read_only(result.command, output, settings)}"
    if not settings.network and any(mark in output for mark in _NETWORK_MARKS):
        return "no network — the sandbox has no network access"
    if any(path in output for path in settings.hidden):
        return "hidden — credential paths are not visible in the sandbox"
    if not settings.unix_sockets and any(mark in output for mark in _SOCKET_MARKS):
        return ("no Unix sockets — commands in the sandbox cannot make them (a daemon of the machine could run "
                "what they send); a socket pair still works")
    return ""


def _why_read_only(command: str, output: str, settings: SandboxSettings) -> str:
    """Why a write failed: the protected place it touched (named in the output; for a git command that names none
    outside the writable paths, the working directory's repository), else where commands may write."""
    lines = [line for line in output.splitlines() if any(mark in line for mark in _READ_ONLY_MARKS)]
    words = (word.rstrip(".,;:") for line in lines for word in re.split(r"[\s'\"`]+", line))
    named = [resolve(os.path.join(settings.workdir, word)) for word in words if "/" in word or word[:1] == "."]
    in_writable = all(any(inside(path, root) for root in settings.writable) for path in named)
    if in_writable and re.search(r"(^|[\s;&|(])git\s", command):
        named += [resolve(os.path.join(settings.workdir, name)) for name in VCS_DIRS]
    for path in named:
        kept = next((kept for kept in settings.protected if inside(path, kept)), None)
        if kept is not None:
            return _protected_reason(kept)
    if not settings.writable:
        return "the read-only sandbox lets commands write only to a private /tmp"
    return f"outside the sandbox's writable paths (writable: {', '.join(settings.writable)}; and a private /tmp)"


def _protected_reason(kept: str) -> str:
    if os.path.basename(kept) in VCS_DIRS:
        return (f"{kept} is a repository's own directory, read-only in the sandbox (its hooks and config would run "
                "outside it), so committing, branching or bisecting fails there")
    if os.path.basename(kept) in PROJECT_DIRS:
        return f"{kept} is the project's anges folder (its hooks run outside the sandbox), read-only in the sandbox"
    if kept in {resolve(path) for path in startup_places()}:
        return f"{kept} is a startup place of the shell, git, Python or an editor, read-only in the sandbox"
    return f"{kept} holds code anges itself runs, read-only in the sandbox"
