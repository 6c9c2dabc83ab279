"""`anges ui` and its password, as real processes: from the environment, a file or a terminal prompt, and the
command line only with a warning; the address printed on stdout for scripts."""

import os
import pty
import re
import select
import subprocess
import sys
import urllib.error
import urllib.request
from http.cookiejar import CookieJar
from urllib.parse import urlencode

import pytest

PASSWORD = "a lamp on the sill at dusk"
ADDRESS = re.compile(r"http://127\.0\.0\.1:\d+/\n")


def start_ui(tmp_path, *args, env=None, **popen):
    options = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True, **popen}
    return subprocess.Popen([sys.executable, "-m", "anges", "ui", "--port", "0", *args], cwd=tmp_path,
                            env={**os.environ, "ANGES_HOME": str(tmp_path), **(env or {})}, **options)


def stop(server):
    server.terminate()
    server.wait(10)
    for stream in (server.stdout, server.stderr):
        if stream:
            stream.close()


def log_in(base, password):
    """Log in as a browser would (the form and its CSRF token); the opener that holds the session."""
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))
    form = opener.open(base + "login").read().decode()
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', form).group(1)
    body = urlencode({"password": password, "csrf_token": csrf, "next": "/"}).encode()
    with opener.open(base + "login", data=body) as answer:
        assert answer.url == base, "logged in, and sent to the chats"
    return opener


def test_a_password_on_the_command_line_works_with_a_warning_that_says_what_to_do_instead(tmp_path):
    server = start_ui(tmp_path, "--password", PASSWORD)
    try:
        base = server.stdout.readline()
        assert ADDRESS.fullmatch(base), base
        warning = server.stderr.readline()
        assert warning.startswith("anges ui: warning: a password given with --password can be read by every user")
        assert "Set ANGES_UI_PASSWORD instead" in warning and "--password-file FILE" in warning
        assert server.stderr.readline().startswith(f"anges web chat on {base.strip()}  (Ctrl-C to stop)")
        with log_in(base.strip(), PASSWORD).open(base.strip() + "api/chats") as listing:
            assert listing.status == 200
    finally:
        stop(server)


def test_the_password_from_the_environment_or_a_file_needs_no_warning(tmp_path):
    server = start_ui(tmp_path, env={"ANGES_UI_PASSWORD": PASSWORD})
    try:
        base = server.stdout.readline().strip()
        assert server.stderr.readline().startswith(f"anges web chat on {base}  (Ctrl-C")
        with log_in(base, PASSWORD).open(base + "api/chats") as listing:
            assert listing.status == 200
        with pytest.raises(urllib.error.HTTPError) as refused:
            log_in(base, PASSWORD + "!")
        assert refused.value.code == 401
    finally:
        stop(server)
    shared = tmp_path / "password.txt"
    shared.write_text(PASSWORD + "\nsecond line ignored\n")
    shared.chmod(0o644)
    server = start_ui(tmp_path, "--password-file", str(shared))
    try:
        base = server.stdout.readline().strip()
        assert server.stderr.readline() == f"anges ui: warning: other users may read {shared}: chmod 600 it\n"
        log_in(base, PASSWORD)
    finally:
        stop(server)


def test_a_password_file_can_be_standard_input_and_an_empty_one_is_refused(tmp_path):
    server = start_ui(tmp_path, "--password-file", "-", stdin=subprocess.PIPE)
    try:
        server.stdin.write(PASSWORD + "\n")
        server.stdin.close()
        log_in(server.stdout.readline().strip(), PASSWORD)
    finally:
        stop(server)
    (tmp_path / "empty").write_text("\n")
    done = subprocess.run([sys.executable, "-m", "anges", "ui", "--password-file", str(tmp_path / "empty")],
                          capture_output=True, text=True, env={**os.environ, "ANGES_HOME": str(tmp_path)}, timeout=60)
    assert done.returncode == 2
    assert done.stderr.endswith("the password file " + str(tmp_path / "empty") + " is empty: its first line is "
                                "the password\n")


def test_off_localhost_on_a_terminal_anges_ui_asks_for_the_password(tmp_path):
    server, leader = asked_on_a_terminal(tmp_path)
    try:
        said = read_until(leader, "Password: ")
        assert "it needs a password (12 characters or more; set ANGES_UI_PASSWORD" in said
        os.write(leader, f"{PASSWORD}\n".encode())
        read_until(leader, "The same again: ")
        os.write(leader, f"{PASSWORD}\n".encode())
        base = server.stdout.readline().strip()
        assert re.fullmatch(r"http://0\.0\.0\.0:\d+/", base), base
        log_in(base.replace("0.0.0.0", "127.0.0.1"), PASSWORD)
        assert PASSWORD not in read_until(leader, "Ctrl-C to stop"), "not echoed"
    finally:
        stop(server)
        os.close(leader)


def read_until(fd, text, limit=20000):
    seen = ""
    while text not in seen:
        assert select.select([fd], [], [], 20)[0], f"never saw {text!r} in {seen!r}"
        chunk = os.read(fd, 1024).decode(errors="replace")
        assert chunk and len(seen) < limit, f"never saw {text!r} in {seen!r}"
        seen += chunk
    return seen


def asked_on_a_terminal(tmp_path):
    """`anges ui` off localhost with its stdin and stderr on a pty: (process, the pty's other end)."""
    (tmp_path / "ui.yaml").write_text("web: {allow_unsandboxed: true}\n")  # whatever bwrap this machine has
    leader, terminal = pty.openpty()
    server = start_ui(tmp_path, "--host", "0.0.0.0", "--config", str(tmp_path / "ui.yaml"), stdin=terminal,
                      stderr=terminal, start_new_session=True)
    os.close(terminal)
    return server, leader


def test_a_weak_or_mistyped_password_on_the_terminal_is_asked_again(tmp_path):
    server, leader = asked_on_a_terminal(tmp_path)
    try:
        read_until(leader, "Password: ")
        os.write(leader, b"hunter2hunter2\n")
        said = read_until(leader, "Password: ")
        assert "that password is one character or text repeated; try again (a few random words" in said
        assert "The same again" not in said, "a weak password is not asked twice"
        os.write(leader, f"{PASSWORD}\n".encode())
        read_until(leader, "The same again: ")
        os.write(leader, f"{PASSWORD}.\n".encode())
        said += read_until(leader, "Password: ")
        assert "the two passwords differ; try again." in said
        assert "ANGES_UI_PASSWORD, --password-file" not in said, "the message fits a typed password"
        os.write(leader, f"{PASSWORD}\n".encode())
        read_until(leader, "The same again: ")
        os.write(leader, f"{PASSWORD}\n".encode())
        base = server.stdout.readline().strip()
        log_in(base.replace("0.0.0.0", "127.0.0.1"), PASSWORD)
    finally:
        stop(server)
        os.close(leader)


def test_the_terminal_asks_three_times_at_most(tmp_path):
    server, leader = asked_on_a_terminal(tmp_path)
    try:
        said = ""
        for _ in range(3):
            said += read_until(leader, "Password: ")
            os.write(leader, b"short\n")
        said += read_until(leader, "after 3 tries")
        assert server.wait(20) == 2 and said.count("that password is too short") == 3
        assert "anges ui: no password set after 3 tries" in said
    finally:
        stop(server)
        os.close(leader)
