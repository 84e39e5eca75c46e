"""Execution (base layer): the stage list and the in-process loop (runner.py), job runs and resumable parts
(stage_io.py), choosing where a job runs (runner_mode.py), Ray and Ray Data (ray_runner.py, the one module that imports
Ray; ray_data.py reaches it through the runner), node paths on a cluster (node_paths.py), progress reporting
(progress.py) and deferred imports (imports.py).

May import fanout.config, fanout.store, fanout.models, fanout.io and the shared root modules; never actors, pipelines or
the faces (model classes are named by import path in fanout.models.identity and imported where the actor lives).
"""
