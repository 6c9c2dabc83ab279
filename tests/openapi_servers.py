"""A small FastAPI application on 127.0.0.1 (uvicorn in a thread) for the OpenAPI tool's tests, and the hand-written
OpenAPI 3.0 YAML documents (two files, `$ref`s across them) that describe part of it.

The application records every request it gets (`app.state.seen`), checks a bearer token where its routes ask for one,
and has routes that misbehave on purpose: a redirect to another server, a 503 before it answers, a reply that takes
long, one that echoes what it was sent (the Authorization header too), a large body.
"""

import asyncio
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel, Field

TOKEN = "pets-token-0123456789abcdef"
"""The bearer token the application wants (and the tests give anges through an environment variable)."""


@dataclass
class Seen:
    """One request the application received."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Recorder:
    seen: list[Seen] = field(default_factory=list)
    flaky_left: int = 0
    flaky_status: int = 503
    document: dict | None = None
    """What `/doc.json` of `other_server` serves."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def paths(self, method: str | None = None) -> list[str]:
        return [s.path for s in self.seen if method is None or s.method == method]


class NewPet(BaseModel):
    name: str = Field(min_length=1)
    tag: str | None = None
    age: int = Field(default=0, ge=0)


def make_app(recorder: Recorder, redirect_to: str = ""):
    from fastapi import Depends, FastAPI, Header, HTTPException, Request, Response
    from fastapi.responses import JSONResponse, RedirectResponse
    from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

    app = FastAPI(title="Pet Store", version="1.0.0")
    bearer = HTTPBearer()
    pets: dict[int, dict] = {1: {"id": 1, "name": "Rex", "tag": "dog"}, 2: {"id": 2, "name": "Tom", "tag": "cat"}}

    @app.middleware("http")
    async def record(request: Request, call_next):
        body = await request.body()
        with recorder.lock:
            recorder.seen.append(Seen(request.method, request.url.path, request.url.query,
                                      {k.lower(): v for k, v in request.headers.items()}, body))
        return await call_next(request)

    def signed(credentials: HTTPAuthorizationCredentials = Depends(bearer)) -> None:  # noqa: B008 - FastAPI's way
        if credentials.credentials != TOKEN:
            raise HTTPException(401, "bad token")

    @app.get("/pets", operation_id="listPets", summary="List the pets", dependencies=[Depends(signed)])
    def list_pets(limit: int = 10, tag: str | None = None):
        found = [p for p in pets.values() if tag is None or p["tag"] == tag]
        return found[:limit]

    @app.get("/pets/{pet_id}", operation_id="getPet", summary="One pet", dependencies=[Depends(signed)])
    def get_pet(pet_id: int):
        if pet_id not in pets:
            raise HTTPException(404, "no such pet")
        return pets[pet_id]

    @app.post("/pets", operation_id="createPet", summary="Add a pet", status_code=201,
              dependencies=[Depends(signed)])
    def create_pet(pet: NewPet):
        new = {"id": max(pets) + 1, **pet.model_dump()}
        pets[new["id"]] = new
        return new

    @app.delete("/pets/{pet_id}", operation_id="deletePet", summary="Remove a pet", dependencies=[Depends(signed)])
    def delete_pet(pet_id: int):
        pets.pop(pet_id, None)
        return Response(status_code=204)

    @app.get("/items/{item_id}", operation_id="getItem", summary="An item (the hand-written document's)")
    def get_item(item_id: str, verbose: bool = False, x_trace_id: str | None = Header(default=None),
                 authorization: str | None = Header(default=None)):
        return {"item_id": item_id, "verbose": verbose, "trace": x_trace_id, "signed": authorization == f"Bearer {TOKEN}"}

    @app.put("/items/{item_id}", operation_id="putItem", summary="Store an item")
    async def put_item(item_id: str, request: Request, authorization: str | None = Header(default=None)):
        return {"item_id": item_id, "stored": await request.json(), "signed": authorization == f"Bearer {TOKEN}"}

    @app.get("/echo", operation_id="echo", summary="What the request carried, the Authorization header too")
    def echo(request: Request):
        return {"authorization": request.headers.get("authorization"), "query": request.url.query}

    @app.get("/away", operation_id="away", summary="Redirects to another server")
    def away():
        return RedirectResponse(redirect_to + "/collect", status_code=302)

    @app.get("/home", operation_id="home", summary="Redirects within the API")
    def home():
        return RedirectResponse("/pets/1", status_code=302)

    @app.get("/flaky", operation_id="flaky", summary="Fails with a 503 before it answers")
    def flaky():
        with recorder.lock:
            recorder.flaky_left -= 1
            failing = recorder.flaky_left >= 0
        if failing:
            return JSONResponse({"error": "busy"}, status_code=recorder.flaky_status, headers={"Retry-After": "0"})
        return {"ok": True}

    @app.post("/flaky", operation_id="flakyPost", summary="Fails with a 503 (a POST)")
    def flaky_post():
        return JSONResponse({"error": "busy"}, status_code=503, headers={"Retry-After": "0"})

    @app.get("/slow", operation_id="slow", summary="Answers after a minute")
    async def slow():
        await asyncio.sleep(60)
        return {"late": True}

    @app.get("/big", operation_id="big", summary="A large JSON list")
    def big(count: int = 3000):
        return [{"n": n, "word": f"item-{n}"} for n in range(count)]

    return app


class AppServer:
    """Runs an ASGI app with uvicorn on a thread, on a free loopback port."""

    def __init__(self, app):
        import uvicorn

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="error", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def start(self) -> "AppServer":
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        return self

    def close(self) -> None:
        self.server.should_exit = True
        self.server.force_exit = True
        self.thread.join(timeout=10)
        self.sock.close()


@pytest.fixture
def other_server():
    """Another server (another port: another origin) that records what reaches it: where a redirect points."""
    from fastapi import FastAPI, Request

    recorder = Recorder()
    app = FastAPI()

    @app.get("/doc.json")
    def document():
        return recorder.document

    @app.get("/collect")
    def collect(request: Request):
        recorder.seen.append(Seen("GET", "/collect", request.url.query, dict(request.headers), b""))
        return {"collected": True}

    server = AppServer(app).start()
    server.recorder = recorder  # type: ignore[attr-defined]
    yield server
    server.close()


@pytest.fixture
def pet_server(other_server):
    """The pet store, with its recorder as `pet_server.recorder`."""
    recorder = Recorder()
    server = AppServer(make_app(recorder, other_server.url)).start()
    server.recorder = recorder  # type: ignore[attr-defined]
    yield server
    server.close()


MAIN_YAML = """\
openapi: 3.0.3
info: {title: Items, version: "1.0"}
servers:
  - url: "{base}"
security:
  - token: []
paths:
  /items/{item_id}:
    parameters:
      - $ref: "common.yaml#/components/parameters/ItemId"
    get:
      operationId: getItem
      summary: Read an item
      parameters:
        - name: verbose
          in: query
          schema: {type: boolean}
        - $ref: "common.yaml#/components/parameters/TraceId"
      responses:
        "200":
          description: the item
          content:
            application/json:
              schema: {$ref: "common.yaml#/components/schemas/Item"}
    put:
      operationId: putItem
      summary: Store an item
      requestBody:
        required: true
        content:
          application/json:
            schema: {$ref: "common.yaml#/components/schemas/Item"}
      responses:
        "200": {description: stored}
components:
  securitySchemes:
    token: {type: http, scheme: bearer}
"""

COMMON_YAML = """\
components:
  parameters:
    ItemId:
      name: item_id
      in: path
      required: true
      schema: {type: string, pattern: "^[a-z0-9-]+$"}
    TraceId:
      name: X-Trace-Id
      in: header
      required: true
      schema: {type: string}
  schemas:
    Item:
      type: object
      required: [name, count]
      properties:
        name: {type: string}
        count: {type: integer, minimum: 0}
        note: {type: string, nullable: true}
        parts:
          type: array
          items: {$ref: "#/components/schemas/Item"}
"""


def write_items_documents(folder: Path, base_url: str) -> Path:
    """The hand-written two-file document in `folder`; returns the main file."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "common.yaml").write_text(COMMON_YAML)
    main = folder / "items.yaml"
    main.write_text(MAIN_YAML.replace("{base}", base_url))
    assert yaml.safe_load(main.read_text())["openapi"] == "3.0.3"
    return main


def many_operations(count: int) -> dict:
    """An OpenAPI 3.1 document of `count` operations, shaped like a large real API's: a few query parameters, a
    path parameter, a JSON body on writes, summaries of a sentence."""
    paths: dict = {}
    resources = ["repos", "issues", "pulls", "users", "orgs", "teams", "projects", "releases", "actions", "gists"]
    for n in range(count):
        resource = resources[n % len(resources)]
        path = f"/{resource}/{{owner}}/item{n // 4}"
        method = ("get", "post", "patch", "delete")[n % 4]
        operation = {
            "operationId": f"{resource}_{method}_item{n // 4}",
            "summary": f"{method.capitalize()} the {resource} item number {n // 4} of an owner, with its details",
            "parameters": [{"name": "owner", "in": "path", "required": True, "schema": {"type": "string"}}],
            "responses": {"200": {"description": "ok"}},
        }
        if method == "get":
            operation["parameters"] += [
                {"name": "per_page", "in": "query", "schema": {"type": "integer", "maximum": 100}},
                {"name": "page", "in": "query", "schema": {"type": "integer"}},
                {"name": "state", "in": "query", "schema": {"type": "string", "enum": ["open", "closed", "all"]}},
            ]
        elif method in ("post", "patch"):
            operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "required": ["title"],
                "properties": {"title": {"type": "string"}, "body": {"type": "string"},
                               "labels": {"type": "array", "items": {"type": "string"}},
                               "assignee": {"type": "string"}}}}}}
        paths.setdefault(path, {})[method] = operation
    return {"openapi": "3.1.0", "info": {"title": "Big", "version": "1"},
            "servers": [{"url": "http://127.0.0.1:9/api"}], "paths": paths}
