"""The attributes of spans and metrics, from what agents record and the model calls they make (no OpenTelemetry
here: plain dicts, named after the GenAI semantic conventions where they have a name, `anges.*` where not)."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlparse

from anges.store.events import Event, is_valid_id, kind_of
from anges.store.results import APICall, ShellRun
from anges.util.clipping import clip
from anges.util.masking import mask_secrets

PROVIDERS = {"openai": "openai", "anthropic": "anthropic", "gemini": "gcp.gemini"}
"""anges's provider names as `gen_ai.provider.name` has them (a Gemini preset on Vertex AI is `gcp.vertex_ai`)."""
OPERATIONS = {"gemini": "generate_content"}
"""The `gen_ai.operation.name` of a model call by provider; every other is `chat`."""
ARGUMENT_KEYS = ("command", "directive", "path", "server", "tool", "arguments", "agent_id", "agent_type", "api",
                 "operation", "method", "url")
"""The facts of an action's event that say what it was asked to do (its arguments, when content is captured)."""
_KIND = re.compile(r"[A-Za-z_][A-Za-z0-9_.\[\]-]{0,99}")
"""What a kind looks like (`event_limit`, `nonzero_exit`, `RateLimitError`, `safety.rules[3]`): no free text."""


def describe_model(model: Any) -> dict[str, Any]:
    """`gen_ai.provider.name`, `gen_ai.request.model`, `server.*` and the request settings of a model callable."""
    for _ in range(5):  # a recording wraps the model it records
        inner = getattr(model, "inner", None)
        if inner is None or inner is model:
            break
        model = inner
    provider = str(getattr(model, "provider", "") or "")
    preset = getattr(model, "preset", None)
    name = str(getattr(model, "name", "") or getattr(model, "__name__", "") or type(model).__name__)
    scheme = name.partition(":")[0]
    facts: dict[str, Any] = {
        "gen_ai.operation.name": OPERATIONS.get(provider, "chat"),
        "gen_ai.provider.name": ("gcp.vertex_ai" if provider == "gemini" and getattr(preset, "vertex", False)
                                 else PROVIDERS.get(provider, provider or scheme or "_OTHER")),
        "gen_ai.request.model": str(getattr(preset, "model", "") or scheme),  # not a scripted:FILE's path
    }
    url = urlparse(str(getattr(model, "base_url", "") or ""))
    if url.hostname:
        facts["server.address"] = url.hostname
        facts["server.port"] = url.port or (443 if url.scheme == "https" else 80)
    settings = getattr(model, "settings", None)
    if settings is not None:
        facts["gen_ai.request.max_tokens"] = settings.max_output_tokens
        facts["gen_ai.request.stream"] = settings.stream
    return facts


def reply_attributes(reply: Any, cost: float | None) -> dict[str, Any]:
    """What a reply says of itself: the model that answered, why it stopped, tokens, retries, cost."""
    facts: dict[str, Any] = {"anges.model.attempts": len(getattr(reply, "retries", ())) + 1}
    if getattr(reply, "model", ""):
        facts["gen_ai.response.model"] = reply.model
    if getattr(reply, "finish_reason", ""):
        facts["gen_ai.response.finish_reasons"] = [reply.finish_reason]
    usage = getattr(reply, "usage", None)
    if usage is not None:
        facts.update({"gen_ai.usage.input_tokens": usage.input_tokens,
                      "gen_ai.usage.output_tokens": usage.output_tokens,
                      "gen_ai.usage.cache_read.input_tokens": usage.cached_tokens,
                      "anges.usage.estimated": usage.estimated})
    if cost is not None:
        facts["anges.cost.usd"] = cost
    return facts


def error_type(error: BaseException) -> str:
    """A low-cardinality name of what went wrong: a stop's reason, a refused reply's kind, else the class name (a
    `reason` that is a sentence, as some libraries' errors have, is not a kind)."""
    for given in (getattr(error, "reason", ""), getattr(error, "kind", "")):
        if isinstance(given, str) and _KIND.fullmatch(given):
            return given
    return type(error).__name__


def kind(value: Any, default: str = "other") -> str:
    """`value` where it is a kind (a word, an identifier, a rule's name), else `default`: what telemetry exports of a
    value that could hold free text (a path, a command, a quoted request) when content is not captured."""
    return value if isinstance(value, str) and _KIND.fullmatch(value) else default


def tool_name(event: Event) -> str:
    """The action an event is the result of (RUN_SHELL_CMD, EDIT_FILE, ...); "" for other events."""
    return str(event.data.get("action_type") or kind_of(event.type).action)


def action_attributes(event: Event, run: ShellRun | None = None) -> dict[str, Any]:
    """The facts of an action's result (`run`: its command's, when it is one): what it was, how it ended,
    sandboxed or not, how it was approved."""
    data = event.data
    facts: dict[str, Any] = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool_name(event),
                             "gen_ai.tool.type": "function"}
    if run is not None:
        facts["anges.command.state"] = run.state
        if run.exit_code is not None:
            facts["anges.command.exit_code"] = run.exit_code
        if "duration" in data:
            facts["anges.command.duration"] = run.duration
    if isinstance(data.get("sandbox"), str):
        facts["anges.sandbox"] = data["sandbox"]
    approval = data.get("approval")
    approval = approval if isinstance(approval, dict) else {}
    escalated = data.get("escalated", approval.get("escalated"))
    if escalated is not None:
        facts["anges.escalated"] = bool(escalated)
    if approval.get("by"):
        facts["anges.approval.by"] = kind(approval["by"])
    if isinstance(data.get("operation"), str):
        facts["anges.edit.operation"] = kind(data["operation"])
    for key in ("lines_added", "lines_removed"):
        if isinstance(data.get(key), int) and not isinstance(data.get(key), bool):
            facts[f"anges.edit.{key}"] = data[key]
    if is_valid_id(data.get("agent_id")):
        facts["anges.child.agent_id"] = data["agent_id"]
    for key in ("agent_type", "exit_type"):
        if isinstance(data.get(key), str):
            facts[f"anges.child.{key}"] = kind(data[key])
    call = APICall.of(event)
    return {**facts, **_api_attributes(call)} if call is not None else facts


def _api_attributes(call: APICall) -> dict[str, Any]:
    """A web API call as OpenTelemetry's HTTP client conventions name it; the URL (it can hold the values of path
    and query parameters) only among the arguments, when content is captured."""
    facts: dict[str, Any] = {"anges.api.name": kind(call.api), "anges.api.operation": kind(call.operation)}
    if call.sent:
        url = urlparse(call.url)
        facts.update({"http.request.method": kind(call.method), "server.address": url.hostname or "",
                      "anges.api.duration": call.duration, "http.request.resend_count": call.attempts - 1})
        if url.port:
            facts["server.port"] = url.port
    if call.status is not None:
        facts["http.response.status_code"] = call.status
    return facts


def action_failure(event: Event, run: ShellRun | None = None) -> tuple[str, str] | None:
    """(error.type, description) when an action failed: it raised or failed (an edit), its command (`run`) did not
    exit 0."""
    data = event.data
    if data.get("error"):
        return "action_error", str(data["error"])
    call = APICall.of(event)
    if call is not None and call.status is not None and call.status >= 400:
        return str(call.status), call.outcome()
    if run is not None and run.state in ("timed_out", "interrupted"):
        return run.state, run.ending()
    if run is not None and run.exit_code not in (None, 0):
        return "nonzero_exit", run.ending()
    return None


def approval_attributes(data: dict) -> dict[str, Any]:
    """The facts of an approval request or decision (`approval_requested`, `approval_decided` events)."""
    names = {"action_type": "gen_ai.tool.name", "rule": "anges.approval.rule", "channel": "anges.approval.channel",
             "escalate": "anges.approval.escalate", "decision": "anges.approval.decision", "by": "anges.approval.by",
             "always": "anges.approval.always"}
    return {name: kind(data[key]) if isinstance(data[key], str) else data[key] for key, name in names.items()
            if isinstance(data.get(key), (str, bool))}


def messages(role: str, text: str, secrets: list[str], limit: int, finish_reason: str = "") -> str:
    """`gen_ai.input.messages` / `gen_ai.output.messages`: one text message as the conventions' JSON, masked and
    cut to `limit` characters."""
    message: dict[str, Any] = {"role": role, "parts": [{"type": "text", "content": content(text, secrets, limit)}]}
    if finish_reason:
        message["finish_reason"] = finish_reason
    return json.dumps([message], ensure_ascii=False)


def content(text: str, secrets: list[str], limit: int) -> str:
    """A text for a span: secrets masked, then cut to `limit` characters around the one marker."""
    return clip(mask_secrets(str(text), secrets), limit)


def arguments(event: Event) -> str:
    """`gen_ai.tool.call.arguments`: what the action was asked to do, as JSON (from the masked event)."""
    return json.dumps({key: event.data[key] for key in ARGUMENT_KEYS if key in event.data}, ensure_ascii=False,
                      default=str)
