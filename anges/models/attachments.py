"""Files a request attaches (an image, a PDF): read once when the request is sent, carried by every prompt of its run
after the text, and sent the way each provider's API takes them."""

from __future__ import annotations

import base64
import hashlib
import os
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from anges.exceptions import ContextExceeded
from anges.models.retry import Failure

ATTACHABLE = ("image/png", "image/jpeg", "image/gif", "image/webp", "application/pdf")
"""What every provider reads inline (HEIC only Gemini: it is not attached)."""
MAX_ATTACHMENT_BYTES = 5_000_000
"""Bytes of one file (a request's prompt, with each step of its run, carries them)."""
MAX_ATTACHMENTS = 4
"""Files one request attaches."""


@dataclass(frozen=True)
class Attachment:
    """One attached file: its path as the user named it, its type and its bytes."""

    path: str
    mime_type: str
    data: bytes = field(repr=False)

    @property
    def size(self) -> int:
        return len(self.data)

    def facts(self) -> dict:
        """What the request's event records of it (never the bytes)."""
        return {"path": self.path, "mime_type": self.mime_type, "size": self.size,
                "sha256": hashlib.sha256(self.data).hexdigest()}

    @cached_property
    def base64(self) -> str:
        """Its bytes in base64, encoded once: every prompt of the run sends them."""
        return base64.b64encode(self.data).decode("ascii")

    def data_url(self) -> str:
        return f"data:{self.mime_type};base64,{self.base64}"


class Request(str):
    """A request text with the files it attaches; any `str` is a request without any."""

    attachments: tuple[Attachment, ...]

    def __new__(cls, text: str, attachments: tuple[Attachment, ...] = ()) -> Request:
        obj = super().__new__(cls, text)
        obj.attachments = tuple(attachments)
        return obj


def attachments_of(value: object) -> tuple[Attachment, ...]:
    """The files a request or prompt carries (none for a plain `str`)."""
    return tuple(getattr(value, "attachments", ()) or ())


def openai_parts(attachments: tuple[Attachment, ...]) -> list[dict]:
    """Chat-completions content parts: an image as an `image_url` data URL, a PDF as a `file` with `file_data`."""
    return [{"type": "file", "file": {"filename": os.path.basename(item.path), "file_data": item.data_url()}}
            if item.mime_type == "application/pdf" else {"type": "image_url", "image_url": {"url": item.data_url()}}
            for item in attachments]


def anthropic_blocks(attachments: tuple[Attachment, ...]) -> list[dict]:
    """Messages content blocks: `image`, or `document` for a PDF, each with a base64 source."""
    return [{"type": "document" if item.mime_type == "application/pdf" else "image",
             "source": {"type": "base64", "media_type": item.mime_type, "data": item.base64}}
            for item in attachments]


def gemini_parts(attachments: tuple[Attachment, ...]) -> list[Any]:
    """google-genai parts holding the bytes inline."""
    from google.genai import types

    return [types.Part.from_bytes(data=item.data, mime_type=item.mime_type) for item in attachments]


def explain_refusal(failure: Failure | None, attachments: tuple[Attachment, ...]) -> Failure | None:
    """A 400 to a prompt with attachments says what was attached and what to do (a model without vision or PDFs
    refuses them)."""
    if failure is None or not attachments or failure.status != 400 or failure.retryable \
            or issubclass(failure.error, ContextExceeded):  # too long is not unreadable: the agent folds its history
        return failure
    names = ", ".join(f"{item.path} ({item.mime_type})" for item in attachments)
    return Failure(f"{failure.reason}. This request attached {names}: the model may not read images or PDFs; send "
                   "the request again without the @ mention, or choose a model that reads them (/model)",
                   False, failure.status, failure.retry_after, failure.error, failure.details)
