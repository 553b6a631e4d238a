"""Copying this rank's share of a checkpoint off the device: the only part the loop waits for.

A rank stages only the bytes it writes (its own rows, its share of the
replicated state) into a host buffer, an *arena*, that was allocated ahead:
pinned (page-locked, registered with CUDA) memory when the state is on a GPU, so copies run at
the link's speed with non_blocking=True, queued on the current stream; plain
memory with its pages already touched on the CPU, so a copy is one memcpy
without page faults. Allocating pinned memory costs far more than copying
into it (1.47 s against 0.044 s for 2.4 GB on an H200), so arenas are made
in a background thread as soon as the size is known (prepare()) and reused:
there are as many as checkpoints may be pending (the writer's slots), and
none is ever made or freed while training runs at steady state. An arena
is a memfd where the system allows (sharedmem.py), so the rank's encoder
processes read the staged bytes in place.

Stream order makes a GPU copy safe without a host synchronisation: the next
optimizer step, queued behind the copies, cannot overwrite a parameter
before its copy is done. The writer waits on an event recorded after the
copies before it reads a byte (Staged.ready()).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import torch

from git_mgit.runtime.training import sharedmem
from git_mgit.runtime.training.sharedmem import SharedBuffer, Where

ALIGN = 64  # region offsets in an arena: cache lines, and every element width
_REGISTERED: list = []  # Arenas  # host memory registered with CUDA: kept, never freed


@dataclass(frozen=True)
class Region:
    """Bytes [lo, hi) of this rank's local tensor of `entry`, at `offset` in an arena."""

    entry: str
    lo: int
    hi: int
    offset: int


def regions(ranges: Iterable[tuple[str, int, int]]) -> tuple[list[Region], int]:
    """Arena places for byte ranges (entry, lo, hi), touching ranges merged; and the arena size."""
    merged: list[list] = []
    for entry, lo, hi in sorted(ranges):
        if merged and merged[-1][0] == entry and merged[-1][2] >= lo:
            merged[-1][2] = max(merged[-1][2], hi)
        else:
            merged.append([entry, lo, hi])
    out, at = [], 0
    for entry, lo, hi in merged:
        out.append(Region(entry, lo, hi, at))
        at += -(-(hi - lo) // ALIGN) * ALIGN
    return out, at


@dataclass(eq=False)
class Arena:
    """Host memory for one checkpoint's staged bytes."""

    tensor: torch.Tensor  # uint8
    shared: SharedBuffer | None = None  # what the tensor's memory is, when encoders can map it

    @property
    def nbytes(self) -> int:
        return self.tensor.numel()


@dataclass
class Staged:
    """One checkpoint's staged bytes, valid once ready() returns."""

    arena: Arena
    regions: list[Region]
    event: torch.cuda.Event | None = None
    _index: dict[str, list[Region]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for r in self.regions:
            self._index.setdefault(r.entry, []).append(r)

    def ready(self) -> None:
        if self.event is not None:
            self.event.synchronize()

    def offset(self, entry: str, lo: int, hi: int) -> int:
        """Where bytes [lo, hi) of this rank's local tensor of `entry` are in the arena."""
        for r in self._index.get(entry, ()):
            if r.lo <= lo and hi <= r.hi:
                return r.offset + lo - r.lo
        raise KeyError(f"{entry} bytes {lo}:{hi} were not staged")

    def view(self, entry: str, lo: int, hi: int) -> memoryview:
        """Bytes [lo, hi) of this rank's local tensor of `entry`, as staged."""
        start = self.offset(entry, lo, hi)
        return memoryview(self.arena.tensor.numpy()).cast("B")[start : start + hi - lo]

    def place(self, entry: str, lo: int, hi: int) -> tuple[Where, int] | None:
        """Where another process finds those bytes (None: the arena is not shared)."""
        shared = self.arena.shared
        return None if shared is None else (shared.where, self.offset(entry, lo, hi))

    @property
    def nbytes(self) -> int:
        return sum(r.hi - r.lo for r in self.regions)


def _bytes(t: torch.Tensor) -> torch.Tensor:
    """A tensor's bytes as a flat uint8 tensor on its device (a copy only if not contiguous)."""
    t = t.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    return t.reshape(-1).view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8)


class Stager:
    """Arenas allocated ahead (in a background thread), reused across checkpoints."""

    def __init__(self, pinned: bool, sets: int = 1) -> None:
        self.pinned, self.sets = pinned, sets
        self._free: list[Arena] = []
        self._size = 0
        self._lock = threading.Condition()
        self._making: threading.Thread | None = None

    def prepare(self, nbytes: int) -> None:
        """Make sure `sets` arenas of at least `nbytes` will exist; allocate them in the background."""
        with self._lock:
            if nbytes <= self._size:
                return
            self._size = nbytes
            self._free = []  # too small: replaced (any out now are dropped when released)
            self._making = threading.Thread(
                target=self._make, args=(nbytes, self.sets), name="git-mgit-arena", daemon=True
            )
            self._making.start()

    def ready(self) -> bool:
        """Whether a checkpoint now finds an arena made, rather than waiting for one (a
        failed allocation counts as ready: the checkpoint then tries again, and says why)."""
        with self._lock:
            return bool(self._free) or self._making is None or not self._making.is_alive()

    def _make(self, nbytes: int, count: int) -> None:
        for _ in range(count):
            arena = self._allocate(nbytes)
            with self._lock:
                if nbytes == self._size:
                    self._free.append(arena)
                    self._lock.notify_all()

    def _allocate(self, nbytes: int) -> Arena:
        shared = sharedmem.make(nbytes)  # its pages are resident (and zero) already
        if shared is not None:
            tensor = torch.frombuffer(shared.map, dtype=torch.uint8)
        elif self.pinned:
            tensor = torch.empty(max(nbytes, 1), dtype=torch.uint8)
        else:
            tensor = torch.zeros(max(nbytes, 1), dtype=torch.uint8)  # zeros: pages touched now
        if not self.pinned:
            return Arena(tensor, shared)
        # Registered rather than pin_memory=True: torch's pinned allocator rounds a block up to
        # a power of two (a 4.3 GB arena would pin 8 GB). Registered memory is never freed:
        # the arena lives as long as the process (unregistering under a copy would be worse).
        cudart = torch.cuda.cudart()
        if int(cudart.cudaHostRegister(tensor.data_ptr(), tensor.numel(), 0)) != 0:
            pinned = torch.empty(max(nbytes, 1), dtype=torch.uint8, pin_memory=True)
            return Arena(pinned)
        arena = Arena(tensor, shared)
        _REGISTERED.append(arena)
        return arena

    def _take(self, nbytes: int) -> Arena:
        self.prepare(nbytes)
        with self._lock:
            while not self._free:
                if self._making is None or not self._making.is_alive():
                    self._making = threading.Thread(target=self._make, args=(self._size, 1))
                    self._making.start()
                self._lock.wait()
            return self._free.pop()

    def copy(
        self, tensors: Mapping[str, torch.Tensor], places: list[Region], nbytes: int
    ) -> Staged:
        """Copy each region of this rank's local tensors into an arena (asynchronously from a GPU)."""
        arena = self._take(nbytes)
        on_gpu = False
        flat: dict[str, torch.Tensor] = {}
        for r in places:
            src = flat.get(r.entry)
            if src is None:
                src = flat[r.entry] = _bytes(tensors[r.entry])
            dst = arena.tensor[r.offset : r.offset + r.hi - r.lo]
            on_gpu |= src.device.type == "cuda"
            dst.copy_(src[r.lo : r.hi], non_blocking=src.device.type == "cuda")
        event = None
        if on_gpu:
            event = torch.cuda.Event()
            event.record()
        return Staged(arena, list(places), event)

    def release(self, staged: Staged) -> None:
        """The writer is done with this arena: the next checkpoint copies into it."""
        with self._lock:
            if staged.arena.nbytes >= self._size:
                self._free.append(staged.arena)
                self._lock.notify_all()
