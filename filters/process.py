"""git's long-running filter process protocol, version 2 (gitattributes(5)).

This layer only speaks the protocol; what clean and smudge do is the
handler's business, so the same server drives the real object store and the
tests' fake filter. It never dies mid-response: git would hang or lose the
file, so a failing request is answered with status=error and serving goes on.
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from typing import BinaryIO, Protocol

from git_mgit.errors import MgitError

from .pktline import Buffer, PktReader, PktWriter, ProtocolError

CAPABILITIES = ("clean", "smudge", "delay")


class Delayed(Exception):
    """Raised by handler.smudge when it cannot produce the content now and the request allows delay."""


class ContentSink(Protocol):
    """Where smudge writes the working-tree file, in as many pieces as it likes."""

    def write(self, data: Buffer) -> None: ...


class FilterHandler(Protocol):
    """What the server asks of the storage layer."""

    def clean(self, pathname: str, src: BinaryIO) -> bytes:
        """Read the file from src (src.readinto) and return the clean blob (small)."""
        ...

    def smudge(self, pathname: str, data: bytes, sink: ContentSink, can_delay: bool) -> None:
        """Write the working-tree file for clean blob `data` to sink; raise Delayed only if can_delay."""
        ...

    def settle(self) -> None:
        """Finish work on files already answered: git has written them by the time it asks
        which delayed blobs are available (called first at every such request)."""
        ...

    def list_available(self) -> list[str]:
        """Resolve delayed paths (may block, e.g. to fetch) and return those ready now.

        An empty list while paths are still delayed tells git they are missing.
        """
        ...


def _say(message: str) -> None:
    print("git-mgit: " + " ".join(message.split()), file=sys.stderr, flush=True)


def _report(exc: BaseException, action: str, pathname: str) -> None:
    """One line on stderr for git to show; a traceback too for bugs under GIT_MGIT_DEBUG=1."""
    if isinstance(exc, MgitError):
        _say(str(exc))
    else:
        _say(f"internal error while {action} {pathname}: {type(exc).__name__}: {exc}")
    if not isinstance(exc, MgitError) and os.environ.get("GIT_MGIT_DEBUG") == "1":
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)


class _ResponseSink:
    """Sends status=success only before the first content byte.

    Until then a failing handler can still answer a plain status=error.
    """

    def __init__(self, writer: PktWriter) -> None:
        self._writer = writer
        self.started = False

    def write(self, data: Buffer) -> None:
        if not self.started:
            self._writer.text("status=success")
            self._writer.flush()
            self.started = True
        self._writer.write_stream(data)


class _FileSink:
    """Smudge output for the single-shot filter: plain bytes on stdout."""

    def __init__(self, out: BinaryIO) -> None:
        self._out = out

    def write(self, data: Buffer) -> None:
        self._out.write(data)


class _Server:
    def __init__(self, handler: FilterHandler, reader: PktReader, writer: PktWriter) -> None:
        self._handler = handler
        self._reader = reader
        self._writer = writer
        self._capabilities: set[str] = set()
        # Clean blobs of delayed paths: git re-sends those requests with empty content.
        self._delayed: dict[str, bytes] = {}

    def handshake(self) -> None:
        hello = self._reader.read_text_list()
        if hello[:1] != ["git-filter-client"] or "version=2" not in hello[1:]:
            raise ProtocolError(f"expected git-filter-client offering version=2, got {hello!r}")
        self._writer.text("git-filter-server")
        self._writer.text("version=2")
        self._writer.flush()
        offered = {
            line.removeprefix("capability=")
            for line in self._reader.read_text_list()
            if line.startswith("capability=")
        }
        for capability in CAPABILITIES:
            if capability in offered:
                self._capabilities.add(capability)
                self._writer.text(f"capability={capability}")
        self._writer.flush()

    def serve_forever(self) -> None:
        """Answer requests until git closes our stdin."""
        while True:
            try:
                request = self._reader.read_text_list()
            except EOFError:
                return
            attrs = dict(line.partition("=")[::2] for line in request)
            command = attrs.get("command", "")
            pathname = attrs.get("pathname", "")
            if command == "clean":
                self._clean(pathname)
            elif command == "smudge":
                can_delay = attrs.get("can-delay") == "1" and "delay" in self._capabilities
                self._smudge(pathname, can_delay)
            elif command == "list_available_blobs":
                self._list_available()
            else:
                # Git sends only commands we negotiated; nothing says what an
                # unknown one carries, so assume, like list_available_blobs, no content.
                _say(f"unknown filter command {command!r} from git")
                self._status("error")

    def _status(self, status: str) -> None:
        self._writer.text(f"status={status}")
        self._writer.flush()

    def _clean(self, pathname: str) -> None:
        src = self._reader.content()
        failure: Exception | None = None
        try:
            # memoryview() here, so a handler returning no bytes fails before the response starts.
            out = memoryview(self._handler.clean(pathname, src))
        except ProtocolError:
            raise
        except Exception as exc:
            failure = exc
        # git expects the whole content to be read before any response.
        src.drain()
        if failure is not None:
            _report(failure, "cleaning", pathname)
            self._status("error")
            return
        self._status("success")
        self._writer.write_stream(out)
        self._writer.flush()  # end of content
        self._writer.flush()  # empty list: status stays success

    def _smudge(self, pathname: str, can_delay: bool) -> None:
        data = self._reader.content().read()
        if not can_delay and pathname in self._delayed:
            data = self._delayed.pop(pathname)
        sink = _ResponseSink(self._writer)
        try:
            self._handler.smudge(pathname, data, sink, can_delay)
        except Delayed as exc:
            if can_delay and not sink.started:
                self._delayed[pathname] = data
                self._status("delayed")
                return
            failure: Exception = RuntimeError(
                f"Delayed({exc}) raised without can-delay or after output started"
            )
        except Exception as exc:
            failure = exc
        else:
            if not sink.started:
                self._status("success")
            self._writer.flush()  # end of content
            self._writer.flush()  # empty list: status stays success
            return
        _report(failure, "smudging", pathname)
        if sink.started:
            self._writer.flush()  # end of the partial content, which git discards
        self._status("error")

    def _list_available(self) -> None:
        ready: list[str] = []
        try:
            self._handler.settle()
        except Exception as exc:  # reported; the delayed paths still get their answer
            _report(exc, "finishing files for", "this checkout")
        if self._delayed:
            try:
                ready = self._handler.list_available()
            except Exception as exc:
                _report(exc, "resolving delayed files for", ", ".join(sorted(self._delayed)))
                self._writer.flush()  # empty list
                self._status("error")
                return
        # Naming a path that was never delayed makes git fail the checkout.
        for pathname in dict.fromkeys(ready):
            if pathname in self._delayed:
                self._writer.text(f"pathname={pathname}")
        self._writer.flush()
        self._status("success")


def serve(
    handler: FilterHandler,
    infile: BinaryIO | int | None = None,
    outfile: BinaryIO | int | None = None,
) -> int:
    """Run the filter process on stdin/stdout (or the given streams) until git closes stdin.

    Returns the exit code: 0 at a clean end, 1 when git broke the protocol
    or went away mid-request.
    """
    reader = PktReader(sys.stdin.buffer if infile is None else infile)
    writer = PktWriter(sys.stdout.buffer if outfile is None else outfile)
    server = _Server(handler, reader, writer)
    # A stray print from the storage layer must not corrupt the protocol stream.
    with contextlib.redirect_stdout(sys.stderr):
        try:
            server.handshake()
            server.serve_forever()
        except (ProtocolError, EOFError) as exc:
            _say(f"filter protocol error: {exc}")
            return 1
        except BrokenPipeError:
            _say("git closed the filter pipe mid-response")
            return 1
    return 0


def run_clean_once(handler: FilterHandler, pathname: str, stdin: BinaryIO, stdout: BinaryIO) -> int:
    """Single-shot clean (filter.<driver>.clean): file on stdin, clean blob on stdout."""
    try:
        out = handler.clean(pathname, stdin)
    except Exception as exc:
        _report(exc, "cleaning", pathname)
        return 1
    stdout.write(out)
    stdout.flush()
    return 0


def run_smudge_once(
    handler: FilterHandler, pathname: str, stdin: BinaryIO, stdout: BinaryIO
) -> int:
    """Single-shot smudge (filter.<driver>.smudge): clean blob on stdin, file streamed to stdout.

    On failure the exit code tells git to discard whatever was written.
    """
    data = stdin.read()
    try:
        handler.smudge(pathname, data, _FileSink(stdout), False)
    except Exception as exc:
        _report(exc, "smudging", pathname)
        return 1
    stdout.flush()
    return 0
