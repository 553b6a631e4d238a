"""Chunk codecs: `raw`, `planes` and the `xor`/`sub` deltas.

codec.py encodes, decoder.py decodes (block by block, through delta chains).
Both are imported on first use of a name below (PEP 562): they need
zstandard and blake3, whose import would slow the filter process's start-up
for git commands that never encode or decode a chunk. Submodules import as usual.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Base": "codec",
    "DELTA_GAIN": "codec",
    "Encoded": "codec",
    "encode": "codec",
    "encode_as": "codec",
    "reversed_xor": "codec",
    "estimate_delta": "codec",
    "estimate_whole": "codec",
    "sampled": "codec",
    "BytesSource": "decoder",
    "ChunkDecoder": "decoder",
    "Level": "decoder",
    "decode": "decoder",
    "decode_all": "decoder",
    "decode_into": "decoder",
    "stream": "decoder",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
