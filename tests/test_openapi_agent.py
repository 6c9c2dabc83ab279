"""CALL_API in a run: a scripted model against the FastAPI application on 127.0.0.1, with the real policy, approval
channel, store, views, telemetry, child agents and the `anges` command; the credential reaches none of them."""

import json
import os
import subprocess
import sys

import pytest
from anges.web.render import step_view
from openapi_servers import TOKEN, write_items_documents
from test_orchestrator import RoutedModel, child
from test_telemetry import Collected

from anges.acp.updates import UpdateMapper
from anges.agents import DefaultAgent, Orchestrator
from anges.checkpoints.store import CheckpointStore
from anges.cli.render import Renderer
from anges.config.loading import load_config
from anges.exceptions import ConfigError
from anges.models.scripted import ScriptedModel
from anges.store.event_store import EventStore
from anges.store.events import APICall, group_of
from anges.store.export import to_markdown
from anges.telemetry import facts as telemetry_facts

ANGES = [sys.executable, "-m", "anges"]


def reply(*actions, reasoning="next"):
    return {"analysis": "", "reasoning": reasoning, "actions": list(actions)}


def call(operation, **fields):
    return {"action_type": "CALL_API", "operation": operation, **fields}


def complete(content="done"):
    return reply({"action_type": "TASK_COMPLETE", "content": content})


def shell(command):
    return reply({"action_type": "RUN_SHELL_CMD", "command": command})


def api_config(pet_server, **safety):
    return load_config(overrides={
        "tools": {"openapi": [{"name": "pets", "spec": f"{pet_server.url}/openapi.json", "auth": {"env": "PETS_TOKEN"}}]},
        **({"safety": safety} if safety else {})})


def calls_of(stream):
    return [APICall.of(e) for e in stream.events_list if APICall.of(e) is not None]


@pytest.fixture(autouse=True)
def token(monkeypatch):
    monkeypatch.setenv("PETS_TOKEN", TOKEN)


def test_a_get_runs_unasked_a_post_asks_and_a_declined_one_is_never_sent(work, pet_server):
    asked = []

    def channel(request):
        asked.append(request)
        return "deny" if len(asked) == 1 else "allow"

    replies = [reply(call("listPets", parameters={"limit": 1})),
               reply(call("createPet", body={"name": "Bo", "tag": "dog"})),
               reply(call("createPet", body={"name": "Bo", "tag": "dog"})), complete()]
    agent = DefaultAgent(inference_func=ScriptedModel(replies), cmd_init_dir=work, config=api_config(pet_server),
                         approval=channel)
    stream = agent.run_with_new_request("add Bo")

    listed, created = calls_of(stream)
    assert (listed.method, listed.status, json.loads(listed.body)) == ("GET", 200, [{"id": 1, "name": "Rex", "tag": "dog"}])
    assert (created.method, created.status) == ("POST", 201)
    # the GET was not asked about; the first POST was declined and never reached the server, the second was sent
    assert len(asked) == 2 and pet_server.recorder.paths("POST") == ["/pets"]
    first = asked[0]
    assert (first.action_type, first.subject, first.rule) == ("CALL_API", "pets.createPet", "safety.default_rules[8]")
    assert first.detail == (f"POST {pet_server.url}/pets\nContent-Type: application/json\n"
                            "Authorization: Bearer (the secret from $PETS_TOKEN)\n\n"
                            '{\n  "name": "Bo",\n  "tag": "dog"\n}')
    assert "POST http" in first.text() and TOKEN not in first.text()
    # an editor's permission request shows the same request (the terminal and the web card show `detail` too)
    asked_in_editor = UpdateMapper(lambda update: None, str(work), iter(range(9))).permission_call(first)
    shown = json.dumps(asked_in_editor.model_dump(mode="json"))
    assert asked_in_editor.kind == "fetch" and f"POST {pet_server.url}/pets" in shown
    assert "Authorization: Bearer (the secret from $PETS_TOKEN)" in shown and '\\"name\\": \\"Bo\\"' in shown
    declined = [e for e in stream.events_list if e.type == "approval_decided" and e.data["decision"] == "deny"]
    assert len(declined) == 1 and declined[0].data["subject"] == "pets.createPet"
    # the server saw the token on every call
    assert {s.headers["authorization"] for s in pet_server.recorder.seen if s.path.startswith("/pets")} == {
        f"Bearer {TOKEN}"}


def test_rules_per_source_and_per_operation(work, pet_server):
    rules = [{"action": "CALL_API", "match": "pets.createPet", "decision": "allow"},
             {"action": "CALL_API", "match": "pets DELETE /pets/*", "decision": "deny", "reason": "keep every pet"}]
    replies = [reply(call("createPet", body={"name": "Al"})), reply(call("deletePet", parameters={"pet_id": 1})),
               complete()]
    config = api_config(pet_server).model_copy(deep=True)
    config = load_config(overrides={"tools": config.tools.model_dump(by_alias=True),
                                    "safety": {"rules": rules, "approval": "deny"}})
    stream = DefaultAgent(inference_func=ScriptedModel(replies), cmd_init_dir=work, config=config).run_with_new_request(
        "add and remove")
    assert [c.status for c in calls_of(stream)] == [201]
    denied = [e for e in stream.events_list if e.type == "approval_decided"]
    assert denied[0].data["by"] == "rule" and denied[0].data["reason"] == "keep every pet"
    assert pet_server.recorder.paths("DELETE") == []


def test_a_scripted_model_corrects_a_call_from_the_validation_errors(work, pet_server):
    def fix(prompt):  # reads what was wrong from the prompt, as a model would
        assert "NOT SENT: the call does not match the operation's schema" in prompt
        assert "- body.age: -3 is less than the minimum of 0" in prompt
        assert "- parameters.colour: not a parameter of createPet" in prompt
        return json.dumps(reply(call("createPet", body={"name": "Cy", "age": 3})))

    replies = [reply(call("createPet", parameters={"colour": "red"}, body={"name": "Cy", "age": -3})), fix,
               complete()]
    stream = DefaultAgent(inference_func=ScriptedModel(replies), cmd_init_dir=work,
                          config=api_config(pet_server, approval="auto")).run_with_new_request("add Cy")
    refused, made = calls_of(stream)
    assert (refused.sent, refused.error) == (False, "invalid") and "body (application/json, required)" in refused.schema
    assert (made.status, json.loads(made.body)["age"]) == (201, 3)
    assert pet_server.recorder.paths("POST") == ["/pets"]  # the bad call was never sent


def test_the_token_reaches_no_prompt_record_view_or_span(tmp_path, work, pet_server, monkeypatch):
    collected = Collected(capture_content=True)
    replies = [reply(call("echo"), call("listPets", parameters={"limit": 5})),
               shell("cat /tmp/anges-run-*/anges-api-*.json; echo; env | grep -c PETS_TOKEN"),
               complete(f"the token was {TOKEN}")]
    model = ScriptedModel(replies)
    agent = DefaultAgent(inference_func=model, cmd_init_dir=work, config=api_config(pet_server, approval="auto"),
                         listeners=[collected.telemetry])
    stream = agent.run_with_new_request("check the echo")

    echoed = calls_of(stream)[0]
    assert echoed.status == 200 and json.loads(echoed.body)["authorization"] == "Bearer [REDACTED]"
    command = next(e for e in stream.events_list if e.data.get("command"))
    assert "[REDACTED]" in command.data["stdout"] and command.data["stdout"].rstrip().endswith("\n0")  # no variable
    assert all(TOKEN not in prompt for prompt in model.prompts)
    assert "CALL_API" in model.prompts[0] and "listPets: GET /pets" in model.prompts[0]
    store = EventStore()
    recorded = "".join(path.read_text() for path in store.root.glob(f"**/{stream.uid}*"))
    assert TOKEN not in recorded and "anges-api-" in recorded and "Bearer [REDACTED]" in recorded
    assert TOKEN not in all_text(collected.finished())
    spans = [s for s in collected.finished() if s.name == "execute_tool CALL_API"]
    assert spans[0].attributes["http.response.status_code"] == 200
    assert spans[0].attributes["server.port"] == int(pet_server.url.rsplit(":", 1)[1])
    assert "url.full" not in spans[0].attributes  # the URL holds parameters' values: content, not captured here
    shown = anges("show", stream.uid, cwd=tmp_path)
    assert shown.returncode == 0 and TOKEN not in shown.stdout + shown.stderr
    assert f"⇄ pets.echo GET {pet_server.url}/echo" in shown.stdout and "200 OK" in shown.stdout
    exported = to_markdown(store.load(stream.uid), store)
    assert TOKEN not in exported and "API call pets.listPets" in exported


def all_text(spans):
    return json.dumps([dict(span.attributes) for span in spans], default=str) + json.dumps(
        [[dict(e.attributes or {}) for e in span.events] for span in spans], default=str)


def anges(*args, cwd, env=None):
    return subprocess.run([*ANGES, *args], cwd=cwd, capture_output=True, text=True, env=env or os.environ.copy(),
                          timeout=120, check=False)


def test_the_anges_command_with_openapi(tmp_path, work, pet_server):
    items = write_items_documents(tmp_path / "specs", pet_server.url)
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps([reply(call("getItem", parameters={"item_id": "box-1", "verbose": True,
                                                                     "X-Trace-Id": "t-9"})),
                                   complete("got it")]))
    done = anges("-q", "read box-1", "--openapi", str(items), "--model", f"scripted:{replies}", "--path", str(work),
                 "--output", "jsonl", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    (event,) = [line["event"] for line in lines if line.get("event", {}).get("data", {}).get("action_type") == "CALL_API"]
    assert event["data"]["status"] == 200 and event["data"]["url"] == f"{pet_server.url}/items/box-1?verbose=true"
    assert event["content"].startswith(f"CALL_API items.getItem: GET {pet_server.url}/items/box-1?verbose=true\n")
    body = json.loads(event["data"]["body"])
    assert body == {"item_id": "box-1", "verbose": True, "trace": "t-9", "signed": False}  # no auth configured
    # a document that cannot be read: one line, exit 2, no traceback
    bad = anges("-q", "x", "--openapi", "nope.yaml", "--model", f"scripted:{replies}", "--path", str(work),
                cwd=tmp_path)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert f"{tmp_path / 'nope.yaml'}: cannot read the OpenAPI document" in bad.stderr


def test_every_view_draws_a_call(work, pet_server):
    replies = [reply(call("getPet", parameters={"pet_id": 2})), reply(call("getPet", parameters={"pet_id": "x"})),
               reply(call("away")), complete()]
    stream = DefaultAgent(inference_func=ScriptedModel(replies), cmd_init_dir=work,
                          config=api_config(pet_server)).run_with_new_request("look")
    found, refused, redirected = [e for e in stream.events_list if APICall.of(e) is not None]
    assert group_of(found) == "api"
    drawn = "\n".join(str(line) for line in Renderer(styled=False).event(found))
    assert f"⇄ pets.getPet GET {pet_server.url}/pets/2" in drawn and '"name": "Tom"' in drawn and "200 OK" in drawn
    assert "not sent (invalid)" in APICall.of(refused).outcome()
    assert "parameters.pet_id: 'x' is not of type 'integer'" in "\n".join(
        str(line) for line in Renderer(styled=False).event(refused))
    assert "redirect refused" in "\n".join(str(line) for line in Renderer(styled=False).event(redirected))
    view = step_view(found, 1)
    assert (view["kind"], view["method"], view["status"], view["ok"]) == ("api", "GET", 200, True)
    assert '"name": "Tom"' in view["output"]
    attributes = telemetry_facts.action_attributes(found)
    assert attributes["http.request.method"] == "GET" and attributes["anges.api.operation"] == "getPet"
    assert telemetry_facts.action_failure(redirected) == ("action_error", "redirect_refused")
    sent = []
    mapper = UpdateMapper(sent.append, str(work), iter(range(100)), replay=True)
    mapper.history([(event, _speaker()) for event in stream.events_list])
    started = [update for update in sent if getattr(update, "session_update", "") == "tool_call"]
    assert any(u.kind == "fetch" and u.title == f"GET {pet_server.url}/pets/2" for u in started)


def _speaker():
    from anges.acp.updates import Speaker

    return Speaker("a1", "default")


def test_a_call_that_may_change_something_is_checkpointed_as_reaching_outside(work, pet_server):
    replies = [reply(call("listPets")), reply(call("createPet", body={"name": "Di"})), complete()]
    stream = DefaultAgent(inference_func=ScriptedModel(replies), cmd_init_dir=work,
                          config=api_config(pet_server, approval="auto")).run_with_new_request("add Di")
    get, post = [e for e in stream.events_list if APICall.of(e) is not None]
    assert "checkpoint" not in get.data and "checkpoint" in post.data
    (entry,) = [e for e in CheckpointStore(stream.uid, load_config().checkpoints).timeline(stream.uid).entries()
                if e.kind == "step"]
    assert (entry.action, entry.subject, entry.outside) == ("CALL_API", "createPet", True)


def test_a_child_agent_calls_the_api_of_its_parent(work, pet_server):
    model = RoutedModel(orchestrator=[reply(child("NEW_CHILD_AGENT TASK_EXECUTOR", "list the pets")),
                                      complete("listed")],
                        task_executor=[reply(call("listPets")), complete("two pets")])
    agent = Orchestrator(inference_func=model, cmd_init_dir=work, config=api_config(pet_server))
    assert "CALL_API" not in [a.type for a in agent.registered_actions]  # it delegates; its children call
    stream = agent.run_with_new_request("how many pets?")
    child_id = next(e.data["agent_id"] for e in stream.events_list if e.type == "new_child_agent")
    (listed,) = calls_of(EventStore().load(child_id))
    assert listed.status == 200 and len(json.loads(listed.body)) == 2
    assert "listPets: GET /pets" in model.models["task_executor"].prompts[0]


def test_a_bad_source_stops_the_agent_before_it_starts(work, tmp_path):
    config = load_config(overrides={"tools": {"openapi": [{"spec": str(tmp_path / "none.json")}]}})
    with pytest.raises(ConfigError, match="none.json: cannot read the OpenAPI document"):
        DefaultAgent(inference_func=ScriptedModel([]), cmd_init_dir=work, config=config)


def test_a_batch_task_calls_the_apis_of_the_config_and_of_the_flag(tmp_path, pet_server):
    from test_batch import batch, batch_streams, script, task_file

    items = write_items_documents(tmp_path / "specs", pet_server.url)
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps({"tools": {"openapi": [
        {"name": "pets", "spec": f"{pet_server.url}/openapi.json", "auth": {"env": "PETS_TOKEN"}}]}}))
    model = script(tmp_path, "r.json", reply(call("listPets", api="pets"),
                                             call("getItem", api="stock", parameters={"item_id": "a", "X-Trace-Id": "b"})),
                   complete())
    tasks = task_file(tmp_path, {"id": "one", "task": "count the pets"})
    done = batch(str(tasks), "--model", model, "--config", str(config), "--openapi", f"stock={items}", cwd=tmp_path,
                 env=os.environ.copy())
    assert done.returncode == 0, done.stderr
    (stream,) = batch_streams(next(iter({info.batch_id for info in EventStore().list()}))).values()
    assert [(c.api, c.status) for c in calls_of(stream)] == [("pets", 200), ("stock", 200)]
    assert TOKEN not in "".join(path.read_text() for path in EventStore().root.glob(f"**/{stream.uid}*"))


def test_a_query_key_with_characters_a_url_encodes_reaches_no_log_prompt_record_or_export(
        tmp_path, work, pet_server, monkeypatch, caplog):
    key = "Zk3y+With/Slash=Secret99"
    monkeypatch.setenv("PETS_KEY", key)
    encoded = "Zk3y%2BWith%2FSlash%3DSecret99"
    config = load_config(overrides={"safety": {"approval": "auto"}, "tools": {"openapi": [{
        "name": "pets", "spec": f"{pet_server.url}/openapi.json",
        "auth": {"type": "api_key", "in": "query", "name": "api_key", "env": "PETS_KEY"}}]}})
    model = ScriptedModel([reply(call("echo")), complete()])
    with caplog.at_level("DEBUG"):
        stream = DefaultAgent(inference_func=model, cmd_init_dir=work, config=config).run_with_new_request("echo")
    echoed = calls_of(stream)[0]
    assert echoed.status == 200 and json.loads(echoed.body)["query"] == "api_key=[REDACTED]", "the server got it"
    assert "HTTP Request: GET" in caplog.text
    store = EventStore()
    recorded = "".join(path.read_text() for path in store.root.glob(f"**/{stream.uid}*"))
    exported = to_markdown(store.load(stream.uid), store)
    for text in (caplog.text, *model.prompts, recorded, exported):
        assert key not in text and encoded not in text and "Zk3y" not in text
