"""One rank of the training-checkpoints bench (issue 28): a GPT-style decoder, checkpointed
every N steps by each way of checkpointing in turn, in the same process.

`python ckpt_worker.py SPEC` (one process) or under torchrun (one per rank).
The spec (JSON) names the model, the loop, the modes and, per mode, a fresh
repository or folder. Every mode trains the same model from the same seed
on random tokens (AdamW, fp32 state; bf16 autocast on a GPU) and
checkpoints at the same steps:

- off: no checkpoint (the baseline);
- sync, background: git-mgit's checkpointer, save() at the steps;
- adaptive: git-mgit's checkpointer deciding by Flor's rule (ckpt.step());
- dcp: torch.distributed.checkpoint.async_save, one pending at a time;
- torch.save: model and optimizer state dicts into one file (rank 0 under DDP).

It measures the loop's time, each checkpoint's stall (device synchronised
before and after, so a GPU copy counts), when each commit finished, the
bytes each wrote, and this rank's peak RSS above what it held before the
mode started. It writes its numbers to OUT/rank-R.json.
"""

from __future__ import annotations

import gc
import json
import math
import os
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """GPT-2's layout: token and position embeddings, pre-norm blocks, a tied output head."""

    def __init__(self, d: int, layers: int, heads: int, vocab: int, ctx: int) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        for name, p in self.named_parameters():
            if p.dim() > 1:
                std = (
                    0.02 / math.sqrt(2 * layers)
                    if name.endswith(("proj.weight", "out.weight"))
                    else 0.02
                )
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.ln(x) @ self.tok.weight.t()


DCP_GROUP: list[dist.ProcessGroup | None] = [None]


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak() -> int:
    with open("/proc/self/status") as f:
        return int(next(line for line in f if line.startswith("VmHWM")).split()[1]) * 1024


def reset_peak() -> None:
    """Start VmHWM again from the current RSS (where the kernel lets us)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass  # the peak then counts from the process's start: an upper bound


def setup() -> tuple[int, int, torch.device]:
    """The process group (`cpu:gloo,cuda:nccl` on a GPU, as `git mgit train` makes it)."""
    if "RANK" not in os.environ:  # one process: a group of one, for DCP and the checkpointer
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1")
        os.environ.setdefault("LOCAL_RANK", "0")
    local = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
        dist.init_process_group("cpu:gloo,cuda:nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    return dist.get_rank(), dist.get_world_size(), device


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def state_bytes(model: nn.Module, opt: torch.optim.Optimizer) -> int:
    tensors = [*model.state_dict().values()]
    tensors += [v for st in opt.state.values() for v in st.values() if torch.is_tensor(v)]
    return sum(t.numel() * t.element_size() for t in tensors)


def pinned_copy(model: nn.Module, opt: torch.optim.Optimizer, device: torch.device) -> float:
    """Seconds to copy this rank's state into pinned host memory allocated beforehand."""
    if device.type != "cuda":
        return 0.0
    tensors = [*model.state_dict().values()]
    tensors += [v for st in opt.state.values() for v in st.values() if torch.is_tensor(v)]
    tensors = [t for t in tensors if t.is_cuda]
    bufs = [torch.empty(t.shape, dtype=t.dtype, pin_memory=True) for t in tensors]
    best = math.inf
    for _ in range(3):
        sync(device)
        began = time.perf_counter()
        for b, t in zip(bufs, tensors, strict=True):
            b.copy_(t, non_blocking=True)
        sync(device)
        best = min(best, time.perf_counter() - began)
    return best


def du(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run_mode(spec: dict, mode: str, rank: int, world: int, device: torch.device) -> dict[str, Any]:
    from git_mgit.runtime.training import open_run

    torch.manual_seed(0)
    cfg = spec["model"]
    model: nn.Module = GPT(**cfg).to(device)
    params = sum(p.numel() for p in model.parameters())
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    gen = torch.Generator().manual_seed(1000 + rank)
    batch, ctx, vocab = spec["batch"], cfg["ctx"], cfg["vocab"]
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=spec["bf16"])

    def train_step() -> float:
        idx = torch.randint(vocab, (batch, ctx + 1), generator=gen).to(device)
        with autocast:
            logits = model(idx[:, :-1])
            loss = F.cross_entropy(logits.float().reshape(-1, vocab), idx[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    for _ in range(spec["warmup"]):
        train_step()
    sync(device)
    raw = state_bytes(model, opt)
    copy_s = pinned_copy(model, opt, device) if mode == "off" else None
    gc.collect()
    reset_peak()
    base = rss()
    ckpt = None
    folder = Path(spec["folders"][mode])
    if mode in ("sync", "background", "adaptive"):
        ckpt = open_run(model, opt, run="bench", repo=folder, mode=mode, max_pending=1)
    stalls: list[float] = []
    issued: list[float] = []
    done_at: list[float] = []
    pending = None
    stored: list[int] = []
    every, steps = spec["every"], spec["steps"]
    began = time.perf_counter()
    for i in range(1, steps + 1):
        train_step()
        if ckpt is not None:
            ckpt.step()
        if mode in ("off", "adaptive") or i % every:
            continue
        sync(device)
        t0 = time.perf_counter()
        if ckpt is not None:
            ckpt.save()
        elif mode == "dcp":
            import torch.distributed.checkpoint as dcp

            if pending is not None:
                pending.result()
            target = folder / f"step-{i}"
            state = {"model": model.state_dict(), "optimizer": opt.state_dict()}
            # its own gloo group: the save's collectives run in a thread beside training's
            pending = dcp.async_save(state, checkpoint_id=str(target), process_group=DCP_GROUP[0])
            pending.add_done_callback(lambda _f: done_at.append(time.perf_counter()))
        elif mode == "torch.save":
            target = folder / f"step-{i}.pt"
            if rank == 0:
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, target)
            done_at.append(time.perf_counter())
        sync(device)
        stalls.append(time.perf_counter() - t0)
        issued.append(t0)
    sync(device)
    loop_s = time.perf_counter() - began
    t0 = time.perf_counter()
    commit_s: list[float] = []
    stats: list[dict] = []
    if ckpt is not None:
        ckpt.close()
        stalls = stalls or list(ckpt.stalls)  # adaptive: the checkpointer's own (host) times
        commit_s = list(ckpt.commit_seconds)
        stats = [vars(s) for s in getattr(ckpt.committer, "history", [])]
        stored = [s["stored"] for s in stats]
    elif pending is not None:
        pending.result()
    drain_s = time.perf_counter() - t0
    if mode in ("dcp", "torch.save"):
        dist.barrier()
        commit_s = [d - s for s, d in zip(issued, done_at, strict=False)]
        if rank == 0:
            stored = [du(p) for p in sorted(folder.iterdir())]
    dist.barrier()
    if rank == 0 and mode != "off":  # measured: make room for the next mode (GBs each)
        shutil.rmtree(folder, ignore_errors=True)
    out = {
        "mode": mode,
        "params": params,
        "raw_bytes": raw,
        "loop_s": loop_s,
        "drain_s": drain_s,
        "stalls_s": stalls,
        "commit_s": commit_s,
        "stored_bytes": stored,
        "writer_stats": stats,
        "checkpoints": len(stalls),
        "rss_base": base,
        "rss_peak": peak(),
        "pinned_copy_s": copy_s,
    }
    dist.barrier()
    return out


def throughput(spec: dict, rank: int) -> list[dict[str, Any]]:
    """GB/s of git-mgit's object writer on 1 and 2 cores: a trained state, fresh repositories."""
    from git_mgit import config
    from git_mgit.gitcmd import find_repo
    from git_mgit.resources import cores
    from git_mgit.runtime.training.objects import Job, ObjectWriter

    torch.manual_seed(0)
    cfg = spec["throughput_model"]
    model = GPT(**cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    gen = torch.Generator().manual_seed(7)
    for _ in range(3):
        idx = torch.randint(cfg["vocab"], (2, 65), generator=gen)
        F.cross_entropy(model(idx[:, :-1]).flatten(0, 1), idx[:, 1:].flatten()).backward()
        opt.step()
        opt.zero_grad()
    tensors = [*model.state_dict().values()]
    tensors += [v for st in opt.state.values() for v in st.values() if v.dim()]
    chunk = 64 << 20
    jobs = []
    for k, t in enumerate(tensors):
        view = memoryview(t.contiguous().view(-1).view(torch.uint8).numpy()).cast("B")
        jobs += [
            Job(("f", f"t{k}", i), view[lo : lo + chunk], "F32")
            for i, lo in enumerate(range(0, len(view), chunk))
        ]
    out = []
    for threads in spec["throughput_cores"]:
        repo = find_repo(Path(spec["throughput_repos"][str(threads)]))
        writer = ObjectWriter(repo, config.load(repo), encoders=threads)
        writer.wait_ready()
        before = cores.limit(threads)
        wall, cpu = time.perf_counter(), time.process_time()
        written = writer.write(jobs, threads)
        wall = time.perf_counter() - wall
        cpu = time.process_time() - cpu + written.cpu_s  # this process's and its encoders'
        cores.limit(before)
        writer.close()
        out.append(
            {
                "cores": threads,
                "raw": written.raw,
                "stored": written.stored,
                "wall_s": wall,
                "cpu_s": cpu,
            }
        )
    return out


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    rank, world, device = setup()
    DCP_GROUP[0] = dist.new_group(backend="gloo")
    torch.set_num_threads(spec["threads"])
    results = {"rank": rank, "world": world, "device": str(device), "modes": []}
    if device.type == "cuda":
        results["gpu"] = torch.cuda.get_device_name(device)
    out = Path(spec["out"], f"rank-{rank}.json")
    began = time.perf_counter()
    for mode in spec["modes"]:
        print(
            f"[rank {rank} {time.perf_counter() - began:6.1f}s] {mode}", file=sys.stderr, flush=True
        )
        results["modes"].append(run_mode(spec, mode, rank, world, device))
        out.write_text(json.dumps(results, indent=1))  # so far: what a timeout leaves
        gc.collect()  # the mode's model, optimizer and checkpointer, before the next one
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if rank == 0 and spec.get("throughput_cores"):
        results["throughput"] = throughput(spec, rank)
    out.write_text(json.dumps(results, indent=1))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
