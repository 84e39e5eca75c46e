"""Defaults every face shares (base layer: imports nothing, so the CLI's warm path can read it for free)."""

DEFAULT_COLLECTION = "notes"  # the collection a command, a request or `fanout.open` names when none is given
