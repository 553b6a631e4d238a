"""Copying checkpoint tensors off the device: the only part of a checkpoint the loop waits for.

On a GPU the copies go into pinned (page-locked) host buffers with
non_blocking=True, queued on the current stream (GeePS's staging memory).
Stream order makes that safe without a host synchronisation: the next
optimizer step, queued behind the copies on the same stream, cannot
overwrite a parameter before its copy is done. The background writer waits
on a CUDA event recorded after the copies before it reads a byte (`ready`).
Pinned buffers are expensive to allocate, so a pool reuses them across
checkpoints; it never holds more sets than checkpoints may be pending.

On the CPU a copy is a plain clone: the loop pays one memcpy.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

Tensors = dict[str, torch.Tensor]
_Key = tuple[str, tuple[int, ...], torch.dtype]


@dataclass
class Staged:
    """Host copies of one checkpoint's tensors, valid once ready() returns."""

    tensors: Tensors
    event: torch.cuda.Event | None = None
    pinned: list[torch.Tensor] = field(default_factory=list)  # pool buffers to give back

    def ready(self) -> None:
        if self.event is not None:
            self.event.synchronize()


class Stager:
    """Copies tensors to host memory; reuses pinned buffers handed back with release()."""

    def __init__(self) -> None:
        self._free: dict[_Key, list[torch.Tensor]] = {}
        self._lock = threading.Lock()  # the writer thread gives buffers back

    def copy(self, tensors: Mapping[str, torch.Tensor], copy: bool = True) -> Staged:
        """Host copies of `tensors`; with copy=False host tensors are taken as they are
        (they are copies already) and only device tensors are copied."""
        out: Tensors = {}
        pinned: list[torch.Tensor] = []
        on_gpu = False
        for name, t in tensors.items():
            t = t.detach()
            if t.device.type == "cuda":
                buf = self._pinned(name, t)
                buf.copy_(t, non_blocking=True)
                pinned.append(buf)
                out[name] = buf
                on_gpu = True
            elif t.device.type == "cpu":
                out[name] = t.clone() if copy else t
            else:
                out[name] = t.to("cpu")
        event = None
        if on_gpu:
            event = torch.cuda.Event()
            event.record()
        return Staged(out, event, pinned)

    def _pinned(self, name: str, t: torch.Tensor) -> torch.Tensor:
        with self._lock:
            free = self._free.get((name, tuple(t.shape), t.dtype))
            if free:
                return free.pop()
        return torch.empty(t.shape, dtype=t.dtype, pin_memory=True)

    def release(self, staged: Staged) -> None:
        """The writer is done with these buffers: keep the pinned ones for the next checkpoint."""
        names = {id(t): n for n, t in staged.tensors.items()}
        with self._lock:
            for buf in staged.pinned:
                key = (names[id(buf)], tuple(buf.shape), buf.dtype)
                self._free.setdefault(key, []).append(buf)
        staged.pinned.clear()
