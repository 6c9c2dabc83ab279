"""Secrets: which environment variables hold them, and masking their values wherever text is kept or shown.

`anges.agents.record.mask_event` is where a recorded event loses its secrets (the agent calls it on every event
it records); the command runner masks output as it is captured, so a secret cut by the output cap leaves no fragment.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

CREDENTIAL_ENV_VARS = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "DEEPSEEK_API_KEY",
    "OPENROUTER_API_KEY",
    "ANGES_UI_PASSWORD",
)
SECRET_SUFFIXES = ("_API_KEY", "_TOKEN", "_SECRET", "_PASSWORD", "_ACCESS_KEY", "_HEADERS")
"""Variables with these endings hold secrets: their values are masked in everything recorded."""
REDACTED = "[REDACTED]"
MIN_SECRET_LENGTH = 8
"""Shorter values are not masked: they would mask ordinary words."""
_FRAGMENT = 4
"""The shortest end of a secret masked where a cut splits it."""
_secret_files: set[str] = set()


def is_credential(name: str) -> bool:
    """True for a model credential: a provider's key variable or any `..._API_KEY`."""
    upper = name.upper()
    return upper in CREDENTIAL_ENV_VARS or upper.endswith("_API_KEY")


def is_secret_name(name: str, named: Iterable[str] = ()) -> bool:
    """True for a variable that holds a secret: a model credential, a name ending in a SECRET_SUFFIXES word, or
    one of `named` (the configuration's: a model's `api_key_env`, an MCP server's variables)."""
    upper = name.upper()
    return is_credential(name) or upper.endswith(SECRET_SUFFIXES) or upper in {n.upper() for n in named}


def secret_values(environ: Mapping[str, str] = os.environ, secret_names: Iterable[str] = ()) -> list[str]:
    """The values of the secret variables set in `environ` (see is_secret_name) that are long enough to mask."""
    named = tuple(secret_names)
    return [value for name, value in environ.items()
            if is_secret_name(name, named) and len(value) >= MIN_SECRET_LENGTH]


def note_secret_file(path: str | os.PathLike) -> None:
    """Remember a file anges read secrets from (a --config or --mcp-config file): the sandbox hides it."""
    _secret_files.add(os.path.abspath(os.path.expanduser(os.fspath(path))))


def secret_files() -> list[str]:
    """The files noted by `note_secret_file`."""
    return sorted(_secret_files)


def encoded_forms(secret: str) -> list[str]:
    """A secret and the forms a URL or a form body carries it in (percent-encoded, `+` for a space): all masked."""
    from urllib.parse import quote, quote_plus

    return list(dict.fromkeys([secret, quote(secret, safe=""), quote(secret), quote_plus(secret, safe="")]))


def mask_secrets(text: str, secrets: Iterable[str]) -> str:
    """Replace every occurrence of each secret (of at least 8 characters) with [REDACTED]."""
    for secret in sorted({s for s in secrets if len(s) >= MIN_SECRET_LENGTH}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text


def mask_cut_edges(head: str, tail: str, secrets: Iterable[str]) -> tuple[str, str]:
    """Mask a secret's fragment left at the end of `head` or the start of `tail` (a cut can split a secret)."""
    for secret in (s for s in secrets if len(s) >= MIN_SECRET_LENGTH):
        for size in range(len(secret) - 1, _FRAGMENT - 1, -1):
            if head.endswith(secret[:size]):
                head = head[:-size] + REDACTED
                break
        for size in range(len(secret) - 1, _FRAGMENT - 1, -1):
            if tail.startswith(secret[-size:]):
                tail = REDACTED + tail[size:]
                break
    return head, tail


def settled_length(text: str, secrets: Iterable[str]) -> int:
    """How much of a text still arriving can be shown: all but an end that may be the start of a secret (of at
    least a few characters: fewer give nothing away)."""
    end = len(text)
    for secret in (s for s in secrets if len(s) >= MIN_SECRET_LENGTH):
        for size in range(min(len(secret) - 1, len(text)), _FRAGMENT - 1, -1):
            if text.endswith(secret[:size]):
                end = min(end, len(text) - size)
                break
    return end
