"""The `fanout` command (a face): the parser (args.py), the dispatcher (main.py), rendering for people
(render.py), progress bars (progress.py), the demo and `fanout analyze`. A thin layer over fanout.api.

May import anything below it; the other faces (serve, evaluation, gaps) are imported lazily, per command.
"""
