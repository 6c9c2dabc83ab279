"""`@` mentions in the terminal session: a fuzzy search over the project's files for Tab and the completion menu,
and, when a request is sent, the files it mentions attached to it: a text file's content, an image or a PDF itself
(`anges.models.attachments`: its bytes go with every prompt of the request's run). Reading follows the sandbox's
path rules: a place it hides is neither listed nor read."""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from anges.models.attachments import ATTACHABLE, MAX_ATTACHMENT_BYTES, MAX_ATTACHMENTS
from anges.util.file_index import FileIndex, project_files

MENTIONS_MARK = "\n\n--- attached with @ ---\n"
"""Where the files a request attached begin: `/rewind` gives back the request without them."""
REFRESH_SECONDS = 30.0
"""An index older than this is listed again (in the background) at the next search."""
FIRST_WAIT = 1.0
"""Seconds the first search waits for the first listing."""
MIN_QUERY = 2
"""Letters typed after `@` before the whole project is searched (one letter matches nearly every file)."""
MAX_FILE_CHARS = 60_000
"""Characters of one file attached (the rest is left out, and the request says so)."""
MAX_TOTAL_CHARS = 200_000
MAX_FILES = 20
_MENTION = re.compile(r"(?:^|(?<=\s))@([^\s@]+)")


class Mentions:
    """The project's files for `@` (listed in the background, refreshed when old) and the attaching of them."""

    def __init__(self, cwd: Callable[[], str], hidden: Callable[[], Callable[[str], bool] | None]):
        self.cwd = cwd
        self.hidden = hidden
        """The sandbox's rule of the places it hides (None before the configuration is loaded)."""
        self._index: tuple[str, float, FileIndex] | None = None
        self._listing = threading.Lock()
        self._listed = threading.Event()

    def prepare(self) -> None:
        """List the project's files now, in the background (the first `@` then finds them at once)."""
        self._current()

    def find(self, query: str) -> list[str]:
        """The project's files that match `query`, best first (none while the first listing is not done)."""
        if len(query) < MIN_QUERY:
            return []
        index = self._current()
        if index is None:  # the first search waits a moment for the first listing (a small project's is quick)
            self._listed.wait(FIRST_WAIT)
            index = self._current()
        return index.search(query) if index is not None else []

    def _current(self) -> FileIndex | None:
        cwd, known = self.cwd(), self._index
        if known is None or known[0] != cwd or time.monotonic() - known[1] > REFRESH_SECONDS:
            threading.Thread(target=self._list, args=(cwd,), name="anges-files", daemon=True).start()
        return known[2] if known is not None and known[0] == cwd else None

    def _list(self, cwd: str) -> None:
        hidden = self.hidden()
        if hidden is None or not self._listing.acquire(blocking=False):
            return
        try:
            self._index = (cwd, time.monotonic(), FileIndex(project_files(cwd, skip=hidden)))
            self._listed.set()
        finally:
            self._listing.release()

    def attach(self, text: str, template_dir: str) -> tuple[str, list[str]]:
        """`text` with the files it mentions attached (a `Request` when it attaches images or PDFs), and a line about
        each (attached, or why not)."""
        from anges.models.attachments import Attachment, Request

        hidden = self.hidden()
        if hidden is None or "@" not in text:
            return text, []
        blocks, said, total = [], [], 0
        files: list[Attachment] = []
        for name in dict.fromkeys(_MENTION.findall(text)):
            name = name.rstrip(".,;:!?)]}'\"")
            found = read_mention(self.cwd(), name, hidden, MAX_TOTAL_CHARS - total)
            if found is None:
                continue
            if found.data is not None:
                if len(files) < MAX_ATTACHMENTS:
                    files.append(Attachment(found.path, found.mime, found.data))
                else:
                    found = replace(found, data=None, said=f"@{name}: {found.mime}: not attached: a request attaches "
                                    f"at most {MAX_ATTACHMENTS} images or PDFs (the agent may read it with "
                                    "READ_MIME_FILES)")
            said.append(found.said)
            if found.text is not None or found.mime:
                blocks.append(found)
                total += len(found.text or "")
            if len(blocks) >= MAX_FILES:
                break
        if not blocks:
            return text, said
        from anges.prompt.templates import render_template

        attached = render_template("mentions.j2", template_dir, files=blocks).strip("\n")
        return Request(text + MENTIONS_MARK + attached + "\n", tuple(files)), said


@dataclass(frozen=True)
class Mentioned:
    """A file a request mentions: its content (text), or its type (an image, a PDF), and a line for the person."""

    path: str
    said: str
    text: str | None = None
    lines: int = 0
    cut: bool = False
    """Only its start is attached."""
    mime: str = ""
    data: bytes | None = field(default=None, repr=False)
    """An image's or a PDF's bytes, when it is attached itself."""


def read_mention(cwd: str, name: str, hidden: Callable[[str], bool], room: int) -> Mentioned | None:
    """The file `name` (relative to `cwd`) as attached; None when it is no file (an e-mail address, a handle)."""
    from anges.tools.mime import sniff
    from anges.util.paths import open_nofollow, resolve

    path = os.path.normpath(os.path.join(cwd, os.path.expanduser(name)))
    if not os.path.isfile(path):
        return None
    if hidden(path) or hidden(resolve(path)):
        return Mentioned(name, f"@{name}: not attached: the sandbox hides it")
    try:
        fd = open_nofollow(resolve(path), os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        return Mentioned(name, f"@{name}: not attached: {(exc.strerror or str(exc)).lower()}")
    with os.fdopen(fd, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        data = file.read(16)
        mime = sniff(data)
        if not mime:
            data += file.read(min(max(room, 0), MAX_FILE_CHARS) * 4 + 1 - len(data))
        elif mime in ATTACHABLE and size <= MAX_ATTACHMENT_BYTES:
            data += file.read(MAX_ATTACHMENT_BYTES + 1 - len(data))
    if mime:
        return _attachable(name, mime, data, size)
    if b"\0" in data[:8192]:
        return Mentioned(name, f"@{name}: not attached: a binary file")
    text = data.decode("utf-8", "replace")
    keep = min(MAX_FILE_CHARS, max(room, 0))
    cut = len(text) > keep or size > len(data)
    text = text[:keep]
    lines = text.count("\n") + (not text.endswith("\n"))
    more = f", cut at {keep:,} characters of {size:,} bytes" if cut else ""
    return Mentioned(name, f"@{name}: attached ({lines} lines{more})", text, lines, cut)


def _attachable(name: str, mime: str, data: bytes, size: int) -> Mentioned:
    """An image or a PDF, attached itself when models take its type inline and it is within the limit."""
    if mime not in ATTACHABLE:
        why = "models take PNG, JPEG, GIF, WebP and PDF files, not this type"
    elif max(size, len(data)) > MAX_ATTACHMENT_BYTES:
        why = f"over the limit of {MAX_ATTACHMENT_BYTES:,} bytes a file"
    else:
        return Mentioned(name, f"@{name}: {mime}, {len(data):,} bytes, attached", mime=mime, data=data)
    return Mentioned(name, f"@{name}: {mime}, {max(size, len(data)):,} bytes: not attached: {why} (the agent may read "
                     "it with READ_MIME_FILES)", mime=mime)
