"""git-mgit: model checkpoints as first-class git citizens."""

__version__ = "0.1.0"
