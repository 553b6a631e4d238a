"""Retries with exponential backoff, as git-lfs's transfer queue does them (tq/transfer_queue.go).

What is retried: 429, 5xx but 501/505/507/509, a connection that failed or dropped,
and a response body cut short. The n-th retry waits 0.25 s * 2**(n-1), at
most `lfs.transfer.maxretrydelay` seconds (default 10); a `Retry-After` the
server sends replaces that wait, and one longer than
`lfs.transfer.maxRetryTime` (default 300 s) fails at once. After
`lfs.transfer.maxretries` retries (default 8) the last reason is the error.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from git_mgit.transfer.stores.blobs import BlobStoreError
from git_mgit.transfer.stores.lfs.gitconfig import LfsConfig
from git_mgit.transfer.stores.lfs.trace import trace

T = TypeVar("T")
_BASE_DELAY_S = 0.25
# 5xx that no retry mends: not implemented, HTTP version, storage, bandwidth (git-lfs's list).
_PERMANENT_5XX = frozenset({501, 505, 507, 509})


class Transient(Exception):
    """A failure worth another try; `reason` is safe to show (no URL query, no header)."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 8
    max_delay_s: float = 10.0
    max_retry_after_s: float = 300.0

    @classmethod
    def from_config(cls, config: LfsConfig) -> RetryPolicy:
        return cls(
            max_retries=config.number("lfs.transfer.maxretries", 8, 1),
            max_delay_s=config.number("lfs.transfer.maxretrydelay", 10, 0),
            max_retry_after_s=config.number("lfs.transfer.maxretrytime", 300, 1),
        )

    def delay(self, retry: int, retry_after: float | None) -> float:
        """Seconds before retry number `retry` (1-based)."""
        if retry_after is not None:
            return retry_after
        return min(_BASE_DELAY_S * (1 << min(retry - 1, 30)), self.max_delay_s)

    def run(self, what: str, attempt: Callable[[], T]) -> T:
        """`attempt()`, again after each Transient failure while retries are left.

        `what` names the work in the final error ("downloading sha256:ab12 from ...").
        """
        retry = 0
        while True:
            try:
                return attempt()
            except Transient as exc:
                retry += 1
                if retry > self.max_retries:
                    raise BlobStoreError(
                        f"{what} failed after {self.max_retries} retries ({exc.reason}); "
                        "run the command again: what was sent is kept"
                    ) from None
                if exc.retry_after is not None and exc.retry_after > self.max_retry_after_s:
                    raise BlobStoreError(
                        f"{what}: the server asks to wait {exc.retry_after:.0f} s "
                        f"(lfs.transfer.maxRetryTime is {self.max_retry_after_s:.0f} s); "
                        "try again later"
                    ) from None
                wait = self.delay(retry, exc.retry_after)
                trace(f"{what}: {exc.reason}; retry {retry}/{self.max_retries} in {wait:.2f} s")
                time.sleep(wait)


def transient(status: int) -> bool:
    """Whether an HTTP status is worth another try."""
    return status == 429 or (500 <= status <= 599 and status not in _PERMANENT_5XX)


def retry_after(headers: Mapping[str, str]) -> float | None:
    """A Retry-After header in seconds (delta-seconds or an HTTP date); None if absent or bad."""
    value = headers.get("Retry-After")
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():  # str.isdigit alone takes "²", which float() does not
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError, OverflowError, OSError):  # a year no clock reaches
        return None
