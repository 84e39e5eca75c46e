"""llama-cpp-python's OpenAI-compatible server (`python -m llama_cpp.server`, its `server` extras) on the wheel
scripts/setup.sh builds: that wheel's CPU kernels are dynamic backends, which llama-cpp-python 0.3.36 never
loads itself (actors/_llama.py load_backends), so this loads the best usable one first and then runs the server
with the arguments given, e.g.

    .venv/bin/python scripts/llama_server.py --model ~/.cache/fanout/models/embeddinggemma-300m-Q8_0.gguf \
        --model_alias embeddinggemma --embedding true --n_ctx 512 --n_batch 512 --n_ubatch 512 \
        --n_threads 1 --host 127.0.0.1 --port 8080

A llama-cpp-python built the usual way (kernels linked in) runs `python -m llama_cpp.server` directly.
"""

from __future__ import annotations

import runpy

from fanout.actors._llama import load_backends

if __name__ == "__main__":
    load_backends()
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
