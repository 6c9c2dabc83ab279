"""A streamable-HTTP MCP server for the tests: python http_server.py PORT (serves /mcp on 127.0.0.1)."""

import os
import sys

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("web")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def whoami(ctx: Context) -> str:
    """The Authorization header the client sent."""
    return f"you sent: {(ctx.headers or {}).get('authorization', '(none)')}"


@server.tool()
def crash() -> str:
    """Exit the server process at once."""
    os._exit(1)


if __name__ == "__main__":
    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
