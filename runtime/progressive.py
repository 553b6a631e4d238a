"""Progressive evaluation: classify with the top byte planes of the weights, and never guess.

ModelHub (paper 000, section IV-D): read each weight's top planes first
(git_mgit.load(..., planes=k): truncated values with per-element bounds),
push intervals through the network, and accept a prediction when Lemma 4
holds: the lower bound of one class beats the upper bound of every other.
Inputs that cannot be certified go on to more planes, and the rest to the
full-precision model.

Sound against the model's own float32 forward, not only against exact
arithmetic: every affine layer's enclosure (centre/radius form in float64,
y = Wc xc + b ± (|Wc| xr + Wr |xc| + Wr xr + rb)) is widened by a rigorous
bound on the rounding error of any float32 evaluation of that layer,
gamma(n+1) * (|W| |x| + |b|) with gamma(n) = n u / (1 - n u), u = 2^-24 and n
the fan-in (valid for any summation order, with or without FMA), plus the
float64 rounding of the bound computation itself and an underflow term; each
bound is then stepped one float64 outward. ReLU and max pooling are
monotone and exact, average pooling is a positive linear map (widened the
same way). So whatever weights within the bounds the stored model holds,
the float32 forward's logits lie inside the computed intervals, and a
certified class is the one the full model predicts.

Supported: torch.nn.Sequential (nested too) of Linear, Conv1d, Conv2d, ReLU,
MaxPool1d, MaxPool2d, AvgPool2d, Flatten, Dropout and Identity, float32
parameters only; anything else is refused by name.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from git_mgit.console.progress import format_size
from git_mgit.errors import MgitError
from git_mgit.gitcmd import Repo, find_repo
from git_mgit.lineage.api import Lineage
from git_mgit.tensors.multires import Model, load

Box = tuple[Tensor, Tensor]  # (low, high), float64
U32, U64 = 2.0**-24, 2.0**-53
TINY32 = 2.0**-126  # per-operation underflow error, even with denormals flushed to zero
FLOAT32_PLANES = 4
_AFFINE = (nn.Linear, nn.Conv1d, nn.Conv2d)
_MONOTONE = (nn.ReLU, nn.MaxPool1d, nn.MaxPool2d, nn.Flatten, nn.Dropout, nn.Identity)


def gamma(n: int, u: float) -> float:
    """Higham's gamma_n: relative error bound of n floating-point operations with unit roundoff u."""
    return n * u / (1 - n * u)


def _outward(low: Tensor, high: Tensor) -> Box:
    """One float64 step outward: covers the rounding of the operation that made the bounds."""
    return torch.nextafter(low, low.new_tensor(-math.inf)), torch.nextafter(
        high, high.new_tensor(math.inf)
    )


def _centre_radius(box: Box) -> tuple[Tensor, Tensor]:
    """c, r with [c - r, c + r] holding [low, high] despite float64 rounding."""
    low, high = box
    c = (low + high) / 2
    r = torch.maximum(high - c, c - low)
    return c, torch.nextafter(r, r.new_tensor(math.inf))


def _enclose(c: Tensor, r: Tensor, scale: Tensor, n: int) -> Box:
    """[c - R, c + R] for an exact enclosure c ± r of a layer whose float32 evaluation sums n
    terms of total magnitude `scale`: R adds that evaluation's rounding error and the
    float64 rounding in c, r and scale."""
    g32, g64 = gamma(n + 1, U32), gamma(n + 8, U64)
    radius = (r + (g32 + g64) * scale + (n + 2) * TINY32) * (1 + 2 * g64)
    return _outward(c - radius, c + radius)


def _affine(
    op: Callable[[Tensor, Tensor], Tensor], fan_in: int, x: Box, w: Box, b: Box | None
) -> Box:
    """op(x, W) + b over every x, W, b in their boxes, and the float32 rounding of any of them."""
    xc, xr = _centre_radius(x)
    wc, wr = _centre_radius(w)
    c = op(xc, wc)
    r = op(xr, wc.abs()) + op(xc.abs(), wr) + op(xr, wr)
    scale = op(xc.abs() + xr, wc.abs() + wr)
    if b is not None:
        bc, br = _centre_radius(b)
        shape = (1, -1) + (1,) * (c.dim() - 2)  # the bias runs along the channel axis
        c, r = c + bc.view(shape), r + br.view(shape)
        scale = scale + (bc.abs() + br).view(shape)
    return _enclose(c, r, scale, fan_in + (b is not None))


def _avg_pool(layer: nn.AvgPool2d, x: Box) -> Box:
    pool = partial(
        F.avg_pool2d,
        kernel_size=layer.kernel_size,
        stride=layer.stride,
        padding=layer.padding,
        ceil_mode=layer.ceil_mode,
        count_include_pad=layer.count_include_pad,
        divisor_override=layer.divisor_override,
    )
    xc, xr = _centre_radius(x)
    k = layer.kernel_size
    terms = k * k if isinstance(k, int) else math.prod(k)
    return _enclose(pool(xc), pool(xr), pool(xc.abs() + xr), terms + 1)  # sum, then divide


@dataclass(frozen=True)
class _Layer:
    name: str  # qualified, as in the state dict
    module: nn.Module


def layers(module: nn.Module, prefix: str = "") -> Iterator[_Layer]:
    """The leaves of a Sequential in forward order; MgitError names anything unsupported."""
    if isinstance(module, nn.Sequential):
        for name, child in module.named_children():
            yield from layers(child, f"{prefix}{name}.")
        return
    where = prefix.rstrip(".") or "the model"
    if not isinstance(module, _AFFINE + _MONOTONE + (nn.AvgPool2d,)):
        raise MgitError(
            f"progressive evaluation cannot bound {type(module).__name__} ({where}); it takes "
            "nn.Sequential of Linear, Conv1d, Conv2d, ReLU, MaxPool1d/2d, AvgPool2d, Flatten, "
            "Dropout and Identity"
        )
    if isinstance(module, (nn.Conv1d, nn.Conv2d)) and module.padding_mode != "zeros":
        raise MgitError(f"{where}: only zero padding is supported (not {module.padding_mode!r})")
    if isinstance(module, (nn.MaxPool1d, nn.MaxPool2d)) and module.return_indices:
        raise MgitError(f"{where}: max pooling with return_indices is not supported")
    yield _Layer(prefix.rstrip("."), module)


def _weight_box(weights: dict[str, Box], layer: _Layer) -> tuple[Box, Box | None]:
    return weights[f"{layer.name}.weight"], weights.get(f"{layer.name}.bias")


def interval_forward(seq: list[_Layer], weights: dict[str, Box], x: Tensor) -> Box:
    """Bounds on the logits of every float32 forward with weights inside `weights`."""
    box: Box = (x.double(), x.double())
    for layer in seq:
        m = layer.module
        if isinstance(m, nn.Linear):
            box = _affine(F.linear, m.in_features, box, *_weight_box(weights, layer))
        elif isinstance(m, (nn.Conv1d, nn.Conv2d)):
            conv = F.conv1d if isinstance(m, nn.Conv1d) else F.conv2d
            op = partial(
                conv, stride=m.stride, padding=m.padding, dilation=m.dilation, groups=m.groups
            )
            fan_in = m.in_channels // m.groups * math.prod(m.kernel_size)
            box = _affine(op, fan_in, box, *_weight_box(weights, layer))
        elif isinstance(m, nn.AvgPool2d):
            box = _avg_pool(m, box)
        elif isinstance(m, (nn.Dropout, nn.Identity)):
            continue  # identity in eval mode
        else:  # monotone: ReLU, max pooling, Flatten
            box = (m(box[0]), m(box[1]))
    return box


def certify(box: Box) -> tuple[Tensor, Tensor]:
    """(class with the highest lower bound, whether Lemma 4 proves it the arg-max) per input.

    Only finite bounds certify: an infinite or NaN one (a weight that might be
    a NaN, an input that is not finite) leaves the input to the next level.
    """
    low, high = box
    if low.dim() != 2:
        raise MgitError(
            f"the model must end in logits of shape [batch, classes], not {list(low.shape)}"
        )
    top = low.argmax(dim=1)
    others = high.scatter(1, top[:, None], -math.inf)
    beats = low.gather(1, top[:, None]).squeeze(1) > others.max(dim=1).values
    finite = torch.isfinite(low).all(dim=1) & torch.isfinite(high).all(dim=1)
    return top, beats & finite


def _require_ieee_float32(module: nn.Module) -> None:
    """The rounding bound assumes float32 weights computed in IEEE float32 (no TF32, no bf16)."""
    for name, p in module.named_parameters():
        if p.dtype != torch.float32:
            raise MgitError(f"parameter {name} is {p.dtype}: progressive evaluation needs float32")
    modes = [torch.get_float32_matmul_precision() == "highest"] + [
        getattr(getattr(torch.backends.mkldnn, b, None), "fp32_precision", "none")
        in ("none", "ieee")
        for b in ("matmul", "conv")
    ]
    if not all(modes):
        raise MgitError(
            "torch is set to compute float32 in lower precision (TF32 or bf16); "
            "progressive evaluation's bounds need torch.set_float32_matmul_precision('highest')"
        )


def _boxes(model: Model, module: nn.Module, version: str) -> dict[str, Box]:
    out = {}
    for name, p in module.named_parameters():
        t = model.get(name)
        if t is None or t.dtype != "F32" or tuple(t.value.shape) != tuple(p.shape):
            raise MgitError(
                f"{version} has no F32 tensor {name!r} of shape {list(p.shape)}: "
                "is this the model's architecture?"
            )
        out[name] = (torch.from_numpy(t.low), torch.from_numpy(t.high))
    return out


@dataclass(frozen=True)
class Level:
    planes: int | None  # None: every plane, the model's own float32 forward
    inputs: int  # evaluated at this level
    certified: int  # settled at this level
    bytes_read: int


@dataclass
class Report:
    """Predictions, and at how many planes each was settled (0: full precision)."""

    predictions: Tensor  # int64 [N]
    planes_used: Tensor  # int64 [N]
    levels: list[Level] = field(default_factory=list)

    def fraction(self, planes: int) -> float:
        """Share of all inputs certified from exactly this many planes."""
        n = len(self.predictions)
        return float((self.planes_used == planes).sum()) / n if n else 0.0

    def summary(self) -> str:
        n = len(self.predictions)
        lines = []
        for lv in self.levels:
            what = "full precision" if lv.planes is None else f"{lv.planes} plane(s)"
            share = lv.certified / n if n else 0.0
            lines.append(
                f"{what:>15}: {lv.certified} of {lv.inputs} inputs settled ({share:.1%} of all), "
                f"{format_size(lv.bytes_read)} read"
            )
        return "\n".join(lines)


def _certify_with_planes(
    seq: list[_Layer], weights: dict[str, Box], inputs: Tensor, batch_size: int
) -> tuple[Tensor, Tensor]:
    """(predicted class, certified?) per input, from interval forwards in batches."""
    tops, oks = [], []
    for at in range(0, len(inputs), batch_size):
        top, ok = certify(interval_forward(seq, weights, inputs[at : at + batch_size]))
        tops.append(top)
        oks.append(ok)
    return torch.cat(tops), torch.cat(oks)


def evaluate(
    model: nn.Module | Callable[[], nn.Module],
    version: str,
    inputs: Tensor,
    *,
    batch_size: int = 256,
    repo: str | os.PathLike[str] | Repo | None = None,
) -> Report:
    """Classify `inputs` with the stored `version`, reading low planes only where needed.

    `model`: the architecture (a module, or a function that builds one); its
    parameters are replaced by the version's when some inputs need full
    precision. `version`: anything git_mgit.load accepts.
    """
    module = model if isinstance(model, nn.Module) else model()
    module.eval()
    seq = list(layers(module))
    _require_ieee_float32(module)
    if inputs.dtype != torch.float32:
        raise MgitError(f"inputs are {inputs.dtype}; the model computes in float32")
    lin = Lineage(repo if isinstance(repo, Repo) else find_repo(repo))
    vid = lin.resolve(version).id  # every level reads the same version
    n = len(inputs)
    report = Report(torch.full((n,), -1, dtype=torch.int64), torch.zeros(n, dtype=torch.int64))
    pending = torch.arange(n)
    with torch.no_grad():
        for k in range(1, FLOAT32_PLANES):
            if not len(pending):
                break
            stored = load(vid, planes=k, repo=lin.repo)
            top, ok = _certify_with_planes(
                seq, _boxes(stored, module, version), inputs[pending], batch_size
            )
            report.predictions[pending[ok]] = top[ok]
            report.planes_used[pending[ok]] = k
            report.levels.append(Level(k, len(pending), int(ok.sum()), stored.bytes_read))
            pending = pending[~ok]
        if len(pending):
            stored = load(vid, repo=lin.repo)
            module.load_state_dict(
                {name: torch.from_numpy(stored[name].value) for name in module.state_dict()}
            )
            report.predictions[pending] = torch.cat(
                [
                    module(inputs[pending[at : at + batch_size]]).argmax(dim=1)
                    for at in range(0, len(pending), batch_size)
                ]
            )
            report.levels.append(Level(None, len(pending), len(pending), stored.bytes_read))
    return report
