"""fanout: batch hybrid search for markdown knowledge bases."""

import warnings

from fanout.imports import defer_unused

__version__ = "0.1.0"

defer_unused()  # before anything imports lancedb (fanout/imports.py: ~0.65 s of CPU per process)
# pylance warns at every fork once it is imported (the query path imports it, the Ray runner even in a thread
# while `ray.init` forks Ray's processes); fanout never forks, and Ray starts its processes with
# subprocess.Popen(preexec_fn=...), a fork followed at once by exec, where no Lance code runs
warnings.filterwarnings("ignore", message="lance is not fork-safe", category=UserWarning)
