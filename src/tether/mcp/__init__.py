"""``tether mcp``: a Model Context Protocol server over stdio that lets an agent delegate.

:mod:`tether.mcp.server` is the protocol (standard library only, JSON-RPC 2.0 over
newline-delimited stdio, MCP's initialize / tools / ping); :mod:`tether.mcp.tools` the
five session tools under the visibility check.
"""
