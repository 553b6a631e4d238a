"""GIT_TRACE lines of the LFS client (transfer/trace.py), as git-lfs writes its own."""

from __future__ import annotations

from git_mgit.transfer.trace import tracer

trace = tracer("lfs")
