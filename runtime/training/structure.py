"""Nested state (dicts, lists, tuples, numbers, strings, tensors) as JSON plus flat tensors.

An optimizer's or scheduler's state_dict() is such a structure. A checkpoint
stores it in safetensors without pickle: every tensor becomes an entry of
the file, named by its path in the structure (`optimizer/state/fc.weight/exp_avg`,
so `git mgit diff` reads well and deltas pair up by name across checkpoints),
and what is left becomes a JSON *skeleton* in the file's metadata where each
tensor is a reference `{"$tensor": NAME}`. unflatten() inverts it exactly:
tuples stay tuples, integer dict keys stay integers, floats keep every bit
(Python's float repr round-trips; NaN and infinities included).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import torch

from git_mgit.errors import MgitError

Tensors = dict[str, torch.Tensor]
_TENSOR, _TUPLE, _MAP = "$tensor", "$tuple", "$map"


class StructureError(MgitError):
    """A value a checkpoint cannot store without pickle."""


def _escape(key: str) -> str:
    return key.replace("%", "%25").replace("/", "%2F")


def flatten(value: object, prefix: str) -> tuple[Any, Tensors]:
    """(JSON-able skeleton, {name: tensor}) for `value`; tensors are not copied."""
    tensors: Tensors = {}

    def walk(v: object, path: str) -> Any:
        if isinstance(v, torch.Tensor):
            tensors[path] = v
            return {_TENSOR: path}
        if v is None or isinstance(v, bool | int | float | str):
            return v
        if isinstance(v, tuple):
            return {_TUPLE: [walk(x, f"{path}/{i}") for i, x in enumerate(v)]}
        if isinstance(v, list):
            return [walk(x, f"{path}/{i}") for i, x in enumerate(v)]
        if isinstance(v, Mapping):
            if all(isinstance(k, str) and not k.startswith("$") for k in v):
                return {k: walk(x, f"{path}/{_escape(k)}") for k, x in v.items()}
            return {
                _MAP: [[walk(k, f"{path}/key{i}"), walk(x, f"{path}/{_escape(str(k))}")]
                       for i, (k, x) in enumerate(v.items())]
            }  # fmt: skip
        raise StructureError(
            f"cannot store {type(v).__name__} at {path} in a checkpoint: only tensors, numbers, "
            "strings, None, lists, tuples and dicts (no pickle)"
        )

    return walk(value, prefix), tensors


def unflatten(skeleton: Any, tensors: Mapping[str, torch.Tensor]) -> object:
    """The structure flatten() took apart, with the tensors put back."""

    def walk(s: Any) -> object:
        if isinstance(s, list):
            return [walk(x) for x in s]
        if not isinstance(s, dict):
            return s
        if _TENSOR in s:
            name = s[_TENSOR]
            if name not in tensors:
                raise StructureError(f"checkpoint tensor {name!r} is missing")
            return tensors[name]
        if _TUPLE in s:
            return tuple(walk(x) for x in s[_TUPLE])
        if _MAP in s:
            return {walk(k): walk(v) for k, v in s[_MAP]}
        return {k: walk(v) for k, v in s.items()}

    return walk(skeleton)


def dumps(skeleton: Any) -> str:
    """Canonical JSON text (sorted keys): the same state always gives the same bytes."""
    return json.dumps(skeleton, sort_keys=True, separators=(",", ":"))
