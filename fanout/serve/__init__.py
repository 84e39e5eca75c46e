"""The servers (a face): `fanout serve` over HTTP (http.py, on starlette and uvicorn) and the MCP server
(mcp.py). Both answer through fanout.api.

May import fanout.api and below, and fanout.cli.startup (`fanout serve` and `fanout mcp` read their config from
their arguments as every command does, and print `--watch` rounds as it does: fanout.cli.index_watch).
"""
