"""Storage (base layer): a collection's Lance tables and manifest (db.py), full-text engines (fts.py,
fts_memory.py), vector search (vectors.py), the caches (caches.py), index integrity (integrity.py) and the
filesystem/URI layer every path goes through (storage.py: local folders and object stores alike).

May import fanout.config, fanout.errors and the shared modules at the package root; never actors, pipelines or
the faces.
"""
