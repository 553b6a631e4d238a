"""The body of `scripts/demo`: git-mgit end to end on a small PyTorch model.

Every git command is echoed with its output, so the log reads as a tutorial of
the workflow; every checkpoint is verified byte for byte in a fresh clone, and
the exit status is non-zero when any check fails. All work happens under a temporary directory that
also holds HOME and the global git config, so the user's own git setup is
never read or written.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch
from demo_query import queries
from demo_runtime import runtime
from demo_shell import DemoFailure, Shell, heading, note
from safetensors.torch import load_file, save_file
from torch import nn

CHECKPOINT = "model.safetensors"
FEATURES, HIDDEN, CLASSES = 32, 1024, 8
TRAIN_SAMPLES, TEST_SAMPLES, BATCH = 8192, 2048, 128
SEED = 0


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def mib(n: int) -> str:
    return f"{n / (1 << 20):.2f} MiB"


def git_bytes(sh: Shell, repo: str) -> int:
    """Bytes under the repository's objects directory, loose plus packed, as git counts them."""
    out = sh.run("git", "count-objects", "-v", cwd=repo, show=False)
    counts = dict(line.split(": ", 1) for line in out.splitlines())
    return (int(counts["size"]) + int(counts["size-pack"])) * 1024


def blobs(seed: int) -> tuple[torch.Tensor, ...]:
    """A fixed-seed classification task: noisy points around one centre per class."""
    gen = torch.Generator().manual_seed(seed)
    centres = torch.randn(CLASSES, FEATURES, generator=gen)

    def sample(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        labels = torch.randint(CLASSES, (n,), generator=gen)
        return centres[labels] + 1.5 * torch.randn(n, FEATURES, generator=gen), labels

    return *sample(TRAIN_SAMPLES), *sample(TEST_SAMPLES)


def mlp() -> nn.Module:
    return nn.Sequential(
        nn.Linear(FEATURES, HIDDEN),
        nn.ReLU(),
        nn.Linear(HIDDEN, HIDDEN),
        nn.ReLU(),
        nn.Linear(HIDDEN, CLASSES),
    )


def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()


def setup(sh: Shell) -> None:
    heading("1. A bare repository as the remote, a working repository, git-mgit set up")
    sh.run("git", "config", "--global", "user.name", "git-mgit demo")
    sh.run("git", "config", "--global", "user.email", "demo@example.com")
    sh.run("git", "init", "--quiet", "--bare", "--initial-branch=main", "remote.git")
    sh.run("git", "init", "--quiet", "--initial-branch=main", "work")
    sh.run("git", "remote", "add", "origin", str(sh.root / "remote.git"), cwd="work")
    note("once per user (here: the demo's own global config), plus this repository's hooks")
    sh.run("git", "mgit", "install", cwd="work")
    sh.run("git", "mgit", "track", "*.safetensors", cwd="work")
    sh.run("cat", ".gitattributes", cwd="work")
    sh.run("git", "add", ".gitattributes", cwd="work")
    sh.run("git", "commit", "--quiet", "-m", "Track safetensors with git-mgit", cwd="work")


def train(sh: Shell, epochs: int) -> tuple[list[Path], float]:
    """Train, committing each epoch's checkpoint; return a kept copy of each (to check the
    clone against) and the final test accuracy."""
    heading(f"2. Train a small MLP on CPU, one commit per epoch ({epochs} epochs)")
    torch.manual_seed(SEED)
    x, y, x_test, y_test = blobs(SEED)
    model = mlp()
    params = sum(p.numel() for p in model.parameters())
    note(
        f"MLP {FEATURES}-{HIDDEN}-{HIDDEN}-{CLASSES}, {params:,} fp32 parameters; task: {CLASSES} Gaussian blobs"
    )
    note(f'after each epoch: save_file(model.state_dict(), "{CHECKPOINT}"), git add, git commit')
    optimiser = torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    order = torch.Generator().manual_seed(SEED)
    (sh.root / "originals").mkdir()
    originals = []
    for epoch in range(1, epochs + 1):
        total = 0.0
        for idx in torch.randperm(len(x), generator=order).split(BATCH):
            optimiser.zero_grad()
            loss = loss_fn(model(x[idx]), y[idx])
            loss.backward()
            optimiser.step()
            total += loss.item() * len(idx)
        loss_avg, acc = total / len(x), accuracy(model, x_test, y_test)
        path = sh.root / "work" / CHECKPOINT
        save_file(model.state_dict(), path)
        originals.append(sh.root / "originals" / f"epoch-{epoch}.safetensors")
        shutil.copyfile(path, originals[-1])
        print(
            f"\n# epoch {epoch}: train loss {loss_avg:.4f}, test accuracy {acc:.1%}; "
            f"{CHECKPOINT} is {mib(path.stat().st_size)}, sha256 {sha256(path)[:16]}..."
        )
        if epoch == 2:
            note("git diff lists tensors (dtype, shape, content hash) through git-mgit's textconv")
            sh.run("git", "diff", CHECKPOINT, cwd="work")
        sh.run("git", "add", CHECKPOINT, cwd="work")
        sh.run("git", "commit", "-m", f"epoch {epoch}: loss={loss_avg:.4f}", cwd="work")
        if epoch == 1:
            note("what git itself stores for the file: a small text manifest")
            manifest = sh.run("git", "cat-file", "-p", f"HEAD:{CHECKPOINT}", cwd="work", show=False)
            for line in manifest.splitlines():
                print(f"    {line[:110]}{'...' if len(line) > 110 else ''}")
    print()
    sh.run("git", "log", "--oneline", cwd="work")
    return originals, accuracy(model, x_test, y_test)


def push(sh: Shell) -> None:
    heading("3. Push: plain git, the tensor objects travel with the branch")
    sh.run("git", "push", "origin", "main", cwd="work")
    note(
        "the remote's refs: the branch, plus one version ref per checkpoint: the newest whole, "
        "older ones as `git add` stored them, whole or as deltas of the one before "
        "(refs/mgit/v/<version>.<base>)"
    )
    refs = sh.run("git", "ls-remote", "origin", cwd="work")
    if not any("\trefs/mgit/v/" in line for line in refs.splitlines()):
        raise DemoFailure("the remote has no refs/mgit/v/* version refs after the push")


def clone_and_verify(sh: Shell, originals: list[Path], accuracy_final: float) -> None:
    heading("4. Clone with plain git and verify every epoch byte for byte")
    sh.run("git", "clone", str(sh.root / "remote.git"), "clone")
    commits = sh.run("git", "rev-list", "--reverse", "main", "--", CHECKPOINT, cwd="clone").split()
    if len(commits) != len(originals):
        raise DemoFailure(
            f"the clone has {len(commits)} checkpoint commits, expected {len(originals)}"
        )
    path = sh.root / "clone" / CHECKPOINT
    bad = []
    for epoch, (commit, original) in enumerate(zip(commits, originals, strict=True), start=1):
        sh.run("git", "checkout", "--quiet", commit, cwd="clone")
        got, want = sha256(path), sha256(original)
        print(
            f"    epoch {epoch}: sha256 {got[:16]}... {'identical' if got == want else 'DIFFERS'}"
        )
        if got != want:
            bad.append(f"epoch {epoch} (commit {commit[:12]}): sha256 {got}, expected {want}")
    sh.run("git", "checkout", "--quiet", "main", cwd="clone")
    if bad:
        raise DemoFailure("checkpoints differ in the clone: " + "; ".join(bad))
    if changed := sh.run("git", "status", "--porcelain", cwd="clone"):
        raise DemoFailure(f"git status in the clone is not clean after checkout:\n{changed}")
    model = mlp()
    model.load_state_dict(load_file(path))
    *_, x_test, y_test = blobs(SEED)
    cloned = accuracy(model, x_test, y_test)
    note(f"the clone's {CHECKPOINT} loads into a fresh MLP: test accuracy {cloned:.1%}")
    if cloned != accuracy_final:
        raise DemoFailure(
            f"the cloned model scores {cloned:.4f}, the trained one {accuracy_final:.4f}"
        )
    sh.run("git", "mgit", "fsck", cwd="clone")


def lfs_bytes(sh: Shell, originals: list[Path]) -> int | None:
    """What git-lfs stores for the same history, measured in a throwaway repository."""
    if shutil.which("git-lfs") is None:
        return None
    note(f"git-lfs is installed: measuring it on the same {len(originals)} checkpoints in lfs/")
    sh.run("git", "init", "--quiet", "--initial-branch=main", "lfs", show=False)
    sh.run("git", "lfs", "install", "--local", cwd="lfs", show=False)
    sh.run("git", "lfs", "track", "*.safetensors", cwd="lfs", show=False)
    for n, original in enumerate(originals, start=1):
        shutil.copyfile(original, sh.root / "lfs" / CHECKPOINT)
        sh.run("git", "add", ".gitattributes", CHECKPOINT, cwd="lfs", show=False)
        sh.run("git", "commit", "--quiet", "-m", f"epoch {n}", cwd="lfs", show=False)
    lfs_store = sh.root / "lfs" / ".git" / "lfs" / "objects"
    stored = sum(p.stat().st_size for p in lfs_store.rglob("*") if p.is_file())
    return stored + git_bytes(sh, "lfs")


def summary(sh: Shell, originals: list[Path]) -> None:
    heading("5. What it cost")
    note(
        "the push sent the older versions as `git add` stored them and the newest whole; the "
        "delta `git add` wrote for the newest is superseded here: gc reclaims it"
    )
    sh.run("git", "mgit", "gc", "--prune=now", cwd="work")
    note("per file: raw size, stored size, objects, delta chain depth; first the current version")
    sh.run("git", "mgit", "status", cwd="work")
    first = sh.run("git", "rev-list", "--reverse", "main", "--", CHECKPOINT, cwd="work", show=False)
    note("then epoch 1: the oldest version, whole (each chain starts whole)")
    sh.run("git", "mgit", "status", "--rev", first.split()[0][:12], cwd="work")
    raw = sum(p.stat().st_size for p in originals)
    stored = git_bytes(sh, "work")
    remote = git_bytes(sh, "remote.git")
    measured = lfs_bytes(sh, originals)
    rows = [
        (f"raw checkpoints ({len(originals)} versions)", raw),
        ("git-mgit: working repository .git/objects", stored),
        ("git-mgit: remote (bare) repository .git/objects", remote),
        ("git-lfs: every version whole (sum of raw sizes)", raw),
    ]
    if measured is not None:
        rows.append(("git-lfs: measured (.git/lfs/objects + .git/objects)", measured))
    note(".git/objects sizes are size + size-pack from `git count-objects -v`")
    print(f"  {'':<54} {'size':>11}  {'/ git-mgit':>10}")
    for label, size in rows:
        print(f"  {label:<54} {mib(size):>11}  {size / stored:9.2f}x")
    lfs = measured or raw
    print(
        f"\n  git-mgit stores the {len(originals)} checkpoints in {stored / raw:.0%} of their raw size;"
        f" git-lfs would need {lfs / stored:.2f}x what git-mgit stores."
    )


DERIVE_SCRIPT = """\
\"\"\"Derive two models from the demo's trained MLP, committing each with its lineage.\"\"\"
import sys

import torch
from safetensors.torch import load_file

from git_mgit.lineage import commit_model

base = load_file("model.safetensors")
# fine-tune: a new task for the head; the first layer stays frozen
gen = torch.Generator().manual_seed(1)
tuned = {k: v.clone() for k, v in base.items()}
for name in ("2.weight", "2.bias", "4.weight", "4.bias"):
    tuned[name] += 1e-3 * torch.randn(tuned[name].shape, generator=gen)
commit_model(tuned, "finetuned.safetensors", message="Fine-tune the head",
             parents=["model.safetensors"], function="derive:finetune", name="finetuned")
# prune: zero the half of each weight matrix with the smallest magnitude
pruned = {k: v.clone() for k, v in tuned.items()}
for name, t in pruned.items():
    if t.dim() == 2:
        t[t.abs() < t.abs().median()] = 0
commit_model(pruned, "pruned.safetensors", message="Prune 50%",
             parents=["finetuned"], function="derive:prune", name="pruned-50")
"""


def lineage(sh: Shell) -> None:
    heading("6. Lineage: derive models in code, then look at the graph")
    note("name the last training checkpoint: a version of model.safetensors")
    sh.run(
        "git",
        "mgit",
        "lineage",
        "add-node",
        "HEAD:model.safetensors",
        "--name",
        "trained",
        cwd="work",
    )
    (sh.root / "work" / "derive.py").write_text(DERIVE_SCRIPT)
    sh.run("git", "add", "derive.py", cwd="work")
    sh.run("git", "commit", "--quiet", "-m", "Add derive.py", cwd="work")
    note(
        "derive.py saves state dicts with git_mgit.lineage.commit_model: one pass, one commit each"
    )
    sh.run(sys.executable, "derive.py", cwd="work")
    sh.run("git", "log", "--oneline", "-3", cwd="work")
    note("the lineage graph: version edges from history, provenance edges from the notes")
    sh.run("git", "mgit", "graph", cwd="work")
    sh.run("git", "mgit", "diff", "trained", "pruned-50", cwd="work")
    sh.run("git", "mgit", "graph", "--format", "html", "-o", "lineage.html", cwd="work")
    sh.run("git", "push", "--quiet", "origin", "main", cwd="work")
    note("the notes travelled with the push: a fresh clone shows the same graph")
    sh.run("git", "clone", "--quiet", str(sh.root / "remote.git"), "clone2")
    sh.run("git", "mgit", "fetch", cwd="clone2", show=False)
    mine = sh.run("git", "mgit", "graph", "--format", "json", "--no-sizes", cwd="work", show=False)
    theirs = sh.run(
        "git", "mgit", "graph", "--format", "json", "--no-sizes", cwd="clone2", show=False
    )
    if mine != theirs:
        raise DemoFailure("the clone's lineage graph differs from the original's")
    sh.run("git", "mgit", "log", "pruned-50", cwd="clone2")
    note(
        "lineage.html is one self-contained file to open in a browser (scripts/demo --keep keeps it)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/demo",
        description="Train a small PyTorch model, commit a checkpoint per epoch with git-mgit, "
        "push to a local bare repository, clone it and verify every checkpoint byte for byte.",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument("--epochs", type=int, default=5, help="training epochs (default 5)")
    args = parser.parse_args(argv)
    if args.epochs < 1:
        parser.error("--epochs must be at least 1")
    # Line-buffered, so the log interleaves in order with stderr and shows live under tee.
    sys.stdout.reconfigure(line_buffering=True)
    if shutil.which("git-mgit") is None:
        print("demo: git-mgit is not on PATH; run scripts/demo, which installs it", file=sys.stderr)
        return 1
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="mgit-demo-"))
    print(f"demo: working in {root} (HOME and the global git config live there too)")
    sh = Shell(root)
    try:
        setup(sh)
        originals, accuracy_final = train(sh, args.epochs)
        push(sh)
        clone_and_verify(sh, originals, accuracy_final)
        summary(sh, originals)
        lineage(sh)
        runtime(sh)
        queries(sh)
    except DemoFailure as exc:
        print(f"\ndemo FAILED: {exc}\ndemo: left {root} in place to inspect", file=sys.stderr)
        return 1
    print(f"\ndemo: all checks passed in {time.monotonic() - started:.0f} s")
    if args.keep:
        print(f"demo: kept {root}")
    else:
        shutil.rmtree(root)
        print(f"demo: removed {root} (use --keep to keep it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
