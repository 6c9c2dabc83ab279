"""CALL_API and DESCRIBE_API_OPERATION: the operations of web APIs described by OpenAPI documents, called by anges
itself (the model never sees the credential), checked against their schema before anything is sent."""

from __future__ import annotations

import json
import tempfile
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from anges.actions.base import Action, ActionContext
from anges.prompt.parsing import Param
from anges.store.events import Event
from anges.store.results import APICall

if TYPE_CHECKING:
    from anges.config.types import Config
    from anges.tools.openapi.client import Received
    from anges.tools.openapi.sources import APIs

SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
TEXT_TYPES = ("text/", "application/xml", "application/javascript", "application/x-www-form-urlencoded")


def apis_for(config: Config, cwd: str) -> APIs | None:
    """The web APIs of `tools.openapi` for a run in `cwd` (each document read and checked now); None when none."""
    if not config.tools.openapi:
        return None
    from anges.safety.sandbox import SandboxSettings
    from anges.tools.openapi.sources import APIs

    place = SandboxSettings.for_run(config.safety, cwd)
    return APIs.load(config.tools, cwd, place, config.safety.background_log_cap)


class CallAPI(Action):
    """Calls one operation of a configured web API and records the answer: status, a few headers, the body."""

    type = "CALL_API"
    guide_template = "actions/call_api.j2"
    params = {
        "operation": Param(str, non_empty=True, description="the operationId, or METHOD /path, as the index lists it"),
        "api": Param(str, required=False, description="the API's name, when several are configured"),
        "parameters": Param(dict, required=False, description="path, query and header parameters by name"),
        "body": Param(object, required=False, description="the request body (JSON)"),
    }

    def __init__(self, apis: APIs):
        super().__init__()
        self.apis = apis

    def may_change_files(self, args: dict) -> bool:
        """A call that is not a read may change anything: its step is checkpointed (and marked as reaching out)."""
        from anges.tools.openapi.calls import CallError

        try:
            return self.apis.prepare(args).method not in SAFE_METHODS
        except CallError:
            return False  # not sent

    def run(self, ctx: ActionContext, args: dict) -> Event:
        from anges.tools.openapi.calls import CallError

        facts: dict[str, Any] = {"action_type": self.type, "api": str(args.get("api") or ""),
                                 "operation": args["operation"].strip()}
        try:
            prepared = self.apis.prepare(args)
        except CallError as exc:
            with suppress(CallError):
                facts["api"] = self.apis.source(args.get("api")).name
            return _recorded({**facts, "error": exc.kind, "message": str(exc), "problems": list(exc.problems),
                              "schema": self._schema(args) if exc.problems else ""})
        facts.update(api=prepared.api, operation=prepared.operation.id, method=prepared.method, url=prepared.url)
        received = self.apis.send(prepared, ctx.interrupt_check)
        facts.update(url=received.url, attempts=received.attempts, duration=round(received.duration, 3))
        if received.error:
            facts.update(error=received.error, message=received.message)
        if received.status is not None:
            facts.update(status=received.status, reason=received.reason, headers=received.headers,
                         content_type=received.headers.get("content-type", ""),
                         **_body_facts(received, ctx.secrets, ctx.config.shell_output_cap, _directory(ctx)))
        return _recorded(facts)

    def _schema(self, args: dict) -> str:
        try:
            return self.apis.describe(args.get("api"), str(args.get("operation") or ""))
        except Exception:  # noqa: BLE001 - the call's own error says what is wrong
            return ""


class DescribeAPIOperation(Action):
    """Shows one operation of a configured web API whole: every parameter and the body with their schemas."""

    type = "DESCRIBE_API_OPERATION"
    guide_template = "actions/describe_api_operation.j2"
    params = {
        "operation": Param(str, non_empty=True, description="the operationId or METHOD /path (or a word to search)"),
        "api": Param(str, required=False, description="the API's name, when several are configured"),
    }

    def __init__(self, apis: APIs):
        super().__init__()
        self.apis = apis

    def may_change_files(self, args: dict) -> bool:
        return False

    def run(self, ctx: ActionContext, args: dict) -> Event:
        from anges.tools.openapi.calls import CallError

        facts = {"action_type": self.type, "api": str(args.get("api") or ""), "operation": args["operation"].strip()}
        try:
            text = self.apis.describe(args.get("api"), facts["operation"])
        except CallError as exc:
            return Event("action", content=f"{self.type} FAILED: {exc}", message=f"{self.type} failed: {exc}",
                         data={**facts, "error": exc.kind})
        return Event("action", content=text, message=f"described {facts['operation']}", data=facts)


def _recorded(facts: dict) -> Event:
    """The call's event: its facts, and the text the model reads (made from them)."""
    event = Event("action", data=facts)
    call = APICall.of(event)
    assert call is not None
    name = f"{call.api}.{call.operation}" if call.api else call.operation
    event.message = f"{call.method} {call.url}: {call.outcome()}" if call.sent else f"{name}: {call.outcome()}"
    event.content = call.text()
    return event


def _directory(ctx: ActionContext) -> str | None:
    """Where a body's file goes: the run's scratch directory, which sandboxed commands can read."""
    return ctx.output_dir or (ctx.runner.scratch if ctx.runner is not None else None)


def _body_facts(received: Received, secrets: list[str], cap: int, directory: str | None) -> dict[str, Any]:
    """The body as the model reads it (JSON indented, secrets masked, its head and tail when over `cap`), and the file
    that holds it whole."""
    from anges.safety.capture import StreamView

    if not received.body:
        return {"body_bytes": 0}
    text, kind = _as_text(received.body, received.headers.get("content-type", "").lower())
    data = received.body if text is None else text.encode()
    facts: dict[str, Any] = {"body_bytes": received.size, "truncated": received.truncated,
                             "body_path": _save(data, directory, secrets, kind)}
    if text is None:
        return {**facts, "binary": True}
    view = StreamView(max(cap, 1))
    view.add(data)
    shown, cut = view.render(cap, secrets)
    return {**facts, "body": shown, "body_cut": cut, "body_lines": view.lines}


def _as_text(body: bytes, content_type: str) -> tuple[str | None, str]:
    """A JSON body indented, a text body decoded (None for one that is not text), and the suffix of its file."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        if not content_type.startswith(TEXT_TYPES):
            return None, ".bin"
        text = body.decode("latin-1")
    if "json" in content_type or text.lstrip().startswith(("{", "[")):
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False), ".json"
        except ValueError:
            pass
    return (text, ".txt") if "\x00" not in text else (None, ".bin")


def _save(data: bytes, directory: str | None, secrets: list[str], suffix: str) -> str | None:
    """The body in a file of the run's scratch directory (secrets masked); None when there is none."""
    from anges.safety.capture import CappedLog

    if directory is None:
        return None
    try:
        fd, path = tempfile.mkstemp(prefix="anges-api-", suffix=suffix, dir=directory)
        with CappedLog(fd, 2 * len(data) + 1024, secrets) as log:  # by its descriptor: never reopened by name
            log.write(data)
    except OSError:
        return None
    return path
