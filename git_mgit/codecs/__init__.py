"""Chunk codecs: `raw`, `planes` and the `xor`/`sub` deltas (see codec.py).

The implementation is imported on first attribute access (PEP 562): it needs
numpy and zstandard, whose import would double the filter process's start-up
time for git commands that never encode or decode a chunk.
"""

from __future__ import annotations

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    return getattr(importlib.import_module("git_mgit.codecs.codec"), name)
