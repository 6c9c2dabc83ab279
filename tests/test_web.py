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
from anges.config import load_config
from anges.events import Event, EventStream
from anges.exceptions import ConfigError, ModelError, ModelSetupError
from anges.models.scripted import ScriptedModel
from anges.store import EventStore

PASSWORD = "correct horse battery"


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


def steps_of(events):
    return [data for kind, _, data in events if kind == "step"]


def finished(events, comments):
    return any(kind == "status" and not data["running"] and data["status"] != "new" for kind, _, data in events)


# -- login, sessions and the rules every request goes through ------------------------------------------------


def test_pages_redirect_to_login_and_the_api_answers_401(client):
    page = client.get("/")
    assert page.status_code == 302 and page.headers["Location"].startswith("/login")
    assert client.get("/chat/abc").status_code == 302
    for method, url in [("get", "/api/chats"), ("get", "/api/chats/abc"), ("get", "/api/chats/abc/events"),
                        ("get", "/api/chats/abc/export"), ("post", "/api/chats"), ("patch", "/api/chats/abc"),
                        ("delete", "/api/chats/abc"), ("post", "/api/chats/abc/messages"),
                        ("post", "/api/chats/abc/stop")]:
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


def test_a_wrong_password_is_refused_and_failures_are_rate_limited(client):
    for _ in range(5):
        response = login(client, "wrong")
        assert response.status_code == 401
        assert "Wrong password" in response.get_data(as_text=True)
    blocked = login(client, "wrong")
    assert blocked.status_code == 429 and int(blocked.headers["Retry-After"]) > 0
    assert "Too many failed attempts" in blocked.get_data(as_text=True)
    assert login(client).status_code == 429  # even the right password waits
    assert client.get("/api/chats").status_code == 401


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
             ("post", f"/api/chats/{uid}/stop", None)]
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


def test_without_a_password_only_localhost_is_served(config, store):
    app = create_app(config, store, password="")
    client = app.test_client()
    assert client.get("/").status_code == 200  # no login on localhost
    assert client.get("/api/chats").status_code == 200
    assert client.get("/", environ_base={"REMOTE_ADDR": "192.0.2.7"}).status_code == 403
    rebound = client.get("/", headers={"Host": "attacker.example"})
    assert rebound.status_code == 403 and "password" in rebound.get_data(as_text=True)
    assert client.post("/api/chats", json={}).status_code == 403  # CSRF still applies


@pytest.mark.parametrize("header", ["X-Forwarded-For", "Forwarded", "X-Real-IP", "X-Forwarded-Host"])
def test_without_a_password_a_request_relayed_by_a_local_proxy_is_refused(config, store, header):
    client = create_app(config, store, password="").test_client()
    relayed = client.get("/api/chats", headers={header: "203.0.113.9"})
    assert relayed.status_code == 403 and "password" in relayed.get_data(as_text=True)
    assert create_app(config, store, password=PASSWORD).test_client().get(
        "/login", headers={header: "203.0.113.9"}).status_code == 200, "with a password, proxies are fine"


def test_the_password_can_come_from_the_environment(config, store, monkeypatch):
    monkeypatch.setenv("ANGES_UI_PASSWORD", "from-env-pw")
    client = create_app(config, store).test_client()
    assert client.get("/api/chats").status_code == 401
    assert login(client, "from-env-pw").status_code == 302
    assert client.get("/api/chats").status_code == 200


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


def test_a_provider_failure_ends_the_run_visibly(auth, app, store, model):
    model.enqueue(ModelError("the provider answered 500 three times"))
    uid = new_chat(auth, app, text="try")
    last = store.load(uid).events_list[-1]
    assert last.type == "task_interrupted" and last.data["reason"] == "model_error"
    assert "500" in last.content


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
    settings = {"agent_type": "task_executor", "model": "scripted", "cmd_init_dir": str(work),
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


def test_search_by_title(auth, store):
    client, _ = auth
    for title in ("Fix the parser", "Write docs", "parser benchmarks"):
        store.sync(EventStream(title=title))
    found = client.get("/api/chats?q=PARSER").json["chats"]
    assert sorted(c["title"] for c in found) == ["Fix the parser", "parser benchmarks"]


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


def test_the_feed_sends_every_step_then_the_status(auth, app, store, model):
    client, _ = auth
    model.enqueue(shell("echo one"), reply({"action_type": "EDIT_FILE", "directive_line": "NEW_FILE f.txt",
                                            "content": "x\n"}), complete("**Done**"))
    uid = new_chat(auth, app, text="three steps")
    events, _ = read_sse(client, f"/api/chats/{uid}/events", finished)
    steps = steps_of(events)
    assert [s["kind"] for s in steps] == ["request", "shell", "edit", "answer"]
    assert [e[1] for e in events if e[0] == "step"] == ["0", "1", "2", "3"]
    assert steps[1]["command"] == "echo one" and steps[1]["exit_code"] == 0 and steps[1]["output"] == "one\n"
    assert steps[2]["path"] == "f.txt" and "+x" in steps[2]["diff"]
    assert steps[3]["body_html"] == "<p><strong>Done</strong></p>\n"
    status = events[-1]
    assert status[0] == "status" and status[2]["status"] == "completed" and status[2]["steps"] == 3
    assert status[2]["input_tokens"] > 0 and status[2]["output_tokens"] > 0


def test_the_feed_resumes_after_last_event_id_without_gaps_or_duplicates(auth, app, model):
    client, _ = auth
    model.enqueue(shell("echo a"), shell("echo b"), complete())
    uid = new_chat(auth, app, text="resume")
    events, _ = read_sse(client, f"/api/chats/{uid}/events", finished, headers={"Last-Event-ID": "1"})
    assert [s["index"] for s in steps_of(events)] == [2, 3, 4][: len(steps_of(events))] == [2, 3]
    events, _ = read_sse(client, f"/api/chats/{uid}/events?from=3", finished)
    assert [s["index"] for s in steps_of(events)] == [3]
    assert client.get(f"/api/chats/{uid}/events", headers={"Last-Event-ID": "x"}).status_code == 400


def test_the_feed_follows_a_live_run_and_a_reconnect_picks_up_where_it_left(auth, app, model):
    client, _ = auth
    release = threading.Event()
    model.enqueue(shell("echo first"), gate(release, complete("the end")))
    uid = new_chat(auth, app, text="live", wait=False)
    first, _ = read_sse(client, f"/api/chats/{uid}/events",
                        lambda ev, _: any(s["kind"] == "shell" for s in steps_of(ev)))
    assert any(kind == "status" and data["running"] for kind, _, data in first)
    last_id = [e[1] for e in first if e[0] == "step"][-1]
    release.set()
    rest, _ = read_sse(client, f"/api/chats/{uid}/events", finished, headers={"Last-Event-ID": last_id})
    indexes = [s["index"] for s in steps_of(first)] + [s["index"] for s in steps_of(rest)]
    assert indexes == list(range(len(indexes))) and steps_of(rest)[-1]["type"] == "task_completion"


def test_the_feed_sends_heartbeats_while_idle_and_tells_when_a_chat_is_deleted(auth, app, store):
    client, _ = auth
    uid = new_chat(auth, app, text="")
    _, comments = read_sse(client, f"/api/chats/{uid}/events", lambda ev, com: len(com) >= 2)
    assert comments[:2] == [": heartbeat", ": heartbeat"]
    threading.Timer(0.3, lambda: store.delete(uid)).start()
    events, _ = read_sse(client, f"/api/chats/{uid}/events", lambda ev, _: ev and ev[-1][0] == "gone")
    assert events[-1][0] == "gone"


def test_the_feed_of_a_child_agent(auth, store):
    client, _ = auth
    child = EventStream(title="child", parent_event_stream_uids=["parent1"])
    child.add_event(Event("new_request_from_parent", content="task"))
    store.sync(child)
    parent = EventStream(title="parent", uid="parent1", agent_type="orchestrator")
    parent.add_event(Event("new_request", content="big"))
    parent.add_event(Event("child_agent_running", reasoning=json.dumps({"agent_id": child.uid, "starting_from": 0})))
    store.sync(parent)
    events, _ = read_sse(client, "/api/chats/parent1/events", lambda ev, _: any(e[0] == "status" for e in ev))
    running = steps_of(events)[1]
    assert running["kind"] == "child_running"
    assert running["child"]["uid"] == child.uid and running["child"]["starting_from"] == 0
    events, _ = read_sse(client, f"/api/chats/{child.uid}/events", lambda ev, _: any(e[0] == "status" for e in ev))
    assert steps_of(events)[0]["from_parent"] is True


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


def test_a_chat_runs_with_the_mcp_servers_of_its_settings(auth, app, config, model, store, tmp_path):
    import sys
    from pathlib import Path

    from anges.config import SafetyRule

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
