"""Login, the per-launch token, CSRF tokens and the checks every request goes through."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import math
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlencode, urlsplit

from flask import Flask, abort, g, jsonify, redirect, request, session, url_for

from anges.util.paths import write_file

from .logs import log
from .sessions import SessionRegistry

SECRET_FILE = "web_secret"
SESSIONS_FILE = "web_sessions.json"
CSRF_HEADER = "X-CSRF-Token"
SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}
PUBLIC_ENDPOINTS = {"chat.login", "static"}


def load_secret(home: Path) -> bytes:
    """The session secret: random, made once, kept in `ANGES_HOME/web_secret` readable by the owner only."""
    path = home / SECRET_FILE
    try:
        secret = path.read_bytes().strip()
        if len(secret) >= 32:
            return secret
    except FileNotFoundError:
        pass
    secret = secrets.token_hex(32).encode()
    write_file(str(path), secret + b"\n", 0o600, parents=True)
    return secret


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and `localhost`."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class LoginDelay:
    """Slows password guessing, and no one can spend it against someone else: each client's tries wait twice as long
    after each failure (1, 2, 4 ... seconds, at most `max_seconds`), and a try during the wait is not even checked. A
    success, or an hour without failures, starts it afresh. A client is what `Guard.login_client` names: a browser
    that logged in before, else the account of this machine the connection comes from, else the address (IPv6: its
    /64), so a neighbour's guesses wait only for the neighbour's failures. Tries a client makes in parallel are
    checked one per wait: each counts as a failure from its start until it succeeds."""

    def __init__(self, max_seconds: float, max_clients: int = 10000, forget_after: float = 3600,
                 clock: Callable[[], float] = time.monotonic):
        self.max_seconds = max(float(max_seconds), 1.0)
        self.clock = clock
        self.max_clients = max_clients
        self.forget_after = forget_after
        self._failures: OrderedDict[str, tuple[int, float]] = OrderedDict()
        self._lock = threading.Lock()

    def begin(self, client: str) -> int:
        """Seconds until `client` may try again; 0 when it may try now, and then this try counts as a failure until
        `succeed` says otherwise."""
        with self._lock:
            now = self.clock()
            count, last = self._failures.get(client, (0, now))
            if count and now - last > self.forget_after:
                count = 0
            wait = min(2.0 ** (count - 1), self.max_seconds) - (now - last) if count else 0.0
            if wait > 0:
                return math.ceil(wait)
            self._failures.pop(client, None)
            self._failures[client] = (min(count + 1, 64), now)
            while len(self._failures) > self.max_clients:
                self._failures.popitem(last=False)
            return 0

    def succeed(self, client: str) -> None:
        with self._lock:
            self._failures.pop(client, None)


class Guard:
    """Authentication and CSRF rules for one app.

    With a password, people log in. Without one, the chat answers only on localhost, and (unless `token` is
    empty) only to a browser that brought the per-launch `token` once: `/?token=...` is exchanged for a
    session cookie and the token dropped from the address.
    """

    def __init__(self, app: Flask, password: str, token: str, max_login_delay: float, sessions_file: Path | None):
        self.password = password
        self.token = "" if password else token
        self.delay = LoginDelay(max_login_delay)
        secret = f"password:{password}" if password else f"token:{self.token}"
        key = app.secret_key  # bytes from load_secret; Flask allows a str
        key = key.encode() if isinstance(key, str) else key or b""
        fingerprint = hmac.new(key, secret.encode(), hashlib.sha256).hexdigest()[:32]
        lifetime = app.permanent_session_lifetime.total_seconds()
        # The token changes with every launch, so its sessions need not outlive the process.
        self.sessions = SessionRegistry(fingerprint, lifetime, sessions_file if password else None)
        app.before_request(self.check)

    @property
    def needs_login(self) -> bool:
        """True when requests need a session: a password or a token is set."""
        return bool(self.password or self.token)

    def csrf_token(self) -> str:
        token = session.get("csrf")
        if not token:
            token = session["csrf"] = secrets.token_urlsafe(32)
        return token

    def logged_in(self) -> bool:
        return not self.needs_login or self.sessions.valid(session.get("sid"))

    def check_password(self, given: str) -> bool:
        return bool(self.password) and hmac.compare_digest(given.encode(), self.password.encode())

    def login_client(self) -> str:
        """Who a login attempt counts against (`LoginDelay`): a browser that logged in here before (its signed cookie
        names it); else, for a connection from this machine, the account that opened it (the kernel says which: on
        loopback every account has the same address); else the address, an IPv6 one by its /64."""
        browser = session.get("browser")
        if isinstance(browser, str):
            return f"browser:{browser}"
        address = request.remote_addr or "?"
        if not _proxied():  # behind a proxy the connection is the proxy's
            account = _local_account(address)
            if account is not None:
                return f"account:{account}"
        try:
            parsed = ipaddress.ip_address(address)
        except ValueError:
            return f"address:{address}"
        if isinstance(parsed, ipaddress.IPv6Address):  # one machine has a /64 of addresses to choose from
            return f"address:{parsed.ipv4_mapped or ipaddress.ip_network(f'{parsed}/64', strict=False)}"
        return f"address:{parsed}"

    def log_in(self) -> None:
        browser = session.get("browser") or secrets.token_urlsafe(16)
        session.clear()
        session.permanent = True
        session["browser"] = browser
        session["sid"] = self.sessions.create()
        self.csrf_token()

    def log_out(self) -> None:
        """End this browser's session on the server too: a copy of its cookie stops working."""
        self.sessions.end(session.get("sid"))
        browser = session.get("browser")
        session.clear()
        if browser:  # it stays known: a neighbour's guesses do not slow its next login
            session.permanent = True
            session["browser"] = browser

    def check(self):
        """Runs before every request: local-only mode, the token, login, then CSRF on state changes."""
        if not self.password and (_proxied() or not (is_loopback(request.remote_addr or "")
                                                      and is_loopback(_host_name()))):
            g.shut_out = True
            abort(403, "this server has no password, so it only answers on localhost; set a password "
                       "(ANGES_UI_PASSWORD, --password-file or web.password) to use it from elsewhere")
        if self.token and "token" in request.args and request.method in SAFE_METHODS:
            return self._exchange_token()
        endpoint = request.endpoint or ""
        if endpoint not in PUBLIC_ENDPOINTS and not self.logged_in():
            if request.path.startswith("/api/"):
                return jsonify(error=token_needed() if self.token else "login required"), 401
            if self.token:
                g.shut_out = True
                abort(403, token_needed())
            return redirect(url_for("chat.login", next=request.full_path if request.query_string else request.path))
        if request.method not in SAFE_METHODS:
            self._check_origin()
            given = request.headers.get(CSRF_HEADER) or request.form.get("csrf_token", "")
            expected = session.get("csrf")
            if not expected or not hmac.compare_digest(given.encode(), expected.encode()):
                abort(403, "missing or wrong CSRF token: reload the page and try again")
        return None

    def _exchange_token(self):
        """`?token=...`: start a session and show the same address without the token. No limit on wrong tokens:
        nobody guesses 43 random characters, and a limit would let a neighbour shut the owner out."""
        if not hmac.compare_digest(request.args["token"].encode(), self.token.encode()):
            g.shut_out = not self.logged_in()
            abort(403, f"wrong token. {token_needed()}")
        self.log_in()
        log.info("login with the token from %s", request.remote_addr)
        rest = [(key, value) for key, value in request.args.items(multi=True) if key != "token"]
        return redirect(request.path + (f"?{urlencode(rest)}" if rest else ""))

    def _check_origin(self) -> None:
        origin = request.headers.get("Origin")
        # Compare hosts only: behind a TLS-terminating proxy the scheme we see may differ from the browser's.
        if origin and urlsplit(origin).netloc != request.host:
            abort(403, "cross-origin request refused")


def _local_account(address: str) -> int | None:
    """The user id of the account on this machine whose socket this request came on (None: from elsewhere)."""
    from .peers import local_account

    port, connection = request.environ.get("REMOTE_PORT"), request.environ.get("werkzeug.socket")
    try:
        server = connection.getsockname()[:2] if connection is not None else ("", int(request.environ["SERVER_PORT"]))
        return local_account((address, int(port)), (str(server[0]), int(server[1]))) if port else None
    except (OSError, KeyError, ValueError):
        return None


def token_needed() -> str:
    """What to do without the token, naming the address this request came to."""
    return (f"this chat needs the secret token that `anges ui` printed when it started: open the address it "
            f"printed (http://{request.host}/?token=...)")


def _host_name() -> str:
    host = request.host
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if ":" in host else host


def request_is_local() -> bool:
    """True when the request comes straight from this machine (no proxy in between)."""
    return is_loopback(request.remote_addr or "") and not _proxied()


PROXY_HEADERS = ("Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Real-IP")


def _proxied() -> bool:
    """True when a proxy relayed the request: loopback addresses then say nothing about the real client."""
    return any(name in request.headers for name in PROXY_HEADERS)

