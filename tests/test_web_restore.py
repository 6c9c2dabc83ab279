"""The web chat's "restore to before this step": the preview and the restore through Flask's test client, and the
control as a person uses it in headless Chromium."""

import pytest
from anges.web import create_app
from test_web import PASSWORD, complete, csrf_from, login, new_chat, reply, shell
from test_web_browser import (
    WAIT,
    LiveServer,
    browser,  # noqa: F401  (the module's browser fixture)
    expect,
    log_in,
    send,
    steps,
)

from anges.config.loading import load_config
from anges.models.scripted import ScriptedModel
from anges.store.event_store import EventStore


@pytest.fixture
def store():
    return EventStore()


@pytest.fixture
def model():
    return ScriptedModel()


@pytest.fixture
def app(store, model, tmp_path):
    config = load_config(overrides={"web": {"heartbeat_seconds": 0.2, "poll_seconds": 0.02}})
    return create_app(config, store, password=PASSWORD, model_factory=lambda name, cfg, agent_type: model,
                      default_dir=str(tmp_path), sse_lifetime=5)


@pytest.fixture
def auth(app):
    client = app.test_client()
    assert login(client).status_code == 302
    return client, {"X-CSRF-Token": csrf_from(client.get("/").get_data(as_text=True))}


def edit(directive, content):
    return reply({"action_type": "EDIT_FILE", "directive_line": directive, "content": content})


def test_preview_then_restore_puts_the_files_back_and_the_chat_records_it(auth, app, model, store, tmp_path):
    client, headers = auth
    (tmp_path / "a.txt").write_text("before\n")
    model.enqueue(edit("REPLACE_LINES a.txt 1-1", "after"), shell("echo new > b.txt"), complete())
    uid = new_chat(auth, app, "change a.txt", settings={"cmd_init_dir": str(tmp_path)})
    feed_steps = [e for e in store.load(uid).events_list]
    assert "checkpoint" in feed_steps[1].data

    preview = client.get(f"/api/chats/{uid}/restore?step=2", headers=headers)
    assert preview.status_code == 200, preview.json
    plan = preview.json
    assert plan["step"] == 2 and plan["steps"] == [2, 3] and plan["conflicts"] == []
    assert {f["path"]: f["status"] for f in plan["files"]} == {"a.txt": "modified", "b.txt": "deleted"}
    assert "-after\n+before" in plan["diff"] and plan["stat"] == "2 files changed, 1 insertion(+), 2 deletions(-)"
    assert (tmp_path / "a.txt").read_text() == "after\n"  # a preview changes nothing

    done = client.post(f"/api/chats/{uid}/restore", json={"step": 2, "token": plan["token"], "overwrite": False},
                       headers=headers)
    assert done.status_code == 200, done.json
    assert (tmp_path / "a.txt").read_text() == "before\n" and not (tmp_path / "b.txt").exists()
    last = store.load(uid).events_list[-1]
    assert last.type == "workspace_restored" and last.data["by"] == "web"


def test_a_restore_is_refused_for_others_changes_a_stale_preview_and_a_running_chat(auth, app, model, store,
                                                                                   tmp_path):
    client, headers = auth
    model.enqueue(shell("echo agent > f.txt"), complete())
    uid = new_chat(auth, app, "make f.txt", settings={"cmd_init_dir": str(tmp_path)})
    (tmp_path / "f.txt").write_text("edited by hand\n")
    plan = client.get(f"/api/chats/{uid}/restore", headers=headers).json
    assert plan["conflicts"] == [{"path": "f.txt", "why": "changed after the checkpoint by someone other than the agent"}]
    refused = client.post(f"/api/chats/{uid}/restore", json={"step": 2, "token": plan["token"], "overwrite": False},
                          headers=headers)
    assert refused.status_code == 409 and refused.json["conflicts"] == ["f.txt"]
    (tmp_path / "f.txt").write_text("edited again\n")
    stale = client.post(f"/api/chats/{uid}/restore", json={"step": 2, "token": plan["token"], "overwrite": True},
                        headers=headers)
    assert stale.status_code == 409 and "changed since" in stale.json["error"]
    assert (tmp_path / "f.txt").read_text() == "edited again\n"
    bad = client.post(f"/api/chats/{uid}/restore", json={"step": "2", "token": plan["token"]}, headers=headers)
    assert bad.status_code == 400
    unknown = client.get(f"/api/chats/{uid}/restore?step=1", headers=headers)
    assert unknown.status_code == 409 and "has no checkpoint" in unknown.json["error"]
    no_csrf = client.post(f"/api/chats/{uid}/restore", json={"step": 2, "token": plan["token"]})
    assert no_csrf.status_code in (400, 403)


def test_deleting_a_chat_removes_its_checkpoints(auth, app, model, anges_home, tmp_path):
    client, headers = auth
    model.enqueue(shell("echo x > x.txt"), complete())
    uid = new_chat(auth, app, "make x", settings={"cmd_init_dir": str(tmp_path)})
    assert (anges_home / "data" / "checkpoints" / uid).is_dir()
    assert client.delete(f"/api/chats/{uid}", headers=headers).status_code == 200
    assert not (anges_home / "data" / "checkpoints" / uid).exists()


# The checkbox of a label, and where the label's words begin.
CHECKBOX_AND_WORDS = """(id) => {
  const row = document.getElementById(id);
  const words = document.createRange();
  words.selectNodeContents([...row.childNodes].find((node) => node.nodeType === 3 && node.textContent.trim()));
  const first = [...words.getClientRects()].find((rect) => rect.width > 0);
  const box = row.querySelector("input[type=checkbox]").getBoundingClientRect();
  return [{ width: box.width, right: box.right, top: box.top }, { left: first.left, top: first.top }];
}"""


@pytest.fixture
def live(tmp_path):
    server = LiveServer(ScriptedModel(), tmp_path)
    yield server
    server.close()


@pytest.fixture
def page(browser, live):  # noqa: F811
    context = browser.new_context(viewport={"width": 1280, "height": 820})
    context.set_default_timeout(WAIT)
    page = context.new_page()
    yield page
    context.close()


@pytest.mark.browser
@pytest.mark.xdist_group("browser")  # one Chromium at a time
def test_restore_to_before_a_step_from_the_page(page, live, tmp_path):
    (tmp_path / "notes.md").write_text("keep me\n")
    live.app.extensions["anges"].runs.model_factory(None, None, "default").enqueue(shell("echo changed > notes.md && echo extra > extra.txt"), complete("Changed the notes."))
    log_in(page, live)
    send(page, "change the notes")
    expect(page.locator(".step-answer")).to_contain_text("Changed the notes.")
    expect(page.locator("#stop")).to_be_hidden()  # the run is over (while it runs, the page says to stop it first)
    shell_step = steps(page).filter(has=page.locator(".card.shell"))
    assert page.locator(".step-answer .step-restore").count() == 0  # an answer changes no file
    expect(shell_step.locator(".step-number")).to_have_text("#2")  # the number the dialog and the agent give it
    expect(steps(page).first.locator(".step-number")).to_have_text("#1")
    shell_step.locator(".step-restore").click()

    dialog = page.locator("#restore")
    expect(dialog).to_be_visible()
    expect(page.locator("#restore-summary")).to_contain_text("Back to before step 2")
    expect(page.locator("#restore-summary")).to_contain_text("2 files changed")
    expect(page.locator("#restore-diff .line.add")).to_contain_text(["+keep me"])
    expect(page.locator("#restore-overwrite-row")).to_be_hidden()
    assert (tmp_path / "notes.md").read_text() == "changed\n"
    page.click("#restore-confirm")

    expect(dialog).to_be_hidden()
    expect(page.locator("#notice")).to_contain_text("Files restored: 2 files changed")
    expect(page.locator(".step-restore").first).to_be_visible()
    expect(steps(page).last).to_contain_text("workspace restored")
    assert (tmp_path / "notes.md").read_text() == "keep me\n" and not (tmp_path / "extra.txt").exists()

    (tmp_path / "notes.md").write_text("mine\n")  # now someone else changes it: the page says so first
    steps(page).filter(has=page.locator(".card.shell")).locator(".step-restore").click()
    expect(page.locator("#restore-notes .conflict")).to_contain_text("notes.md: changed after the checkpoint")
    expect(page.locator("#restore-overwrite-row")).to_be_visible()
    box, words = page.evaluate(CHECKBOX_AND_WORDS, "restore-overwrite-row")
    assert box["width"] < 30 and 0 <= words["left"] - box["right"] < 16 and abs(words["top"] - box["top"]) < 16, \
        f"the checkbox sits beside the first words of its label: {box}, {words}"
    page.click("#restore-confirm")
    expect(page.locator("#restore-error")).to_contain_text("tick the box")
    assert (tmp_path / "notes.md").read_text() == "mine\n"
    page.click("#restore-cancel")
