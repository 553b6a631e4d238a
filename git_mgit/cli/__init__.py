"""`git mgit` command line: one module per subcommand, imported lazily.

Each module in this package defines `add_arguments(parser)` and
`run(args) -> int`; its docstring's first line is the subcommand's help.
Lazy import keeps `git mgit filter-process` start-up fast.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
import threading
from typing import NoReturn

from git_mgit.errors import MgitError
from git_mgit.resources.files import allow_open_files
from git_mgit.resources.malloc import reuse_freed_chunks

# subcommand name -> module under git_mgit.cli
COMMANDS: dict[str, str] = {
    "install": "install",
    "uninstall": "uninstall",
    "track": "track",
    "untrack": "untrack",
    "ls-files": "ls_files",
    "status": "status",
    "du": "du",
    "fsck": "fsck",
    "gc": "gc",
    "repack": "repack",
    "lineage": "lineage",
    "graph": "graph",
    "log": "log",
    "diff": "diff",
    "fetch": "fetch",
    "push": "push",
    "prune": "prune",
    "store": "store",
    "checkout": "checkout",
    "filter-process": "filter_process",
    "clean": "single_shot",
    "smudge": "single_shot",
    "check": "check",
    "migrate": "migrate",
    "merge": "merge",
    "resolve": "resolve",
    "merge-driver": "merge_driver",
    "textconv": "textconv",
    "hook": "hook",
    "test": "test",
    "bisect": "bisect",
    "cascade": "cascade",
    "compress": "compress",
    "query": "query",
    "train": "train",
    "replay": "replay",
    "select": "select",
    "tune": "tune",
}

HELP: dict[str, str] = {
    "install": "configure filters, drivers and hooks (global by default)",
    "uninstall": "remove what install configured",
    "track": "store files matching a pattern as tensor objects",
    "untrack": "stop tracking a pattern",
    "ls-files": "list tracked model files",
    "status": "per tracked file: raw size, stored size, objects, chain depth",
    "du": "storage by model, tensor, codec and delta chain depth over all history",
    "fsck": "verify every object reachable from any manifest",
    "gc": "drop objects that no ref, reflog or index needs",
    "repack": "re-plan delta bases globally: least storage under recreation budgets",
    "lineage": "edit and query the lineage graph (MGit's API: add-node, add-edge, ...)",
    "graph": "show the lineage graph: text tree, or --format dot|mermaid|json|html",
    "log": "the versions of one model, newest first, with their lineage",
    "diff": "tensor-level differences between two model versions",
    "fetch": "fetch lineage notes and the objects of HEAD's (or --recent/--all/--rev) versions",
    "push": "publish model versions and lineage notes to a remote (git push does it too)",
    "prune": "drop local objects a remote holds and no recent checkout needs",
    "store": "which store each remote's tensor objects go to (refs, Git LFS, S3); migrate",
    "checkout": "write model files straight from the object store; finish interrupted checkouts",
    "filter-process": "long-running git filter (protocol v2); git runs it",
    "clean": "single-shot clean filter: file on stdin, manifest on stdout",
    "smudge": "single-shot smudge filter: manifest on stdin, file on stdout",
    "check": "check model files before a commit: tracked, headers, finite values, objects",
    "migrate": "rewrite history from plain blobs or git-lfs into git-mgit (or back)",
    "merge": "git merge, with tensor-level strategies for model files",
    "resolve": "finish a conflicted merge of model files with strategies",
    "merge-driver": "three-way merge of manifests; git runs it",
    "textconv": "print a manifest as a readable tensor listing; git diff runs it",
    "hook": "run one of git-mgit's git hooks",
    "test": "run registered tests over models, record and reuse results",
    "bisect": "find the first model version a test fails on (about log2(n) runs)",
    "cascade": "re-derive every descendant of an updated model, onto a branch",
    "compress": "lossy delta compression against the lineage parent, gated by tests",
    "query": "model queries: select, slice, construct, evaluate ... vary ... keep",
    "train": "train with torchrun; checkpoints are commits on a run branch; resume any of them",
    "replay": "re-run a recorded training run with edited code, in parallel; compare metrics",
    "select": "model selection: configurations hop between data-partition workers (MOP)",
    "tune": "tune training tunables on branches (MLtuner): trials fork, the fastest is kept",
}


# What git runs and waits for before it goes on: a clone's checkout waits for the filter
# process to exit, a push for its pre-push hook. CPython's teardown after their work
# (module and object finalisation, the S3 client's runtime) took 30-45 ms of a 0.5 s clone.
WAITED_ON = frozenset({"filter-process", "hook", "merge-driver", "textconv", "clean", "smudge"})


def _command(argv: list[str]) -> str | None:
    """The subcommand named on the command line, if it is one."""
    command = next((a for a in argv if not a.startswith("-")), None)
    return command if command in COMMANDS else None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The top-level parser: with `command`'s subparser only (its module imported), or with
    every subcommand's, for help. Building all 38 took 30 ms of every process's start (a
    hook's, a filter's), most of it argparse looking for translations of its messages."""
    parser = argparse.ArgumentParser(
        prog="git mgit", description="Model checkpoints as first-class git citizens."
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in [command] if command is not None else COMMANDS:
        p = sub.add_parser(name, help=HELP[name], description=HELP[name])
        if name == command:
            _module(name).add_arguments(p)
    return parser


def _module(name: str):
    return importlib.import_module(f"git_mgit.cli.{COMMANDS[name]}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(_command(argv)).parse_args(argv)
    if args.version:
        from git_mgit import __version__

        print(f"git-mgit {__version__}")
        return 0
    if args.command is None:
        build_parser().print_help()
        return 1
    try:
        return int(_module(args.command).run(args) or 0)
    except MgitError as exc:
        print(f"git-mgit: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        if exc.name != "torch":
            raise
        print(
            f"git-mgit: `git mgit {args.command}` needs PyTorch: pip install 'git-mgit[runtime]'",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        return 130


def entry() -> NoReturn:
    """The `git-mgit` executable: main(), then, for what git waits on, an exit without the
    interpreter's teardown once no thread is at work (nothing of ours is buffered in Python
    by then: files are written through raw descriptors or closed, and stdio is flushed
    here). Anything else, or a thread of its own still running, exits the usual way."""
    allow_open_files()  # a read from many packs holds two descriptors each
    reuse_freed_chunks()  # chunk-sized buffers: their pages faulted in once, not per chunk
    code = main()
    if _command(sys.argv[1:]) in WAITED_ON and _threads_done():
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # git closed its end, or we did
                stream.flush()
        os._exit(code)
    sys.exit(code)


def _threads_done() -> bool:
    """Stop the codec pool's idle workers, if this process started them (after the jobs
    under way); then whether only daemon threads are left."""
    workers = sys.modules.get("git_mgit.codecs.workers")  # not imported for it
    if workers is not None:
        workers.stop()
    others = [t for t in threading.enumerate() if t is not threading.main_thread()]
    return all(t.daemon for t in others)
