"""A long-running filter process that does nothing: clean and smudge echo their input.

Checkout through it costs only what git itself spends on any filter process
(sending the blob, buffering the whole response, writing the file), so its
throughput is the ceiling a real filter can approach. It uses git-mgit's own
pkt-line code, so the comparison isolates what git-mgit's smudge adds.
Run by git as `python passthrough_filter.py` (filter.passthrough.process).
"""

from __future__ import annotations

import sys

from git_mgit.filters.pktline import PktReader, PktWriter

PART = 16 << 20


def _read_all(reader: PktReader) -> list[memoryview]:
    """The request's content in 16 MiB pieces: read once, never copied again."""
    content = reader.content()
    parts = []
    while True:
        buf = bytearray(PART)
        n = content.readinto(buf)
        if not n:
            return parts
        parts.append(memoryview(buf)[:n])


def main() -> int:
    reader = PktReader(sys.stdin.buffer)
    writer = PktWriter(sys.stdout.buffer)
    reader.read_text_list()  # git-filter-client, version=2
    writer.text("git-filter-server")
    writer.text("version=2")
    writer.flush()
    reader.read_text_list()  # capabilities git offers
    writer.text("capability=clean")
    writer.text("capability=smudge")
    writer.flush()
    while True:
        try:
            reader.read_text_list()  # command=..., pathname=...
        except EOFError:
            return 0
        # git sends all of the content before it reads any of the answer.
        parts = _read_all(reader)
        writer.text("status=success")
        writer.flush()
        for part in parts:
            writer.write_stream(part)
        writer.flush()  # end of content
        writer.flush()  # empty list: status stays success


if __name__ == "__main__":
    sys.exit(main())
