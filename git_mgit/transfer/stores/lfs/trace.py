"""GIT_TRACE for the LFS client: one line per request or command, never a header or a secret.

git-lfs writes its trace where GIT_TRACE says (1, 2 or true: stderr; an
absolute path: that file). Callers pass only redacted URLs (policy.redact).
"""

from __future__ import annotations

import os
import sys
import threading
import time

_lock = threading.Lock()


def trace(message: str) -> None:
    target = os.environ.get("GIT_TRACE", "")
    if target.lower() in ("", "0", "false", "no", "off"):
        return
    stamp = time.strftime("%H:%M:%S")
    line = f"{stamp} trace git-mgit lfs: {message}\n"
    with _lock:
        if os.path.isabs(target):
            with open(target, "a", encoding="utf-8") as out:
                out.write(line)
        else:
            sys.stderr.write(line)
            sys.stderr.flush()
