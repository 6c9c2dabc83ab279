"""What `anges ui` tells its owner on the terminal: logins, runs started and ended, errors; every request only with
`-v`. Plain lines, with anything a client or a model sent shown, never obeyed (`printable`)."""

from __future__ import annotations

import logging
import sys

from anges.util.printable import printable

log = logging.getLogger("anges.web")
"""Logins, runs, errors (Flask logs a request's exception here too: it is the app's logger)."""
request_log = logging.getLogger("anges.web.requests")
"""One line per request, with `-v`."""


class _PrintableFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record))


class _Stderr(logging.StreamHandler):
    """To `sys.stderr` as it is when a line is logged (what a test may have swapped meanwhile)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def setup_logging(verbose: int) -> None:
    """Log to stderr: what a person needs by default (requests too with `verbose`), without colour codes."""
    handler = _Stderr(sys.stderr)
    handler.setFormatter(_PrintableFormatter("%(asctime)s %(message)s", "%H:%M:%S"))
    for logger, level in ((log, logging.INFO), (request_log, logging.INFO if verbose else logging.WARNING),
                          (logging.getLogger("werkzeug"), logging.WARNING)):  # the server's own: its errors
        logger.handlers[:] = [handler]
        logger.setLevel(level)
        logger.propagate = False
