"""Reading an OpenAPI document: a file or an http(s) URL, JSON or YAML, with the files and URLs its `$ref`s name,
checked against the specification (openapi-spec-validator) before anything of it is used.

A document decides where calls go and which of them ask first, so it is configuration: none is taken from a place
the run's commands can write, and none reaches into a place hidden from them.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Protocol, cast
from urllib.parse import urldefrag, urlsplit

from anges.exceptions import ConfigError
from anges.util.paths import open_nofollow, resolve

MAX_DOCUMENT_BYTES = 20_000_000
FETCH_SECONDS = 30.0
MAX_ERRORS_SHOWN = 3
VERSIONS = {"3.0": "OpenAPIV30SpecValidator", "3.1": "OpenAPIV31SpecValidator"}
_VALID: set[str] = set()
"""The documents found valid (their contents' hashes): checking a large one takes seconds."""
RESOLVED_CACHE = 1024
"""`$ref`s the validator keeps resolved (its default, 128, makes a large document's check several times slower)."""


class Place(Protocol):
    """What the sandbox says of a path (`anges.safety.sandbox.SandboxSettings`)."""

    def is_hidden(self, path: str) -> bool: ...
    def can_write(self, path: str) -> bool: ...


class Document:
    """One source's document and everything it refers to, each file or URL read once."""

    def __init__(self, spec: str, cwd: str, place: Place):
        self.place = place
        self.spec = spec
        self.uri = _as_uri(spec, cwd)
        self.local = self.uri.startswith("file:")
        self._read: dict[str, Any] = {}
        self.root_hidden = self.local and place.is_hidden(_path_of(self.uri))
        self.contents = self.read(self.uri)
        if not isinstance(self.contents, dict):
            raise ConfigError(f"{spec}: not an OpenAPI document (expected a mapping at the top level)")
        self.version = _version(spec, self.contents)

    def read(self, uri: str) -> Any:
        """The parsed contents of one file or URL of the document (`uri` without its fragment)."""
        uri = urldefrag(uri)[0]
        if uri not in self._read:
            if uri.startswith("file:"):
                if not self.local:  # a document from the web names no file of this machine
                    raise ConfigError(f"{self.spec}: refers to a local file ({uri}), which a remote document may not")
                self._read[uri] = _parse(self._file(_path_of(uri)), uri)
            elif urlsplit(uri).scheme in ("http", "https"):
                self._read[uri] = _only_web_references(_parse(_fetch(uri), uri), uri, self.spec)
            else:
                raise ConfigError(f"{self.spec}: cannot read {uri!r}: only files and http(s) URLs are read")
        return self._read[uri]

    def validate(self) -> None:
        """ConfigError naming the first problems when the document does not follow the OpenAPI specification (a
        document already found valid in this process, the same to the byte, is not checked again)."""
        key = hashlib.sha256(json.dumps(self.contents, sort_keys=True).encode()).hexdigest()
        if key not in _VALID:
            self._check()
            _VALID.add(key)

    def _check(self) -> None:
        import openapi_spec_validator
        from jsonschema_path import SchemaPath
        from referencing.exceptions import Unresolvable

        handlers = {scheme: self.read for scheme in ("file", "http", "https")}
        validator = getattr(openapi_spec_validator, VERSIONS[self.version])
        path = SchemaPath.from_dict(self.contents, base_uri=self.uri, handlers=handlers,
                                    resolved_cache_maxsize=RESOLVED_CACHE)
        try:
            errors = _first(validator(path).iter_errors())
        except Unresolvable as exc:
            raise ConfigError(f"{self.spec}: a $ref cannot be resolved: {_cause(exc)}") from None
        if errors:
            shown = "; ".join(_problem(error) for error in errors)
            raise ConfigError(f"{self.spec}: not a valid OpenAPI {self.version} document: {shown}")

    def resolver(self):
        """A `referencing` resolver of the document's `$ref`s (files and URLs read through `read`)."""
        from referencing import Registry
        from referencing.jsonschema import DRAFT202012

        registry: Registry = Registry(retrieve=lambda uri: DRAFT202012.create_resource(self.read(uri)))
        return registry.with_resource(self.uri, DRAFT202012.create_resource(self.contents)).resolver(self.uri)

    def _file(self, path: str) -> bytes:
        named = os.path.abspath(path)
        real = resolve(named)
        if not os.path.isfile(real):
            raise ConfigError(f"{named}: cannot read the OpenAPI document: no such file")
        if self.place.can_write(real):
            raise ConfigError(f"{named}: lies where the agent's commands can write, so the agent could have written "
                              "it; an API description decides where calls go and which ask first: keep it outside "
                              "the working directory and the writable paths")
        if self.place.is_hidden(real) and (real != named or not self.root_hidden):
            raise ConfigError(f"{named}: leads into a place hidden from commands ({real}); not read")
        try:
            with os.fdopen(open_nofollow(real, os.O_RDONLY | os.O_NONBLOCK), "rb") as stream:
                data = stream.read(MAX_DOCUMENT_BYTES + 1)
        except OSError as exc:
            raise ConfigError(f"{named}: cannot read the OpenAPI document: {exc.strerror or exc}") from None
        if len(data) > MAX_DOCUMENT_BYTES:
            raise ConfigError(f"{named}: over {MAX_DOCUMENT_BYTES:,} bytes: not read")
        return data


def _as_uri(spec: str, cwd: str) -> str:
    spec = spec.strip()
    if urlsplit(spec).scheme in ("http", "https"):
        return spec
    from pathlib import Path

    path = Path(os.path.expanduser(spec))
    return (path if path.is_absolute() else Path(cwd) / path).absolute().as_uri()


def _path_of(uri: str) -> str:
    from urllib.parse import unquote

    return unquote(urlsplit(uri).path)


def _fetch(url: str) -> bytes:
    import httpx2

    try:
        with httpx2.Client(timeout=FETCH_SECONDS, follow_redirects=True) as client, client.stream("GET", url) as reply:
            if reply.status_code >= 400:
                raise ConfigError(f"{url}: the server answered {reply.status_code} {reply.reason_phrase}")
            data = b""
            for chunk in reply.iter_bytes():
                data += chunk
                if len(data) > MAX_DOCUMENT_BYTES:
                    raise ConfigError(f"{url}: over {MAX_DOCUMENT_BYTES:,} bytes: not read")
            return data
    except httpx2.HTTPError as exc:
        raise ConfigError(f"{url}: cannot fetch the OpenAPI document: {exc or type(exc).__name__}") from None


REFERRING_KEYS = ("$ref", "$id", "$dynamicRef", "$schema")
"""The keys whose value is a URI a resolver may read (or resolve the document's other references against)."""


def _only_web_references(contents: Any, uri: str, spec: str) -> Any:
    """`contents` of a document read from the web, once none of its references names a file of this machine (also
    when a local document refers to it)."""
    pending = [contents]
    while pending:
        node = pending.pop()
        if isinstance(node, list):
            pending += node
        elif isinstance(node, dict):
            for key, value in node.items():
                if key in REFERRING_KEYS and isinstance(value, str) and urlsplit(value.strip()).scheme == "file":
                    raise ConfigError(f"{spec}: {uri} refers to a local file ({value[:200]}), which a remote "
                                      "document may not")
                pending.append(value)
    return contents


def _parse(data: bytes, uri: str) -> Any:
    """JSON, else YAML (timestamps left as strings; keys made strings, as JSON has them)."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ConfigError(f"{uri}: not UTF-8 text") from None
    try:
        return json.loads(text)
    except ValueError:
        pass
    import yaml
    from jsonschema_path.loaders import JsonschemaSafeLoader

    try:
        return json.loads(json.dumps(yaml.load(text, cast(Any, JsonschemaSafeLoader))))  # a safe loader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise ConfigError(f"{uri}: neither JSON nor valid YAML{where}: {getattr(exc, 'problem', exc)}") from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{uri}: holds values JSON cannot ({exc})") from None


def _version(spec: str, contents: dict) -> str:
    if "swagger" in contents:
        raise ConfigError(f"{spec}: a Swagger {contents.get('swagger')} document; anges reads OpenAPI 3.0 and 3.1 "
                          "(convert it, e.g. with swagger2openapi)")
    version = str(contents.get("openapi") or "")
    for known in VERSIONS:
        if version.startswith(known + "."):
            return known
    raise ConfigError(f"{spec}: not an OpenAPI 3.0 or 3.1 document (its 'openapi' field is {version or 'missing'!r})")


def _first(errors) -> list:
    found = []
    for error in errors:
        found.append(error)
        if len(found) == MAX_ERRORS_SHOWN:
            break
    return found


def _problem(error) -> str:
    where = "/".join(str(part) for part in getattr(error, "absolute_path", ()) or ())
    message = " ".join(str(getattr(error, "message", error)).strip().split("\n\n")[0].split())
    return f"{message[:300]}" + (f" (at {where})" if where else "")


def _cause(exc: BaseException) -> str:
    while exc.__cause__ is not None and not isinstance(exc, ConfigError):
        exc = exc.__cause__
    return str(exc) or type(exc).__name__
