"""The faces: command line, MCP server, demo, eval and report tooling. They sit on top of the pipelines and
actors; nothing below imports them."""
