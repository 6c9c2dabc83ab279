"""The anges web chat (installed as `anges.web`): `create_app` for WSGI servers, `serve`/`main_ui` for `anges ui`."""

from __future__ import annotations

import argparse
import errno
import logging
import os
import re
import secrets
import signal
import socket
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

from flask import Flask, g, jsonify, render_template, request
from werkzeug.exceptions import HTTPException
from werkzeug.serving import WSGIRequestHandler, make_server

from anges.config.arguments import add_config_flag, add_safety_flags, config_overrides, port_number
from anges.config.loading import anges_home, load_config
from anges.config.types import Config
from anges.exceptions import AngesError, ConfigError
from anges.store.event_store import EventStore

from .auth import SESSIONS_FILE, Guard, is_loopback, load_secret
from .logs import request_log, setup_logging
from .passwords import WHERE, check_secret, chosen_password
from .runs import ChatBusy, ModelFactory, Runs, default_model_factory, unsandboxed_problem

TOKEN_IN_URL = re.compile(r"([?&])token=[^&\s]*")
STOP_GRACE_SECONDS = 10
"""How long `anges ui`, stopped, waits for its running chats to record the stop and end their commands."""
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; "
       "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'")


@dataclass
class WebState:
    """What the views share: the config, the store, the runs of this process, the login guard."""

    config: Config
    store: EventStore
    runs: Runs
    guard: Guard
    sse_lifetime: float


def create_app(config: Config | None = None, store: EventStore | None = None, *, password: str | None = None,
               token: str | None = None, model_factory: ModelFactory | None = None, default_dir: str | None = None,
               sse_lifetime: float = 600) -> Flask:
    """Build the web chat. Password: `password`, else ANGES_UI_PASSWORD, else `config.web.password`.

    Without a password the app answers only requests from and addressed to localhost, and only from a
    browser that brought the token once (`/?token=...`): `token`, else ANGES_UI_TOKEN, else a random one
    (`app.extensions["anges"].guard.token`); `token=""` turns that off. `model_factory(name, config,
    agent_type)` builds a chat's model (default: `anges.models.get_model`); `default_dir` is the working
    directory of chats that set none (default: the current directory); an event feed ends after
    `sse_lifetime` seconds and the browser resumes it.
    """
    from anges.safety.sandbox import protect_process_memory

    protect_process_memory()  # a command run as this user cannot read the password or API keys from /proc
    config = config or load_config()
    store = store or EventStore()
    if password is None:
        password = os.environ.get("ANGES_UI_PASSWORD") or config.web.password
    if token is None:
        token = os.environ.get("ANGES_UI_TOKEN") or secrets.token_urlsafe(32)
    check_secret(f"the web chat password ({WHERE})", password)
    check_secret("the web chat token (ANGES_UI_TOKEN)", "" if password else token)
    app = Flask(__name__)
    app.secret_key = load_secret(anges_home())
    app.config.update(
        SESSION_COOKIE_NAME="anges_session",
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_SECURE=config.web.secure_cookies,
        PERMANENT_SESSION_LIFETIME=timedelta(days=7),
        MAX_CONTENT_LENGTH=2 * 1024 * 1024,
        DEBUG=False,
        TESTING=False,
    )
    from .views import ChatIdConverter, bp

    app.url_map.converters["chat"] = ChatIdConverter
    guard = Guard(app, password or "", token, config.web.max_login_delay, anges_home() / SESSIONS_FILE)
    runs = Runs(store, config, model_factory or default_model_factory, default_dir or os.getcwd())
    app.extensions["anges"] = WebState(config, store, runs, guard, sse_lifetime)
    app.register_blueprint(bp)
    app.after_request(_security_headers)
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(ChatBusy, lambda exc: _error(409, str(exc)))
    return app


def _security_headers(response):
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Referrer-Policy"] = "same-origin"
    if request.path.startswith("/api/") or response.mimetype == "text/html":
        response.headers.setdefault("Cache-Control", "no-store")
    return response


def _http_error(exc: HTTPException):
    return _error(exc.code or 500, exc.description or exc.name)


def _error(status: int, message: str):
    if request.path.startswith("/api/"):
        return jsonify(error=message), status
    # No link back to the chats for a request the guard shut out: it would come back here.
    return render_template("error.html", status=status, message=message, back=not g.get("shut_out")), status


def serve(config: Config | None = None, host: str | None = None, port: int | None = None,
          password: str | None = None, token: str | None = None) -> None:
    """Run the web chat until interrupted (werkzeug's threaded server; see docs/web.md for gunicorn/waitress).

    `token` as in `create_app` (`""`: no token); the address printed at start-up carries it.
    """
    config = config or load_config()
    host = host or config.web.host
    port = config.web.port if port is None else port
    if password is None:
        password = os.environ.get("ANGES_UI_PASSWORD") or config.web.password
    if not password and not is_loopback(host):
        raise ConfigError(f"refusing to serve on {host} without a password: anyone who can reach it would get a "
                          "shell on this machine. Set one with ANGES_UI_PASSWORD, --password-file FILE or "
                          "web.password in the config (run it on a terminal to be asked), or bind to 127.0.0.1.")
    problem = "" if is_loopback(host) else unsandboxed_problem(config)
    if problem:
        raise ConfigError(f"refusing to serve on {host}: {problem} (or bind to 127.0.0.1)")
    app = create_app(config, password=password, token=token)
    with _listen(host, port) as listening:
        server = make_server(host, port, app, threaded=True, request_handler=_QuietTokenHandler,
                             fd=listening.fileno())
    token = app.extensions["anges"].guard.token
    shown = f"[{host}]" if ":" in host else host
    address = f"http://{shown}:{server.port}/" + (f"?token={token}" if token else "")
    print(f"anges web chat on {address}  (Ctrl-C to stop)", file=sys.stderr)
    print(address, flush=True)  # for scripts: the address alone, on stdout
    if token:
        print("no password set: only this machine can use it, from a browser that opens the address above",
              file=sys.stderr)
    elif not password:
        print("no password and no token (--no-token): every account on this machine can use it", file=sys.stderr)
    elif not is_loopback(host):
        print("tip: put it behind an HTTPS reverse proxy and set web.secure_cookies: true", file=sys.stderr)
    try:
        with _stopped_by_signals():
            server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        runs = app.extensions["anges"].runs
        if runs.stop_all(STOP_GRACE_SECONDS):  # each records that it was interrupted, and its commands end
            print("anges web chat: stopped the chats that were running", file=sys.stderr)


@contextmanager
def _stopped_by_signals():
    """Inside, SIGTERM and SIGHUP end `anges ui` as Ctrl-C does: its running chats are stopped and recorded."""
    if threading.current_thread() is not threading.main_thread():  # serve() run by a library on its own thread
        yield
        return

    def stop(signum, frame):
        raise KeyboardInterrupt

    watched = [sig for sig in (signal.SIGTERM, signal.SIGHUP) if signal.getsignal(sig) is not signal.SIG_IGN]  # nohup
    previous = {sig: signal.signal(sig, stop) for sig in watched}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _listen(host: str, port: int) -> socket.socket:
    """A socket listening on host:port, or a ConfigError saying why not (werkzeug would print and exit)."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        return socket.create_server((host, port), family=family, backlog=128)
    except socket.gaierror as exc:
        raise ConfigError(f"cannot serve on {host}: no such address ({exc.strerror})") from None
    except OSError as exc:
        why = os.strerror(exc.errno) if exc.errno else str(exc)
        taken = "; another program uses that port: choose another with --port" if exc.errno == errno.EADDRINUSE else ""
        raise ConfigError(f"cannot serve on {host} port {port}: {why}{taken}") from None


class _QuietTokenHandler(WSGIRequestHandler):
    """werkzeug's request handler, logging each request (with `-v`) in plain text, the token left out."""

    def log_request(self, code="-", size="-") -> None:
        if request_log.isEnabledFor(logging.INFO):
            line = TOKEN_IN_URL.sub(r"\1token=[hidden]", self.requestline)
            request_log.info('%s "%s" %s %s', self.address_string(), line, code, size)


def main_ui(argv: list[str] | None = None) -> int:
    """`anges ui [--host H] [--port P] [--password-file FILE] [--no-token] [--config FILE] [--sandbox MODE]
    [--network] [--approval MODE]`; returns the exit code."""
    parser = argparse.ArgumentParser(prog="anges ui", description="Run the anges web chat.")
    parser.add_argument("--host", help="address to bind (default: web.host, 127.0.0.1)")
    parser.add_argument("--port", type=port_number, help="port, 0 for any free one (default: web.port, 5000)")
    parser.add_argument("--password", help="login password, at least 12 characters; required off localhost. Every "
                                            "user of this machine can read it with ps: prefer ANGES_UI_PASSWORD, "
                                            "--password-file or, on a terminal, the question asked off localhost")
    parser.add_argument("--password-file", metavar="FILE",
                        help="read the login password from the first line of FILE (- for standard input)")
    parser.add_argument("--no-token", action="store_true",
                        help="without a password, do not ask for the per-launch token: every account on this "
                             "machine can then use the chat (for single-user machines)")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="also log every request (by default: logins, runs started and ended, errors)")
    add_config_flag(parser)
    safety = parser.add_argument_group("safety of the chat's runs (see docs/safety.md)")
    add_safety_flags(safety, "where commands may write: the working directory (default), nowhere but a private /tmp, "
                             "or anywhere (off: refused off localhost unless web.allow_unsandboxed)",
                     "what an action that needs approval gets: a card in the chat to approve or deny (default), "
                     "approved, or declined")
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    try:
        config = load_config(args.config, config_overrides(args) or None)
        password = chosen_password(args.password, args.password_file, args.host or config.web.host,
                                   config.web.password)
        serve(config, args.host, args.port, password, token="" if args.no_token else None)
    except (AngesError, OSError) as exc:
        print(f"anges ui: {exc}", file=sys.stderr)
        return 2
    return 0


__all__ = ["create_app", "main_ui", "serve"]
