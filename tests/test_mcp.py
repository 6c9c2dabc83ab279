"""MCP: real servers written with the SDK (stdio and streamable HTTP), driven by an agent with a scripted model."""

import importlib.util
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from anges.actions.mcp import compact_schema, validate_args
from anges.agents import DefaultAgent, Orchestrator
from anges.config.loading import load_config
from anges.config.types import MCPConfig
from anges.exceptions import ConfigError
from anges.models.scripted import ScriptedModel, is_summary_prompt
from anges.store.event_store import EventStore
from anges.store.events import EventStream
from anges.tools.mcp import MCPManager, ServerSpec, load_mcp_servers, specs_from_config

SERVERS = Path(__file__).parent / "mcp_servers"
ENV_SECRET = "env-secret-0123456789"
HEADER_SECRET = "header-token-9876543210"


def reply(*actions):
    return {"analysis": "looking", "reasoning": "because", "actions": list(actions)}


def use(server, tool, **tool_args):
    return {"action_type": "USE_MCP_TOOL", "mcp_server_name": server, "tool_name": tool, "tool_args": tool_args}


def complete(content="done"):
    return reply({"action_type": "TASK_COMPLETE", "content": content})


def demo_entry(pid_file, *extra_args):
    return {"command": sys.executable, "args": [str(SERVERS / "stdio_server.py"), *extra_args],
            "env": {"PID_FILE": str(pid_file), "DEMO_SECRET": ENV_SECRET}}


def pids(pid_file):
    return [int(line) for line in Path(pid_file).read_text().split()] if Path(pid_file).exists() else []


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purposes only once reaped; report it as alive so leaks show.
    return True


def wait_gone(pid, seconds=8.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_http_server():
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(SERVERS / "http_server.py"), str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, f"http://127.0.0.1:{port}/mcp"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("the HTTP MCP server did not start")


@pytest.fixture(scope="module")
def http_url():
    proc, url = start_http_server()
    yield url
    proc.kill()
    proc.wait()


TRUST_MCP = {"safety": {"rules": [{"action": "USE_MCP_TOOL", "match": "*", "decision": "allow"}]}}
"""The test servers are trusted (by default an MCP tool needs approval)."""


def make_agent(tmp_path, replies, manager, agent_class=DefaultAgent, **kwargs):
    model = ScriptedModel(replies)
    agent = agent_class(inference_func=model, cmd_init_dir=tmp_path, config=load_config(overrides=TRUST_MCP),
                        mcp=manager, **kwargs)
    return agent, model


def action_events(stream):
    return [e for e in stream.events_list if e.data.get("action_type") == "USE_MCP_TOOL"]


# -- configuration ------------------------------------------------------------------------------------------------


def test_both_config_formats_and_files(tmp_path, monkeypatch):
    monkeypatch.setenv("GH_TOKEN", "ghp-from-the-environment")
    common = {"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
                  "env": {"TOKEN": "${GH_TOKEN}", "LEVEL": "${LOG_LEVEL:-info}"}, "cwd": "/tmp", "autoApprove": []},
        "remote": {"type": "http", "url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer ${GH_TOKEN}"}},
        "off": {"command": "x", "disabled": True},
    }}
    specs = load_mcp_servers(common)
    assert set(specs) == {"files", "remote"}
    files, remote = specs["files"], specs["remote"]
    assert (files.transport, files.command, files.args, files.cwd) == (
        "stdio", "npx", ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"], "/tmp")
    assert files.env == {"TOKEN": "ghp-from-the-environment", "LEVEL": "info"}
    assert (remote.transport, remote.url) == ("http", "https://mcp.example.com/mcp")
    assert remote.headers == {"Authorization": "Bearer ghp-from-the-environment"}
    assert "ghp-from-the-environment" in remote.secrets

    # anges 0.1.x: a bare mapping of names to command and args, from a file
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"git": {"command": "uvx", "args": ["mcp-server-git"]}}))
    assert load_mcp_servers(old) == {"git": ServerSpec("git", command="uvx", args=["mcp-server-git"])}

    # nothing secret in a spec's repr or its redacted form
    for spec in specs.values():
        shown = repr(spec) + json.dumps(spec.redacted())
        assert "ghp-from-the-environment" not in shown
    assert files.redacted()["env"] == {"TOKEN": "[REDACTED]", "LEVEL": "[REDACTED]"}

    # the config section, then inline servers, then the --mcp-config file; later names win
    section = tmp_path / "section.json"
    section.write_text(json.dumps({"mcpServers": {"git": {"command": "git-server"}, "a": {"command": "a"}}}))
    merged = specs_from_config(MCPConfig(config_file=str(section), servers={"b": {"url": "http://127.0.0.1:1/mcp"}}),
                               old)
    assert {n: s.describe() for n, s in merged.items()} == {
        "git": "uvx mcp-server-git", "a": "a", "b": "http://127.0.0.1:1/mcp"}


@pytest.mark.parametrize("content, message", [
    (None, "MCP config file not found"),
    ("{not json", "not valid JSON (line 1, column 2)"),
    ("[1, 2]", "expected a JSON object"),
    ('{"mcpServers": []}', "'mcpServers' must be an object"),
    ('{"s": "python server.py"}', "server 's': expected an object"),
    ('{"s": {"args": ["x"]}}', "needs 'command'"),
    ('{"s": {"command": "a", "url": "http://x"}}', "not both"),
    ('{"s": {"command": "a", "args": "x y"}}', "'args' must be a list"),
    ('{"s": {"url": "ftp://x"}}', "must start with http"),
    ('{"s": {"type": "sse", "url": "http://x/sse"}}', "SSE transport is not supported"),
    ('{"s": {"type": "grpc", "command": "a"}}', "unknown transport type"),
    ('{"s": {"command": "a", "env": {"KEY": ["nope-secret-value"]}}}', "'env.KEY' must be a string"),
    ('{"s": {"command": "a", "env": {"KEY": "${ANGES_TEST_UNSET_VAR}"}}}', "${ANGES_TEST_UNSET_VAR}, which is not set"),
])
def test_bad_config_files_say_what_is_wrong(tmp_path, content, message):
    path = tmp_path / "mcp.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError) as info:
        load_mcp_servers(path)
    assert message in str(info.value)
    assert "nope-secret-value" not in str(info.value)


def test_without_the_sdk_configuring_a_server_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "mcp", None)  # makes `import mcp` fail
    with pytest.raises(ConfigError, match=r'pip install "anges\[mcp\]"'):
        MCPManager({"s": ServerSpec("s", command="x")})
    with MCPManager({}) as manager:  # no servers: no SDK needed
        assert manager.tools() == {}


# -- helpers of the action ----------------------------------------------------------------------------------------


def test_argument_validation_schema_compaction_and_capping():
    schema = {"type": "object", "title": "searchArguments", "required": ["query"],
              "properties": {"query": {"type": "string", "title": "Query"},
                             "title": {"type": "string", "title": "Title"},
                             "limit": {"type": "integer", "minimum": 1}}}
    assert validate_args({"query": "bugs", "limit": 5}, schema) == []
    problems = validate_args({"limit": "5", "title": 3}, schema)
    assert problems == ["tool_args: 'query' is a required property", "tool_args.limit: '5' is not of type 'integer'",
                        "tool_args.title: 3 is not of type 'string'"]
    assert validate_args({"x": 1}, {"type": "object", "properties": "broken"}) == []  # unusable schema: no verdict
    assert compact_schema(schema) == ('{"type":"object","required":["query"],"properties":{"query":{"type":"string"},'
                                      '"title":{"type":"string"},"limit":{"type":"integer","minimum":1}}}')


# -- an agent and real servers ------------------------------------------------------------------------------------


def test_agent_lists_and_calls_tools_of_stdio_and_http_servers(tmp_path, http_url, caplog):
    pid_file = tmp_path / "pids"
    specs = load_mcp_servers({"mcpServers": {
        "demo": demo_entry(pid_file),
        "web": {"url": http_url, "headers": {"Authorization": f"Bearer {HEADER_SECRET}"}},
        "missing": {"command": str(tmp_path / "no-such-server")},
        "broken": demo_entry(pid_file, "--fail-at-start"),
    }})
    caplog.set_level(logging.WARNING, logger="anges.tools.mcp")
    with MCPManager(specs, startup_timeout=20) as manager:
        assert {name: [t.name for t in tools] for name, tools in manager.tools().items()} == {
            "demo": ["echo", "stats", "divide", "show_env", "lines", "nap", "crash"],
            "web": ["add", "whoami", "crash"]}
        assert set(manager.failures) == {"missing", "broken"}
        assert "command not found" in manager.failures["missing"]
        assert "closed the connection during startup" in manager.failures["broken"]
        assert "missing configuration, giving up" in manager.failures["broken"]  # the server's stderr
        agent, model = make_agent(tmp_path, [
            reply(use("demo", "echo", text="hello", times=2), use("demo", "stats", numbers=[1, 2, 3, 4])),
            reply(use("demo", "divide", a=1, b=0)),
            reply(use("demo", "echo", times="x")),
            reply(use("web", "add", a=2, b=40), use("web", "whoami")),
            reply(use("demo", "show_env", name="DEMO_SECRET")),
            reply(use("missing", "anything"), use("nowhere", "x"), use("demo", "no_such_tool")),
            reply(use("demo", "lines", count=5000)),
            reply({"action_type": "RUN_SHELL_CMD", "command": f"echo {ENV_SECRET}"}),
            complete(),
        ], manager)
        agent.agent_config = agent.agent_config.model_copy(update={"shell_output_cap": 2000})  # config is frozen
        stream = agent.run_with_new_request("use the MCP tools")
    events = action_events(stream)
    assert [(e.data["server"], e.data["tool"], e.data["is_error"], e.data.get("error")) for e in events] == [
        ("demo", "echo", False, None), ("demo", "stats", False, None), ("demo", "divide", True, None),
        ("demo", "echo", True, "invalid_args"), ("web", "add", False, None), ("web", "whoami", False, None),
        ("demo", "show_env", False, None), ("missing", "anything", True, "unavailable"),
        ("nowhere", "x", True, "unknown_server"), ("demo", "no_such_tool", True, "unknown_tool"),
        ("demo", "lines", False, None)]
    echo, stats, divide, invalid, add, whoami, env, missing, nowhere, no_tool, lines = events
    assert all(e.type == "action" for e in events)
    # plain text; the structured copy SDKs send along ({"result": ...}) is not repeated
    assert re.fullmatch(r"MCP TOOL demo.echo: OK after \d+\.\d\d? s\nRESULT:\nhello hello", echo.content)
    assert echo.data["args"] == {"text": "hello", "times": 2} and echo.message == "MCP tool demo.echo called"
    # structured content
    assert stats.data["structured"] is True
    assert json.loads(stats.content.split("RESULT:\n", 1)[1]) == {"count": 4, "total": 10.0, "mean": 2.5}
    # an isError result shows the server's message
    assert divide.content.startswith("MCP TOOL demo.divide: ERROR") and "cannot divide by zero" in divide.content
    # invalid arguments are refused before the call, with what to fix and the schema
    assert "NOT CALLED" in invalid.content and "'text' is a required property" in invalid.content
    assert "tool_args.times: 'x' is not of type 'integer'" in invalid.content and '"required":["text"]' in invalid.content
    assert "RESULT:\n42" in add.content
    # secrets of headers and env are masked in results
    assert "you sent: [REDACTED]" in whoami.content
    assert "DEMO_SECRET=[REDACTED]" in env.content
    assert "not available: command not found" in missing.content
    assert "Connected servers: demo, web" in nowhere.content
    assert "Its tools: echo, stats, divide" in no_tool.content
    # long results keep head and tail
    assert lines.data["omitted"] > 0 and "characters cut] ..." in lines.content
    assert "line 1\n" in lines.content and lines.content.endswith("line 5000")
    assert stream.events_list[-1].type == "task_completion"
    # a server's secrets are masked in every event of the run, a shell command's output included
    shell_event = next(e for e in stream.events_list if e.data.get("action_type") == "RUN_SHELL_CMD")
    assert "[REDACTED]" in shell_event.content

    # the guide lists the servers, tools, descriptions and compact schemas, and the unavailable servers
    guide = model.prompts[0]
    assert "## USE_MCP_TOOL" in guide and "### MCP server `demo`" in guide and "### MCP server `web`" in guide
    assert "- `stats`: Count, total and mean of some numbers." in guide
    assert ('Parameters: {"properties":{"text":{"type":"string"},"times":{"default":1,"type":"integer"}},'
            '"required":["text"],"type":"object"}') in guide
    assert "MCP server `missing` is unavailable (command not found:" in guide
    assert "MCP server `broken` is unavailable" in guide
    # the stable part of the prompt is identical from step to step
    steps = [p for p in model.prompts if not is_summary_prompt(p)]
    assert len(steps) == 9 and all(p.startswith(guide.split("# History")[0]) for p in steps)

    # secrets never reach prompts, events, the store or the logs
    stored = "".join(p.read_text() for p in EventStore().root.rglob("*") if p.is_file())
    for text in [*model.prompts, json.dumps(stream.to_dict()), stored, caplog.text]:
        assert ENV_SECRET not in text and HEADER_SECRET not in text
    # each failed server was reported once
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert sum("'missing'" in w for w in warnings) == 1 and sum("'broken'" in w for w in warnings) == 1
    # every stdio server process is gone after close()
    assert pids(pid_file) and all(wait_gone(pid) for pid in pids(pid_file))


def test_a_server_that_crashes_mid_run_is_reported_once_and_left_out(tmp_path, caplog):
    pid_file = tmp_path / "pids"
    proc, url = start_http_server()
    try:
        specs = load_mcp_servers({"demo": demo_entry(pid_file), "web": {"url": url}})
        caplog.set_level(logging.WARNING, logger="anges.tools.mcp")
        with MCPManager(specs) as manager:
            agent, model = make_agent(tmp_path, [
                reply(use("demo", "crash")),
                reply(use("demo", "echo", text="still there?")),
                reply(use("web", "crash")),
                reply(use("web", "add", a=1, b=2)),
                complete("both servers died; reported"),
            ], manager)
            stream = agent.run_with_new_request("crash the servers")
            assert manager.tools() == {}
        events = action_events(stream)
        assert [e.data.get("error") for e in events] == ["server_died", "unavailable", "server_died", "unavailable"]
        assert "MCP server 'demo' stopped" in events[0].content and "no longer available" in events[0].content
        assert "MCP server 'demo' is not available" in events[1].content
        assert "MCP server 'web' stopped" in events[2].content
        assert stream.events_list[-1].type == "task_completion"
        # from the step after the crash on, the guide leaves the dead server's tools out
        assert "### MCP server `demo`" in model.prompts[0]
        assert "### MCP server `demo`" not in model.prompts[1] and "MCP server `demo` is unavailable" in model.prompts[1]
        assert "### MCP server `web`" not in model.prompts[3]
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert sum("'demo'" in w for w in warnings) == 1 and sum("'web'" in w for w in warnings) == 1
        assert set(manager.failures) == {"demo", "web"}
        assert all(wait_gone(pid) for pid in pids(pid_file))
    finally:
        proc.kill()
        proc.wait()


def test_a_server_that_never_answers_is_left_out_after_the_startup_timeout(tmp_path):
    pid_file = tmp_path / "pids"
    silent = ["-c", f"import os, time; open({str(pid_file)!r}, 'a').write(f'{{os.getpid()}}\\n'); time.sleep(60)"]
    specs = load_mcp_servers({"silent": {"command": sys.executable, "args": silent}})
    started = time.monotonic()
    with MCPManager(specs, startup_timeout=1) as manager:
        assert time.monotonic() - started < 5
        assert manager.tools() == {} and manager.failures["silent"] == "no answer within 1 s"
    assert len(pids(pid_file)) == 1 and wait_gone(pids(pid_file)[0])


def test_no_servers_with_tools_means_no_action(tmp_path):
    specs = load_mcp_servers({"missing": {"command": str(tmp_path / "nothing")}})
    with MCPManager(specs) as manager:
        agent, model = make_agent(tmp_path, [complete()], manager)
        agent.run_with_new_request("anything")
    assert "USE_MCP_TOOL" not in model.prompts[0]
    assert [a.type for a in agent.registered_actions] == [
        "RUN_SHELL_CMD", "EDIT_FILE", "READ_MIME_FILES", "UPDATE_PLAN", "TASK_COMPLETE", "HELP_NEEDED",
        "AGENT_TEXT_RESPONSE"]


def test_children_share_the_parents_servers(tmp_path):
    pid_file = tmp_path / "pids"
    with MCPManager(load_mcp_servers({"demo": demo_entry(pid_file)})) as manager:
        parent, _ = make_agent(tmp_path, [complete()], manager)
        parent.run_with_new_request("anything")
        child = parent.make_child("task_executor", EventStream())
        assert child.mcp is manager and "USE_MCP_TOOL" in [a.type for a in child.registered_actions]
        orchestrator, _ = make_agent(tmp_path, [], manager, agent_class=Orchestrator)
        assert "USE_MCP_TOOL" not in [a.type for a in orchestrator.registered_actions]
    assert len(pids(pid_file)) == 1  # one server process for the parent and its child


def test_an_interrupt_during_a_call_stops_the_run_and_close_leaves_no_process(tmp_path):
    pid_file, napping = tmp_path / "pids", tmp_path / "napping"
    entry = demo_entry(pid_file)
    entry["env"]["NAP_FILE"] = str(napping)
    with MCPManager(load_mcp_servers({"demo": entry})) as manager:
        agent, _ = make_agent(tmp_path, [reply(use("demo", "nap", seconds=30)), complete()], manager)
        interrupted = []

        def interrupt_once_napping():
            deadline = time.monotonic() + 20
            while not napping.exists() and time.monotonic() < deadline:
                time.sleep(0.02)
            interrupted.append(time.monotonic())
            agent.interrupt()

        threading.Thread(target=interrupt_once_napping, daemon=True).start()
        stream = agent.run_with_new_request("take a nap")
        assert napping.exists() and time.monotonic() - interrupted[0] < 5
    nap = action_events(stream)[0]
    assert nap.data["error"] == "interrupted" and stream.events_list[-1].type == "task_interrupted"
    assert pids(pid_file) and all(wait_gone(pid) for pid in pids(pid_file))


DRIVER = textwrap.dedent("""
    import sys
    from anges.agents import DefaultAgent
    from anges.config.loading import load_config
    from anges.tools.mcp import MCPManager, load_mcp_servers
    from anges.models.scripted import ScriptedModel

    manager = MCPManager(load_mcp_servers(sys.argv[1]))  # no `with`: atexit must clean up
    nap = {"action_type": "USE_MCP_TOOL", "mcp_server_name": "demo", "tool_name": "nap", "tool_args": {"seconds": 60}}
    model = ScriptedModel([{"analysis": "", "reasoning": "", "actions": [nap]}])
    agent = DefaultAgent(inference_func=model, config=load_config(), mcp=manager, approval="auto")
    print("running", flush=True)
    agent.run_with_new_request("nap")
""")


def test_ctrl_c_of_the_anges_process_leaves_no_server_process(tmp_path):
    pid_file = tmp_path / "pids"
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"demo": demo_entry(pid_file)}}))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(config)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        assert driver.stdout.readline().strip() == "running"
        time.sleep(0.5)  # the nap call is under way
        assert len(pids(pid_file)) == 1 and alive(pids(pid_file)[0])
        driver.send_signal(signal.SIGINT)
        _, stderr = driver.communicate(timeout=20)
    finally:
        driver.kill()
    assert "KeyboardInterrupt" in stderr
    assert wait_gone(pids(pid_file)[0])


def test_a_third_party_server_from_a_registry(tmp_path):
    if importlib.util.find_spec("mcp_server_time") is None:
        pytest.skip("mcp-server-time is not installed (pip install mcp-server-time, or the dev extra)")
    specs = load_mcp_servers({"time": {"command": sys.executable,
                                       "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}})
    with MCPManager(specs) as manager:
        assert "get_current_time" in [t.name for t in manager.tools()["time"]]
        agent, _ = make_agent(tmp_path, [
            reply(use("time", "convert_time", source_timezone="UTC", time="12:00", target_timezone="Asia/Tokyo")),
            reply(use("time", "get_current_time")),
            complete(),
        ], manager)
        stream = agent.run_with_new_request("what time is it in Tokyo at noon UTC?")
    converted, invalid = action_events(stream)
    assert not converted.data["is_error"] and "Asia/Tokyo" in converted.content and "21:00" in converted.content
    assert invalid.data["error"] == "invalid_args" and "'timezone' is a required property" in invalid.content



def test_a_bad_url_from_an_environment_variable_is_reported_without_its_value(monkeypatch):
    monkeypatch.setenv("MCP_URL_SECRET", "token-abcdef123456")
    with pytest.raises(ConfigError) as error:
        load_mcp_servers({"mcpServers": {"remote": {"url": "${MCP_URL_SECRET}"}}})
    assert "${MCP_URL_SECRET}" in str(error.value) and "token-abcdef123456" not in str(error.value)
