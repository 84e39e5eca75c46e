"""A GGUF model's header without its weights, and a model of the same shape rebuilt from it with synthetic weights.

    python -m bench.gguf_skeleton strip MODEL.gguf OUT.skel     # header only: metadata, tokenizer, tensor table
    python -m bench.gguf_skeleton fill OUT.skel MODEL.gguf        # the same file with random weights

For bench/gpu_check.sh on a lent GPU machine: only 64 MiB travel there and nothing can be downloaded, so the
profile's models (0.3-1.1 GB each) go as skeletons (a few MB: the tokenizer is most of it) and are rebuilt
there. Same architecture, tensor shapes and quantization types, so a forward pass costs what the real model's
costs; the weights are random (each block's scale a small valid fp16, so no NaN or inf), so outputs are
meaningless and the length of free generation is not the real model's: gpu_check.sh reports tokens per second
from llama.cpp's own counters next to the per-call rates.

Standard library and numpy only (the GPU machine has numpy, not the gguf package): the GGUF reader below reads
only what this needs (the key/value section is skipped over, the tensor table read).
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import numpy as np

# GGUF key/value types: fixed sizes (8 = string, 9 = array are read separately)
_KV_SIZE = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
# ggml type id -> (name, elements per block, bytes per block, byte offsets of the block's fp16 scales)
_TYPES = {
    0: ("F32", 1, 4, ()), 1: ("F16", 1, 2, ()), 30: ("BF16", 1, 2, ()),
    2: ("Q4_0", 32, 18, (0,)), 3: ("Q4_1", 32, 20, (0, 2)), 6: ("Q5_0", 32, 22, (0,)),
    7: ("Q5_1", 32, 24, (0, 2)), 8: ("Q8_0", 32, 34, (0,)),
    10: ("Q2_K", 256, 84, (80, 82)), 11: ("Q3_K", 256, 110, (108,)), 12: ("Q4_K", 256, 144, (0, 2)),
    13: ("Q5_K", 256, 176, (0, 2)), 14: ("Q6_K", 256, 210, (208,)),
}


class _Reader:
    def __init__(self, buf: bytes):
        self.buf, self.pos = buf, 0

    def take(self, fmt: str):
        v = struct.unpack_from("<" + fmt, self.buf, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return v[0] if len(v) == 1 else v

    def string(self) -> str:
        n = self.take("Q")
        s = self.buf[self.pos:self.pos + n].decode("utf-8", "replace")
        self.pos += n
        return s

    def value(self, t: int):
        if t == 8:
            return self.string()
        if t == 9:
            et, n = self.take("I"), self.take("Q")
            if et in _KV_SIZE:  # skip a fixed-size array in one step (token scores, types: 100k+ entries)
                self.pos += n * _KV_SIZE[et]
                return None
            return [self.value(et) for _ in range(n)]
        fmt = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}[t]
        return self.take(fmt)


def read_layout(head: bytes) -> tuple[int, list[tuple[str, int, int, int]]]:
    """(data start, [(tensor name, ggml type, offset in data, bytes)]) from a GGUF file's leading bytes."""
    r = _Reader(head)
    if r.take("4s") != b"GGUF":
        raise ValueError("not a GGUF file (magic is not GGUF)")
    version, n_tensors, n_kv = r.take("I"), r.take("Q"), r.take("Q")
    if version < 2:
        raise ValueError(f"GGUF version {version} is too old (need 2 or 3)")
    align = 32
    for _ in range(n_kv):
        key, t = r.string(), r.take("I")
        v = r.value(t)
        if key == "general.alignment":
            align = int(v)
    tensors = []
    for _ in range(n_tensors):
        name, nd = r.string(), r.take("I")
        dims = [r.take("Q") for _ in range(nd)]
        gtype, off = r.take("I"), r.take("Q")
        if gtype not in _TYPES:
            raise ValueError(f"tensor {name}: ggml type {gtype} is not in this script's table; add its block layout")
        _, blk, size, _ = _TYPES[gtype]
        tensors.append((name, gtype, off, int(np.prod(dims, dtype=np.int64)) // blk * size))
    start = -(-r.pos // align) * align
    return start, tensors


def strip(src: Path, dst: Path) -> None:
    with open(src, "rb") as f:
        head = f.read(64 << 20)  # metadata and tensor table: a few MB for a 262k-token vocabulary
    start, tensors = read_layout(head)
    end = max(off + n for _, _, off, n in tensors)
    if start + end != src.stat().st_size:
        raise ValueError(f"{src}: layout ends at {start + end} bytes, the file has {src.stat().st_size}")
    dst.write_bytes(head[:start])
    print(f"{dst}: {start} header bytes of {src.stat().st_size} ({len(tensors)} tensors)")


def fill(skel: Path, dst: Path, seed: int = 0) -> None:
    head = skel.read_bytes()
    start, tensors = read_layout(head)
    rng = np.random.default_rng(seed)
    with open(dst, "wb") as f:
        f.write(head)
        for name, gtype, off, n in sorted(tensors, key=lambda t: t[2]):
            f.seek(start + off)
            _, blk, size, scales = _TYPES[gtype]
            if blk == 1:  # plain floats: small normal values
                v = rng.standard_normal(n // size, dtype=np.float32) * 0.02
                data = {"F32": v, "F16": v.astype(np.float16)}.get(_TYPES[gtype][0])
                if data is None:  # BF16: the high half of each float32
                    data = (v.view(np.uint32) >> 16).astype(np.uint16)
                f.write(data.tobytes())
                continue
            blocks = rng.integers(0, 256, size=(n // size, size), dtype=np.uint8)
            for o in scales:  # every block's scale (and min) a small valid fp16: no NaN or inf
                blocks[:, o:o + 2] = np.frombuffer(np.float16(0.002).tobytes(), np.uint8)
            f.write(blocks.tobytes())
        f.truncate(start + max(off + n for _, _, off, n in tensors))
    print(f"{dst}: {dst.stat().st_size} bytes, {len(tensors)} tensors with synthetic weights")


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("strip", "fill"):
        sys.exit(__doc__)
    (strip if sys.argv[1] == "strip" else fill)(Path(sys.argv[2]), Path(sys.argv[3]))
