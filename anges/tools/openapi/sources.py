"""The web APIs of a run: each source's document read and checked once, its base URL, the operations it offers and
its credential; finding an operation, preparing a call, what the policy judges of it, sending it."""

from __future__ import annotations

import base64
import difflib
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit

from anges.exceptions import ConfigError
from anges.tools.openapi.calls import CallError, Prepared, prepare, shown_request
from anges.tools.openapi.client import Received, Sending, mask_logs, send
from anges.tools.openapi.documents import Document, Place
from anges.tools.openapi.operations import Operation, chosen, describe, index_line, read_operations

if TYPE_CHECKING:
    from anges.config.types import OpenAPIAuth, OpenAPISource, ToolsConfig

DETAIL_LEVELS = (2, 1, 0)
"""How much of each operation the index shows, most first: parameters, summary, name."""
MAX_FOUND = 30


@dataclass(frozen=True)
class Credential:
    """A source's secret and where it goes; `origin` names where it came from (never the value)."""

    kind: str
    secret: str
    origin: str
    location: str = "header"
    name: str = "Authorization"
    username: str = ""

    def headers(self) -> dict[str, str]:
        if self.kind == "bearer":
            return {"Authorization": f"Bearer {self.secret}"}
        if self.kind == "basic":
            return {"Authorization": f"Basic {self._basic()}"}
        return {self.name: self.secret} if self.location == "header" else {}

    def query(self) -> tuple[tuple[str, str], ...]:
        return ((self.name, self.secret),) if self.kind == "api_key" and self.location == "query" else ()

    def shown(self) -> str:
        """How a person is told the credential goes with the call (without it)."""
        what = {"bearer": "Authorization: Bearer", "basic": "Authorization: Basic"}.get(self.kind, f"{self.name}:")
        if self.kind == "api_key" and self.location == "query":
            return f"(query parameter {self.name}: the key from {self.origin})"
        return f"{what} (the {'password' if self.kind == 'basic' else 'secret'} from {self.origin})"

    def secrets(self) -> list[str]:
        """The secret as sent and as a URL carries it (percent-encoded); for basic auth, its base64 too."""
        from anges.util.masking import encoded_forms

        return [*encoded_forms(self.secret), *([self._basic()] if self.kind == "basic" else [])]

    def _basic(self) -> str:
        pair = f"{self.username}:{self.secret}" if self.username else self.secret
        return base64.b64encode(pair.encode()).decode()


class Source:
    """One web API: its document read and checked, the operations offered, where calls go and how they are signed."""

    def __init__(self, config: OpenAPISource, cwd: str, place: Place, max_body: int):
        self.config = config
        document = Document(config.spec, cwd, place)
        document.validate()
        info = document.contents.get("info") or {}
        self.title = str(info.get("title") or "").strip()
        self.name = config.name or _name_from(self.title, config.spec)
        self.where = f"tools.openapi {self.name} ({config.spec})"
        self.base_url = _base_url(config, document, self.where)
        self.version = document.version
        every = read_operations(document)
        self.operations = {op.id: op for op in chosen(every, config.operations)}
        if not self.operations:
            left = f" ({len(every)} left out by `operations`)" if every else ""
            raise ConfigError(f"{self.where}: offers no operation{left}")
        self.credential = _credential(config.auth, document.contents, self.where)
        secret_headers = {**config.headers, **(self.credential.headers() if self.credential else {})}
        self.sending = Sending(self.base_url, secret_headers, self.credential.query() if self.credential else (),
                               config.timeout, config.retries, config.retry_non_idempotent, max_body)

    def find(self, name: str) -> Operation:
        """The operation `name` (its id, or `METHOD /path`); CallError naming the nearest ones when there is none."""
        name = " ".join(name.split())
        method, _, path = name.partition(" ")
        for op in self.operations.values():
            if name == op.id or (path and method.upper() == op.method and path == op.path):
                return op
        near = difflib.get_close_matches(name, [n for op in self.operations.values() for n in op.names], 5, 0.6)
        hint = f" Similar: {', '.join(near)}." if near else ""
        raise CallError(f"API {self.name} has no operation {name!r}.{hint} The index in your instructions lists "
                        "them; DESCRIBE_API_OPERATION with a word of its path finds one.", "unknown_operation")

    def search(self, term: str) -> list[Operation]:
        """Operations whose id, path or summary holds `term` (ignoring case)."""
        term = term.lower().strip("/")
        return [op for op in self.operations.values()
                if term and term in f"{op.id} {op.route} {op.summary}".lower()][:MAX_FOUND]

    def signing(self) -> list[str]:
        """What a person is told of the headers anges adds (by name: their values are secrets)."""
        lines = [self.credential.shown()] if self.credential else []
        return lines + [f"{name}: (set in the configuration, not shown)" for name in self.config.headers]

    @property
    def secrets(self) -> list[str]:
        return [*(self.credential.secrets() if self.credential else []), *self.config.headers.values()]


@dataclass(frozen=True)
class Judged:
    """What the policy reads of a call: the subjects its rules match (`api.operationId`, `api METHOD /path`) and what
    a person asked to approve it reads (the method, the full URL, the headers, the body)."""

    subjects: list[str]
    detail: str


class APIs:
    """The web APIs a run may call (`tools.openapi`); shared by an agent and its children."""

    def __init__(self, sources: Iterable[Source], index_chars: int = 40_000):
        self.sources: dict[str, Source] = {}
        for source in sources:
            if source.name in self.sources:
                raise ConfigError(f"{source.where}: another API is named {source.name!r} too: give one a `name`")
            self.sources[source.name] = source
        self.index_chars = index_chars
        mask_logs(self.secrets)

    @classmethod
    def load(cls, config: ToolsConfig, cwd: str, place: Place, max_body: int) -> APIs | None:
        """The configured APIs, each document read and checked (ConfigError says what is wrong); None when none."""
        if not config.openapi:
            return None
        return cls([Source(source, cwd, place, max_body) for source in config.openapi], config.openapi_index_chars)

    def source(self, api: str | None) -> Source:
        """The source `api` names (it may be left out when there is one); CallError when none."""
        names = ", ".join(self.sources)
        if not api:
            if len(self.sources) == 1:
                return next(iter(self.sources.values()))
            raise CallError(f"Several APIs are configured ({names}): say which in `api`.", "unknown_api")
        if api not in self.sources:
            raise CallError(f"There is no API named {api!r}. The APIs: {names}.", "unknown_api")
        return self.sources[api]

    def prepare(self, args: dict) -> Prepared:
        """The request CALL_API's `args` ask for; CallError when it cannot be made."""
        source = self.source(_text(args.get("api")))
        op = source.find(_text(args.get("operation")))
        return prepare(source.name, source.base_url, source.version, op, args.get("parameters"), args.get("body"))

    def judge(self, args: dict) -> Judged | None:
        """What the policy reads of a call; None when it will not be made (the action then says why)."""
        try:
            prepared = self.prepare(args)
        except CallError:
            return None
        op, source = prepared.operation, self.sources[prepared.api]
        return Judged([f"{source.name}.{op.id}", f"{source.name} {op.route}"],
                      shown_request(prepared, source.signing()))

    def send(self, prepared: Prepared, stop: Callable[[], bool]) -> Received:
        """Send a prepared call, signed; what came back."""
        return send(prepared, self.sources[prepared.api].sending, stop)

    def describe(self, api: str | None, operation: str) -> str:
        """One operation whole; or, when `operation` names none, the operations it matches."""
        source = self.source(api)
        try:
            return describe(source.find(operation), source.base_url)
        except CallError:
            found = source.search(operation)
            if not found:
                raise
            lines = "\n".join(index_line(op) for op in found)
            return f"No operation is named {operation!r}; these of API {source.name} match it:\n{lines}"

    def index(self) -> list[dict[str, Any]]:
        """Each source for the guide: its name, title, base URL and the lines of its operations, as much of each as
        fits `index_chars` (every source together), and how many operations it leaves out."""
        every = [(source, list(source.operations.values())) for source in self.sources.values()]
        for detail in DETAIL_LEVELS:
            lines = [[index_line(op, detail) for op in ops] for _, ops in every]
            if sum(len(line) + 1 for each in lines for line in each) <= self.index_chars or detail == 0:
                break
        room = self.index_chars // max(len(every), 1)
        listed = []
        for (source, _), each in zip(every, lines):
            kept, used = [], 0
            for line in each:
                used += len(line) + 1
                if used > room:
                    break
                kept.append(line)
            listed.append({"name": source.name, "title": source.title, "base_url": source.base_url,
                           "operations": kept, "left_out": len(each) - len(kept)})
        return listed

    @property
    def secrets(self) -> list[str]:
        """Every credential and configured header value (masked wherever text is kept or shown)."""
        return [secret for source in self.sources.values() for secret in source.secrets]

    @property
    def env_names(self) -> list[str]:
        """The variables the credentials come from (commands do not get them)."""
        return [source.config.auth.env for source in self.sources.values() if source.config.auth.env]


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _name_from(title: str, spec: str) -> str:
    """A source's name from its document's title (else the file's or host's name): `Swagger Petstore` -> petstore."""
    words = [w for w in re.findall(r"[a-z0-9]+", title.lower()) if w not in ("api", "the", "swagger", "openapi")]
    name = "_".join(words)[:40].strip("_")
    if not name:
        parts = urlsplit(spec)
        stem = os.path.splitext(os.path.basename(parts.path))[0] if not parts.netloc else parts.hostname or ""
        name = re.sub(r"[^A-Za-z0-9_-]+", "_", stem).strip("_")[:40]
    return name if name and name not in ("openapi", "swagger") else "api"


def _base_url(config: OpenAPISource, document: Document, where: str) -> str:
    """The configured base URL, else the document's first server (its variables at their defaults)."""
    url = config.base_url.strip()
    if not url:
        servers = document.contents.get("servers") or [{"url": "/"}]
        server = servers[0] if isinstance(servers[0], dict) else {}
        url = str(server.get("url") or "/")
        for name, variable in (server.get("variables") or {}).items():
            url = url.replace("{" + name + "}", str((variable or {}).get("default", "")))
        if not urlsplit(url).scheme:
            if document.local:
                raise ConfigError(f"{where}: the document's server URL {url!r} is relative: set `base_url`")
            url = urljoin(document.uri, url)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{where}: the base URL must be an http(s) URL, got {url!r}")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ConfigError(f"{where}: the base URL may hold no query, fragment or user: {url!r}")
    return url.rstrip("/")


def _credential(auth: OpenAPIAuth, contents: dict, where: str) -> Credential | None:
    """The credential `auth` describes (its kind from the document's security scheme when not given)."""
    if not auth.env and not auth.file:
        if auth.type:
            raise ConfigError(f"{where}: auth needs `env` (a variable) or `file` that holds the secret")
        return None
    if auth.env:
        secret, origin = os.environ.get(auth.env, ""), f"${auth.env}"
        if not secret.strip():
            raise ConfigError(f"{where}: auth.env {auth.env} is not set (it holds the API's credential)")
    else:
        secret, origin = _secret_file(auth.file, where), f"the file {auth.file}"
    scheme = _scheme(contents, where) if not auth.type else {}
    kind = auth.type or scheme.get("kind", "")
    if kind != "api_key":
        return Credential(kind, secret.strip(), origin, username=auth.username)
    location = auth.location or scheme.get("in") or "header"
    name = auth.name or scheme.get("name") or "X-API-Key"
    return Credential(kind, secret.strip(), origin, location, name)


def _secret_file(path: str, where: str) -> str:
    from anges.util.masking import note_secret_file

    path = os.path.expanduser(path)
    note_secret_file(path)  # commands do not see it
    try:
        with open(path, encoding="utf-8") as stream:
            return stream.read(65536)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: cannot read auth.file {path}: {getattr(exc, 'strerror', None) or exc}") from None


def _scheme(contents: dict, where: str) -> dict[str, str]:
    """The document's security scheme anges can use: the first its top-level `security` names, else its only one."""
    schemes = ((contents.get("components") or {}).get("securitySchemes") or {})
    usable = {}
    for name, scheme in schemes.items():
        kind = _kind_of(scheme if isinstance(scheme, dict) else {})
        if kind:
            usable[name] = kind
    named = [name for entry in contents.get("security") or [] if isinstance(entry, dict) for name in entry]
    preferred = [usable[name] for name in named if name in usable]
    if preferred or len(usable) == 1:
        return (preferred or list(usable.values()))[0]
    found = ", ".join(usable) or "none anges can use (bearer, basic, apiKey in a header or the query)"
    raise ConfigError(f"{where}: say which credential this is with auth.type (bearer, api_key or basic); the "
                      f"document's security schemes: {found}")


def _kind_of(scheme: dict) -> dict[str, str]:
    if scheme.get("type") == "http" and str(scheme.get("scheme", "")).lower() in ("bearer", "basic"):
        return {"kind": str(scheme["scheme"]).lower()}
    if scheme.get("type") == "apiKey" and scheme.get("in") in ("header", "query"):
        return {"kind": "api_key", "in": str(scheme["in"]), "name": str(scheme.get("name") or "")}
    return {}
