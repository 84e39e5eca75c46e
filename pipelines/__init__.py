"""Pipeline stages (one per file, pure functions over pa.Table) and thin compositions."""
