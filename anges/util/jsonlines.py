"""JSON objects written one per line and flushed at once, so another process can follow along."""

from __future__ import annotations

import json
import sys
import threading
from typing import TextIO

from anges.util.printable import printable_json


class JsonLines:
    """A thread-safe writer of one JSON object per line (its text made printable: no raw control characters)."""

    def __init__(self, out: TextIO = sys.stdout):
        self.out = out
        self.lock = threading.Lock()

    def emit(self, record: dict) -> None:
        """Write `record` as one line and flush it."""
        line = printable_json(json.dumps(record, default=str, ensure_ascii=False))
        with self.lock:
            self.out.write(line + "\n")
            self.out.flush()
