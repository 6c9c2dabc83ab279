"""Only a deliberate act answers an approval card, in headless Chromium: a double-click whose second click lands on
the card that appears under the pointer, clicks in a burst, a tap or a key before the card could be read; a
200-line command and one with 80 blank lines keep the card's head one line and "Needs approval" in sight. A person
who waits and then clicks, taps or presses Enter on the button approves.

The pauses here are the person's (the attack is in their timing), not waits for a state."""

import threading

import pytest
from test_web_browser import (
    TRAP,
    WAIT,
    browser,  # noqa: F401  (the module's browser fixture)
    complete,
    expect,
    gate,
    log_in,
    send,
    shell,
)
from test_web_browser_approvals import PENDING, chat_uid, decisions, model, server  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.packaged_safety, pytest.mark.xdist_group("browser")]
TRANSCRIPT = "document.getElementById('transcript')"


def make_page(browser, **options):  # noqa: F811
    context = browser.new_context(viewport={"width": 1280, "height": 820}, **options)
    context.set_default_timeout(WAIT)
    context.add_init_script(TRAP)
    return context, context.new_page()


@pytest.fixture
def page(browser):  # noqa: F811
    context, page = make_page(browser)
    yield page
    context.close()


def warm_up(model, steps=25):  # noqa: F811
    """Steps that need no approval, enough to fill the screen: later cards appear at its bottom edge."""
    for number in range(steps):
        model.enqueue(shell(f"echo warming up {number}", reasoning=f"Step {number} of the warm-up."))


def centre(locator):
    box = locator.bounding_box()
    return box["x"] + box["width"] / 2, box["y"] + box["height"] / 2


def under(page, point):
    """What the pointer at `point` is over: the decision of a pending card's button and that card's command."""
    return page.evaluate("""([x, y]) => {
        const button = document.elementFromPoint(x, y)?.closest('button[data-decision]');
        const card = button?.closest('.card.approval[data-state=pending]');
        return card ? [button.dataset.decision, card.querySelector('pre').textContent] : null;
    }""", list(point))


def test_a_double_click_and_a_burst_of_clicks_never_approve_the_card_that_appears_under_the_pointer(
        page, server, model, tmp_path):  # noqa: F811
    (tmp_path / "precious.txt").write_text("keep me")
    warm_up(model)
    model.enqueue(shell("touch one.txt"), shell("touch two.txt && rm -f precious.txt"), complete("Done."))
    log_in(page, server)
    send(page, "warm up, then make the files")
    first = page.locator(PENDING).filter(has_text="touch one.txt")
    approve = first.locator("button[data-decision=allow]")
    expect(approve).to_be_enabled(timeout=120_000)  # after 25 real steps (slow on a busy machine); the person read it
    assert page.evaluate(f"{TRANSCRIPT}.scrollHeight > 2 * {TRANSCRIPT}.clientHeight"), "the chat fills the screen"
    point = centre(approve)

    page.mouse.click(*point)  # the first click of a double-click approves the first card, as meant
    page.wait_for_function("([x, y]) => document.elementFromPoint(x, y)?.closest('.card.approval[data-state=pending]')"
                           "?.textContent.includes('precious')", arg=list(point), polling="raf")
    assert under(page, point) == ["allow", "touch two.txt && rm -f precious.txt"], "Approve is under the pointer"
    page.mouse.click(*point)  # its second click
    second = page.locator(".card.approval").filter(has_text="precious")
    for _ in range(8):  # then a burst: a click every 0.2 s, on past the card's read time
        page.wait_for_timeout(200)
        page.mouse.click(*point)
    expect(second).to_have_attribute("data-state", "pending")
    expect(second).to_have_attribute("data-ready", "true")  # read by now, yet none of those clicks counted
    assert (tmp_path / "precious.txt").exists() and not (tmp_path / "two.txt").exists()
    assert [d["subject"] for d in decisions(server, chat_uid(page))] == ["touch one.txt"]

    page.wait_for_timeout(600)  # the person stops, reads, and clicks once
    assert under(page, point) == ["allow", "touch two.txt && rm -f precious.txt"]
    page.mouse.click(*point)
    expect(second).to_have_attribute("data-state", "allow")
    expect(page.locator(".answer-task_completion")).to_contain_text("Done.")
    assert not (tmp_path / "precious.txt").exists() and (tmp_path / "two.txt").exists()


def test_a_press_begun_before_the_card_and_a_tap_or_a_key_too_soon_do_not_answer_it(browser, server, model, tmp_path):  # noqa: F811
    context, page = make_page(browser, has_touch=True)
    try:
        release = threading.Event()
        model.enqueue(gate(release, shell("touch tapped.txt")), shell("touch keyed.txt"), complete("Done."))
        log_in(page, server)
        page.fill("#message", "make the files")
        page.click("#send")  # on a touch screen Enter is a new line
        expect(page.locator("#working")).to_be_visible()
        page.mouse.move(640, 700)
        page.mouse.down()  # held from before the card was there
        release.set()
        card = page.locator(".card.approval").filter(has_text="tapped")
        approve = card.locator("button[data-decision=allow]")
        expect(approve).to_be_attached()
        page.touchscreen.tap(*centre(approve))  # as soon as it shows
        expect(card).to_have_attribute("data-ready", "true")
        page.mouse.move(*centre(approve))
        page.mouse.up()  # released on the button, once it works
        page.wait_for_timeout(300)
        expect(card).to_have_attribute("data-state", "pending")
        assert not (tmp_path / "tapped.txt").exists()
        page.wait_for_timeout(600)
        page.touchscreen.tap(*centre(approve))  # a tap after reading it approves
        expect(card).to_have_attribute("data-state", "allow")

        card = page.locator(".card.approval").filter(has_text="keyed")
        approve = card.locator("button[data-decision=allow]")
        expect(approve).to_be_attached()
        page.keyboard.press("Tab")
        page.keyboard.press("Enter")  # keys before it can be read reach no button: it is disabled
        expect(card).to_have_attribute("data-ready", "true")
        assert card.get_attribute("data-state") == "pending" and not (tmp_path / "keyed.txt").exists()
        approve.focus()
        page.keyboard.press("Enter")  # on the button, once it works: approves
        expect(card).to_have_attribute("data-state", "allow")
        expect(page.locator(".answer-task_completion")).to_contain_text("Done.")
        assert [d["by"] for d in decisions(server, chat_uid(page))] == ["web", "web"]
    finally:
        context.close()


def test_a_long_command_and_one_with_80_blank_lines_keep_the_head_one_line_and_the_label_in_sight(
        page, server, model, tmp_path):  # noqa: F811
    long = "touch long.txt\n" + "\n".join(f"echo line {number} >> long.txt" for number in range(199))
    gapped = "touch gapped.txt" + "\n" * 81 + "rm -f precious.txt"
    model.enqueue(shell(long), shell(gapped), complete("Done."))
    log_in(page, server)
    send(page, "two long ones")

    card = page.locator(PENDING).filter(has_text="touch long.txt")
    head = card.locator(".card-head")
    title = head.locator(".path").inner_text()
    assert title.startswith("RUN_SHELL_CMD touch long.txt echo line 0 >> long.txt") and title.endswith("… (200 lines)")
    assert len(title) < 160 and "line 198" not in title
    assert head.bounding_box()["height"] < 60, "the head is one line, whatever the command"
    card.locator(".approval-open").click()
    allow = card.locator("button[data-decision=allow]")
    allow.scroll_into_view_if_needed()
    label_in_sight(page, card)  # while the buttons, at the end of 200 lines, are on the screen
    allow.click()

    card = page.locator(PENDING).filter(has_text="gapped")
    expect(card.locator("pre.output")).to_have_text("touch gapped.txt\n… 80 blank lines …\nrm -f precious.txt")
    expect(card.locator(".card-head .path")).to_have_text("RUN_SHELL_CMD touch gapped.txt rm -f precious.txt "
                                                          "(82 lines)")
    card.locator("button[data-decision=deny]").scroll_into_view_if_needed()
    label_in_sight(page, card)
    card.locator("button[data-decision=deny]").click()
    expect(page.locator(".answer-task_completion")).to_contain_text("Done.")
    assert not (tmp_path / "gapped.txt").exists()


def label_in_sight(page, card):
    label, view = card.locator(".approval-label").bounding_box(), page.locator("#transcript").bounding_box()
    assert card.locator(".approval-label").inner_text().lower() == "needs approval"
    assert view["y"] <= label["y"] and label["y"] + label["height"] <= view["y"] + view["height"], (label, view)
