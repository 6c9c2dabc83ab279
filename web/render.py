"""Turn stored events into what the browser shows: safe HTML for model prose, plain fields for the rest."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import nh3

from anges.agents.budget import cache_hit_ratio
from anges.safety.approval_text import view as approval_view
from anges.store.events import (
    APICall,
    Event,
    FileEdit,
    ShellRun,
    StepUsage,
    child_reference,
    group_of,
    is_step,
    shown_path,
    stop_explanation,
)
from anges.store.plans import Plan
from anges.util.markdown import literal_code_words
from anges.util.printable import as_drawn, printable_texts

# No <img>: a picture in model output would be fetched from wherever it points (a tracking pixel); Markdown
# images become links instead (see _image_as_link).
ALLOWED_TAGS = {
    "a", "abbr", "b", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i",
    "kbd", "li", "ol", "p", "pre", "s", "span", "strong", "sub", "sup", "table", "tbody", "td", "th",
    "thead", "tr", "ul",
}
ALLOWED_ATTRIBUTES = {
    "a": {"href", "title"},
    "code": {"class"},
    "ol": {"start"},
    "th": {"align"},
    "td": {"align"},
}
URL_SCHEMES = {"http", "https", "mailto"}
APPROVAL_FACTS = {
    "approval_requested": ("request_id", "action_type", "subject", "detail", "detail_cut", "rule", "reason", "scope",
                           "escalate", "justification", "reasoning", "agent_id", "agent_type", "channel"),
    "approval_decided": ("request_id", "action_type", "subject", "decision", "always", "by", "rule", "reason",
                         "feedback", "escalate", "skipped"),
}
LONG_OUTPUT_LINES = 20
HOOK_FACTS = ("hook", "source", "hook_event", "on_action", "subject", "outcome", "effect", "exit_code", "duration",
              "output", "reason", "context")


@lru_cache(maxsize=1)
def _markdown():
    from markdown_it import MarkdownIt

    # html=False: raw HTML in the source is shown as text, never passed through; nh3 is the second wall.
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "breaks": False}).enable(
        ["table", "strikethrough"]).use(literal_code_words)
    md.add_render_rule("image", _image_as_link)
    return md


def _image_as_link(renderer, tokens, index, options, env) -> str:
    """`![alt](url)` as a link to the picture, named by its alt text."""
    from markdown_it.common.utils import escapeHtml

    token = tokens[index]
    alt = renderer.renderInlineAsText(token.children or [], options, env).strip()
    return f'<a href="{escapeHtml(token.attrGet("src") or "")}">{escapeHtml(f"image: {alt}" if alt else "image")}</a>'


def markdown_html(text: str) -> str:
    """Render untrusted Markdown to HTML that is safe to insert into the page."""
    if not text:
        return ""
    html = _markdown().render(text)
    return nh3.clean(
        html,
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes=URL_SCHEMES,
        link_rel="noopener noreferrer nofollow",
        set_tag_attribute_values={"a": {"target": "_blank"}},
        strip_comments=True,
    )


def step_view(event: Event, index: int, cwd: str = "", reasoning: str | None = None, number: int | None = None) -> dict:
    """What the chat shows of one event. Only the `*_html` fields are HTML (sanitized); the rest is text.

    Paths under `cwd` (the chat's working directory) are shown relative to it; `reasoning` is what to show of the
    turn's reasoning (`anges.store.turns`: once per turn), the event's own when None; `number` is the event's number
    (`anges.store.numbers`), None for one that has none.
    """
    data = event.data or {}
    view: dict = {
        "index": index,
        "number": number,
        "type": event.type,
        "kind": _kind(event),
        "time": event.created_at.isoformat(timespec="seconds"),
        "reasoning_html": markdown_html(event.reasoning if reasoning is None else reasoning)
        if event.type not in ("child_agent_running",) else "",
        "analysis_html": markdown_html(event.analysis),
        "usage": _usage(data),
    }
    mark = data.get("checkpoint")
    if isinstance(mark, dict) and isinstance(mark.get("id"), int):
        view["restorable"] = True  # a checkpoint was taken before it: the files can be put back as they were
    approved_by = _approved_by(data)
    if approved_by:
        view["approved_by"] = approved_by
    kind = view["kind"]
    if kind == "request":
        view["text"] = event.content
        view["from_parent"] = event.type.endswith("_from_parent")
    elif kind == "shell" and (shell := ShellRun.of(event)) is not None:
        view.update(command=shell.command, exit_code=shell.exit_code, sandbox=data.get("sandbox"),
                    escalated=bool(data.get("escalated")), duration=data.get("duration"),
                    timed_out=shell.state == "timed_out", interrupted=shell.state == "interrupted",
                    background=shell.state == "background", yielded=shell.yielded, output=as_drawn(shell.output()))
        view["long"] = view["output"].count("\n") >= LONG_OUTPUT_LINES
    elif kind == "edit" and (edit := FileEdit.of(event)) is not None:
        view.update(path=shown_path(edit.path, cwd), operation=edit.operation, directive=edit.directive,
                    error=edit.error, diff="" if edit.error else edit.diff, text=event.content if edit.error else "",
                    lines_added=data.get("lines_added"), lines_removed=data.get("lines_removed"))
    elif kind == "api" and (call := APICall.of(event)) is not None:
        view.update(api=call.api, operation=call.operation, method=call.method, url=call.url, status=call.status,
                    outcome=call.outcome(), ok=call.ok, sent=call.sent, duration=data.get("duration"),
                    body_path=call.body_path, message=call.message if call.error else "",
                    output=call.body or "\n".join(call.problems))
        view["long"] = view["output"].count("\n") >= LONG_OUTPUT_LINES
    elif kind == "answer":
        view["body_html"] = markdown_html(event.content)
    elif kind == "approval":
        facts = {key: data.get(key) for key in APPROVAL_FACTS[event.type]}
        # Shown as every approval surface shows it (safety/approval_text.py): nothing unseen, its size, and whether
        # the card must be opened whole before it offers Approve.
        view["approval"] = approval_view(facts)
        view["message"] = event.message
    elif kind == "hook":
        view["hook"] = printable_texts({key: data.get(key) for key in HOOK_FACTS})
        view["message"] = event.message
    elif kind == "interrupted":
        view["reason"] = data.get("reason", "")
        why = stop_explanation(event)  # the card's label says the run stopped
        view["text"] = why[:1].upper() + why[1:]
    elif kind == "plan" and (plan := Plan.of(event)) is not None:
        view.update(plan=plan.to_data(), done=plan.done, total=plan.total)
    elif kind == "held":
        view["causes"] = [str(c.get("text", "")) for c in data.get("causes") or [] if isinstance(c, dict)]
        view["text"] = event.content
    elif kind in ("child_start", "child_running", "child_exit"):
        child_id, start = child_reference(event)
        view["child"] = {"uid": child_id or data.get("agent_id"), "starting_from": start,
                         "agent_type": data.get("agent_type", ""), "exit_type": data.get("exit_type", "")}
        view["text"] = event.content if kind != "child_running" else ""
    else:
        view["text"] = event.content
        view["message"] = event.message
    return view


def _approved_by(data: dict) -> str:
    """Who let an action the policy wanted approved run without a card: "always" (an earlier answer) or "auto"."""
    approval = data.get("approval")
    by = approval.get("by") if isinstance(approval, dict) and approval.get("request_id") is None else ""
    return by if by in ("always", "auto") else ""


def _kind(event: Event) -> str:
    """The step's kind as the page draws it (an MCP tool call is drawn as any other step)."""
    kind = group_of(event)
    return "other" if kind == "tool" else kind


def _usage(data: dict) -> dict:
    usage = StepUsage.of(data) or StepUsage()
    out: dict[str, Any] = {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
                           "model_calls": usage.model_calls, "cached_tokens": usage.cached_tokens}
    if usage.cost is not None:
        out["cost"] = usage.cost
    if usage.model:
        out["model"] = usage.model
    if usage.estimated:
        out["estimated"] = True
    return out


class Totals:
    """Running totals for the status line: steps, tokens (and the share of input read from the cache), cost."""

    def __init__(self):
        self.steps = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.cached_tokens = 0
        self.cost = 0.0
        self.priced = False
        self.estimated = False
        self.model = ""

    def add(self, event: Event) -> None:
        if is_step(event, answer=False):
            self.steps += 1
        usage = _usage(event.data or {})
        self.input_tokens += usage["input_tokens"]
        self.output_tokens += usage["output_tokens"]
        self.cached_tokens += usage["cached_tokens"]
        self.estimated = self.estimated or usage.get("estimated", False)
        if "cost" in usage:
            self.cost += usage["cost"]
            self.priced = True
        self.model = usage.get("model", self.model)

    def to_dict(self) -> dict:
        return {"steps": self.steps, "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "cached_tokens": self.cached_tokens,
                "cache_hit_ratio": cache_hit_ratio(self.cached_tokens, self.input_tokens, self.estimated),
                "cost": round(self.cost, 6) if self.priced else None, "model": self.model}
