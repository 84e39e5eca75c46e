"""`python -m fanout.cli ...` is the `fanout` command."""

from fanout.cli.main import entry

entry()
