"""The operations of a document: their parameters and bodies with every `$ref` resolved (a recursive schema is cut
where it repeats), as the index in the prompt lists them and as one operation's whole schema reads."""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urldefrag, urljoin

from anges.util.clipping import clip, shorten

if TYPE_CHECKING:
    from anges.tools.openapi.documents import Document

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
LOCATIONS = ("path", "query", "header", "cookie")
IGNORED_HEADERS = ("accept", "content-type", "authorization")
"""Header parameters the specification says to ignore: anges sets these itself."""
MAX_DEPTH = 40
SUMMARY_CHARS = 100
DESCRIPTION_CHARS = 1500
SCHEMA_CHARS = 6000
JSON_TYPES = re.compile(r"^application/([\w.+-]*\+)?json\b|^\*/\*$")
BODY_TYPES = ("application/x-www-form-urlencoded", "text/")
"""What anges can send besides JSON: a form of fields, or text."""


@dataclass(frozen=True)
class Parameter:
    """A path, query, header or cookie parameter."""

    name: str
    location: str
    required: bool
    schema: dict
    description: str = ""
    style: str = ""
    explode: bool | None = None
    as_json: bool = False
    """Its `content` is application/json: the value is sent as JSON text."""


@dataclass(frozen=True)
class Body:
    """The request body anges sends: the media type it chose and its schema."""

    media_type: str
    schema: dict
    required: bool = False
    description: str = ""


@dataclass(frozen=True)
class Operation:
    """One method on one path."""

    id: str
    """The operationId, or `METHOD /path` when the document gives none."""
    method: str
    path: str
    summary: str = ""
    description: str = ""
    parameters: tuple[Parameter, ...] = ()
    body: Body | None = None
    unsupported_body: str = ""
    """The media types of a body anges cannot send (multipart uploads, binary); "" when none."""
    responses: tuple[tuple[str, str], ...] = ()
    """(status, description), in the document's order."""
    deprecated: bool = False
    names: tuple[str, ...] = field(default=())
    """Every way to name it: its id and `METHOD /path`."""

    @property
    def route(self) -> str:
        return f"{self.method} {self.path}"

    def parameter(self, name: str) -> Parameter | None:
        return next((p for p in self.parameters if p.name == name), None)


def read_operations(document: Document) -> list[Operation]:
    """Every operation of the document, in its order (a `$ref`'d path item followed)."""
    inliner = _Inliner(document)
    found = []
    paths = document.contents.get("paths") or {}
    for path, item in paths.items():
        item, base = inliner.follow(item, document.uri)
        if not isinstance(item, dict):
            continue
        shared = item.get("parameters") or []
        for method in METHODS:
            operation = item.get(method)
            if isinstance(operation, dict):
                found.append(_operation(inliner, path, method, operation, shared, base))
    return found


def chosen(operations: list[Operation], patterns: list[str]) -> list[Operation]:
    """The operations a source offers: those whose id or `METHOD /path` matches a pattern (all without patterns)."""
    if not patterns:
        return operations
    return [op for op in operations if any(_matches(pattern, name) for pattern in patterns for name in op.names)]


def _matches(pattern: str, name: str) -> bool:
    if pattern.startswith("re:"):
        return re.search(pattern[3:], name) is not None
    return fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(name.lower(), pattern.lower())


# -- what the model reads -----------------------------------------------------------------------------------------


def index_line(op: Operation, detail: int = 2) -> str:
    """One operation in the prompt's index: id, method and path, summary, and (at `detail` 2) its parameters and
    body fields with their types (`*`: required); `detail` 1 leaves the parameters out, 0 the summary too."""
    head = f"- {op.id}: {op.route}" if op.id != op.route else f"- {op.route}"
    if detail == 0:
        return head
    summary = shorten(" ".join((op.summary or op.description).split()), SUMMARY_CHARS if detail > 1 else 60)
    line = head + (f" — {summary}" if summary else "") + (" (deprecated)" if op.deprecated else "")
    if detail < 2:
        return line
    fields = [f"{p.name}{'*' if p.required else ''}: {type_of(p.schema)}" for p in op.parameters
              if p.location != "path"]
    if op.body is not None:
        fields += body_fields(op.body)
    return line + (f". {', '.join(fields)}" if fields else "")


def body_fields(body: Body) -> list[str]:
    """A body's top-level fields as the index lists them (`body*: TYPE` when it is not an object)."""
    schema = body.schema
    props = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(props, dict) or not props:
        return [f"body{'*' if body.required else ''}: {type_of(schema)}"]
    required = set(schema.get("required") or [])
    return [f"body.{name}{'*' if name in required else ''}: {type_of(sub)}" for name, sub in props.items()]


def type_of(schema: Any, depth: int = 0) -> str:
    """A schema's type in a few characters: `str`, `int`, `[str]`, `obj`, `"a"|"b"`, `str|null`."""
    if not isinstance(schema, dict) or depth > 2:
        return "any"
    if "enum" in schema and isinstance(schema["enum"], list):
        values = "|".join(json.dumps(value) for value in schema["enum"][:6])
        return values + ("|…" if len(schema["enum"]) > 6 else "")
    for key in ("oneOf", "anyOf"):
        if isinstance(schema.get(key), list):
            return "|".join(dict.fromkeys(type_of(sub, depth + 1) for sub in schema[key])) or "any"
    if isinstance(schema.get("allOf"), list) and len(schema["allOf"]) == 1:
        return type_of(schema["allOf"][0], depth + 1)
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind else []
    if not kinds and "properties" in schema:
        kinds = ["object"]
    names = []
    for each in kinds:
        if each == "array":
            names.append(f"[{type_of(schema.get('items'), depth + 1)}]")
        else:
            names.append({"string": "str", "integer": "int", "number": "num", "boolean": "bool",
                          "object": "obj"}.get(str(each), str(each)))
    text = "|".join(names) or "any"
    return text + ("|null" if schema.get("nullable") is True else "")


def describe(op: Operation, base_url: str) -> str:
    """One operation whole, as DESCRIBE_API_OPERATION and a call the schema refused show it."""
    lines = [f"{op.id}: {op.method} {base_url.rstrip('/')}{op.path}" + (" (deprecated)" if op.deprecated else "")]
    text = "\n".join(part for part in (op.summary, op.description) if part).strip()
    if text:
        lines.append(clip(text, DESCRIPTION_CHARS))
    if op.parameters:
        lines.append("parameters:")
        for p in op.parameters:
            about = f" — {shorten(' '.join(p.description.split()), 300)}" if p.description else ""
            lines.append(f"- {p.name} (in {p.location}{', required' if p.required else ''}): "
                         f"{compact(p.schema)}{about}")
    if op.body is not None:
        required = ", required" if op.body.required else ""
        lines.append(f"body ({op.body.media_type}{required}): {compact(op.body.schema)}")
    elif op.unsupported_body:
        lines.append(f"body: {op.unsupported_body}, which CALL_API cannot send")
    if op.responses:
        lines.append("responses: " + "; ".join(f"{code} {shorten(' '.join(text.split()), 80)}".strip()
                                               for code, text in op.responses))
    return "\n".join(lines)


def compact(schema: Any) -> str:
    """A schema as one line of JSON (without titles), cut to SCHEMA_CHARS."""
    from anges.tools.schemas import compact_schema

    return clip(compact_schema(schema), SCHEMA_CHARS)


# -- reading one operation ----------------------------------------------------------------------------------------


def _operation(inliner: _Inliner, path: str, method: str, raw: dict, shared: list, base: str) -> Operation:
    params: dict[tuple[str, str], Parameter] = {}
    for item in [*shared, *(raw.get("parameters") or [])]:  # the operation's own win over the path's
        param = _parameter(inliner, item, base)
        if param is not None:
            params[(param.name, param.location)] = param
    body, unsupported = _body(inliner, raw.get("requestBody"), base)
    route = f"{method.upper()} {path}"
    op_id = str(raw.get("operationId") or "").strip() or route
    responses = raw["responses"] if isinstance(raw.get("responses"), dict) else {}
    return Operation(
        id=op_id, method=method.upper(), path=path, summary=str(raw.get("summary") or "").strip(),
        description=str(raw.get("description") or "").strip(), parameters=tuple(params.values()), body=body,
        unsupported_body=unsupported, deprecated=raw.get("deprecated") is True,
        responses=tuple((str(code), _description(inliner, response, base)) for code, response in responses.items()),
        names=tuple(dict.fromkeys([op_id, route])))


def _parameter(inliner: _Inliner, item: Any, base: str) -> Parameter | None:
    raw, base = inliner.follow(item, base)
    if not isinstance(raw, dict) or raw.get("in") not in LOCATIONS or not raw.get("name"):
        return None
    name, location = str(raw["name"]), str(raw["in"])
    if location == "header" and name.lower() in IGNORED_HEADERS:
        return None
    schema, as_json = raw.get("schema"), False
    content = raw.get("content")
    if schema is None and isinstance(content, dict) and content:
        media, entry = next(iter(content.items()))
        schema, as_json = (entry or {}).get("schema"), bool(JSON_TYPES.match(str(media)))
    return Parameter(name, location, location == "path" or raw.get("required") is True,
                     inliner.inline(schema if isinstance(schema, dict) else {}, base),
                     str(raw.get("description") or "").strip(), str(raw.get("style") or ""),
                     raw["explode"] if isinstance(raw.get("explode"), bool) else None, as_json)


def _body(inliner: _Inliner, item: Any, base: str) -> tuple[Body | None, str]:
    raw, base = inliner.follow(item, base)
    if not isinstance(raw, dict) or not isinstance(raw.get("content"), dict):
        return None, ""
    content = raw["content"]
    media = next((m for m in content if JSON_TYPES.match(m)), None) or \
        next((m for m in content if m.startswith(BODY_TYPES)), None)
    if media is None:
        return None, ", ".join(content) or "a body"
    schema = (content[media] or {}).get("schema") or {}
    return Body(media, inliner.inline(schema, base), raw.get("required") is True,
                str(raw.get("description") or "").strip()), ""


def _description(inliner: _Inliner, item: Any, base: str) -> str:
    raw, _ = inliner.follow(item, base)
    return str(raw.get("description") or "") if isinstance(raw, dict) else ""


class _Inliner:
    """Resolves `$ref`s (in this document or another file or URL) into plain data; a schema that refers to itself is
    cut where it repeats, with a note."""

    def __init__(self, document: Document):
        self.resolver = document.resolver()
        self.memo: dict[str, Any] = {}

    def follow(self, node: Any, base: str) -> tuple[Any, str]:
        """`node` with its own `$ref` chain followed (not those inside it), and the URI of the file it lies in."""
        seen: set[str] = set()
        while isinstance(node, dict) and isinstance(node.get("$ref"), str) and len(seen) < MAX_DEPTH:
            target = urljoin(base, node["$ref"])
            if target in seen:
                return {}, base
            seen.add(target)
            node, base = self._lookup(target), urldefrag(target)[0]
        return node, base

    def inline(self, node: Any, base: str, seen: tuple[str, ...] = ()) -> Any:
        if isinstance(node, list):
            return [self.inline(item, base, seen) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if not isinstance(ref, str):
            return {key: self.inline(value, base, seen) for key, value in node.items()}
        target = urljoin(base, ref)
        if target in seen or len(seen) >= MAX_DEPTH:
            return {"description": f"(recursive: the same as {ref.rsplit('/', 1)[-1]}; any value is accepted here)"}
        if target not in self.memo:
            self.memo[target] = self.inline(self._lookup(target), urldefrag(target)[0], (*seen, target))
        resolved = self.memo[target]
        siblings = {key: self.inline(value, base, seen) for key, value in node.items() if key != "$ref"}
        return {**resolved, **siblings} if siblings and isinstance(resolved, dict) else resolved

    def _lookup(self, target: str) -> Any:
        from referencing.exceptions import Unresolvable

        from anges.exceptions import ConfigError

        try:
            return self.resolver.lookup(target).contents
        except Unresolvable as exc:
            raise ConfigError(f"a $ref cannot be resolved: {target} ({exc})") from None
