"""The web chat's password: where `anges ui` takes it from (the environment, a file or a prompt; the command line
only with a warning, since every local user can read it with `ps`) and what makes a password, or a chosen
token, too weak to guard a shell."""

from __future__ import annotations

import os
import re
import stat
import sys

from anges.exceptions import ConfigError
from anges.util.masking import note_secret_file

from .auth import is_loopback

MIN_SECRET_LENGTH = 12
"""Characters a password (or a chosen token) needs at least."""
PROMPT_TRIES = 3
"""How many times the terminal asks for a password before `anges ui` gives up."""
PASSPHRASE_TIP = " (a few random words make a passphrase that is long and easy to type)"
WHERE = "ANGES_UI_PASSWORD, --password-file or web.password"
"""Where a password can come from, for messages."""
COMMAND_LINE_WARNING = (
    "anges ui: warning: a password given with --password can be read by every user of this machine (ps, "
    "/proc/PID/cmdline). Set ANGES_UI_PASSWORD instead, or put it in a file only you can read and pass "
    "--password-file FILE; off localhost, `anges ui` on a terminal asks for it when neither is set.")
# Well-known passwords of 12 characters or more (shorter ones fail the length rule), compared without case,
# spaces, dashes or underscores.
COMMON = frozenset("""
123456789012 1234567890123 12345678901234 123456789123 1234567891011 0123456789ab 1234567890ab 1234567890qwerty
qwertyuiopas qwertyuiop12 qwertyuiop123 qwertyuiop1234 qwertyuiopasdfghjkl qwertyuiopasdfghjklzxcvbnm
qwerty123456 qwerty1234567 qwertyqwerty1 asdfghjkl123 asdfghjklqwerty zxcvbnm12345 1q2w3e4r5t6y 1q2w3e4r5t6y7u8i
1qaz2wsx3edc 1qaz2wsx3edc4rfv qazwsxedcrfv qazwsxedcrfvtgb zaq12wsxcde3 zaq1xsw2cde3 abcdefghijkl abcdefghijklm
abcdefghijklmnop abcdefghijklmnopqrstuvwxyz abc123456789 abcd12345678 password1234 password12345 password123456
password1234567 password123! p@ssw0rd1234 p@ssword1234 passw0rd1234 mypassword123 mypassword1234 thisismypassword
iloveyou1234 iloveyou123456 administrator administrator1 admin1234567 admin12345678 changeme1234 changeme123456
letmein12345 letmein123456 welcome12345 welcome123456 welcome2024! welcome2025! welcome2026! trustno1trustno1
superman1234 football1234 baseball1234 basketball12 sunshine1234 princess1234 starwars1234 dragon123456
monkey123456 shadow123456 master123456 computer1234 whatever1234 internet1234 default12345 secret123456
correcthorsebatterystaple correcthorsebattery opensesame12 anges1234567 angespassword changethispassword
""".split())


def weakness(value: str) -> str:
    """Why `value` is too weak to guard the chat: too short, one text repeated, or well known; "" when it is not."""
    text = value.strip()
    if len(text) < MIN_SECRET_LENGTH:
        return f"too short: use at least {MIN_SECRET_LENGTH} characters"
    folded = text.lower()
    if re.fullmatch(r"(.+?)\1+", folded, re.DOTALL):
        return "one character or text repeated"
    if re.sub(r"[\s_-]", "", folded) in COMMON:
        return "a well-known password"
    return ""


def check_secret(what: str, value: str) -> None:
    """ConfigError when `value` (when set) is too weak, saying why and how to choose a better one."""
    why = weakness(value) if value else ""
    if why:
        raise ConfigError(f"{what} is {why}{PASSPHRASE_TIP}")


def chosen_password(password: str | None, password_file: str | None, host: str, configured: str) -> str | None:
    """The password `anges ui` serves with: `--password` (with a warning), `--password-file`, else None (then
    `serve` reads ANGES_UI_PASSWORD or `configured`), else asked on a terminal when other machines will reach it."""
    if password is not None and password_file:
        raise ConfigError("give --password or --password-file, not both")
    if password is not None:
        print(COMMAND_LINE_WARNING, file=sys.stderr)
        return password
    if password_file:
        return password_from_file(password_file)
    if os.environ.get("ANGES_UI_PASSWORD") or configured or is_loopback(host) or not sys.stdin.isatty():
        return None
    return prompt_password()


def password_from_file(path: str) -> str:
    """The first line of `path` ("-": standard input); a warning when other users may read the file."""
    try:
        if path == "-":
            text = sys.stdin.readline()
        else:
            note_secret_file(path)  # commands do not see it (nor change what the next start serves with)
            with open(path, encoding="utf-8") as source:
                mode = os.fstat(source.fileno()).st_mode
                text = source.readline()
            if mode & (stat.S_IRGRP | stat.S_IROTH):
                print(f"anges ui: warning: other users may read {path}: chmod 600 it", file=sys.stderr)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the password file {path}: {getattr(exc, 'strerror', None) or exc}") from None
    password = text.rstrip("\r\n")
    if not password:
        raise ConfigError(f"the password file {path} is empty: its first line is the password")
    return password


def prompt_password(tries: int = PROMPT_TRIES) -> str:
    """Ask for a new password on the terminal, twice; a weak one, or a repeat that differs, is asked again (up to
    `tries` times)."""
    import getpass

    print(f"anges ui: other machines can reach this chat, so it needs a password ({MIN_SECRET_LENGTH} characters "
          "or more; set ANGES_UI_PASSWORD to skip this question).", file=sys.stderr)
    for _ in range(tries):
        try:
            first = getpass.getpass("Password: ")
            why = weakness(first)
            again = "" if why else getpass.getpass("The same again: ")
        except (EOFError, KeyboardInterrupt):
            raise ConfigError("no password given") from None
        if not why and first == again:
            return first
        problem = f"that password is {why}" if why else "the two passwords differ"
        print(f"{problem}; try again{PASSPHRASE_TIP if why else ''}.", file=sys.stderr)
    raise ConfigError(f"no password set after {tries} tries")
