"""fanout: batch hybrid search for markdown knowledge bases."""

from fanout.imports import defer_unused

__version__ = "0.1.0"

defer_unused()  # before anything imports lancedb (fanout/imports.py: ~0.65 s of CPU per process)
