"""The policy and the approval gate: allow / ask / deny under each --approval, escalation, channels and events."""

import os
import threading
import time

import pytest

from anges.agents import DefaultAgent, Orchestrator
from anges.approval import Decision, TerminalPrompt, as_decision, preview_edit
from anges.config import load_config
from anges.exceptions import ConfigError
from anges.models.scripted import ScriptedModel
from anges.policy import Policy
from anges.safety import RunSafety, approval_mode
from anges.sandbox import SandboxSettings

pytestmark = pytest.mark.packaged_safety  # the policy as a user without bwrap has it, too (see optional_groups.py)
RULES = [{"action": "RUN_SHELL_CMD", "match": "echo allowed*", "decision": "allow"},
         {"action": "RUN_SHELL_CMD", "match": "echo asked*", "decision": "ask", "reason": "a test rule asks"},
         {"action": "RUN_SHELL_CMD", "match": "re:^echo denied", "decision": "deny", "reason": "a test rule denies"}]


def reply(*actions, reasoning="testing the policy"):
    return {"analysis": "", "reasoning": reasoning, "actions": list(actions)}


def shell(command, **extra):
    return {"action_type": "RUN_SHELL_CMD", "command": command, **extra}


def complete():
    return reply({"action_type": "TASK_COMPLETE", "content": "done"})


class Recorder:
    """An approval channel that answers from a list and keeps every request."""

    name = "recorder"

    def __init__(self, *answers):
        self.answers = list(answers)
        self.requests = []

    def __call__(self, request):
        self.requests.append(request)
        return self.answers.pop(0)


def run(cwd, replies, approval=None, agent_class=DefaultAgent, **safety):
    safety.setdefault("rules", RULES)
    model = ScriptedModel(replies)
    config = load_config(overrides={"safety": safety})
    agent = agent_class(inference_func=model, cmd_init_dir=cwd, config=config, approval=approval)
    return agent.run_with_new_request("test"), model


def of_type(stream, kind):
    return [e for e in stream.events_list if e.type == kind]


# -- the decision function ------------------------------------------------------------------------------------


@pytest.fixture
def policy(tmp_path):
    config = load_config(overrides={"safety": {"rules": RULES}})
    settings = SandboxSettings.for_run(config.safety, str(tmp_path))
    return Policy(config.safety, settings, str(tmp_path), sandboxed=True)


@pytest.mark.parametrize(("command", "decision", "rule"), [
    ("echo allowed here", "allow", "safety.rules[0]"),
    ("echo asked here", "ask", "safety.rules[1]"),
    ("echo denied here", "deny", "safety.rules[2]"),
    ("rm -rf /", "deny", "safety.default_rules[0]"),
    ("sudo rm -rf --no-preserve-root /", "deny", "safety.default_rules[0]"),
    ("cd /tmp && rm -rf ~", "deny", "safety.default_rules[0]"),
    ("mkfs.ext4 /dev/sdb1", "deny", "safety.default_rules[1]"),
    ("dd if=/dev/zero of=/dev/sda bs=1M", "deny", "safety.default_rules[2]"),
    (":(){ :|:& };:", "deny", "safety.default_rules[3]"),
    ("make && sudo make install", "ask", "safety.default_rules[4]"),
    ("git commit -am x && git push origin main", "ask", "safety.default_rules[5]"),
    ("rm -rf build/ dist/", "allow", ""),
    ("grep -r sudo docs/", "allow", ""),
    ("git status; echo push", "allow", ""),
    ("echo hi > /dev/null", "allow", ""),
])
def test_rules_and_defaults_decide_commands(policy, command, decision, rule):
    verdict = policy.decide("RUN_SHELL_CMD", {"command": command})
    assert (verdict.decision, verdict.rule) == (decision, rule)


def test_first_matching_rule_wins_and_your_rules_come_before_the_defaults(tmp_path):
    rules = [{"action": "RUN_SHELL_CMD", "match": "git push*", "decision": "allow"},
             {"action": "*", "match": "git push*", "decision": "deny"}]
    config = load_config(overrides={"safety": {"rules": rules}})
    settings = SandboxSettings.for_run(config.safety, str(tmp_path))
    verdict = Policy(config.safety, settings, str(tmp_path), sandboxed=True).decide(
        "RUN_SHELL_CMD", {"command": "git push origin"})
    assert (verdict.decision, verdict.rule) == ("allow", "safety.rules[0]")


def test_commands_without_the_sandbox_ask_and_escalation_asks_even_when_a_rule_allows(tmp_path, policy):
    config = load_config()
    settings = SandboxSettings.for_run(config.safety, str(tmp_path))
    unsandboxed = Policy(config.safety, settings, str(tmp_path), sandboxed=False, unsandboxed_reason="no bwrap")

    plain = unsandboxed.decide("RUN_SHELL_CMD", {"command": "ls"})
    escalated = policy.decide("RUN_SHELL_CMD", {"command": "echo allowed", "escalate": "needs the network"})
    denied = policy.decide("RUN_SHELL_CMD", {"command": "echo denied", "escalate": "please"})

    assert (plain.decision, plain.rule, plain.reason) == ("ask", "unsandboxed", "no bwrap")
    assert (escalated.decision, escalated.rule, escalated.escalate) == ("ask", "escalation", True)
    assert denied.decision == "deny"


def test_edits_and_reads_are_checked_against_resolved_paths(tmp_path, policy, monkeypatch):
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (tmp_path / "link").symlink_to(outside)
    monkeypatch.setenv("HOME", str(tmp_path.parent))
    inside = policy.decide("EDIT_FILE", {"directive_line": "NEW_FILE src/new.py"})
    through_link = policy.decide("EDIT_FILE", {"directive_line": "INSERT_LINES link/f.py 1"})
    absolute = policy.decide("EDIT_FILE", {"directive_line": f"REPLACE_LINES {outside}/g.py 1-2"})
    mime_output = policy.decide("READ_MIME_FILES", {"question": "?", "inputs": ["a.png"], "output": "link/o.md"})

    assert inside.decision == "allow"
    assert (through_link.decision, through_link.rule, through_link.subject) == ("ask", "writable_paths",
                                                                                str(outside / "f.py"))
    assert absolute.decision == "ask" and absolute.subject == str(outside / "g.py")
    assert mime_output.decision == "ask" and mime_output.rule == "writable_paths"


def test_reading_a_hidden_credential_place_asks(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh").mkdir()
    config = load_config()
    settings = SandboxSettings.for_run(config.safety, str(tmp_path))
    policy = Policy(config.safety, settings, str(tmp_path), sandboxed=True)

    verdict = policy.decide("READ_MIME_FILES", {"question": "?", "inputs": ["~/.ssh/id_rsa"]})
    edit = policy.decide("EDIT_FILE", {"directive_line": "NEW_FILE .ssh/authorized_keys"})

    assert (verdict.decision, verdict.rule) == ("ask", "hidden_paths")
    assert (edit.decision, edit.rule) == ("ask", "hidden_paths")  # even inside the workspace


def test_mcp_tools_ask_unless_a_rule_trusts_them(tmp_path):
    config = load_config(overrides={"safety": {"rules": [
        {"action": "USE_MCP_TOOL", "match": "github.get_*", "decision": "allow"}]}})
    settings = SandboxSettings.for_run(config.safety, str(tmp_path))
    policy = Policy(config.safety, settings, str(tmp_path), sandboxed=True)

    trusted = policy.decide("USE_MCP_TOOL", {"mcp_server_name": "github", "tool_name": "get_issue"})
    other = policy.decide("USE_MCP_TOOL", {"mcp_server_name": "github", "tool_name": "merge_pull_request"})

    assert trusted.decision == "allow" and other.decision == "ask" and other.subject == "github.merge_pull_request"


@pytest.mark.parametrize(("overrides", "message"), [
    ({"sandbox": "container"}, "key 'safety.sandbox': expected one of workspace, read-only, off"),
    ({"approval": "maybe"}, "key 'safety.approval': expected one of ask, auto, deny"),
    ({"rules": [{"action": "*", "match": "x", "decision": "perhaps"}]}, "safety.rules[0].decision"),
    ({"rules": [{"action": "*", "match": "re:(unclosed", "decision": "deny"}]},
     "key 'safety.rules[0].match': not a valid regular expression"),
    ({"rules": [{"action": "*", "pattern": "x"}]}, "unknown key 'safety.rules[0].pattern'"),
])
def test_bad_safety_config_is_a_clear_error(overrides, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_config(overrides={"safety": overrides})


def test_approval_mode_resolution():
    channel = Recorder()
    assert approval_mode("", None) == ("ask", None)  # asks no one: declined at once, never a hang
    assert approval_mode("", channel) == ("ask", channel)
    assert approval_mode("auto", channel) == ("auto", channel)
    assert approval_mode("", "deny") == ("deny", None)
    with pytest.raises(ConfigError):
        approval_mode("", "sometimes")


def test_channel_answers_are_read_leniently():
    assert as_decision(True, "x").verdict == "allow" and as_decision(False, "x").verdict == "deny"
    assert as_decision("always", "x").always and as_decision("Yes", "x").verdict == "allow"
    odd = as_decision(42, "x")
    assert odd.verdict == "deny" and "does not understand" in odd.feedback


# -- the gate in a run: each decision under each --approval -----------------------------------------------------


@pytest.mark.parametrize("mode", ["ask", "auto", "deny"])
def test_allow_ask_and_deny_under_each_approval_mode(tmp_path, mode):
    channel = Recorder("allow") if mode == "ask" else None
    steps = [reply(shell("echo allowed > a.txt")), reply(shell("echo asked > b.txt")),
             reply(shell("echo denied > c.txt")), complete()]
    stream, model = run(tmp_path, steps, approval=channel if mode == "ask" else mode)

    decided = {e.data["subject"]: e.data for e in of_type(stream, "approval_decided")}
    assert (tmp_path / "a.txt").exists()  # allow: always runs, no approval event
    assert "echo allowed > a.txt" not in decided
    assert not (tmp_path / "c.txt").exists()  # deny: never runs, whatever the mode
    assert decided["echo denied > c.txt"]["by"] == "rule"
    assert "DECLINED by rule safety.rules[2] (a test rule denies)" in model.prompts[3]
    asked = decided.get("echo asked > b.txt")
    if mode == "deny":
        assert not (tmp_path / "b.txt").exists() and asked["by"] == "approval=deny"
        assert "--approval deny" in model.prompts[2]
    elif mode == "auto":
        assert (tmp_path / "b.txt").exists() and asked is None  # approved: a fact on the action's event
        action = [e for e in of_type(stream, "action") if e.data["command"] == "echo asked > b.txt"][0]
        assert action.data["approval"] == {"request_id": None, "rule": "safety.rules[1]", "by": "auto",
                                           "escalated": False}
    else:
        assert (tmp_path / "b.txt").exists() and asked["by"] == "recorder"
        [request] = channel.requests
        assert (request.action_type, request.subject, request.rule) == ("RUN_SHELL_CMD", "echo asked > b.txt",
                                                                          "safety.rules[1]")
        assert of_type(stream, "approval_requested")[0].data["request_id"] == request.id == asked["request_id"]
    assert stream.events_list[-1].type == "task_completion"  # a declined action is not an error


def test_without_a_channel_an_ask_is_declined_at_once_and_says_so(tmp_path):
    stream, model = run(tmp_path, [reply(shell("echo asked > b.txt")), complete()])

    [decided] = of_type(stream, "approval_decided")
    assert decided.data["by"] == "no_one" and not (tmp_path / "b.txt").exists()
    assert "no one can answer approval requests here" in model.prompts[1]


@pytest.mark.sandbox
@pytest.mark.parametrize("answer", ["ask-yes", "ask-no", "auto", "deny"])
def test_an_escalation_request_under_each_mode(tmp_path, answer):
    target = tmp_path.parent / f"{tmp_path.name}-cache"
    target.mkdir()
    channel = Recorder("allow" if answer == "ask-yes" else "deny")
    approval = channel if answer.startswith("ask") else answer
    command = f"echo fetched > '{target}/pkg'"
    stream, model = run(tmp_path, [reply(shell(command, escalate="installing needs the network")), complete()],
                        approval=approval)

    ran = (target / "pkg").exists()
    assert ran == (answer in ("ask-yes", "auto"))
    if answer.startswith("ask"):
        [request] = channel.requests
        assert request.escalate and request.justification == "installing needs the network"
        assert request.rule == "escalation" and request.detail == command
    if ran:
        action = of_type(stream, "action")[0]
        assert action.data["escalated"] is True and action.data["sandbox"] == "none"
    else:
        decided = of_type(stream, "approval_decided")[0]
        assert decided.data["escalate"] and "was not run" in decided.content
        assert not of_type(stream, "action")


def test_always_approves_the_same_rule_for_the_rest_of_the_run_only(tmp_path):
    channel = Recorder("always", "deny")
    steps = [reply(shell("echo asked one > 1.txt")), reply(shell("echo asked two > 2.txt")), complete()]
    stream, _ = run(tmp_path, steps, approval=channel)
    assert (tmp_path / "1.txt").exists() and (tmp_path / "2.txt").exists()
    assert len(channel.requests) == 1
    second = [e for e in of_type(stream, "action") if "two" in e.data["command"]][0]
    assert second.data["approval"]["by"] == "always"

    model = ScriptedModel([reply(shell("echo asked three > 3.txt")), complete()])
    agent = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, event_stream=stream, approval=channel,
                         config=load_config(overrides={"safety": {"rules": RULES}}))
    agent.run_with_new_request("next")
    assert len(channel.requests) == 2 and not (tmp_path / "3.txt").exists()  # a new run asks again


def test_a_declined_action_tells_the_model_why_and_skips_the_rest_of_the_reply(tmp_path):
    channel = Recorder(Decision("deny", feedback="use the Makefile target instead"))
    steps = [reply(shell("echo asked > a.txt"), shell("echo second > b.txt"), reasoning="try it"), complete()]
    stream, model = run(tmp_path, steps, approval=channel)

    [decided] = of_type(stream, "approval_decided")
    assert not (tmp_path / "a.txt").exists() and not (tmp_path / "b.txt").exists()
    assert decided.data["feedback"] == "use the Makefile target instead" and decided.data["skipped"] == 1
    assert decided.reasoning == "try it"
    prompt = model.prompts[1]
    assert "The user says: use the Makefile target instead" in prompt
    assert "The remaining 1 action of your reply was not run either." in prompt
    assert "APPROVAL_REQUESTED" not in prompt  # the decision says it all


def test_a_broken_channel_declines_and_the_run_goes_on(tmp_path):
    def broken(request):
        raise RuntimeError("the UI went away")

    stream, _ = run(tmp_path, [reply(shell("echo asked > a.txt")), complete()], approval=broken)

    [decided] = of_type(stream, "approval_decided")
    assert decided.data["by"] == "callback" and "RuntimeError: the UI went away" in decided.data["feedback"]
    assert stream.events_list[-1].type == "task_completion"


def test_an_interrupt_ends_the_wait_for_an_answer_at_once(tmp_path):
    waiting, cancelled = threading.Event(), threading.Event()

    def patient(request):
        waiting.set()
        if request.cancelled.wait(30):
            cancelled.set()
        return "allow"

    model = ScriptedModel([reply(shell("echo asked > a.txt")), complete()])
    agent = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, approval=patient,
                         config=load_config(overrides={"safety": {"rules": RULES}}))
    worker = threading.Thread(target=agent.run_with_new_request, args=("test",))
    worker.start()
    assert waiting.wait(10)
    started = time.monotonic()
    agent.interrupt()
    worker.join(5)

    assert not worker.is_alive() and time.monotonic() - started < 1.5
    assert cancelled.wait(2) and not (tmp_path / "a.txt").exists()
    kinds = [e.type for e in agent.event_stream.events_list]
    assert kinds == ["new_request", "approval_requested", "approval_decided", "task_interrupted"]
    assert agent.event_stream.events_list[2].data["decision"] == "cancelled"


def test_a_callback_that_never_answers_is_abandoned_when_the_run_times_out(tmp_path):
    model = ScriptedModel([reply(shell("echo asked > a.txt")), complete()])
    config = load_config(overrides={"safety": {"rules": RULES}, "agents": {"common": {"timeout": 0.5}}})
    agent = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=config,
                         approval=lambda request: time.sleep(60))
    started = time.monotonic()
    stream = agent.run_with_new_request("test")

    assert time.monotonic() - started < 3
    assert stream.events_list[-1].type == "task_interrupted" and stream.events_list[-1].data["reason"] != "interrupt"


def test_child_agents_ask_through_their_parents_channel(tmp_path):
    channel = Recorder("allow")
    delegate = {"action_type": "CALL_CHILD_AGENT", "directive": "NEW_CHILD_AGENT TASK_EXECUTOR",
                "agent_input": "write the file"}

    model = ScriptedModel([reply(delegate), reply(shell("echo asked > child.txt")), complete(), complete()])
    config = load_config(overrides={"safety": {"rules": RULES}})
    agent = Orchestrator(inference_func=model, cmd_init_dir=tmp_path, config=config, approval=channel)
    agent.run_with_new_request("delegate")

    [request] = channel.requests
    assert request.agent_type == "task_executor" and request.agent_id != agent.uid
    assert (tmp_path / "child.txt").exists()


def test_the_edit_preview_is_the_diff_the_edit_would_make_and_leaves_the_file(tmp_path):
    (tmp_path / "app.py").write_text("one\ntwo\nthree\n")
    args = {"directive_line": "REPLACE_LINES app.py 2-2", "content": "TWO"}

    diff = preview_edit(args, str(tmp_path))

    assert diff.startswith("REPLACE_LINES app.py 2-2\n--- a/app.py\n+++ b/app.py\n")
    assert "-two\n+TWO\n" in diff and (tmp_path / "app.py").read_text() == "one\ntwo\nthree\n"
    assert "would fail" in preview_edit({"directive_line": "REMOVE_LINES app.py 7-9"}, str(tmp_path))


def test_an_edit_outside_the_writable_paths_asks_and_shows_its_diff(tmp_path):
    outside = tmp_path.parent / f"{tmp_path.name}-elsewhere"
    outside.mkdir()
    (outside / "conf.ini").write_text("a=1\n")
    channel = Recorder("deny")
    edit = {"action_type": "EDIT_FILE", "directive_line": f"REPLACE_LINES {outside}/conf.ini 1-1", "content": "a=2"}
    run(tmp_path, [reply(edit), complete()], approval=channel)

    [request] = channel.requests
    assert request.rule == "writable_paths" and "-a=1\n+a=2" in request.detail
    assert (outside / "conf.ini").read_text() == "a=1\n"


def test_the_sandbox_fallback_without_bwrap_asks_for_every_command(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("PATH", str(tmp_path / "no-bwrap-here"))
    with caplog.at_level("WARNING", logger="anges.sandbox"):
        safety = RunSafety(load_config().safety, str(tmp_path))
        RunSafety(load_config().safety, str(tmp_path))
    warnings = [r.getMessage() for r in caplog.records if "not available" in r.getMessage()]
    assert len(warnings) <= 1  # said once per process (it may have been said by an earlier test)
    assert not safety.sandboxed and "bwrap was not found on PATH" in safety.unsandboxed_reason
    assert safety.policy.decide("RUN_SHELL_CMD", {"command": "ls"}).decision == "ask"

    stream, model = run(tmp_path, [reply(shell("echo ran > a.txt")), complete()], approval="deny")
    assert not (tmp_path / "a.txt").exists()
    assert "No sandbox: the sandbox is not available: bwrap was not found on PATH" in model.prompts[0]
    assert of_type(stream, "approval_decided")[0].data["rule"] == "unsandboxed"

    stream, _ = run(tmp_path, [reply(shell("echo ran > a.txt")), complete()], approval="auto")
    assert (tmp_path / "a.txt").exists() and of_type(stream, "action")[0].data["sandbox"] == "none"


def test_the_terminal_prompt_reads_an_answer_and_feedback(tmp_path):
    from io import StringIO

    from anges.approval import ApprovalRequest

    read_end, write_end = os.pipe()
    os.write(write_end, b"maybe\nt\nnot on main, please\n")
    out = StringIO()
    request = ApprovalRequest("RUN_SHELL_CMD", "git push", "git push origin main\x1b]52;c;aGk=\x07", "rule", "why",
                              "RUN_SHELL_CMD matching git push*")
    try:
        decision = TerminalPrompt(out, read_end)(request)
    finally:
        os.close(read_end)
        os.close(write_end)

    assert (decision.verdict, decision.feedback, decision.by) == ("deny", "not on main, please", "terminal")
    shown = out.getvalue()
    assert "please answer y, n, a or t" in shown and "git push origin main^[]52;c;aGk=^G" in shown
    assert "\x1b" not in shown


def test_decisions_show_in_the_transcript_and_the_markdown_export(tmp_path):
    from io import StringIO

    from anges.export import to_markdown
    from anges.store import EventStore
    from anges.transcript import print_stream

    channel = Recorder(Decision("deny", feedback="not today"))
    steps = [reply(shell("echo asked > a.txt")), reply(shell("echo denied > b.txt")), complete()]
    stream, _ = run(tmp_path, steps, approval=channel)
    out = StringIO()
    print_stream(stream, EventStore(), out)
    markdown = to_markdown(stream, EventStore())

    shown = out.getvalue()
    assert "? needs approval: RUN_SHELL_CMD echo asked > a.txt — a test rule asks [safety.rules[1]]" in shown
    assert "✗ declined by recorder: RUN_SHELL_CMD echo asked > a.txt" in shown and "│ not today" in shown
    assert "✗ declined by rule safety.rules[2] (a test rule denies): RUN_SHELL_CMD echo denied > b.txt" in shown
    assert "## 2. Approval requested" in markdown and "needs approval: a test rule asks (`safety.rules[1]`)" in markdown
    assert "**deny** by `recorder`: DECLINED by the user: RUN_SHELL_CMD `echo asked > a.txt` was not run." in markdown
    assert "**deny** by `rule`: DECLINED by rule safety.rules[2]" in markdown
