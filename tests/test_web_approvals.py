"""Approvals in the web chat through Flask's test client: the channel of a web run, the answer API and its rules."""

import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from anges.web import create_app
from test_web import PASSWORD, complete, csrf_from, gate, login, read_sse, reply, shell, steps_of, types

from anges.config.loading import load_config
from anges.models.scripted import ScriptedModel
from anges.store.event_store import EventStore
from anges.store.events import Event, EventStream

pytestmark = pytest.mark.packaged_safety  # approvals as they are everywhere, bwrap or not
ASK_TOUCH = {"action": "RUN_SHELL_CMD", "match": "re:^touch ", "decision": "ask",
             "reason": "touching files needs a person here"}


@pytest.fixture
def config():
    return load_config(overrides={"web": {"heartbeat_seconds": 0.2, "poll_seconds": 0.02},
                                  "safety": {"rules": [ASK_TOUCH]}})


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
def auth(app):
    client = app.test_client()
    assert login(client).status_code == 302
    return client, {"X-CSRF-Token": csrf_from(client.get("/").get_data(as_text=True))}


def start(auth, text="do it"):
    client, headers = auth
    response = client.post("/api/chats", json={"text": text}, headers=headers)
    assert response.status_code == 201, response.json
    return response.json["chat"]["uid"]


def pending_request(store, uid, timeout=10.0):
    """The data of the newest `approval_requested` event of `uid` once it is recorded."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        asked = [e for e in store.load(uid).events_list if e.type == "approval_requested"]
        if asked:
            return asked[-1].data
        time.sleep(0.02)
    raise AssertionError("no approval request was recorded")


def answer(auth, uid, request_id, decision, feedback="", headers=None):
    client, csrf = auth
    return client.post(f"/api/chats/{uid}/approvals/{request_id}", json={"decision": decision, "feedback": feedback},
                       headers=csrf if headers is None else headers)


def wait_idle(app, uid, timeout=10):
    assert app.extensions["anges"].runs.wait(uid, timeout), "the run did not finish"


def decided(store, uid):
    return [e.data for e in store.load(uid).events_list if e.type == "approval_decided"]


def answer_files(store):
    return sorted(path.name for path in store.root.glob("*.answer"))


def test_an_approved_command_runs_and_the_answer_is_recorded_as_the_web_chats(auth, app, store, model, tmp_path):
    model.enqueue(shell("touch approved.txt"), complete("touched"))
    uid = start(auth)
    asked = pending_request(store, uid)
    assert (asked["action_type"], asked["subject"], asked["channel"]) == ("RUN_SHELL_CMD", "touch approved.txt", "web")
    assert asked["reason"] == "touching files needs a person here" and asked["rule"] == "safety.rules[0]"
    time.sleep(0.3)
    assert not (tmp_path / "approved.txt").exists() and app.extensions["anges"].runs.busy(uid)  # it waits

    response = answer(auth, uid, asked["request_id"], "allow")
    assert response.status_code == 202 and response.json == {"accepted": True, "decision": "allow"}
    wait_idle(app, uid)

    assert (tmp_path / "approved.txt").exists()
    [decision] = decided(store, uid)
    assert (decision["request_id"], decision["decision"], decision["by"]) == (asked["request_id"], "allow", "web")
    assert types(store, uid) == ["new_request", "approval_requested", "approval_decided", "action", "task_completion"]
    assert answer_files(store) == []  # removed with the run


def test_the_feed_numbers_steps_as_the_model_and_the_restore_dialog_do(auth, app, store, model, tmp_path):
    """An approval's request takes no number: the page's numbers are the history's, and a restore names the same."""
    model.enqueue(shell("touch approved.txt"), complete("touched"))
    uid = start(auth)
    assert answer(auth, uid, pending_request(store, uid)["request_id"], "allow").status_code == 202
    wait_idle(app, uid)
    client, headers = auth
    events, _ = read_sse(client, f"/api/chats/{uid}/events", lambda events, comments: any(
        step["type"] == "task_completion" for step in steps_of(events)))
    numbers = [(step["type"], step["number"]) for step in steps_of(events)]
    assert numbers == [("new_request", 1), ("approval_requested", None), ("approval_decided", 2), ("action", 3),
                       ("task_completion", 4)]
    prompt = model.prompts[-1]
    assert "## Event 3 TYPE: RUN_SHELL_CMD" in prompt
    plan = client.get(f"/api/chats/{uid}/restore?step=3", headers=headers).json
    assert plan["step"] == 3 and plan["label"].endswith("touch approved.txt") and plan["steps"] == [3]


def test_denied_with_feedback_the_model_is_told_why_and_the_command_never_runs(auth, app, store, model, tmp_path):
    model.enqueue(shell("touch denied.txt"), complete("fine"))
    uid = start(auth)
    asked = pending_request(store, uid)
    response = answer(auth, uid, asked["request_id"], "deny", feedback="  use the build directory instead ")
    assert response.status_code == 202
    wait_idle(app, uid)

    assert not (tmp_path / "denied.txt").exists()
    [decision] = decided(store, uid)
    assert (decision["decision"], decision["by"]) == ("deny", "web")
    assert decision["feedback"] == "use the build directory instead"
    assert "The user says: use the build directory instead" in model.prompts[1]


def test_always_approves_the_same_command_for_the_rest_of_the_run(auth, app, store, model, tmp_path):
    model.enqueue(shell("touch one.txt"), shell("touch one.txt"), complete("both"))
    uid = start(auth)
    asked = pending_request(store, uid)
    assert asked["scope"] == "this exact command"
    assert answer(auth, uid, asked["request_id"], "always").status_code == 202
    wait_idle(app, uid)

    assert (tmp_path / "one.txt").exists() and len([e for e in store.load(uid).events_list if e.type == "action"]) == 2
    assert [e.type for e in store.load(uid).events_list].count("approval_requested") == 1
    [first] = decided(store, uid)
    assert first["always"] is True
    second = [e for e in store.load(uid).events_list if e.type == "action"][1]
    assert second.data["approval"]["by"] == "always"


def test_the_first_answer_wins_and_later_ones_are_refused_with_the_decision(auth, app, store, model, tmp_path):
    release = threading.Event()  # the next step waits, so the run is still active when the second answer comes
    model.enqueue(shell("touch x.txt"), gate(release, complete("done")))
    uid = start(auth)
    asked = pending_request(store, uid)
    first = answer(auth, uid, asked["request_id"], "allow")
    deadline = time.monotonic() + 10
    while not decided(store, uid) and time.monotonic() < deadline:
        time.sleep(0.02)
    second = answer(auth, uid, asked["request_id"], "deny")
    release.set()
    wait_idle(app, uid)

    assert first.status_code == 202
    assert second.status_code == 409 and second.json["error"].startswith("already answered: approved (web)")
    assert second.json["decided"]["decision"] == "allow"
    assert (tmp_path / "x.txt").exists() and [d["decision"] for d in decided(store, uid)] == ["allow"]
    late = answer(auth, uid, asked["request_id"], "allow")  # after the run, too
    assert late.status_code == 409 and "already answered" in late.json["error"]


def test_two_answers_racing_one_request_leave_exactly_one(auth, app, store, model):
    answered = threading.Event()  # the run (which removes its answers when it ends) outlasts every answer

    def after_every_answer(prompt):
        answered.wait(30)
        return complete("done")

    model.enqueue(shell("touch raced.txt"), after_every_answer)
    uid = start(auth)
    asked = pending_request(store, uid)
    box = app.extensions["anges"].runs.answers
    results = []
    threads = [threading.Thread(target=lambda word=word: results.append(box.give(uid, asked["request_id"], word)))
               for word in ("allow", "deny") * 4]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    answered.set()
    wait_idle(app, uid)

    assert sorted(results) == [False] * 7 + [True]
    assert len(decided(store, uid)) == 1


def test_the_answer_api_refuses_what_it_cannot_take(auth, app, store, model):
    client, headers = auth
    model.enqueue(shell("touch refused.txt"), complete("done"))
    uid = start(auth)
    asked = pending_request(store, uid)
    rid = asked["request_id"]

    for bad in ({}, {"X-CSRF-Token": "forged"}):
        response = answer(auth, uid, rid, "allow", headers=bad)
        assert response.status_code == 403 and "CSRF" in response.json["error"]
    cross = answer(auth, uid, rid, "allow", headers={**headers, "Origin": "https://evil.example"})
    assert cross.status_code == 403
    assert client.get(f"/api/chats/{uid}/approvals/{rid}").status_code == 405
    stranger = app.test_client().post(f"/api/chats/{uid}/approvals/{rid}", json={"decision": "allow"})
    assert stranger.status_code == 401 and stranger.json == {"error": "login required"}
    assert answer(auth, uid, "NoSuchRequest", "allow").status_code == 404
    assert answer(auth, "nochat", rid, "allow").status_code == 404
    assert answer(auth, uid, "../../etc", "allow").status_code == 404
    for decision in ("yes", "", None, ["allow"]):
        response = answer(auth, uid, rid, decision)
        assert response.status_code == 400 and "decision must be one of allow, deny, always" in response.json["error"]
    assert answer(auth, uid, rid, "allow", feedback="why not").status_code == 400  # feedback goes with deny
    assert answer(auth, uid, rid, "deny", feedback="x" * 2001).status_code == 400
    assert client.post(f"/api/chats/{uid}/approvals/{rid}", data="allow", headers=headers).status_code == 400
    assert app.extensions["anges"].runs.busy(uid) and not decided(store, uid)  # none of that answered it

    assert answer(auth, uid, rid, "deny").status_code == 202
    wait_idle(app, uid)


def test_a_request_no_run_is_waiting_for_is_refused(auth, app, store):
    """A request left pending by a run that died (kill -9), and one asked on the terminal of a CLI run."""
    stream = EventStream(title="left behind")
    for channel in ("web", "terminal"):
        stream.add_event(Event("approval_requested", content="waiting", data={
            "request_id": f"req{channel}", "action_type": "RUN_SHELL_CMD", "subject": "touch a", "channel": channel}))
    store.sync(stream)

    dead = answer(auth, stream.uid, "reqweb", "allow")
    assert dead.status_code == 409 and "no run is waiting for this answer" in dead.json["error"]
    terminal = answer(auth, stream.uid, "reqterminal", "allow")
    assert terminal.status_code == 409 and "answered where its run was started (the terminal" in terminal.json["error"]
    assert answer_files(store) == []


def test_stop_while_waiting_cancels_the_request_and_ends_the_run_at_once(auth, app, store, model, tmp_path):
    client, headers = auth
    model.enqueue(shell("touch never.txt"), complete("never"))
    uid = start(auth)
    asked = pending_request(store, uid)
    started = time.monotonic()
    assert client.post(f"/api/chats/{uid}/stop", headers=headers).status_code == 202
    wait_idle(app, uid, timeout=5)
    assert time.monotonic() - started < 3

    assert types(store, uid) == ["new_request", "approval_requested", "approval_decided", "task_interrupted"]
    [decision] = decided(store, uid)
    assert (decision["decision"], decision["by"]) == ("cancelled", "interrupt")
    late = answer(auth, uid, asked["request_id"], "allow")
    assert late.status_code == 409 and not (tmp_path / "never.txt").exists()


def test_the_feed_shows_the_request_and_its_decision_as_text(auth, app, store, model):
    client, _ = auth
    payload = "touch '<img src=x onerror=alert(1)>.txt' # \u202eharmless"  # a bidi override reorders what shows
    model.enqueue(shell(payload), complete("done"))
    uid = start(auth)
    asked = pending_request(store, uid)
    events, _ = read_sse(client, f"/api/chats/{uid}/events",
                         lambda events, comments: any(s["type"] == "approval_requested" for s in steps_of(events)))
    [card] = [s for s in steps_of(events) if s["type"] == "approval_requested"]
    assert card["kind"] == "approval"
    shown = payload.replace("\u202e", "<U+202E>")
    assert card["approval"]["subject"] == shown and card["approval"]["detail"] == shown
    assert card["approval"]["request_id"] == asked["request_id"] and card["approval"]["channel"] == "web"
    assert card["approval"]["agent_id"] == uid and card["approval"]["scope"]
    assert not any(key.endswith("_html") and value for key, value in card.items())  # nothing as HTML

    answer(auth, uid, asked["request_id"], "deny", feedback="<b>no</b>")
    events, _ = read_sse(client, f"/api/chats/{uid}/events?from=2", lambda events, comments: any(
        s["type"] == "approval_decided" for s in steps_of(events)))
    [verdict] = [s for s in steps_of(events) if s["type"] == "approval_decided"]
    assert verdict["approval"]["feedback"] == "<b>no</b>" and verdict["approval"]["decision"] == "deny"
    wait_idle(app, uid)


def test_a_rule_decision_without_a_question_shows_as_a_decided_step(auth, app, store, model):
    client, _ = auth
    model.enqueue(shell("rm -rf /"), complete("stopped"))
    uid = start(auth)
    wait_idle(app, uid)
    events, _ = read_sse(client, f"/api/chats/{uid}/events", lambda events, comments: False, timeout=2)
    [verdict] = [s for s in steps_of(events) if s["type"] == "approval_decided"]
    assert verdict["approval"]["request_id"] is None and verdict["approval"]["by"] == "rule"
    assert verdict["approval"]["decision"] == "deny" and verdict["approval"]["rule"] == "safety.default_rules[0]"


def test_child_agents_ask_on_the_same_channel_and_their_requests_are_answered_in_their_stream(
        auth, app, store, model, tmp_path):
    directive = {"action_type": "CALL_CHILD_AGENT", "directive": "NEW_CHILD_AGENT TASK_EXECUTOR",
                 "agent_input": "touch a file"}
    model.enqueue(reply(directive), shell("touch child.txt"), complete("child done"), complete("parent done"))
    client, headers = auth
    response = client.post("/api/chats", json={"text": "delegate", "settings": {"agent_type": "orchestrator"}},
                           headers=headers)
    uid = response.json["chat"]["uid"]
    deadline = time.monotonic() + 10
    children = []
    while not children and time.monotonic() < deadline:
        children = [info.uid for info in store.children(uid)] if store.exists(uid) else []
        time.sleep(0.02)
    [child] = children
    asked = pending_request(store, child)
    assert asked["agent_id"] == child and asked["channel"] == "web"
    assert answer(auth, uid, asked["request_id"], "allow").status_code == 404  # not the parent's request
    assert answer(auth, child, asked["request_id"], "allow").status_code == 202
    wait_idle(app, uid)
    assert (tmp_path / "child.txt").exists() and decided(store, child)[0]["by"] == "web"


SECOND_PROCESS = textwrap.dedent("""
    import sys
    from anges.web import create_app
    from test_web import csrf_from, login
    from anges.config.loading import load_config

    uid, request_id = sys.argv[1:3]
    client = create_app(load_config(), password=sys.argv[3]).test_client()
    assert login(client, sys.argv[3]).status_code == 302
    token = csrf_from(client.get("/").get_data(as_text=True))
    response = client.post(f"/api/chats/{uid}/approvals/{request_id}", json={"decision": "allow"},
                           headers={"X-CSRF-Token": token})
    print(response.status_code, response.get_json())
""")


def test_an_answer_given_to_another_server_process_reaches_the_run(auth, app, store, model, tmp_path):
    model.enqueue(shell("touch elsewhere.txt"), complete("done"))
    uid = start(auth)
    asked = pending_request(store, uid)
    tests_dir = os.path.dirname(__file__)
    done = subprocess.run([sys.executable, "-c", SECOND_PROCESS, uid, asked["request_id"], PASSWORD],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": tests_dir})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("202 "), done.stdout
    wait_idle(app, uid)
    assert (tmp_path / "elsewhere.txt").exists() and decided(store, uid)[0]["by"] == "web"


def test_deleting_a_chat_removes_answers_a_killed_run_left(auth, app, store):
    client, headers = auth
    stream = EventStream(title="killed")
    store.sync(stream)
    box = app.extensions["anges"].runs.answers
    assert box.give(stream.uid, "leftover", "allow")
    assert answer_files(store) == [f"{stream.uid}.leftover.answer"]
    assert client.delete(f"/api/chats/{stream.uid}", headers=headers).status_code == 200
    assert answer_files(store) == []


def test_with_approval_deny_configured_the_web_chat_declines_without_a_card(store, model, tmp_path):
    config = load_config(overrides={"safety": {"rules": [ASK_TOUCH], "approval": "deny"}})
    app = create_app(config, store, password=PASSWORD, model_factory=lambda name, cfg, agent_type: model,
                     default_dir=str(tmp_path))
    client = app.test_client()
    login(client)
    model.enqueue(shell("touch no.txt"), complete("ok"))
    uid = start((client, {"X-CSRF-Token": csrf_from(client.get("/").get_data(as_text=True))}))
    wait_idle(app, uid)
    assert types(store, uid) == ["new_request", "approval_decided", "task_completion"]
    assert decided(store, uid)[0]["by"] == "approval=deny" and not (tmp_path / "no.txt").exists()


def test_a_command_too_long_to_be_shown_whole_is_declined_without_a_card(auth, app, store, model, tmp_path):
    command = f"touch long.txt; echo {'x' * 25_000}; touch hidden-in-the-tail.txt"
    model.enqueue(shell(command), complete("gave up"))
    uid = start(auth)
    wait_idle(app, uid)

    assert "approval_requested" not in types(store, uid)  # no card offers Approve for what it cannot show
    assert not (tmp_path / "long.txt").exists() and not (tmp_path / "hidden-in-the-tail.txt").exists()
    [decision] = decided(store, uid)
    assert (decision["decision"], decision["by"]) == ("deny", "limit")
    assert decision["feedback"].startswith(f"cannot run: it is {len(command):,} characters, over the 20,000 an approval")
