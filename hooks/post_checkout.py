"""post-checkout: same notes fold as post-merge (a clone's first checkout runs it)."""

from git_mgit.hooks.post_merge import run

__all__ = ["run"]
