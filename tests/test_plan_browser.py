"""The plan and a held completion in the web chat, as a person sees them in headless Chromium: a panel that follows
the agent's plan, a card per update, a card for the held completion, a child's progress on its block."""

import threading

import pytest
from test_web_browser import (  # noqa: F401  (fixtures)
    assert_safe,
    browser,
    complete,
    expect,
    gate,
    log_in,
    model,
    page,
    reply,
    send,
    server,
)

pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("browser")]
PAYLOAD = "Escape <img src=x onerror=window.__xss=1> in the page"


def plan(*steps, then=()):
    return reply({"action_type": "UPDATE_PLAN", "plan": [{"step": s, "status": status} for s, status in steps]},
                 *then, reasoning="Planning.")


def test_the_plan_panel_follows_the_plan_and_a_held_completion_shows_why(page, server, model):  # noqa: F811
    release, finish = threading.Event(), threading.Event()
    model.enqueue(
        plan((PAYLOAD, "in_progress"), ("Write the report", "pending"),
             then=[{"action_type": "RUN_SHELL_CMD", "command": "echo working"}]),
        gate(release, complete("Early answer.")),
        gate(finish, plan((PAYLOAD, "completed"), ("Write the report", "completed"),
                          then=[{"action_type": "TASK_COMPLETE", "content": "Report written.",
                                 "only_if_succeeded": True}])))
    log_in(page, server)
    send(page, "escape the page and report")

    panel = page.locator("#plan-panel")
    expect(panel).to_be_visible()
    expect(page.locator("#plan-progress")).to_have_text("0 of 2 steps done")
    entries = panel.locator(".plan-step")
    expect(entries).to_have_count(2)
    expect(entries.nth(0)).to_have_attribute("data-status", "in_progress")
    expect(entries.nth(0)).to_have_text(f"\u25B8 {PAYLOAD}")  # shown as text, never as HTML
    expect(page.locator(".step-plan .plan-step")).to_have_count(2)

    release.set()
    held = page.locator(".step-held")
    expect(held.locator(".answer-label")).to_have_text("Completion held for a check")
    expect(held.locator(".held-causes li")).to_have_text(f"the plan has 2 open steps: {PAYLOAD}; Write the report")
    expect(page.locator(".answer-task_completion")).to_have_count(0)

    finish.set()
    expect(page.locator(".answer-task_completion")).to_contain_text("Report written.")
    expect(page.locator("#plan-progress")).to_have_text("2 of 2 steps done")
    expect(panel.locator(".plan-step[data-status=completed]")).to_have_count(2)
    assert entries.nth(1).evaluate("e => getComputedStyle(e).textDecorationLine") == "line-through"
    expect(page.locator(".step-plan")).to_have_count(2)

    page.reload()  # the panel is drawn again from the chat's history
    expect(page.locator("#plan-progress")).to_have_text("2 of 2 steps done")
    model.enqueue(complete("Nothing to plan."))
    send(page, "a quick question")
    expect(page.locator(".answer-task_completion")).to_have_count(2)
    expect(panel).to_be_hidden()  # a finished plan ends with a new request
    assert_safe(page)


def test_a_childs_block_shows_the_progress_of_its_plan(browser, tmp_path):  # noqa: F811
    from test_web_browser import LiveServer, RoutedModel

    release = threading.Event()
    routed = RoutedModel(
        orchestrator=[reply({"action_type": "CALL_CHILD_AGENT", "directive": "NEW_CHILD_AGENT TASK_EXECUTOR",
                             "agent_input": "Count the files."}, reasoning="Delegating."),
                      complete("There are 3 files.")],
        task_executor=[plan(("List the files", "completed"), ("Count them", "in_progress")),
                       gate(release, plan(("List the files", "completed"), ("Count them", "completed"),
                                          then=[{"action_type": "TASK_COMPLETE", "content": "3 files"}]))])
    live = LiveServer(routed, tmp_path)
    try:
        context = browser.new_context(viewport={"width": 1280, "height": 820})
        context.set_default_timeout(10_000)
        page = context.new_page()
        log_in(page, live)
        page.click("#settings-open")
        page.select_option("#set-agent-type", "orchestrator")
        page.click("#settings-save")
        send(page, "how many files?")
        progress = page.locator(".child-head .child-progress")
        expect(progress).to_have_text("plan: 1 of 2 steps done")
        expect(page.locator("#plan-panel")).to_be_hidden()  # the child's plan is its own, not the chat's
        release.set()
        expect(progress).to_have_text("plan: 2 of 2 steps done")
        expect(page.locator(".answer-task_completion").last).to_contain_text("There are 3 files.")
        context.close()
    finally:
        live.close()
