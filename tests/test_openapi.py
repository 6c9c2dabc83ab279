"""Web APIs from their OpenAPI documents: reading and checking documents (a FastAPI application's generated one, a
hand-written two-file YAML one, a generated one of hundreds of operations), checking calls against their schema, and
sending them to a real server on 127.0.0.1 (redirects, retries, time limits, a stop, a large body)."""

import json
import threading
import time

import pytest
import yaml
from openapi_servers import TOKEN, many_operations, write_items_documents

from anges.actions.api import apis_for
from anges.config.arguments import with_openapi
from anges.config.loading import anges_home, load_config
from anges.exceptions import ConfigError
from anges.tools.openapi.calls import CallError


def config_for(*sources, **tools):
    return load_config(overrides={"tools": {"openapi": list(sources), **tools}})


def load(work, *sources, **tools):
    return apis_for(config_for(*sources, **tools), str(work))


@pytest.fixture
def items(tmp_path, pet_server):
    """The hand-written document (items.yaml with $refs into common.yaml), outside the working directory."""
    return write_items_documents(tmp_path / "specs", pet_server.url)


@pytest.fixture
def token(monkeypatch):
    monkeypatch.setenv("PETS_TOKEN", TOKEN)
    return TOKEN


# -- reading documents -------------------------------------------------------------------------------------------


def test_a_hand_written_yaml_document_with_refs_across_two_files(work, items, pet_server, token):
    apis = load(work, {"spec": str(items), "auth": {"env": "PETS_TOKEN"}})
    source = apis.source(None)
    assert (source.name, source.base_url, source.version) == ("items", pet_server.url, "3.0")
    get, put = source.operations["getItem"], source.operations["putItem"]
    assert [(p.name, p.location, p.required) for p in get.parameters] == [
        ("item_id", "path", True), ("verbose", "query", False), ("X-Trace-Id", "header", True)]
    assert get.parameter("item_id").schema == {"type": "string", "pattern": "^[a-z0-9-]+$"}  # from common.yaml
    schema = put.body.schema  # common.yaml's Item, which contains itself: cut where it repeats
    assert schema["required"] == ["name", "count"] and schema["properties"]["count"] == {"type": "integer",
                                                                                         "minimum": 0}
    assert "recursive" in schema["properties"]["parts"]["items"]["description"]
    assert (put.body.media_type, put.body.required) == ("application/json", True)
    # the credential's kind comes from the document's security scheme (bearer)
    assert source.credential.headers() == {"Authorization": f"Bearer {TOKEN}"}
    (listed,) = apis.index()
    assert listed["operations"] == [
        "- getItem: GET /items/{item_id} — Read an item. verbose: bool, X-Trace-Id*: str",
        "- putItem: PUT /items/{item_id} — Store an item. body.name*: str, body.count*: int, body.note: str|null, "
        "body.parts: [any]"]
    described = apis.describe(None, "putItem")
    assert "body (application/json, required):" in described and '"minimum":0' in described


def test_a_fastapi_document_as_it_comes(work, pet_server, token):
    apis = load(work, {"spec": f"{pet_server.url}/openapi.json", "auth": {"env": "PETS_TOKEN"}})
    source = apis.source(None)
    assert source.name == "pet_store" and source.version == "3.1" and source.base_url == pet_server.url
    assert {"listPets", "getPet", "createPet", "deletePet", "getItem"} <= set(source.operations)
    assert source.credential.kind == "bearer"  # FastAPI's HTTPBearer scheme
    create = source.operations["createPet"]
    assert create.body.schema["required"] == ["name"] and create.body.schema["properties"]["age"]["minimum"] == 0
    lines = apis.index()[0]["operations"]
    assert "- listPets: GET /pets — List the pets. limit: int, tag: str|null" in lines
    assert any(line.startswith("- createPet: POST /pets — Add a pet. body.name*: str") for line in lines)
    # the fetched document is not asked for again for each use
    assert pet_server.recorder.paths().count("/openapi.json") == 1


@pytest.mark.parametrize("document, expected", [
    ("missing.yaml", "cannot read the OpenAPI document: no such file"),
    ("swagger: '2.0'\ninfo: {title: Old, version: '1'}\npaths: {}\n", "a Swagger 2.0 document; anges reads OpenAPI"),
    ("openapi: 3.0.3\npaths: {}\n", 'not a valid OpenAPI 3.0 document: "info" is a required property'),
    ("openapi: 3.0.3\ninfo: {title: T, version: '1'}\npaths:\n  /a:\n    get:\n      parameters:\n"
     "        - $ref: 'nowhere.yaml#/P'\n      responses: {'200': {description: ok}}\n",
     "a $ref cannot be resolved: "),
    ("openapi: 3.0.3\ninfo: {title: T, version: '1'}\npaths: {}\n  bad: [", "neither JSON nor valid YAML (line 4"),
    ("openapi: 3.0.3\ninfo: {title: T, version: '1'}\nservers: [{url: /v1}]\n"
     "paths: {/a: {get: {responses: {'200': {description: ok}}}}}\n", "server URL '/v1' is relative: set `base_url`"),
    ("openapi: 4.0.0\n", "not an OpenAPI 3.0 or 3.1 document (its 'openapi' field is '4.0.0')"),
])
def test_a_document_that_cannot_be_used_says_why_in_one_line(tmp_path, work, document, expected):
    spec = tmp_path / "api.yaml"
    if document != "missing.yaml":
        spec.write_text(document)
    with pytest.raises(ConfigError) as caught:
        load(work, {"spec": str(spec)})
    message = str(caught.value)
    assert expected in message and "\n" not in message and str(tmp_path) in message


def test_what_else_is_refused_at_start(tmp_path, work, items, pet_server, monkeypatch):
    monkeypatch.delenv("PETS_TOKEN", raising=False)
    with pytest.raises(ConfigError, match="auth.env PETS_TOKEN is not set"):
        load(work, {"spec": str(items), "auth": {"env": "PETS_TOKEN"}})
    with pytest.raises(ConfigError, match="another API is named 'items' too: give one a `name`"):
        load(work, {"spec": str(items)}, {"spec": str(items)})
    with pytest.raises(ConfigError, match=r"offers no operation \(2 left out by `operations`\)"):
        load(work, {"spec": str(items), "operations": ["delete*"]})
    with pytest.raises(ConfigError, match="cannot fetch the OpenAPI document"):
        load(work, {"spec": "http://127.0.0.1:9/openapi.json"})
    with pytest.raises(ConfigError, match="base URL must be an http.s. URL"):
        load(work, {"spec": str(items), "base_url": "ftp://example.com"})
    both = load(work, {"spec": str(items), "name": "one"}, {"spec": str(items), "name": "two"})
    assert list(both.sources) == ["one", "two"]
    with pytest.raises(CallError, match=r"Several APIs are configured \(one, two\): say which in `api`"):
        both.prepare({"operation": "getItem"})


def test_a_document_the_agent_could_write_is_not_configuration(tmp_path, work, pet_server, other_server):
    # in the working directory: a command could have changed where calls go, or made a POST a GET
    inside = write_items_documents(work / "api", pet_server.url)
    with pytest.raises(ConfigError, match="lies where the agent's commands can write"):
        load(work, {"spec": str(inside), "base_url": pet_server.url})
    # a document outside that refers into a place hidden from commands (ANGES_HOME) is not read there
    secret = anges_home() / "secret.yaml"
    secret.write_text("P: {name: a, in: query, schema: {type: string}}\n")
    spec = write_items_documents(tmp_path / "specs", pet_server.url)
    spec.write_text(spec.read_text().replace('common.yaml#/components/parameters/TraceId', f'{secret}#/P'))
    with pytest.raises(ConfigError, match="leads into a place hidden from commands"):
        load(work, {"spec": str(spec)})
    # a document from the web refers to no file of this machine
    remote = yaml.safe_load(write_items_documents(tmp_path / "more", pet_server.url).read_text())
    remote["paths"]["/items/{item_id}"]["parameters"] = [
        {"$ref": f"file://{tmp_path}/more/common.yaml#/components/parameters/ItemId"}]
    other_server.recorder.document = remote
    with pytest.raises(ConfigError, match="refers to a local file .*, which a remote document may not"):
        load(work, {"spec": f"{other_server.url}/doc.json"})


def test_operations_offered_by_pattern(work, items):
    for patterns, offered in ((["getItem"], ["getItem"]), (["PUT /items/*"], ["putItem"]),
                              (["re:^(get|put)Item$"], ["getItem", "putItem"]), (["get*"], ["getItem"])):
        assert list(load(work, {"spec": str(items), "operations": patterns}).source(None).operations) == offered


def test_the_openapi_flag_adds_sources(tmp_path, items, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = with_openapi(config_for({"spec": str(items), "name": "first"}),
                          ["specs/items.yaml", "second=specs/items.yaml", "https://api.example.com/o.json?v=1"])
    assert [(s.name, s.spec) for s in config.tools.openapi] == [
        ("first", str(items)), ("", str(items)), ("second", str(items)), ("", "https://api.example.com/o.json?v=1")]


# -- the index in the prompt ---------------------------------------------------------------------------------------


def test_hundreds_of_operations_keep_the_index_within_its_budget(tmp_path, work):
    spec = tmp_path / "big.json"
    spec.write_text(json.dumps(many_operations(600)))
    full = load(work, {"spec": str(spec)}).index()[0]
    assert full["left_out"] == 0 and len(full["operations"]) == 600
    assert all("—" not in line for line in full["operations"])  # 600 only fit by name
    spec.write_text(json.dumps(many_operations(200)))
    two_hundred = load(work, {"spec": str(spec)}).index()[0]["operations"]
    assert "- repos_get_item0: GET /repos/{owner}/item0 — Get the repos item number 0 of an owner, with its details. " \
           'per_page: int, page: int, state: "open"|"closed"|"all"' in two_hundred
    assert "- issues_post_item0: POST /issues/{owner}/item0" in " ".join(two_hundred)
    assert sum(len(line) + 1 for line in two_hundred) <= 40_000
    small = load(work, {"spec": str(spec)}, openapi_index_chars=3000).index()[0]
    assert small["left_out"] > 0 and sum(len(line) + 1 for line in small["operations"]) <= 3000


# -- calls checked against the schema ------------------------------------------------------------------------------


def test_a_call_is_checked_against_its_operation_before_anything_is_built(work, items, token):
    apis = load(work, {"spec": str(items), "auth": {"env": "PETS_TOKEN"}})
    with pytest.raises(CallError) as caught:
        apis.prepare({"operation": "putItem", "parameters": {"item_id": "Bad Id", "colour": "red"},
                      "body": {"name": 3, "count": -1}})
    assert caught.value.kind == "invalid"
    assert set(caught.value.problems) == {
        "parameters.colour: not a parameter of putItem (its parameters: item_id)",
        "parameters.item_id: 'Bad Id' does not match '^[a-z0-9-]+$'",
        "body.name: 3 is not of type 'string'",
        "body.count: -1 is less than the minimum of 0"}
    with pytest.raises(CallError) as caught:
        apis.prepare({"operation": "getItem", "parameters": {"item_id": "a"}})
    assert caught.value.problems == ("parameters.X-Trace-Id: required (in header), missing",)
    with pytest.raises(CallError) as caught:
        apis.prepare({"operation": "putItem", "parameters": {"item_id": "a"}})
    assert caught.value.problems == ("body: required (application/json), missing",)
    with pytest.raises(CallError, match="has no operation 'getItems'. Similar: getItem"):
        apis.prepare({"operation": "getItems"})
    with pytest.raises(CallError, match="There is no API named 'other'. The APIs: items."):
        apis.prepare({"api": "other", "operation": "getItem"})


def test_the_request_a_call_makes(work, items, token):
    apis = load(work, {"spec": str(items), "auth": {"env": "PETS_TOKEN"}})
    base = apis.source(None).base_url
    prepared = apis.prepare({"operation": "GET /items/{item_id}",
                             "parameters": {"item_id": "a-1", "verbose": True, "X-Trace-Id": "t 1"}})
    assert prepared.url == f"{base}/items/a-1?verbose=true" and prepared.headers == (("X-Trace-Id", "t 1"),)
    judged = apis.judge({"operation": "putItem", "parameters": {"item_id": "a-1"},
                         "body": {"name": "Ünïcode", "count": 2}})
    assert judged.subjects == ["items.putItem", "items PUT /items/{item_id}"]
    assert judged.detail == (f"PUT {base}/items/a-1\nContent-Type: application/json\n"
                             "Authorization: Bearer (the secret from $PETS_TOKEN)\n\n"
                             '{\n  "name": "Ünïcode",\n  "count": 2\n}')
    assert TOKEN not in judged.detail


def test_path_and_query_serialization(tmp_path, work):
    spec = tmp_path / "ser.yaml"
    spec.write_text(yaml.safe_dump({
        "openapi": "3.1.0", "info": {"title": "Ser", "version": "1"}, "servers": [{"url": "http://127.0.0.1:9/base"}],
        "paths": {"/files/{name}": {"get": {"operationId": "get", "responses": {"200": {"description": "ok"}},
                                            "parameters": [
            {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}},
            {"name": "ids", "in": "query", "schema": {"type": "array", "items": {"type": "integer"}}},
            {"name": "tags", "in": "query", "explode": False, "schema": {"type": "array", "items": {"type": "string"}}},
            {"name": "filter", "in": "query", "style": "deepObject", "schema": {"type": "object"}}]}}}}))
    apis = load(work, {"spec": str(spec)})
    prepared = apis.prepare({"operation": "get", "parameters": {"name": "a/b c", "ids": [1, 2], "tags": ["x", "y"],
                                                                "filter": {"state": "open"}}})
    assert prepared.url == ("http://127.0.0.1:9/base/files/a%2Fb%20c?ids=1&ids=2&tags=x%2Cy&filter%5Bstate%5D=open")
    # a path parameter cannot climb out of the base path
    for climbing in ("..", "."):
        with pytest.raises(CallError, match=f"parameters.name: '{climbing}' is not a path segment"):
            apis.prepare({"operation": "get", "parameters": {"name": climbing}})


# -- sending -------------------------------------------------------------------------------------------------------


def test_a_redirect_elsewhere_is_refused_and_one_within_the_api_is_followed(work, pet_server, other_server, token):
    apis = load(work, {"spec": f"{pet_server.url}/openapi.json", "auth": {"env": "PETS_TOKEN"}})
    received = apis.send(apis.prepare({"operation": "away"}), lambda: False)
    assert received.error == "redirect_refused" and received.status == 302
    assert f"the server redirected to {other_server.url}/collect, outside {pet_server.url}" in received.message
    assert other_server.recorder.seen == []  # nothing (and no token) went there
    home = apis.send(apis.prepare({"operation": "home"}), lambda: False)
    assert (home.status, home.url, json.loads(home.body)["name"]) == (200, f"{pet_server.url}/pets/1", "Rex")


def test_429_and_5xx_are_tried_again_for_idempotent_methods_only(work, pet_server, token):
    apis = load(work, {"spec": f"{pet_server.url}/openapi.json", "auth": {"env": "PETS_TOKEN"}, "retries": 3})
    pet_server.recorder.flaky_left = 2
    received = apis.send(apis.prepare({"operation": "flaky"}), lambda: False)
    assert (received.status, received.attempts, json.loads(received.body)) == (200, 3, {"ok": True})
    posted = apis.send(apis.prepare({"operation": "flakyPost"}), lambda: False)
    assert (posted.status, posted.attempts) == (503, 1)
    assert pet_server.recorder.paths("POST").count("/flaky") == 1
    again = load(work, {"spec": f"{pet_server.url}/openapi.json", "retries": 1, "retry_non_idempotent": True})
    assert again.send(again.prepare({"operation": "flakyPost"}), lambda: False).attempts == 2
    pet_server.recorder.flaky_left, pet_server.recorder.flaky_status = 5, 429
    tired = apis.send(apis.prepare({"operation": "flaky"}), lambda: False)
    assert (tired.status, tired.attempts) == (429, 4)  # the first and three more, then the model reads the 429


def test_a_stop_ends_a_call_in_flight_and_a_timeout_ends_a_slow_one(work, pet_server):
    apis = load(work, {"spec": f"{pet_server.url}/openapi.json"})
    stop = threading.Event()
    outcome = []
    call = threading.Thread(target=lambda: outcome.append(apis.send(apis.prepare({"operation": "slow"}), stop.is_set)))
    call.start()
    deadline = time.monotonic() + 15
    while "/slow" not in pet_server.recorder.paths():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    stop.set()
    call.join(timeout=20)  # the server answers only after 60 s
    assert not call.is_alive() and outcome[0].error == "interrupted" and outcome[0].status is None
    quick = load(work, {"spec": f"{pet_server.url}/openapi.json", "timeout": 0.5})
    slow = quick.send(quick.prepare({"operation": "slow"}), lambda: False)
    assert slow.error == "timeout" and slow.message == "no answer within 0.5 s" and slow.attempts == 1


def test_two_hundred_operations_leave_a_32k_window_room_to_work(tmp_path, work):
    from anges.agents import DefaultAgent
    from anges.models.scripted import ScriptedModel
    from anges.models.tokens import TokenGauge

    spec = tmp_path / "big.json"
    spec.write_text(json.dumps(many_operations(200)))
    model = ScriptedModel([{"analysis": "", "reasoning": "", "actions": [
        {"action_type": "CALL_API", "operation": "repos_get_item0", "parameters": {"owner": "me"}}]},
                           {"analysis": "", "reasoning": "", "actions": [{"action_type": "TASK_COMPLETE", "content": "ok"}]}],
                          context_window=32_768)
    stream = DefaultAgent(inference_func=model, cmd_init_dir=work, config=config_for({"spec": str(spec)})
                          ).run_with_new_request("read one")
    assert stream.events_list[-1].type == "task_completion"  # the prompt fit (the server was not there: a failed call)
    first, second = model.prompts
    assert first.count("\n- ") >= 200 and "per_page: int" in first  # every operation, with its parameters
    room = 32_768 - 8_192
    assert len(first) / 3.5 < 0.6 * room and TokenGauge().estimate(first) < 0.75 * room  # anges' estimate errs high
    assert second.startswith(first.split("\n# History\n")[0])  # the index sits in the stable part


def test_a_key_in_the_query_reaches_the_server_and_no_log(work, pet_server, caplog, monkeypatch):
    monkeypatch.setenv("PETS_KEY", "query-key-0123456789")
    apis = load(work, {"spec": f"{pet_server.url}/openapi.json",
                       "auth": {"type": "api_key", "in": "query", "name": "key", "env": "PETS_KEY"}})
    prepared = apis.prepare({"operation": "echo"})
    assert prepared.url == f"{pet_server.url}/echo" and "query-key" not in apis.judge({"operation": "echo"}).detail
    with caplog.at_level("DEBUG"):
        received = apis.send(prepared, lambda: False)
    assert json.loads(received.body) == {"authorization": None, "query": "key=query-key-0123456789"}
    assert received.url == f"{pet_server.url}/echo"
    assert "HTTP Request: GET" in caplog.text and "query-key-0123456789" not in caplog.text


def test_a_remote_document_reached_from_a_local_one_refers_to_no_local_file(tmp_path, work, pet_server,
                                                                            other_server):
    local = tmp_path / "private.yaml"  # a file of this machine outside the working directory
    local.write_text("P: {name: x-trace-id, in: header, schema: {type: string}}\n")
    spec = write_items_documents(tmp_path / "specs", pet_server.url)
    spec.write_text(spec.read_text().replace("common.yaml#/components/parameters/TraceId",
                                             f"{other_server.url}/doc.json#/P"))
    other_server.recorder.document = {"P": {"$ref": f"file://{local}#/P"}}
    with pytest.raises(ConfigError, match=r"doc.json refers to a local file \(file://.*private.yaml#/P\), which a "
                                          r"remote document may not"):
        load(work, {"spec": str(spec)})
    other_server.recorder.document = {"P": {"name": "x-trace-id", "in": "header", "schema": {"type": "string"}}}
    assert "getItem" in load(work, {"spec": str(spec)}).sources["items"].operations, "a web-only reference is read"


@pytest.mark.parametrize("value", ["Ünïcode", "a\r\nX-Injected: 1"])
def test_a_header_parameter_a_header_cannot_carry_is_refused_before_sending(work, items, value):
    apis = load(work, {"spec": str(items)})
    with pytest.raises(CallError, match="a header parameter holds text a header cannot carry: the call was not sent"
                       ) as caught:
        apis.prepare({"operation": "GET /items/{item_id}", "parameters": {"item_id": "a-1", "X-Trace-Id": value}})
    assert caught.value.problems == ("X-Trace-Id: a header carries only ASCII text without line breaks",)
