"""What the command lines of `anges`, `anges batch` and `anges acp` share: argument types, config overrides."""

from __future__ import annotations

import argparse
import os
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from anges.config.types import Config


def positive(kind: type):
    """An argparse type: a number of `kind` more than 0."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
        return value

    parse.__name__ = kind.__name__
    return parse


def count(text: str) -> int:
    """An argparse type: a whole number, 0 or more."""
    return _whole_number(text, "a whole number", 0)


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 0 to 65535 (0: any free one)."""
    return _whole_number(text, "a port number", 0, 65535)


def _whole_number(text: str, what: str, least: int, most: int | None = None) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
    if value < least or (most is not None and value > most):
        bounds = f"{least} or more" if most is None else f"{least} to {most}"
        raise argparse.ArgumentTypeError(f"must be {bounds}, got {text}")
    return value


def agent_type(text: str) -> str:
    """An argparse type: a registered agent type (plug-ins are loaded only for a name anges does not know)."""
    from anges.registry import agent_types

    if text not in agent_types:
        raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from {', '.join(agent_types.names())})")
    return text


def config_overrides(args: argparse.Namespace) -> dict:
    """The config layer the flags make: --max-steps, --timeout, --action, --sandbox, --network, --approval,
    --no-agents-md."""
    common: dict = {}
    if getattr(args, "max_steps", None):
        common["max_number_of_events_to_exhaust"] = args.max_steps
    if getattr(args, "timeout", None):
        common["timeout"] = args.timeout
    if getattr(args, "actions", None):
        common["extra_actions"] = list(args.actions)
    overrides: dict[str, Any] = {"agents": {"common": common}} if common else {}
    safety = {key: getattr(args, key, None) for key in ("sandbox", "network", "approval")}
    if any(value is not None for value in safety.values()):
        overrides["safety"] = {key: value for key, value in safety.items() if value is not None}
    if getattr(args, "no_agents_md", False):
        overrides["prompt"] = {"agents_md": False}
    return overrides


def add_config_flag(parser: argparse._ActionsContainer) -> None:
    """--config FILE, layered over ~/.anges/config.yaml (every command reads its config the same way)."""
    parser.add_argument("--config", metavar="FILE", help="a config file layered over ~/.anges/config.yaml")


def add_agents_md_flag(parser: argparse._ActionsContainer) -> None:
    """--no-agents-md (read by `config_overrides`)."""
    parser.add_argument("--no-agents-md", action="store_true",
                        help="leave the project's AGENTS.md files out of the prompt (config: prompt.agents_md)")


def add_safety_flags(group: argparse._ActionsContainer, sandbox_help: str, approval_help: str = "") -> None:
    """--sandbox, --network and (given its help) --approval, read by `config_overrides`; help in the caller's words."""
    group.add_argument("--sandbox", choices=("workspace", "read-only", "off"), help=sandbox_help)
    group.add_argument("--network", action="store_true", default=None, help="let sandboxed commands reach the network")
    if approval_help:
        group.add_argument("--approval", choices=("ask", "auto", "deny"), help=approval_help)


def add_openapi_flag(parser: argparse._ActionsContainer) -> None:
    """--openapi [NAME=]SPEC (repeatable): a web API for CALL_API, besides those of `tools.openapi`."""
    parser.add_argument("--openapi", metavar="[NAME=]SPEC", action="append", default=[],
                        help="a web API's OpenAPI document (a file or URL) the agent may call (repeatable; "
                             "credentials and more in the config's tools.openapi, see docs/openapi.md)")


def with_openapi(config: Config, specs: list[str]) -> Config:
    """`config` with a `tools.openapi` source added for each --openapi `[NAME=]SPEC`."""
    if not specs:
        return config
    from anges.config.types import OpenAPISource

    added = []
    for text in specs:
        name, sep, spec = text.partition("=")
        named = bool(sep) and re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name) is not None
        spec = spec if named else text
        if "://" not in spec:  # a file: as named here, wherever the agent works
            spec = os.path.abspath(os.path.expanduser(spec))
        added.append(OpenAPISource(spec=spec, name=name if named else ""))
    tools = config.tools.model_copy(update={"openapi": [*config.tools.openapi, *added]})
    return config.model_copy(update={"tools": tools})
