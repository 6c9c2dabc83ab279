"""A run of an agent tree as ACP session updates: thoughts, one tool call per action with its status, answers, and
the plan (UPDATE_PLAN: the top agent's as the session's plan, a child's as the progress of the call that runs it).

Live, three things feed it: the pieces of a reply's analysis and reasoning as it streams (thought chunks), each
model reply once it has arrived (its thoughts, unless they streamed; its actions start as pending tool calls) and
each event as it is recorded (approvals, results, child agents, stops). A stored stream replays through the same
mapping from its events alone: each tool call then starts when its first event comes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from acp import (
    start_tool_call,
    text_block,
    tool_content,
    tool_diff_content,
    update_agent_message_text,
    update_agent_thought_text,
    update_plan,
    update_tool_call,
    update_user_message_text,
)
from acp.schema import (
    ContentToolCallContent,
    FileEditToolCallContent,
    TerminalToolCallContent,
    ToolCallLocation,
    ToolCallStatus,
    ToolCallUpdate,
    ToolKind,
)

from anges.acp import diffs, facts
from anges.acp.plan import SessionPlan, child_progress
from anges.acp.shown import decider, declined, describe, fenced, request_text
from anges.exceptions import FormatError
from anges.prompt.parsing import parse_reply
from anges.safety import approval_text
from anges.store.events import REQUEST_EVENT_TYPES, RETURN_TO_PARENT_EVENT_TYPES, Event, action_input
from anges.store.plans import Plan
from anges.util.printable import as_drawn, visible

Content = ContentToolCallContent | FileEditToolCallContent | TerminalToolCallContent
"""What a tool call can show."""
ANSWER_TYPES = ("task_completion", "agent_text_response", "agent_requested_help")
RETURNING_ACTIONS = ("TASK_COMPLETE", "HELP_NEEDED", "AGENT_TEXT_RESPONSE")
NOT_TOOL_CALLS = (*RETURNING_ACTIONS, "WAIT_FOR_CHILDREN", "UPDATE_PLAN")
"""Actions that are no tool call: the turn's answer, an orchestrator waiting for its children, a plan."""
KINDS: dict[str, ToolKind] = {"RUN_SHELL_CMD": "execute", "EDIT_FILE": "edit", "READ_MIME_FILES": "read",
                              "CALL_CHILD_AGENT": "think", "CALL_API": "fetch", "DESCRIBE_API_OPERATION": "read"}


@dataclass(frozen=True)
class Speaker:
    """The agent an event or a reply comes from."""

    id: str
    type: str = "default"
    parent: str = ""
    depth: int = 0


@dataclass
class Call:
    """One tool call: an action of one agent, from its announcement (or first event) until it is done."""

    id: str
    agent: str
    action_type: str
    title: str
    kind: ToolKind
    locations: list[ToolCallLocation] | None = None
    status: ToolCallStatus = "pending"
    args: dict = field(default_factory=dict)
    """The action's arguments (from its reply; empty when it was first seen in an event)."""
    request: str = ""
    """The approval request asked about it."""
    child: str = ""
    """The child agent it runs."""
    brief: str = ""  # what it shows while the child runs: its request (and then the progress of its plan)


class _AnyAction(Mapping):
    """An action registry that knows every type and checks no field: reads a reply the way any agent might."""

    def __getitem__(self, key):
        return None

    def __iter__(self):
        return iter(())

    def __len__(self) -> int:
        return 0


class UpdateMapper:
    """Turns the replies and events of one prompt turn (or a stored stream) into session updates, sent in order."""

    def __init__(self, send: Callable, cwd: str, ids: Iterator[int], replay: bool = False,
                 asks: Callable[[str, dict], bool] | None = None):
        self.send = send
        self.cwd = cwd
        self.replay = replay
        self.asks = asks or (lambda action_type, args: False)
        """Whether an action will wait for a person's approval before it starts (its call then stays pending)."""
        self._ids = ids
        self._lock = threading.RLock()
        self._calls: dict[str, list[Call]] = {}
        self._by_request: dict[str, Call] = {}
        self._by_child: dict[str, Call] = {}
        self._speakers: dict[str, Speaker] = {}
        self._running: dict[str, str] = {}
        self._thought: dict[str, str] = {}
        self._streaming: dict[str, tuple[int, str]] = {}
        """The call and field of the reply each agent streams now (its thoughts went out as chunks)."""
        self._plan = SessionPlan()

    # -- what feeds it ------------------------------------------------------------------------------------------

    def reply(self, text: str, agent_id: str = "") -> None:
        """A model reply just arrived: show its thoughts and announce its actions (when the caller is known: the
        running agent `agent_id`, else the one agent that can be calling)."""
        with self._lock:
            speaker = self._speakers.get(agent_id) if agent_id in self._running else self._caller()
            if speaker is None:
                return
            try:
                reply = parse_reply(text, _AnyAction())
            except FormatError:
                return  # the agent asks again; nothing of this reply runs
            self._close(speaker.id, "Not run: the run went on without it.")
            self._plan.explicit |= not speaker.depth and any(a["action_type"] == "UPDATE_PLAN" for a in reply.actions)
            if self._streaming.pop(speaker.id, None) is None:
                self._thought.pop(speaker.id, None)  # a new reply: its thoughts show even when they repeat the last
                self._think(speaker, reply.analysis, reply.reasoning)
            else:  # its thoughts went out as they streamed; the events repeat them
                self._thought[speaker.id] = reply.reasoning.strip() or reply.analysis.strip()
                self._show_plan(speaker, reply.reasoning)
            calls = [self._open(speaker, args["action_type"], args, "pending", action_input(args))
                     for args in reply.actions if args["action_type"] not in NOT_TOOL_CALLS]
            if calls:  # the agent starts on the first at once, unless it must ask first
                self._start(calls[0])

    def thought(self, speaker: Speaker, delta) -> None:
        """A piece of a reply's analysis or reasoning as it streams (`delta`: an anges ReplyDelta)."""
        with self._lock:
            self._speakers.setdefault(speaker.id, speaker)
            call, field = self._streaming.get(speaker.id, (None, ""))
            if call != delta.call:
                lead = f"[{speaker.type}] " if speaker.depth else ""
            else:
                lead = "\n\n" if field != delta.field else ""
            self._streaming[speaker.id] = (delta.call, delta.field)
            self._thought[speaker.id] = delta.reasoning.strip() or delta.analysis.strip()
            self.send(update_agent_thought_text(lead + delta.text))

    def output(self, speaker: Speaker, delta) -> None:
        """What the agent's running command printed so far (`delta`: an anges ReplyDelta of the field "output"): the
        content of its call, until its result replaces it."""
        with self._lock:
            call = self._waiting(speaker.id, "RUN_SHELL_CMD", started=True)
            if call is not None and call.status == "in_progress":
                text = fenced(as_drawn(delta.output)) + "\n\nRunning…"
                self.send(update_tool_call(call.id, content=[tool_content(text_block(text))]))

    def event(self, event: Event, speaker: Speaker, step: Event | None = None) -> None:
        """An event was recorded (or is replayed; `step` is then the event that ended the step an approval request
        belongs to, whose thoughts and input the live turn showed before the request)."""
        with self._lock:
            self._speakers[speaker.id] = speaker
            kind = event.type
            if kind in REQUEST_EVENT_TYPES:
                self._running[speaker.id] = speaker.parent
                if self.replay and speaker.depth == 0:
                    self.send(update_user_message_text(event.content))
                return
            if kind == "child_agent_running":
                return
            if kind == "plan_updated":  # before its thoughts: its reasoning is no plan tracker then
                self._planned_step(speaker, event)
            if step is not None:
                self._think(speaker, step.analysis, step.reasoning)
            self._think(speaker, event.analysis, event.reasoning)
            if kind in RETURN_TO_PARENT_EVENT_TYPES:
                self._running.pop(speaker.id, None)
            if kind == "approval_requested":
                self._asked(speaker, event, facts.raw_input(step) if step is not None else None)
            elif kind == "approval_decided":
                self._decided(speaker, event)
            elif kind in ("new_child_agent", "resume_child_agent"):
                self._delegated(speaker, event)
            elif kind.startswith("child_agent_"):
                self._child_returned(speaker, event)
            elif kind in ANSWER_TYPES and speaker.depth == 0:
                self.send(update_agent_message_text(event.content))
            elif kind == "task_interrupted":
                self._close(speaker.id, f"Stopped: {event.content}")
                if speaker.depth == 0:
                    self.send(update_agent_message_text(event.content))
            elif kind in ("action", "edit_file"):
                self._finished(speaker, event)
            elif kind in ("hook_ran", "hook_feedback"):
                self._hooked(speaker, event)
            elif kind in ("completion_held", "completion_dropped"):  # a thought of its own, after the reply's
                self.send(update_agent_thought_text(f"\n\n{f'[{speaker.type}] ' * bool(speaker.depth)}{event.message}"))
            elif kind == "reply_rejected":  # its thoughts, even its calls, may have gone out: they led nowhere
                self._close(speaker.id, "Not run: the reply was rejected.")
                after = "\n\n" if self._streaming.pop(speaker.id, None) else ""
                lead = f"[{speaker.type}] " if speaker.depth else ""
                self.send(update_agent_thought_text(f"{after}{lead}{event.content}\n\n"))

    def history(self, items: list[tuple[Event, Speaker]]) -> None:
        """Replay recorded events (children's after the event that ran them) as the live turns showed them."""
        for index, (event, speaker) in enumerate(items):
            step = _step_of(items, index) if event.type == "approval_requested" else None
            self.event(event, speaker, step)
        self.finish()

    def finish(self) -> None:
        """The turn is over: a tool call still open did not run (or its child never returned)."""
        with self._lock:
            for agent in list(self._calls):
                self._close(agent, "Not run: the run ended first.", children=True)

    def permission_call(self, request) -> ToolCallUpdate:
        """The tool call a permission request is about (`request`: an anges ApprovalRequest), with what to show."""
        with self._lock:
            call = self._by_request.get(request.id)
            if call is None:  # its `approval_requested` event did not come through: start the call now
                speaker = self._speakers.get(request.agent_id) or Speaker(request.agent_id, request.agent_type)
                call = self._open(speaker, request.action_type, {"subject": request.subject}, "pending")
                call.request = request.id
                self._by_request[request.id] = call
            content: list[Content] = [tool_content(text_block(request_text(request)))]
            if request.action_type == "EDIT_FILE":
                parts = diffs.hunk_texts(visible(request.detail))
                content += [tool_diff_content(request.subject, new, old) for old, new in parts]
            elif request.action_type != "RUN_SHELL_CMD":
                content.append(tool_content(text_block(fenced("\n".join(approval_text.marked(request.detail))))))
            return ToolCallUpdate(tool_call_id=call.id, title=call.title, kind=call.kind, status=call.status,
                                  content=content, locations=call.locations)

    # -- events ---------------------------------------------------------------------------------------------------

    def _asked(self, speaker: Speaker, event, raw_input: dict | None = None) -> None:
        action_type, request = facts.action_type(event), facts.request_id(event)
        call = self._waiting(speaker.id, action_type) or self._open(speaker, action_type, facts.action_args(event),
                                                                     "pending", raw_input)
        call.request = request
        self._by_request[request] = call
        approval = facts.approval(event)
        self._update(call, "pending", f"Waiting for approval: {approval['reason']} [{approval['rule']}]")

    def _decided(self, speaker: Speaker, event) -> None:
        action_type, approval = facts.action_type(event), facts.approval(event)
        call = self._by_request.pop(facts.request_id(event), None) or self._waiting(speaker.id, action_type)
        if approval["decision"] == "allow":
            if call is not None:
                self._update(call, "in_progress", f"Approved by {decider(approval)}.")
            return
        self._done(speaker, call, action_type, facts.action_args(event), "failed", [declined(approval)],
                   facts.raw_input(event))
        for _ in range(approval["skipped"]):
            rest = self._waiting(speaker.id)
            if rest is None:
                break
            self._done(speaker, rest, rest.action_type, {}, "failed",
                       [tool_content(text_block("Not run: an earlier action of the same reply was declined."))])

    def _hooked(self, speaker: Speaker, event) -> None:
        """A hook ran: a tool call of its own, done at once. An action it blocked fails with the reason the model reads,
        and so does the rest of its reply, which did not run either."""
        data = event.data
        failed = data.get("outcome") in ("failed", "timeout", "unreadable") or data.get("effect") == "blocked"
        text = "\n\n".join(part for part in (event.message, str(data.get("output") or "")) if part)
        self._done(speaker, None, "HOOK", {"subject": f"{data.get('hook', '')} ({data.get('hook_event', '')})"},
                   "failed" if failed else "completed", [tool_content(text_block(text))])
        if data.get("effect") == "blocked" and data.get("hook_event") == "before_action":
            self._close(speaker.id, event.content)

    def _delegated(self, speaker: Speaker, event) -> None:
        child = facts.child_id(event)
        call = self._waiting(speaker.id, "CALL_CHILD_AGENT") or self._open(
            speaker, "CALL_CHILD_AGENT", facts.action_args(event), "in_progress", facts.raw_input(event))
        call.child, call.brief = child, f"{event.message}:\n\n{event.content}"
        self._by_child[child] = call
        self._update(call, "in_progress", call.brief)

    def _child_returned(self, speaker: Speaker, event) -> None:
        call = self._by_child.pop(facts.child_id(event), None)
        status: ToolCallStatus = "failed" if facts.child_exit(event) == "task_interrupted" else "completed"
        self._done(speaker, call, "CALL_CHILD_AGENT", facts.action_args(event), status,
                   [tool_content(text_block(event.content))])

    def _finished(self, speaker: Speaker, event) -> None:
        action_type = facts.action_type(event)  # "" from a custom action that records no type: its first call
        call = self._waiting(speaker.id, action_type or None, started=True)
        action_type = action_type or (call.action_type if call is not None else event.type)
        status: ToolCallStatus = "failed" if facts.failed(event) else "completed"
        self._done(speaker, call, action_type, facts.action_args(event), status, self._result(event, action_type),
                   facts.raw_input(event))
        following = self._waiting(speaker.id)
        if following is not None:
            self._start(following)

    def _result(self, event, action_type: str) -> list:
        if action_type == "RUN_SHELL_CMD":
            output = facts.command_text(event)
            text = (fenced(output) if output.strip() else "(no output)") + f"\n\n{facts.command_status(event)}"
            return [tool_content(text_block(text))]
        if action_type == "EDIT_FILE" and not facts.error(event):
            path, diff = facts.edit_path(event), facts.edit_diff_text(event)
            whole = None if self.replay else diffs.file_texts(path, diff)
            parts = [whole] if whole is not None else diffs.hunk_texts(diff)
            if parts:
                return [tool_diff_content(path, new, old) for old, new in parts]
            return [tool_content(text_block(diff or "(no change)"))]
        if action_type == "CALL_API":
            return [tool_content(text_block(fenced(event.content)))]
        return [tool_content(text_block(event.content))]

    # -- thoughts and plan ----------------------------------------------------------------------------------------

    def _think(self, speaker: Speaker, analysis: str, reasoning: str) -> None:
        """Show a reply's analysis and reasoning once (every event of the reply carries them)."""
        key = (reasoning or "").strip() or (analysis or "").strip()
        if not key or self._thought.get(speaker.id) == key:
            return
        self._thought[speaker.id] = key
        text = "\n\n".join(part.strip() for part in (analysis, reasoning) if part and part.strip())
        self.send(update_agent_thought_text(f"[{speaker.type}] {text}" if speaker.depth else text))
        self._show_plan(speaker, reasoning)

    def _planned_step(self, speaker: Speaker, event: Event) -> None:
        """An UPDATE_PLAN: the top agent's is the session's plan; a child's, the progress of the call that runs it."""
        plan, call = Plan.of(event), self._by_child.get(speaker.id) if speaker.depth else None
        if plan is not None and speaker.depth == 0 and (entries := self._plan.updated(plan)) is not None:
            self.send(update_plan(entries))
        elif plan is not None and call is not None:
            self._update(call, "in_progress", f"{call.brief}\n\n{child_progress(plan)}")

    def _show_plan(self, speaker: Speaker, reasoning: str) -> None:
        """The orchestrator's plan, from its reasoning, when it changed (unless it keeps one with UPDATE_PLAN)."""
        if speaker.type == "orchestrator" and speaker.depth == 0 and (entries := self._plan.from_reasoning(reasoning)):
            self.send(update_plan(entries))

    # -- tool calls -----------------------------------------------------------------------------------------------

    def _caller(self) -> Speaker | None:
        """The agent whose reply just came: the one running agent without a running child (None when several
        children run at once, and the reply could be any of theirs)."""
        parents = set(self._running.values())
        leaves = [agent for agent in self._running if agent not in parents]
        return self._speakers.get(leaves[0]) if len(leaves) == 1 else None

    def _waiting(self, agent: str, action_type: str | None = None, started: bool = False) -> Call | None:
        """The agent's first open call (of `action_type`) not yet running a child or, unless `started`, asked about."""
        for call in self._calls.get(agent, []):
            if call.child or (call.request and not started):
                continue
            if action_type is None or call.action_type == action_type:
                return call
        return None

    def _open(self, speaker: Speaker, action_type: str, args: dict, status: ToolCallStatus,
              raw_input: dict | None = None) -> Call:
        title, locations = describe(speaker.type, speaker.depth, action_type, args, self.cwd)
        call = Call(f"call-{next(self._ids)}", speaker.id, action_type, title, KINDS.get(action_type, "other"),
                    locations, status, args)
        self._calls.setdefault(speaker.id, []).append(call)
        self.send(start_tool_call(call.id, title, kind=call.kind, status=status, locations=locations,
                                  raw_input=raw_input))
        return call

    def _start(self, call: Call) -> None:
        """The agent goes on to `call`: in progress, unless it will wait for approval first (then it starts once
        approved)."""
        if call.status == "pending" and not (call.args and self.asks(call.action_type, call.args)):
            self._update(call, "in_progress")

    def _update(self, call: Call, status: ToolCallStatus, text: str | None = None) -> None:
        """Send what changed; a call only moves forward (once in progress, never pending again)."""
        status = call.status if status == "pending" else status
        call.status = status
        content = [tool_content(text_block(text))] if text else None
        self.send(update_tool_call(call.id, status=status, content=content))

    def _done(self, speaker: Speaker, call: Call | None, action_type: str, args: dict, status: ToolCallStatus,
              content: list, raw_input: dict | None = None) -> None:
        """Finish a call with its result; one that was never announced starts and ends in one update."""
        if call is None:
            title, locations = describe(speaker.type, speaker.depth, action_type, args, self.cwd)
            self.send(start_tool_call(f"call-{next(self._ids)}", title, kind=KINDS.get(action_type, "other"),
                                      status=status, content=content, locations=locations, raw_input=raw_input))
            return
        calls = self._calls.get(call.agent, [])
        if call in calls:
            calls.remove(call)
        self.send(update_tool_call(call.id, status=status, content=content, locations=call.locations))

    def _close(self, agent: str, why: str, children: bool = False) -> None:
        """Fail the agent's open calls (those running a child go on until the child returns, unless `children`)."""
        for call in [c for c in self._calls.get(agent, []) if children or not c.child]:
            self._done(self._speakers.get(agent, Speaker(agent)), call, call.action_type, {}, "failed",
                       [tool_content(text_block(why))])


def _step_of(items: list[tuple[Event, Speaker]], index: int) -> Event | None:
    """The event that ended the step whose approval request is `items[index]`: the same agent's next event that is
    not an approval it was given (the action's result, or the decision that declined it)."""
    agent = items[index][1].id
    for event, speaker in items[index + 1:]:
        if speaker.id != agent or (event.type == "approval_decided" and facts.approval(event)["decision"] == "allow"):
            continue
        return event
    return None

