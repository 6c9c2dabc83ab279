"""A call as the model asks for it, checked against its operation's schema and made into the request anges would
send: method, URL (under the source's base URL, nowhere else), the model's headers and the body."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlencode, urlsplit

from anges.exceptions import AngesError

if TYPE_CHECKING:
    from anges.tools.openapi.operations import Body, Operation, Parameter

MAX_PROBLEMS = 8


class CallError(AngesError):
    """A call that is not made: `kind` is unknown_api, unknown_operation, invalid (the schema refused it: `problems`
    says why), unsupported, outside (its URL would leave the base URL)."""

    def __init__(self, message: str, kind: str, problems: tuple[str, ...] = ()):
        super().__init__(message)
        self.kind = kind
        self.problems = problems


@dataclass(frozen=True)
class Prepared:
    """The request for one call, without the credential (which only the sender adds)."""

    api: str
    operation: Operation
    url: str
    headers: tuple[tuple[str, str], ...]
    """The model's header (and cookie) parameters and the body's Content-Type."""
    body: bytes | None = None
    body_text: str = ""
    """The body as a person reads it (JSON indented)."""

    @property
    def method(self) -> str:
        return self.operation.method


def prepare(api: str, base_url: str, version: str, op: Operation, parameters: Any, body: Any) -> Prepared:
    """The request for `op` with the model's `parameters` (by name) and `body`; CallError when the schema refuses them,
    naming every problem."""
    parameters = {} if parameters is None else parameters
    if not isinstance(parameters, dict):
        raise CallError("`parameters` must be an object of parameter names to values", "invalid",
                        ("parameters: not an object",))
    problems = _check_parameters(op, parameters, version) + _check_body(op, body, version)
    if problems:
        more = [f"... and {len(problems) - MAX_PROBLEMS} more"] if len(problems) > MAX_PROBLEMS else []
        raise CallError("the call does not match the operation's schema", "invalid",
                        tuple(problems[:MAX_PROBLEMS] + more))
    url = _url(base_url, op, parameters)
    headers = _headers(op, parameters)
    sent, shown = (None, "") if body is None or op.body is None else _encode(op.body, body)
    if sent is not None and op.body is not None:
        headers.append(("Content-Type", "application/json" if op.body.media_type == "*/*" else op.body.media_type))
    return Prepared(api, op, url, tuple(headers), sent, shown)


def confined(url: str, base_url: str) -> bool:
    """True when `url` lies under `base_url`: the same scheme, host and port, and a path at or under its path with no
    `.` or `..` segment."""
    target, base = urlsplit(url), urlsplit(base_url)
    if (target.scheme, target.hostname, _port(target)) != (base.scheme, base.hostname, _port(base)):
        return False
    segments = [unquote(part) for part in target.path.split("/")]
    if any(part in (".", "..") for part in segments):
        return False
    root = base.path.rstrip("/")
    return target.path == root or target.path.startswith(root + "/") or (not root and target.path in ("", "/"))


def _port(parts) -> int | None:
    try:
        return parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        return None


# -- checking --------------------------------------------------------------------------------------------------------


def _check_parameters(op: Operation, given: dict, version: str) -> list[str]:
    known = {p.name for p in op.parameters}
    problems = [f"parameters.{name}: not a parameter of {op.id}" + (f" (its parameters: {', '.join(sorted(known))})"
                                                                    if known else " (it takes none)")
                for name in given if name not in known]
    for param in op.parameters:
        if param.name not in given or given[param.name] is None:
            if param.required:
                problems.append(f"parameters.{param.name}: required (in {param.location}), missing")
            continue
        problems += _schema_problems(given[param.name], param.schema, version, f"parameters.{param.name}")
    return problems


def _check_body(op: Operation, body: Any, version: str) -> list[str]:
    if op.body is None:
        if body is None:
            return []
        why = f"its body is {op.unsupported_body}, which CALL_API cannot send" if op.unsupported_body else \
            "it takes none"
        return [f"body: {op.id} takes no body anges can send ({why})"]
    if body is None:
        return [f"body: required ({op.body.media_type}), missing"] if op.body.required else []
    if op.body.media_type.startswith("text/") and not isinstance(body, str):
        return [f"body: must be a string ({op.body.media_type})"]
    if op.body.media_type == "application/x-www-form-urlencoded" and not isinstance(body, dict):
        return ["body: must be an object of form fields"]
    return _schema_problems(body, op.body.schema, version, "body", write=True)


def _schema_problems(value: Any, schema: dict, version: str, where: str, write: bool = False) -> list[str]:
    if not schema:
        return []
    from jsonschema.exceptions import SchemaError
    from openapi_schema_validator import (
        OAS30Validator,
        OAS30WriteValidator,
        OAS31Validator,
        oas30_format_checker,
        oas31_format_checker,
    )

    if version == "3.0":
        validator: Any = (OAS30WriteValidator if write else OAS30Validator)(schema, format_checker=oas30_format_checker)
    else:
        validator = OAS31Validator(schema, format_checker=oas31_format_checker)
    try:
        errors = sorted(validator.iter_errors(value), key=lambda e: [str(p) for p in e.absolute_path])
    except SchemaError:
        return []  # a schema the validator cannot read: the server judges
    return [f"{where}{''.join(f'[{p}]' if isinstance(p, int) else f'.{p}' for p in error.absolute_path)}: "
            f"{' '.join(error.message.split())[:300]}" for error in errors]


# -- building --------------------------------------------------------------------------------------------------------


def _url(base_url: str, op: Operation, given: dict) -> str:
    path = op.path
    for param in op.parameters:
        if param.location == "path" and param.name in given:
            value = _path_value(param, given[param.name])
            if value in (".", ".."):
                raise CallError(f"parameters.{param.name}: {value!r} is not a path segment", "invalid",
                                (f"parameters.{param.name}: {value!r} would leave the path",))
            path = path.replace("{" + param.name + "}", quote(value, safe=";,=.") if param.style in (
                "label", "matrix") else quote(value, safe=""))
    query = [pair for param in op.parameters if param.location == "query" and given.get(param.name) is not None
             for pair in _query_pairs(param, given[param.name])]
    url = base_url.rstrip("/") + path + (f"?{urlencode(query, quote_via=quote)}" if query else "")
    if not confined(url, base_url):
        raise CallError(f"the call's URL {url} would leave {base_url}", "outside")
    return url


def _headers(op: Operation, given: dict) -> list[tuple[str, str]]:
    headers = [(param.name, _simple(param, given[param.name])) for param in op.parameters
               if param.location == "header" and given.get(param.name) is not None]
    cookies = [f"{param.name}={_simple(param, given[param.name])}" for param in op.parameters
               if param.location == "cookie" and given.get(param.name) is not None]
    headers += [("Cookie", "; ".join(cookies))] if cookies else []
    refused = [f"{name}: a header carries only ASCII text without line breaks" for name, value in headers
               if not value.isascii() or "\r" in value or "\n" in value]
    if refused:
        raise CallError("a header parameter holds text a header cannot carry: the call was not sent (encode it, as "
                        "the API's description says, or leave it out)", "invalid", tuple(refused))
    return headers


def _encode(body: Body, value: Any) -> tuple[bytes, str]:
    if body.media_type == "application/x-www-form-urlencoded":
        pairs = [(key, _scalar(item)) for key, field in value.items()
                 for item in (field if isinstance(field, list) else [field])]
        text = urlencode(pairs, quote_via=quote)
        return text.encode(), text
    if body.media_type.startswith("text/"):
        return str(value).encode(), str(value)
    return (json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode(),
            json.dumps(value, ensure_ascii=False, indent=2))


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return str(value)


def _simple(param: Parameter, value: Any) -> str:
    """The `simple` style (path and header parameters): `a,b,c`; an object `k,v,k2,v2` (`k=v,k2=v2` exploded)."""
    if param.as_json:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if isinstance(value, list):
        return ",".join(_scalar(item) for item in value)
    if isinstance(value, dict):
        if param.explode:
            return ",".join(f"{key}={_scalar(item)}" for key, item in value.items())
        return ",".join(f"{key},{_scalar(item)}" for key, item in value.items())
    return _scalar(value)


def _path_value(param: Parameter, value: Any) -> str:
    text = _simple(param, value)
    if param.style == "label":
        return "." + text.replace(",", ".") if param.explode else "." + text
    if param.style == "matrix":
        return f";{param.name}={text}"
    return text


def _query_pairs(param: Parameter, value: Any) -> list[tuple[str, str]]:
    """The `form` style by default (exploded: `a=1&a=2`), `deepObject`, `spaceDelimited`, `pipeDelimited`."""
    if param.as_json:
        return [(param.name, _simple(param, value))]
    explode = param.explode if param.explode is not None else param.style in ("", "form")
    if isinstance(value, dict):
        if param.style == "deepObject":
            return [(f"{param.name}[{key}]", _scalar(item)) for key, item in value.items()]
        if explode:
            return [(str(key), _scalar(item)) for key, item in value.items()]
        return [(param.name, ",".join(f"{key},{_scalar(item)}" for key, item in value.items()))]
    if isinstance(value, list):
        if explode:
            return [(param.name, _scalar(item)) for item in value]
        joiner = {"spaceDelimited": " ", "pipeDelimited": "|"}.get(param.style, ",")
        return [(param.name, joiner.join(_scalar(item) for item in value))]
    return [(param.name, _scalar(value))]


def shown_request(prepared: Prepared, signing: list[str]) -> str:
    """What a person approves: the method and full URL, the headers (the credential and configured headers by name
    only: `signing`), then the body."""
    lines = [f"{prepared.method} {prepared.url}", *(f"{name}: {value}" for name, value in prepared.headers), *signing]
    return "\n".join(lines) + (f"\n\n{prepared.body_text}" if prepared.body is not None else "")
