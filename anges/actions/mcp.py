"""USE_MCP_TOOL: call a tool of a connected MCP server."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from anges.actions.base import Action, ActionContext
from anges.prompt.parsing import Param
from anges.store.events import Event
from anges.store.results import took
from anges.tools.schemas import compact_schema
from anges.util.clipping import clipped, shorten
from anges.util.masking import mask_secrets

if TYPE_CHECKING:
    from anges.tools.mcp import MCPManager

MAX_DESCRIPTION_CHARS = 2000
MAX_VALIDATION_PROBLEMS = 5
NOT_CALLED = ("unknown_server", "unavailable", "unknown_tool", "invalid_args")


class UseMCPTool(Action):
    """Calls one tool of an MCP server held by an `MCPManager`; records its text, structured or error result."""

    type = "USE_MCP_TOOL"
    guide_template = "actions/use_mcp_tool.j2"
    params = {
        "mcp_server_name": Param(str, non_empty=True, description="the server, as listed in the guide"),
        "tool_name": Param(str, non_empty=True, description="the tool, as listed under its server"),
        "tool_args": Param(dict, required=False, description="the tool's arguments, per its parameter schema"),
    }

    def __init__(self, manager: MCPManager):
        super().__init__()
        self.manager = manager

    def catalog(self) -> list[dict]:
        """Servers and their tools as the guide shows them (secrets masked, schemas compact JSON)."""
        mask = self.manager.mask
        return [
            {"name": server, "tools": [{"name": tool.name,
                                        "description": mask(shorten(tool.description.strip(), MAX_DESCRIPTION_CHARS)),
                                        "schema": mask(compact_schema(tool.input_schema))} for tool in tools]}
            for server, tools in self.manager.tools().items()
        ]

    def unavailable(self) -> dict[str, str]:
        """Servers that failed to start or stopped, with the reason (first line only)."""
        return {name: reason.splitlines()[0] for name, reason in self.manager.failures.items()}

    def run(self, ctx: ActionContext, args: dict) -> Event:
        from anges.tools.mcp import MCPCallError

        server, tool_name = args["mcp_server_name"].strip(), args["tool_name"].strip()
        tool_args = args.get("tool_args") or {}
        facts = {"action_type": self.type, "server": server, "tool": tool_name, "args": tool_args}
        try:
            tool = self.manager.find_tool(server, tool_name)
        except MCPCallError as exc:
            return self._error(ctx, facts, exc.kind, str(exc))
        problems = validate_args(tool_args, tool.input_schema)
        if problems:
            text = (f"The arguments do not match the parameters of {server}.{tool_name}:\n"
                    + "\n".join(f"- {p}" for p in problems)
                    + f"\nIts parameter schema: {compact_schema(tool.input_schema)}")
            return self._error(ctx, facts, "invalid_args", text)
        started = time.monotonic()
        try:
            result = self.manager.call(server, tool_name, tool_args, interrupt_check=ctx.interrupt_check)
        except MCPCallError as exc:
            event = self._error(ctx, facts, exc.kind, str(exc))
            event.data["duration"] = round(time.monotonic() - started, 3)
            if exc.kind == "server_died":
                self._refresh_guide(ctx)
            return event
        return self._result_event(ctx, facts, result, time.monotonic() - started)

    # -- helpers ----------------------------------------------------------------------------------------------

    def _result_event(self, ctx: ActionContext, facts: dict, result, duration: float) -> Event:
        cap = ctx.config.shell_output_cap
        status = ("ERROR (the tool reported a failure)" if result.is_error else "OK") + f" after {took(duration)}"
        parts = [f"MCP TOOL {facts['server']}.{facts['tool']}: {status}"]
        # Masked before the cap (which could split a secret); ctx.secrets holds the servers' secrets too.
        text = mask_secrets(result.text, ctx.secrets)
        structured_json = ""
        if result.structured is not None and not _repeats(result.text, result.structured):
            structured_json = mask_secrets(json.dumps(result.structured, ensure_ascii=False, indent=1), ctx.secrets)
        text, omitted = clipped(text, cap)
        structured_shown, structured_omitted = clipped(structured_json, cap)
        if text:
            parts.append(f"RESULT:\n{text}")
        if structured_shown:
            parts.append(f"STRUCTURED RESULT (JSON):\n{structured_shown}")
        if not text and not structured_shown:
            parts.append("(no content)")
        verb = "failed" if result.is_error else "called"
        return Event(
            type="action",
            content="\n".join(parts),
            message=f"MCP tool {facts['server']}.{facts['tool']} {verb}",
            data={**facts, "is_error": result.is_error, "structured": result.structured is not None,
                  "omitted": omitted + structured_omitted, "duration": round(duration, 3)},
        )

    def _error(self, ctx: ActionContext, facts: dict, kind: str, text: str) -> Event:
        status = "NOT CALLED" if kind in NOT_CALLED else "FAILED"
        content = f"MCP TOOL {facts['server']}.{facts['tool']}: {status}\n{text}"
        return Event(type="action", content=content,
                     message=f"MCP tool {facts['server']}.{facts['tool']}: {text.splitlines()[0]}",
                     data={**facts, "is_error": True, "error": kind})

    def _refresh_guide(self, ctx: ActionContext) -> None:
        """Drop a dead server's tools from the guide the model reads from the next step on."""
        if ctx.render_guide is not None:
            self.guide_prompt = ctx.render_guide(self)


def validate_args(args: dict, schema: dict) -> list[str]:
    """Problems of `args` against a tool's JSON input schema (empty when they fit or the schema is unusable)."""
    if not isinstance(schema, dict) or not schema:
        return []
    try:
        import jsonschema
    except ImportError:  # the mcp SDK depends on jsonschema; without it the server validates alone
        return []
    try:
        validator_class = jsonschema.validators.validator_for(schema)
        validator_class.check_schema(schema)
    except jsonschema.SchemaError:
        return []
    errors = sorted(validator_class(schema).iter_errors(args), key=lambda e: list(e.absolute_path))
    problems = []
    for error in errors[:MAX_VALIDATION_PROBLEMS]:
        where = "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
        problems.append(f"tool_args{where}: {error.message}")
    if len(errors) > MAX_VALIDATION_PROBLEMS:
        problems.append(f"... and {len(errors) - MAX_VALIDATION_PROBLEMS} more")
    return problems


def _repeats(text: str, structured: Any) -> bool:
    """True when the structured content says nothing the text does not (SDKs often send both)."""
    if structured == {"result": text}:
        return True
    try:
        value = json.loads(text)
    except ValueError:
        return False
    return value == structured or structured == {"result": value}

