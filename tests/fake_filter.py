"""A storage-free filter handler, so the protocol layer can be tested against real git.

clean stores b"FAKE1\\n" + the file's bytes reversed; smudge undoes it.
Pathnames pick failures: "clean-error" / "clean-bug" fail clean after
reading part of the file, "smudge-error-early" fails before any output,
"smudge-error-late" after half of it. With --delay every smudge that may be
delayed is, and list_available releases one path per call so git has to ask
repeatedly. --log records every call, for the tests to assert on.

Usage: fake_filter.py [--delay] [--log PATH]     (filter.<driver>.process)
       fake_filter.py clean|smudge PATHNAME      (filter.<driver>.clean/smudge)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import BinaryIO

from git_mgit.errors import MgitError
from git_mgit.filters.process import (
    ContentSink,
    Delayed,
    run_clean_once,
    run_smudge_once,
    serve,
)

MARKER = b"FAKE1\n"
READ_CHUNK = (1 << 20) + 7  # odd, so reads end mid-packet
WRITE_PIECE = 100_003  # odd, so pieces straddle packets


class FakeHandler:
    def __init__(self, delay: bool = False, log: Path | None = None) -> None:
        self.delay = delay
        self.log_path = log
        self.pending: list[str] = []
        self.log("start")

    def log(self, line: str) -> None:
        if self.log_path is not None:
            with self.log_path.open("a") as f:
                f.write(line + "\n")

    def clean(self, pathname: str, src: BinaryIO) -> bytes:
        chunk = bytearray(READ_CHUNK)
        content = bytearray()
        while n := src.readinto(chunk):
            content += memoryview(chunk)[:n]
            if "clean-error" in pathname:
                raise MgitError(f"{pathname}: fake clean refuses this file")
            if "clean-bug" in pathname:
                raise RuntimeError("fake clean bug")
        self.log(f"clean {pathname} {len(content)}")
        return MARKER + bytes(content[::-1])

    def smudge(self, pathname: str, data: bytes, sink: ContentSink, can_delay: bool) -> None:
        self.log(f"smudge {pathname} can_delay={int(can_delay)} {len(data)}")
        if self.delay and can_delay:
            self.pending.append(pathname)
            raise Delayed(pathname)
        if not data.startswith(MARKER):
            raise MgitError(f"{pathname}: not a fake blob")
        if "smudge-error-early" in pathname:
            raise MgitError(f"{pathname}: fake smudge cannot start")
        out = memoryview(data[len(MARKER) :][::-1])
        limit = len(out) // 2 if "smudge-error-late" in pathname else len(out)
        for start in range(0, limit, WRITE_PIECE):
            sink.write(out[start : min(start + WRITE_PIECE, limit)])
        if "smudge-error-late" in pathname:
            raise MgitError(f"{pathname}: fake smudge failed halfway")

    def settle(self) -> None:
        pass  # nothing is written after its answer

    def list_available(self) -> list[str]:
        ready = self.pending[:1]
        del self.pending[:1]
        self.log(f"list_available {' '.join(ready)}")
        return ready


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--delay", action="store_true")
    parser.add_argument("--log", type=Path)
    parser.add_argument("once", nargs="*", help="clean|smudge PATHNAME for single-shot mode")
    args = parser.parse_args(argv)
    handler = FakeHandler(args.delay, args.log)
    if not args.once:
        return serve(handler)
    command, pathname = args.once
    run_once = run_clean_once if command == "clean" else run_smudge_once
    return run_once(handler, pathname, sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
