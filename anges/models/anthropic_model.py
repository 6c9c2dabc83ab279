"""Claude through the optional `anthropic` SDK, with an API key or on Vertex AI."""

from __future__ import annotations

import os
from typing import Any

from anges.exceptions import ModelSetupError
from anges.models.attachments import anthropic_blocks, attachments_of
from anges.models.base import Completion, Usage
from anges.models.provider import Provider
from anges.models.retry import Failure
from anges.models.streaming import CUT_SHORT, StreamEnded, current_sink

_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length",
           "model_context_window_exceeded": "length"}


class AnthropicModel(Provider):
    """One user message holding the prompt, through `client.messages.create`."""

    provider = "anthropic"
    default_key_env = "ANTHROPIC_API_KEY"

    def _make_client(self) -> Any:
        try:
            import anthropic
        except ImportError:
            raise ModelSetupError(f"{self.name}: the anthropic provider needs its SDK, a dependency of anges that "
                                  "is missing here: pip install anthropic") from None
        options: dict[str, Any] = {
            "base_url": self.preset.base_url or None,  # None: ANTHROPIC_BASE_URL / ANTHROPIC_VERTEX_BASE_URL
            "timeout": self.settings.request_timeout,
            "max_retries": 0,
            "default_headers": self.preset.headers or None,
            "http_client": anthropic.DefaultHttpxClient(event_hooks=self.connections.event_hooks),
        }
        if self.preset.vertex:
            self.label = "Vertex AI"
            region = (self.preset.location or os.environ.get("CLOUD_ML_REGION")
                      or os.environ.get("GOOGLE_CLOUD_LOCATION"))
            project = (self.preset.project or os.environ.get("ANTHROPIC_VERTEX_PROJECT_ID")
                       or os.environ.get("GOOGLE_CLOUD_PROJECT"))
            if not region:
                raise ModelSetupError(f"{self.name}: Claude on Vertex AI needs a region: set `location:` in the preset "
                                      "or CLOUD_ML_REGION / GOOGLE_CLOUD_LOCATION")
            if project:
                options["project_id"] = project
            client: anthropic.Anthropic | anthropic.AnthropicVertex = anthropic.AnthropicVertex(region=region,
                                                                                                **options)
        else:
            self.label = "Anthropic"
            client = anthropic.Anthropic(api_key=self._api_key(), **options)
        self.base_url = str(client.base_url).rstrip("/")
        return client

    def _complete(self, prompt: str, temperature: float) -> Completion:
        # The Messages API (2026-10-21, the SDK 2.x default) takes no sampling parameters: temperature is not sent.
        params = {"model": self.preset.model, "max_tokens": self.reply_tokens,
                  "messages": [{"role": "user", "content": with_attachments(user_content(prompt), prompt)}]}
        message = self._streamed(params) if self.settings.stream else self.client.messages.create(**params)
        usage = _usage(getattr(message, "usage", None))
        stop_reason = getattr(message, "stop_reason", None)  # getattr: a server may answer 200 with another shape
        if stop_reason == "refusal":
            self._refuse("the model refused (stop reason refusal)", "blocked", usage)
        blocks = getattr(message, "content", None) or []
        text = "".join(block.text for block in blocks if getattr(block, "type", "") == "text")
        finish_reason = _FINISH.get(stop_reason or "end_turn", str(stop_reason))
        return self._reply(text, usage, getattr(message, "model", ""), finish_reason)

    def _streamed(self, params: dict[str, Any]) -> Any:
        """The message as server-sent events, each text delta passed on at once; the SDK gathers the final message
        (its usage from `message_start` and `message_delta`)."""
        sink = current_sink()
        sink.begin()
        started = stopped = False
        with self.client.messages.stream(**params) as events:
            for event in events:
                started = started or event.type == "message_start"
                stopped = stopped or event.type == "message_stop"
                if event.type == "content_block_delta" and getattr(event.delta, "type", "") == "text_delta":
                    sink(event.delta.text)
            if not started:
                raise StreamEnded("the reply stream was empty or not JSON (it ended before its message started)")
            if not stopped:
                raise StreamEnded(CUT_SHORT)
            return events.get_final_message()

    def _classify(self, exc: BaseException) -> Failure | None:
        import anthropic

        return self._http_sdk_failure(exc, anthropic)


def _usage(usage: Any) -> Usage:
    if usage is None:
        return Usage()
    cached = usage.cache_read_input_tokens or 0
    written = usage.cache_creation_input_tokens or 0
    # Anthropic counts cache reads and writes apart from input_tokens; the others include them.
    return Usage(input_tokens=(usage.input_tokens or 0) + cached + written, output_tokens=usage.output_tokens or 0,
                 cached_tokens=cached)


def with_attachments(content: Any, prompt: Any) -> Any:
    """`content`, then the files the prompt's request attached (after the cached blocks: the cache stays)."""
    attached = attachments_of(prompt)
    if not attached:
        return content
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    return [*blocks, *anthropic_blocks(attached)]


def user_content(prompt: Any) -> Any:
    """The prompt as text blocks split where it says it may be cached (`Prompt.breaks`), with `cache_control` on
    the blocks that end at its `marks`: the stable prefix, and the history (which the next call extends). A prompt
    that says nothing of caching (or content that is not text) goes as it is."""
    marks = set(getattr(prompt, "marks", ()))
    if not marks:
        return str(prompt) if isinstance(prompt, str) else prompt
    breaks = [b for b in prompt.breaks if 0 < b < len(prompt)]
    blocks: list[dict] = []
    start = 0
    for end in [*breaks, len(prompt)]:
        text = prompt[start:end]
        if not text.strip():  # the API refuses blank blocks: this piece joins the next one
            continue
        block: dict[str, Any] = {"type": "text", "text": str(text)}
        if end in marks:
            block["cache_control"] = {"type": "ephemeral"}
        blocks.append(block)
        start = end
    if not blocks:
        return [{"type": "text", "text": str(prompt)}]
    blocks[-1]["text"] += prompt[start:]  # blank text at the very end
    return blocks
