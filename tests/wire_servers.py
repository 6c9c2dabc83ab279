"""Loopback HTTP servers that speak the providers' wire formats, so tests run the real SDKs end to end.

Each server answers from a queue of scripted responses and records every request:

    server.enqueue_text("hello", input_tokens=12, output_tokens=7)
    server.enqueue_error(429, headers={"Retry-After": "1"})
    ... call the SDK with base_url=server.base_url and api_key=TEST_KEY ...
    server.requests[-1].body["messages"]

A request that finds the queue empty gets a 500 whose message says so (and counts in `unscripted`).

What a client asks of the server besides model calls (the model listing that tells a context window: OpenAI's
`GET /v1/models`, Ollama's `/api/show`, llama.cpp's `/props`) goes to `lookups`, not `requests`, and is answered
from `server.listing` (None: 404).

A request that asks for a stream (OpenAI and Anthropic `"stream": true`, Gemini `:streamGenerateContent`) gets
the same scripted reply as server-sent events, its text in pieces (`chunks=[...]`, default a few), `gap`
seconds apart; `stall=S` sends the text pieces, then holds the stream open for S seconds without ending it
(a client hanging up is noted in `hangups`). `sent` keeps the `time.monotonic()` each text piece left at.
The fixtures `openai_server`, `gemini_server` and `anthropic_server` start one and close it afterwards.
"""

from __future__ import annotations

import json
import math
import re
import select
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

TEST_KEY = "sk-test-wire-0123456789"
"""The API key tests give the SDKs (long enough to be redacted from recordings)."""


@dataclass
class Request:
    """One request as the server saw it."""

    method: str
    path: str
    headers: dict[str, str]
    """Header names in lower case."""
    body: Any
    """The parsed JSON body (the raw text when it is not JSON)."""
    facts: dict = field(default_factory=dict)
    """What the server made of it (a server that counts tokens puts its count here)."""


@dataclass
class Scripted:
    """One scripted response."""

    status: int = 200
    body: Any = None
    """A JSON value, or a callable (Request) -> JSON value."""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    """Seconds to wait before answering (longer than the client's timeout: a hang)."""
    drop: bool = False
    """Close the connection without answering."""
    hold: float = 0.0
    """Seconds to hold the request open without answering, watching for the client to hang up."""
    chunks: list[str] | None = None
    """Streamed: the pieces the text goes in (None: a few of about equal size)."""
    gap: float = 0.0
    """Streamed: seconds between two pieces of text."""
    stall: float = 0.0
    """Streamed: after the text, hold the stream open this long without ending it."""
    pause: threading.Event | None = None
    """Streamed: wait for this to be set before each piece after the first (a test releases the rest)."""
    plain: bool = False
    """Send the body as it is even to a streaming request (a proxy's error page), not as server-sent events."""
    cut: bool = False
    """Streamed: send the text, then close the connection: no finish reason, no end of the stream, and a body that
    the close ends (no chunked encoding, no length), so the client sees a complete but cut-off reply."""


class _QuietServer(ThreadingHTTPServer):
    """A client hanging up mid-reply is what the cancel and retry tests do on purpose; anything else still prints."""

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class WireServer:
    """A threaded HTTP server on 127.0.0.1 answering one provider's API from a queue of scripted responses."""

    name = "wire"
    route = re.compile(r".*")
    """Paths this provider's API serves; others get a 404."""
    lookup_route: re.Pattern | None = None
    """Paths of what clients ask besides model calls (see `lookups`)."""

    def __init__(self):
        self.requests: list[Request] = []
        self.unscripted = 0
        """Requests that found the queue empty."""
        self.hangups: list[float] = []
        """`time.monotonic()` of each held request (`enqueue_hold`, a `stall`) whose client closed the connection."""
        self.sent: list[float] = []
        """`time.monotonic()` of each streamed piece of text, as it was written."""
        self.lookups: list[Request] = []
        """Requests on `lookup_route` (the model listing), answered by `answer_lookup`."""
        self.listing: Any = None
        """What the model listing answers, or a callable (Request) -> that (None: a 404)."""
        self.replier: Callable[[Request], str] | None = None
        """Answers, with the text it returns, every model call that finds the queue empty (long scripted runs)."""
        self._queue: deque[Scripted] = deque()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None

    # -- life cycle -------------------------------------------------------------------------------------------

    def start(self) -> WireServer:
        handler = type("Handler", (_Handler,), {"wire": self})
        self._httpd = _QuietServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def close(self) -> None:
        self._closing.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def url(self) -> str:
        """http://127.0.0.1:PORT"""
        assert self._httpd is not None, "start() the server first"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def base_url(self) -> str:
        """What to give the SDK as its base URL."""
        return self.url

    @property
    def env(self) -> dict[str, str]:
        """Environment variables that point the SDK's defaults at this server, with TEST_KEY as the key."""
        return {}

    # -- scripting --------------------------------------------------------------------------------------------

    def enqueue(self, response: Scripted, times: int = 1) -> None:
        with self._lock:
            self._queue.extend([response] * times)

    def enqueue_text(self, text: str, *, input_tokens: int | None = None, output_tokens: int = 5,
                     cached_tokens: int = 0, model: str | None = None, delay: float = 0.0, times: int = 1,
                     chunks: list[str] | None = None, gap: float = 0.0, stall: float = 0.0,
                     pause: threading.Event | None = None, **extra: Any) -> None:
        """A normal reply with these usage numbers (input: by default about a quarter of the request's characters,
        as a server that read the whole prompt would count); `extra` are provider-specific fields of the message;
        `chunks`, `gap`, `stall` and `pause` shape it when it is streamed."""
        assert chunks is None or "".join(chunks) == text, "the chunks must make up the text"
        usage = lambda request: {"input": self.count_prompt(request) if input_tokens is None else input_tokens,
                                 "output": output_tokens, "cached": cached_tokens}
        body = lambda request: self.render_text(request, text, usage(request), model, "stop", extra)
        self.enqueue(Scripted(body=body, delay=delay, chunks=chunks, gap=gap, stall=stall, pause=pause), times)

    def enqueue_truncated(self, text: str, *, input_tokens: int | None = None, output_tokens: int = 5) -> None:
        """A reply cut off at the max-tokens limit."""
        usage = lambda request: {"input": self.count_prompt(request) if input_tokens is None else input_tokens,
                                 "output": output_tokens, "cached": 0}
        self.enqueue(Scripted(body=lambda request: self.render_text(request, text, usage(request), None, "length",
                                                                    {})))

    def enqueue_empty(self, times: int = 1) -> None:
        """A well-formed reply with no text."""
        usage = {"input": 10, "output": 0, "cached": 0}
        self.enqueue(Scripted(body=lambda request: self.render_text(request, "", usage, None, "stop", {})), times)

    def enqueue_blocked(self, **options: Any) -> None:
        """A reply withheld by the provider's safety filter."""
        self.enqueue(Scripted(body=lambda request: self.render_blocked(request, **options)))

    def enqueue_error(self, status: int, *, headers: dict[str, str] | None = None, body: Any = None,
                      message: str = "", times: int = 1) -> None:
        """An error status with the provider's error body (or `body` as given)."""
        if body is None:
            body = self.render_error(status, message or f"scripted error {status}")
        self.enqueue(Scripted(status=status, body=body, headers=dict(headers or {})), times)

    def enqueue_hang(self, seconds: float, times: int = 1) -> None:
        """Say nothing for `seconds` (then answer with a text nobody should read)."""
        self.enqueue_text("too late", delay=seconds, times=times)

    def enqueue_hold(self, seconds: float = 60, times: int = 1) -> None:
        """Keep the request open for `seconds` without a byte of answer; a client hanging up is noted in `hangups`."""
        self.enqueue(Scripted(hold=seconds), times)

    def wait_for_requests(self, count: int, timeout: float = 10) -> bool:
        """Wait until `count` requests have arrived; False if they did not within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while len(self.requests) < count:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def enqueue_cut(self, text: str, chunks: list[str] | None = None) -> None:
        """A streamed reply whose connection the server closes after the text, before its finish reason."""
        usage = {"input": 10, "output": 5, "cached": 0}
        body = lambda request: self.render_text(request, text, usage, None, "stop", {})
        self.enqueue(Scripted(body=body, chunks=chunks, cut=True))

    def enqueue_drop(self, times: int = 1) -> None:
        """Close the connection without an answer."""
        self.enqueue(Scripted(drop=True), times)

    def enqueue_json(self, body: Any, status: int = 200, headers: dict[str, str] | None = None) -> None:
        """Any JSON body, as given."""
        self.enqueue(Scripted(status=status, body=body, headers=dict(headers or {})))

    @property
    def pending(self) -> int:
        """Scripted responses not yet served."""
        with self._lock:
            return len(self._queue)

    # -- the provider's formats (subclasses) ------------------------------------------------------------------

    def render_text(self, request: Request, text: str, usage: dict, model: str | None, finish: str,
                    extra: dict) -> Any:
        raise NotImplementedError

    def render_blocked(self, request: Request, **options: Any) -> Any:
        raise NotImplementedError

    def render_error(self, status: int, message: str) -> Any:
        return {"error": {"code": status, "message": message}}

    first_event: str | None = None
    """The SSE event name a stream starts with (where the format names its events)."""

    def wants_stream(self, request: Request) -> bool:
        return isinstance(request.body, dict) and request.body.get("stream") is True

    def stream_type(self, request: Request) -> str:
        return "text/event-stream"

    def count_prompt(self, request: Request) -> int:
        """The prompt tokens a server that read the whole request would report: about four characters a token."""
        return max(len(json.dumps(request.body)) // 4, 1)

    def render_stream(self, request: Request, body: Any, chunks: list[str] | None) -> tuple[list, list, list]:
        """A reply body as server-sent events: (those before the text, one per piece of text, those after)."""
        raise NotImplementedError

    def model_of(self, request: Request) -> str:
        return (request.body or {}).get("model", "") if isinstance(request.body, dict) else ""

    # -- serving ----------------------------------------------------------------------------------------------

    def answer_lookup(self, request: Request) -> Scripted:
        """The answer to a request on `lookup_route`: `listing` (or what it returns for the request), or a 404."""
        listing = self.listing(request) if callable(self.listing) else self.listing
        if listing is None:
            return Scripted(404, self.render_error(404, f"{self.name} wire server: no listing at {request.path}"))
        return Scripted(body=listing)

    def _next(self, request: Request) -> Scripted:
        with self._lock:
            if self.lookup_route is not None and self.lookup_route.match(request.path):
                self.lookups.append(request)
                return self.answer_lookup(request)
            self.requests.append(request)
            if not self.route.match(request.path):
                return Scripted(404, self.render_error(404, f"{self.name} wire server: no route {request.path}"))
            if self._queue:
                return self._queue.popleft()
            if self.replier is not None:
                replier = self.replier
                return Scripted(body=lambda request: self.render_text(
                    request, replier(request), {"input": self.count_prompt(request), "output": 5, "cached": 0}, None,
                    "stop", {}))
            self.unscripted += 1
        return Scripted(500, self.render_error(500, f"{self.name} wire server: nothing scripted for this request"))


class _Handler(BaseHTTPRequestHandler):
    wire: WireServer
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length).decode("utf-8", "replace") if length else ""
        try:
            body = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            body = raw
        request = Request("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        scripted = self.wire._next(request)
        if scripted.delay and self.wire._closing.wait(scripted.delay):
            self.close_connection = True
            return
        if scripted.hold:
            self._hold(scripted.hold)
            return
        if scripted.drop:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        payload = scripted.body(request) if callable(scripted.body) else scripted.body
        if scripted.status == 200 and self.wire.wants_stream(request) and not scripted.plain:
            events = ([], [], [_sse(payload, self.wire.first_event)]) if isinstance(payload, (str, bytes)) else (
                self.wire.render_stream(request, payload, scripted.chunks))  # not JSON: sent as one event all the same
            self._stream(scripted, *events, content_type=self.wire.stream_type(request))
            return
        data = json.dumps(payload).encode() if not isinstance(payload, (bytes, str)) else (
            payload.encode() if isinstance(payload, str) else payload)
        try:
            self.send_response(scripted.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in scripted.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up waiting (a hang)

    do_GET = do_POST

    def _stream(self, scripted: Scripted, head: list[str], texts: list[str], tail: list[str],
                content_type: str = "text/event-stream") -> None:
        """Send events in chunked transfer encoding; a stall holds the stream open after the text."""
        if scripted.cut:
            self._cut(head, texts)
            return
        try:
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Transfer-Encoding", "chunked")
            for name, value in scripted.headers.items():
                self.send_header(name, value)
            self.end_headers()
            for event in head:
                self._chunk(event)
            for index, event in enumerate(texts):
                if index and scripted.gap and self.wire._closing.wait(scripted.gap):
                    return
                if index and scripted.pause is not None:
                    while not scripted.pause.wait(0.05):
                        if self.wire._closing.is_set():
                            return
                self._chunk(event)
                with self.wire._lock:
                    self.wire.sent.append(time.monotonic())
            if scripted.stall:
                self._hold(scripted.stall)
                return
            for event in tail:
                self._chunk(event)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _cut(self, head: list[str], texts: list[str]) -> None:
        """The events before and of the text in a body the closing connection ends; nothing after them."""
        self.close_connection = True
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write("".join(head + texts).encode())
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _chunk(self, event: str) -> None:
        data = event.encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _hold(self, seconds: float) -> None:
        """Say nothing until the client hangs up (noted in `wire.hangups`), the server closes or time is up."""
        self.close_connection = True
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not self.wire._closing.is_set():
            readable, _, _ = select.select([self.connection], [], [], 0.02)
            if readable and not _peek(self.connection):
                with self.wire._lock:
                    self.wire.hangups.append(time.monotonic())
                return

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass


def _sse(data: Any, event: str | None = None) -> str:
    head = f"event: {event}\n" if event else ""
    if isinstance(data, bytes):
        data = data.decode("utf-8", "replace")
    return f"{head}data: {json.dumps(data) if not isinstance(data, str) else data}\n\n"


def _split(text: str, chunks: list[str] | None, count: int = 3) -> list[str]:
    """The pieces a text is streamed in: as scripted, or `count` of about equal size."""
    if chunks is not None:
        return list(chunks)
    if not text:
        return []
    size = max(1, -(-len(text) // count))
    return [text[i:i + size] for i in range(0, len(text), size)]


def _peek(connection: socket.socket) -> bytes:
    """The next byte the client sent, left unread (b"" once it hung up)."""
    try:
        return connection.recv(1, socket.MSG_PEEK)
    except ConnectionResetError:
        return b""


class OpenAIWireServer(WireServer):
    """`POST /v1/chat/completions`."""

    name = "openai"
    route = re.compile(r".*/chat/completions$")
    lookup_route = re.compile(r".*/models$|^/props$")

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def env(self) -> dict[str, str]:
        return {"OPENAI_BASE_URL": self.base_url, "OPENAI_API_KEY": TEST_KEY}

    def render_text(self, request, text, usage, model, finish, extra):
        message = {"role": "assistant", "content": text, **extra}
        return self._completion(request, message, finish, usage, model)

    def render_blocked(self, request, **options):
        usage = {"input": 10, "output": 0, "cached": 0}
        return self._completion(request, {"role": "assistant", "content": None}, "content_filter", usage, None)

    def render_error(self, status, message):
        kinds = {400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error",
                 429: "rate_limit_error"}
        return {"error": {"message": message, "type": kinds.get(status, "server_error"), "param": None,
                          "code": "invalid_api_key" if status == 401 else None}}

    def render_stream(self, request, body, chunks):
        base = {key: body.get(key) for key in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
        head, texts, tail = [], [], []
        for choice in body.get("choices") or []:
            index, message = choice.get("index", 0), dict(choice.get("message") or {})
            delta = lambda fields, finish=None, index=index: _sse({**base, "choices": [
                {"index": index, "delta": fields, "finish_reason": finish, "logprobs": None}]})
            content = message.pop("content", None) or ""
            head.append(delta({"role": message.pop("role", "assistant"), "content": "", **{
                key: value for key, value in message.items() if value is not None}}))
            texts += [delta({"content": piece}) for piece in _split(content, chunks)]
            tail.append(delta({}, choice.get("finish_reason")))
        options = request.body.get("stream_options") or {}
        if options.get("include_usage") and body.get("usage"):
            tail.append(_sse({**base, "choices": [], "usage": body["usage"]}))
        tail.append(_sse("[DONE]"))
        return head, texts, tail

    def _completion(self, request, message, finish, usage, model):
        return {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model or self.model_of(request),
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": {
                "prompt_tokens": usage["input"],
                "completion_tokens": usage["output"],
                "total_tokens": usage["input"] + usage["output"],
                "prompt_tokens_details": {"cached_tokens": usage["cached"]},
            },
        }


def prompt_of(request: Request) -> str:
    """The prompt of a chat request in OpenAI's or Ollama's shape (one user message)."""
    return request.body["messages"][0]["content"]


class OllamaWireServer(OpenAIWireServer):
    """Ollama: its native API (`POST /api/chat`, streamed as JSON lines unless `"stream": false`; `/api/show`)
    and its OpenAI-compatible one (`/v1/chat/completions`, `/v1/models`).

    Like Ollama, it gives a request the window its `options.num_ctx` asks for (the native API only; otherwise
    `default_ctx`), counts a prompt's tokens at `chars_per_token`, and when a prompt is longer than the window cuts
    it from its start, keeping a few tokens and the end (`limit = ctx - (ctx - 4) // 2`), and reports the smaller
    `prompt_eval_count` (the OpenAI-compatible API: `prompt_tokens`) without an error. With `refuses`, a native
    request that says `"truncate": false` gets Ollama 0.12.5's 400 instead. Each model call's count and window are
    in `request.facts` (`prompt_tokens`, `window`, `cut`)."""

    name = "ollama"
    route = re.compile(r"^(/api/chat|/v1/chat/completions)$")
    lookup_route = re.compile(r"^(/api/show|/api/version|/v1/models)$")
    TEMPLATE_TOKENS = 8

    def __init__(self, context_length: int | None = 32_768, default_ctx: int = 4096, chars_per_token: float = 4.0,
                 refuses: bool = False):
        super().__init__()
        self.context_length = context_length
        """What `/api/show` says of every model (None: it answers 404, as for a model not pulled)."""
        self.default_ctx = default_ctx
        self.chars_per_token = chars_per_token
        self.refuses = refuses

    @property
    def base_url(self) -> str:
        return self.url

    @property
    def env(self) -> dict[str, str]:
        return {"OLLAMA_HOST": self.url.removeprefix("http://")}

    @staticmethod
    def native(request: Request) -> bool:
        return request.path.startswith("/api/")

    def answer_lookup(self, request):
        if request.path == "/api/version":
            return Scripted(body={"version": "0.12.6"})
        if request.path == "/v1/models":
            return Scripted(body={"object": "list", "data": [
                {"id": "qwen2.5-coder:latest", "object": "model", "created": 0, "owned_by": "library"}]})
        if self.context_length is None:
            return Scripted(404, {"error": f"model '{(request.body or {}).get('model')}' not found"})
        return Scripted(body={"modelfile": "", "parameters": "", "template": "{{ .Prompt }}",
                              "details": {"family": "qwen2", "parameter_size": "7.6B"},
                              "model_info": {"general.architecture": "qwen2", "qwen2.context_length":
                                             self.context_length, "qwen2.embedding_length": 3584}})

    def _next(self, request):
        if not self.route.match(request.path) or not isinstance(request.body, dict):
            return super()._next(request)
        options = request.body.get("options") or {}
        window = options.get("num_ctx") if self.native(request) and options.get("num_ctx") else self.default_ctx
        tokens = math.ceil(len(prompt_of(request)) / self.chars_per_token) + self.TEMPLATE_TOKENS
        cut = tokens > window
        request.facts.update(prompt_tokens=tokens, window=window, cut=cut)
        if cut and self.refuses and self.native(request) and request.body.get("truncate") is False:
            with self._lock:
                self.requests.append(request)
            return Scripted(400, {"error": "the input length exceeds the context length"})
        if cut:
            request.facts["prompt_tokens"] = window - (window - 4) // 2
        return super()._next(request)

    def count_prompt(self, request):
        return request.facts.get("prompt_tokens") or super().count_prompt(request)

    def render_text(self, request, text, usage, model, finish, extra):
        if not self.native(request):
            return super().render_text(request, text, usage, model, finish, extra)
        return {"model": model or self.model_of(request), "created_at": "2026-11-24T10:00:00Z",
                "message": {"role": "assistant", "content": text, **extra}, "done": True, "done_reason": finish,
                "total_duration": 1000, "load_duration": 10, "prompt_eval_count": usage["input"],
                "prompt_eval_duration": 100, "eval_count": usage["output"], "eval_duration": 100}

    def render_error(self, status, message):
        return {"error": message}

    def wants_stream(self, request):
        if not self.native(request):
            return super().wants_stream(request)
        return isinstance(request.body, dict) and request.body.get("stream", True) is not False

    def stream_type(self, request):
        return "application/x-ndjson" if self.native(request) else super().stream_type(request)

    def render_stream(self, request, body, chunks):
        if not self.native(request):
            return super().render_stream(request, body, chunks)
        line = lambda fields: json.dumps(fields) + "\n"
        base = {"model": body.get("model"), "created_at": body.get("created_at")}
        message = body.get("message") or {}
        texts = [line({**base, "message": {"role": "assistant", "content": piece}, "done": False})
                 for piece in _split(message.get("content") or "", chunks)]
        return [], texts, [line({**body, "message": {"role": "assistant", "content": ""}})]


class GeminiWireServer(WireServer):
    """`POST /{version}/models/{model}:generateContent` (and the Vertex AI `.../publishers/google/models/...`)."""

    name = "gemini"
    route = re.compile(r"^/[^/]+/(?:.*/)?models/[^/:]+:(?:generateContent|streamGenerateContent\?alt=sse)$")
    STATUS_NAMES: ClassVar[dict[int, str]] = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
                    429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}

    @property
    def env(self) -> dict[str, str]:
        return {"GOOGLE_GEMINI_BASE_URL": self.base_url, "GEMINI_API_KEY": TEST_KEY}

    def model_of(self, request):
        match = re.search(r"models/([^/:]+):", request.path)
        return match.group(1) if match else ""

    def render_text(self, request, text, usage, model, finish, extra):
        parts = list(extra.get("parts", [])) + ([{"text": text}] if text else [])
        candidate = {"content": {"role": "model", "parts": parts},
                     "finishReason": "MAX_TOKENS" if finish == "length" else "STOP", "index": 0}
        others = {key: value for key, value in extra.items() if key != "parts"}
        return self._response(request, [candidate], usage, model, **others)

    def wants_stream(self, request):
        return ":streamGenerateContent" in request.path

    def render_stream(self, request, body, chunks):
        candidates = body.get("candidates")
        if not candidates:
            return [], [], [_sse(body)]
        first = dict(candidates[0])
        content = first.get("content") or {}
        parts = content.get("parts") or []
        text = "".join(part.get("text", "") for part in parts if not part.get("thought"))
        others = [part for part in parts if part.get("thought") or "text" not in part]
        base = {key: value for key, value in body.items() if key not in ("candidates", "usageMetadata")}
        response = lambda parts, **fields: _sse({**base, "candidates": [
            {"content": {"role": "model", "parts": parts}, "index": 0, **fields}]})
        head = [response(others)] if others else []
        texts = [response([{"text": piece}]) for piece in _split(text, chunks)]
        last = {key: value for key, value in first.items() if key not in ("content", "index")}
        tail = [_sse({**base, "usageMetadata": body.get("usageMetadata"), "candidates": [
            {"content": {"role": "model", "parts": [{"text": ""}]}, "index": 0, **last}]})]
        return head, texts, tail

    def render_blocked(self, request, where: str = "prompt", reason: str = "SAFETY"):
        usage = {"input": 10, "output": 0, "cached": 0}
        if where == "prompt":
            return self._response(request, None, usage, None, promptFeedback={"blockReason": reason})
        return self._response(request, [{"finishReason": reason, "index": 0}], usage, None)

    def render_error(self, status, message):
        return {"error": {"code": status, "message": message, "status": self.STATUS_NAMES.get(status, "UNKNOWN")}}

    def _response(self, request, candidates, usage, model, **extra):
        meta = {"promptTokenCount": usage["input"], "candidatesTokenCount": usage["output"],
                "totalTokenCount": usage["input"] + usage["output"]}
        if usage["cached"]:
            meta["cachedContentTokenCount"] = usage["cached"]
        body = {"usageMetadata": meta, "modelVersion": model or self.model_of(request),
                "responseId": f"resp-{len(self.requests)}", **extra}
        if candidates is not None:
            body["candidates"] = candidates
        return body


class AnthropicWireServer(WireServer):
    """`POST /v1/messages` (and the Vertex AI `.../publishers/anthropic/models/{model}:rawPredict`)."""

    name = "anthropic"
    route = re.compile(r"^(/v1/messages|.*/publishers/anthropic/models/[^/:]+:(?:rawPredict|streamRawPredict))$")
    first_event = "message_start"
    ERROR_TYPES: ClassVar[dict[int, str]] = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                   404: "not_found_error", 429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}

    @property
    def env(self) -> dict[str, str]:
        return {"ANTHROPIC_BASE_URL": self.base_url, "ANTHROPIC_API_KEY": TEST_KEY}

    def model_of(self, request):
        match = re.search(r"models/([^/:]+):(?:stream)?[rR]awPredict", request.path)
        return match.group(1) if match else super().model_of(request)

    def render_text(self, request, text, usage, model, finish, extra):
        content = [{"type": "text", "text": text}] if text else []
        return self._message(request, list(extra.get("content", [])) + content,
                             "max_tokens" if finish == "length" else "end_turn", usage, model)

    def render_blocked(self, request, **options):
        return self._message(request, [], "refusal", {"input": 10, "output": 0, "cached": 0}, None)

    def render_error(self, status, message):
        return {"type": "error", "error": {"type": self.ERROR_TYPES.get(status, "api_error"), "message": message}}

    def render_stream(self, request, body, chunks):
        message = {**body, "content": [], "stop_reason": None, "stop_sequence": None}
        usage = dict(body.get("usage") or {})
        message["usage"] = {**usage, "output_tokens": 1}
        head, texts, tail = [_sse({"type": "message_start", "message": message}, "message_start")], [], []
        for index, block in enumerate(body.get("content") or []):
            if block.get("type") == "text":
                into = texts
                start = {"type": "text", "text": ""}
                deltas = [{"type": "text_delta", "text": piece} for piece in _split(block["text"], chunks)]
            else:  # thinking
                into = head
                start = {"type": "thinking", "thinking": "", "signature": ""}
                deltas = [{"type": "thinking_delta", "thinking": block.get("thinking", "")},
                          {"type": "signature_delta", "signature": block.get("signature", "")}]
            head.append(_sse({"type": "content_block_start", "index": index, "content_block": start},
                             "content_block_start"))
            into += [_sse({"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta")
                     for delta in deltas]
            (tail if into is texts else head).append(
                _sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
        tail.append(_sse({"type": "message_delta", "delta": {"stop_reason": body.get("stop_reason"),
                                                             "stop_sequence": None},
                          "usage": {"output_tokens": usage.get("output_tokens", 0)}}, "message_delta"))
        tail.append(_sse({"type": "message_stop"}, "message_stop"))
        return head, texts, tail

    def _message(self, request, content, stop_reason, usage, model):
        return {
            "id": f"msg_{len(self.requests)}",
            "type": "message",
            "role": "assistant",
            "model": model or self.model_of(request),
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {"input_tokens": usage["input"] - usage["cached"], "output_tokens": usage["output"],
                      "cache_read_input_tokens": usage["cached"], "cache_creation_input_tokens": 0},
        }


MODEL_ENV = (
    "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID", "OPENAI_CUSTOM_HEADERS",
    "OPENAI_ADMIN_KEY", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "ANTHROPIC_CUSTOM_HEADERS",
    "ANTHROPIC_PROFILE", "ANTHROPIC_VERTEX_BASE_URL", "ANTHROPIC_VERTEX_PROJECT_ID", "CLOUD_ML_REGION",
    "GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GEMINI_BASE_URL", "GOOGLE_VERTEX_BASE_URL",
    "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GENAI_USE_ENTERPRISE", "GOOGLE_GENAI_API_VERSION", "GOOGLE_CLOUD_PROJECT",
    "GOOGLE_CLOUD_LOCATION", "DEEPSEEK_API_KEY", "OPENROUTER_API_KEY", "OLLAMA_HOST", "OLLAMA_API_KEY",
)
"""Every variable that changes what a provider SDK does; `clean_model_env` removes them all."""


@pytest.fixture
def clean_model_env(monkeypatch):
    """No provider variable of the developer's machine leaks into the test."""
    for name in MODEL_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def openai_server(clean_model_env):
    """An OpenAI chat-completions server on 127.0.0.1 (and no provider variables in the environment)."""
    with OpenAIWireServer() as server:
        yield server


@pytest.fixture
def ollama_server(clean_model_env):
    """An Ollama server (native and OpenAI-compatible API) on 127.0.0.1 (and no provider variables, OLLAMA_HOST
    included)."""
    with OllamaWireServer() as server:
        yield server


@pytest.fixture
def gemini_server(clean_model_env):
    """A Gemini generateContent server on 127.0.0.1 (and no provider variables in the environment)."""
    with GeminiWireServer() as server:
        yield server


@pytest.fixture
def anthropic_server(clean_model_env):
    """An Anthropic messages server on 127.0.0.1 (and no provider variables in the environment)."""
    with AnthropicWireServer() as server:
        yield server


PROVIDERS = {
    "openai": (OpenAIWireServer, "anges.models.openai_model:OpenAIModel", "OPENAI_API_KEY"),
    "gemini": (GeminiWireServer, "anges.models.gemini_model:GeminiModel", "GEMINI_API_KEY"),
    "anthropic": (AnthropicWireServer, "anges.models.anthropic_model:AnthropicModel", "ANTHROPIC_API_KEY"),
    "ollama": (OllamaWireServer, "anges.models.ollama_model:OllamaModel", "OLLAMA_API_KEY"),
}
"""Each provider: its server, its model class, its key variable."""


def fast_retry():
    """A retry policy with tiny waits."""
    from anges.config.types import RetryConfig

    return RetryConfig(max_attempts=3, max_total_seconds=30, initial_backoff=0.01, max_backoff=0.02)


@dataclass
class Wire:
    """A provider's server, and a way to build its model pointed at that server."""

    provider: str
    server: WireServer
    model_class: type
    key_env: str

    def model(self, settings=None, retry=None, real_waits: bool = False, **preset: Any):
        from anges.config.types import ModelPreset, ModelSettings

        waits, sleep = sleeper()
        options = {"model": "test-model", "base_url": self.server.base_url, "api_key_env": self.key_env, **preset}
        model = self.model_class(ModelPreset(provider=self.provider, **options),
                                 settings or ModelSettings(request_timeout=5), retry or fast_retry(),
                                 sleep=None if real_waits else sleep)
        return model, waits


@pytest.fixture(params=sorted(PROVIDERS))
def wire(request, clean_model_env, monkeypatch):
    """Each provider in turn: its server on 127.0.0.1 and its model class (`wire.model()` builds one)."""
    from importlib import import_module

    server_class, where, key_env = PROVIDERS[request.param]
    module, _, name = where.partition(":")
    monkeypatch.setenv(key_env, TEST_KEY)
    with server_class() as server:
        yield Wire(request.param, server, getattr(import_module(module), name), key_env)


def sleeper() -> tuple[list[float], Callable[[float], None]]:
    """A `sleep` that records the waits asked for and does not wait."""
    waits: list[float] = []
    return waits, waits.append
