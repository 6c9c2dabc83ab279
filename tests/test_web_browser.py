"""The web chat as a person uses it: the real app on 127.0.0.1, driven in headless Chromium by Playwright."""

import json
import os
import re
import threading
import time

import pytest
from optional_groups import chromium_path

from anges.config.loading import load_config
from anges.exceptions import ModelError, ModelSetupError
from anges.models.scripted import ScriptedModel
from anges.store.event_store import EventStore
from anges.store.events import Event, EventStream

try:
    from playwright import sync_api as playwright_api
except ImportError:  # the `browser` mark skips every test here, saying so
    playwright_api = None

pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("browser")]  # one Chromium at a time
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
               "--disable-component-update", "--no-first-run"]
PASSWORD = "browser-test-password"
WAIT = 30_000  # ms for anything the page must show: generous for a loaded machine (twelve runs start at once below)

# Recorded before any page script runs: a payload that executes sets __xss, a CSP refusal is counted.
TRAP = """
window.__xss = 0;
window.__csp = [];
document.addEventListener('securitypolicyviolation', e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));
"""


def reply(*actions, reasoning="Checking the working directory first."):
    return {"analysis": "", "reasoning": reasoning, "actions": list(actions)}


def shell(command, reasoning="Run it."):
    return reply({"action_type": "RUN_SHELL_CMD", "command": command}, reasoning=reasoning)


def complete(content, reasoning="Done."):
    return reply({"action_type": "TASK_COMPLETE", "content": content}, reasoning=reasoning)


def gate(event, then):
    def answer(prompt):
        assert event.wait(20), "test gate never opened"
        return json.dumps(then)

    return answer


class RoutedModel:
    """One scripted model per agent type, chosen by the role line of the prompt (for orchestrator runs)."""

    name = "routed"
    marks = {"orchestrator": "You are anges' orchestrator", "task_executor": "You are anges' task executor"}

    def __init__(self, **scripts):
        self.models = {kind: ScriptedModel(replies) for kind, replies in scripts.items()}

    def __call__(self, prompt, temperature=0.0):
        for kind, mark in self.marks.items():
            if mark in prompt:
                return self.models[kind](prompt, temperature)
        return self.models["orchestrator"](prompt, temperature)


class FeedCounter:
    """WSGI middleware that notes each live feed the app serves, and how many are open (until the server sees
    the browser close one: at its next write, a heartbeat at most a second later)."""

    def __init__(self, app):
        self.app = app
        self.urls: list[str] = []
        self.open = 0
        self.lock = threading.Lock()

    def __call__(self, environ, start_response):
        from werkzeug.wsgi import ClosingIterator

        path = environ.get("PATH_INFO", "")
        if path != "/api/feed" and not path.endswith("/events"):
            return self.app(environ, start_response)
        with self.lock:
            self.urls.append(f"{path}?{environ.get('QUERY_STRING', '')}")
            self.open += 1
        return ClosingIterator(self.app(environ, start_response), self._closed)

    def _closed(self):
        with self.lock:
            self.open -= 1


def watched_chats(url):
    """The chats a shared feed's URL follows."""
    from urllib.parse import parse_qs, urlsplit

    return [watch.split("~")[1] for watch in parse_qs(urlsplit(url).query).get("watch", [])]


class LiveServer:
    """The real app served by werkzeug's threaded server on 127.0.0.1 with a free (or the given) port."""

    def __init__(self, model, tmp_path, model_factory=None, password=PASSWORD, token=None, port=0, safety=None):
        from anges.web import create_app

        config = load_config(overrides={"web": {"heartbeat_seconds": 1, "poll_seconds": 0.05},
                                        **({"safety": safety} if safety else {})})
        self.store = EventStore()
        self.app = create_app(config, self.store, password=password, token=token, default_dir=str(tmp_path),
                              model_factory=model_factory or (lambda name, cfg, agent_type: model))
        self.start(port)

    def start(self, port=0):
        from werkzeug.serving import make_server

        self.feeds = FeedCounter(self.app)
        self.server = make_server("127.0.0.1", port, self.feeds, threaded=True)
        self.url = f"http://127.0.0.1:{self.server.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def browser():
    playwright_api.expect.set_options(timeout=WAIT)  # Playwright's own default is 5 s
    with playwright_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), args=LAUNCH_ARGS, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def model():
    return ScriptedModel()


@pytest.fixture
def server(model, tmp_path):
    live = LiveServer(model, tmp_path)
    yield live
    live.close()


@pytest.fixture
def page(browser, server):
    context = browser.new_context(viewport={"width": 1280, "height": 820})
    context.set_default_timeout(WAIT)
    page = context.new_page()
    page.add_init_script(TRAP)
    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.dialogs = dialogs
    yield page
    context.close()


def log_in(page, server):
    page.goto(server.url + "/")
    assert "/login" in page.url
    page.fill("#password", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("#app[data-ready=true]")).to_be_attached()  # the script has wired the page


def expect(locator):
    return playwright_api.expect(locator)


def send(page, text):
    page.fill("#message", text)
    page.press("#message", "Enter")


def steps(page):
    return page.locator("#steps > li.step")


def assert_safe(page):
    assert page.evaluate("window.__xss") == 0, "a payload executed"
    assert page.dialogs == [], f"a payload opened a dialog: {page.dialogs}"


# -- the tests -----------------------------------------------------------------------------------------------


def test_log_in_start_a_task_and_watch_the_steps_arrive(page, server, model):
    release = threading.Event()
    model.enqueue(shell("echo step-one"), gate(release, complete("Finished: **everything** worked.")))
    page.goto(server.url + "/")
    delay = server.app.extensions["anges"].guard.delay
    delay.clock = lambda: 1000.0  # time stands still while the page is slow: the next try is too soon
    page.fill("#password", "not the password")
    page.click("button[type=submit]")
    expect(page.locator("#login-error")).to_contain_text("Wrong password")
    page.fill("#password", PASSWORD)  # too soon: the next try waits a second, and the page says so
    page.click("button[type=submit]")
    expect(page.locator("#login-error")).to_have_text("Too many failed attempts. Try again in 1 second.")
    delay.clock = lambda: 1001.0  # a second later
    page.fill("#password", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("#app[data-ready=true]")).to_be_attached()
    page.fill("#message", "first line")
    page.press("#message", "Shift+Enter")  # a newline, not a send
    page.locator("#message").press_sequentially("second line")
    assert page.input_value("#message") == "first line\nsecond line"
    page.press("#message", "Enter")
    expect(page).to_have_url(re.compile(r"/chat/[A-Za-z0-9_-]+$"))
    expect(page.locator(".step-request .request-text")).to_have_text("first line\nsecond line")
    shell_step = page.locator(".step-shell")
    expect(shell_step.locator(".command")).to_have_text("echo step-one")
    expect(shell_step.locator("pre.output")).to_have_text("step-one")
    expect(shell_step.locator(".badge.ok")).to_have_text("exit 0")
    expect(page.locator("#status-pill")).to_have_text("Running")
    expect(page.locator("#working")).to_be_visible()
    expect(page.locator("#stop")).to_be_visible()
    # the sidebar lists the chat, running
    expect(page.locator(".chat-link.active .dot[data-status=running]")).to_be_visible()

    send(page, "a second message while it runs")
    expect(page.locator("#notice")).to_contain_text("already running")
    assert page.input_value("#message") == "a second message while it runs"  # kept for later

    release.set()
    answer = page.locator(".answer-task_completion")
    expect(answer).to_contain_text("Finished: everything worked.")
    expect(answer.locator("strong")).to_have_text("everything")
    expect(page.locator("#status-pill")).to_have_text("Completed")
    expect(page.locator("#working")).to_be_hidden()
    expect(page.locator("#stop")).to_be_hidden()
    expect(page.locator("#status-steps")).to_have_text("1 step")  # the command: the answer is not a step
    expect(steps(page)).to_have_count(3)
    assert_safe(page)
    assert page.evaluate("window.__csp") == []


def test_stop_a_running_command(page, server, model, tmp_path):
    model.enqueue(shell("touch started && sleep 30", reasoning="This takes a while."), complete("never reached"))
    log_in(page, server)
    send(page, "sleep for a long time")
    expect(page.locator("#status-pill")).to_have_text("Running")
    expect(page.locator("#stop")).to_be_visible()
    _wait_for(lambda: (tmp_path / "started").exists())  # the command is running now
    page.click("#stop")
    expect(page.locator(".step-shell .badge.bad")).to_have_text("killed")
    expect(page.locator(".step-interrupted .answer-label")).to_have_text("Stopped")
    expect(page.locator(".step-interrupted .interrupted-text")).to_have_text("The run was interrupted.")
    expect(page.locator("#status-pill")).to_have_text("Interrupted")
    expect(page.locator("#working")).to_be_hidden()
    expect(page.locator("#stop")).to_be_hidden()
    expect(page.locator("#notice")).to_be_hidden()  # "Stopping the run…" went with the run
    expect(page.locator("#app")).to_have_attribute("data-feed", "idle")  # nothing runs: no connection held
    events = server.store.load(page.url.rsplit("/", 1)[1]).events_list
    assert [e.type for e in events] == ["new_request", "action", "task_interrupted"]
    assert events[1].data["interrupted"] and events[2].data["reason"] == "interrupt"


def test_a_failed_run_reads_failed_not_interrupted(page, server, model):
    model.enqueue(ModelError("openai:x: gave up after 5 attempts; last: server error (500)"))
    log_in(page, server)
    send(page, "try it")
    expect(page.locator("#status-pill")).to_have_text("Failed")
    expect(page.locator(".step-interrupted .interrupted-text")).to_contain_text("server error (500)")
    expect(page.locator(".chat-link.active .dot")).to_have_attribute("title", "Failed")


def test_reload_mid_run_and_keep_following(page, server, model):
    first, second = threading.Event(), threading.Event()
    model.enqueue(shell("echo alpha"), gate(first, shell("echo beta")), gate(second, complete("Both printed.")))
    log_in(page, server)
    send(page, "print alpha then beta")
    expect(page.locator(".step-shell pre.output")).to_have_text("alpha")
    page.reload()
    expect(page.locator("#app[data-ready=true]")).to_be_attached()
    expect(page.locator(".step-shell pre.output")).to_have_text("alpha")  # exactly one: no duplicates
    expect(page.locator("#status-pill")).to_have_text("Running")
    first.set()
    expect(page.locator(".step-shell pre.output")).to_have_text(["alpha", "beta"])
    second.set()
    expect(page.locator(".answer-task_completion")).to_contain_text("Both printed.")
    expect(steps(page)).to_have_count(4)
    assert page.eval_on_selector_all("#steps > li.step", "els => els.map(e => +e.dataset.index)") == [0, 1, 2, 3]


def test_open_a_child_agent(browser, tmp_path):
    model = RoutedModel(
        orchestrator=[
            reply({"action_type": "CALL_CHILD_AGENT", "directive": "NEW_CHILD_AGENT TASK_EXECUTOR",
                   "agent_input": "Write notes.txt"}, reasoning="Delegate the writing."),
            complete("The child wrote notes.txt."),
        ],
        task_executor=[shell("echo hello > notes.txt && cat notes.txt"), complete("Wrote notes.txt.")],
    )
    live = LiveServer(model, tmp_path)
    context = browser.new_context(viewport={"width": 1280, "height": 820})
    context.set_default_timeout(WAIT)
    page = context.new_page()
    try:
        log_in(page, live)
        page.click("#settings-open")
        page.select_option("#set-agent-type", "orchestrator")
        page.fill("#set-model", "gtp-4")  # a new chat's settings are checked when saved, too
        page.click("#settings-save")
        expect(page.locator("#settings-error")).to_contain_text("unknown model 'gtp-4'. Valid names:")
        expect(page.locator("#settings")).to_be_visible()
        page.fill("#set-model", "")
        page.click("#settings-save")
        expect(page.locator("#settings")).to_be_hidden()
        send(page, "Make notes with a helper")
        expect(page.locator(".answer-task_completion").last).to_contain_text("The child wrote notes.txt.")
        tree = page.locator("details.child")
        expect(tree.locator(".step-shell pre.output")).to_have_text("hello")
        expect(tree.locator(".answer-task_completion")).to_contain_text("Wrote notes.txt.")
        expect(tree.locator(".pill")).to_have_text("Completed")
        expect(tree.locator(".child-name")).to_have_text("Write notes.txt")
        parent_uid = page.url.rsplit("/", 1)[1]
        watched = {chat for url in live.feeds.urls for chat in watched_chats(url)}
        assert watched == {parent_uid}, "the chat's feed carries its child agent: none of its own for the child"
        # collapsible
        tree.locator("summary").click()
        expect(tree.locator(".child-steps")).to_be_hidden()
        tree.locator("summary").click()
        expect(tree.locator(".child-steps")).to_be_visible()
        # nested in the sidebar under its parent
        nested = page.locator(".chats.children .chat-link")
        expect(nested).to_have_count(1)
        child_uid = nested.get_attribute("data-uid")
        assert live.store.load(child_uid).parent_event_stream_uids == [parent_uid]
        # open it
        tree.locator(".child-open").click()
        expect(page).to_have_url(re.compile(f"/chat/{child_uid}$"))
        expect(page.locator("#chat-title")).to_have_text("Write notes.txt")
        expect(page.locator(".step-request .step-label")).to_have_text("Task from the parent agent")
        expect(page.locator("#parent-link")).to_be_visible()
        page.click("#parent-link")
        expect(page).to_have_url(re.compile(f"/chat/{parent_uid}$"))
    finally:
        context.close()
        live.close()


def test_a_missing_model_is_reported_in_the_chat(browser, tmp_path):
    def no_model(name, config, agent_type):
        raise ModelSetupError("no model is configured and no credentials were found. Set OPENAI_API_KEY")

    live = LiveServer(None, tmp_path, model_factory=no_model)
    context = browser.new_context()
    context.set_default_timeout(WAIT)
    page = context.new_page()
    try:
        log_in(page, live)
        send(page, "hello?")
        expect(page.locator(".step-interrupted")).to_contain_text("Set OPENAI_API_KEY")
        expect(page.locator("#status-pill")).to_have_text("Failed")
        expect(page.locator("#working")).to_be_hidden()
    finally:
        context.close()
        live.close()


XSS_REPLIES = [
    reply({"action_type": "RUN_SHELL_CMD", "command": "echo '<img src=x onerror=window.__xss=1>'"},
          reasoning='<script>window.__xss=1</script> <img src=x onerror="window.__xss=1"> **reasoning**'),
    reply({"action_type": "EDIT_FILE", "directive_line": "NEW_FILE page.html",
           "content": "<script>window.__xss=1</script>\n<svg onload=\"window.__xss=1\"></svg>\n"},
          reasoning="[click me](javascript:window.__xss=1) and <a href=\"javascript:window.__xss=1\">this</a>"),
    complete(
        "Results:\n\n<script>window.__xss=1</script>\n\n<img src=x onerror=\"window.__xss=1\">\n\n"
        "[a link](javascript:window.__xss=1) [b](JAVASCRIPT:window.__xss=1) "
        "<a href=\"javascript:window.__xss=1\">c</a>\n\n"
        "<svg><script>window.__xss=1</script></svg> <svg onload=\"window.__xss=1\"/>\n\n"
        "<iframe src=\"javascript:window.__xss=1\"></iframe>\n\n"
        "![img](x \"t\") <details open ontoggle=\"window.__xss=1\">d</details>\n\n"
        "```html\n<script>window.__xss=1</script>\n```\n",
        reasoning="<math><mtext><table><mglyph><style><img src=x onerror=window.__xss=1>"),
]


def test_xss_payloads_in_model_replies_do_not_execute(page, server, model):
    model.enqueue(*XSS_REPLIES)
    log_in(page, server)
    send(page, '<img src=x onerror="window.__xss=1"> <script>window.__xss=1</script> title')
    answer = page.locator(".answer-task_completion")
    expect(answer).to_contain_text("Results:")
    expect(page.locator("#status-pill")).to_have_text("Completed")
    # the payloads are shown as text, not run
    expect(page.locator(".step-shell .command")).to_contain_text("<img src=x onerror=window.__xss=1>")
    expect(page.locator(".step-edit pre.diff")).to_contain_text("<script>window.__xss=1</script>")
    expect(answer.locator("pre code")).to_contain_text("<script>window.__xss=1</script>")
    expect(page.locator("#chat-title")).to_contain_text("<img src=x")
    # give anything that could fire (image errors, toggles, clicks) a chance
    for link in answer.locator("a").all():
        link.click(modifiers=["Alt"], no_wait_after=True)
    page.wait_for_timeout(300)
    dangerous = page.evaluate("""() => {
        const bad = [];
        for (const el of document.querySelectorAll('#steps *, #chat-list *, #chat-title')) {
            for (const attr of el.attributes) {
                if (/^on/i.test(attr.name)) bad.push(el.tagName + ' ' + attr.name);
                if (/^(href|src)$/i.test(attr.name) && /^\\s*javascript:/i.test(attr.value)) bad.push(attr.value);
            }
            if (['SCRIPT', 'SVG', 'IFRAME', 'MATH', 'STYLE'].includes(el.tagName.toUpperCase())) bad.push(el.tagName);
        }
        return bad;
    }""")
    assert dangerous == []
    page.reload()
    expect(page.locator(".answer-task_completion")).to_contain_text("Results:")
    page.wait_for_timeout(200)
    assert_safe(page)
    assert page.evaluate("window.__csp") == []  # nothing even tried to run


def test_phone_sized_viewport(browser, server, model):
    model.enqueue(shell("printf 'a fairly long line of output that must wrap on a phone screen %.0s' 1 2 3"),
                  complete("Done:\n\n```bash\necho a-long-command --with --many --flags --that --should --scroll\n```"))
    context = browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True,
                                  has_touch=True)
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.url)
    context.set_default_timeout(WAIT)
    page = context.new_page()
    try:
        log_in(page, server)
        sidebar = page.locator("#sidebar")
        expect(page.locator("#menu")).to_be_visible()
        assert sidebar.bounding_box()["x"] + sidebar.bounding_box()["width"] <= 1  # off screen
        page.fill("#message", "print a long line")
        page.press("#message", "Enter")  # no Shift key on a phone: Enter adds a line
        page.locator("#message").press_sequentially("and wrap it")
        assert page.input_value("#message") == "print a long line\nand wrap it"
        assert steps(page).count() == 0
        page.tap("#send")
        expect(page.locator(".answer-task_completion")).to_contain_text("Done")
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        for selector in ("#send", "#menu", "#more", "#message"):
            box = page.locator(selector).bounding_box()
            assert box["height"] >= 44 and box["x"] >= 0 and box["x"] + box["width"] <= 390, selector
        # the header is one row and one status line; the chat's actions open from a button, each 44 px high
        header = page.locator("#status-line").bounding_box()
        assert header["y"] + header["height"] <= 844 / 8, "the header takes an eighth of the screen at most"
        expect(page.locator("#settings-open")).to_be_hidden()
        page.tap("#more")
        for action in page.locator("#chat-actions .btn").all():
            box = action.bounding_box()
            assert box["height"] >= 44 and box["x"] >= 0 and box["x"] + box["width"] <= 390, action.inner_text()
        assert page.locator("#chat-actions .btn").all_inner_texts() == ["Rename", "Settings", "JSON", "Markdown",
                                                                          "Delete"]
        page.tap("#settings-open")
        expect(page.locator("#settings")).to_be_visible()
        expect(page.locator("#chat-actions")).to_be_hidden()
        page.tap("#settings-cancel")
        code = page.locator(".answer-task_completion pre").bounding_box()
        assert code["x"] >= 0 and code["x"] + code["width"] <= 390
        # code blocks have a copy button, visible without hover on a touch screen
        copy = page.locator(".answer-task_completion .codeblock .copy-btn")
        expect(copy).to_be_visible()
        copy.tap()
        expect(copy).to_have_text("Copied")
        assert page.evaluate("navigator.clipboard.readText()").startswith("echo a-long-command --with")
        font = page.eval_on_selector(".step-shell pre.output", "el => parseFloat(getComputedStyle(el).fontSize)")
        assert font >= 12
        # the drawer opens, lists the chat, and closes when a chat is picked
        page.tap("#menu")
        expect(page.locator(".chat-link.active")).to_be_in_viewport()
        page.locator(".chat-link.active").tap()
        page.wait_for_function("() => !document.getElementById('app').classList.contains('drawer-open')")
        page.tap("#menu")
        expect(page.locator("#backdrop")).to_be_visible()
        page.locator("#backdrop").tap(position={"x": 370, "y": 400})
        expect(page.locator("#backdrop")).to_be_hidden()
        if os.environ.get("ANGES_SCREENSHOT_PHONE"):
            page.screenshot(path=os.environ["ANGES_SCREENSHOT_PHONE"])
    finally:
        context.close()


def stored_chat(store, title, children=0):
    """A finished chat in the store whose run delegated to `children` child agents, each of which returned."""
    parent = EventStream(title=title, agent_type="orchestrator")
    parent.add_event(Event("new_request", content=f"{title}, please"))
    parent.add_event(Event("action", reasoning="Look around **first**.", data={"command": "ls", "exit_code": 0,
                                                                                "stdout": "a.txt\nb.txt\n"}))
    for n in range(children):
        child = EventStream(title=f"{title} helper {n}", parent_event_stream_uids=[parent.uid])
        child.add_event(Event("new_request_from_parent", content=f"part {n}"))
        child.add_event(Event("action", data={"command": f"echo part-{n}", "exit_code": 0, "stdout": f"part-{n}\n"}))
        child.add_event(Event("task_completion", content=f"Part {n} done."))
        store.sync(child)
        parent.add_event(Event("child_agent_running", data={"agent_id": child.uid, "starting_from": 0}))
        parent.add_event(Event("child_agent_task_completion", content=f"Part {n} done."))
    parent.add_event(Event("task_completion", content=f"{title}: all done."))
    store.sync(parent)
    return parent.uid


def test_ten_tabs_stay_usable_and_stop_works_in_the_last(browser, server, model, tmp_path):
    chats = [stored_chat(server.store, f"Chat {n}", children=n % 3) for n in range(9)]
    context = browser.new_context(viewport={"width": 1000, "height": 700})
    context.set_default_timeout(WAIT)
    try:
        first = context.new_page()
        log_in(first, server)
        tabs = [first] + [context.new_page() for _ in range(9)]
        for tab, uid in zip(tabs, chats):
            tab.goto(f"{server.url}/chat/{uid}")
            expect(tab.locator(".answer-task_completion").last).to_contain_text("all done.")
            expect(tab.locator("#app")).to_have_attribute("data-feed", "idle")  # finished: its feed closed
        assert tabs[2].locator("details.child .step-shell pre.output").all_inner_texts() == ["part-0", "part-1"]

        model.enqueue(shell("touch started && sleep 30", reasoning="This takes a while."))  # Stop ends it
        last = tabs[9]
        last.goto(server.url + "/")
        expect(last.locator("#app[data-ready=true]")).to_be_attached()
        send(last, "sleep for a long time")
        expect(last.locator("#status-pill")).to_have_text("Running")
        _wait_for(lambda: (tmp_path / "started").exists())
        last.click("#stop")
        expect(last.locator(".step-interrupted")).to_contain_text("Stopped")
        expect(last.locator("#status-pill")).to_have_text("Interrupted")

        # an idle tab picks up a new run: one sent from it, and one started from another tab
        model.enqueue(complete("Follow-up answered."), complete("Answered from elsewhere."))
        send(tabs[0], "one more thing")
        expect(tabs[0].locator(".answer-task_completion").last).to_contain_text("Follow-up answered.")
        tabs[1].goto(f"{server.url}/chat/{chats[0]}")
        send(tabs[1], "and another")
        expect(tabs[0].locator(".answer-task_completion").last).to_contain_text("Answered from elsewhere.",
                                                                                 timeout=WAIT)
    finally:
        context.close()


def test_a_2000_step_chat_opens_whole_and_at_its_end(page, server):
    """How fast it opens is measured by benchmarks/web_feed.py; here: every step, in order, scrolled to the end."""
    stream = EventStream(title="A long chat")
    stream.add_event(Event("new_request", content="Do two thousand things."))
    for n in range(1, 2000):
        if n % 2:
            stream.add_event(Event("action", reasoning=f"Step **{n}**: list `dir{n}`.",
                                   data={"command": f"ls dir{n}", "exit_code": 0, "duration": 0.1,
                                         "stdout": "".join(f"file{k}.txt\n" for k in range(8))}))
        else:
            stream.add_event(Event("agent_text_response", content=f"Checked *{n}* of them; [notes](https://x.example)."))
    server.store.sync(stream)
    log_in(page, server)
    page.goto(f"{server.url}/chat/{stream.uid}")
    page.wait_for_function("() => document.querySelectorAll('#steps > li.step').length === 2000", polling="raf")
    assert page.evaluate("(() => { const box = document.getElementById('transcript');"
                         " return box.scrollHeight - box.scrollTop - box.clientHeight; })()") < 2, "not at the end"
    expect(page.locator("#steps > li.step").last.locator(".command")).to_have_text("ls dir1999")
    expect(page.locator("#steps > li.step").nth(1998)).to_contain_text("Checked 1998 of them")


def test_without_a_password_the_printed_address_opens_the_chat_and_nothing_else_does(browser, model, tmp_path):
    live = LiveServer(model, tmp_path, password="")
    token = live.app.extensions["anges"].guard.token
    context = browser.new_context()
    context.set_default_timeout(WAIT)
    other = browser.new_context()  # another profile (another local user) without the token
    try:
        stranger = other.new_page()
        stranger.goto(live.url + "/")
        refusal = stranger.locator("main")
        expect(refusal).to_contain_text("needs the secret token that `anges ui` printed")
        expect(refusal).to_contain_text(f"http://127.0.0.1:{live.server.port}/?token=...")  # the real port
        expect(refusal.locator("a")).to_have_count(0)  # no "Back to the chats" leading here again
        for n in range(30):  # a neighbour's guesses do not lock the owner out
            assert other.request.get(f"{live.url}/?token=guess{n:02d}-{token[:20]}").status == 403
        page = context.new_page()
        page.goto(f"{live.url}/?token={token}")
        expect(page).to_have_url(live.url + "/")  # the token is gone from the address bar
        expect(page.locator("#app[data-ready=true]")).to_be_attached()
        model.enqueue(complete("Hello from the token session."))
        send(page, "hello")
        expect(page.locator(".answer-task_completion")).to_contain_text("Hello from the token session.")
        expect(page.locator(".sidebar-foot")).to_have_count(0)  # no password, so no log-out button
        stranger.goto(page.url)
        expect(stranger.locator("main")).to_contain_text("needs the secret token")
    finally:
        other.close()
        context.close()
        live.close()


def test_a_browser_that_logged_in_before_is_not_slowed_by_a_neighbours_guesses(browser, model, tmp_path):
    live = LiveServer(model, tmp_path)
    context = browser.new_context()
    context.set_default_timeout(WAIT)
    other = browser.new_context()
    try:
        owner = context.new_page()
        log_in(owner, live)
        owner.click(".sidebar-foot button")
        expect(owner).to_have_url(re.compile("/login"))
        live.app.extensions["anges"].guard.delay.clock = lambda: 1000.0  # time stands still: no wait ever ends
        guesser = other.new_page()
        guesser.goto(live.url + "/login")
        guesser.fill("#password", "not it either")
        guesser.click("button[type=submit]")
        expect(guesser.locator("#login-error")).to_contain_text("Wrong password")
        for guess in ("and not this", PASSWORD):  # not even the right password is checked while it waits
            guesser.fill("#password", guess)
            guesser.click("button[type=submit]")
            expect(guesser.locator("#login-error")).to_have_text("Too many failed attempts. Try again in 1 second.")
        owner.fill("#password", PASSWORD)
        owner.click("button[type=submit]")
        expect(owner.locator("#app[data-ready=true]")).to_be_attached()
    finally:
        other.close()
        context.close()
        live.close()


def test_the_page_says_when_the_server_is_gone_and_recovers(browser, model, tmp_path):
    live = LiveServer(model, tmp_path)
    context = browser.new_context()
    context.set_default_timeout(WAIT)
    page = context.new_page()
    try:
        log_in(page, live)
        release = threading.Event()
        model.enqueue(gate(release, complete("Finished after the restart.")))
        send(page, "wait a little")
        expect(page.locator("#status-pill")).to_have_text("Running")
        port = live.server.port
        live.close()
        expect(page.locator("#offline")).to_be_visible()
        expect(page.locator("#offline")).to_contain_text("Disconnected from the server")
        # the run may have ended with the server: the status line says nothing it cannot know
        expect(page.locator("#status-pill")).to_have_text("Disconnected")
        expect(page.locator("#stop")).to_be_hidden()
        expect(page.locator("#working")).to_be_hidden()
        live.start(port)
        release.set()
        # the page retries with a growing delay (up to 10 s): it may be waiting out one when the server is back
        expect(page.locator(".answer-task_completion")).to_contain_text("Finished after the restart.", timeout=25_000)
        expect(page.locator("#offline")).to_be_hidden()
        expect(page.locator("#status-pill")).to_have_text("Completed")
    finally:
        context.close()
        live.close()


def test_a_hidden_tab_keeps_following_and_shows_each_step_once(page, server, model):
    release = threading.Event()
    model.enqueue(shell("echo before"), gate(release, complete("Done while hidden.")))
    log_in(page, server)
    send(page, "two steps")
    expect(page.locator(".step-shell pre.output")).to_have_text("before")
    expect(page.locator("#app")).to_have_attribute("data-feed", "open")
    page.evaluate(HIDE)
    release.set()
    expect(page.locator(".answer-task_completion")).to_contain_text("Done while hidden.")  # drawn while hidden
    expect(page.locator("#app")).to_have_attribute("data-feed", "idle")
    page.evaluate(SHOW)
    page.wait_for_timeout(300)
    assert page.eval_on_selector_all("#steps > li.step", "els => els.map(e => +e.dataset.index)") == [0, 1, 2]


class JobModel:
    """A model for many chats at once, told apart by their request ("job number N"): each runs a command, then
    waits for its gate before it answers. A chat without a job number is answered at once."""

    def __init__(self, count):
        self.gates = [threading.Event() for _ in range(count)]

    def __call__(self, prompt, temperature=0.0):
        job = re.search(r"job number (\d+)", prompt)
        if job is None:
            return json.dumps(complete("Answered at once."))
        n = int(job.group(1))
        if f"[started-{n}]" not in prompt:
            return json.dumps(shell(f"echo '[started-{n}]'"))
        assert self.gates[n].wait(30), "test gate never opened"
        return json.dumps(complete(f"Job {n} is done."))


@pytest.mark.parametrize("shared_by", ["worker", "leader"])
def test_twelve_pages_of_running_chats_all_stay_live_in_one_browser(browser, tmp_path, shared_by):
    model = JobModel(12)
    live = LiveServer(model, tmp_path)
    runs = live.app.extensions["anges"].runs
    chats = []
    for n in range(12):
        stream = EventStream(title=f"Job {n}")
        live.store.sync(stream)
        runs.start(stream.uid, f"job number {n}")
        chats.append(stream.uid)
    context = browser.new_context(viewport={"width": 1000, "height": 700})
    context.set_default_timeout(WAIT)
    if shared_by == "leader":  # as on Chrome for Android: one page leads over a BroadcastChannel
        context.add_init_script("delete window.SharedWorker;")
    try:
        pages = [context.new_page()]
        log_in(pages[0], live)
        pages += [context.new_page() for _ in range(11)]
        for n, (page, uid) in enumerate(zip(pages, chats)):
            page.goto(f"{live.url}/chat/{uid}")
            expect(page.locator(".step-shell pre.output")).to_have_text(f"[started-{n}]")
            expect(page.locator("#status-pill")).to_have_text("Running")
        roles = sorted(page.locator("#app").get_attribute("data-feed-hub") for page in pages)
        assert roles == (["worker"] * 12 if shared_by == "worker" else ["follower"] * 11 + ["leader"])
        _wait_for(lambda: live.feeds.open == 1)  # the server sees one connection for the twelve pages
        if shared_by == "leader":  # the leading page goes: another leads, and no page misses a step
            leader = next(page for page in pages if page.locator("#app").get_attribute("data-feed-hub") == "leader")
            model.gates[pages.index(leader)].set()
            leader.close()
            pages.remove(leader)
            _wait_for(lambda: [p.locator("#app").get_attribute("data-feed-hub") for p in pages].count("leader") == 1)
        for gate_ in model.gates:
            gate_.set()
        for page in pages:
            n = chats.index(page.url.rsplit("/", 1)[1])
            expect(page.locator(".answer-task_completion")).to_contain_text(f"Job {n} is done.")
            expect(page.locator("#status-pill")).to_have_text("Completed")
            assert page.eval_on_selector_all("#steps > li.step", "els => els.map(e => +e.dataset.index)") == [0, 1, 2]
        # a thirteenth page loads and runs a chat of its own
        extra = context.new_page()
        extra.goto(live.url + "/")
        expect(extra.locator("#app[data-ready=true]")).to_be_attached()
        send(extra, "hello from page thirteen")
        expect(extra.locator(".answer-task_completion")).to_contain_text("Answered at once.")
    finally:
        context.close()
        live.close()


# What a browser does when a tab goes to the background, and back (headless Chromium keeps every tab visible).
HIDE = """() => {
    Object.defineProperty(document, 'hidden', {value: true, configurable: true});
    Object.defineProperty(document, 'visibilityState', {value: 'hidden', configurable: true});
    document.dispatchEvent(new Event('visibilitychange'));
}"""
SHOW = """() => {
    delete document.hidden;
    delete document.visibilityState;
    document.dispatchEvent(new Event('visibilitychange'));
}"""


def _wait_for(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_a_streaming_reply_grows_live_as_text_before_its_step_arrives(browser, openai_server, tmp_path, monkeypatch):
    from wire_servers import TEST_KEY

    from anges.config.types import ModelPreset, ModelSettings
    from anges.models.openai_model import OpenAIModel

    monkeypatch.setenv("OPENAI_API_KEY", TEST_KEY)
    analysis = "<img src=x onerror=window.__xss=1> Reading the folder before anything else."
    text = json.dumps(shell("ls", reasoning="Then count the files and answer.") | {"analysis": analysis})
    cut = text.index("Reading the folder") + len("Reading the")
    openai_server.enqueue_text(text, chunks=[text[:cut], text[cut:]], gap=4)  # the server waits in the middle
    openai_server.enqueue_text(json.dumps(complete("One file.")))
    model = OpenAIModel(ModelPreset("openai", "gpt-test", openai_server.base_url, "OPENAI_API_KEY"),
                        ModelSettings(request_timeout=30))
    server = LiveServer(model, tmp_path)
    context = browser.new_context(viewport={"width": 1280, "height": 820})
    context.set_default_timeout(WAIT)
    page = context.new_page()
    page.add_init_script(TRAP)
    page.dialogs = []
    try:
        log_in(page, server)
        send(page, "how many files?")
        live = page.locator("#steps > li.step-live .live-text")
        expect(live).to_have_text("<img src=x onerror=window.__xss=1> Reading the")  # the first piece, as text
        assert page.locator(".step-shell").count() == 0, "the step has not arrived yet"
        assert page.locator("#steps img").count() == 0
        expect(page.locator(".step-shell .command")).to_have_text("ls", timeout=15_000)
        expect(page.locator("#steps > li.step-live")).to_have_count(0)  # the step took its place
        expect(page.locator(".step-shell .reasoning")).to_have_text("Then count the files and answer.")
        expect(page.locator(".answer-task_completion")).to_contain_text("One file.")
        assert_safe(page)
    finally:
        context.close()
        server.close()


def test_a_running_commands_output_shows_live_as_text_until_its_step_arrives(browser, tmp_path):
    # computed output, so the page cannot find it in the command; markup in it must stay text
    command = ("printf '\\033[1m<b>stage</b> %s\\033[0m\\n' $((6*7)); printf ' 10 pct\\r %s pct\\n' $((25*4)); "
               "while [ ! -e go ]; do sleep 0.05; done; echo linked-$((6*7))")
    server = LiveServer(ScriptedModel([shell(command), complete("Built.")]), tmp_path)
    context = browser.new_context(viewport={"width": 1280, "height": 820})
    context.set_default_timeout(WAIT)
    page = context.new_page()
    page.add_init_script(TRAP)
    page.dialogs = []
    try:
        log_in(page, server)
        send(page, "build it")
        output = page.locator("#steps > li.step-live .live-output")
        expect(output).to_have_text("<b>stage</b> 42\n 100 pct\n")  # as a terminal leaves it, and as text
        assert page.locator("#steps b").count() == 0 and page.locator(".step-shell").count() == 0
        (tmp_path / "go").write_text("")
        expect(page.locator(".step-shell .output")).to_contain_text("linked-42")
        expect(page.locator("#steps > li.step-live")).to_have_count(0)
        assert_safe(page)
    finally:
        context.close()
        server.close()


def test_the_answer_grows_as_it_streams_and_its_step_takes_its_place(browser, openai_server, tmp_path, monkeypatch):
    from wire_servers import TEST_KEY

    from anges.config import ModelPreset, ModelSettings
    from anges.models.openai_model import OpenAIModel

    monkeypatch.setenv("OPENAI_API_KEY", TEST_KEY)
    answer = "The folder holds **three** files: a.txt, b.txt and c.txt. <b>Nothing</b> else is there."
    text = json.dumps(complete(answer, reasoning="Counted them."))
    first, second = text.index("holds") + len("holds"), text.index("files:") + len("files:")
    openai_server.enqueue_text(text, chunks=[text[:first], text[first:second], text[second:]], gap=2)
    model = OpenAIModel(ModelPreset("openai", "gpt-test", openai_server.base_url, "OPENAI_API_KEY"),
                        ModelSettings(request_timeout=30))
    server = LiveServer(model, tmp_path)
    context = browser.new_context(viewport={"width": 1280, "height": 820})
    context.set_default_timeout(WAIT)
    page = context.new_page()
    page.add_init_script(TRAP)
    page.dialogs = []
    try:
        log_in(page, server)
        send(page, "how many files?")
        growing = page.locator("#steps > li.step-live .live-answer")
        expect(growing.locator(".live-answer-text")).to_have_text("The folder holds")
        expect(growing).to_have_attribute("data-type", "TASK_COMPLETE")
        expect(growing.locator(".answer-label")).to_have_text("Task complete")
        expect(page.locator("#steps > li.step-live .live-text")).to_have_text("Counted them.")
        expect(growing.locator(".live-answer-text")).to_have_text("The folder holds **three** files:")
        assert page.locator(".answer-task_completion").count() == 0, "the step has not arrived yet"
        final = page.locator(".answer-task_completion")
        expect(final).to_contain_text("three files: a.txt, b.txt and c.txt. <b>Nothing</b> else is there.")
        expect(final.locator("strong")).to_have_text("three")  # the step, rendered, took its place
        expect(page.locator("#steps > li.step-live")).to_have_count(0)
        assert page.locator("#steps b").count() == 0
        assert_safe(page)
    finally:
        context.close()
        server.close()


def test_a_web_api_call_shows_its_request_status_and_body_as_text(page, server):
    from anges.actions.api import _recorded

    stream = EventStream(title="Calls")
    stream.add_event(Event("new_request", content="Look the pet up."))
    body = json.dumps({"name": "<img src=x onerror=window.__xss=1>", "tag": "dog"}, indent=2)
    stream.add_event(_recorded({"action_type": "CALL_API", "api": "pets", "operation": "getPet", "method": "GET",
                                "url": "https://pets.example/v1/pets/1", "status": 200, "reason": "OK",
                                "duration": 0.21, "headers": {"content-type": "application/json"},
                                "content_type": "application/json", "body_bytes": len(body), "body": body,
                                "body_lines": 4, "body_path": "/tmp/anges-run-1/anges-api-x.json"}))
    stream.add_event(_recorded({"action_type": "CALL_API", "api": "pets", "operation": "createPet",
                                "error": "invalid", "message": "the call does not match the operation's schema",
                                "problems": ["body.name: 3 is not of type 'string'"]}))
    server.store.sync(stream)
    log_in(page, server)
    page.goto(f"{server.url}/chat/{stream.uid}")
    expect(page.locator(".step-api")).to_have_count(2)
    sent, refused = page.locator(".step-api").all()
    expect(sent.locator(".command")).to_have_text("GET https://pets.example/v1/pets/1")
    expect(sent.locator(".badge.ok")).to_have_text("200 OK")
    expect(sent.locator("pre.output")).to_contain_text('"name": "<img src=x onerror=window.__xss=1>"')
    expect(sent).to_contain_text("Whole body: /tmp/anges-run-1/anges-api-x.json")
    expect(refused.locator(".command")).to_have_text("pets.createPet")
    expect(refused.locator(".badge.bad")).to_have_text("not sent (invalid)")
    expect(refused.locator("pre.output")).to_have_text("body.name: 3 is not of type 'string'")
    assert_safe(page)
