"""What `anges ui` logs to its owner: logins, runs and errors by default, every request only with -v, and never a
colour code or a raw escape when the log is not a terminal."""

import json
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from http.cookiejar import CookieJar

from anges.web import create_app

from anges.config.loading import load_config
from anges.exceptions import ModelSetupError
from anges.store.event_store import EventStore
from anges.store.events import Event, EventStream

PASSWORD = "a lamp on the sill at dusk"
TIME = r"\d\d:\d\d:\d\d "


def start_ui(tmp_path, *flags):
    """`anges ui` on a free port with a scripted model, its stderr in a file; (process, address, log file)."""
    done = {"analysis": "", "reasoning": "", "actions": [{"action_type": "TASK_COMPLETE", "content": "done"}]}
    (tmp_path / "replies.json").write_text(json.dumps([done]))
    (tmp_path / "ui.yaml").write_text(f"model: scripted:{tmp_path / 'replies.json'}\n")
    log_file = tmp_path / "ui.log"
    with open(log_file, "w") as log:
        server = subprocess.Popen([sys.executable, "-m", "anges", "ui", "--port", "0", "--sandbox", "off",
                                   "--config", str(tmp_path / "ui.yaml"), *flags], stdout=subprocess.PIPE,
                                  stderr=log, text=True, cwd=tmp_path)
    address = server.stdout.readline().strip()
    assert address.startswith("http://127.0.0.1:"), address
    return server, address, log_file


def wait_for_line(log_file, pattern, timeout=30):
    deadline = time.monotonic() + timeout
    while not re.search(pattern, log_file.read_text(), re.MULTILINE):
        assert time.monotonic() < deadline, f"no {pattern!r} in:\n{log_file.read_text()}"
        time.sleep(0.05)


def stop(server):
    server.terminate()
    server.wait(20)
    server.stdout.close()


def csrf_from(html: str) -> str:
    return re.search(r'(?:data-csrf|name="csrf_token" value)="([^"]+)"', html).group(1)


def test_by_default_the_log_has_logins_and_runs_not_requests(tmp_path, monkeypatch):
    monkeypatch.setenv("ANGES_UI_PASSWORD", PASSWORD)
    server, base, log_file = start_ui(tmp_path)
    try:
        browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))
        answers = [401, 200]
        for password in ("not the password", PASSWORD):
            form = {"password": password, "csrf_token": csrf_from(browser.open(base + "login").read().decode())}
            deadline = time.monotonic() + 10
            while True:  # the second try waits out the login delay (a try during it is not even checked)
                try:
                    code = browser.open(base + "login", data=urllib.parse.urlencode(form).encode()).status
                except urllib.error.HTTPError as refused:
                    code = refused.code
                if code != 429 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert code == answers.pop(0)
        csrf = csrf_from(browser.open(base).read().decode())
        for _ in range(5):
            browser.open(base + "api/chats").read()
        created = browser.open(urllib.request.Request(
            base + "api/chats", data=json.dumps({"text": "say done"}).encode(),
            headers={"Content-Type": "application/json", "X-CSRF-Token": csrf}))
        uid = json.loads(created.read())["chat"]["uid"]
        wait_for_line(log_file, f"chat {uid}: run ended")
    finally:
        stop(server)
    lines = log_file.read_text().splitlines()
    assert lines[0].startswith("anges web chat on http://127.0.0.1:")
    assert [re.sub(f"^{TIME}", "", line) for line in lines[1:]] == [
        "wrong password from 127.0.0.1",
        "login from 127.0.0.1",
        f"chat {uid}: run started",
        f"chat {uid}: run ended, completed",
    ], "one line for each thing a person needs, none for the page's own requests"
    assert all(re.match(TIME, line) for line in lines[1:]), "each line says when"


def test_with_v_every_request_is_logged_as_plain_text_without_its_token(tmp_path):
    server, address, log_file = start_ui(tmp_path, "-v")
    token = re.search(r"token=([\w-]+)", address).group(1)
    base = address.split("?")[0]
    try:
        browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))
        browser.open(address).read()
        for path in ("api/chats", "no-such-page"):
            try:
                browser.open(base + path).read()
            except urllib.error.HTTPError:
                pass
        port = int(urllib.parse.urlsplit(base).port)
        with socket.create_connection(("127.0.0.1", port)) as raw:  # bytes no browser would send
            raw.sendall(b"GET /\x1b[2J\x1b]0;owned\x07 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            raw.recv(100)
        wait_for_line(log_file, r"GET /.*owned.* HTTP/1.1\" 403")  # no session: refused
    finally:
        stop(server)
    log = log_file.read_text().split("\n", 1)[1]  # after the address to open
    assert token not in log and '127.0.0.1 "GET /?token=[hidden] HTTP/1.1" 302' in log
    assert re.search(f'^{TIME}127.0.0.1 "GET /api/chats HTTP/1.1" 200', log, re.MULTILINE)
    assert re.search(f'^{TIME}127.0.0.1 "GET /no-such-page HTTP/1.1" 404', log, re.MULTILINE)
    assert "\x1b" not in log and "\x07" not in log, "no colour codes, and nothing a client sent acts on a terminal"
    assert 'GET /^[[2J^[]0;owned^G HTTP/1.1" 403' in log


def test_a_run_that_could_not_start_is_logged_with_why(tmp_path, caplog):
    def no_model(name, config, agent_type):
        raise ModelSetupError("no model is configured: set OPENAI_API_KEY\x1b[2J" + " and more" * 100)

    app = create_app(load_config(), EventStore(), password=PASSWORD, model_factory=no_model,
                     default_dir=str(tmp_path))
    stream = EventStream(title="no model")
    stream.add_event(Event("new_request", content="hi"))
    EventStore().save(stream)
    runs = app.extensions["anges"].runs
    with caplog.at_level("INFO", logger="anges.web"):
        runs.start(stream.uid, "again")
        assert runs.wait(stream.uid, 20)
    lines = [record.getMessage() for record in caplog.records if record.name == "anges.web"]
    assert lines[0] == f"chat {stream.uid}: run started"
    assert lines[1].startswith(f"chat {stream.uid}: run ended, failed: No model is available: no model is "
                               "configured: set OPENAI_API_KEY") and len(lines[1]) < 360, "one bounded line"
