"""Login, sessions, CSRF tokens and the checks every request goes through."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import secrets
import threading
import time
from collections import OrderedDict, deque
from pathlib import Path
from urllib.parse import urlsplit

from flask import Flask, abort, jsonify, redirect, request, session, url_for

SECRET_FILE = "web_secret"
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
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    secret = secrets.token_hex(32).encode()
    temp = path.with_name(f".{SECRET_FILE}.{os.getpid()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, secret + b"\n")
    finally:
        os.close(fd)
    os.replace(temp, path)
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


class LoginLimiter:
    """Counts failed logins per client address over the last minute."""

    def __init__(self, per_minute: int, max_clients: int = 10000):
        self.per_minute = max(int(per_minute), 1)
        self.max_clients = max_clients
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def retry_after(self, client: str) -> int:
        """Seconds until `client` may try again; 0 when it may try now."""
        now = time.monotonic()
        with self._lock:
            failures = self._failures.get(client)
            if not failures:
                return 0
            while failures and now - failures[0] >= 60:
                failures.popleft()
            if len(failures) < self.per_minute:
                return 0
            return max(int(60 - (now - failures[0])) + 1, 1)

    def fail(self, client: str) -> None:
        with self._lock:
            self._failures.setdefault(client, deque()).append(time.monotonic())
            self._failures.move_to_end(client)
            while len(self._failures) > self.max_clients:
                self._failures.popitem(last=False)

    def succeed(self, client: str) -> None:
        with self._lock:
            self._failures.pop(client, None)


class Guard:
    """Authentication and CSRF rules for one app; `password` empty means local-only mode without login."""

    def __init__(self, app: Flask, password: str, per_minute: int):
        self.password = password
        self.limiter = LoginLimiter(per_minute)
        # Sessions made under another password stop working when the password changes.
        self.fingerprint = hmac.new(app.secret_key, password.encode(), hashlib.sha256).hexdigest()[:16]
        app.before_request(self.check)

    def csrf_token(self) -> str:
        token = session.get("csrf")
        if not token:
            token = session["csrf"] = secrets.token_urlsafe(32)
        return token

    def logged_in(self) -> bool:
        return not self.password or session.get("auth") == self.fingerprint

    def check_password(self, given: str) -> bool:
        return bool(self.password) and hmac.compare_digest(given.encode(), self.password.encode())

    def log_in(self) -> None:
        session.clear()
        session.permanent = True
        session["auth"] = self.fingerprint
        self.csrf_token()

    def check(self):
        """Runs before every request: local-only mode, login, then CSRF on state changes."""
        if not self.password and (_proxied() or not (is_loopback(request.remote_addr or "")
                                                      and is_loopback(_host_name()))):
            abort(403, "this server has no password, so it only answers on localhost; set a password "
                       "(--password, ANGES_UI_PASSWORD or web.password) to use it from elsewhere")
        endpoint = request.endpoint or ""
        if endpoint not in PUBLIC_ENDPOINTS and not self.logged_in():
            if request.path.startswith("/api/"):
                return jsonify(error="login required"), 401
            return redirect(url_for("chat.login", next=request.full_path if request.query_string else request.path))
        if request.method not in SAFE_METHODS:
            self._check_origin()
            given = request.headers.get(CSRF_HEADER) or request.form.get("csrf_token", "")
            expected = session.get("csrf")
            if not expected or not hmac.compare_digest(given.encode(), expected.encode()):
                abort(403, "missing or wrong CSRF token: reload the page and try again")
        return None

    def _check_origin(self) -> None:
        origin = request.headers.get("Origin")
        # Compare hosts only: behind a TLS-terminating proxy the scheme we see may differ from the browser's.
        if origin and urlsplit(origin).netloc != request.host:
            abort(403, "cross-origin request refused")


def _host_name() -> str:
    host = request.host
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if ":" in host else host


PROXY_HEADERS = ("Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Real-IP")


def _proxied() -> bool:
    """True when a proxy relayed the request: loopback addresses then say nothing about the real client."""
    return any(name in request.headers for name in PROXY_HEADERS)

