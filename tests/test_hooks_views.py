"""Hook runs and trust questions as people see them: the terminal (a real pty), `anges show`, `--output jsonl`, the web
chat (headless Chromium) and an editor (a real `anges acp` process)."""

import asyncio
import json

import pytest
import yaml
from acp_client import Editor, anges_acp, content_text
from terminal_screen import Terminal
from test_cli import anges, complete, edit, only_stream, scripted, shell

from anges.store.events import Event
from web.render import step_view

BLOCK = {"event": "before_action", "name": "no-force-push", "match": {"action": "RUN_SHELL_CMD", "pattern": "--force"},
         "command": "echo 'force-pushing is not allowed here' >&2; exit 2"}
TELL = {"event": "after_action", "match": {"action": "EDIT_FILE"}, "command": "echo 'formatted it'"}


def configure(home, *hooks):
    """Add `hooks` to the config in ANGES_HOME (the machine's own settings kept)."""
    path = home / "config.yaml"
    config = yaml.safe_load(path.read_text()) if path.exists() else {}
    path.write_text(yaml.safe_dump({**(config or {}), "hooks": list(hooks)}))


def project(work, *hooks):
    (work / ".anges").mkdir()
    (work / ".anges" / "config.yaml").write_text(yaml.safe_dump({"hooks": list(hooks)}))


def test_hook_runs_show_in_the_transcript_in_anges_show_and_in_jsonl(tmp_path, anges_home):
    configure(anges_home, BLOCK, TELL)
    model = scripted(tmp_path, shell("git push --force origin main"), edit("NEW_FILE a.txt", "a\n"), complete())
    ran = anges("-q", "go", "--model", model, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    blocked_line = "⚓ hook no-force-push · before_action RUN_SHELL_CMD git push --force origin main · blocked"
    for text in (ran.stderr, anges("show", only_stream().uid, cwd=tmp_path).stdout):
        assert blocked_line in text and "│ force-pushing is not allowed here" in text
        assert "⚓ hook echo 'formatted it' · after_action EDIT_FILE" in text and "· told the model" in text
        assert "│ formatted it" in text
    lines = [json.loads(line) for line in anges("-q", "go", "--output", "jsonl", "--model", model,
                                                cwd=tmp_path).stdout.splitlines()]
    hooks = [line["event"] for line in lines if line["type"] == "event" and line["event"]["type"].startswith("hook")]
    assert [(h["type"], h["data"]["hook"], h["data"]["outcome"]) for h in hooks] == [
        ("hook_feedback", "no-force-push", "blocked"), ("hook_feedback", "echo 'formatted it'", "ok")]


def test_on_a_terminal_the_projects_hooks_are_trusted_by_one_key_and_then_run(tmp_path):
    project(tmp_path, TELL)
    term = Terminal(["-q", "task", "--model", scripted(tmp_path, edit("NEW_FILE a.txt", "a\n"), complete("finished"))],
                    cwd=tmp_path, columns=200)
    try:
        shown = "\n".join(term.wait_until(lambda: "y yes · n no" in "\n".join(term.display()),
                                          what="the question to trust the project's hooks"))
        assert "? TRUST needs your approval — a project's hooks run outside the sandbox" in shown
        assert "after_action: echo 'formatted it'" in shown, "the hook is shown before it is trusted"
        term.send("y")
        term.wait_for("finished")
        assert term.wait() == 0
    finally:
        term.close()
    assert f"✓ trusted: the hooks and commands of {tmp_path}/.anges" in term.text()
    assert "⚓ hook echo 'formatted it' · after_action EDIT_FILE" in term.text()


def test_in_the_terminal_session_the_trust_question_is_answered_by_one_key_and_declining_is_remembered(tmp_path):
    from terminal_screen import CTRL_D

    project(tmp_path, TELL)
    model = scripted(tmp_path, edit("NEW_FILE a.txt", "a\n"), complete("first"), edit("NEW_FILE b.txt", "b\n"),
                     complete("second"))
    term = Terminal(["--model", model], cwd=tmp_path, columns=200)
    try:
        term.wait_for("Ctrl-D leaves")
        term.send("make a\r")
        term.wait_until(lambda: "TRUST needs your approval" in "\n".join(term.display())
                        and "y yes · n no" in "\n".join(term.display()), what="the trust question, answerable")
        term.send("n")
        term.wait_for("first")
        term.send("make b\r")
        term.wait_for("second")
        term.send(CTRL_D)
        assert term.wait() == 0
    finally:
        term.close()
    text = term.text()
    assert f"✗ not trusted (you declined it): the hooks and commands of {tmp_path}/.anges; to trust it: anges trust" in text
    assert text.count("TRUST needs your approval") <= 1 and "⚓ hook" not in text, "asked once, and nothing ran"
    assert not [e for e in only_stream().events_list if e.type.startswith("hook")]


def test_the_web_chat_draws_a_hook_run_as_a_card_of_facts():
    event = Event("hook_feedback", content="BLOCKED ...", message="hook x: blocked", data={
        "hook": "no-force-push", "source": "config", "hook_event": "before_action", "on_action": "RUN_SHELL_CMD",
        "subject": "git push --force\x1b[31m", "outcome": "blocked", "effect": "blocked", "exit_code": 2,
        "duration": 0.02, "output": "", "reason": "not <b>here</b>", "context": ""})
    view = step_view(event, 3)
    assert view["kind"] == "hook" and view["hook"]["reason"] == "not <b>here</b>"
    assert "\x1b" not in view["hook"]["subject"], "what a hook or the model wrote is made printable"


@pytest.mark.browser
@pytest.mark.xdist_group("browser")
def test_the_web_chat_asks_to_trust_the_projects_hooks_and_shows_their_runs(tmp_path):
    from test_web_browser import TRAP, WAIT, LiveServer, chromium_path, expect, log_in, playwright_api, send
    from test_web_browser import reply as web_reply
    from test_web_browser import shell as web_shell

    from anges.models.scripted import ScriptedModel

    project(tmp_path, BLOCK, {"event": "after_action", "match": {"action": "RUN_SHELL_CMD"},
                              "command": "echo 'the linter is happy'"})
    model = ScriptedModel([web_shell("git push --force"), web_shell("echo fine"),
                           web_reply({"action_type": "TASK_COMPLETE", "content": "Done."})])
    server = LiveServer(model, tmp_path)
    try:
        with playwright_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium_path(), headless=True,
                                         args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
            page = browser.new_page(viewport={"width": 1280, "height": 820})
            page.set_default_timeout(WAIT)
            page.add_init_script(TRAP)
            log_in(page, server)
            send(page, "push it")
            card = page.locator(".card.approval[data-state=pending]")
            expect(card.locator(".card-head .path")).to_have_text(f"TRUST {tmp_path}/.anges")
            expect(card.locator(".badge.warn")).to_have_text("outside the sandbox")
            expect(card.locator("pre.output")).to_contain_text("before_action: echo 'force-pushing is not allowed")
            card.locator("button[data-decision=allow]").click()
            blocked = page.locator(".card.hook.hook-blocked")
            expect(blocked.locator(".command")).to_have_text("no-force-push")
            expect(blocked.locator(".badge.warn")).to_have_text("blocked")
            expect(blocked.locator(".hook-said")).to_have_text("force-pushing is not allowed here")
            told = page.locator(".card.hook.hook-context")
            expect(told.locator(".hook-said")).to_have_text("the linter is happy")
            expect(page.locator(".answer-task_completion")).to_contain_text("Done.")
            assert page.evaluate("window.__xss") == 0
            browser.close()
    finally:
        server.close()


@pytest.mark.packaged_safety
def test_an_editor_is_asked_to_trust_the_projects_hooks_and_sees_each_run_as_a_tool_call(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    project(work, BLOCK)
    model = scripted(tmp_path, shell("git push --force"), shell("echo fine"), complete())
    editor = Editor(answers=["allow"])

    async def main():
        from acp import text_block

        async with anges_acp(editor, "--model", model, cwd=work) as agent:
            await agent.start()
            session = (await agent.conn.new_session(cwd=str(work), mcp_servers=[])).session_id
            return (await agent.conn.prompt(session_id=session, prompt=[text_block("push")])).stop_reason

    assert asyncio.run(main()) == "end_turn"
    [asked] = editor.permissions
    assert asked["tool_call"].title == f"Trust {work}/.anges"
    assert "before_action: echo 'force-pushing is not allowed here'" in "\n".join(
        c.content.text for c in asked["tool_call"].content)
    calls = list(editor.calls().values())
    push = next(c for c in calls if c["title"] == "git push --force")
    assert push["status"] == "failed" and "BLOCKED by a hook" in content_text(push)
    hook = next(c for c in calls if c["title"].startswith("Hook no-force-push"))
    assert hook["status"] == "failed" and "force-pushing is not allowed here" in content_text(hook)
    assert next(c for c in calls if c["title"] == "echo fine")["status"] == "completed"
