"""Input and output (base layer): batch files in (batch_input.py: JSONL, CSV, parquet, any storage URI) and out
(batch_output.py), reading a vault's files without ever leaving it (vault.py) and its file events (vault_events.py),
files only their owner may read (private_files.py).

May import fanout.config, fanout.store, fanout.errors and the shared root modules.
"""
