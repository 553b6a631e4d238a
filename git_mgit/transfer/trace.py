"""GIT_TRACE for git-mgit's transfers: one line per request or step, never a header or a secret.

git writes its trace where GIT_TRACE says (1, 2 or true: stderr; an absolute
path: that file), each line stamped to the microsecond; git-mgit's lines go to
the same place in the same form, so they interleave with git's own in time
order. Callers pass only redacted URLs (lfs/policy.redact).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from datetime import datetime

_lock = threading.Lock()


def tracer(component: str) -> Callable[[str], None]:
    """A trace function whose lines read `trace git-mgit <component>: <message>`."""

    def trace(message: str) -> None:
        target = os.environ.get("GIT_TRACE", "")
        if target.lower() in ("", "0", "false", "no", "off"):
            return
        stamp = datetime.now().strftime("%H:%M:%S.%f")
        line = f"{stamp} trace git-mgit {component}: {message}\n"
        with _lock:
            if os.path.isabs(target):
                with open(target, "a", encoding="utf-8") as out:
                    out.write(line)
            else:
                sys.stderr.write(line)
                sys.stderr.flush()

    return trace
