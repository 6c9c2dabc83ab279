"""The routes: pages, the JSON API and the live event feed (Server-Sent Events)."""

from __future__ import annotations

import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path
from urllib.parse import urlsplit

from flask import (
    Blueprint,
    Response,
    abort,
    current_app,
    jsonify,
    redirect,
    render_template,
    request,
    stream_with_context,
    url_for,
)
from werkzeug.routing import BaseConverter

from anges.checkpoints import remove_checkpoints
from anges.exceptions import AngesError, ConfigError, ModelSetupError, StreamBusy, StreamNotFound, UndoRefused
from anges.registry import agent_types
from anges.store.events import Event, EventStream, title_from
from anges.store.export import to_markdown
from anges.util.printable import printable, printable_texts

from .approvals import ANSWERS, CHANNEL_NAME, MAX_FEEDBACK
from .auth import request_is_local, token_needed
from .feed import BadCursor, feed, parse_blocks, parse_watches, shared_feed, shown_status
from .logs import log
from .restore import checkpoints, preview
from .runs import ChatBusy, sandbox_summary, unsandboxed_problem, user_notes

bp = Blueprint("chat", __name__)

MAX_TITLE = 200
MAX_MESSAGE = 200_000
SETTING_FIELDS = ("cmd_init_dir", "model", "prefix_cmd", "agent_type", "notes", "mcp_config")
"""The settings a browser may change (not `batch_id`/`batch_task`: only `anges batch` sets those)."""


class ChatIdConverter(BaseConverter):
    """A stream id in a URL: 1-64 letters, digits, '-' or '_' (anything else is a 404)."""

    regex = r"[A-Za-z0-9_-]{1,64}"


def _web():
    return current_app.extensions["anges"]


# -- pages ------------------------------------------------------------------------------------------------------


@bp.get("/")
def index():
    return _page(None)


@bp.get("/chat/<chat:uid>")
def chat_page(uid: str):
    if not _web().store.exists(uid):
        abort(404, f"no chat {uid!r}")
    return _page(uid)


def _page(uid: str | None):
    web = _web()
    return render_template(
        "chat.html",
        chat_id=uid or "",
        csrf_token=web.guard.csrf_token(),
        agent_types=agent_types.names(),
        models=["auto", *web.config.models],
        default_model=web.config.model,
        default_dir=web.runs.default_dir,
        login_enabled=bool(web.guard.password),
        sandbox=sandbox_summary(web.config, web.runs.default_dir),
        feed_worker=url_for("static", filename="feed.js", v=_asset_version("feed.js")),
    )


@lru_cache(maxsize=8)
def _asset_version(name: str) -> str:
    """A digest of a static file: a new version gets a new shared worker, not the one older pages still hold."""
    return hashlib.sha256((Path(current_app.root_path) / "static" / name).read_bytes()).hexdigest()[:12]


@bp.route("/login", methods=["GET", "POST"])
def login():
    web = _web()
    target = _safe_next(request.values.get("next", ""))
    if not web.guard.needs_login or (web.guard.logged_in() and request.method == "GET"):
        return redirect(target)
    if not web.guard.password:
        abort(403, token_needed())
    error, status = "", 200
    if request.method == "POST":
        client, delay = web.guard.login_client(), web.guard.delay
        wait = delay.begin(client)
        if wait:  # not even checked: a guesser learns nothing from trying faster
            error, status = f"Too many failed attempts. Try again in {wait} second{'s' if wait > 1 else ''}.", 429
        elif web.guard.check_password(request.form.get("password", "")):
            delay.succeed(client)
            web.guard.log_in()
            log.info("login from %s", request.remote_addr)
            return redirect(target)
        else:
            error, status = "Wrong password.", 401
            log.warning("wrong password from %s", request.remote_addr)  # as often as the login delay allows
    response = Response(render_template("login.html", error=error, next=target,
                                        csrf_token=web.guard.csrf_token()), status)
    if status == 429:
        response.headers["Retry-After"] = str(wait)
    return response


@bp.post("/logout")
def logout():
    _web().guard.log_out()
    return redirect(url_for("chat.login"))


def _safe_next(target: str) -> str:
    """Only local paths: a login link must not send the user to another site."""
    # Browsers ignore tabs and newlines in URLs and read "\\" as "/": "/\t/evil.example" would leave the site.
    if (not target.startswith("/") or "\\" in target or any(c.isspace() or ord(c) < 32 for c in target)
            or target.startswith("//") or urlsplit(target).netloc):
        return url_for("chat.index")
    return target


# -- the JSON API ---------------------------------------------------------------------------------------------


@bp.get("/api/chats")
def list_chats():
    web = _web()
    query = request.args.get("q", "").strip().lower()
    chats = [_info(info) for info in web.store.list() if not query or query in (info.title or "").lower()]
    return jsonify(chats=chats)


@bp.post("/api/chats")
def create_chat():
    web = _web()
    body = _json_body()
    settings = _settings(body.get("settings") or {})
    text = body.get("text", "")
    if not isinstance(text, str) or len(text) > MAX_MESSAGE:
        abort(400, "text must be a string of at most 200000 characters")
    title = _title(body.get("title") or title_from(text, 60) or "New chat")
    agent_type = settings.get("agent_type", "default")
    stream = EventStream(title=title, agent_type=agent_type)
    stream.update_settings({"agent_type": agent_type, **settings})
    starts = bool(text.strip())
    if starts:
        _check_may_run()
    web.store.sync(stream)
    if starts:
        web.runs.start(stream.uid, text)
    return jsonify(chat=_info(web.store.info(stream.uid)), started=starts), 201


@bp.post("/api/settings/check")
def check_settings():
    """Validate a new chat's settings when they are saved, before the chat exists (its first message makes it)."""
    return jsonify(settings=_settings(_json_body().get("settings") or {}))


@bp.get("/api/chats/<chat:uid>")
def get_chat(uid: str):
    web = _web()
    stream = _load(uid)
    info = _info(web.store.info(uid))
    info["settings"] = _shown_settings(stream)
    info["children"] = [_info(child) for child in web.store.children(uid)]
    return jsonify(chat=info)


@bp.patch("/api/chats/<chat:uid>")
def update_chat(uid: str):
    web = _web()
    body = _json_body()
    unknown = set(body) - {"title", "settings"}
    if unknown:
        abort(400, f"unknown fields: {', '.join(sorted(unknown))} (allowed: title, settings)")
    stream = _load(uid)
    if "title" in body:
        stream.title = _title(body["title"])
    if "settings" in body:
        settings = _settings(body["settings"])
        stream.update_settings(settings)
        if "agent_type" in settings:
            stream.agent_type = settings["agent_type"]
    web.store.sync(stream)
    return get_chat(uid)


@bp.delete("/api/chats/<chat:uid>")
def delete_chat(uid: str):
    web = _web()
    _load(uid)
    if web.runs.busy(uid):
        raise ChatBusy("this chat is running: stop it before deleting it")
    try:
        removed = web.store.delete(uid)
    except StreamBusy as exc:
        raise ChatBusy(f"a run is active in this chat or one of its child agents: {exc}") from None
    web.runs.answers.forget_streams(removed)
    remove_checkpoints(removed)
    return jsonify(deleted=removed)


@bp.post("/api/chats/<chat:uid>/messages")
def send_message(uid: str):
    web = _web()
    body = _json_body()
    text = body.get("text")
    if not isinstance(text, str) or not text.strip():
        abort(400, "the message is empty")
    if len(text) > MAX_MESSAGE:
        abort(400, f"the message is longer than {MAX_MESSAGE} characters")
    _load(uid)
    _check_may_run()
    web.runs.start(uid, text)
    return jsonify(started=True, chat=_info(web.store.info(uid))), 202


@bp.post("/api/chats/<chat:uid>/stop")
def stop_chat(uid: str):
    web = _web()
    _load(uid)
    if not web.runs.stop(uid):
        return jsonify(error="this chat is not running"), 409
    return jsonify(stopping=True), 202


@bp.post("/api/chats/<chat:uid>/approvals/<chat:request_id>")
def answer_approval(uid: str, request_id: str):
    """Answer a pending approval request of chat (or child agent) `uid`: allow, deny or always, with feedback."""
    web = _web()
    body = _json_body()
    answer, feedback = body.get("decision"), body.get("feedback", "")
    if answer not in ANSWERS:
        abort(400, f"decision must be one of {', '.join(ANSWERS)}")
    if not isinstance(feedback, str) or len(feedback) > MAX_FEEDBACK:
        abort(400, f"feedback must be a string of at most {MAX_FEEDBACK} characters")
    if feedback.strip() and answer != "deny":
        abort(400, "feedback goes with deny: it tells the agent why its action was declined")
    asked, decided = _approval_events(_load(uid), request_id)
    if asked is None:
        abort(404, f"no approval request {request_id!r} in this chat")
    if decided is not None:
        return jsonify(error=f"already answered: {decided.message}", decided=decided.data), 409
    channel = (asked.data or {}).get("channel", "")
    if channel != CHANNEL_NAME:
        return jsonify(error=f"this request is answered where its run was started (the {channel or 'other'} "
                             "channel), not in the web chat"), 409
    if not web.runs.busy(uid):
        return jsonify(error="no run is waiting for this answer any more: it has ended"), 409
    if not web.runs.answers.give(uid, request_id, answer, feedback.strip()):
        return jsonify(error="already answered (from another page): the decision shows in a moment"), 409
    return jsonify(accepted=True, decision=answer), 202


@bp.get("/api/chats/<chat:uid>/restore")
def restore_preview(uid: str):
    """What restoring the files to before step `step` would do (the default: the last step still in effect)."""
    step = request.args.get("step", "")
    if step and not step.isdigit():
        abort(400, "step must be a step number")
    stream = _load(uid)
    try:
        plan = checkpoints(_web(), stream).plan_undo(int(step) if step else None)
    except AngesError as exc:  # no checkpoint for that step, its folder gone, git missing, ...
        abort(409, printable(str(exc)))
    return jsonify(preview(plan, stream.agent_settings.get("cmd_init_dir") or ""))


@bp.post("/api/chats/<chat:uid>/restore")
def restore_files(uid: str):
    """Restore the files to before a step, as previewed (`token`); `overwrite` replaces others' changes too."""
    web, body = _web(), _json_body()
    step, token, overwrite = body.get("step"), body.get("token"), body.get("overwrite", False)
    if not isinstance(step, int) or isinstance(step, bool) or not isinstance(token, str) \
            or not isinstance(overwrite, bool):
        abort(400, "send step (a number), token (from the preview) and overwrite (true or false)")
    if web.runs.busy(uid):
        raise ChatBusy("this chat is running: stop it before restoring its files")
    try:
        plan = checkpoints(web, _load(uid)).undo(step, overwrite=overwrite, expect=token, by="web")
    except UndoRefused as exc:
        return jsonify(error=printable(str(exc)), conflicts=printable_texts(exc.paths)), 409
    except StreamBusy:
        raise ChatBusy("a run is active in this chat (or above it): stop it before restoring its files") from None
    except AngesError as exc:
        abort(409, printable(str(exc)))
    return jsonify(restored=True, stat=plan.diff.stat_line)


@bp.get("/api/chats/<chat:uid>/export")
def export_chat(uid: str):
    web = _web()
    fmt = request.args.get("format", "json")
    stream = _load(uid)
    if fmt == "json":
        body, mimetype, suffix = json.dumps(stream.to_dict(), indent=2), "application/json", "json"
    elif fmt in ("md", "markdown"):
        body, mimetype, suffix = to_markdown(stream, web.store), "text/markdown", "md"  # Flask adds the charset
    else:
        abort(400, "format must be json or md")
    response = Response(body, mimetype=mimetype)
    response.headers["Content-Disposition"] = f'attachment; filename="anges-{uid}.{suffix}"'
    return response


@bp.get("/api/chats/<chat:uid>/events")
def events(uid: str):
    """The page's live feed (Server-Sent Events, see `feed.py`): the chat and its child agents, until idle."""
    web = _web()
    if not web.store.exists(uid):
        abort(404, f"no chat {uid!r}")
    last = request.headers.get("Last-Event-ID", request.args.get("last_id", ""))
    try:
        next_index = int(last) + 1 if last != "" else int(request.args.get("from", 0))
    except ValueError:
        abort(400, "Last-Event-ID and from must be integers")
    try:
        blocks = parse_blocks(request.args.get("blocks", ""))
    except BadCursor as exc:
        abort(400, str(exc))
    return _event_stream(feed(web, uid, max(next_index, 0), blocks))


@bp.get("/api/feed")
def shared_events():
    """The live feed of several chats in one connection (every page of a browser shares it, see `feed.py`):
    `watch=SUB~CHAT~FROM~BLOCKS`, once per chat followed."""
    try:
        watches = parse_watches(request.args.getlist("watch"))
    except BadCursor as exc:
        abort(400, str(exc))
    return _event_stream(shared_feed(_web(), watches))


def _event_stream(messages) -> Response:
    response = Response(stream_with_context(messages), mimetype="text/event-stream")
    response.headers["Cache-Control"] = "no-cache, no-store"
    response.headers["X-Accel-Buffering"] = "no"  # nginx: pass events through at once
    return response


# -- helpers ----------------------------------------------------------------------------------------------------


def _load(uid: str) -> EventStream:
    try:
        return _web().store.load(uid)
    except StreamNotFound:
        abort(404, f"no chat {uid!r}")


def _approval_events(stream: EventStream, request_id: str) -> tuple[Event | None, Event | None]:
    """The `approval_requested` event of `request_id` in `stream`, and its `approval_decided` if there is one."""
    found: dict[str, Event] = {}
    for event in stream.events_list:
        if event.type.startswith("approval_") and (event.data or {}).get("request_id") == request_id:
            found[event.type] = event
    return found.get("approval_requested"), found.get("approval_decided")


def _check_may_run() -> None:
    """Refuse to start a run for another machine while commands would run unsandboxed and unasked."""
    problem = "" if request_is_local() else unsandboxed_problem(_web().config, _web().runs.default_dir)
    if problem:
        abort(403, f"this chat cannot run commands for you: {problem}")


def _info(info) -> dict:
    return {**info.to_dict(), **shown_status(_web(), info.uid, info.status, info.reason)}


def _shown_settings(stream: EventStream) -> dict:
    settings = stream.get_settings()
    agent_type = settings.get("agent_type") or stream.agent_type or "default"
    return {
        "agent_type": agent_type,
        "model": settings.get("model") or "",
        "cmd_init_dir": settings.get("cmd_init_dir") or "",
        "prefix_cmd": settings.get("prefix_cmd") or "",
        "notes": user_notes(settings.get("notes")),
        "mcp_config": settings.get("mcp_config") or "",
    }


def _json_body() -> dict:
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        abort(400, "send a JSON object (Content-Type: application/json)")
    return body


def _title(value) -> str:
    if not isinstance(value, str) or not value.strip():
        abort(400, "the title must be a non-empty string")
    return title_from(value, MAX_TITLE)


def _mcp_config_path(value: str) -> str:
    """An MCP servers file, checked now; the chat keeps its path, never the secrets inside it."""
    from anges.tools.mcp import load_mcp_servers

    path = os.path.abspath(os.path.expanduser(value))
    try:
        load_mcp_servers(path)
    except ConfigError as exc:
        abort(400, str(exc))
    return path


def _check_model_name(name: str) -> None:
    """Refuse, with the list of valid names, a model name that no run could use."""
    from anges.models import find_preset, get_model

    config = _web().config
    try:
        if name.partition(":")[0] in ("replay", "scripted"):
            get_model(name, config)  # reads and checks the file
        elif name != "auto":
            find_preset(name, config)
    except ModelSetupError as exc:
        abort(400, str(exc))


def _settings(raw) -> dict:
    """Validate chat settings from the browser; only known keys, right types, an existing working directory."""
    if not isinstance(raw, dict):
        abort(400, "settings must be an object")
    unknown = set(raw) - set(SETTING_FIELDS)
    if unknown:
        abort(400, f"unknown settings: {', '.join(sorted(unknown))} (allowed: {', '.join(SETTING_FIELDS)})")
    settings: dict = {}
    for key, value in raw.items():
        if key == "notes":
            if isinstance(value, str):
                value = [line.strip() for line in value.splitlines() if line.strip()]
            if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
                abort(400, "notes must be a list of strings")
            settings[key] = value
            continue
        if not isinstance(value, str) or len(value) > 4096:
            abort(400, f"setting {key} must be a string")
        value = value.strip()
        if key == "agent_type" and value not in agent_types.names():
            abort(400, f"unknown agent type {value!r} (known: {', '.join(agent_types.names())})")
        if key == "cmd_init_dir" and value:
            value = os.path.abspath(os.path.expanduser(value))
            if not os.path.isdir(value):
                abort(400, f"the working directory {value!r} does not exist")
        if key == "mcp_config" and value:
            value = _mcp_config_path(value)
        if key == "model" and value:
            _check_model_name(value)
        settings[key] = value
    return settings

