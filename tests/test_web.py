"""The web chat through Flask's test client: routes, login, CSRF, runs, export and the live event feed."""

import json
import os
import re
import stat
import threading
import time

import pytest
from anges.web import create_app, main_ui, serve
from anges.web.render import markdown_html

from anges.agents import DefaultAgent
from anges.config.loading import load_config
from anges.exceptions import ConfigError, ModelError, ModelSetupError
from anges.models.scripted import ScriptedModel
from anges.store.event_store import EventStore
from anges.store.events import Event, EventStream

PASSWORD = "a lamp on the sill at dusk"


def reply(*actions, reasoning="working on it"):
    return {"analysis": "", "reasoning": reasoning, "actions": list(actions)}


def shell(command):
    return reply({"action_type": "RUN_SHELL_CMD", "command": command})


def complete(content="All done."):
    return reply({"action_type": "TASK_COMPLETE", "content": content})


def gate(event: threading.Event, then):
    """A scripted reply that waits for `event` before answering."""

    def answer(prompt):
        assert event.wait(10), "test gate never opened"
        return json.dumps(then)

    return answer


@pytest.fixture
def config():
    return load_config(overrides={"web": {"heartbeat_seconds": 0.2, "poll_seconds": 0.02}})


@pytest.fixture
def store():
    return EventStore()


@pytest.fixture
def model():
    return ScriptedModel()


@pytest.fixture
def app(config, store, model, tmp_path):
    return create_app(config, store, password=PASSWORD, model_factory=lambda name, cfg, agent_type: model,
                      default_dir=str(tmp_path), sse_lifetime=5)


@pytest.fixture
def client(app):
    return app.test_client()


def csrf_from(html: str) -> str:
    match = re.search(r'(?:data-csrf|name="csrf_token" value)="([^"]+)"', html)
    assert match, "no CSRF token in the page"
    return match.group(1)


def login(client, password=PASSWORD):
    token = csrf_from(client.get("/login").get_data(as_text=True))
    return client.post("/login", data={"password": password, "csrf_token": token, "next": "/"})


@pytest.fixture
def auth(client):
    """A logged-in client and its CSRF header."""
    assert login(client).status_code == 302
    token = csrf_from(client.get("/").get_data(as_text=True))
    return client, {"X-CSRF-Token": token}


def wait_idle(app, uid, timeout=10):
    assert app.extensions["anges"].runs.wait(uid, timeout), "the run did not finish"


def new_chat(auth, app, text="say hi", settings=None, wait=True):
    client, headers = auth
    body = {"text": text} if text else {}
    if settings:
        body["settings"] = settings
    response = client.post("/api/chats", json=body, headers=headers)
    assert response.status_code == 201, response.json
    uid = response.json["chat"]["uid"]
    if wait and text:
        wait_idle(app, uid)
    return uid


def types(store, uid):
    return [e.type for e in store.load(uid).events_list]


def read_sse(client, url, until, headers=None, timeout=8.0):
    """Read a Server-Sent Events response until `until(events)` holds; events are (event, id, data) tuples."""
    response = client.get(url, headers=headers or {}, buffered=False)
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.mimetype == "text/event-stream"
    events, buffer, comments = [], "", []
    deadline = time.monotonic() + timeout
    try:
        for chunk in response.response:
            buffer += chunk.decode() if isinstance(chunk, bytes) else chunk
            while "\n\n" in buffer:
                block, buffer = buffer.split("\n\n", 1)
                fields = {"event": "message", "id": None, "data": ""}
                for line in block.splitlines():
                    if line.startswith(":"):
                        comments.append(line)
                        continue
                    key, _, value = line.partition(": ")
                    if key in fields:
                        fields[key] = value
                if fields["data"]:
                    events.append((fields["event"], fields["id"], json.loads(fields["data"])))
            if until(events, comments) or time.monotonic() > deadline:
                break
    finally:
        response.close()
    return events, comments


def steps_of(events, block=""):
    """The steps a feed sent for the chat (block "") or one of its child blocks."""
    return [step for kind, _, data in events if kind == "steps" and data["block"] == block for step in data["steps"]]


def finished(events, comments):
    return any(kind == "status" and not data["running"] and data["status"] != "new" for kind, _, data in events)


def ended(events, comments):
    return any(kind == "end" for kind, _, _ in events)


# -- login, sessions and the rules every request goes through ------------------------------------------------


def test_pages_redirect_to_login_and_the_api_answers_401(client):
    page = client.get("/")
    assert page.status_code == 302 and page.headers["Location"].startswith("/login")
    assert client.get("/chat/abc").status_code == 302
    for method, url in [("get", "/api/chats"), ("get", "/api/chats/abc"), ("get", "/api/chats/abc/events"),
                        ("get", "/api/chats/abc/export"), ("post", "/api/chats"), ("patch", "/api/chats/abc"),
                        ("delete", "/api/chats/abc"), ("post", "/api/chats/abc/messages"),
                        ("post", "/api/chats/abc/stop"), ("post", "/api/settings/check")]:
        response = getattr(client, method)(url, json={})
        assert response.status_code == 401, (method, url)
        assert response.json == {"error": "login required"}
    assert client.get("/login").status_code == 200
    assert client.get("/static/anges.css").status_code == 200
    assert client.get("/static/app.js").status_code == 200


def test_login_sets_a_strict_session_cookie_and_opens_every_page(client):
    response = login(client)
    assert response.status_code == 302 and response.headers["Location"] == "/"
    cookie = response.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie
    assert client.get("/").status_code == 200
    assert client.get("/api/chats").json == {"chats": []}


def test_a_wrong_password_is_refused_and_the_next_try_waits_a_moment(client):
    response = login(client, "wrong")
    assert response.status_code == 401 and "Wrong password" in response.get_data(as_text=True)
    hurried = login(client)  # the right password, too soon: not even checked
    assert hurried.status_code == 429 and hurried.headers["Retry-After"] == "1"
    assert "Too many failed attempts. Try again in 1 second." in hurried.get_data(as_text=True)
    assert client.get("/api/chats").status_code == 401


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_guessing_slows_down_twice_over_each_time_but_never_shuts_the_owner_out(app):
    clock = Clock()
    app.extensions["anges"].guard.delay.clock = clock
    owner = app.test_client()
    assert login(owner).status_code == 302
    owner.post("/logout", headers={"X-CSRF-Token": csrf_from(owner.get("/").get_data(as_text=True))})
    assert owner.get("/api/chats").status_code == 401

    stranger = app.test_client()  # another account of this machine: the same address as the owner
    waits = []
    for _ in range(8):
        assert login(stranger, "a guess").status_code == 401
        waits.append(int(login(stranger, "another guess").headers["Retry-After"]))
        clock.now += waits[-1]
    assert waits == [1, 2, 4, 8, 16, 30, 30, 30], "twice as long each time, at most web.max_login_delay"
    clock.now -= 5
    assert login(stranger, PASSWORD).status_code == 429, "a try during the wait is not checked"

    assert login(owner).status_code == 302, "a browser that logged in before is not slowed by the guesses"
    assert owner.get("/api/chats").status_code == 200
    elsewhere = app.test_client()
    elsewhere.environ_base["REMOTE_ADDR"] = "192.0.2.7"
    assert login(elsewhere, "wrong").status_code == 401, "each address waits for its own failures only"
    newcomer = app.test_client()  # a new browser at the stranger's address shares its wait: not forever
    assert login(newcomer).status_code == 429
    clock.now += 5
    assert login(newcomer).status_code == 302
    clock.now += 3600 * 2
    assert login(stranger, "wrong").status_code == 401
    assert login(stranger).headers["Retry-After"] == "1", "an hour without failures starts afresh"


def test_wrong_tokens_are_never_limited_and_the_printed_link_keeps_working(config, store):
    app = create_app(config, store, password="", token=TOKEN)
    stranger = app.test_client()
    for n in range(50):
        refused = stranger.get(f"/?token=guess-{n}-{TOKEN}")
        assert refused.status_code == 403 and "wrong token" in refused.get_data(as_text=True)
    page = refused.get_data(as_text=True)
    assert "http://localhost/?token=..." in page, "the hint names the address the request came to"
    assert "Back to the chats" not in page, "the link would lead back to this refusal"
    owner = app.test_client()
    assert owner.get(f"/?token={TOKEN}").status_code == 302
    assert owner.get("/api/chats").status_code == 200
    missing = owner.get("/chat/nosuchchat")
    assert missing.status_code == 404 and "Back to the chats" in missing.get_data(as_text=True)


def test_login_needs_its_csrf_token_and_only_redirects_to_local_paths(app):
    assert app.test_client().post("/login", data={"password": PASSWORD}).status_code == 403
    targets = [("//evil.example/x", "/"), ("https://evil.example", "/"), ("/\\evil", "/"),
               ("/\t/evil.example", "/"), ("/chat/abc", "/chat/abc")]
    for target, expected in targets:
        client = app.test_client()
        token = csrf_from(client.get("/login").get_data(as_text=True))
        response = client.post("/login", data={"password": PASSWORD, "csrf_token": token, "next": target})
        assert response.status_code == 302 and response.headers["Location"] == expected, target


def test_logout_is_a_post_with_csrf(auth):
    client, headers = auth
    assert client.get("/logout").status_code == 405
    assert client.post("/logout").status_code == 403
    assert client.post("/logout", headers=headers).status_code == 302
    assert client.get("/api/chats").status_code == 401


def test_a_new_password_ends_old_sessions(config, store, tmp_path):
    first = create_app(config, store, password="one-password")
    client = first.test_client()
    login(client, "one-password")
    assert client.get("/api/chats").status_code == 200
    second = create_app(config, store, password="another-password")
    other = second.test_client()
    other.set_cookie("anges_session", client.get_cookie("anges_session").value)
    assert other.get("/api/chats").status_code == 401


def test_every_state_change_needs_the_csrf_token(auth, app, store):
    client, headers = auth
    uid = new_chat(auth, app, text="")
    calls = [("post", "/api/chats", {"text": "x"}), ("patch", f"/api/chats/{uid}", {"title": "t"}),
             ("delete", f"/api/chats/{uid}", None), ("post", f"/api/chats/{uid}/messages", {"text": "x"}),
             ("post", f"/api/chats/{uid}/stop", None), ("post", "/api/settings/check", {"settings": {}})]
    for method, url, body in calls:
        for bad in ({}, {"X-CSRF-Token": "forged"}):
            response = getattr(client, method)(url, json=body, headers=bad)
            assert response.status_code == 403, (method, url, bad)
            assert "CSRF" in response.json["error"]
        cross = getattr(client, method)(url, json=body, headers={**headers, "Origin": "https://evil.example"})
        assert cross.status_code == 403
    assert store.exists(uid) and types(store, uid) == []
    assert store.info(uid).title == "New chat"


def test_state_changing_routes_refuse_get(auth, app):
    client, _ = auth
    uid = new_chat(auth, app, text="")
    for url in (f"/api/chats/{uid}/messages", f"/api/chats/{uid}/stop", "/logout"):
        assert client.get(url).status_code == 405


def test_security_headers_and_no_inline_script(auth):
    client, _ = auth
    page = client.get("/")
    csp = page.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert "frame-ancestors 'none'" in csp and "object-src 'none'" in csp
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    assert page.headers["X-Frame-Options"] == "DENY"
    html = page.get_data(as_text=True)
    scripts = re.findall(r"<script\b[^>]*>", html)
    assert scripts and all("src=" in tag for tag in scripts)
    assert not re.search(r"\son[a-z]+=", html)
    assert "http://" not in html.replace("http://localhost", "") and "https://" not in html  # no CDN


def test_the_server_process_is_not_dumpable():
    import subprocess
    import sys

    # Commands let out of the sandbox run as this user: /proc/PID/environ of the server would give them the
    # password and the API keys.
    code = ("import ctypes; from anges.web import create_app; libc = ctypes.CDLL(None)\n"
            "before = libc.prctl(3, 0, 0, 0, 0); create_app(password='a long passphrase')\n"
            "print(before, libc.prctl(3, 0, 0, 0, 0))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["1", "0"], done.stderr


def test_chat_ids_are_validated(auth):
    client, headers = auth
    for bad in ("bad.id", "..%2F..%2Fetc%2Fpasswd", "a" * 65, "%00", "semi;colon"):
        assert client.get(f"/api/chats/{bad}").status_code == 404, bad
        assert client.get(f"/api/chats/{bad}/events").status_code == 404, bad
        assert client.post(f"/api/chats/{bad}/messages", json={"text": "x"}, headers=headers).status_code == 404
    missing = client.get("/api/chats/nosuchchat")
    assert missing.status_code == 404 and "no chat" in missing.json["error"]
    page = client.get("/chat/nosuchchat")
    assert page.status_code == 404 and "no chat" in page.get_data(as_text=True)


TOKEN = "a-per-launch-token-for-tests"


def test_without_a_password_the_token_is_exchanged_for_a_session(config, store):
    app = create_app(config, store, password="", token=TOKEN)
    client = app.test_client()
    for url in ("/", "/chat/abc", "/login"):
        refused = client.get(url)
        assert refused.status_code == 403 and "secret token that `anges ui` printed" in refused.get_data(as_text=True)
    assert client.get("/api/chats").status_code == 401 and "token" in client.get("/api/chats").json["error"]
    assert client.get(f"/?token={TOKEN[:-1]}").status_code == 403
    assert client.get(f"/?token={TOKEN}x").status_code == 403

    entered = client.get(f"/chat/abc?tab=2&token={TOKEN}")
    assert entered.status_code == 302 and entered.headers["Location"] == "/chat/abc?tab=2", "the token leaves the URL"
    assert "HttpOnly" in entered.headers["Set-Cookie"]
    assert client.get("/api/chats").status_code == 200 and client.get("/").status_code == 200
    assert client.get("/login").status_code == 302
    assert client.post("/api/chats", json={}).status_code == 403  # CSRF still applies
    # another local account without the token gets nothing, nor does anything off localhost or through a proxy
    assert app.test_client().get("/api/chats").status_code == 401
    assert client.get("/api/chats", environ_base={"REMOTE_ADDR": "192.0.2.7"}).status_code == 403
    rebound = client.get("/", headers={"Host": "attacker.example"})
    assert rebound.status_code == 403 and "password" in rebound.get_data(as_text=True)


def test_the_token_is_random_per_launch_or_from_the_environment_and_can_be_turned_off(config, store, monkeypatch):
    first, second = (create_app(config, store, password="").extensions["anges"].guard.token for _ in range(2))
    assert first != second and len(first) >= 32
    monkeypatch.setenv("ANGES_UI_TOKEN", TOKEN)
    app = create_app(config, store, password="")
    assert app.extensions["anges"].guard.token == TOKEN
    assert app.test_client().get(f"/?token={TOKEN}").status_code == 302
    monkeypatch.setenv("ANGES_UI_TOKEN", "short")
    with pytest.raises(ConfigError, match=r"ANGES_UI_TOKEN\) is too short: use at least 12 characters"):
        create_app(config, store, password="")
    open_app = create_app(config, store, password="", token="")  # --no-token
    assert open_app.test_client().get("/api/chats").status_code == 200
    assert open_app.test_client().get("/api/chats", environ_base={"REMOTE_ADDR": "192.0.2.7"}).status_code == 403
    # with a password the token plays no part
    assert create_app(config, store, password=PASSWORD, token=TOKEN).test_client().get(
        f"/?token={TOKEN}").headers["Location"].startswith("/login")


def test_anges_ui_prints_the_address_with_its_token(tmp_path):
    import subprocess
    import sys
    import urllib.request

    env = {**os.environ, "ANGES_HOME": str(tmp_path)}
    server = subprocess.Popen([sys.executable, "-m", "anges", "ui", "--port", "0"], stderr=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        first = server.stderr.readline()
        match = re.match(r"anges web chat on (http://127\.0\.0\.1:(\d+)/)\?token=([\w-]{32,})  \(Ctrl-C to stop\)", first)
        assert match, first
        base, token = match.group(1), match.group(3)
        assert server.stdout.readline() == f"{base}?token={token}\n", "the address alone on stdout, for scripts"
        assert "only this machine can use it, from a browser that opens the address" in server.stderr.readline()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
        with opener.open(f"{base}?token={token}") as page:
            assert page.status == 200 and page.url == base and b'id="app"' in page.read()
        with opener.open(f"{base}api/chats") as listing:
            assert json.loads(listing.read()) == {"chats": []}
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{base}api/chats")
        assert refused.value.code == 401
    finally:
        server.terminate()
        server.wait(10)
        log = server.stderr.read()
        server.stderr.close()
        server.stdout.close()
    assert token not in log and "login with the token from 127.0.0.1" in log, "the log leaves the token out"


def test_no_token_is_explicit_and_says_what_it_means(tmp_path):
    import subprocess
    import sys

    env = {**os.environ, "ANGES_HOME": str(tmp_path)}
    server = subprocess.Popen([sys.executable, "-m", "anges", "ui", "--port", "0", "--no-token"],
                              stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        assert re.match(r"anges web chat on http://127\.0\.0\.1:\d+/  \(Ctrl-C to stop\)", server.stderr.readline())
        assert "every account on this machine can use it" in server.stderr.readline()
    finally:
        server.terminate()
        server.wait(10)
        server.stderr.close()


@pytest.mark.parametrize("header", ["X-Forwarded-For", "Forwarded", "X-Real-IP", "X-Forwarded-Host"])
def test_without_a_password_a_request_relayed_by_a_local_proxy_is_refused(config, store, header):
    client = create_app(config, store, password="", token="").test_client()
    relayed = client.get("/api/chats", headers={header: "203.0.113.9"})
    assert relayed.status_code == 403 and "password" in relayed.get_data(as_text=True)
    assert create_app(config, store, password=PASSWORD).test_client().get(
        "/login", headers={header: "203.0.113.9"}).status_code == 200, "with a password, proxies are fine"


def test_the_password_can_come_from_the_environment(config, store, monkeypatch):
    monkeypatch.setenv("ANGES_UI_PASSWORD", "from-the-environment")
    client = create_app(config, store).test_client()
    assert client.get("/api/chats").status_code == 401
    assert login(client, "from-the-environment").status_code == 302
    assert client.get("/api/chats").status_code == 200


@pytest.mark.parametrize("password, why", [
    ("x", "too short: use at least 12 characters"), (" " * 12, "too short"), ("  short one  ", "too short"),
    ("eleven-char", "too short"), ("zzzzzzzzzzzzzzzz", "one character or text repeated"),
    ("hunter2hunter2", "one character or text repeated"), ("Password1234", "a well-known password"),
    ("correct horse battery staple", "a well-known password"), ("1qaz-2wsx-3edc", "a well-known password"),
])
def test_a_weak_password_is_refused_at_start_up(config, store, password, why, capsys, monkeypatch):
    with pytest.raises(ConfigError, match=f"password .* is {why}"):
        create_app(config, store, password=password)
    monkeypatch.setenv("ANGES_UI_PASSWORD", password)
    assert main_ui(["--port", "0"]) == 2
    assert f"anges ui: the web chat password (ANGES_UI_PASSWORD, --password-file or web.password) is {why}" \
        in capsys.readouterr().err
    monkeypatch.setenv("ANGES_UI_TOKEN", password)
    with pytest.raises(ConfigError, match=f"token .* is {why}"):
        create_app(config, store, password="")


def test_logout_ends_the_session_on_the_server(app, config, store):
    client, other = app.test_client(), app.test_client()
    login(client)
    login(other)
    copied = client.get_cookie("anges_session").value
    second_process = create_app(config, store, password=PASSWORD).test_client()  # serving the same home
    second_process.set_cookie("anges_session", copied)
    assert second_process.get("/api/chats").status_code == 200
    headers = {"X-CSRF-Token": csrf_from(client.get("/").get_data(as_text=True))}
    assert client.post("/logout", headers=headers).status_code == 302
    thief = app.test_client()
    thief.set_cookie("anges_session", copied)
    assert thief.get("/api/chats").status_code == 401, "a cookie copied before logout no longer works"
    assert second_process.get("/api/chats").status_code == 401, "in any process serving the chat"
    assert create_app(config, store, password=PASSWORD).test_client().get(
        "/api/chats", headers={"Cookie": f"anges_session={copied}"}).status_code == 401, "nor after a restart"
    assert other.get("/api/chats").status_code == 200, "other sessions go on"


def test_the_session_file_holds_no_usable_secret_and_survives_damage(app, anges_home):
    client = app.test_client()
    login(client)
    with client.session_transaction() as cookie:
        sid = cookie["sid"]
    path = anges_home / "web_sessions.json"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert sid not in path.read_text() and len(json.loads(path.read_text())["sessions"]) == 1
    for damage in ("{broken", '{"sessions": [1]}', '{"sessions": {"x": {"expires": "soon"}}}', "[]"):
        path.write_text(damage)
        assert client.get("/api/chats").status_code == 401, damage  # everybody logs in again, nothing breaks
    assert login(client).status_code == 302 and client.get("/api/chats").status_code == 200


def test_sessions_expire_and_their_number_is_bounded():
    from anges.web.sessions import MAX_SESSIONS, SessionRegistry

    registry = SessionRegistry("fingerprint", lifetime=60)
    ids = [registry.create() for _ in range(MAX_SESSIONS + 5)]
    assert [registry.valid(sid) for sid in ids].count(True) == MAX_SESSIONS
    assert registry.valid(ids[-1]) and not registry.valid(ids[0]), "the oldest make room"
    short = SessionRegistry("fingerprint", lifetime=0.05)
    sid = short.create()
    assert short.valid(sid) and not short.valid("forged") and not short.valid(None)
    time.sleep(0.1)
    assert not short.valid(sid)


def test_sessions_outlive_a_restart_but_not_a_new_password(config, store):
    client = create_app(config, store, password=PASSWORD).test_client()
    login(client)
    cookie = client.get_cookie("anges_session").value

    def works(app):
        fresh = app.test_client()
        fresh.set_cookie("anges_session", cookie)
        return fresh.get("/api/chats").status_code == 200

    assert works(create_app(config, store, password=PASSWORD)), "a restart keeps the session"
    assert not works(create_app(config, store, password="a different password"))
    assert not works(create_app(config, store, password=PASSWORD)), "the password change ended it for good"


def test_the_session_secret_is_made_once_and_private(config, store, anges_home):
    first = create_app(config, store, password=PASSWORD)
    path = anges_home / "web_secret"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    second = create_app(config, store, password=PASSWORD)
    assert first.secret_key == second.secret_key and len(first.secret_key) >= 32


def test_a_non_loopback_address_without_a_password_is_refused(config, capsys):
    with pytest.raises(ConfigError, match="without a password"):
        serve(config, host="0.0.0.0", port=0, password="")
    with pytest.raises(ConfigError, match="without a password"):
        serve(config, host="192.0.2.1", port=0, password="")
    assert main_ui(["--host", "0.0.0.0", "--port", "0"]) == 2
    assert "refusing to serve on 0.0.0.0 without a password" in capsys.readouterr().err


def test_off_localhost_the_sandbox_cannot_be_off_unless_the_config_allows_it(capsys, tmp_path, monkeypatch):
    off = load_config(overrides={"safety": {"sandbox": "off"}})
    with pytest.raises(ConfigError, match="refusing to serve on 0.0.0.0: the sandbox is off .* web.allow_unsandboxed"):
        serve(off, host="0.0.0.0", port=0, password=PASSWORD)
    assert main_ui(["--host", "192.0.2.1", "--port", "0", "--password", PASSWORD, "--sandbox", "off"]) == 2
    assert "refusing to serve on 192.0.2.1: the sandbox is off" in capsys.readouterr().err

    missing = str(tmp_path / "no-bwrap-here" / "bwrap")  # the fallback, with every command approved
    unavailable = load_config(overrides={"safety": {"sandbox": "workspace", "approval": "auto", "bwrap": missing}})
    with pytest.raises(ConfigError, match="the sandbox is not available and approval is auto"):
        serve(unavailable, host="0.0.0.0", port=0, password=PASSWORD)


def test_a_taken_port_an_unknown_host_or_a_bad_port_number_is_a_one_line_error(capsys, tmp_path):
    import socket

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        assert main_ui(["--port", str(port)]) == 2
    assert capsys.readouterr().err == (f"anges ui: cannot serve on 127.0.0.1 port {port}: Address already in use; "
                                       "another program uses that port: choose another with --port\n")
    secret = tmp_path / "password"
    secret.write_text(PASSWORD + "\n")
    secret.chmod(0o600)
    assert main_ui(["--host", "no-such-host.invalid", "--port", "0", "--password-file", str(secret)]) == 2
    assert capsys.readouterr().err.startswith("anges ui: cannot serve on no-such-host.invalid: no such address (")
    for bad in ("99999", "-1", "http"):
        with pytest.raises(SystemExit) as exit_:
            main_ui(["--port", bad])
        assert exit_.value.code == 2 and "argument --port: " in capsys.readouterr().err
    (tmp_path / "far.yaml").write_text("web:\n  port: 70000\n")
    assert main_ui(["--config", str(tmp_path / "far.yaml")]) == 2
    assert "key 'web.port': must be a port number, 0 to 65535, got 70000" in capsys.readouterr().err


@pytest.mark.parametrize("host, config_text", [("127.0.0.1", ""), ("0.0.0.0", "web: {allow_unsandboxed: true}\n")])
def test_anges_ui_serves_unsandboxed_on_localhost_or_when_the_config_allows_it(tmp_path, host, config_text):
    import subprocess
    import sys

    (tmp_path / "ui.yaml").write_text(config_text)
    env = {**os.environ, "ANGES_HOME": str(tmp_path), "ANGES_UI_PASSWORD": PASSWORD}
    server = subprocess.Popen([sys.executable, "-m", "anges", "ui", "--host", host, "--port", "0", "--sandbox", "off",
                               "--config", str(tmp_path / "ui.yaml")], stderr=subprocess.PIPE, text=True, env=env,
                              cwd=tmp_path)
    try:
        first = server.stderr.readline()
    finally:
        server.terminate()
        server.wait(10)
        server.stderr.close()
    assert first.startswith(f"anges web chat on http://{host}:"), first


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGHUP"])
def test_stopping_anges_ui_stops_its_running_chats_and_records_it(tmp_path, signum):
    import http.cookiejar
    import signal
    import subprocess
    import sys
    import urllib.request

    from helpers import pids_running, sleep_token, wait_until_running

    token = sleep_token()
    command = {"action_type": "RUN_SHELL_CMD", "command": f"sleep {token}"}
    (tmp_path / "replies.json").write_text(json.dumps([{"analysis": "", "reasoning": "", "actions": [command]}]))
    (tmp_path / "ui.yaml").write_text(f"model: scripted:{tmp_path / 'replies.json'}\n")
    server = subprocess.Popen([sys.executable, "-m", "anges", "ui", "--port", "0", "--no-token", "--sandbox", "off",
                               "--approval", "auto", "--config", str(tmp_path / "ui.yaml")],
                              stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        url = re.search(r"http://\S+/", server.stderr.readline()).group(0)
        browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        csrf = csrf_from(browser.open(url).read().decode())
        browser.open(urllib.request.Request(url + "api/chats", data=json.dumps({"text": "wait"}).encode(),
                                            headers={"Content-Type": "application/json", "X-CSRF-Token": csrf}))
        wait_until_running(token)
        server.send_signal(getattr(signal, signum))
        assert server.wait(30) == 0
        said = server.stderr.read()
    finally:
        server.kill()
        server.stderr.close()
    assert "stopped the chats that were running" in said and "Traceback" not in said
    assert not pids_running(token), "a chat's command outlived anges ui"
    stream = EventStore().load(EventStore().list()[0].uid)
    assert [e.type for e in stream.events_list] == ["new_request", "action", "task_interrupted"]
    assert stream.events_list[-1].data["reason"] == "interrupt" and stream.events_list[1].data["interrupted"]


def test_anges_ui_under_nohup_keeps_serving_after_a_hangup(tmp_path):
    import signal
    import subprocess
    import sys
    import urllib.request

    server = subprocess.Popen([sys.executable, "-m", "anges", "ui", "--port", "0", "--no-token"], cwd=tmp_path,
                              stderr=subprocess.PIPE, text=True,
                              preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    try:
        url = re.search(r"http://\S+/", server.stderr.readline()).group(0)
        server.send_signal(signal.SIGHUP)
        time.sleep(0.5)  # long enough for a handler to have stopped it
        assert urllib.request.urlopen(url + "login", timeout=10).status == 200 and server.poll() is None
    finally:
        server.terminate()
        server.wait(20)
        server.stderr.close()


def test_runs_for_other_machines_are_refused_while_commands_would_run_unsandboxed(store, model, tmp_path):
    """Under a WSGI server the bound address is unknown: the rule holds per request."""
    def client_of(app, address):
        client = app.test_client()
        client.environ_base["REMOTE_ADDR"] = address
        assert login(client).status_code == 302
        return client, {"X-CSRF-Token": csrf_from(client.get("/").get_data(as_text=True))}

    model.enqueue(complete("ran"), complete("ran"))
    off = {"safety": {"sandbox": "off", "approval": "auto"}}
    app = create_app(load_config(overrides=off), store, password=PASSWORD, default_dir=str(tmp_path),
                     model_factory=lambda name, cfg, agent_type: model)
    remote, headers = client_of(app, "192.0.2.7")
    refused = remote.post("/api/chats", json={"text": "go"}, headers=headers)
    assert refused.status_code == 403 and "web.allow_unsandboxed: true" in refused.json["error"]
    assert store.list() == []
    local, local_headers = client_of(app, "127.0.0.1")
    proxied = local.post("/api/chats", json={"text": "go"}, headers={**local_headers, "X-Forwarded-For": "192.0.2.7"})
    assert proxied.status_code == 403
    assert local.post("/api/chats", json={"text": "go"}, headers=local_headers).status_code == 201

    allowed = create_app(load_config(overrides={**off, "web": {"allow_unsandboxed": True}}), store, password=PASSWORD,
                         default_dir=str(tmp_path), model_factory=lambda name, cfg, agent_type: model)
    remote, headers = client_of(allowed, "192.0.2.7")
    assert remote.post("/api/chats", json={"text": "go"}, headers=headers).status_code == 201
    for each in store.list():
        assert allowed.extensions["anges"].runs.wait(each.uid, 10) and app.extensions["anges"].runs.wait(each.uid, 10)


@pytest.mark.packaged_safety
def test_the_page_says_how_commands_are_sandboxed_and_approved(store, tmp_path, monkeypatch):
    def page(safety):
        app = create_app(load_config(overrides={"safety": safety}), store, password=PASSWORD)
        client = app.test_client()
        login(client)
        return client.get("/").get_data(as_text=True)

    off = page({"sandbox": "off"})
    assert "No sandbox &middot; approvals: ask" in off
    assert 'title="safety.sandbox is off: commands run with your rights; you approve each command"' in off
    assert 'data-sandboxed="false"' in off and "shows a card here to approve or deny" in off
    missing = tmp_path / "no-bwrap-here" / "bwrap"
    fallback = page({"sandbox": "workspace", "approval": "deny", "bwrap": str(missing)})
    assert f"the sandbox is not available: bwrap was not found at {missing}" in fallback
    assert "every command is declined (approval: deny)" in fallback and "approvals: deny" in fallback


@pytest.mark.sandbox
def test_the_page_shows_the_sandbox_mode_and_network(store):
    app = create_app(load_config(overrides={"safety": {"sandbox": "read-only", "network": True}}), store,
                     password=PASSWORD)
    client = app.test_client()
    login(client)
    html = client.get("/").get_data(as_text=True)
    assert "Sandbox: read-only, network &middot; approvals: ask" in html and 'data-sandboxed="true"' in html
    assert "commands can write nowhere but a private /tmp" in html


# -- chats: create, run, follow up, rename, settings, delete, export ---------------------------------------


def test_a_new_chat_runs_its_first_message_and_later_ones_follow_up(auth, app, store, model, tmp_path):
    client, headers = auth
    model.enqueue(shell("echo hello-from-shell"), complete("Printed it."))
    uid = new_chat(auth, app, text="print a greeting please")
    assert types(store, uid) == ["new_request", "action", "task_completion"]
    assert store.info(uid).title == "print a greeting please"
    chat = client.get(f"/api/chats/{uid}").json["chat"]
    assert chat["status"] == "completed" and chat["running"] is False
    page = client.get(f"/chat/{uid}")
    assert page.status_code == 200 and f'data-chat-id="{uid}"' in page.get_data(as_text=True)
    assert chat["settings"]["cmd_init_dir"] == str(tmp_path)

    model.enqueue(complete("Again."))
    response = client.post(f"/api/chats/{uid}/messages", json={"text": "once more"}, headers=headers)
    assert response.status_code == 202
    wait_idle(app, uid)
    assert types(store, uid)[-2:] == ["follow_up_request", "task_completion"]
    assert client.post(f"/api/chats/{uid}/messages", json={"text": "  "}, headers=headers).status_code == 400
    assert client.post(f"/api/chats/{uid}/messages", data="text", headers=headers).status_code == 400


def test_only_one_run_per_chat(auth, app, store, model):
    client, headers = auth
    release = threading.Event()
    model.enqueue(gate(release, complete("finished")))
    uid = new_chat(auth, app, text="slow task", wait=False)
    second = client.post(f"/api/chats/{uid}/messages", json={"text": "again"}, headers=headers)
    assert second.status_code == 409
    assert "already running" in second.json["error"]
    assert client.get("/api/chats").json["chats"][0]["running"] is True
    release.set()
    wait_idle(app, uid)
    assert types(store, uid) == ["new_request", "task_completion"]
    model.enqueue(complete("second"))
    assert client.post(f"/api/chats/{uid}/messages", json={"text": "again"}, headers=headers).status_code == 202
    wait_idle(app, uid)


def test_a_run_held_by_another_process_is_refused_too(auth, app, store):
    client, headers = auth
    uid = new_chat(auth, app, text="")
    with store.run_lock(uid):  # what another process running this chat holds
        response = client.post(f"/api/chats/{uid}/messages", json={"text": "go"}, headers=headers)
        assert response.status_code == 409
        assert client.delete(f"/api/chats/{uid}", headers=headers).status_code == 409
    assert types(store, uid) == []


def test_stop_kills_the_running_command_and_the_chat_shows_it(auth, app, store, model, tmp_path):
    client, headers = auth
    model.enqueue(shell("touch started && sleep 30"), complete("never"))
    uid = new_chat(auth, app, text="sleep a while", wait=False)
    deadline = time.monotonic() + 5
    while not (tmp_path / "started").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    response = client.post(f"/api/chats/{uid}/stop", headers=headers)
    assert response.status_code == 202
    wait_idle(app, uid, timeout=10)
    stream = store.load(uid)
    assert [e.type for e in stream.events_list] == ["new_request", "action", "task_interrupted"]
    assert stream.events_list[1].data["interrupted"] is True
    assert stream.events_list[-1].data["reason"] == "interrupt"
    assert client.get(f"/api/chats/{uid}").json["chat"]["status"] == "interrupted"
    again = client.post(f"/api/chats/{uid}/stop", headers=headers)
    assert again.status_code == 409 and "not running" in again.json["error"]


def test_stop_before_the_agent_has_started_still_stops_it(config, store, tmp_path):
    building = threading.Event()
    release = threading.Event()

    def slow_factory(name, cfg, agent_type):
        building.set()
        assert release.wait(10)
        return ScriptedModel([complete("should not run")])

    app = create_app(config, store, password=PASSWORD, model_factory=slow_factory, default_dir=str(tmp_path))
    client = app.test_client()
    login(client)
    headers = {"X-CSRF-Token": csrf_from(client.get("/").get_data(as_text=True))}
    uid = new_chat((client, headers), app, text="go", wait=False)
    assert building.wait(5)
    assert client.post(f"/api/chats/{uid}/stop", headers=headers).status_code == 202
    release.set()
    wait_idle(app, uid)
    assert types(store, uid) == ["new_request", "task_interrupted"]


def test_stop_reaches_a_run_started_elsewhere(auth, app, store, tmp_path):
    client, headers = auth
    stream = EventStream(title="from the CLI")
    store.sync(stream)
    model = ScriptedModel([shell("touch started && sleep 30"), complete("never")])
    agent = DefaultAgent(inference_func=model, event_stream=stream, cmd_init_dir=tmp_path, config=load_config(),
                         store=EventStore())  # its own store object, as another process would have
    worker = threading.Thread(target=agent.run_with_new_request, args=("sleep",))
    worker.start()
    deadline = time.monotonic() + 5
    while not (tmp_path / "started").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert client.get(f"/api/chats/{stream.uid}").json["chat"]["running"] is True
    assert client.post(f"/api/chats/{stream.uid}/messages", json={"text": "x"}, headers=headers).status_code == 409
    assert client.post(f"/api/chats/{stream.uid}/stop", headers=headers).status_code == 202
    worker.join(10)
    assert not worker.is_alive()
    last = store.load(stream.uid).events_list[-1]
    assert last.type == "task_interrupted" and last.data["reason"] == "interrupt"


def test_no_model_configured_shows_in_the_chat(config, store, tmp_path):
    def no_model(name, cfg, agent_type):
        raise ModelSetupError("no model is configured: set OPENAI_API_KEY")

    app = create_app(config, store, password=PASSWORD, model_factory=no_model, default_dir=str(tmp_path))
    client = app.test_client()
    login(client)
    headers = {"X-CSRF-Token": csrf_from(client.get("/").get_data(as_text=True))}
    uid = new_chat((client, headers), app, text="do something")
    stream = store.load(uid)
    assert [e.type for e in stream.events_list] == ["new_request", "task_interrupted"]
    assert "OPENAI_API_KEY" in stream.events_list[-1].content
    assert stream.events_list[-1].data["reason"] == "model_setup"
    events, _ = read_sse(client, f"/api/chats/{uid}/events", finished)
    assert events[-1][2]["status"] == "interrupted" and events[-1][2]["running"] is False
    assert events[-1][2]["reason"] == "model_setup"  # the page says "Failed", not "Interrupted"


def test_a_provider_failure_ends_the_run_visibly(auth, app, store, model):
    model.enqueue(ModelError("the provider answered 500 three times"))
    uid = new_chat(auth, app, text="try")
    last = store.load(uid).events_list[-1]
    assert last.type == "task_interrupted" and last.data["reason"] == "model_error"
    assert "500" in last.content
    client, _ = auth
    status = [data for kind, _, data in read_sse(client, f"/api/chats/{uid}/events", finished)[0] if kind == "status"]
    assert (status[-1]["status"], status[-1]["reason"]) == ("interrupted", "model_error")
    listed = next(chat for chat in client.get("/api/chats").json["chats"] if chat["uid"] == uid)
    assert (listed["status"], listed["reason"]) == ("interrupted", "model_error")


def test_rename_and_settings(auth, app, store, model, tmp_path):
    client, headers = auth
    uid = new_chat(auth, app, text="")
    renamed = client.patch(f"/api/chats/{uid}", json={"title": "  My   task "}, headers=headers)
    assert renamed.status_code == 200 and renamed.json["chat"]["title"] == "My task"
    assert client.get("/api/chats").json["chats"][0]["title"] == "My task"
    for bad in ({"title": ""}, {"title": 5}, {"colour": "red"}, {"settings": {"agent_type": "wizard"}},
                {"settings": {"cmd_init_dir": str(tmp_path / "missing")}}, {"settings": {"shell": "zsh"}},
                {"settings": {"notes": [1]}}, {"settings": "x"}):
        response = client.patch(f"/api/chats/{uid}", json=bad, headers=headers)
        assert response.status_code == 400, bad
        assert response.json["error"]
    work = tmp_path / "work"
    work.mkdir()
    settings = {"agent_type": "task_executor", "model": "openai:gpt-test", "cmd_init_dir": str(work),
                "prefix_cmd": "", "notes": "be brief\n\nuse python3"}
    saved = client.patch(f"/api/chats/{uid}", json={"settings": settings}, headers=headers).json["chat"]["settings"]
    assert saved == {**settings, "notes": ["be brief", "use python3"], "mcp_config": ""}
    assert store.load(uid).agent_type == "task_executor"
    model.enqueue(shell("pwd"), complete())
    client.post(f"/api/chats/{uid}/messages", json={"text": "where am I"}, headers=headers)
    wait_idle(app, uid)
    stream = store.load(uid)
    assert str(work) in stream.events_list[1].content
    assert "be brief" in model.prompts[0] and "use python3" in model.prompts[0]


def test_configured_notes_are_not_copied_into_the_chat_notes(store, model, tmp_path):
    config = load_config(overrides={"agents": {"common": {"notes": ["from the config"]}}})
    app = create_app(config, store, password=PASSWORD, model_factory=lambda name, cfg, agent_type: model,
                     default_dir=str(tmp_path))
    client = app.test_client()
    login(client)
    headers = {"X-CSRF-Token": csrf_from(client.get("/").get_data(as_text=True))}
    model.enqueue(complete("one"), complete("two"))
    uid = new_chat((client, headers), app, text="first", settings={"notes": ["mine"]})
    assert client.get(f"/api/chats/{uid}").json["chat"]["settings"]["notes"] == ["mine"]
    client.post(f"/api/chats/{uid}/messages", json={"text": "second"}, headers=headers)
    wait_idle(app, uid)
    assert model.prompts[1].count("from the config") == 1 and model.prompts[1].count("mine") == 1


def test_delete_removes_the_chat_and_its_children(auth, app, store):
    client, headers = auth
    parent = EventStream(title="parent")
    store.sync(parent)
    child = EventStream(title="child", parent_event_stream_uids=[parent.uid])
    store.sync(child)
    listed = client.get("/api/chats").json["chats"]
    assert {c["uid"]: c["parent_ids"] for c in listed}[child.uid] == [parent.uid]
    assert [c["uid"] for c in client.get(f"/api/chats/{parent.uid}").json["chat"]["children"]] == [child.uid]
    response = client.delete(f"/api/chats/{parent.uid}", headers=headers)
    assert response.status_code == 200 and set(response.json["deleted"]) == {parent.uid, child.uid}
    assert not store.exists(parent.uid) and not store.exists(child.uid)
    assert client.delete(f"/api/chats/{parent.uid}", headers=headers).status_code == 404


def test_batch_runs_carry_their_batch_in_the_list_and_no_browser_can_set_it(auth, app, store):
    client, headers = auth
    run = EventStream(title="task one")
    run.update_settings({"batch_id": "nightly", "batch_task": "t1", "agent_type": "default"})
    store.sync(run)
    plain = new_chat(auth, app, text="")
    listed = {chat["uid"]: chat for chat in client.get("/api/chats").json["chats"]}
    assert (listed[run.uid]["batch_id"], listed[run.uid]["batch_task"]) == ("nightly", "t1")
    assert "batch_id" not in listed[plain]
    assert client.get(f"/api/chats/{run.uid}").json["chat"]["batch_id"] == "nightly"

    for settings in ({"batch_id": "forged"}, {"batch_task": "t9"}):
        patched = client.patch(f"/api/chats/{plain}", json={"settings": settings}, headers=headers)
        assert patched.status_code == 400 and "unknown settings: batch_" in patched.json["error"]
        created = client.post("/api/chats", json={"text": "", "settings": settings}, headers=headers)
        assert created.status_code == 400
        moved = client.patch(f"/api/chats/{run.uid}", json={"settings": settings}, headers=headers)
        assert moved.status_code == 400
    assert store.info(plain).batch_id == "" and store.info(run.uid).batch_id == "nightly"
    assert store.load(run.uid).get_settings()["batch_task"] == "t1"


def test_search_by_title(auth, store):
    client, _ = auth
    for title in ("Fix the parser", "Write docs", "parser benchmarks"):
        store.sync(EventStream(title=title))
    found = client.get("/api/chats?q=PARSER").json["chats"]
    assert sorted(c["title"] for c in found) == ["Fix the parser", "parser benchmarks"]


def test_an_unknown_model_name_is_refused_when_saved(auth, app, tmp_path):
    client, headers = auth
    uid = new_chat(auth, app, text="")
    for bad, reason in [("gtp-4", "unknown model 'gtp-4'. Valid names: a preset (openai, gemini"),
                        ("mistral:large", "unknown model 'mistral:large'"),
                        ("openai:", "has no model id after the colon"),
                        (f"replay:{tmp_path}/none.jsonl", "not found")]:
        response = client.patch(f"/api/chats/{uid}", json={"settings": {"model": bad}}, headers=headers)
        assert response.status_code == 400 and reason in response.json["error"], bad
        checked = client.post("/api/settings/check", json={"settings": {"model": bad}}, headers=headers)
        assert checked.status_code == 400 and reason in checked.json["error"], bad  # a chat not made yet
    assert client.post("/api/settings/check", json={"settings": {"model": "claude"}}, headers=headers).json == {
        "settings": {"model": "claude"}}
    recording = tmp_path / "run.jsonl"
    recording.write_text('{"prompt": "p", "reply": "r"}\n')
    for good in ("auto", "claude", "ollama:qwen2.5-coder:7b", "anthropic:claude-x", f"replay:lenient:{recording}", ""):
        response = client.patch(f"/api/chats/{uid}", json={"settings": {"model": good}}, headers=headers)
        assert response.status_code == 200 and response.json["chat"]["settings"]["model"] == good, good


def test_export_json_and_markdown(auth, app, store, model):
    client, _ = auth
    model.enqueue(shell("printf 'a```b'"), complete("Exported **fine**."))
    uid = new_chat(auth, app, text="export me")
    exported = client.get(f"/api/chats/{uid}/export?format=json")
    assert exported.status_code == 200 and exported.mimetype == "application/json"
    assert exported.headers["Content-Disposition"] == f'attachment; filename="anges-{uid}.json"'
    assert EventStream.from_dict(exported.json) == store.load(uid)
    markdown = client.get(f"/api/chats/{uid}/export?format=md")
    assert markdown.headers["Content-Disposition"].endswith('.md"')
    assert markdown.headers["Content-Type"] == "text/markdown; charset=utf-8"
    text = markdown.get_data(as_text=True)
    assert text.startswith("# export me") and "Exported **fine**." in text
    assert "````bash\nprintf 'a```b'\n````" in text  # a fence longer than any backticks inside
    assert client.get(f"/api/chats/{uid}/export?format=pdf").status_code == 400


def test_markdown_export_includes_child_agent_steps(auth, store):
    client, _ = auth
    parent = EventStream(title="orchestrate", agent_type="orchestrator")
    child = EventStream(title="sub task", parent_event_stream_uids=[parent.uid], agent_type="task_executor")
    child.add_event(Event("new_request_from_parent", content="list files"))
    child.add_event(Event("task_completion", content="child says done"))
    store.sync(child)
    parent.add_event(Event("new_request", content="big job"))
    parent.add_event(Event("child_agent_running", data={"agent_id": child.uid, "starting_from": 0}))
    store.sync(parent)
    text = client.get(f"/api/chats/{parent.uid}/export?format=md").get_data(as_text=True)
    assert "child says done" in text and "### 2. Task completed" in text, "the child's steps are nested one level down"


# -- the live feed -------------------------------------------------------------------------------------------


def test_the_feed_sends_every_step_then_the_status_and_ends_when_the_run_is_over(auth, app, store, model):
    client, _ = auth
    model.enqueue(shell("echo one"), reply({"action_type": "EDIT_FILE", "directive_line": "NEW_FILE f.txt",
                                            "content": "x\n"}), complete("**Done**"))
    uid = new_chat(auth, app, text="three steps")
    events, _ = read_sse(client, f"/api/chats/{uid}/events", ended)
    steps = steps_of(events)
    assert [s["kind"] for s in steps] == ["request", "shell", "edit", "answer"]
    assert [s["index"] for s in steps] == [0, 1, 2, 3] and events[0][1] == "3"  # id: the last index sent
    assert steps[1]["command"] == "echo one" and steps[1]["exit_code"] == 0 and steps[1]["output"] == "one\n"
    assert steps[2]["path"] == "f.txt" and "+x" in steps[2]["diff"]
    assert steps[3]["body_html"] == "<p><strong>Done</strong></p>\n"
    assert [kind for kind, _, _ in events] == ["steps", "status", "end"]
    status = events[1][2]
    assert status["status"] == "completed" and status["running"] is False
    assert status["steps"] == 2, "the command and the edit: the answer that ends the run is not a step"
    assert status["input_tokens"] > 0 and status["output_tokens"] > 0
    assert events[2][2] == {"reason": "finished"}, "a finished chat's feed closes: it holds no connection"


def test_a_turns_reasoning_shows_once_even_when_the_feed_resumes_after_it(auth, store):
    client, _ = auth
    stream = EventStream(title="turns")
    stream.add_event(Event("new_request", content="go"))
    for n in (1, 2):
        stream.add_event(Event("action", reasoning="List both folders.", data={"command": f"ls d{n}", "exit_code": 0}))
    stream.add_event(Event("action", reasoning="Now count.", data={"command": "wc -l f", "exit_code": 0}))
    stream.add_event(Event("new_request", content="again"))
    stream.add_event(Event("action", reasoning="Now count.", data={"command": "wc -l g", "exit_code": 0}))
    store.sync(stream)
    events, _ = read_sse(client, f"/api/chats/{stream.uid}/events", ended)
    shown = [step["reasoning_html"] for step in steps_of(events)]
    assert shown == ["", "<p>List both folders.</p>\n", "", "<p>Now count.</p>\n", "", "<p>Now count.</p>\n"]
    resumed, _ = read_sse(client, f"/api/chats/{stream.uid}/events?from=2", ended)
    assert [step["reasoning_html"] for step in steps_of(resumed)][:1] == [""], "step 2 is still part of step 1's turn"


def test_an_action_whose_command_fact_is_not_text_shows_as_a_plain_step(auth, store):
    """A plug-in's action (or an imported stream) may record its `command` as a list: the chat shows it as any other
    action, and the steps after it still come."""
    client, _ = auth
    stream = EventStream(title="plug-in")
    stream.add_event(Event("new_request", content="go"))
    stream.add_event(Event("action", content="ran ls -l", message="ran ls -l", data={"command": ["ls", "-l"]}))
    stream.add_event(Event("task_completion", content="done"))
    store.sync(stream)
    events, _ = read_sse(client, f"/api/chats/{stream.uid}/events", ended)
    steps = steps_of(events)
    assert [step["kind"] for step in steps] == ["request", "other", "answer"]
    assert steps[1]["text"] == "ran ls -l"


def test_the_status_line_counts_actions_not_the_approvals_before_them_nor_the_answer():
    from web.render import Totals

    totals = Totals()
    for event in [Event("new_request", content="go"),
                  Event("approval_requested", data={"subject": "touch a"}),
                  Event("approval_decided", data={"decision": "allow"}),
                  Event("action", data={"command": "touch a", "exit_code": 0}),
                  Event("approval_requested", data={"subject": "touch b"}),
                  Event("approval_decided", data={"decision": "deny"}),
                  Event("task_completion", content="done")]:
        totals.add(event)
    assert totals.steps == 2, "the command and the declined action"


def test_the_status_line_shows_no_cache_share_of_an_estimated_input():
    from web.render import Totals

    counted, guessed = Totals(), Totals()
    usage = {"input_tokens": 1000, "output_tokens": 5, "cached_tokens": 400, "model_calls": 1}
    counted.add(Event("action", data={"command": "ls", "exit_code": 0, "usage": usage}))
    guessed.add(Event("action", data={"command": "ls", "exit_code": 0, "usage": {**usage, "estimated": True}}))
    assert counted.to_dict()["cache_hit_ratio"] == 0.4
    assert guessed.to_dict()["cache_hit_ratio"] is None, "a share of a guessed input says nothing"


def test_a_long_history_goes_out_in_batches(auth, store):
    client, _ = auth
    stream = EventStream(title="long")
    for n in range(450):
        stream.add_event(Event("action", content=f"step {n}", data={"command": f"echo {n}", "exit_code": 0}))
    store.sync(stream)
    events, _ = read_sse(client, f"/api/chats/{stream.uid}/events", ended)
    batches = [data["steps"] for kind, _, data in events if kind == "steps"]
    assert [len(batch) for batch in batches] == [200, 200, 50]
    assert [step["index"] for batch in batches for step in batch] == list(range(450))


def test_the_feed_resumes_without_gaps_or_duplicates(auth, app, model):
    client, _ = auth
    model.enqueue(shell("echo a"), shell("echo b"), complete())
    uid = new_chat(auth, app, text="resume")
    events, _ = read_sse(client, f"/api/chats/{uid}/events", ended, headers={"Last-Event-ID": "1"})
    assert [s["index"] for s in steps_of(events)] == [2, 3]
    events, _ = read_sse(client, f"/api/chats/{uid}/events?from=3", ended)
    assert [s["index"] for s in steps_of(events)] == [3]
    assert client.get(f"/api/chats/{uid}/events", headers={"Last-Event-ID": "x"}).status_code == 400
    for bad in ("1", "a:1", "1:x", "1//2:3", "-1:2", ",".join(f"{n}:0" for n in range(501))):
        response = client.get(f"/api/chats/{uid}/events?blocks={bad}")
        assert response.status_code == 400 and "blocks" in response.json["error"], bad


def test_the_feed_follows_a_live_run_and_a_reconnect_picks_up_where_it_left(auth, app, model):
    client, _ = auth
    release = threading.Event()
    model.enqueue(shell("echo first"), gate(release, complete("the end")))
    uid = new_chat(auth, app, text="live", wait=False)
    first, comments = read_sse(client, f"/api/chats/{uid}/events",
                               lambda ev, com: any(s["kind"] == "shell" for s in steps_of(ev)) and com)
    assert any(kind == "status" and data["running"] for kind, _, data in first)
    assert comments and not ended(first, comments), "while the run is active the feed stays open, with heartbeats"
    last_id = [e[1] for e in first if e[0] == "steps"][-1]
    release.set()
    rest, _ = read_sse(client, f"/api/chats/{uid}/events", ended, headers={"Last-Event-ID": last_id})
    indexes = [s["index"] for s in steps_of(first)] + [s["index"] for s in steps_of(rest)]
    assert indexes == list(range(len(indexes))) and steps_of(rest)[-1]["type"] == "task_completion"
    assert rest[-1] == ("end", None, {"reason": "finished"})


def test_a_run_held_elsewhere_keeps_the_feed_open_and_a_vanished_chat_is_reported(auth, app, store):
    client, _ = auth
    uid = new_chat(auth, app, text="")
    holding, done = threading.Event(), threading.Event()

    def other_process():
        with store.run_lock(uid):
            holding.set()
            assert done.wait(10)
            os.unlink(store.root / f"{uid}.jsonl")  # removed behind the store's back

    worker = threading.Thread(target=other_process)
    worker.start()
    assert holding.wait(5)
    events, comments = read_sse(client, f"/api/chats/{uid}/events",
                                lambda ev, com: len(com) >= 2 and done.set() is None and ev[-1][0] == "gone")
    worker.join(5)
    assert comments[:2] == [": heartbeat", ": heartbeat"]
    assert events[-1] == ("gone", None, {"uid": uid})


@pytest.mark.parametrize("url", ["/api/chats/{uid}/events", "/api/feed?watch=a~{uid}~0~"])
def test_the_feed_ends_when_the_session_does(auth, app, model, url):
    client, headers = auth
    release = threading.Event()
    model.enqueue(gate(release, complete("done")))
    uid = new_chat(auth, app, text="wait", wait=False)
    other = app.test_client()
    other.set_cookie("anges_session", client.get_cookie("anges_session").value)

    def log_out_once(events, comments):
        if events and not getattr(log_out_once, "done", False):
            log_out_once.done = other.post("/logout", headers=headers).status_code == 302
        return any(kind == "end" and "sub" not in data for kind, _, data in events)

    events, _ = read_sse(client, url.format(uid=uid), log_out_once)
    assert events[-1] == ("end", None, {"reason": "login"})
    release.set()
    wait_idle(app, uid)


def test_one_shared_feed_follows_several_chats_each_message_naming_its_watch(auth, app, store, model):
    client, _ = auth
    done = stored_finished_chat(store, "done before")
    release = threading.Event()
    model.enqueue(shell("echo first"), gate(release, complete("the end")))
    running = new_chat(auth, app, text="live", wait=False)

    def first_shell(events, comments):
        return any(s["kind"] == "shell" for kind, _, d in events if kind == "steps" and d["sub"] == "b"
                   for s in d["steps"])

    url = f"/api/feed?watch=a~{done}~1~&watch=b~{running}~0~&watch=c~nosuchchat~0~"
    first, _ = read_sse(client, url, first_shell)
    assert {data["sub"] for _, _, data in first} == {"a", "b", "c"} and all(i is None for _, i, _ in first)
    assert ("gone", None, {"sub": "c", "uid": "nosuchchat"}) in first
    of_a = [(kind, data) for kind, _, data in first if data["sub"] == "a"]
    assert [kind for kind, _ in of_a] == ["steps", "status", "end"] and of_a[-1][1]["reason"] == "finished"
    assert [step["index"] for step in of_a[0][1]["steps"]] == [1, 2], "from where the page was"
    resume = [data["resume"] for kind, _, data in first if kind == "steps" and data["sub"] == "b"][-1]
    assert resume == {"from": 2, "blocks": ""}, "where that chat goes on in a new connection"
    assert not any(kind == "end" and "sub" not in data for kind, _, data in first), "b still runs"
    release.set()
    rest, _ = read_sse(client, f"/api/feed?watch=b~{running}~{resume['from']}~", ended_all)
    assert [s["index"] for kind, _, d in rest if kind == "steps" for s in d["steps"]] == [2]
    assert rest[-2:] == [("end", None, {"sub": "b", "reason": "finished"}), ("end", None, {"reason": "finished"})]


def test_a_shared_feed_refuses_malformed_or_too_many_watches(auth):
    client, _ = auth
    for bad in ("a~chat", "a b~chat~0~", "a~ch/at~0~", "a~chat~x~", "a~chat~0~1:x", "a" * 33 + "~chat~0~"):
        response = client.get("/api/feed", query_string={"watch": bad})
        assert response.status_code == 400 and "watch" in response.json["error"] or "blocks" in response.json["error"]
    many = client.get("/api/feed", query_string=[("watch", f"s{n}~chat~0~") for n in range(65)])
    assert many.status_code == 400 and "at most 64" in many.json["error"]
    assert client.application.test_client().get("/api/feed?watch=a~chat~0~").status_code == 401


def stored_finished_chat(store, title):
    stream = EventStream(title=title)
    stream.add_event(Event("new_request", content="go"))
    stream.add_event(Event("action", data={"command": "true", "exit_code": 0}))
    stream.add_event(Event("task_completion", content="done"))
    store.sync(stream)
    return stream.uid


def ended_all(events, comments):
    return any(kind == "end" and "sub" not in data for kind, _, data in events)


def child_tree(store):
    """A parent that ran one child twice; the child's first run started a grandchild."""
    grandchild = EventStream(title="grandchild", parent_event_stream_uids=["parent1", "child1"], uid="grand1")
    grandchild.add_event(Event("new_request_from_parent", content="tiny task"))
    grandchild.add_event(Event("task_completion", content="tiny done"))
    store.sync(grandchild)
    child = EventStream(title="child", parent_event_stream_uids=["parent1"], uid="child1")
    for kind, content in [("new_request_from_parent", "task"), ("child_agent_running", ""),
                          ("task_completion", "first done"), ("follow_up_request_from_parent", "more"),
                          ("task_completion", "second done")]:
        child.add_event(Event(kind, content=content, data={"agent_id": "grand1", "starting_from": 0}
                              if kind == "child_agent_running" else {}))
    store.sync(child)
    parent = EventStream(title="parent", uid="parent1", agent_type="orchestrator")
    parent.add_event(Event("new_request", content="big"))
    parent.add_event(Event("child_agent_running", reasoning=json.dumps({"agent_id": "child1", "starting_from": 0})))
    parent.add_event(Event("child_agent_task_completion", content="first done"))
    parent.add_event(Event("child_agent_running", data={"agent_id": "child1", "starting_from": 3}))
    parent.add_event(Event("child_agent_task_completion", content="second done"))
    parent.add_event(Event("task_completion", content="all done"))
    store.sync(parent)


def test_one_feed_carries_the_child_agents_each_block_up_to_its_return(auth, store):
    client, _ = auth
    child_tree(store)
    events, _ = read_sse(client, "/api/chats/parent1/events", ended)
    assert [s["index"] for s in steps_of(events)] == [0, 1, 2, 3, 4, 5]
    assert steps_of(events)[1]["child"] == {"uid": "child1", "starting_from": 0, "agent_type": "", "exit_type": ""}
    assert [(s["index"], s["type"]) for s in steps_of(events, "1")] == [
        (0, "new_request_from_parent"), (1, "child_agent_running"), (2, "task_completion")]
    assert steps_of(events, "1")[2]["body_html"] == "<p>first done</p>\n"
    assert [s.get("text") or s.get("body_html") for s in steps_of(events, "1/1")] == ["tiny task", "<p>tiny done</p>\n"]
    assert [s["index"] for s in steps_of(events, "3")] == [3, 4]
    children = {data["block"]: data for kind, _, data in events if kind == "child"}
    assert children["1"] == {"block": "1", "uid": "child1", "title": "child", "status": "completed"}
    assert children["1/1"]["title"] == "grandchild" and children["3"]["uid"] == "child1"
    assert events[-1] == ("end", None, {"reason": "finished"})


def test_a_reconnecting_page_resumes_its_open_child_blocks_only(auth, store):
    client, _ = auth
    child_tree(store)
    # the page has shown the chat up to step 1 and block "1" up to its step 1; it closed block "1/1" already
    events, _ = read_sse(client, "/api/chats/parent1/events?from=2&blocks=1:2", ended)
    assert [s["index"] for s in steps_of(events)] == [2, 3, 4, 5]
    assert [s["index"] for s in steps_of(events, "1")] == [2]
    assert steps_of(events, "1/1") == []
    assert [s["index"] for s in steps_of(events, "3")] == [3, 4], "a block new to the page starts at its run"


def test_a_shared_feed_says_where_each_chat_resumes_child_blocks_included(auth, store):
    client, _ = auth
    child_tree(store)
    events, _ = read_sse(client, "/api/feed?watch=p~parent1~0~", ended_all)
    messages = [data for kind, _, data in events if kind == "steps"]
    assert messages[0]["block"] == "" and messages[0]["resume"] == {"from": 6, "blocks": "1:0,3:3"}
    assert messages[-1]["resume"] == {"from": 6, "blocks": ""}, "every block returned"
    # a new connection from the first cursor sends the rest of the tree, and nothing twice
    first = messages[0]["resume"]
    rest, _ = read_sse(client, f"/api/feed?watch=p~parent1~{first['from']}~{first['blocks']}", ended_all)
    sent = sorted((d["block"], s["index"]) for d in messages[:1] for s in d["steps"])
    sent += sorted((d["block"], s["index"]) for kind, _, d in rest if kind == "steps" for s in d["steps"])
    everything = sorted((d["block"], s["index"]) for d in messages for s in d["steps"])
    assert sorted(sent) == everything and len(sent) == len(set(sent))


# -- rendering model output ---------------------------------------------------------------------------------


@pytest.mark.parametrize("payload", [
    "<script>window.__xss=1</script>",
    '<img src=x onerror="window.__xss=1">',
    "[click](javascript:window.__xss=1)",
    "[click](JaVaScRiPt:alert(1))",
    '<svg onload="alert(1)"><script>alert(1)</script></svg>',
    '<a href="javascript:alert(1)">x</a>',
    "![x](javascript:alert(1))",
    '<iframe src="https://evil.example"></iframe>',
    "[data](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    '<div style="background:url(javascript:alert(1))">x</div>',
])
def test_markdown_is_sanitized(payload):
    tags, attributes = parsed(markdown_html(payload))
    assert not tags & {"script", "svg", "iframe", "div", "object", "embed", "style"}, payload
    for name, value in attributes:
        assert not name.startswith("on") and name != "style", (payload, name)
        if name in ("href", "src"):
            assert value.split(":", 1)[0].lower() in ("http", "https", "mailto") or ":" not in value, value


def parsed(html):
    """The tag names and (attribute, value) pairs in an HTML fragment, as a browser's tokenizer sees them."""
    from html.parser import HTMLParser

    tags, attributes = set(), []

    class Collect(HTMLParser):
        def handle_starttag(self, tag, attrs):
            tags.add(tag)
            attributes.extend((name.lower(), value or "") for name, value in attrs)

    Collect().feed(html)
    return tags, attributes


def test_markdown_keeps_what_people_write():
    html = markdown_html("# Title\n\n**bold** `code` [link](https://example.com)\n\n```python\nprint(1)\n```\n\n"
                         "| a | b |\n|---|---|\n| 1 | 2 |")
    assert "<h1>Title</h1>" in html and "<strong>bold</strong>" in html and "<code>code</code>" in html
    assert 'href="https://example.com"' in html and 'rel="noopener noreferrer nofollow"' in html
    assert '<code class="language-python">print(1)' in html and "<table>" in html


def test_pictures_in_model_output_become_links_and_never_load():
    html = markdown_html("![a chart](https://tracker.example/pixel.png?u=1) and ![](logo.png) and "
                         '![x](javascript:alert(1)) <img src="https://tracker.example/raw.png">')
    tags, attributes = parsed(html)
    assert "img" not in tags
    assert ("href", "https://tracker.example/pixel.png?u=1") in attributes and ">image: a chart</a>" in html
    assert ("href", "logo.png") in attributes and ">image</a>" in html
    assert not any(value.startswith("javascript") for _, value in attributes)


def test_a_chat_runs_with_the_mcp_servers_of_its_settings(auth, app, config, model, store, tmp_path):
    import sys
    from pathlib import Path

    from anges.config.types import SafetyRule

    config.safety.rules.append(SafetyRule("USE_MCP_TOOL", "demo.*", "allow"))  # trusted (MCP tools ask by default)

    server = Path(__file__).with_name("mcp_servers") / "stdio_server.py"
    servers = tmp_path / "mcp.json"
    servers.write_text(json.dumps({"mcpServers": {"demo": {
        "command": sys.executable, "args": [str(server)], "env": {"PID_FILE": str(tmp_path / "pids"),
                                                                  "DEMO_SECRET": "s3cret-token-value"}}}}))
    model.enqueue(reply({"action_type": "USE_MCP_TOOL", "mcp_server_name": "demo", "tool_name": "echo",
                         "tool_args": {"text": "ping", "times": 2}}), complete())
    uid = new_chat(auth, app, "echo through mcp", settings={"mcp_config": str(servers)})
    stream = store.load(uid)
    assert stream.get_settings()["mcp_config"] == str(servers)
    tool = stream.events_list[1]
    assert tool.data["server"] == "demo" and "ping ping" in tool.content
    assert "## USE_MCP_TOOL" in model.prompts[0] and "echo" in model.prompts[0].split("## USE_MCP_TOOL")[1]
    assert "s3cret-token-value" not in json.dumps(stream.to_dict())
    client, headers = auth
    assert client.get(f"/api/chats/{uid}").json["chat"]["settings"]["mcp_config"] == str(servers)
    from helpers import process_alive

    server_pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    deadline = time.monotonic() + 5
    while any(process_alive(p) for p in server_pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server_pids and not any(process_alive(p) for p in server_pids), "the run shut its MCP server down"


def test_a_broken_mcp_settings_file_is_refused_with_the_reason(auth, app, tmp_path):
    client, headers = auth
    uid = new_chat(auth, app, text=None)
    missing = client.patch(f"/api/chats/{uid}", json={"settings": {"mcp_config": str(tmp_path / "none.json")}},
                           headers=headers)
    assert missing.status_code == 400 and "MCP config file not found" in missing.get_data(as_text=True)
    (tmp_path / "bad.json").write_text("{not json")
    bad = client.patch(f"/api/chats/{uid}", json={"settings": {"mcp_config": str(tmp_path / "bad.json")}},
                       headers=headers)
    assert bad.status_code == 400 and "bad.json" in bad.get_data(as_text=True)
