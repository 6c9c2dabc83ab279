"""Asking a multimodal model about images, PDFs and links (READ_MIME_FILES).

Every provider class sends its prompt to the SDK as the content of one user message, and each SDK accepts a
list of content parts there. So a reader builds that list in the provider's own format (inline bytes for
Gemini, data URLs for OpenAI-compatible servers, base64 sources for Anthropic) and calls the provider as usual:
the retry policy, error classification and usage accounting are the providers' own.
"""

from __future__ import annotations

import errno
import mimetypes
import os
import re
import stat
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from anges.exceptions import AngesError, FormatError, ModelError, ModelReplyError
from anges.models.attachments import Attachment, anthropic_blocks, gemini_parts, openai_parts

if TYPE_CHECKING:
    from anges.config.types import Config
    from anges.models.base import Completion

IMAGE_TYPES = ("image/png", "image/jpeg", "image/webp", "image/gif", "image/heic", "image/heif")
PDF = "application/pdf"
SUPPORTED = (*IMAGE_TYPES, PDF)
# What each provider reads from local files.
PROVIDER_TYPES = {
    "gemini": SUPPORTED,
    "openai": (*IMAGE_TYPES[:4], PDF),
    "anthropic": (*IMAGE_TYPES[:4], PDF),
}
_SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"%PDF-", PDF),
)
_YOUTUBE = re.compile(r"^https?://(www\.|m\.)?(youtube\.com|youtu\.be)/", re.IGNORECASE)
# Words in a 400 answer that mean the model cannot take these inputs (no vision, no PDF support).
_NO_VISION = re.compile(r"image|vision|multimodal|multi-modal|modalit|file|pdf|document|content type|media",
                        re.IGNORECASE)


class MimeError(AngesError):
    """An input cannot be read or sent; the message says which and why."""


@dataclass
class MimeInput:
    """One input: a local file's bytes with its type, or a URL."""

    source: str
    """As the model gave it."""
    mime_type: str = ""
    data: bytes = b""
    url: str = ""

    def describe(self) -> dict:
        """JSON-able facts for Event.data (never the bytes)."""
        if self.url:
            return {"source": self.source, "url": self.url, "mime_type": self.mime_type or None}
        return {"source": self.source, "mime_type": self.mime_type, "bytes": len(self.data)}


def is_url(source: str) -> bool:
    """True for an input read as a link (http or https); anything else is a local path."""
    return urlparse(source.strip()).scheme in ("http", "https")


def local_path(source: str, cwd: str | os.PathLike) -> str:
    """The resolved path of a local input or output, as the reader and the policy both see it; MimeError for text
    no path can hold, OSError (sandbox.PathChanging) for a path that keeps changing."""
    from anges.util.paths import resolve
    from anges.util.printable import unusable

    problem = unusable(source)
    if problem:
        raise MimeError(f"{source!r} cannot be a file name: it holds {problem}")
    return resolve(os.path.join(cwd, os.path.expanduser(source.strip())))


def load_inputs(sources: object, cwd: str | os.PathLike, max_file_bytes: int,
                checked: tuple[str, ...] | None = None) -> list[MimeInput]:
    """Read local files (relative to `cwd`) and accept URLs; MimeError names the first input that cannot be used.

    `checked` are the resolved paths the policy judged: a file that now resolves elsewhere is refused, and none
    is read through a symlink swapped in after the check.
    """
    if not isinstance(sources, list) or not sources:
        raise MimeError("`inputs` must be a non-empty list of file paths or URLs")
    inputs = []
    for source in sources:
        if not isinstance(source, str) or not source.strip():
            raise MimeError(f"each input must be a file path or URL (a string), got {source!r}")
        source = source.strip()
        if is_url(source):
            inputs.append(MimeInput(source, mime_type=_url_type(source), url=source))
        else:
            inputs.append(_read_file(source, cwd, max_file_bytes, checked))
    return inputs


def write_answer(output: str, cwd: str | os.PathLike, text: str, checked: tuple[str, ...] | None = None) -> str:
    """Write the answer to `output` (relative to `cwd`) the way EDIT_FILE writes: to the path the policy judged,
    with no symlink followed after the check. Returns the path written; OSError when it cannot be."""
    from anges.tools.fileedit import replace_contents
    from anges.util.paths import open_directory

    path = local_path(output, cwd)
    if checked is not None and path not in checked:
        raise OSError(errno.ESTALE, f"{output} changed after it was checked (it now leads to {path})")
    directory = open_directory(os.path.dirname(path), create=True)
    try:
        replace_contents(directory, os.path.basename(path), (text + "\n").encode("utf-8"))
    finally:
        os.close(directory)
    return path


def _read_file(source: str, cwd: str | os.PathLike, max_file_bytes: int, checked: tuple[str, ...] | None) -> MimeInput:
    from anges.util.paths import open_nofollow

    try:
        path = local_path(source, cwd)
    except OSError as exc:
        raise MimeError(f"{source}: {exc.strerror or exc}; not read") from None
    if checked is not None and path not in checked:
        raise MimeError(f"{source} changed after it was checked (it now leads to {path}); not read")
    try:
        fd = open_nofollow(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise MimeError(f"{source}: no such file (relative paths start at {cwd})") from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise MimeError(f"{source} changed after it was checked (a symlink now stands on the way); not read") \
                from None
        raise MimeError(f"{source}: cannot read: {exc.strerror or exc}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise MimeError(f"{source}: not a regular file")
    with os.fdopen(fd, "rb") as handle:
        if max_file_bytes and info.st_size > max_file_bytes:
            raise MimeError(f"{source}: {info.st_size} bytes is over the limit of {max_file_bytes} bytes per file "
                            "(mime_reader.max_file_bytes); shrink or split it first")
        if info.st_size == 0:
            raise MimeError(f"{source}: the file is empty")
        try:
            data = handle.read(max_file_bytes + 1 if max_file_bytes else -1)
        except OSError as exc:
            raise MimeError(f"{source}: cannot read: {exc.strerror or exc}") from None
    mime_type = sniff(data) or mimetypes.guess_type(path)[0] or ""
    if mime_type not in SUPPORTED:
        raise MimeError(f"{source}: unsupported type {mime_type or 'unknown'}; READ_MIME_FILES reads images "
                        f"(PNG, JPEG, WebP, GIF, HEIC) and PDF files")
    return MimeInput(source, mime_type=mime_type, data=data)


def sniff(data: bytes) -> str:
    """The type a file's first bytes announce, or ""."""
    for signature, mime_type in _SIGNATURES:
        if data.startswith(signature):
            return mime_type
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data[4:8] == b"ftyp" and data[8:12] in (b"heic", b"heix", b"mif1", b"heim", b"heis"):
        return "image/heic"
    return ""


def _url_type(url: str) -> str:
    if _YOUTUBE.match(url):
        return "video/*"
    return mimetypes.guess_type(urlparse(url).path)[0] or ""


# -- the reader -------------------------------------------------------------------------------------------------


class MimeReader:
    """Asks the configured multimodal model (`mime_reader.model`) one question about some inputs."""

    def __init__(self, config: Config):
        from anges.models import find_preset, provider_class

        self.name = config.mime_reader.model
        label, preset = find_preset(self.name, config)
        cls = provider_class(preset.provider)
        self.provider = getattr(cls, "provider", preset.provider)  # the wire format it speaks
        if self.provider not in PROVIDER_TYPES:
            raise MimeError(f"READ_MIME_FILES works with Gemini, OpenAI-compatible and Anthropic models, not "
                            f"{preset.provider!r} (mime_reader.model = {self.name!r})")
        settings = config.model_settings.model_copy(update={"json_mode": False})
        self.model = cls(preset, settings, config.retry, name=f"{label}:{preset.model}")

    def ask(self, question: str, inputs: list[MimeInput]) -> Completion:
        """The model's answer; MimeError for inputs this provider cannot take or a model without vision."""
        from anges.models.base import Completion
        from anges.prompt.parsing import strip_thinking

        content = self.content(question, inputs)
        try:
            answer = self.model(content)
        except ModelError as exc:
            raise self._explain(exc) from exc
        try:
            text = strip_thinking(answer.strip())
        except FormatError:
            raise ModelReplyError(f"{self.model.name}: the answer was cut off while the model was thinking",
                                  kind="truncated", usage=answer.usage) from None
        if not text and answer.finish_reason == "length":
            raise ModelReplyError(f"{self.model.name}: the answer was cut off at max_output_tokens before any text",
                                  kind="truncated", usage=answer.usage)
        return Completion(text, answer.usage, answer.model, answer.latency, answer.finish_reason)

    def content(self, question: str, inputs: list[MimeInput]) -> Any:
        """The user message's content in the provider's format: the inputs, then the question."""
        build = {"gemini": _gemini_parts, "openai": _openai_parts, "anthropic": _anthropic_parts}[self.provider]
        for item in inputs:
            if not item.url and item.mime_type not in PROVIDER_TYPES[self.provider]:
                raise MimeError(f"{item.source}: {self.model.name} does not take {item.mime_type} files")
        return build(question, inputs)

    def _explain(self, exc: ModelError) -> Exception:
        cause = exc.__cause__
        status = getattr(cause, "status_code", None) or getattr(cause, "code", None)
        if status == 400 and _NO_VISION.search(str(exc)):
            return MimeError(f"{self.model.name} cannot read these inputs (is it a vision model?): {exc}. Set "
                             "mime_reader.model to a multimodal model, e.g. gemini:gemini-2.5-flash or openai:gpt-4.1")
        return exc


def _gemini_parts(question: str, inputs: list[MimeInput]) -> list:
    from google.genai import types

    parts = []
    for item in inputs:
        if item.url:
            mime_type = None if item.mime_type in ("", "video/*") else item.mime_type
            parts.append(types.Part(file_data=types.FileData(file_uri=item.url, mime_type=mime_type)))
        else:
            parts.extend(gemini_parts((_attachment(item),)))
    parts.append(types.Part.from_text(text=question))
    return [types.Content(role="user", parts=parts)]


def _openai_parts(question: str, inputs: list[MimeInput]) -> list[dict]:
    parts: list[dict] = []
    for item in inputs:
        if item.url:
            if item.mime_type == "video/*":
                raise MimeError(f"{item.source}: video links need a Gemini model (set mime_reader.model to gemini:...)")
            if item.mime_type == PDF:
                raise MimeError(f"{item.source}: OpenAI-compatible endpoints take PDFs only as local files; "
                                "download it first")
            parts.append({"type": "image_url", "image_url": {"url": item.url}})
        else:
            parts.extend(openai_parts((_attachment(item),)))
    parts.append({"type": "text", "text": question})
    return parts


def _anthropic_parts(question: str, inputs: list[MimeInput]) -> list[dict]:
    parts: list[dict] = []
    for item in inputs:
        kind = "document" if item.mime_type == PDF else "image"
        if item.url:
            if item.mime_type == "video/*":
                raise MimeError(f"{item.source}: video links need a Gemini model (set mime_reader.model to gemini:...)")
            parts.append({"type": kind, "source": {"type": "url", "url": item.url}})
        else:
            parts.extend(anthropic_blocks((_attachment(item),)))
    parts.append({"type": "text", "text": question})
    return parts


def _attachment(item: MimeInput) -> Attachment:
    """A local file's bytes, sent as a request's attached files are (`anges.models.attachments`)."""
    return Attachment(os.path.basename(item.source), item.mime_type, item.data)
