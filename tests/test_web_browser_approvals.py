"""Approvals, the sandbox line and batch groups in the web chat, as a person uses them in headless Chromium."""

import threading

import pytest
from test_web_browser import (
    TRAP,
    WAIT,
    LiveServer,
    assert_safe,
    browser,  # noqa: F401  (the module's browser fixture)
    complete,
    expect,
    gate,
    log_in,
    reply,
    send,
    shell,
)

from anges.models.scripted import ScriptedModel
from anges.store.events import Event, EventStream

pytestmark = [pytest.mark.browser, pytest.mark.packaged_safety, pytest.mark.xdist_group("browser")]
ASK_TOUCH = {"action": "RUN_SHELL_CMD", "match": "re:^touch ", "decision": "ask",
             "reason": "touching files needs a person here"}
PENDING = ".card.approval[data-state=pending]"


@pytest.fixture
def model():
    return ScriptedModel()


@pytest.fixture
def server(model, tmp_path):
    live = LiveServer(model, tmp_path, safety={"rules": [ASK_TOUCH]})
    yield live
    live.close()


@pytest.fixture
def context(browser):  # noqa: F811
    context = browser.new_context(viewport={"width": 1280, "height": 820})
    context.set_default_timeout(WAIT)
    context.add_init_script(TRAP)
    yield context
    context.close()


@pytest.fixture
def page(context):
    page = context.new_page()
    page.dialogs = []
    page.on("dialog", lambda dialog: (page.dialogs.append(dialog.message), dialog.dismiss()))
    return page


def chat_uid(page):
    return page.url.rsplit("/", 1)[1]


def decisions(server, uid):
    return [e.data for e in server.store.load(uid).events_list if e.type == "approval_decided"]


def test_approve_a_command_from_the_page_and_it_runs(page, server, model, tmp_path):
    model.enqueue(shell("touch approved.txt", reasoning="Create the file."), complete("Created it."))
    log_in(page, server)
    send(page, "create approved.txt")
    card = page.locator(PENDING)
    expect(card.locator(".card-head .path")).to_have_text("RUN_SHELL_CMD touch approved.txt")
    expect(card.locator(".approval-reason")).to_have_text("touching files needs a person here [safety.rules[0]]")
    expect(card.locator(".approval-reasoning")).to_have_text("Create the file.")  # why the agent asks, while it waits
    expect(card.locator("pre.output")).to_have_text("touch approved.txt")
    expect(card.locator("button[data-decision=always]")).to_have_attribute(
        "title", "Run it, and for the rest of this run: this exact command")
    expect(page.locator("#working-text")).to_have_text("Waiting for approval…")
    assert not (tmp_path / "approved.txt").exists()

    card.locator("button[data-decision=allow]").click()
    decided = page.locator(".card.approval[data-state=allow]")
    expect(decided.locator(".approval-label")).to_have_text("Approved")
    expect(decided.locator(".approval-outcome")).to_have_text("Approved in the web chat.")
    expect(decided.locator(".approval-controls")).to_be_hidden()
    expect(decided.locator(".approval-reasoning")).to_have_count(0)  # the step below shows it now, once
    expect(page.locator(".step-shell .command")).to_have_text("touch approved.txt")
    expect(page.locator(".step-shell .badge.ok")).to_have_text("exit 0")
    expect(page.locator(".answer-task_completion")).to_contain_text("Created it.")
    assert (tmp_path / "approved.txt").exists()
    assert [d["by"] for d in decisions(server, chat_uid(page))] == ["web"]
    expect(page.locator(".step-approval")).to_have_count(1)  # the decision shows on its card, not as a step
    assert_safe(page)


def test_deny_after_a_reload_and_tell_the_agent_why(page, server, model, tmp_path):
    payload = "touch '<img src=x onerror=window.__xss=1>' <script>window.__xss=2</script>"
    model.enqueue(shell(payload), complete("Understood."))
    log_in(page, server)
    send(page, "make a file")
    expect(page.locator(PENDING)).to_be_visible()
    page.reload()
    expect(page.locator("#app[data-ready=true]")).to_be_attached()
    card = page.locator(PENDING)
    expect(card).to_have_count(1)  # the request survives the reload, once
    expect(card.locator(".card-head .path")).to_have_text(f"RUN_SHELL_CMD {payload}")  # as text, not as HTML
    card.locator(".approval-feedback").fill("write it under build/ <b>instead</b>")
    card.locator("button[data-decision=deny]").click()

    denied = page.locator(".card.approval[data-state=deny]")
    expect(denied.locator(".approval-outcome")).to_have_text(
        "Denied in the web chat. The agent was told: “write it under build/ <b>instead</b>”")
    expect(page.locator(".answer-task_completion")).to_contain_text("Understood.")
    assert "The user says: write it under build/ <b>instead</b>" in model.prompts[1]
    assert list(tmp_path.iterdir()) == []
    assert_safe(page)


def test_a_second_tab_sees_the_request_answers_it_and_the_first_sees_the_decision(context, server, model, tmp_path):
    release = threading.Event()
    model.enqueue(shell("touch one.txt"), shell("touch one.txt"), gate(release, complete("Both made.")))
    first = context.new_page()
    log_in(first, server)
    send(first, "make two files")
    expect(first.locator(PENDING)).to_be_visible()
    second = context.new_page()
    second.goto(first.url)
    expect(second.locator(PENDING)).to_be_visible()

    second.locator(f"{PENDING} button[data-decision=always]").click()
    for tab in (first, second):
        card = tab.locator(".card.approval").first
        expect(card).to_have_attribute("data-state", "allow")
        expect(card.locator(".approval-outcome")).to_have_text("Approved in the web chat, and for the rest of this run.")
        expect(card.locator(".approval-controls")).to_be_hidden()
    # "Always" covers the same command again: no second card.
    expect(first.locator(".step-shell .command")).to_have_text(["touch one.txt", "touch one.txt"])
    expect(first.locator(".card.approval")).to_have_count(1)
    badges = first.locator(".step-shell .badge.approved")  # the second ran under the earlier "Always", and says so
    expect(badges).to_have_count(1)
    expect(first.locator(".step-shell").nth(1).locator(".badge.approved")).to_have_text("approved: always")
    release.set()
    expect(second.locator(".answer-task_completion")).to_contain_text("Both made.")
    assert (tmp_path / "one.txt").exists()


def test_an_answer_that_lost_the_race_says_so(context, server, model, tmp_path):
    model.enqueue(shell("touch raced.txt"), complete("Done."))
    page = context.new_page()
    log_in(page, server)
    send(page, "make a file")
    card = page.locator(PENDING)
    expect(card).to_be_visible()
    uid = chat_uid(page)
    request_id = card.get_attribute("data-request-id")
    page.route(f"**/approvals/{request_id}", lambda route: (  # another tab's answer lands first
        server.app.extensions["anges"].runs.answers.give(uid, request_id, "deny", "from the other tab"),
        route.continue_()))
    card.locator("button[data-decision=allow]").click()

    settled = page.locator(".card.approval[data-state=deny]")
    expect(settled.locator(".approval-outcome")).to_have_text(
        "Denied in the web chat. The agent was told: “from the other tab”")
    assert [d["decision"] for d in decisions(server, uid)] == ["deny"] and not (tmp_path / "raced.txt").exists()


def test_stop_while_waiting_cancels_the_request_and_stops_the_run(page, server, model, tmp_path):
    model.enqueue(shell("touch never.txt"), complete("never reached"))
    log_in(page, server)
    send(page, "make a file")
    expect(page.locator(PENDING)).to_be_visible()
    page.click("#stop")
    cancelled = page.locator(".card.approval[data-state=cancelled]")
    expect(cancelled.locator(".approval-outcome")).to_have_text("Cancelled: the run stopped before an answer.")
    expect(page.locator(".step-interrupted")).to_contain_text("Stopped")
    expect(page.locator("#status-pill")).to_have_text("Interrupted")
    expect(page.locator("#working")).to_be_hidden()
    assert not (tmp_path / "never.txt").exists()
    assert [d["decision"] for d in decisions(server, chat_uid(page))] == ["cancelled"]


def test_an_edit_outside_the_workspace_shows_its_diff(page, server, model, tmp_path):
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (outside / "settings.ini").write_text("debug = false\n")
    edit = {"action_type": "EDIT_FILE", "directive_line": f"REPLACE_LINES {outside}/settings.ini 1-1",
            "content": "debug = true"}
    model.enqueue(reply(edit), complete("Turned debugging on."))
    log_in(page, server)
    send(page, "turn debugging on")
    card = page.locator(PENDING)
    expect(card.locator(".approval-reason")).to_contain_text("outside the writable paths")
    expect(card.locator("pre.diff .line.del")).to_have_text("-debug = false")
    expect(card.locator("pre.diff .line.add")).to_have_text("+debug = true")
    expect(card.locator("pre.diff .line.meta")).to_have_text([f"--- {outside}/settings.ini", f"+++ {outside}/settings.ini"])
    card.locator("button[data-decision=allow]").click()
    expect(page.locator(".answer-task_completion")).to_contain_text("Turned debugging on.")
    assert (outside / "settings.ini").read_text() == "debug = true\n"


def test_without_the_sandbox_every_command_asks_and_the_page_says_so(context, model, tmp_path):
    server = LiveServer(model, tmp_path, safety={"sandbox": "off"})
    try:
        page = context.new_page()
        model.enqueue(shell("echo unsandboxed"), complete("Printed."))
        log_in(page, server)
        expect(page.locator("#empty-sandbox")).to_contain_text("No sandbox: safety.sandbox is off")
        send(page, "print something")
        expect(page.locator(".sandbox-info")).to_have_text("No sandbox · approvals: ask")
        card = page.locator(PENDING)
        expect(card.locator(".approval-reason")).to_have_text(
            "the sandbox is off (safety.sandbox: off) [unsandboxed]")
        card.locator("button[data-decision=allow]").click()
        expect(page.locator(".step-shell .badge.warn")).to_have_text("no sandbox")
        expect(page.locator(".step-shell pre.output")).to_have_text("unsandboxed")
    finally:
        server.close()


@pytest.mark.sandbox
def test_a_command_asking_to_leave_the_sandbox_shows_why(page, server, model, tmp_path):
    escalate = "writes a cache outside the workspace"
    model.enqueue(reply({"action_type": "RUN_SHELL_CMD", "command": "echo outside", "escalate": escalate}),
                  complete("Ran it outside."))
    log_in(page, server)
    expect(page.locator(".sandbox-info")).to_have_attribute("data-sandboxed", "true")
    send(page, "run it outside")
    card = page.locator(PENDING)
    expect(card.locator(".card-head .badge.warn")).to_have_text("outside the sandbox")
    expect(card.locator(".approval-escalate")).to_have_text(
        f"If approved, this runs outside the sandbox. The agent says why: {escalate}")
    card.locator("button[data-decision=allow]").click()
    expect(page.locator(".card.approval[data-state=allow] .approval-escalate")).to_have_text(
        f"Approved: it runs outside the sandbox. The agent said why: {escalate}")
    expect(page.locator(".step-shell .badge.warn")).to_have_text("outside the sandbox")
    expect(page.locator(".answer-task_completion")).to_contain_text("Ran it outside.")


def test_a_card_shows_what_runs_whole_and_marked_before_it_offers_approve(page, server, model, tmp_path):
    filler = "\n".join(f": line {n}" for n in range(300))
    tucked = f"touch shown.txt\n{filler}\ntouch tucked-away.txt"  # 300 lines below the card's first lines
    unseen = "touch zero\u200bwidth.txt \u202eevil"
    model.enqueue(shell(tucked), shell(unseen), complete("Both ran."))
    log_in(page, server)
    send(page, "make two files")
    card = page.locator(PENDING)
    size = f"302 lines, {len(tucked):,} characters"
    expect(card.locator(".approval-size")).to_have_text(f"{size} — only part of it is shown")
    expect(card.locator("pre.output")).to_contain_text(" lines not shown …")
    expect(card.locator("button[data-decision=allow]")).to_be_hidden()  # not offered for what is out of sight
    expect(card.locator("button[data-decision=always]")).to_be_hidden()
    expect(card.locator("button[data-decision=deny]")).to_be_enabled()

    card.locator(".approval-open").click()
    expect(card.locator(".approval-size")).to_have_text(size)
    assert card.locator("pre.output").inner_text() == tucked  # all of it, on the page (the card does not scroll)
    box, pre = card.bounding_box(), card.locator("pre.output").bounding_box()
    assert pre["height"] > 302 * 10 and box["height"] >= pre["height"]
    card.locator("button[data-decision=allow]").click()

    marked = page.locator(PENDING)
    expect(marked.locator("pre.output")).to_have_text("touch zero<U+200B>width.txt <U+202E>evil")
    expect(marked.locator(".approval-size")).to_have_text(
        f"1 line, {len(unseen)} characters; hidden, marked: U+200B ZERO WIDTH SPACE, U+202E RIGHT-TO-LEFT OVERRIDE")
    marked.locator("button[data-decision=allow]").click()
    expect(page.locator(".answer-task_completion")).to_contain_text("Both ran.")
    assert sorted(path.name for path in tmp_path.iterdir() if path.suffix == ".txt") == [
        "shown.txt", "tucked-away.txt", "zero\u200bwidth.txt"]


def batch_run(store, batch_id, task, title):
    stream = EventStream(title=title)
    stream.update_settings({"batch_id": batch_id, "batch_task": task, "agent_type": "default"})
    stream.add_event(Event("new_request", content=title))
    stream.add_event(Event("task_completion", content=f"{task} done"))
    store.sync(stream)
    return stream.uid


def test_the_runs_of_a_batch_are_grouped_in_the_sidebar(page, server):
    runs = [batch_run(server.store, "nightly", f"t{n}", f"Task number {n}") for n in range(3)]
    batch_run(server.store, "weekly", "only", "The weekly task")
    plain = EventStream(title="A plain chat")
    server.store.sync(plain)
    log_in(page, server)

    nightly = page.locator(".batch-entry[data-batch=nightly]")
    expect(nightly.locator(".batch-name")).to_have_text("Batch nightly")
    expect(nightly.locator(".batch-count")).to_have_text("3 runs")
    expect(nightly.locator(".chat-link")).to_have_count(0)  # collapsed
    expect(page.locator(".batch-entry[data-batch=weekly] .batch-count")).to_have_text("1 run")
    expect(page.locator(".chat-link .chat-name", has_text="A plain chat")).to_be_visible()
    expect(page.locator(".chat-list > .chats > .chat-entry")).to_have_count(3)  # two batches and the plain chat

    nightly.locator(".tree-toggle").click()
    expect(nightly.locator(".chat-link .chat-task")).to_have_text(["t2", "t1", "t0"])
    nightly.locator(".chat-link", has_text="Task number 1").click()
    expect(page).to_have_url(f"{server.url}/chat/{runs[1]}")
    expect(page.locator("#status-batch")).to_have_text("batch nightly, task t1")
    expect(page.locator(".answer-task_completion")).to_contain_text("t1 done")

    page.fill("#search", "number 2")
    expect(page.locator(".chat-link")).to_have_count(1)
    expect(page.locator(".batch-entry[data-batch=weekly]")).to_have_count(0)


def test_a_trust_card_does_not_say_the_agent_gave_a_reason(page, server, model, tmp_path):
    (tmp_path / ".anges").mkdir()
    (tmp_path / ".anges" / "config.yaml").write_text("hooks:\n  - {event: after_action, command: echo ran >> hook.log}\n")
    model.enqueue(shell("true"), complete("Done."))
    log_in(page, server)
    send(page, "go")
    card = page.locator(PENDING)
    expect(card.locator(".approval-escalate")).to_have_text("If approved, this runs outside the sandbox.")
    card.locator("button[data-decision=deny]").click()
    expect(page.locator(".card.approval[data-state=deny] .approval-escalate")).to_have_text(
        "Not approved: it does not leave the sandbox.")
    expect(page.locator(".answer-task_completion")).to_contain_text("Done.")
    assert not (tmp_path / "hook.log").exists()
