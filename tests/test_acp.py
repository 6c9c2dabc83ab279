"""`anges acp`: spawned as a subprocess and driven with the ACP SDK's client side and a scripted model."""

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from acp import RequestError, text_block
from acp.schema import EnvVariable, McpServerStdio
from acp_client import Editor, anges_acp, content_text, diffs, run
from helpers import pids_running, sleep_token
from test_cli import ANGES, complete, scripted

from anges.store.event_store import EventStore

MCP_SERVER = Path(__file__).parent / "mcp_servers" / "stdio_server.py"


def reply(*actions, analysis="", reasoning="next step"):
    return {"analysis": analysis, "reasoning": reasoning, "actions": list(actions)}


def shell(command, reasoning=None):
    return reply({"action_type": "RUN_SHELL_CMD", "command": command}, reasoning=reasoning or f"run {command}")


def edit(directive, content, reasoning="edit"):
    return reply({"action_type": "EDIT_FILE", "directive_line": directive, "content": content}, reasoning=reasoning)


def answer(text):
    return reply({"action_type": "AGENT_TEXT_RESPONSE", "content": text}, reasoning="answer")


@pytest.fixture
def work(tmp_path):
    path = tmp_path / "work"
    path.mkdir()
    (path / "app.py").write_text("a\nb\nc\n")
    return path


def guarded_config(tmp_path):
    """A config whose rule asks before any `echo guarded ...` command."""
    path = tmp_path / "guarded.yaml"
    path.write_text('safety:\n  rules:\n    - {action: RUN_SHELL_CMD, match: "re:^echo guarded", decision: ask, '
                    'reason: "the test guards it"}\n')
    return str(path)


async def new_session(agent, work, **extra):
    return (await agent.conn.new_session(cwd=str(work), mcp_servers=extra.get("mcp_servers", []))).session_id


async def prompt(agent, session, text):
    return (await agent.conn.prompt(session_id=session, prompt=[text_block(text)])).stop_reason


# --- a prompt turn -----------------------------------------------------------------------------------------------


def test_a_prompt_runs_a_command_and_edits_a_file_and_the_updates_arrive_in_order(tmp_path, work):
    model = scripted(tmp_path, shell("echo hello from anges", reasoning="look around"),
                     edit("REPLACE_LINES app.py 2-2", "B\n", reasoning="now change line 2"),
                     complete("Changed line 2 of app.py."))
    editor = Editor()

    async def main():
        async with anges_acp(editor, "--model", model, cwd=work) as agent:
            init = await agent.start()
            session = await new_session(agent, work)
            stop = await prompt(agent, session, "make line 2 upper case")
            return init, session, stop, agent

    init, session, stop, agent = run(main())
    assert init["protocolVersion"] == 1 and init["agentInfo"]["name"] == "anges"
    assert init["agentCapabilities"]["loadSession"] is True
    assert init["agentCapabilities"]["promptCapabilities"]["embeddedContext"] is True
    assert stop == "end_turn"
    assert (work / "app.py").read_text() == "a\nB\nc\n"

    assert editor.kinds() == ["agent_thought_chunk", "tool_call", "tool_call_update", "tool_call_update",
                              "tool_call_update",  # the command's output as it ran
                              "agent_thought_chunk", "tool_call", "tool_call_update", "tool_call_update",
                              "agent_thought_chunk", "agent_message_chunk"]
    assert editor.thoughts() == ["look around", "now change line 2", "finish"]
    assert editor.messages() == ["Changed line 2 of app.py."]
    command, change = editor.calls().values()
    assert (command["title"], command["kind"]) == ("echo hello from anges", "execute")
    assert command["statuses"] == ["pending", "in_progress", "completed"]
    assert "hello from anges" in content_text(command) and "exit 0" in content_text(command)
    assert (change["title"], change["kind"], change["statuses"]) == ("Edit app.py", "edit",
                                                                     ["pending", "in_progress", "completed"])
    [diff] = diffs(change)
    assert (diff.path, diff.old_text, diff.new_text) == (str(work / "app.py"), "a\nb\nc\n", "a\nB\nc\n")
    assert [location.path for location in change["locations"]] == [str(work / "app.py")]

    stream = EventStore().load(session)  # an ordinary stream: the session id is its id
    assert [e.type for e in stream.events_list] == ["new_request", "action", "edit_file", "task_completion"]
    assert stream.events_list[0].content == "make line 2 upper case"
    assert stream.agent_settings["cmd_init_dir"] == str(work)
    listed = subprocess.run([*ANGES, "list", "--json"], capture_output=True, text=True, check=True, cwd=work)
    assert session in [row["uid"] for row in json.loads(listed.stdout)]

    messages = agent.stdout_messages()  # every line on stdout is protocol
    assert sum(m.get("method") == "session/update" for m in messages) == len(editor.updates)


def test_later_prompts_are_follow_ups_and_session_load_replays_the_history(tmp_path, work):
    model = scripted(tmp_path, shell("echo first run"), edit("REPLACE_LINES app.py 1-1", "A\n"), complete("first done"),
                     answer("second answer"))
    live = Editor()

    async def first_process():
        async with anges_acp(live, "--model", model, cwd=work) as agent:
            await agent.start()
            session = await new_session(agent, work)
            assert await prompt(agent, session, "first request") == "end_turn"
            assert await prompt(agent, session, "second request") == "end_turn"
            return session

    session = run(first_process())
    assert live.messages() == ["first done", "second answer"]
    replayed = Editor()

    async def second_process():
        later = scripted(tmp_path, answer("third answer"), name="later.json")  # a new process: a new script
        async with anges_acp(replayed, "--model", later, cwd=work) as agent:
            await agent.start()
            await agent.conn.load_session(cwd=str(work), session_id=session, mcp_servers=[])
            count = len(replayed.updates)
            assert await prompt(agent, session, "third request") == "end_turn"
            return count

    count = run(second_process())
    history = replayed.updates[:count]
    assert [u.session_update for u in history] == [
        "user_message_chunk", "agent_thought_chunk", "tool_call", "agent_thought_chunk", "tool_call",
        "agent_thought_chunk", "agent_message_chunk", "user_message_chunk", "agent_thought_chunk",
        "agent_message_chunk"]
    assert replayed.user_messages() == ["first request", "second request"]
    assert replayed.messages() == ["first done", "second answer", "third answer"]
    command, change = list(replayed.calls().values())[:2]
    assert command["title"] == "echo first run" and command["status"] == "completed"
    assert "first run" in content_text(command)
    [diff] = diffs(change)
    assert (diff.old_text, diff.new_text) == ("a\nb\nc\n", "A\nb\nc\n")
    stream = EventStore().load(session)
    assert [e.type for e in stream.events_list if "request" in e.type] == ["new_request", "follow_up_request",
                                                                            "follow_up_request"]
    assert [i.uid for i in EventStore().list()] == [session]


# --- approvals ---------------------------------------------------------------------------------------------------


@pytest.mark.packaged_safety  # the editor is asked, bwrap or not
def test_a_permission_request_answered_reject_then_allow_always(tmp_path, work):
    model = scripted(tmp_path, shell("echo guarded one > one.txt"), shell("echo guarded two >> two.txt"),
                     shell("echo guarded two >> two.txt"), complete())
    editor = Editor(answers=["reject", "always"])

    async def main():
        async with anges_acp(editor, "--model", model, "--config", guarded_config(tmp_path), cwd=work) as agent:
            await agent.start()
            session = await new_session(agent, work)
            return session, await prompt(agent, session, "write three files")

    session, stop = run(main())
    assert stop == "end_turn"
    assert len(editor.permissions) == 2, "an always answer covers the same command for the rest of the run"
    first, second = editor.permissions
    assert [(o.option_id, o.kind) for o in first["options"]] == [
        ("allow", "allow_once"), ("always", "allow_always"), ("reject", "reject_once")]
    assert first["tool_call"].title == "echo guarded one > one.txt"
    asked = "\n".join(c.content.text for c in first["tool_call"].content)
    assert "the test guards it" in asked and "echo guarded one > one.txt" in asked
    ids, calls = list(editor.calls()), list(editor.calls().values())
    assert [first["tool_call"].tool_call_id, second["tool_call"].tool_call_id] == ids[:2]
    assert calls[0]["status"] == "failed" and "Declined by you" in content_text(calls[0])
    assert calls[0]["statuses"] == ["pending", "pending", "failed"], "waiting, then declined"
    assert calls[1]["statuses"] == ["pending", "pending", "in_progress", "completed"], "forward only"
    assert calls[2]["statuses"] == ["pending", "in_progress", "completed"]
    assert not (work / "one.txt").exists()
    assert (work / "two.txt").read_text() == "guarded two\nguarded two\n"
    decided = [e.data for e in EventStore().load(session).events_list if e.type == "approval_decided"]
    assert [(d["decision"], d["always"], d["by"]) for d in decided] == [("deny", False, "editor"),
                                                                        ("allow", True, "editor")]


@pytest.mark.packaged_safety  # the editor is asked, bwrap or not
def test_a_permission_request_the_editor_cancels_declines_the_action(tmp_path, work):
    command = "echo guarded > out.txt # \u202eharmless\u200b \u17b4\u0456"
    model = scripted(tmp_path, shell(command), complete("gave up"))
    editor = Editor(answers=["cancelled"])

    async def main():
        async with anges_acp(editor, "--model", model, "--config", guarded_config(tmp_path), cwd=work) as agent:
            await agent.start()
            session = await new_session(agent, work)
            return session, await prompt(agent, session, "try it")

    session, stop = run(main())
    assert stop == "end_turn" and editor.messages() == ["gave up"]
    assert not (work / "out.txt").exists()
    decided = [e.data for e in EventStore().load(session).events_list if e.type == "approval_decided"]
    assert [(d["decision"], d["by"]) for d in decided] == [("deny", "editor")]
    asked = "\n".join(c.content.text for c in editor.permissions[0]["tool_call"].content)
    marked = "echo guarded > out.txt # <U+202E>harmless<U+200B> <U+17B4>\u0456"
    assert marked in asked and "\u202e" not in asked  # shown, not obeyed
    assert (f"(1 line, {len(command)} characters; looks like ASCII but is not: \u0456 U+0456 Cyrillic, like i; hidden, "
            "marked: U+202E RIGHT-TO-LEFT OVERRIDE, U+200B ZERO WIDTH SPACE, U+17B4 KHMER VOWEL INHERENT AQ)") in asked
    # the title of the request (and of the tool call all along) is marked the same way: nothing there is obeyed
    assert editor.permissions[0]["tool_call"].title == marked
    assert [call["title"] for call in editor.calls().values()] == [marked]


@pytest.mark.sandbox
def test_a_permission_request_to_leave_the_sandbox_says_so_until_it_is_approved(tmp_path, work):
    escalated = reply({"action_type": "RUN_SHELL_CMD", "command": "echo out", "escalate": "needs the host"})
    model = scripted(tmp_path, escalated, complete("gave up"))
    editor = Editor(answers=["reject"])

    async def main():
        async with anges_acp(editor, "--model", model, cwd=work) as agent:
            await agent.start()
            return await prompt(agent, await new_session(agent, work), "try it")

    assert run(main()) == "end_turn"
    asked = "\n".join(c.content.text for c in editor.permissions[0]["tool_call"].content)
    assert "**If approved, this runs outside the sandbox.** The agent says why: needs the host" in asked


@pytest.mark.packaged_safety  # the editor is asked, bwrap or not
def test_cancelling_the_session_while_permission_is_pending_declines_and_ends_cancelled(tmp_path, work):
    model = scripted(tmp_path, shell("echo guarded > out.txt"), complete("never"))
    holder = {}

    async def cancel_then_answer(session_id, tool_call):
        await holder["agent"].conn.cancel(session_id=session_id)
        return "cancelled"  # what a client answers to the requests of a cancelled turn

    editor = Editor(answers=[cancel_then_answer])

    async def main():
        async with anges_acp(editor, "--model", model, "--config", guarded_config(tmp_path), cwd=work) as agent:
            holder["agent"] = agent
            await agent.start()
            session = await new_session(agent, work)
            return session, await prompt(agent, session, "try it")

    session, stop = run(main())
    assert stop == "cancelled"
    assert not (work / "out.txt").exists()
    events = EventStore().load(session).events_list
    assert events[-1].type == "task_interrupted" and events[-1].data["reason"] == "interrupt"
    assert [(e.data["decision"], e.data["by"]) for e in events if e.type == "approval_decided"] == [
        ("cancelled", "interrupt")]
    [call] = editor.calls().values()
    assert call["status"] == "failed"


# --- stopping ----------------------------------------------------------------------------------------------------


def test_a_running_commands_output_shows_in_its_call_until_its_result_replaces_it(tmp_path, work):
    command = "printf '\\033[1m%s ready\\033[0m\\n' $((6*7)); while [ ! -e go ]; do sleep 0.05; done; echo linked"
    model = scripted(tmp_path, shell(command), complete("built"))
    editor = Editor()

    async def main():
        async with anges_acp(editor, "--model", model, "--approval", "auto", cwd=work) as agent:
            await agent.start()
            session = await new_session(agent, work)
            turn = asyncio.ensure_future(prompt(agent, session, "build it"))
            await editor.wait_until(lambda: any("42 ready" in content_text(c) for c in editor.calls().values()))
            [live] = editor.calls().values()
            (work / "go").write_text("")
            await asyncio.wait_for(turn, 20)
            return live

    live = run(main())
    assert live["status"] == "in_progress" and "```\n42 ready\n```" in content_text(live)  # as drawn: no escapes
    [call] = editor.calls().values()
    assert call["status"] == "completed" and "linked" in content_text(call) and "Running" not in content_text(call)


def test_cancel_mid_command_kills_the_command_and_ends_the_turn_cancelled(tmp_path, work):
    token = sleep_token()
    model = scripted(tmp_path, shell(f"sleep {token}"), complete("never"))
    editor = Editor()

    async def main():
        async with anges_acp(editor, "--model", model, cwd=work) as agent:
            await agent.start()
            session = await new_session(agent, work)
            turn = asyncio.ensure_future(prompt(agent, session, "wait a long time"))
            await editor.wait_until(lambda: any(c["status"] == "in_progress" for c in editor.calls().values()))
            await editor.wait_until(lambda: bool(pids_running(token)))
            await agent.conn.cancel(session_id=session)
            stop = await asyncio.wait_for(turn, 10)
            return session, stop, pids_running(token)

    session, stop, left = run(main())
    assert stop == "cancelled"
    assert not left, "the command outlived the cancel"
    [call] = editor.calls().values()
    assert call["status"] == "failed" and "interrupted" in content_text(call)
    events = EventStore().load(session).events_list
    assert [e.type for e in events] == ["new_request", "action", "task_interrupted"]
    assert events[1].data["interrupted"] is True and events[2].data["reason"] == "interrupt"


def test_cancel_while_the_model_thinks_abandons_the_call(openai_server, tmp_path, work):
    openai_server.enqueue_hold(60)
    editor = Editor()

    async def main():
        async with anges_acp(editor, "--model", "openai:test-model", cwd=work,
                             env={**os.environ, **openai_server.env}) as agent:
            await agent.start()
            session = await new_session(agent, work)
            turn = asyncio.ensure_future(prompt(agent, session, "think hard"))
            assert await asyncio.to_thread(openai_server.wait_for_requests, 1)
            await agent.conn.cancel(session_id=session)
            stop = await asyncio.wait_for(turn, 10)
            for _ in range(50):  # the provider's connection is closed, not left to the server's timeout
                if openai_server.hangups:
                    break
                await asyncio.sleep(0.1)
            return session, stop

    session, stop = run(main())
    assert stop == "cancelled"
    assert openai_server.hangups, "the model call was not abandoned"
    assert EventStore().load(session).events_list[-1].data["reason"] == "interrupt"


@pytest.mark.parametrize("how", ["stdin closed", "SIGTERM"])
def test_the_editor_going_away_mid_command_stops_the_run_and_ends_its_processes(tmp_path, work, how):
    token = sleep_token()
    model = scripted(tmp_path, shell(f"sleep {token}"), complete("never"))
    editor = Editor()

    async def main():
        async with anges_acp(editor, "--model", model, cwd=work) as agent:
            await agent.start()
            session = await new_session(agent, work)
            turn = asyncio.ensure_future(prompt(agent, session, "wait a long time"))
            await editor.wait_until(lambda: bool(pids_running(token)))
            if how == "SIGTERM":
                agent.process.send_signal(signal.SIGTERM)
                await asyncio.wait_for(agent.process.wait(), 20)
        await asyncio.gather(turn, return_exceptions=True)  # the connection is gone: no answer comes
        return session

    session = run(main())  # leaving `anges_acp` asserts that the process exited
    assert not pids_running(token), "the command outlived anges acp"
    events = EventStore().load(session).events_list
    assert events[-1].type == "task_interrupted" and events[-1].data["reason"] == "interrupt"


@pytest.mark.parametrize("limit, says", [(("--max-steps", "2"), "2 steps"), (("--timeout", "1"), "out of time")])
def test_a_step_or_time_limit_ends_the_turn_with_max_turn_requests(tmp_path, work, limit, says):
    model = scripted(tmp_path, shell("sleep 0.6"), shell("sleep 0.6"), shell("sleep 0.6"), complete())
    editor = Editor()

    async def main():
        async with anges_acp(editor, "--model", model, *limit, cwd=work) as agent:
            await agent.start()
            return await prompt(agent, await new_session(agent, work), "loop")

    assert run(main()) == "max_turn_requests"
    assert says in editor.messages()[-1]


def test_a_reply_the_provider_blocked_ends_the_turn_with_refusal(openai_server, tmp_path, work):
    config = tmp_path / "one-try.yaml"
    config.write_text("agents:\n  default: {max_invalid_replies: 1}\n")
    openai_server.enqueue_blocked()
    editor = Editor()

    async def main():
        async with anges_acp(editor, "--model", "openai:test-model", "--config", str(config), cwd=work,
                             env={**os.environ, **openai_server.env}) as agent:
            await agent.start()
            return await prompt(agent, await new_session(agent, work), "something the filter blocks")

    assert run(main()) == "refusal"
    assert len(openai_server.requests) == 1


# --- delegation, MCP ---------------------------------------------------------------------------------------------


def test_an_orchestrator_shows_its_plan_and_its_child_as_a_tool_call(tmp_path, work):
    plan = "Plan:\n1. [x] look at the task\n2. [~] count the files (executor)\n3. [ ] report"
    delegate = reply({"action_type": "CALL_CHILD_AGENT", "directive": "NEW_CHILD_AGENT TASK_EXECUTOR",
                      "agent_input": "Count the files here."}, reasoning=plan)
    model = scripted(tmp_path, delegate, shell("echo from the child"), complete("3 files"),
                     complete("There are 3 files."))
    editor = Editor()

    async def main():
        async with anges_acp(editor, "--model", model, "--agent", "orchestrator", cwd=work) as agent:
            await agent.start()
            return await prompt(agent, await new_session(agent, work), "how many files?")

    assert run(main()) == "end_turn"
    assert editor.plans() == [[("look at the task", "completed"), ("count the files (executor)", "in_progress"),
                               ("report", "pending")]]
    child, command = editor.calls().values()
    assert (child["title"], child["kind"], child["status"]) == ("Delegate to task_executor", "think", "completed")
    assert "3 files" in content_text(child)
    assert command["title"] == "[task_executor] echo from the child" and command["status"] == "completed"
    assert editor.messages() == ["There are 3 files."]


def test_mcp_servers_the_editor_passes_are_started_and_ended(tmp_path, work):
    pid_file = tmp_path / "server.pid"
    server = McpServerStdio(name="demo", command=sys.executable, args=[str(MCP_SERVER)],
                            env=[EnvVariable(name="PID_FILE", value=str(pid_file))])
    use = reply({"action_type": "USE_MCP_TOOL", "mcp_server_name": "demo", "tool_name": "echo",
                 "tool_args": {"text": "hi", "times": 2}})
    editor = Editor(answers=["allow"])  # every MCP tool asks by default

    async def main():
        async with anges_acp(editor, "--model", scripted(tmp_path, use, complete()), cwd=work) as agent:
            await agent.start()
            return await prompt(agent, await new_session(agent, work, mcp_servers=[server]), "use the tool")

    assert run(main()) == "end_turn"
    [call] = editor.calls().values()
    assert call["title"] == "demo.echo" and call["status"] == "completed" and "hi hi" in content_text(call)
    for pid in map(int, pid_file.read_text().split()):
        assert not Path(f"/proc/{pid}").exists(), "the MCP server outlived anges acp"


def test_a_streaming_replys_thoughts_arrive_in_chunks_before_its_tool_call_and_only_once(tmp_path, work):
    analysis = "The project has one module, app.py, with three lines; the user wants to know what it holds."
    reasoning = "Print the file so the answer quotes it exactly, then answer with what it printed."
    model = scripted(tmp_path, reply({"action_type": "RUN_SHELL_CMD", "command": "cat app.py"}, analysis=analysis,
                                     reasoning=reasoning), answer("It holds a, b and c."))
    editor = Editor()

    async def main():
        async with anges_acp(editor, "--model", model, cwd=work) as agent:
            await agent.start()
            return await prompt(agent, await new_session(agent, work), "what is in app.py?")

    assert run(main()) == "end_turn"
    kinds = editor.kinds()
    first_call = kinds.index("tool_call")
    assert kinds[:first_call] == ["agent_thought_chunk"] * first_call and first_call > 2, "streamed in pieces"
    chunks = [u.content.text for u in editor.updates[:first_call]]
    assert "".join(chunks) == f"{analysis}\n\n{reasoning}"
    assert editor.thoughts() == [f"{analysis}\n\n{reasoning}", "answer"], "no thought is sent twice"


@pytest.mark.parametrize("variable", ["DEMO_API_KEY", "MY_LLM_KEY"])  # named like a secret, or by a model preset
def test_secrets_in_replies_and_outputs_never_reach_the_editor(tmp_path, work, variable):
    secret = "s3cret-value-0123456789"
    model = scripted(tmp_path, reply({"action_type": "RUN_SHELL_CMD", "command": f"echo {secret}"},
                                     analysis=f"the key is {secret}", reasoning=f"print {secret}"),
                     complete(f"done with {secret}"))
    editor = Editor()
    config = tmp_path / "models.yaml"
    config.write_text(f"models:\n  mine: {{provider: openai, model: m, api_key_env: {variable}}}\n")

    async def main():
        async with anges_acp(editor, "--model", model, "--config", str(config), cwd=work,
                             env={**os.environ, variable: secret}) as agent:
            await agent.start()
            return agent, await prompt(agent, await new_session(agent, work), "use the key")

    agent, stop = run(main())
    assert stop == "end_turn"
    sent = b"".join(agent.lines)
    assert secret.encode() not in sent
    assert editor.thoughts()[0] == "the key is [REDACTED]\n\nprint [REDACTED]"
    [call] = editor.calls().values()
    assert call["title"] == "echo [REDACTED]" and "[REDACTED]" in content_text(call)


# --- the protocol stream and bad requests ------------------------------------------------------------------------


def test_stdout_carries_only_protocol_even_when_something_writes_to_descriptor_1(tmp_path, work):
    # Something writes straight to the anges process's stdout descriptor (its commands no longer can: they do not
    # see the process, and cannot open its descriptors): it must land on stderr.
    model = scripted(tmp_path, shell("echo ran"), complete("wrote"))
    editor = Editor()

    async def main():
        async with anges_acp(editor, "--model", model, "--sandbox", "off", "--approval", "auto", cwd=work) as agent:
            await agent.start()
            with open(f"/proc/{agent.process.pid}/fd/1", "w") as stray:
                stray.write("STRAY-OUTPUT\n")
            stop = await prompt(agent, await new_session(agent, work), "write to stdout")
            return agent, stop

    agent, stop = run(main())
    assert stop == "end_turn"
    [call] = editor.calls().values()
    assert call["status"] == "completed", content_text(call)
    assert b"STRAY-OUTPUT\n" not in agent.lines
    assert len(agent.stdout_messages()) == len(agent.lines)  # each line is a JSON-RPC message
    assert "STRAY-OUTPUT" in agent.stderr.read_text()


def test_bad_requests_get_clear_errors_and_the_agent_goes_on(tmp_path, work):
    editor = Editor()

    async def main():
        async with anges_acp(editor, "--model", scripted(tmp_path, answer("still here")), cwd=work) as agent:
            await agent.start()
            errors = []
            for call in (agent.conn.new_session(cwd="relative/dir", mcp_servers=[]),
                         agent.conn.load_session(cwd=str(work), session_id="no-such-stream", mcp_servers=[]),
                         agent.conn.load_session(cwd=str(work), session_id="../../etc", mcp_servers=[]),
                         agent.conn.prompt(session_id="unknown", prompt=[text_block("hi")])):
                with pytest.raises(RequestError) as caught:
                    await call
                errors.append(str(caught.value))
            session = await new_session(agent, work)
            with pytest.raises(RequestError) as empty:
                await agent.conn.prompt(session_id=session, prompt=[text_block("  ")])
            errors.append(str(empty.value))
            return errors, await prompt(agent, session, "are you there?")

    errors, stop = run(main())
    assert "absolute path" in errors[0]
    assert "no-such-stream" in errors[1] and "cannot load" in errors[2]
    assert "session/new" in errors[3] and "empty" in errors[4]
    assert stop == "end_turn" and editor.messages() == ["still here"]


def test_a_stream_another_process_is_running_refuses_the_prompt_until_it_ends(tmp_path, work):
    editor = Editor()

    async def main():
        async with anges_acp(editor, "--model", scripted(tmp_path, answer("one"), answer("two")), cwd=work) as agent:
            await agent.start()
            session = await new_session(agent, work)
            assert await prompt(agent, session, "first") == "end_turn"
            with EventStore().run_lock(session):  # as the CLI or the web chat holds it while they run
                with pytest.raises(RequestError) as busy:
                    await prompt(agent, session, "second")
            return str(busy.value), await prompt(agent, session, "second again")

    refused, stop = run(main())
    assert "busy" in refused and f"process {os.getpid()}" in refused
    assert stop == "end_turn" and editor.messages() == ["one", "two"]


def test_without_the_sdk_anges_acp_says_how_to_install_it(tmp_path):
    code = "import sys; sys.modules['acp'] = None; from anges.cli.main import main; sys.exit(main(['acp']))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, check=False)
    assert out.returncode == 2
    assert 'pip install "anges[acp]"' in out.stderr and not out.stdout


@pytest.mark.packaged_safety  # nobody can answer the permission request: declined at once, not waited for
def test_requests_from_a_file_are_answered_into_a_file(tmp_path, work):
    from anges.store.events import Event, EventStream

    stream = EventStream(uid="debugged", agent_type="default")  # the session an editor had open
    stream.add_event(Event("new_request", content="earlier request", message="earlier request"))
    stream.add_event(Event("agent_text_response", content="earlier answer", message="earlier answer"))
    EventStore().sync(stream)
    model = scripted(tmp_path, shell("echo guarded try"), answer("still here"))
    requests = [
        {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}},
        {"jsonrpc": "2.0", "id": 1, "method": "session/load",
         "params": {"sessionId": "debugged", "cwd": str(work), "mcpServers": []}},
        {"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
         "params": {"sessionId": "debugged", "prompt": [{"type": "text", "text": "are you there?"}]}},
    ]
    (tmp_path / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in requests))
    with open(tmp_path / "requests.jsonl", "rb") as into, open(tmp_path / "replies.jsonl", "wb") as out:
        done = subprocess.run([*ANGES, "acp", "--model", model, "--config", guarded_config(tmp_path)], stdin=into,
                              stdout=out, stderr=subprocess.PIPE, text=True, cwd=work, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    replies = [json.loads(line) for line in (tmp_path / "replies.jsonl").read_text().splitlines()]
    assert all(reply["jsonrpc"] == "2.0" for reply in replies)
    answers = {reply["id"]: reply for reply in replies if "method" not in reply}
    assert sorted(answers) == [0, 1, 2] and answers[2].get("result") == {"stopReason": "end_turn"}, answers
    updates = [reply["params"]["update"] for reply in replies if reply.get("method") == "session/update"]
    said = [u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_message_chunk"]
    assert said == ["earlier answer", "still here"]  # the replay, then the new turn's answer
    assert not any(reply.get("method") == "session/request_permission" for reply in replies)
    decided = [e.data for e in EventStore().load("debugged").events_list if e.type == "approval_decided"]
    assert [(d["decision"], d["by"]) for d in decided] == [("deny", "no_one")]


@pytest.mark.packaged_safety  # the editor is asked, bwrap or not
def test_cancelling_while_a_permission_request_is_open_tells_the_editor_it_is_void(tmp_path, work):
    model = scripted(tmp_path, shell("echo guarded > out.txt"), complete("never"))
    holder = {}

    async def cancel_and_keep_the_dialog_open(session_id, tool_call):
        await holder["agent"].conn.cancel(session_id=session_id)
        await asyncio.sleep(3600)  # a person who never answers: the agent must say the request is void

    editor = Editor(answers=[cancel_and_keep_the_dialog_open])

    async def main():
        async with anges_acp(editor, "--model", model, "--config", guarded_config(tmp_path), cwd=work) as agent:
            holder["agent"] = agent
            await agent.start()
            session = await new_session(agent, work)
            stop = await asyncio.wait_for(prompt(agent, session, "try it"), 20)
            return agent, stop

    agent, stop = run(main())
    assert stop == "cancelled" and not (work / "out.txt").exists()
    messages = agent.stdout_messages()
    [asked] = [m for m in messages if m.get("method") == "session/request_permission"]
    [void] = [m for m in messages if m.get("method") == "$/cancel_request"]
    assert void["params"] == {"requestId": asked["id"]} and "id" not in void  # a notification about that request
    assert messages.index(void) < next(i for i, m in enumerate(messages) if m.get("result", {}).get("stopReason"))


def test_missing_credentials_at_session_new_answer_authentication_required(tmp_path, work):
    editor = Editor()

    async def main():
        async with anges_acp(editor, "--model", "claude", cwd=work) as agent:
            await agent.start()
            with pytest.raises(RequestError) as caught:
                await new_session(agent, work)
            return caught.value

    error = run(main())  # tests run without provider credentials
    assert error.code == -32000, "the protocol's auth_required, not invalid params"
    assert "ANTHROPIC_API_KEY" in str(error)


def test_a_prompt_block_anges_cannot_read_is_named_with_the_right_article():
    from acp.schema import ImageContentBlock, TextContentBlock

    from anges.acp.server import request_text

    blocks = [TextContentBlock(type="text", text="look at"), ImageContentBlock(type="image", data="", mime_type="x")]
    assert request_text(blocks, "/") == "look at [an image block anges cannot read was left out]"
