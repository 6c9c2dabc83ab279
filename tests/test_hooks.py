"""Hooks at the points of a run: real hook commands (and Python hooks) in real runs driven by a scripted model."""

import json
import os
import subprocess
import sys
import textwrap
import threading

import pytest
from helpers import process_alive, wait_for_pid

from anges.agents import DefaultAgent, Orchestrator
from anges.config.loading import load_config
from anges.models.scripted import ScriptedModel
from anges.store.event_store import EventStore


def reply(*actions, reasoning="because"):
    return {"analysis": "", "reasoning": reasoning, "actions": list(actions)}


def shell(command):
    return {"action_type": "RUN_SHELL_CMD", "command": command}


def complete(content="done"):
    return reply({"action_type": "TASK_COMPLETE", "content": content})


def run(cwd, replies, hooks=(), request="do it", **kwargs):
    """A run in `cwd` with `hooks` configured; (stream, model, agent)."""
    model = ScriptedModel(replies)
    config = load_config(overrides={"hooks": list(hooks)})
    agent = kwargs.pop("agent_class", DefaultAgent)(inference_func=model, cmd_init_dir=cwd, config=config, **kwargs)
    return agent.run_with_new_request(request), model, agent


def hook_events(stream):
    return [e for e in stream.events_list if e.type in ("hook_ran", "hook_feedback")]


def test_a_blocking_hook_stops_the_action_and_the_rest_of_the_reply_and_the_model_reads_why(tmp_path):
    block = {"event": "before_action", "match": {"action": "RUN_SHELL_CMD", "pattern": r"push\s+--force"},
             "command": "echo 'force-pushing is not allowed here' >&2; exit 2", "name": "no-force-push"}
    stream, model, _ = run(tmp_path, [
        reply(shell("touch pushed # git push --force origin main"), shell("touch after")),
        reply(shell("touch allowed")),
        complete(),
    ], [block])
    assert not (tmp_path / "pushed").exists() and not (tmp_path / "after").exists()
    assert (tmp_path / "allowed").exists(), "a command the pattern does not match runs"
    [blocked] = [e for e in stream.events_list if e.type == "hook_feedback"]
    assert blocked.data["outcome"] == "blocked" and blocked.data["effect"] == "blocked"
    assert blocked.data["hook"] == "no-force-push" and blocked.data["on_action"] == "RUN_SHELL_CMD"
    assert blocked.data["reason"] == "force-pushing is not allowed here" and blocked.data["skipped"] == 1
    after_block = model.prompts[1]
    assert "BLOCKED by a hook: RUN_SHELL_CMD `touch pushed # git push --force origin main` was not run. The hook " \
           "says: force-pushing is not allowed here" in after_block
    assert "The remaining 1 action of your reply was not run either." in after_block
    ran = [e for e in stream.events_list if e.type == "hook_ran"]
    assert [e.data["subject"] for e in ran] == [], "a hook whose pattern does not match does not run"


def test_json_answers_block_or_add_context_and_plain_output_is_context_after_an_action(tmp_path):
    hooks = [
        {"event": "before_action", "match": {"action": "EDIT_FILE"},
         "command": 'echo \'{"decision": "block", "reason": "edit through the shell here"}\''},
        {"event": "after_action", "match": {"action": "RUN_SHELL_CMD"}, "command": "{ printf 'exit code seen: '; cat; } |"
         " python3 -c 'import json,sys; d=json.loads(sys.stdin.read()[16:]); print(d[\"result\"][\"data\"][\"exit_code\"])'"},
        {"event": "after_action", "match": {"action": "RUN_SHELL_CMD"}, "command": 'echo \'{"context": "keep it short"}\''},
    ]
    stream, model, _ = run(tmp_path, [
        reply({"action_type": "EDIT_FILE", "directive_line": "NEW_FILE a.txt", "content": "x\n"}),
        reply(shell("exit 3")),
        complete(),
    ], hooks)
    assert not (tmp_path / "a.txt").exists()
    feedback = [e for e in stream.events_list if e.type == "hook_feedback"]
    assert [e.data["effect"] for e in feedback] == ["blocked", "context", "context"]
    assert feedback[1].data["context"] == "3", "the hook read the result's facts on its stdin"
    last = model.prompts[2]
    assert "The hook says: edit through the shell here" in model.prompts[1]
    assert last.index("EXIT CODE: 3") < last.index("A hook ran after RUN_SHELL_CMD `exit 3` and says:\n3") < \
        last.index("A hook ran after RUN_SHELL_CMD `exit 3` and says:\nkeep it short")


def test_a_hook_reads_the_event_on_stdin_and_its_variables(tmp_path):
    dump = "cat > \"$ANGES_HOOK_EVENT$ANGES_HOOK_ACTION.json\"; env | grep ^ANGES_ | sort > \"$ANGES_HOOK_EVENT.env\""
    hooks = [{"event": event, "command": dump} for event in ("run_start", "request", "before_action", "after_action",
                                                             "before_complete", "run_end")]
    stream, _, agent = run(tmp_path, [
        reply({"action_type": "EDIT_FILE", "directive_line": "NEW_FILE src/a.py", "content": "x = 1\n"}),
        complete("all done"),
    ], hooks, request="make a.py")
    before = json.loads((tmp_path / "before_actionEDIT_FILE.json").read_text())
    assert before["event"] == "before_action" and before["run_id"] == stream.uid == before["agent_id"]
    assert before["cwd"] == str(tmp_path) and before["agent_type"] == "default" and before["parent_ids"] == []
    assert before["action"] == {"action_type": "EDIT_FILE", "directive_line": "NEW_FILE src/a.py", "content": "x = 1\n"}
    assert before["subject"] == str(tmp_path / "src" / "a.py")
    env = (tmp_path / "after_action.env").read_text()
    assert f"ANGES_HOOK_PATH={tmp_path / 'src' / 'a.py'}\n" in env and "ANGES_HOOK_ACTION=EDIT_FILE\n" in env
    assert f"ANGES_RUN_ID={stream.uid}\n" in env and "ANGES_HOOK_EVENT=after_action\n" in env
    after = json.loads((tmp_path / "after_actionEDIT_FILE.json").read_text())
    assert after["result"]["type"] == "edit_file" and after["result"]["data"]["path"] == str(tmp_path / "src" / "a.py")
    start = json.loads((tmp_path / "run_start.json").read_text())
    assert start["request"] == "make a.py" and start["follow_up"] is False and start["from_parent"] is False
    done = json.loads((tmp_path / "before_completeTASK_COMPLETE.json").read_text())
    assert done["subject"] == "all done" and done["sent_back"] == 0
    end = json.loads((tmp_path / "run_endTASK_COMPLETE.json").read_text())
    assert end["outcome"] == {"event_type": "task_completion", "content": "all done", "reason": ""}
    assert stream.events_list[-1].type == "task_completion", "run_end hooks run before the answer is recorded"
    assert EventStore().load(stream.uid).events_list[-1].content == "all done"
    assert agent.run_with_new_request("and a follow-up") and json.loads(
        (tmp_path / "request.json").read_text())["follow_up"] is True


def test_a_hook_that_hangs_is_ended_with_its_children_at_its_timeout_and_the_run_goes_on(tmp_path):
    hang = {"event": "after_action", "timeout": 1,
            "command": "echo $$ > hook.pid; sleep 300 & echo $! > child.pid; wait"}
    stream, _, _ = run(tmp_path, [reply(shell("echo hi")), complete()], [hang])
    [timed_out] = hook_events(stream)
    assert timed_out.type == "hook_ran" and timed_out.data["outcome"] == "timeout"
    assert "did not finish within 1 s" in timed_out.data["reason"] and stream.events_list[-1].type == "task_completion"
    for name in ("hook.pid", "child.pid"):
        assert not process_alive(int((tmp_path / name).read_text())), f"{name} outlived its timeout"


def test_a_hook_that_crashes_or_prints_garbage_is_recorded_and_the_run_goes_on_unless_it_fails_closed(tmp_path):
    hooks = [
        {"event": "before_action", "command": "echo 'half written' >&2; kill -SEGV $$"},
        {"event": "before_action", "command": "echo nope >&2; exit 1"},
        {"event": "before_action", "command": "echo '{\"decision\": \"block\", '"},
        {"event": "before_action", "command": "echo '{\"decision\": \"maybe\"}'"},
    ]
    stream, _, _ = run(tmp_path, [reply(shell("touch ran")), complete()], hooks)
    assert (tmp_path / "ran").exists()
    outcomes = [(e.data["outcome"], e.data["reason"]) for e in hook_events(stream) if e.data["on_action"] != "TASK_COMPLETE"]
    assert outcomes[0] == ("failed", "ended by signal 11: half written")
    assert outcomes[1] == ("failed", "exited with code 1: nope")
    assert outcomes[2][0] == "unreadable" and outcomes[2][1].startswith("its output starts like JSON but is not")
    assert outcomes[3] == ("unreadable", "unknown decision 'maybe' (block is the one anges knows)")

    closed = [{"event": "before_action", "command": "exit 1", "fail_closed": True, "name": "strict"}]
    strict_run = tmp_path / "strict"
    strict_run.mkdir()
    stream, model, _ = run(strict_run, [reply(shell("touch closed")), complete()], closed)
    assert not (strict_run / "closed").exists()
    blocked = next(e for e in stream.events_list if e.type == "hook_feedback")
    assert blocked.data["outcome"] == "failed" and blocked.data["effect"] == "blocked"
    assert "The hook failed, and it blocks when it fails: exited with code 1" in model.prompts[1]


def test_before_complete_sends_the_model_back_with_the_reason_and_other_answers_are_recorded_only(tmp_path):
    check = {"event": "before_complete", "match": {"action": "TASK_COMPLETE"},
             "command": "test -e checked || { touch checked; echo 'the tests fail: fix test_x' >&2; exit 2; }"}
    stream, model, _ = run(tmp_path, [complete("done"), complete("fixed, done")], [check])
    assert stream.events_list[-1].content == "fixed, done" and model.calls == 2
    sent_back = next(e for e in stream.events_list if e.type == "hook_feedback")
    assert "NOT DONE YET: a hook checked your TASK_COMPLETE and sent you back; the run goes on. The hook says: the " \
           "tests fail: fix test_x" in model.prompts[1]
    assert sent_back.data["effect"] == "blocked" and sent_back.data["subject"] == "done"


def test_a_request_hook_can_refuse_the_request_and_the_model_is_never_asked(tmp_path):
    refuse = {"event": "request", "match": {"pattern": "(?i)password"},
              "command": "echo 'do not paste passwords into requests' >&2; exit 2"}
    stream, model, agent = run(tmp_path, [complete()], [refuse], request="log in with password hunter22")
    assert model.calls == 0 and agent.status == "interrupted"
    last = stream.events_list[-1]
    assert last.type == "task_interrupted" and last.data["reason"] == "hook"
    assert "do not paste passwords into requests" in last.content


def test_context_at_the_start_and_the_approval_needed_hook_when_a_person_is_asked(tmp_path):
    hooks = [{"event": "run_start", "command": "echo 'Current git branch: main'"},
             {"event": "approval_needed", "command": "cat > asked.json"}]
    asked = []

    def approve(request):
        asked.append(json.loads((tmp_path / "asked.json").read_text())["approval"]["subject"])
        return True

    config = load_config(overrides={"hooks": hooks, "safety": {"rules": [
        {"action": "RUN_SHELL_CMD", "match": "touch *", "decision": "ask", "reason": "touching"}]}})
    model = ScriptedModel([reply(shell("touch x")), complete()])
    agent = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=config, approval=approve)
    agent.run_with_new_request("go")
    assert asked == ["touch x"], "the hook ran before the person was asked"
    assert "A hook adds context to this request:\nCurrent git branch: main" in model.prompts[0]
    assert (tmp_path / "x").exists()


def test_child_agents_run_the_same_hooks(tmp_path):
    log = {"event": "before_action", "command": "printf '%s %s\\n' \"$(python3 -c 'import json,sys; d=json.load("
           "sys.stdin); print(d[\"agent_type\"], len(d[\"parent_ids\"]))')\" \"$ANGES_HOOK_ACTION\" >> ../actions.log"}
    work = tmp_path / "work"
    work.mkdir()
    child_call = {"action_type": "CALL_CHILD_AGENT", "directive": "NEW_CHILD_AGENT TASK_EXECUTOR",
                  "agent_input": "touch child.txt"}
    stream, _, _ = run(work, [reply(child_call), reply(shell("touch child.txt")), complete("child done"),
                              complete("all done")], [log], agent_class=Orchestrator)
    assert (work / "child.txt").exists()
    lines = (tmp_path / "actions.log").read_text().splitlines()
    assert "orchestrator 0 CALL_CHILD_AGENT" in lines and "task_executor 1 RUN_SHELL_CMD" in lines
    assert "task_executor 1 TASK_COMPLETE" in lines


def test_ctrl_c_ends_a_running_hook_at_once(tmp_path):
    hang = {"event": "before_action", "command": "echo $$ > hook.pid; sleep 300"}
    model = ScriptedModel([reply(shell("touch never")), complete()])
    agent = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path,
                         config=load_config(overrides={"hooks": [hang]}))
    result = {}
    worker = threading.Thread(target=lambda: result.update(stream=agent.run_with_new_request("go")))
    worker.start()
    pid = wait_for_pid(tmp_path / "hook.pid")
    agent.interrupt("SIGINT")
    worker.join(timeout=10)
    assert not worker.is_alive() and not process_alive(pid)
    stream = result["stream"]
    assert stream.events_list[-1].type == "task_interrupted" and stream.events_list[-1].data["reason"] == "interrupt"
    assert [e.data["outcome"] for e in hook_events(stream)] == ["stopped"]
    assert not (tmp_path / "never").exists()


def test_a_hooks_output_is_bounded_and_its_secrets_masked(tmp_path, monkeypatch):
    monkeypatch.setenv("DEPLOY_TOKEN", "s3cr3t-token-value-42")
    loud = {"event": "after_action", "command": "echo \"token: $DEPLOY_TOKEN\"; head -c 2000000 /dev/zero | tr '\\0' x"}
    stream, model, _ = run(tmp_path, [reply(shell("true")), complete()], [loud])
    [event] = hook_events(stream)
    stored = json.dumps(EventStore().load(stream.uid).events_list[2].to_dict())
    assert "s3cr3t-token-value-42" not in stored and "s3cr3t-token-value-42" not in model.prompts[1]
    assert "[REDACTED]" in event.data["output"] and len(event.data["output"]) <= 4_100
    assert len(event.content) < 20_000 and len(model.prompts[1]) < len(model.prompts[0]) + 20_000


PLUGIN = '''
import json
from anges.hooks import Block, Context
from anges.plugins import hookimpl

@hookimpl
def before_action(run, data):
    if data["action"].get("command", "").startswith("rm "):
        return Block("no rm here: " + run.agent_type)

@hookimpl
def after_action(run, data):
    events = run.events
    events[0].content = "changed by a hook"  # a copy: the run does not change
    return Context(f"{len(events)} events so far, {run.usage['model_calls']} model calls, cwd {run.cwd}")

@hookimpl
def run_end(run, data):
    raise RuntimeError("broken on purpose")
'''


def test_a_python_hook_from_the_extensions_folder_blocks_adds_context_and_may_fail(tmp_path, anges_home):
    (anges_home / "extensions").mkdir()
    (anges_home / "extensions" / "guard.py").write_text(PLUGIN)
    work = tmp_path / "work"
    work.mkdir()
    (work / "keep.txt").write_text("keep")
    stream, model, _ = run(work, [reply(shell("rm keep.txt")), reply(shell("true")), complete()])
    assert (work / "keep.txt").exists()
    feedback = [e for e in stream.events_list if e.type == "hook_feedback"]
    assert feedback[0].data["hook"] == "extension guard.py" and feedback[0].data["source"] == "plugin"
    assert "The hook says: no rm here: default" in model.prompts[1]
    told = feedback[1]
    seen = stream.events_list.index(told)
    assert f"A hook ran after RUN_SHELL_CMD `true` and says:\n{seen} events so far, 2 model calls, cwd {work}" \
        in model.prompts[2]
    assert stream.events_list[0].content == "do it"
    failed = [e for e in hook_events(stream) if e.data["hook_event"] == "run_end"]
    assert failed[0].data["outcome"] == "failed" and failed[0].data["reason"] == "RuntimeError: broken on purpose"
    assert stream.events_list[-1].type == "task_completion"


def test_a_plugin_registered_from_code_runs_its_hooks_and_unregistered_it_does_not(tmp_path):
    from anges.hooks import Block
    from anges.plugins import hookimpl, plugins

    class NoSleep:
        @hookimpl
        def before_action(self, data):
            return {"decision": "block", "reason": "no sleeping"} if "sleep" in data["subject"] else None

    plugin = NoSleep()
    plugins.register(plugin, "no-sleep")
    try:
        stream, _, _ = run(tmp_path, [reply(shell("sleep 0; touch slept")), complete()])
        assert not (tmp_path / "slept").exists()
        assert hook_events(stream)[0].data["reason"] == "no sleeping"
    finally:
        plugins.unregister(plugin)
    stream, _, _ = run(tmp_path, [reply(shell("sleep 0; touch slept")), complete()])
    assert (tmp_path / "slept").exists() and Block("x").reason == "x"


def test_a_run_without_hooks_starts_no_hook_and_loads_no_plugin(tmp_path):
    probe = textwrap.dedent("""
        import json, sys
        from anges.agents import DefaultAgent
        from anges.models.scripted import ScriptedModel
        done = json.dumps({'reasoning': 'r', 'actions': [{'action_type': 'TASK_COMPLETE', 'content': 'ok'}]})
        DefaultAgent(inference_func=ScriptedModel([done]), cmd_init_dir='.').run_with_new_request('go')
        print(json.dumps([m in sys.modules for m in ('anges.hooks.command', 'pluggy', 'yaml')]))
    """)
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env=os.environ.copy())
    assert done.returncode == 0, done.stderr
    hooks_module, pluggy, _ = json.loads(done.stdout)
    assert not hooks_module and not pluggy, "a run with no hooks started or loaded hook machinery"


@pytest.mark.parametrize("hook", [
    {"event": "run_end", "command": "x", "fail_closed": True},
    {"event": "before_action", "command": "  "},
    {"event": "before_action", "command": "x", "match": {"pattern": "("}},
    {"event": "after", "command": "x"},
    {"event": "after_action", "command": "x", "timeout": 0},
])
def test_a_bad_hook_in_the_config_is_a_clear_error(hook):
    from anges.exceptions import ConfigError

    with pytest.raises(ConfigError, match=r"key 'hooks\[0\]"):
        load_config(overrides={"hooks": [hook]})


def test_a_batch_task_runs_the_configured_hooks_and_its_stream_shows_them(tmp_path):
    from anges.batch.tasks import batch_id_for

    (tmp_path / "replies.json").write_text(json.dumps([reply(shell("touch made")), complete()]))
    (tmp_path / "tasks.jsonl").write_text(json.dumps({"id": "t", "task": "make it"}) + "\n")
    (tmp_path / "hooks.yaml").write_text(
        "hooks:\n  - {event: after_action, command: 'echo \"after $ANGES_HOOK_COMMAND\"'}\n")
    done = subprocess.run([sys.executable, "-m", "anges", "batch", "tasks.jsonl", "--model",
                           f"scripted:{tmp_path / 'replies.json'}", "--config", "hooks.yaml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    [info] = [i for i in EventStore().list() if i.batch_id == batch_id_for(tmp_path / "tasks.jsonl")]
    [told] = [e for e in EventStore().load(info.uid).events_list if e.type == "hook_feedback"]
    assert told.data["context"] == "after touch made" and told.data["outcome"] == "ok"


def test_an_installed_plugins_hooks_run_only_where_the_config_names_it(tmp_path):
    site = tmp_path / "site"
    (site / "anges_stamp-0.1.dist-info").mkdir(parents=True)
    (site / "anges_stamp-0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: anges-stamp\n"
                                                                  "Version: 0.1\n")
    (site / "anges_stamp-0.1.dist-info" / "entry_points.txt").write_text("[anges.plugins]\nstamp = anges_stamp\n")
    (site / "anges_stamp.py").write_text(
        "from anges.hooks import Context\nfrom anges.plugins import hookimpl\n\n@hookimpl\ndef run_start(run, data):\n"
        "    return Context('stamped by an installed plug-in')\n")
    (tmp_path / "replies.json").write_text(json.dumps([complete(), complete()]))
    env = {**os.environ, "PYTHONPATH": str(site)}
    for named, config in ((False, "plugin_hooks: []\n"), (True, "plugin_hooks: [stamp]\n")):
        (tmp_path / "c.yaml").write_text(config)
        done = subprocess.run([sys.executable, "-m", "anges", "-q", "go", "--config", "c.yaml", "--model",
                               f"scripted:{tmp_path / 'replies.json'}"], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert ("stamped by an installed plug-in" in done.stderr) is named
    (tmp_path / "c.yaml").write_text("plugin_hooks: [stmap]\n")
    typo = subprocess.run([sys.executable, "-m", "anges", "-q", "go", "--config", "c.yaml", "--model",
                           f"scripted:{tmp_path / 'replies.json'}"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60)
    assert "plugin_hooks names stmap, which is no installed plug-in (not found)" in typo.stderr
