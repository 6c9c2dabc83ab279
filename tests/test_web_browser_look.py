"""How the web chat looks and handles, in headless Chromium: dark mode, dialogs, titles, order, keys and touch."""

import pytest
from test_web_browser import (
    TRAP,
    WAIT,
    LiveServer,
    browser,  # noqa: F401  (the module's browser fixture)
    expect,
    log_in,
    reply,
    send,
    stored_chat,
)

from anges.models.scripted import ScriptedModel
from anges.store.events import Event, EventStream

pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("browser")]
ASK_TOUCH = {"action": "RUN_SHELL_CMD", "match": "re:^touch ", "decision": "ask", "reason": "touching needs a person"}

# For each element with text of its own on the screen: its colour, and the background it is drawn on (the
# backgrounds of it and its ancestors laid over each other, up to the first opaque one, over the page's).
COLOURS = """() => {
  const rgba = (text) => { const m = text.match(/[\\d.]+/g).map(Number); return [m[0], m[1], m[2], m.length > 3 ? m[3] : 1]; };
  const over = (top, below) => { const a = top[3]; return [0, 1, 2].map((i) => top[i] * a + below[i] * (1 - a)).concat(1); };
  const luminance = (c) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]); };
  const page = rgba(getComputedStyle(document.body).backgroundColor);
  const found = [];
  for (const node of document.querySelectorAll("body *")) {
    const own = [...node.childNodes].some((c) => c.nodeType === 3 && c.textContent.trim());
    if (!own || !node.getClientRects().length || node.closest("[hidden]")) continue;
    const style = getComputedStyle(node);
    if (style.visibility === "hidden" || Number(style.opacity) === 0) continue;
    const layers = [];
    for (let up = node; up && up !== document.documentElement; up = up.parentElement) {
      const bg = rgba(getComputedStyle(up).backgroundColor);
      if (bg[3] > 0) layers.push(bg);
      if (bg[3] === 1) break;
    }
    let background = page;
    for (const layer of layers.reverse()) background = over(layer, background);
    const text = over(rgba(style.color), background);
    const [hi, lo] = [luminance(text), luminance(background)].sort((a, b) => b - a);
    found.push({ what: `${node.tagName.toLowerCase()}.${node.className} "${node.textContent.trim().slice(0, 30)}"`,
                 contrast: (hi + 0.05) / (lo + 0.05), background: luminance(background) });
  }
  return { page: luminance(page), found };
}"""


def every_kind_of_step(tmp_path) -> EventStream:
    stream = EventStream(title="Every kind of step")
    stream.add_event(Event("new_request", content="Fix `greet/__init__.py` and tell me."))
    stream.add_event(Event("action", reasoning="Look at the **tests** with `pytest`, see [docs](https://x.example).",
                           data={"command": "pytest -q", "exit_code": 1, "stdout": "1 failed\n", "duration": 0.4}))
    stream.add_event(Event("edit_file", reasoning="Fix it.", data={
        "directive": "EDIT", "path": str(tmp_path / "greet.py"), "operation": "replace", "lines_added": 1,
        "lines_removed": 1, "diff": "--- a/greet.py\n+++ b/greet.py\n@@ -1 +1 @@\n-print('hi')\n+print('hello')\n"}))
    stream.add_event(Event("plan_updated", data={"plan": [{"step": "Read the tests", "status": "completed"},
                                                          {"step": "Fix greet", "status": "in_progress"},
                                                          {"step": "Run them again", "status": "pending"}]}))
    stream.add_event(Event("completion_held", content="The tests still fail.", data={"causes": ["pytest failed"]}))
    stream.add_event(Event("hook_ran", data={"hook": "ruff check", "hook_event": "after_action", "outcome": "failed",
                                             "effect": "blocked", "exit_code": 1, "duration": 0.2,
                                             "reason": "E501 line too long", "output": "greet.py:1: E501\n"}))
    stream.add_event(Event("agent_requested_help", content="Which greeting do you want?"))
    stream.add_event(Event("follow_up_request", content="hello"))
    stream.add_event(Event("agent_text_response", content="Changed it to *hello*."))
    stream.add_event(Event("task_completion", content="Done: `greet.py` says hello.\n\n> quoted\n\n| a | b |\n|---|---|\n| 1 | 2 |"))
    stream.add_event(Event("follow_up_request", content="and again"))
    stream.add_event(Event("task_interrupted", content="Stopped.", data={"reason": "interrupt"}))
    return stream


@pytest.mark.parametrize("scheme", ["dark", "light"])
def test_the_page_follows_the_systems_colour_scheme_with_readable_text_everywhere(browser, tmp_path, scheme):  # noqa: F811
    model = ScriptedModel()
    live = LiveServer(model, tmp_path, safety={"rules": [ASK_TOUCH]})
    context = browser.new_context(viewport={"width": 1280, "height": 1400}, color_scheme=scheme)
    context.set_default_timeout(WAIT)
    context.add_init_script(TRAP)
    page = context.new_page()
    try:
        stream = every_kind_of_step(tmp_path)
        live.store.save(stream)
        page.goto(live.url + "/login")
        looks = [page.evaluate(COLOURS)]
        log_in(page, live)
        page.goto(f"{live.url}/chat/{stream.uid}")
        expect(page.locator(".card.interrupted")).to_be_visible()
        expect(page.locator(".card.hook")).to_be_visible()
        expect(page.locator("pre.diff")).to_be_visible()
        expect(page.locator("#plan-panel")).to_be_visible()
        expect(page.locator(".held")).to_be_visible()
        looks.append(page.evaluate(COLOURS))
        page.click("#new-chat")
        model.enqueue(reply({"action_type": "RUN_SHELL_CMD", "command": "touch approved"}))
        send(page, "touch a file")
        expect(page.locator(".card.approval[data-state=pending]")).to_be_visible()
        looks.append(page.evaluate(COLOURS))
        page.click("#settings-open")
        expect(page.locator("#settings")).to_be_visible()
        looks.append(page.evaluate(COLOURS))
    finally:
        live.app.extensions["anges"].runs.stop_all(10)
        context.close()
        live.close()
    for look in looks:
        if scheme == "dark":
            assert look["page"] < 0.05, "a dark page"
            light = [f["what"] for f in look["found"] if f["background"] > 0.3]
            assert not light, f"text on light backgrounds in dark mode: {light}"
        else:
            assert look["page"] > 0.8
        unreadable = [(f["what"], round(f["contrast"], 2)) for f in look["found"] if f["contrast"] < 3.5]
        assert not unreadable, f"text too faint to read ({scheme}): {unreadable}"
        assert len(look["found"]) > 3


# Every control a finger may tap, with its size: buttons, summaries, the chats and their toggles.
SMALL_TARGETS = """() => [...document.querySelectorAll("#app button, #app summary, #app .chat-link, #app a.btn")]
  .filter((node) => node.getClientRects().length && !node.closest("[hidden]")
    && getComputedStyle(node).visibility !== "hidden" && getComputedStyle(node).display !== "none")
  .map((node) => [node, node.getBoundingClientRect()])
  .filter(([node, box]) => box.width < 44 || box.height < 44)
  .map(([node, box]) => `${node.tagName.toLowerCase()}.${node.className} ${Math.round(box.width)}x${Math.round(box.height)}`)"""


def test_on_a_phone_every_target_is_44_px_and_escape_closes_the_drawer(browser, live, tmp_path):  # noqa: F811
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    context.set_default_timeout(WAIT)
    page = context.new_page()
    try:
        parent = stored_chat(live.store, "A parent", children=2)
        steps = every_kind_of_step(tmp_path)
        live.store.save(steps)
        log_in(page, live)
        for uid in (parent, steps.uid):
            page.goto(f"{live.url}/chat/{uid}")
            expect(page.locator("#steps > li.step").first).to_be_visible()
            assert page.evaluate(SMALL_TARGETS) == [], "targets a finger can miss in the chat"
        page.tap("#menu")
        expect(page.locator(".chat-link.active")).to_be_in_viewport()
        assert page.locator("#chat-list .tree-toggle").count() == 1
        assert page.evaluate(SMALL_TARGETS) == [], "targets a finger can miss in the drawer"
        page.keyboard.press("Escape")
        expect(page.locator("#backdrop")).to_be_hidden()
        page.wait_for_function("() => !document.getElementById('app').classList.contains('drawer-open')")
        assert page.evaluate("document.activeElement.id") == "menu", "the focus goes back to the button that opened it"
    finally:
        context.close()


def chat_order(page):
    return page.locator("#chat-list .chat-link .chat-name").all_inner_texts()


@pytest.fixture
def live(tmp_path):
    server = LiveServer(ScriptedModel(), tmp_path)
    yield server
    server.close()


@pytest.fixture
def page(browser):  # noqa: F811
    context = browser.new_context(viewport={"width": 1280, "height": 820})
    context.set_default_timeout(WAIT)
    yield context.new_page()
    context.close()


def test_the_sidebar_keeps_its_order_while_chats_change(live, page):
    older, newer = (EventStream(title=title) for title in ("Older chat", "Newer chat"))
    for stream in (older, newer):
        stream.add_event(Event("new_request", content=stream.title))
        live.store.save(stream)
    log_in(page, live)
    expect(page.locator("#chat-list .chat-link")).to_have_count(2)
    assert chat_order(page) == ["Newer chat", "Older chat"]
    latest = EventStream(title="Latest chat")
    latest.add_event(Event("new_request", content="latest"))
    live.store.save(latest)
    older.add_event(Event("action", data={"command": "true", "exit_code": 0}))  # a step in the older chat,
    live.store.sync(older)  # which the server now lists first
    assert [info.title for info in live.store.list()][0] == "Older chat"
    page.evaluate("document.dispatchEvent(new Event('visibilitychange'))")  # the list is asked for again
    expect(page.locator("#chat-list .chat-link")).to_have_count(3)
    assert chat_order(page) == ["Latest chat", "Newer chat", "Older chat"], "a step moves no chat"


def test_tab_from_the_message_box_reaches_the_conversation_past_one_chat(live, page):
    uids = [stored_chat(live.store, f"Chat {n}") for n in range(12)]
    log_in(page, live)
    page.goto(f"{live.url}/chat/{uids[5]}")
    expect(page.locator("#chat-list .chat-link")).to_have_count(12)
    page.focus("#message")
    visited = []
    for _ in range(30):
        page.keyboard.press("Tab")
        visited.append(page.evaluate("""() => { const a = document.activeElement;
            return a.closest('#transcript') ? 'transcript' : a.classList.contains('chat-link') ? 'chat' : a.id || a.className; }"""))
        if visited[-1] == "transcript":
            break
    assert visited[-1] == "transcript" and visited.count("chat") == 1, visited
    assert "skip-link" in visited, "a skip link comes first"
    page.focus("#chat-list .chat-link.active")
    page.keyboard.press("ArrowDown")
    focused = page.evaluate("document.activeElement.dataset.uid")
    assert focused != uids[5] and page.evaluate("document.activeElement.tabIndex") == 0
    page.keyboard.press("Enter")
    expect(page).to_have_url(f"{live.url}/chat/{focused}")
    page.keyboard.press("Shift+Tab")  # back from the list to what comes before it, in one step
    assert page.evaluate("document.activeElement.id") == "search"
