"""Edit and query the lineage graph: MGit's API, with the same names.

git mgit lineage add-node HEAD:models/base.safetensors --name base --type bert
git mgit lineage add-edge base models/sentiment.safetensors --function train:finetune
git mgit lineage traverse bfs base
"""

from __future__ import annotations

import argparse
import importlib
import json

from git_mgit.lineage.api import Lineage
from git_mgit.lineage.graph import PROVENANCE, VERSION
from git_mgit.lineage.traversal import TRAVERSALS

_VERBS = {
    "add-node": "name a model version (and record it in the graph)",
    "remove-node": "hide a version from the graph (--subtree: and all derived from it)",
    "add-edge": "record a provenance edge: CHILD was derived from PARENT",
    "remove-edge": "remove a provenance edge",
    "add-version-edge": "record that NEW replaces OLD (e.g. at another path)",
    "remove-version-edge": "remove an explicit version edge",
    "register-creation-function": "record module:callable as how MODEL is created",
    "register-test-function": "register a test (module:callable) for models or types",
    "deregister-test-function": "remove a registered test",
    "get-next-version": "print the version that replaced VERSION",
    "traverse": "print versions in a traversal order from START",
    "infer": "propose provenance edges from tensor similarity (--apply writes them)",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb, help_ in _VERBS.items():
        p = verbs.add_parser(verb, help=help_, description=help_)
        p.add_argument("--json", action="store_true", help="machine-readable output")
        _ARGS[verb](p)
        # MGit's own spelling works too: add_node, get_next_version, ...
        if "-" in verb:
            alias = verbs.add_parser(verb.replace("-", "_"), help=argparse.SUPPRESS)
            alias.add_argument("--json", action="store_true")
            _ARGS[verb](alias)
            alias.set_defaults(verb=verb)


def _node_args(p: argparse.ArgumentParser) -> None:
    # dest "target": `args.version` is the top-level --version flag
    p.add_argument("target", metavar="VERSION", help="REV:PATH, a name, a model, a path or an id")
    p.add_argument("--name", help="a unique name for this version")
    p.add_argument("--type", help="the model type (tests and version edges use it)")


def _remove_node_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", metavar="VERSION")
    p.add_argument("--subtree", action="store_true", help="also remove every derived version")


def _edge_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("parent")
    p.add_argument("child")


def _add_edge_args(p: argparse.ArgumentParser) -> None:
    _edge_args(p)
    p.add_argument("--function", help="the creating function, module:callable")
    p.add_argument("--code", help="the code commit that ran it (default: HEAD)")


def _creation_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="a model name from mgit.toml (or a version to declare)")
    p.add_argument("function", help="module:callable")


def _test_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")
    p.add_argument("function", help="module:callable returning a dict of metrics")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--models", help="regular expression over model names")
    group.add_argument("--types", help="regular expression over model types")
    p.add_argument("--pass", dest="condition", help="e.g. 'accuracy >= 0.9 and loss < 1'")


def _deregister_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")


def _next_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", metavar="VERSION")


def _traverse_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("order", choices=list(TRAVERSALS))
    p.add_argument("start")
    p.add_argument("--edges", choices=["all", PROVENANCE, VERSION], help="edge kinds to follow")


_ARGS = {
    "add-node": _node_args,
    "remove-node": _remove_node_args,
    "add-edge": _add_edge_args,
    "remove-edge": _edge_args,
    "add-version-edge": _edge_args,
    "remove-version-edge": _edge_args,
    "register-creation-function": _creation_args,
    "register-test-function": _test_args,
    "deregister-test-function": _deregister_args,
    "get-next-version": _next_args,
    "traverse": _traverse_args,
    "infer": lambda p: _infer().add_arguments(p),
}


def _infer():
    """The inference command's module (imported only when asked for: it reads tensors)."""
    return importlib.import_module("git_mgit.cli.lineage_infer")


def _describe(lin: Lineage, oid: str) -> dict:
    node = lin.graph.nodes.get(oid)
    if node is None:
        return {"id": oid}
    described = {"id": oid, "label": node.label, "path": node.path, "name": node.name}
    return {**described, "details": node.details} if node.details else described


def _print(args: argparse.Namespace, payload: object, text: str) -> None:
    print(json.dumps(payload, indent=2) if args.json else text)


def run(args: argparse.Namespace) -> int:
    if args.verb == "infer":
        return _infer().run(args)
    lin = Lineage()
    verb = args.verb
    if verb == "add-node":
        v = lin.add_node(args.target, args.name, args.type)
        _print(args, _describe(lin, v.id), f"{lin.graph.nodes[v.id].label} {v.id[:10]}")
    elif verb == "remove-node":
        gone = lin.remove_node(args.target, args.subtree)
        _print(args, gone, f"removed {len(gone)} version(s) from the lineage graph")
    elif verb == "add-edge":
        e = lin.add_edge(args.parent, args.child, args.function, args.code)
        _print(args, {"parent": e.parent, "child": e.child, **e.info}, _edge_text(lin, e))
    elif verb in ("remove-edge", "remove-version-edge"):
        kind = PROVENANCE if verb == "remove-edge" else VERSION
        lin.remove_edge(args.parent, args.child, kind)
        _print(args, {"removed": kind}, f"removed {kind} edge {args.parent} -> {args.child}")
    elif verb == "add-version-edge":
        e = lin.add_version_edge(args.parent, args.child)
        _print(args, {"parent": e.parent, "child": e.child}, _edge_text(lin, e))
    elif verb == "register-creation-function":
        lin.register_creation_function(args.model, args.function)
        _print(args, {"model": args.model, "creation": args.function}, f"{lin.config.path} updated")
    elif verb == "register-test-function":
        lin.register_test_function(
            args.name, args.function, args.models, args.types, args.condition
        )
        _print(args, {"test": args.name}, f"{lin.config.path} updated")
    elif verb == "deregister-test-function":
        lin.deregister_test_function(args.name)
        _print(args, {"test": args.name}, f"{lin.config.path} updated")
    elif verb == "get-next-version":
        nxt = lin.get_next_version(args.target)
        if nxt is None:
            _print(args, None, "no next version")
            return 1
        _print(args, _describe(lin, nxt), f"{lin.graph.nodes[nxt].label} {nxt}")
    elif verb == "traverse":
        kinds = None if args.edges in (None, "all") else (args.edges,)
        if args.order in ("versions", "provenance") and kinds is not None:
            kinds = None  # these orders fix their own edge kind
        ids = list(lin.traverse(args.order, args.start, kinds))
        _print(
            args,
            [_describe(lin, o) for o in ids],
            "\n".join(f"{o[:10]}  {lin.graph.nodes[o].label}" for o in ids),
        )
    return 0


def _edge_text(lin: Lineage, e) -> str:
    g = lin.graph
    extra = f" ({e.info['function']})" if e.info.get("function") else ""
    return f"{e.kind}: {g.nodes[e.parent].label} -> {g.nodes[e.child].label}{extra}"
