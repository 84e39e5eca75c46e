"""The servers (a face): `fanout serve` over HTTP (http.py, on starlette and uvicorn) and the MCP server
(mcp.py). Both answer through fanout.api.

May import fanout.api and below, and fanout.cli.startup (defaults, logging set-up).
"""
