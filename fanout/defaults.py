"""Defaults every face shares (base layer: imports nothing of fanout, so the CLI's warm path can read it for
free)."""

import os

DEFAULT_DB = os.environ.get("FANOUT_DB", ".fanout/db")  # the db a command names when none is given (--db)
ENV_NO_SERVER = "FANOUT_NO_SERVER"  # set to 1: the CLI never uses a running `fanout serve`

DEFAULT_COLLECTION = "notes"  # the collection a command, a request or `fanout.open` names when none is given
