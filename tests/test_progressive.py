"""Progressive evaluation never certifies a wrong prediction: a real CNN over its whole test set."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from git_mgit.codecs import codec
from git_mgit.errors import MgitError
from git_mgit.gitcmd import find_repo
from git_mgit.lineage import Lineage, commit_model
from git_mgit.runtime.progressive import evaluate, interval_forward, layers
from git_mgit.tensors.planebounds import bounds, known_bits
from tests.mgitrepo import init_mgit_repo


def digits_cnn() -> nn.Sequential:
    """Conv, ReLU, max and average pooling, dropout, a linear head; nested Sequentials."""
    torch.manual_seed(0)
    features = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.ReLU(),
        nn.AvgPool2d(2),
    )
    head = nn.Sequential(nn.Flatten(), nn.Dropout(0.1), nn.Linear(64, 10))
    return nn.Sequential(OrderedDict(features=features, head=head))


def digits() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """scikit-learn's bundled 8x8 digits (no download): train and test splits."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)
    y = torch.tensor(y)
    return tuple(train_test_split(x, y, test_size=0.25, random_state=0, stratify=y))  # type: ignore[return-value]


def trained() -> tuple[nn.Sequential, torch.Tensor, torch.Tensor]:
    x_train, x_test, y_train, y_test = digits()
    model = digits_cnn()
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    for _ in range(80):  # full-batch steps: about two seconds on one thread
        opt.zero_grad()
        nn.functional.cross_entropy(model(x_train), y_train).backward()
        opt.step()
    model.eval()
    return model, x_test, y_test


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Small convolutions: threads only contend (5x slower on two busy cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.usefixtures("one_thread")
def test_no_wrong_prediction_is_ever_certified(tmp_path: Path) -> None:
    model, x_test, y_test = trained()
    with torch.no_grad():
        reference = model(x_test).argmax(dim=1)  # the full-precision float32 model
    assert (reference == y_test).float().mean() > 0.9  # a real classifier
    repo = init_mgit_repo(tmp_path / "repo")
    commit_model(
        model.state_dict(), repo / "digits.safetensors", "digits", lineage=Lineage(find_repo(repo))
    )

    report = evaluate(digits_cnn, "digits.safetensors", x_test, batch_size=128, repo=repo)

    certified = report.planes_used > 0
    wrong = (report.predictions != reference) & certified
    assert int(wrong.sum()) == 0
    assert torch.equal(report.predictions, reference)
    assert sum(lv.certified for lv in report.levels) == len(x_test)
    one, two = report.fraction(1), report.fraction(2)
    print(f"\n{report.summary()}\ncertified from 1 plane: {one:.1%}, from 2 planes: {two:.1%}")
    assert two > 0  # the bounds are not vacuous


def test_what_cannot_be_certified_goes_to_full_precision(tmp_path: Path) -> None:
    """Two classes with the same weights tie on every input: Lemma 4 never holds for them;
    nor does it for inputs that are not finite."""
    torch.manual_seed(1)
    net = nn.Sequential(nn.Linear(4, 3))
    with torch.no_grad():
        net[0].weight[1] = net[0].weight[0]
        net[0].bias[:2] = 5.0  # they lead too
    repo = init_mgit_repo(tmp_path / "repo")
    commit_model(net.state_dict(), repo / "tie.safetensors", lineage=Lineage(find_repo(repo)))
    x = torch.randn(20, 4) * 0.1
    x[0, 0], x[1, 2] = float("inf"), float("nan")

    report = evaluate(nn.Sequential(nn.Linear(4, 3)), "tie.safetensors", x, repo=repo)

    with torch.no_grad():
        assert torch.equal(report.predictions, net(x).argmax(dim=1))
    last = report.levels[-1]
    assert last.planes is None and last.inputs == last.certified == int(
        (report.planes_used == 0).sum()
    )
    assert last.inputs > 0 and report.planes_used[0] == report.planes_used[1] == 0


def random_box(w: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The bounds that reading w's top k planes gives."""
    width, sign_at = codec.layout("F32", 4)
    words = w.detach().numpy().astype(np.float32).view(np.uint32)
    b = bounds("F32", words, known_bits(width, sign_at, k))
    return torch.from_numpy(b.low), torch.from_numpy(b.high)


@pytest.mark.parametrize("k", [2, 3, 4])
def test_bounds_hold_every_float32_forward_inside_them(k: int) -> None:
    """Weights anywhere in the boxes, evaluated in float32: the logits stay inside the bounds."""
    torch.manual_seed(k)
    net = nn.Sequential(
        nn.Conv1d(2, 6, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool1d(2),
        nn.Flatten(),
        nn.Linear(48, 300),
        nn.ReLU(),
        nn.Linear(300, 7),
    )
    x = torch.randn(64, 2, 16) * 1000  # large activations: float32 rounding is large too
    boxes = {n: random_box(p, k) for n, p in net.named_parameters()}
    low, high = interval_forward(list(layers(net)), boxes, x)
    gen = torch.Generator().manual_seed(1)
    for _ in range(5):
        with torch.no_grad():
            for name, p in net.named_parameters():
                lo, hi = boxes[name]
                t = torch.rand(p.shape, generator=gen, dtype=torch.float64)
                p.copy_((lo + (hi - lo) * t).float())  # rounding is monotone: stays inside
            y = net(x).double()
        assert torch.all((low <= y) & (y <= high))


def test_unsupported_layers_are_named() -> None:
    with pytest.raises(MgitError, match="Tanh"):
        list(layers(nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Tanh()))))
    with pytest.raises(MgitError, match="zero padding"):
        list(layers(nn.Sequential(nn.Conv2d(1, 1, 3, padding=1, padding_mode="reflect"))))
