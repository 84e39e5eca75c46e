"""fanout: batch hybrid search for markdown knowledge bases."""

__version__ = "0.1.0"
