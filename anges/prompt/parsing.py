"""Model reply text -> validated actions; an invalid reply raises FormatError with feedback for the model."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from anges.exceptions import FormatError
from anges.util.clipping import shorten

MAX_REPLY_CHARS = 2_000_000
"""Longer replies are rejected unread: no sensible action reply is this big, and scanning it costs time."""

REPLY_SHAPE = '{"analysis": "...", "reasoning": "...", "actions": [{"action_type": "...", ...}]}'
MAX_LISTED_PROBLEMS = 5

_FAILED = object()  # "could not decode / convert"; None is a valid JSON value, so it cannot mean failure

_KIND_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false", list: "a list",
               dict: "a JSON object"}
_THINK_OPEN = re.compile(r"<(think|thinking)>")
_TOKEN = re.compile(r'[{}\[\]"]')
_STRING_STOP = re.compile(r'["\\]')
# A whole string literal (left untouched) or a comma right before a closing bracket (dropped).
_TRAILING_COMMA = re.compile(r'"(?:[^"\\]|\\.)*"|,(\s*[}\]])', re.DOTALL)


@dataclass(frozen=True)
class Param:
    """One field of an action."""

    kind: type
    """str, int, float, bool, list or dict."""
    required: bool = True
    non_empty: bool = False
    """For str: a blank value is an error (e.g. the content of TASK_COMPLETE)."""
    description: str = ""
    """Used in error messages only; the action guides are templates."""


@dataclass
class ParsedReply:
    """A valid reply; each action has `action_type` set to its registered type and its fields coerced."""

    analysis: str
    reasoning: str
    actions: list[dict]
    raw: str


def parse_reply(text: object, actions: Mapping[str, object]) -> ParsedReply:
    """Read and validate a model reply against the registered actions; raise FormatError if it is invalid."""
    raw = _as_text(text)
    try:
        reply = _find_reply(raw)
        return ParsedReply(
            analysis=_text_field(reply.get("analysis")),
            reasoning=_text_field(reply.get("reasoning")),
            actions=_validate_actions(reply, actions),
            raw=raw,
        )
    except RecursionError:
        raise FormatError("Your reply's JSON is nested too deeply to read. Reply with one flat JSON object: "
                          f"{REPLY_SHAPE}") from None


def _as_text(text: object) -> str:
    if isinstance(text, (bytes, bytearray)):
        _check_size(len(text))
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError:
            raise FormatError("Your reply is not valid UTF-8 text. Reply with one JSON object: "
                              f"{REPLY_SHAPE}") from None
    if text is None:
        raise FormatError(f"Your reply was empty. Reply with one JSON object: {REPLY_SHAPE}")
    if not isinstance(text, str):
        raise FormatError(f"Your reply was not text (got {type(text).__name__}). Reply with one JSON object: "
                          f"{REPLY_SHAPE}")
    _check_size(len(text))
    return text


def _check_size(size: int) -> None:
    if size > MAX_REPLY_CHARS:
        raise FormatError(f"Your reply is {size:,} characters long, over the limit of {MAX_REPLY_CHARS:,}. "
                          "Keep replies shorter: write large content in several smaller actions or replies.")


def _find_reply(raw: str) -> dict:
    """The one reply object in the text: the whole text, or the JSON object among prose and fences."""
    text = raw.lstrip("\ufeff").strip()
    if not text:
        raise FormatError(f"Your reply was empty. Reply with one JSON object: {REPLY_SHAPE}")
    body = strip_thinking(text)
    if not body:
        raise FormatError(f"Your reply has only a reasoning block and no JSON after it. After the block, reply "
                          f"with one JSON object: {REPLY_SHAPE}")
    whole, _ = _loads(_unfence(body))
    if whole is not _FAILED:
        if isinstance(whole, dict):
            return whole
        raise FormatError(f"Your reply is {_describe(whole)}, not a JSON object. Reply with one JSON object: "
                          f"{REPLY_SHAPE}")

    spans, truncated = _object_spans(body)
    replies: list[dict] = []
    others: list[dict] = []
    broken: list[tuple[str, ValueError]] = []
    for start, end in spans:
        chunk = body[start:end]
        if "action" not in chunk:  # cannot be a reply; not worth decoding
            continue
        value, error = _loads(chunk)
        if error is not None:
            broken.append((chunk, error))
        elif not isinstance(value, dict):  # a balanced {...} that decodes is an object
            continue
        elif "actions" not in value and "action" not in value:
            others.append(value)
        elif value not in replies:
            replies.append(value)
    if len(replies) == 1:
        return replies[0]
    if replies:
        raise FormatError(f"Your reply contains {len(replies)} separate JSON objects with actions. Send exactly "
                          'one JSON object and put every action in its "actions" list.')
    if truncated:
        raise FormatError("Your reply looks cut off: it ends inside an unfinished JSON object (an unterminated "
                          "string or unclosed brackets). Keep each reply shorter: put less content in one action, "
                          "or split the work over several actions and replies.")
    if broken:
        chunk, error = max(broken, key=lambda item: len(item[0]))
        raise FormatError(_syntax_feedback(chunk, error))
    if others:  # an object that mentions actions but has no list of them: validation says what is missing
        return others[0]
    if spans:
        raise FormatError('Your reply has no JSON object with an "actions" list. Reply with one JSON object: '
                          f"{REPLY_SHAPE}")
    raise FormatError(f"Your reply contains no JSON object. Reply with one JSON object and nothing else: "
                      f"{REPLY_SHAPE}")


def strip_thinking(body: str) -> str:
    """Drop the reasoning blocks models put before their answer: leading <think>...</think> (or <thinking>), or
    text up to a lone </think> (some servers put the opening tag in the prompt). FormatError when a block
    never closes: the reply was cut off while the model was thinking.

    The only place reasoning blocks are handled: replies, summaries and titles all pass through it.
    """
    while match := _THINK_OPEN.match(body):
        closing = f"</{match.group(1)}>"
        end = body.find(closing, match.end())
        if end < 0:
            raise FormatError(f"Your reply opens {match.group(0)} but never closes it; it may have been cut off. "
                              f"Close the block with {closing} and put the JSON reply after it.")
        body = body[end + len(closing):].lstrip()
    # Some servers put the opening tag in the prompt, so only the closing one shows up in the reply.
    if not body.startswith(("{", "```")) and (end := body.find("</think>")) >= 0:
        body = body[end + len("</think>"):].lstrip()
    return body


def partial_reply(text: str) -> dict:
    """The fields of a reply still arriving, as far as they go (a string cut mid-way included): {} until its JSON
    object starts (after any reasoning block, and an opening ``` fence)."""
    import jiter

    body = text.lstrip("\ufeff").lstrip()
    if _THINK_OPEN.match(body):
        try:
            body = strip_thinking(body)
        except FormatError:  # the block is still open
            return {}
    if body.startswith("```"):
        body = body[body.find("\n") + 1:] if "\n" in body else ""
    if not body.startswith("{"):
        return {}
    try:
        value = jiter.from_json(body.encode(), partial_mode="trailing-strings")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _unfence(body: str) -> str:
    """The inside of a reply that is exactly one ``` fence; otherwise the text unchanged."""
    if body.startswith("```") and body.endswith("```") and "\n" in body:
        return body[body.index("\n") + 1:-3]
    return body


def _loads(text: str) -> tuple[object, ValueError | None]:
    """Decode JSON, tolerating raw control characters in strings and trailing commas; (_FAILED, error) if not."""
    try:
        return json.loads(text, strict=False), None
    except ValueError as error:  # JSONDecodeError, or a number too long to convert
        repaired = _TRAILING_COMMA.sub(lambda m: m.group(1) if m.group(1) is not None else m.group(0), text)
        if repaired != text:
            try:
                return json.loads(repaired, strict=False), None
            except ValueError:
                pass
        return _FAILED, error


def _object_spans(text: str) -> tuple[list[tuple[int, int]], bool]:
    """The outermost balanced `{...}` spans of the text, and whether it ends inside an unclosed one.

    Only quotes and brackets are tracked (strings with escapes, nesting); prose between objects is skipped.
    A closer that does not match still pops, so stray brackets in prose do not swallow the rest of the text.
    """
    spans: list[tuple[int, int]] = []
    stack: list[tuple[str, int]] = []
    pos, in_string = 0, False
    while True:
        if not stack:
            start = text.find("{", pos)
            if start < 0:
                return spans, False
            stack.append(("{", start))
            pos = start + 1
        elif in_string:
            match = _STRING_STOP.search(text, pos)
            if match is None:
                return spans, True
            pos = match.end() + (1 if match.group() == "\\" else 0)
            in_string = match.group() == "\\"
        else:
            match = _TOKEN.search(text, pos)
            if match is None:
                return spans, True
            token, pos = match.group(), match.end()
            if token == '"':
                in_string = True
            elif token in "{[":
                stack.append((token, match.start()))
            else:
                opener, start = stack.pop()
                if opener == "{" and token == "}":
                    while spans and spans[-1][0] > start:  # keep only the outermost closed objects
                        spans.pop()
                    spans.append((start, pos))


def _syntax_feedback(chunk: str, error: ValueError) -> str:
    if not isinstance(error, json.JSONDecodeError):
        return f"Your reply's JSON could not be read: {error}. Reply with one valid JSON object: {REPLY_SHAPE}"
    rest = chunk[error.pos:]
    hint = ""
    if rest.startswith("'"):
        hint = " JSON needs double quotes around keys and strings, not single quotes."
    elif rest.startswith("/"):
        hint = " JSON does not allow comments; remove them."
    elif rest.startswith(("True", "False", "None")):
        hint = " JSON writes true, false and null in lower case."
    return (f"Your reply is not valid JSON: {error.msg} at line {error.lineno} column {error.colno} of the "
            f"JSON object.{hint} Reply with one valid JSON object: {REPLY_SHAPE}")


def _text_field(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _validate_actions(reply: dict, registry: Mapping[str, object]) -> list[dict]:
    if "actions" in reply and "action" in reply:
        raise FormatError('Your reply has both "actions" and "action"; put every action in one "actions" list.')
    key = "actions" if "actions" in reply else "action"
    items = reply.get(key)
    if items is None and key not in reply and "action_type" in reply:
        raise FormatError("Your reply is a bare action object. Wrap your actions in a reply object with an "
                          f'"actions" list: {REPLY_SHAPE}')
    if items is None:
        raise FormatError(f'Your reply has no actions: "actions" is {"null" if key in reply else "missing"}. '
                          'Give a list of one or more action objects, each with an "action_type".')
    if isinstance(items, dict):
        items = [items]
    if not isinstance(items, list):
        raise FormatError(f'"{key}" must be a list of action objects, but it is {_describe(items)}. '
                          'Write "actions": [{"action_type": "...", ...}].')
    if not items:
        raise FormatError('Your reply has an empty "actions" list. Give at least one action object, each with '
                          'an "action_type".')

    valid_types = list(registry)
    resolved, problems = [], []
    for index, item in enumerate(items):
        where = f"actions[{index}]"
        if not isinstance(item, dict):
            problems.append(f'{where} is {_describe(item)}, but each action must be a JSON object with an '
                            '"action_type".')
            continue
        type_key = "action_type" if "action_type" in item else "type" if "type" in item else None
        if type_key is None:
            problems.append(f'{where} has no "action_type".')
            continue
        value = item[type_key]
        if not isinstance(value, str) or not value.strip():
            problems.append(f'{where}: "action_type" must name an action, not {_describe(value)}.')
            continue
        name = value.strip().upper()
        if name not in registry:
            problems.append(f"{where} has unknown action_type {shorten(json.dumps(value.strip()), 60)}.")
            continue
        action = {"action_type": name, **{k: v for k, v in item.items() if k != type_key}}
        resolved.append((index, name, registry[name], action))
    if problems:
        raise FormatError(f"{_join(problems)} Valid action types: {', '.join(valid_types) or '(none)'}.")

    last = len(resolved) - 1
    lonely = [name for position, (_, name, handler, _) in enumerate(resolved)
              if getattr(handler, "unique_action", False)
              and not (position == last and getattr(handler, "may_end_reply", False))]
    if lonely and len(resolved) > 1 and all(getattr(registry[name], "may_end_reply", False) for name in lonely):
        raise FormatError(f"{lonely[0]} must be the last action of its reply (or the only one): move it to the end.")
    if lonely and len(resolved) > 1:
        sent = ", ".join(name for _, name, _, _ in resolved)
        advice = (f"Choose one of {' and '.join(lonely)}." if len(lonely) > 1 else
                  f"Send the other actions now and {lonely[0]} alone in a later reply.")
        raise FormatError(f"{lonely[0]} must be the only action in its reply, but your reply has {len(resolved)} "
                          f"actions ({sent}). {advice}")

    for index, name, handler, action in resolved:
        params = getattr(handler, "params", None)
        if isinstance(params, Mapping):  # legacy custom actions declare no params: only the type is checked
            problems.extend(_check_fields(f"actions[{index}] ({name})", action, params))
    if problems:
        raise FormatError(_join(problems))
    return [action for _, _, _, action in resolved]


def _check_fields(where: str, action: dict, params: Mapping[str, Param]) -> list[str]:
    """Coerce the declared fields of one action in place; the problems found, as sentences."""
    problems = []
    for field, param in params.items():
        about = f" ({param.description})" if param.description else ""
        value = action.get(field)
        if value is None:  # null counts as absent, so handlers see a field only when it has a value
            action.pop(field, None)
            if param.required:
                problems.append(f'{where} is missing the required field "{field}"{about}.')
            continue
        coerced = _coerce(value, param.kind)
        if coerced is _FAILED:
            expected = _KIND_NAMES.get(param.kind, param.kind.__name__)
            problems.append(f'{where}: "{field}" must be {expected}{about}, not {_describe(value)}.')
        elif param.non_empty and isinstance(coerced, str) and not coerced.strip():
            problems.append(f'{where}: "{field}" must not be empty{about}.')
        else:
            action[field] = coerced
    return problems


def _coerce(value: object, kind: type) -> object:
    """The value as `kind` when the conversion is lossless and unambiguous, else _FAILED."""
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        return _FAILED
    if isinstance(value, bool):  # true/false is never a number or a string
        return value if kind not in (int, float, str) and isinstance(value, kind) else _FAILED
    if kind is int:
        if isinstance(value, int):
            return value
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                value = _to_float(value)
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return _FAILED
    if kind is float:
        number = _to_float(value) if isinstance(value, (str, int, float)) else _FAILED
        return number if isinstance(number, float) and math.isfinite(number) else _FAILED
    if kind is str and isinstance(value, (int, float)):
        return str(value)
    return value if isinstance(value, kind) else _FAILED


def _to_float(value: str | float) -> object:
    try:
        return float(value.strip() if isinstance(value, str) else value)
    except (ValueError, OverflowError):
        return _FAILED


def _describe(value: object) -> str:
    """How a JSON value reads in feedback: 'null', 'a list', 'the string "soon"', ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, str):
        return f"the string {shorten(json.dumps(value, ensure_ascii=False), 60)}"
    if isinstance(value, (int, float)):
        return f"the number {shorten(str(value), 60)}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"


def _join(problems: list[str]) -> str:
    shown = " ".join(problems[:MAX_LISTED_PROBLEMS])
    hidden = len(problems) - MAX_LISTED_PROBLEMS
    return f"{shown} (and {hidden} more problems)" if hidden > 0 else shown
