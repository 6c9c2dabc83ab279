"""Gemini through google-genai, with an API key or on Vertex AI."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from anges.exceptions import ModelSetupError
from anges.models.attachments import attachments_of, gemini_parts
from anges.models.base import Completion, Usage
from anges.models.provider import Provider, env_true
from anges.models.retry import Failure, transport_failure
from anges.models.streaming import CUT_SHORT, StreamEnded, current_sink

BLOCKED = frozenset({"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY",
                     "IMAGE_PROHIBITED_CONTENT", "MODEL_ARMOR"})
"""Finish reasons that mean the answer was withheld."""
_FINISH = {"STOP": "stop", "MAX_TOKENS": "length"}


class GeminiModel(Provider):
    """One user turn holding the prompt, through `client.models.generate_content`."""

    provider = "gemini"
    default_key_env = "GEMINI_API_KEY"

    @classmethod
    def uses_vertex(cls, preset) -> bool:
        """The preset says so, or the SDK's own GOOGLE_GENAI_USE_VERTEXAI does."""
        return preset.vertex or env_true("GOOGLE_GENAI_USE_VERTEXAI")

    def _make_client(self) -> Any:
        from google import genai
        from google.auth.exceptions import GoogleAuthError
        from google.genai import types

        self.vertex = self.uses_vertex(self.preset)
        self.label = "Vertex AI" if self.vertex else "Gemini"
        http_options = types.HttpOptions(
            # None: the SDK reads GOOGLE_GEMINI_BASE_URL / GOOGLE_VERTEX_BASE_URL
            base_url=self.preset.base_url or None,
            api_version=self.preset.api_version or None,
            headers=dict(self.preset.headers) or None,
            timeout=max(1, int(self.settings.request_timeout * 1000)),
            retry_options=types.HttpRetryOptions(attempts=1),
            client_args={"event_hooks": self.connections.event_hooks},
        )
        try:
            if self.vertex:
                client = genai.Client(vertexai=True, project=self.preset.project or None,
                                      location=self.preset.location or None, http_options=http_options)
            else:
                client = genai.Client(vertexai=False, api_key=self._api_key(), http_options=http_options)
        except (ValueError, GoogleAuthError) as exc:  # the SDK checks credentials here
            where = ("Vertex AI needs a project (GOOGLE_CLOUD_PROJECT or `project:` in the preset), a location and "
                     "Application Default Credentials (gcloud auth application-default login)") if self.vertex else (
                     "Gemini needs GEMINI_API_KEY or GOOGLE_API_KEY")
            raise ModelSetupError(f"{self.name}: {where}: {exc}") from exc
        env = "GOOGLE_VERTEX_BASE_URL" if self.vertex else "GOOGLE_GEMINI_BASE_URL"
        self.base_url = self.preset.base_url or os.environ.get(env) or (
            "Vertex AI" if self.vertex else "https://generativelanguage.googleapis.com")
        return client

    def _complete(self, prompt: str, temperature: float) -> Completion:
        from google.genai import types

        config = types.GenerateContentConfig(
            temperature=temperature,
            max_output_tokens=self.reply_tokens,
            response_mime_type="application/json" if self.settings.json_mode else None,
        )
        contents: Any = str(prompt) if isinstance(prompt, str) else prompt  # the SDK takes no subclass of str
        if attached := attachments_of(prompt):
            contents = [types.Content(role="user", parts=[types.Part.from_text(text=contents),
                                                          *gemini_parts(attached)])]
        request = {"model": self.preset.model, "contents": contents, "config": config}
        reply = _Reply()
        if self.settings.stream:
            sink = current_sink()
            sink.begin()
            for chunk in self.client.models.generate_content_stream(**request):
                if piece := reply.add(chunk):
                    sink(piece)
            blocked = getattr(reply.feedback, "block_reason", None)  # a blocked prompt has no finish reason
            if not reply.finish_reason and not blocked:
                raise StreamEnded(CUT_SHORT)
        else:
            reply.add(self.client.models.generate_content(**request))
        usage = _usage(reply.usage)
        feedback = reply.feedback
        if feedback is not None and feedback.block_reason:
            why = _name(feedback.block_reason)
            message = f": {feedback.block_reason_message}" if feedback.block_reason_message else ""
            self._refuse(f"the prompt was blocked ({why}){message}", "blocked", usage)
        if not reply.answered:
            self._refuse("the reply has no candidates", "empty", usage)
        reason = reply.finish_reason or "STOP"
        if reason in BLOCKED:
            self._refuse(f"the reply was blocked (finish reason {reason})", "blocked", usage)
        text = "".join(reply.parts)
        return self._reply(text, usage, reply.model or self.preset.model, _FINISH.get(reason, reason.lower()))

    def _classify(self, exc: BaseException) -> Failure | None:
        from google.genai import errors

        if isinstance(exc, errors.APIError):
            detail = exc.message or str(exc)
            headers = getattr(getattr(exc, "response", None), "headers", None)
            if exc.code == 400 and "API_KEY_INVALID" in str(exc.details) + detail:
                return Failure.setup(f"Gemini rejected the API key (400 API_KEY_INVALID). Check {self._key_hint()}.",
                                     400)
            return self._status_failure(exc.code or 0, headers, detail, _retry_delay(exc.details))
        if any(cls.__module__.startswith("google.auth") for cls in type(exc).__mro__):
            return Failure.setup(f"Vertex AI authentication failed ({type(exc).__name__}: {exc}). Run `gcloud auth "
                                 "application-default login` or set GOOGLE_APPLICATION_CREDENTIALS.")
        return transport_failure(exc)


@dataclass
class _Reply:
    """What generateContent said, in one response or gathered from the streamed ones (each a partial response;
    usage and the finish reason come with the last)."""

    parts: list[str] = field(default_factory=list)
    usage: Any = None
    model: str = ""
    feedback: Any = None
    finish_reason: str = ""
    answered: bool = False
    """A candidate came."""

    def add(self, response: Any) -> str:
        """Take in one response; the answer text it adds (thoughts left out)."""
        self.usage = response.usage_metadata or self.usage
        self.model = response.model_version or self.model
        self.feedback = response.prompt_feedback or self.feedback
        if not response.candidates:
            return ""
        self.answered = True
        candidate = response.candidates[0]
        self.finish_reason = _name(candidate.finish_reason) or self.finish_reason
        parts = (candidate.content.parts if candidate.content else None) or []
        text = "".join(part.text for part in parts if part.text and not part.thought)
        self.parts.append(text)
        return text


def _usage(meta: Any) -> Usage:
    if meta is None:
        return Usage()
    return Usage(
        input_tokens=meta.prompt_token_count or 0,
        output_tokens=(meta.candidates_token_count or 0) + (meta.thoughts_token_count or 0),
        cached_tokens=meta.cached_content_token_count or 0,
    )


def _name(value: Any) -> str:
    """An enum member or a plain string, as the upper-case name the API uses."""
    return str(getattr(value, "value", value) or "")


def _retry_delay(details: Any) -> float | None:
    """The `RetryInfo.retryDelay` ("32s") that a Gemini 429 carries in its error details."""
    error = details.get("error", details) if isinstance(details, dict) else {}
    for item in (error.get("details") if isinstance(error, dict) else None) or []:
        if isinstance(item, dict) and str(item.get("@type", "")).endswith("RetryInfo"):
            try:
                return float(str(item.get("retryDelay", "")).removesuffix("s"))
            except ValueError:
                return None
    return None
