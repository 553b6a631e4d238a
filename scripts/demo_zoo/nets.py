"""The model zoo's architecture and data: a small MLP classifier on Gaussian blobs."""

import torch

FEATURES, HIDDEN, CLASSES = 16, 64, 4


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Linear(FEATURES, HIDDEN)
        self.head = torch.nn.Linear(HIDDEN, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.body(x)))


def task(seed: int, n: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
    """Points around one centre per class; each seed is a different task."""
    gen = torch.Generator().manual_seed(seed)
    centres = torch.randn(CLASSES, FEATURES, generator=gen) * 2
    labels = torch.randint(CLASSES, (n,), generator=gen)
    return centres[labels] + torch.randn(n, FEATURES, generator=gen), labels


def fit(
    model: MLP, seed: int, steps: int = 30, freeze: tuple[str, ...] = (), lr: float = 0.05
) -> MLP:
    x, y = task(seed)
    for name, p in model.named_parameters():
        p.requires_grad_(not name.startswith(freeze))
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return model
