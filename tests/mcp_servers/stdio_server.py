"""A stdio MCP server for the tests: text, structured and error results, a crash, a slow tool, its env."""

import os
import sys
import time
from pathlib import Path
from typing import TypedDict

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("demo")


class Stats(TypedDict):
    count: int
    total: float
    mean: float


@server.tool()
def echo(text: str, times: int = 1) -> str:
    """Repeat the text."""
    return " ".join([text] * times)


@server.tool()
def stats(numbers: list[float]) -> Stats:
    """Count, total and mean of some numbers."""
    total = sum(numbers)
    return {"count": len(numbers), "total": total, "mean": total / len(numbers) if numbers else 0.0}


@server.tool()
def divide(a: float, b: float) -> float:
    """Divide a by b."""
    if b == 0:
        raise ToolError("cannot divide by zero")
    return a / b


@server.tool()
def show_env(name: str) -> str:
    """The value of one environment variable of the server process."""
    return f"{name}={os.environ.get(name, '')}"


@server.tool()
def lines(count: int) -> str:
    """Many numbered lines."""
    return "\n".join(f"line {i}" for i in range(1, count + 1))


@server.tool()
def nap(seconds: float) -> str:
    """Sleep, then answer."""
    if os.environ.get("NAP_FILE"):  # so a test can act while the call is under way
        Path(os.environ["NAP_FILE"]).write_text("napping")
    time.sleep(seconds)
    return "awake"


@server.tool()
def crash() -> str:
    """Exit the server process at once."""
    os._exit(1)


if __name__ == "__main__":
    pid_file = os.environ.get("PID_FILE")
    if pid_file:
        with open(pid_file, "a") as f:
            f.write(f"{os.getpid()}\n")
    print(f"demo server {os.getpid()} starting", file=sys.stderr, flush=True)
    if "--fail-at-start" in sys.argv:
        print("demo server: missing configuration, giving up", file=sys.stderr, flush=True)
        sys.exit(3)
    server.run()
