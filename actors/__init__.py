"""Model actors: one role per file. Each loads its model once in __init__ and maps pa.Table -> pa.Table.

The runner finds them by import path (fanout.models.identity.ROLES).
"""
