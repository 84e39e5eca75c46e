"""Input and output (base layer): batch files in and out (batch_io.py: JSONL, CSV, parquet, any storage URI)
and reading a vault's files without ever leaving it (vault.py).

May import fanout.config, fanout.store, fanout.errors and the shared root modules.
"""
