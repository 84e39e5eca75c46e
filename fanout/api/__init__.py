"""The public Python API (above the pipelines): `open` -> `KnowledgeBase` with index, search, batch, expand,
get, status and gaps; the request -> response service the CLI and `fanout serve` share (service.py); reading
notes confined to the vault (notes.py); what a db holds (catalog.py).

May import the base, fanout.actors and fanout.pipelines; never the faces (cli, serve, evaluation, gaps).
"""
